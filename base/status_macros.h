// RETURN_IF_ERROR / ASSIGN_OR_RETURN for Abseil 20220623, which has no status_macros.h.
#ifndef PMRT_BASE_STATUS_MACROS_H_
#define PMRT_BASE_STATUS_MACROS_H_

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define PMRT_STATUS_CONCAT_INNER_(a, b) a##b
#define PMRT_STATUS_CONCAT_(a, b) PMRT_STATUS_CONCAT_INNER_(a, b)

// Returns the status of `expr` from the enclosing function if it is not OK.
#define RETURN_IF_ERROR(expr)                    \
  do {                                           \
    ::absl::Status pmrt_status_ = (expr);        \
    if (!pmrt_status_.ok()) return pmrt_status_; \
  } while (false)

// `ASSIGN_OR_RETURN(auto x, MakeX());` declares x from an OK StatusOr or returns its error.
#define ASSIGN_OR_RETURN(lhs, expr) \
  PMRT_ASSIGN_OR_RETURN_IMPL_(PMRT_STATUS_CONCAT_(pmrt_statusor_, __LINE__), lhs, expr)
#define PMRT_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                                \
  if (!tmp.ok()) return std::move(tmp).status();    \
  lhs = std::move(tmp).value()

#endif  // PMRT_BASE_STATUS_MACROS_H_
