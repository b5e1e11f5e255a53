// Shared test helpers: temporary pool paths and status matchers for Abseil 20220623, which has
// no status_matchers.h.
#ifndef PMRT_TESTS_UTIL_TEST_UTIL_H_
#define PMRT_TESTS_UTIL_TEST_UTIL_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

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

// The whole content of a file; nullopt if it cannot be read (missing, a directory, ...).
std::optional<std::string> ReadFile(const std::string& path);
// Writes `data` at `offset` of an existing file (which grows if needed). Aborts on failure.
void WriteFileAt(const std::string& path, uint64_t offset, const std::string& data);
// Names in a directory, sorted, without "." and "..".
std::vector<std::string> ListDir(const std::string& dir);

// Sets (or with nullopt, unsets) an environment variable for the object's lifetime.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, std::optional<std::string> value);
  ~ScopedEnv();
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  std::string name_;
  std::optional<std::string> old_;
};

// The xorshift step the seeded workloads and schedules draw from: advances `s`, returns it.
inline uint64_t Next(uint64_t& s) {
  s ^= s << 13;
  s ^= s >> 7;
  s ^= s << 17;
  return s;
}

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
