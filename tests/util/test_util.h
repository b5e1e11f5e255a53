// Shared test helpers: temporary pool paths and status matchers for Abseil 20220623, which has
// no status_matchers.h.
#ifndef PMRT_TESTS_UTIL_TEST_UTIL_H_
#define PMRT_TESTS_UTIL_TEST_UTIL_H_

#include <cstdint>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "base/random.h"
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
inline uint64_t Next(uint64_t& s) { return XorShift64::Step(s); }

// The unsigned number in environment variable `name` (a case count, an image budget, a seed),
// or `fallback` when it is unset or empty.
inline uint64_t EnvOr(const char* name, uint64_t fallback) {
  const char* v = std::getenv(name);
  return v == nullptr || *v == '\0' ? fallback : std::strtoull(v, nullptr, 10);
}

// splitmix64, the generator of the fuzz tests: any seed (0 included) gives a full-period
// stream, so PMRT_*_SEED plus a case number names one case.
struct SplitMix {
  explicit SplitMix(uint64_t seed) : s(seed * 0x9E3779B97F4A7C15ull + 1) {}
  uint64_t Next() {
    const uint64_t z = s;
    s += 0x9E3779B97F4A7C15ull;
    return SplitMix64(z);
  }
  uint64_t Below(uint64_t n) { return n == 0 ? 0 : Next() % n; }
  bool Chance(int percent) { return Below(100) < static_cast<uint64_t>(percent); }
  uint64_t s;
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
