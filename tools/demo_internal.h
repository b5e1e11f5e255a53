// Pieces shared by the stages of `pmrt demo` (tools/demo.cc, tools/demo_crash.cc): the options,
// the keys and values every stage uses, the random and Zipfian generators of the YCSB stage,
// and the progress line. Only tools/demo*.cc include this.
#ifndef PMRT_TOOLS_DEMO_INTERNAL_H_
#define PMRT_TOOLS_DEMO_INTERNAL_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "ds/masstree.h"
#include "epoch/persist.h"
#include "runtime/runtime.h"
#include "tools/workload_gen.h"

namespace pmrt::tools::demo_internal {

using Clock = std::chrono::steady_clock;

inline constexpr int kMaxThreads = 16;

struct DemoOptions {
  std::string pool = "/dev/shm/pmrt-demo.pool";
  uint64_t keys = 1000000;   // keys loaded into each tree
  double seconds = 3;        // YCSB A, per variant
  int threads = 2;           // loaders, YCSB threads, writers of the crashing child
  double crash_after = 1.5;  // the child's run time before SIGKILL
  // Every open of the pool uses this backend (unset: the pool's own choice); see ChooseBackend.
  std::optional<BackendKind> backend;
  std::string backend_note;  // why, for the header
};

// Milliseconds between two instants, and from `start` to now.
inline double Ms(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}
inline double MsSince(Clock::time_point start) { return Ms(start, Clock::now()); }

// ---- keys and values ------------------------------------------------------------------------

using bench::Scramble;

// The key of item i: 8 bytes, big-endian, of Scramble(i).
inline ds::U64Key KeyOf(uint64_t item) { return ds::U64Key(Scramble(item)); }

// An 8-byte value naming its item and a version: version << 32 | TagOf(item). A value found under
// another item's key, or torn, fails the tag check; the version orders one key's writes.
inline uint32_t TagOf(uint64_t item) {
  return static_cast<uint32_t>(Scramble(item ^ 0x5DEECE66Dull) >> 32);
}
inline uint64_t ValueOf(uint64_t item, uint32_t version) {
  return uint64_t{version} << 32 | TagOf(item);
}
inline uint32_t VersionOf(uint64_t value) { return static_cast<uint32_t>(value >> 32); }
inline bool TagMatches(uint64_t item, uint64_t value) {
  return static_cast<uint32_t>(value) == TagOf(item);
}

// ---- generators -----------------------------------------------------------------------------

// splitmix64: a fast generator whose stream is fixed by its seed.
struct Rng {
  uint64_t state;
  uint64_t Next() { return Scramble(state++); }
  // Uniform in [0, 1).
  double Uniform() { return static_cast<double>(Next() >> 11) * 0x1.0p-53; }
};

using bench::ScrambledZipfian;

// ---- progress line --------------------------------------------------------------------------

// Shows a counter's progress towards `total` while it runs, on stdout: rewritten in place every
// 100 ms ("\r") when stdout is a terminal, a plain line every second otherwise. Finish() (or
// the destructor) stops it and, on a terminal, clears the line for the caller's summary.
class ProgressLine {
 public:
  ProgressLine(std::string label, uint64_t total, const std::atomic<uint64_t>& done);
  ~ProgressLine() { Finish(); }
  ProgressLine(const ProgressLine&) = delete;
  ProgressLine& operator=(const ProgressLine&) = delete;
  void Finish();

 private:
  void Loop();
  void Print();

  const std::string label_;
  const uint64_t total_;
  const std::atomic<uint64_t>& done_;
  const bool tty_;
  const Clock::time_point start_ = Clock::now();
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

// ---- stages ---------------------------------------------------------------------------------

// The crash stage (tools/demo_crash.cc): on the loaded pool at o.pool (cleanly closed, every
// key at version 0), a child process writes until SIGKILLed; the pool is reopened and every
// key checked. OK when every check passed; otherwise the first failure, after printing the
// counts.
absl::Status CrashAndRecover(const DemoOptions& o);

// The demo's pool: a pmrt::Runtime whose index "demo" is the durable Masstree the demo loads,
// writes and verifies (epoch scope: the demo's writes are not in transactions).
struct DemoStore {
  std::unique_ptr<Runtime> rt;
  Index* index = nullptr;

  static absl::StatusOr<DemoStore> Open(const std::string& path, const RuntimeOptions& options) {
    DemoStore s;
    auto rt = Runtime::Open(path, options);
    if (!rt.ok()) return rt.status();
    s.rt = std::move(*rt);
    auto index = s.rt->index("demo");
    if (!index.ok()) return index.status();
    s.index = *index;
    return s;
  }
  ds::DurableMasstree& tree() const { return index->tree(); }
  epoch::Manager& epochs() const { return rt->epochs(); }
  alloc::Heap& heap() const { return rt->heap(); }
  Pool& pool() const { return rt->pool(); }
  absl::Status Close() { return rt->Close(); }
};

}  // namespace pmrt::tools::demo_internal

#endif  // PMRT_TOOLS_DEMO_INTERNAL_H_
