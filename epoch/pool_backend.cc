// The persistence choices of a pool: the backend its persister uses (PoolOptions::backend, else
// PMRT_BACKEND, else pmem when the mapping is persistent memory, msync for other files, eADR for
// caller memory) and how the pmem backend writes records (PoolOptions::record_writes, else
// PMRT_RECORD_WRITES, else the processor's faster way). Every create and open checks both before
// it touches anything (CheckPersistenceOptions), and chooses once the pool is mapped
// (Pool::ChooseBackend). A private mapping persists nothing: its persister is eADR (stores only),
// and writing_backend() keeps what a writing open would choose.
#include <libpmem.h>

#include <cstdlib>
#include <optional>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "epoch/internal/pool_internal.h"
#include "epoch/pool.h"

namespace pmrt {
namespace epoch_internal {

absl::StatusOr<std::optional<BackendKind>> RequestedBackend(const PoolOptions& o, bool in_memory,
                                                            std::string_view name) {
  std::optional<BackendKind> kind = o.backend;
  const char* env = std::getenv("PMRT_BACKEND");
  if (!kind && !in_memory && env != nullptr && *env != '\0') {
    auto parsed = ParseBackend(env);
    if (!parsed.ok()) {
      return InvalidArgument(name, absl::StrCat("PMRT_BACKEND: ", parsed.status().message()));
    }
    kind = *parsed;
  }
  if (kind == BackendKind::kSim) {
    if (!in_memory) {
      return InvalidArgument(name, "the sim backend is only for in-memory pools");
    }
    if (o.sim == nullptr) return InvalidArgument(name, "the sim backend needs PoolOptions::sim");
  }
  return kind;
}

absl::StatusOr<RecordWrites> RequestedRecordWrites(const PoolOptions& o, std::string_view name) {
  if (o.record_writes) return *o.record_writes;
  const char* env = std::getenv("PMRT_RECORD_WRITES");
  if (env == nullptr || *env == '\0') return DefaultRecordWrites();
  auto parsed = ParseRecordWrites(env);
  if (!parsed.ok()) {
    return InvalidArgument(name, absl::StrCat("PMRT_RECORD_WRITES: ", parsed.status().message()));
  }
  return *parsed;
}

absl::Status CheckPersistenceOptions(const PoolOptions& o, bool in_memory, std::string_view name,
                                     bool opening_file) {
  if (o.private_mapping && !opening_file) {
    return InvalidArgument(name, "private_mapping applies to opening a pool file only");
  }
  RETURN_IF_ERROR(RequestedBackend(o, in_memory, name).status());
  return RequestedRecordWrites(o, name).status();
}

}  // namespace epoch_internal

using epoch_internal::InvalidArgument;
using epoch_internal::RequestedBackend;
using epoch_internal::RequestedRecordWrites;

absl::Status Pool::ChooseBackend(const PoolOptions& options) {
  const bool in_memory = fd_ < 0;
  ASSIGN_OR_RETURN(std::optional<BackendKind> kind, RequestedBackend(options, in_memory, path_));
  if (!kind) {
    // In-memory pools have nothing to msync; caller memory is treated as in the persistence
    // domain unless the caller says otherwise.
    if (in_memory) {
      kind = BackendKind::kEadr;
    } else {
      kind = pmem_is_pmem(base_, size()) ? BackendKind::kPmem : BackendKind::kMsync;
    }
  }
  writing_backend_ = *kind;
  if (private_) kind = BackendKind::kEadr;  // nothing reaches the file: stores only
  if (*kind == BackendKind::kSim) {
    const auto w = reinterpret_cast<uintptr_t>(options.sim->working());
    const auto b = reinterpret_cast<uintptr_t>(base_);
    if (b < w || capacity_ > options.sim->size() || b - w > options.sim->size() - capacity_) {
      return InvalidArgument(path_, "the pool's memory is not inside the simulator's working copy");
    }
  }
  ASSIGN_OR_RETURN(const RecordWrites writes, RequestedRecordWrites(options, path_));
  persister_ = Persister(*kind, *kind == BackendKind::kSim ? options.sim : nullptr, writes);
  health_->Bind(path_, base_);
  persister_.set_health(health_.get());
  return absl::OkStatus();
}

}  // namespace pmrt
