// Shared parts of pmrt-allocbench (bench/allocbench.cc): the options, a one-line JSON writer,
// timing helpers and the restart measurement (bench/allocbench_restart.cc).
#ifndef PMRT_BENCH_ALLOCBENCH_H_
#define PMRT_BENCH_ALLOCBENCH_H_

#include <time.h>

#include <chrono>
#include <cstdint>
#include <string>

#include "epoch/persist.h"

namespace pmrt::allocbench {

struct Options {
  std::string allocator = "pmrt";   // pmrt | pmdk | malloc
  std::string test = "threadtest";  // threadtest | shbench | larson | prodcon | restart
  int threads = 1;
  double seconds = 2.0;  // timed run length, used when ops == 0
  uint64_t ops = 0;      // when nonzero: run until this many allocator calls (all threads)
  bool json = false;
  std::string pool;  // pool file (restart: prefix); empty: in /dev/shm, see PoolPath
  bool keep_pool = false;
  bool teardown = false;  // pmrt: close the heap, manager and pool at the end (see main)
  BackendKind backend = BackendKind::kPmem;
  // Pool file size; 0: 1 GiB for the throughput tests, 2 GiB for restart.
  uint64_t pool_size = 0;
  // Workload shape (defaults are the classic parameters, see allocbench.cc).
  int batch = 10000;  // threadtest: objects allocated, then freed, per iteration
  int slots = 1000;   // shbench / larson: live objects per array
  int round = 10000;  // larson: replacements per thread between array hand-overs
  uint64_t seed = 42;
  int pmrt_guard_batch = 0;
  bool pmrt_shared_free = false;  // --pmrt-free shared: Heap::Free (grace for every block)
  // --pmrt-sync-every N: the equal-durability mode (shared frees, and every Nth call of a thread
  // ends with a Sync, as every PMDK call is durable when it returns); 0: epoch durability.
  int pmrt_sync_every = 0;
  int epoch_ms = 64;  // pmrt: epoch::ManagerOptions::interval (64 ms is the default)  //
                      // experiment: hold one epoch::Guard across this many calls
  // restart only
  uint64_t objects = 4000000;  // live 64-byte objects in the full pool
  int repeat = 5;              // reopen each pool this many times; the median is reported
};

// Collects "key": value pairs and prints them as one JSON object on one line.
class JsonLine {
 public:
  JsonLine& Add(const std::string& key, const std::string& value);
  JsonLine& Add(const std::string& key, const char* value) { return Add(key, std::string(value)); }
  JsonLine& Add(const std::string& key, double value);
  JsonLine& Add(const std::string& key, uint64_t value);
  JsonLine& Add(const std::string& key, int value) { return Add(key, uint64_t(value)); }
  JsonLine& AddBool(const std::string& key, bool value);
  std::string str() const { return "{" + body_ + "}"; }

 private:
  void Key(const std::string& key);
  std::string body_;
};

inline double NowSeconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

inline double ThreadCpuSeconds() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

// The pool file of this run: the --pool path (restart: the --pool path + `suffix`, one file
// per case), or /dev/shm/pmrt-allocbench-<pid><suffix>.
std::string PoolPath(const Options& o, const std::string& suffix);

// `--test restart`: open time of a full and an empty pool, after a clean close and after a
// SIGKILL. Prints one line (and one JSON object) per case. Returns the exit status.
int RunRestart(const Options& o);

}  // namespace pmrt::allocbench

#endif  // PMRT_BENCH_ALLOCBENCH_H_
