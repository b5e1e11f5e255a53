// Shared test helpers: temporary pool paths and status matchers for Abseil 20220623, which has
// no status_matchers.h.
#ifndef PMRT_TESTS_UTIL_TEST_UTIL_H_
#define PMRT_TESTS_UTIL_TEST_UTIL_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pmrt::testing {

// A fresh directory under /dev/shm (or $TMPDIR), removed with its contents on destruction.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  const std::string& path() const { return path_; }
  std::string File(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

inline const absl::Status& GetStatus(const absl::Status& s) { return s; }
template <class T>
const absl::Status& GetStatus(const absl::StatusOr<T>& s) {
  return s.status();
}

MATCHER(IsOk, "is OK") {
  const absl::Status& s = GetStatus(arg);
  if (!s.ok()) *result_listener << s.ToString();
  return s.ok();
}

// StatusIs(code, substring): the status has `code` and its message contains `substring`.
MATCHER_P2(StatusIs, code, substring, "") {
  const absl::Status& s = GetStatus(arg);
  *result_listener << "status is " << s.ToString();
  return s.code() == code && s.message().find(substring) != absl::string_view::npos;
}

}  // namespace pmrt::testing

#define ASSERT_OK(expr) ASSERT_THAT((expr), ::pmrt::testing::IsOk())
#define EXPECT_OK(expr) EXPECT_THAT((expr), ::pmrt::testing::IsOk())

#endif  // PMRT_TESTS_UTIL_TEST_UTIL_H_
