// pmrt-allocbench --test restart: how long a program waits at open before it can allocate.
//
// For a pool holding --objects (4 M) live 64-byte objects and for an empty pool of the same size
// (--pool-size, 2 GiB by default for this test), each on /dev/shm:
//   clean   create, fill, close cleanly; then reopen --repeat times.
//   crash   a forked child creates and fills the pool (later rounds: reopens it), makes it
//           durable (Sync), signals the parent and keeps allocating and freeing 64-byte blocks
//           until the parent SIGKILLs it ~150 ms later, in the middle of an epoch; the parent
//           then reopens it. --repeat rounds.
// Timed: pmrt: Pool::Open, epoch::Manager::Open (records the failed epoch, replays the external
// log), alloc::Heap::Open (reads one line per chunk), and the first Allocate(64) after them;
// pmdk: pmemobj_open and the first pmemobj_alloc (PMDK rebuilds its heap lazily, at first use).
// Not timed: Heap::Check() and the live block count (Stats), which every reopen verifies.
// The medians are reported, one line (and one JSON object) per case.
#include <libpmemobj.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "alloc/allocator.h"
#include "bench/allocbench.h"
#include "epoch/epoch.h"
#include "epoch/pool.h"

namespace pmrt::allocbench {
namespace {

constexpr char kLayout[] = "pmrt-allocbench";
constexpr size_t kObjectSize = 64;
constexpr auto kChurnBeforeKill = std::chrono::milliseconds(150);

struct OpenTiming {
  double open_ms = 0;         // everything before the first allocation
  double pool_ms = 0;         // pmrt: Pool::Open; pmdk: pmemobj_open
  double epochs_ms = 0;       // pmrt: Manager::Open
  double heap_ms = 0;         // pmrt: Heap::Open
  double first_alloc_ms = 0;  // the first allocation after open
  uint64_t live_blocks = 0;   // pmrt: Stats().live_blocks after the open (not timed)
  bool clean = true;          // the pool was closed cleanly before this open
};

double Ms(double t0, double t1) { return (t1 - t0) * 1e3; }

// One persistent heap under test: create (and fill) a pool, reopen it with timings, or play the
// crashing child.
class Target {
 public:
  virtual ~Target() = default;
  // Creates the pool at `path`, allocates `objects` live blocks, closes it cleanly. Returns the
  // fill rate in allocations per second.
  virtual absl::StatusOr<double> CreateFilled(const std::string& path, uint64_t objects) = 0;
  virtual absl::StatusOr<OpenTiming> Reopen(const std::string& path) = 0;
  // In a forked child: create and fill (or open) the pool, make it durable, write one byte to
  // `ready_fd`, then allocate and free until killed. Never returns.
  [[noreturn]] virtual void Child(const std::string& path, bool create, uint64_t objects,
                                  int ready_fd) = 0;
};

[[noreturn]] void ChildFail(const std::string& what) {
  std::fprintf(stderr, "pmrt-allocbench restart child: %s\n", what.c_str());
  std::_Exit(3);
}

void SignalReady(int fd) {
  const char c = 'r';
  if (write(fd, &c, 1) != 1) ChildFail("cannot signal the parent");
}

// ---- pmrt -------------------------------------------------------------------------------------

class PmrtTarget final : public Target {
 public:
  PmrtTarget(BackendKind backend, uint64_t pool_size) : backend_(backend), size_(pool_size) {}

  struct Opened {
    std::unique_ptr<Pool> pool;
    std::unique_ptr<epoch::Manager> epochs;
    std::unique_ptr<alloc::Heap> heap;
    void Close() {
      heap.reset();
      epochs.reset();
      if (pool != nullptr) (void)pool->Close();
      pool.reset();
    }
  };

  absl::StatusOr<Opened> OpenAll(const std::string& path, bool create, OpenTiming* t) {
    PoolOptions po;
    po.backend = backend_;
    Opened o;
    const double t0 = NowSeconds();
    auto pool = create ? Pool::Create(path, size_, kLayout, po) : Pool::Open(path, kLayout, po);
    if (!pool.ok()) return pool.status();
    o.pool = std::move(*pool);
    const double t1 = NowSeconds();
    auto epochs = epoch::Manager::Open(*o.pool, {});
    if (!epochs.ok()) return epochs.status();
    o.epochs = std::move(*epochs);
    const double t2 = NowSeconds();
    auto heap = alloc::Heap::Open(*o.pool, *o.epochs);
    if (!heap.ok()) return heap.status();
    o.heap = std::move(*heap);
    const double t3 = NowSeconds();
    if (t != nullptr) {
      t->clean = o.pool->was_clean_shutdown();
      t->pool_ms = Ms(t0, t1);
      t->epochs_ms = Ms(t1, t2);
      t->heap_ms = Ms(t2, t3);
      t->open_ms = Ms(t0, t3);
    }
    return o;
  }

  static absl::Status Fill(alloc::Heap& heap, uint64_t objects) {
    for (uint64_t i = 0; i < objects; ++i) {
      void* p = heap.Allocate(kObjectSize);
      if (p == nullptr) {
        return absl::ResourceExhaustedError(absl::StrCat(
            "fill: allocation ", i, " failed: ", alloc::AllocErrorName(alloc::Heap::LastError())));
      }
      *static_cast<uint64_t*>(p) = i;
    }
    return absl::OkStatus();
  }

  absl::StatusOr<double> CreateFilled(const std::string& path, uint64_t objects) override {
    auto o = OpenAll(path, /*create=*/true, nullptr);
    if (!o.ok()) return o.status();
    const double t0 = NowSeconds();
    if (auto st = Fill(*o->heap, objects); !st.ok()) return st;
    const double secs = NowSeconds() - t0;
    if (auto st = o->epochs->Sync(); !st.ok()) return st;
    o->Close();
    return objects == 0 ? 0.0 : static_cast<double>(objects) / secs;
  }

  absl::StatusOr<OpenTiming> Reopen(const std::string& path) override {
    OpenTiming t;
    auto o = OpenAll(path, /*create=*/false, &t);
    if (!o.ok()) return o.status();
    {
      // Allocate and undo in one epoch: FreeUnpublished leaves no retired batch behind (see
      // allocbench.cc main on the teardown race).
      epoch::Guard g(*o->epochs);
      const double t0 = NowSeconds();
      void* p = o->heap->Allocate(kObjectSize);
      t.first_alloc_ms = Ms(t0, NowSeconds());
      if (p == nullptr) return absl::ResourceExhaustedError("first allocation after open failed");
      if (auto st = o->heap->FreeUnpublished(p); !st.ok()) return st;
    }
    if (auto st = o->heap->Check(); !st.ok()) return st;
    t.live_blocks = o->heap->Stats().live_blocks;
    o->Close();
    return t;
  }

  [[noreturn]] void Child(const std::string& path, bool create, uint64_t objects,
                          int ready_fd) override {
    auto o = OpenAll(path, create, nullptr);
    if (!o.ok()) ChildFail(o.status().ToString());
    if (create) {
      if (auto st = Fill(*o->heap, objects); !st.ok()) ChildFail(st.ToString());
    }
    if (auto st = o->epochs->Sync(); !st.ok()) ChildFail(st.ToString());
    SignalReady(ready_fd);
    std::vector<void*> batch(1000);
    for (uint64_t n = 0;; ++n) {  // until SIGKILL
      for (auto& p : batch) {
        p = o->heap->Allocate(kObjectSize);
        if (p == nullptr) ChildFail("churn allocation failed");
        *static_cast<uint64_t*>(p) = n;
      }
      for (void* p : batch) (void)o->heap->Free(p);
    }
  }

 private:
  BackendKind backend_;
  uint64_t size_;
};

// ---- pmdk -------------------------------------------------------------------------------------

class PmdkTarget final : public Target {
 public:
  explicit PmdkTarget(uint64_t pool_size) : size_(pool_size) {}

  static absl::Status Fill(PMEMobjpool* pop, uint64_t objects) {
    for (uint64_t i = 0; i < objects; ++i) {
      PMEMoid oid;  // volatile: the blocks stay allocated (live) after close
      if (pmemobj_alloc(pop, &oid, kObjectSize, 0, nullptr, nullptr) != 0) {
        return absl::ResourceExhaustedError(
            absl::StrCat("fill: pmemobj_alloc ", i, " failed: ", pmemobj_errormsg()));
      }
      *static_cast<uint64_t*>(pmemobj_direct(oid)) = i;
    }
    return absl::OkStatus();
  }

  absl::StatusOr<double> CreateFilled(const std::string& path, uint64_t objects) override {
    PMEMobjpool* pop = pmemobj_create(path.c_str(), kLayout, size_, 0600);
    if (pop == nullptr)
      return absl::InternalError(path + ": pmemobj_create: " + pmemobj_errormsg());
    const double t0 = NowSeconds();
    const absl::Status st = Fill(pop, objects);
    const double secs = NowSeconds() - t0;
    pmemobj_close(pop);
    if (!st.ok()) return st;
    return objects == 0 ? 0.0 : static_cast<double>(objects) / secs;
  }

  absl::StatusOr<OpenTiming> Reopen(const std::string& path) override {
    OpenTiming t;
    const double t0 = NowSeconds();
    PMEMobjpool* pop = pmemobj_open(path.c_str(), kLayout);
    const double t1 = NowSeconds();
    if (pop == nullptr) return absl::InternalError(path + ": pmemobj_open: " + pmemobj_errormsg());
    PMEMoid oid;
    const int rc = pmemobj_alloc(pop, &oid, kObjectSize, 0, nullptr, nullptr);
    const double t2 = NowSeconds();
    if (rc != 0) {
      pmemobj_close(pop);
      return absl::ResourceExhaustedError("first pmemobj_alloc after open failed");
    }
    pmemobj_free(&oid);
    t.pool_ms = t.open_ms = Ms(t0, t1);
    t.first_alloc_ms = Ms(t1, t2);
    for (PMEMoid o = POBJ_FIRST_TYPE_NUM(pop, 0); !OID_IS_NULL(o); o = POBJ_NEXT_TYPE_NUM(o)) {
      ++t.live_blocks;  // not timed
    }
    pmemobj_close(pop);
    return t;
  }

  [[noreturn]] void Child(const std::string& path, bool create, uint64_t objects,
                          int ready_fd) override {
    PMEMobjpool* pop = create ? pmemobj_create(path.c_str(), kLayout, size_, 0600)
                              : pmemobj_open(path.c_str(), kLayout);
    if (pop == nullptr) ChildFail(path + ": " + pmemobj_errormsg());
    if (create) {
      if (auto st = Fill(pop, objects); !st.ok()) ChildFail(st.ToString());
    }
    SignalReady(ready_fd);  // every pmemobj_alloc is durable when it returns
    std::vector<PMEMoid> batch(1000);
    for (;;) {  // until SIGKILL
      for (auto& oid : batch) {
        if (pmemobj_alloc(pop, &oid, kObjectSize, 0, nullptr, nullptr) != 0) {
          ChildFail("churn allocation failed");
        }
      }
      for (auto& oid : batch) pmemobj_free(&oid);
    }
  }

 private:
  uint64_t size_;
};

// ---- the cases --------------------------------------------------------------------------------

// Runs the crashing child against `path` and waits for the kill. OK once the child is dead.
absl::Status CrashChild(Target& target, const std::string& path, bool create, uint64_t objects) {
  int fds[2];
  if (pipe(fds) != 0) return absl::InternalError("pipe failed");
  std::fflush(stdout);
  std::fflush(stderr);
  const pid_t pid = fork();
  if (pid < 0) return absl::InternalError("fork failed");
  if (pid == 0) {
    close(fds[0]);
    target.Child(path, create, objects, fds[1]);
  }
  close(fds[1]);
  char c;
  const ssize_t n = read(fds[0], &c, 1);
  close(fds[0]);
  if (n == 1) std::this_thread::sleep_for(kChurnBeforeKill);
  kill(pid, SIGKILL);
  int status = 0;
  waitpid(pid, &status, 0);
  if (n != 1) return absl::InternalError("the crash child failed before it was ready");
  return absl::OkStatus();
}

template <class T, class F>
T Median(std::vector<OpenTiming>& v, F field) {
  std::vector<T> x;
  for (const auto& t : v) x.push_back(field(t));
  std::sort(x.begin(), x.end());
  return x[x.size() / 2];
}

void Report(const Options& o, const std::string& name, uint64_t objects, uint64_t pool_size,
            double fill_rate, std::vector<OpenTiming>& runs) {
  const double open = Median<double>(runs, [](const OpenTiming& t) { return t.open_ms; });
  const double first = Median<double>(runs, [](const OpenTiming& t) { return t.first_alloc_ms; });
  double lo = 1e300, hi = 0;
  for (const auto& t : runs) {
    lo = std::min(lo, t.open_ms);
    hi = std::max(hi, t.open_ms);
  }
  JsonLine j;
  j.Add("allocator", o.allocator)
      .Add("test", "restart")
      .Add("case", name)
      .Add("threads", 1)
      .Add("objects", objects)
      .Add("pool_bytes", pool_size)
      .Add("repeat", uint64_t{runs.size()})
      .Add("open_ms", open)
      .Add("open_ms_min", lo)
      .Add("open_ms_max", hi)
      .Add("pool_open_ms", Median<double>(runs, [](const OpenTiming& t) { return t.pool_ms; }))
      .Add("epochs_open_ms", Median<double>(runs, [](const OpenTiming& t) { return t.epochs_ms; }))
      .Add("heap_open_ms", Median<double>(runs, [](const OpenTiming& t) { return t.heap_ms; }))
      .Add("first_alloc_ms", first)
      .Add("open_plus_first_alloc_ms", open + first)
      .Add("live_blocks", runs.back().live_blocks)
      .AddBool("was_clean", runs.back().clean)
      .Add("ops_per_sec", fill_rate);  // the fill's allocations per second (0: not filled)
  absl::PrintF(
      "allocbench allocator=%s test=restart case=%s objects=%d pool=%dMiB open=%.2fms "
      "(min %.2f max %.2f; pool %.2f epochs %.2f heap %.2f) first_alloc=%.2fms live=%d "
      "clean=%d\n",
      o.allocator, name, objects, pool_size >> 20, open, lo, hi,
      Median<double>(runs, [](const OpenTiming& t) { return t.pool_ms; }),
      Median<double>(runs, [](const OpenTiming& t) { return t.epochs_ms; }),
      Median<double>(runs, [](const OpenTiming& t) { return t.heap_ms; }), first,
      runs.back().live_blocks, runs.back().clean ? 1 : 0);
  if (o.json) std::printf("%s\n", j.str().c_str());
  std::fflush(stdout);
}

absl::Status RunCase(const Options& o, Target& target, uint64_t pool_size, bool full) {
  const uint64_t objects = full ? o.objects : 0;
  const std::string path =
      PoolPath(o, absl::StrCat(".restart-", full ? "full." : "empty.", o.allocator));
  unlink(path.c_str());
  // Clean close, then reopen.
  auto rate = target.CreateFilled(path, objects);
  if (!rate.ok()) return rate.status();
  std::vector<OpenTiming> runs;
  for (int i = 0; i < o.repeat; ++i) {
    auto t = target.Reopen(path);
    if (!t.ok()) return t.status();
    runs.push_back(*t);
  }
  Report(o, full ? "full-clean" : "empty-clean", objects, pool_size, *rate, runs);
  unlink(path.c_str());
  // Crash: round 0 creates and fills in the child; later rounds reopen and crash again.
  runs.clear();
  for (int i = 0; i < o.repeat; ++i) {
    if (auto st = CrashChild(target, path, /*create=*/i == 0, objects); !st.ok()) return st;
    auto t = target.Reopen(path);
    if (!t.ok()) return t.status();
    if (t->clean && o.allocator == "pmrt") {
      return absl::InternalError("the pool was marked clean after a SIGKILL");
    }
    runs.push_back(*t);
  }
  Report(o, full ? "full-crash" : "empty-crash", objects, pool_size, 0.0, runs);
  if (!o.keep_pool) unlink(path.c_str());
  return absl::OkStatus();
}

}  // namespace

int RunRestart(const Options& o) {
  const uint64_t pool_size = o.pool_size;
  std::unique_ptr<Target> target;
  if (o.allocator == "pmdk") {
    target = std::make_unique<PmdkTarget>(pool_size);
  } else {
    target = std::make_unique<PmrtTarget>(o.backend, pool_size);
  }
  for (bool full : {true, false}) {
    if (auto st = RunCase(o, *target, pool_size, full); !st.ok()) {
      std::fprintf(stderr, "pmrt-allocbench: restart: %s\n", st.ToString().c_str());
      return 1;
    }
  }
  return 0;
}

}  // namespace pmrt::allocbench
