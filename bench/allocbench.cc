// pmrt-allocbench: the classic allocator benchmarks on pmrt's persistent heap, PMDK's
// libpmemobj allocator and glibc malloc, with the same workload code for all three
// (docs/performance.md, "Allocator"; bench/allocbench.sh runs the whole comparison).
//
//   pmrt-allocbench --allocator pmrt|pmdk|malloc --test threadtest|shbench|larson|prodcon
//                   --threads N [--seconds S | --ops N] [--json] [--pool PATH]
//                   [--backend pmem|msync|eadr] [--pool-size BYTES] [--keep-pool]
//                   [--batch N] [--slots N] [--round N] [--seed N]
//   pmrt-allocbench --test restart [--allocator pmrt|pmdk] [--objects N] [--repeat K]
// pmrt experiments: --teardown (close the heap at the end; see main), --pmrt-guard-batch N
// (threadtest/shbench: hold one epoch::Guard across N calls, to price the per-call Guard),
// --epoch-ms N (the advancer's interval instead of the default 64 ms).
// Durability: by default pmrt's calls are epoch-scoped (durable at the next epoch boundary)
// while every PMDK call is durable when it returns. --pmrt-sync-every N is the equal-durability
// mode: shared frees (Heap::Free), and every Nth call of a thread ends with
// epoch::Manager::Sync (N = 1: every call durable when it returns, as PMDK's). The JSON line's
// "durability" says which a figure measured.
//
// An "op" is one allocator call (an allocation or a free). Every allocation writes the first
// 8 bytes of its block, as a program would. Workloads:
//   threadtest  (Hoard, Ralloc) each thread allocates --batch (10000) 64-byte objects, then
//               frees them all, and repeats. Thread-local; nothing is shared.
//   shbench     (MicroQuill SmartHeap) each thread keeps --slots (1000) live objects of
//               64..1000 bytes skewed small (64 + 936*u^3, mean ~300) and replaces a random one
//               per step: mixed sizes, random lifetimes.
//   larson      (Larson & Krishnan, a server) T arrays of --slots live objects of 16..512 bytes
//               (uniform). In round r thread t replaces random slots of array (t + r) mod T,
//               --round (10000) times, then every thread hands its array on (a barrier): with
//               T > 1 most frees are of blocks another thread allocated.
//   prodcon     (Makalu, Ralloc) T/2 pairs: a producer allocates 64-byte objects and pushes them
//               into a bounded lock-free single-producer/single-consumer queue; the consumer
//               pops and frees them. Every free is cross-thread. T must be even.
//   restart     open time of a pool with --objects live 64-byte objects against an empty one,
//               after a clean close and after a SIGKILL (bench/allocbench_restart.cc).
//
// Allocators:
//   pmrt    a pool file (--pool-size, 1 GiB; on /dev/shm), epoch::Manager with the default
//           64 ms background advancer, alloc::Heap::Allocate/Free. --backend pmem by default.
//   pmdk    pmemobj_alloc(pop, &oid, size, 0, NULL, NULL) / pmemobj_free(&oid) on a pool made
//           by pmemobj_create on /dev/shm. The PMEMoid is the handle, kept in volatile memory.
//   malloc  glibc malloc/free.
//
// /dev/shm is not persistent memory: libpmem and libpmemobj treat it as such only with
// PMEM_IS_PMEM_FORCE=1, and then flush with clwb/clflushopt + sfence as on real PM (the setup of
// /work/shared/reference/allocator-notes.md). main() sets PMEM_IS_PMEM_FORCE=1 with setenv()
// before any libpmem call unless the environment sets it; both libraries read it lazily, at the
// first pmem_is_pmem or pool creation. PMEM_IS_PMEM_FORCE=0 measures PMDK's msync path instead.
//
// Output: one human-readable line per run; with --json also one JSON object per run on stdout:
// allocator, test, threads, ops, seconds (wall), ops_per_sec (wall), worker_cpu_seconds and
// process_cpu_seconds (the workers', and the whole process's with pmrt's advancer),
// ops_per_cpu_sec (ops per process-CPU-second times threads: what the run would do with a core
// per thread, largely immune to other tenants of the machine; counts prodcon's spinning), and for
// pmrt the flush/fence counters of the whole process (pmrt::CountersSnapshotAll, the advancer
// included) and the epoch boundary times.
#include "bench/allocbench.h"

#include <libpmem.h>
#include <libpmemobj.h>
#include <sys/resource.h>
#include <unistd.h>
#include <x86intrin.h>

#include <algorithm>
#include <atomic>
#include <barrier>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "alloc/allocator.h"
#include "epoch/epoch.h"
#include "epoch/persist.h"
#include "epoch/pool.h"

namespace pmrt::allocbench {

// ---- JSON -------------------------------------------------------------------------------------

void JsonLine::Key(const std::string& key) {
  if (!body_.empty()) body_ += ", ";
  body_ += "\"" + key + "\": ";
}

JsonLine& JsonLine::Add(const std::string& key, const std::string& value) {
  Key(key);
  body_ += "\"";
  for (char c : value) {
    if (c == '"' || c == '\\') body_ += '\\';
    body_ += c;
  }
  body_ += "\"";
  return *this;
}

JsonLine& JsonLine::Add(const std::string& key, double value) {
  Key(key);
  body_ += std::isfinite(value) ? absl::StrFormat("%.6g", value) : std::string("null");
  return *this;
}

JsonLine& JsonLine::Add(const std::string& key, uint64_t value) {
  Key(key);
  body_ += std::to_string(value);
  return *this;
}

JsonLine& JsonLine::AddBool(const std::string& key, bool value) {
  Key(key);
  body_ += value ? "true" : "false";
  return *this;
}

std::string PoolPath(const Options& o, const std::string& suffix) {
  if (!o.pool.empty()) return o.test == "restart" ? o.pool + suffix : o.pool;
  return absl::StrFormat("/dev/shm/pmrt-allocbench-%d%s", getpid(), suffix);
}

namespace {

[[noreturn]] void Die(const std::string& what) {
  std::fprintf(stderr, "pmrt-allocbench: %s\n", what.c_str());
  std::fflush(stdout);
  std::_Exit(1);
}

// ---- allocators: Handle Alloc(size), Free(Handle), Ptr(Handle), IsNull(Handle) ------------------

class MallocAllocator {
 public:
  using Handle = void*;
  Handle Alloc(size_t n) { return std::malloc(n); }
  void Free(Handle h) { std::free(h); }
  static void* Ptr(Handle h) { return h; }
  static bool IsNull(Handle h) { return h == nullptr; }
  void ThreadDone() {}
  void BeginMeasure() {}
  void Report(uint64_t, JsonLine*, std::string*) {}
};

class PmrtAllocator {
 public:
  using Handle = void*;

  explicit PmrtAllocator(const Options& o)
      : path_(PoolPath(o, ".pmrt")),
        guard_batch_(o.pmrt_guard_batch),
        epoch_ms_(o.epoch_ms),
        shared_free_(o.pmrt_shared_free || o.pmrt_sync_every != 0),
        sync_every_(o.pmrt_sync_every) {
    if (guard_batch_ != 0 && sync_every_ != 0) {
      Die("--pmrt-sync-every with --pmrt-guard-batch: a Sync cannot wait under a held guard");
    }
    unlink(path_.c_str());
    PoolOptions po;
    po.backend = o.backend;
    auto pool = Pool::Create(path_, o.pool_size, "pmrt-allocbench", po);
    if (!pool.ok()) Die(pool.status().ToString());
    pool_ = std::move(*pool);
    if (!o.keep_pool) unlink(path_.c_str());  // the mapping stays; nothing is left behind
    epoch::ManagerOptions mo;
    mo.interval = std::chrono::milliseconds(o.epoch_ms);
    auto epochs = epoch::Manager::Open(*pool_, mo);
    if (!epochs.ok()) Die(epochs.status().ToString());
    epochs_ = std::move(*epochs);
    auto heap = alloc::Heap::Open(*pool_, *epochs_);
    if (!heap.ok()) Die(heap.status().ToString());
    heap_ = std::move(*heap);
  }
  ~PmrtAllocator() {
    heap_.reset();
    epochs_.reset();
    (void)pool_->Close();
  }

  Handle Alloc(size_t n) {
    HoldGuard();
    Handle h = heap_->Allocate(n);
    MaybeSync();
    return h;
  }
  void Free(Handle h) {
    HoldGuard();
    // Each benchmark thread owns the objects it frees outright (the malloc contract), so the
    // default is FreeUnshared; --pmrt-free shared measures Heap::Free (every block waits for
    // its epoch to close, as for objects concurrent readers may hold).
    const absl::Status st = shared_free_ ? heap_->Free(h) : heap_->FreeUnshared(h);
    if (!st.ok()) free_errors_.fetch_add(1, std::memory_order_relaxed);
    MaybeSync();
  }
  // --pmrt-sync-every N (the equal-durability mode, beside PMDK, whose every call is durable
  // when it returns): every Nth call of a thread ends with epoch::Manager::Sync, so that call
  // and every earlier one of the thread are durable when it returns (N = 1: every call).
  void MaybeSync() {
    if (sync_every_ == 0) return;
    static thread_local uint64_t calls = 0;
    if (++calls % sync_every_ != 0) return;
    if (const absl::Status st = epochs_->Sync(); !st.ok()) Die(st.ToString());
  }
  // --pmrt-guard-batch N (an experiment): the thread holds one epoch::Guard across N calls, so
  // the Guard inside Allocate/Free only nests. Never held across a wait for another thread.
  void HoldGuard() {
    if (guard_batch_ == 0) return;
    HeldGuard& g = Held();
    if (g.left-- > 0) return;
    g.guard.reset();
    g.guard = std::make_unique<epoch::Guard>(*epochs_);
    g.left = guard_batch_ - 1;
  }
  void ThreadDone() {
    if (guard_batch_ != 0) Held().guard.reset();
  }
  static void* Ptr(Handle h) { return h; }
  static bool IsNull(Handle h) { return h == nullptr; }
  static const char* Why() { return alloc::AllocErrorName(alloc::Heap::LastError()); }

  void BeginMeasure() {
    counts0_ = CountersSnapshotAll();
    stats0_ = epochs_->stats();
  }

  void Report(uint64_t ops, JsonLine* j, std::string* human) {
    const PersistCounts c = CountersSnapshotAll() - counts0_;
    const epoch::ManagerStats s = epochs_->stats();
    const double per_op = ops == 0 ? 0 : 1.0 / static_cast<double>(ops);
    const auto ms = [](std::chrono::nanoseconds ns) { return ns.count() / 1e6; };
    j->Add("durability", sync_every_ == 0
                             ? std::string("epoch (durable at the next boundary, <= 2 x 64 ms)")
                             : absl::StrFormat("Sync every %d calls per thread", sync_every_))
        .Add("backend", std::string(BackendName(pool_->persister().kind())))
        .AddBool("is_pmem", pmem_is_pmem(pool_->base(), 4096) != 0)
        .Add("pool_bytes", uint64_t{pool_->size()})
        .Add("fences", c.fences)
        .Add("flushes", c.flushes)
        .Add("lines_flushed", c.lines_flushed)
        .Add("fences_per_op", static_cast<double>(c.fences) * per_op)
        .Add("lines_flushed_per_op", static_cast<double>(c.lines_flushed) * per_op)
        .Add("epoch_ms", uint64_t(epoch_ms_))
        .Add("epoch_advances", s.advances - stats0_.advances)
        .Add("boundary_ms", ms(s.boundary_time - stats0_.boundary_time))
        .Add("flush_ms", ms(s.flush_time - stats0_.flush_time))
        .Add("free_errors", free_errors_.load());
    // Footprint: chunks carved out of the heap by the end (blocks are reused only after the
    // epoch of their free has closed and its reclamation has run).
    const alloc::HeapStats hs = heap_->Stats();
    const uint64_t chunks_in_use = hs.chunks - hs.free_chunks;
    j->Add("heap_chunks_in_use", chunks_in_use)
        .Add("heap_footprint_mib", chunks_in_use * 64 / 1024)
        .Add("heap_live_blocks", hs.live_blocks);
    *human += absl::StrFormat(
        " backend=%s fences/op=%.5f lines_flushed/op=%.3f advances=%d "
        "boundary=%.1fms footprint=%dMiB",
        BackendName(pool_->persister().kind()), static_cast<double>(c.fences) * per_op,
        static_cast<double>(c.lines_flushed) * per_op, s.advances - stats0_.advances,
        ms(s.boundary_time - stats0_.boundary_time), chunks_in_use * 64 / 1024);
    if (free_errors_.load() != 0) Die(absl::StrFormat("%d frees failed", free_errors_.load()));
  }

 private:
  struct HeldGuard {
    std::unique_ptr<epoch::Guard> guard;  // (std::optional trips GCC 12's maybe-uninitialized)
    int left = 0;
  };
  static HeldGuard& Held() {
    thread_local HeldGuard g;
    return g;
  }

  std::string path_;
  int guard_batch_;
  int epoch_ms_;
  bool shared_free_;
  int sync_every_;
  std::unique_ptr<Pool> pool_;
  std::unique_ptr<epoch::Manager> epochs_;
  std::unique_ptr<alloc::Heap> heap_;
  std::atomic<uint64_t> free_errors_{0};
  PersistCounts counts0_;
  epoch::ManagerStats stats0_;
};

class PmdkAllocator {
 public:
  using Handle = PMEMoid;

  explicit PmdkAllocator(const Options& o) : path_(PoolPath(o, ".pmdk")), pool_size_(o.pool_size) {
    unlink(path_.c_str());
    pop_ = pmemobj_create(path_.c_str(), "pmrt-allocbench", o.pool_size, 0600);
    if (pop_ == nullptr) Die(path_ + ": pmemobj_create: " + pmemobj_errormsg());
    if (!o.keep_pool) unlink(path_.c_str());
  }
  ~PmdkAllocator() { pmemobj_close(pop_); }

  Handle Alloc(size_t n) {
    PMEMoid oid = OID_NULL;
    if (pmemobj_alloc(pop_, &oid, n, 0, nullptr, nullptr) != 0) return OID_NULL;
    return oid;
  }
  void Free(Handle h) { pmemobj_free(&h); }
  static void* Ptr(Handle h) { return pmemobj_direct(h); }
  static bool IsNull(Handle h) { return OID_IS_NULL(h); }
  void ThreadDone() {}
  void BeginMeasure() {}
  void Report(uint64_t, JsonLine* j, std::string*) {
    j->Add("backend", "pmem").Add("pool_bytes", pool_size_);
  }

 private:
  std::string path_;
  uint64_t pool_size_;
  PMEMobjpool* pop_;
};

template <class A>
const char* WhyNull() {
  if constexpr (std::is_same_v<A, PmrtAllocator>) return PmrtAllocator::Why();
  if constexpr (std::is_same_v<A, PmdkAllocator>) return pmemobj_errormsg();
  return std::strerror(errno);
}

template <class A>
typename A::Handle MustAlloc(A& a, size_t n, uint64_t stamp) {
  typename A::Handle h = a.Alloc(n);
  if (A::IsNull(h)) [[unlikely]] {
    Die(absl::StrFormat("allocation of %d bytes failed: %s (use a larger --pool-size)", n,
                        WhyNull<A>()));
  }
  *static_cast<volatile uint64_t*>(A::Ptr(h)) = stamp;  // the program's first write
  return h;
}

// ---- the run: threads, start line, stop, results ----------------------------------------------

struct Control {
  int threads = 1;
  uint64_t ops_per_thread = 0;  // 0: timed, until `stop`
  std::atomic<bool> stop{false};
  std::atomic<int> ready{0};
  std::atomic<bool> go{false};
  bool Done(uint64_t ops) const {
    return ops_per_thread != 0 ? ops >= ops_per_thread : stop.load(std::memory_order_relaxed);
  }
};

struct alignas(64) ThreadResult {
  uint64_t ops = 0;
  double cpu = 0;  // thread CPU seconds in the measured part
  double end = 0;  // when the measured part ended (NowSeconds)
  double cpu_start = 0;
  double alloc_cpu = 0;  // threadtest: thread CPU seconds in the allocation phases
};

// Marks the start of the measured part; returns when every thread is ready and main says go.
void StartLine(Control& c, ThreadResult& r) {
  c.ready.fetch_add(1, std::memory_order_acq_rel);
  while (!c.go.load(std::memory_order_acquire)) std::this_thread::yield();
  r.cpu_start = ThreadCpuSeconds();
}

void FinishLine(ThreadResult& r) {
  r.end = NowSeconds();
  r.cpu = ThreadCpuSeconds() - r.cpu_start;
}

// Spin briefly, then give the core away (2-core machine: the partner may need it).
inline void Backoff(int* spins) {
  if (++*spins < 64) {
    _mm_pause();
  } else {
    std::this_thread::yield();
  }
}

// xorshift64*: cheap and good enough for slot and size choices.
class Rng {
 public:
  explicit Rng(uint64_t seed) : s_(seed * 0x9E3779B97F4A7C15ull + 1) {}
  uint64_t Next() {
    s_ ^= s_ >> 12;
    s_ ^= s_ << 25;
    s_ ^= s_ >> 27;
    return s_ * 0x2545F4914F6CDD1Dull;
  }
  // Uniform in [0, n) without a division.
  uint32_t Below(uint32_t n) { return static_cast<uint32_t>(((Next() >> 32) * n) >> 32); }
  double Unit() { return static_cast<double>(Next() >> 11) * 0x1.0p-53; }

 private:
  uint64_t s_;
};

// A table of 4096 sizes drawn once, so the measured loop pays no floating point.
constexpr uint32_t kSizeTable = 4096;
std::vector<uint32_t> ShbenchSizes(Rng& rng) {
  std::vector<uint32_t> s(kSizeTable);
  for (auto& v : s) {
    const double u = rng.Unit();
    v = 64 + static_cast<uint32_t>(936.0 * u * u * u);
  }
  return s;
}
std::vector<uint32_t> LarsonSizes(Rng& rng) {
  std::vector<uint32_t> s(kSizeTable);
  for (auto& v : s) v = 16 + rng.Below(497);
  return s;
}

template <class A>
void ThreadTest(A& a, const Options& o, Control& c, int, ThreadResult& r) {
  std::vector<typename A::Handle> h(static_cast<size_t>(o.batch));
  StartLine(c, r);
  while (!c.Done(r.ops)) {
    const double t0 = ThreadCpuSeconds();
    for (size_t i = 0; i < h.size(); ++i) h[i] = MustAlloc(a, 64, i);
    r.alloc_cpu += ThreadCpuSeconds() - t0;  // the rest of the thread's CPU is the frees
    for (size_t i = 0; i < h.size(); ++i) a.Free(h[i]);
    r.ops += 2 * h.size();
  }
  a.ThreadDone();
  FinishLine(r);
}

template <class A>
void ShBench(A& a, const Options& o, Control& c, int t, ThreadResult& r) {
  Rng rng(o.seed + static_cast<uint64_t>(t));
  const std::vector<uint32_t> sizes = ShbenchSizes(rng);
  const uint32_t n = static_cast<uint32_t>(o.slots);
  std::vector<typename A::Handle> slot(n);
  for (uint32_t i = 0; i < n; ++i) slot[i] = MustAlloc(a, sizes[i % kSizeTable], i);
  StartLine(c, r);
  uint64_t step = 0;
  while (!c.Done(r.ops)) {
    for (int k = 0; k < 256; ++k, ++step) {
      const uint32_t i = rng.Below(n);
      a.Free(slot[i]);
      slot[i] = MustAlloc(a, sizes[step % kSizeTable], step);
    }
    r.ops += 2 * 256;
  }
  a.ThreadDone();
  FinishLine(r);
  for (auto& h : slot) a.Free(h);
}

// Larson: the arrays rotate between threads at every round's barrier.
struct LarsonShared {
  explicit LarsonShared(Control& c, const Options& o)
      : control(c),
        ops_per_round(2 * static_cast<uint64_t>(o.round)),
        fill(c.threads),
        sync(c.threads, Completion{this}) {}
  struct Completion {
    LarsonShared* s;
    void operator()() noexcept {  // runs once per round, before any thread continues
      ++s->rounds;
      const uint64_t per_thread = s->rounds * s->ops_per_round;
      s->finished = s->control.ops_per_thread != 0
                        ? per_thread >= s->control.ops_per_thread
                        : s->control.stop.load(std::memory_order_relaxed);
    }
  };
  Control& control;
  const uint64_t ops_per_round;
  uint64_t rounds = 0;
  bool finished = false;  // written by the completion, read after the barrier
  std::barrier<> fill;    // every array is filled before the start line
  std::barrier<Completion> sync;
};

template <class A>
void Larson(A& a, const Options& o, Control& c, LarsonShared& ls,
            std::vector<std::vector<typename A::Handle>>& arrays, int t, ThreadResult& r) {
  Rng rng(o.seed + static_cast<uint64_t>(t));
  const std::vector<uint32_t> sizes = LarsonSizes(rng);
  const uint32_t n = static_cast<uint32_t>(o.slots);
  arrays[t].resize(n);
  for (uint32_t i = 0; i < n; ++i) arrays[t][i] = MustAlloc(a, sizes[i % kSizeTable], i);
  ls.fill.arrive_and_wait();  // every array is filled before anyone touches another's
  StartLine(c, r);
  uint64_t step = 0;
  for (uint64_t round = 0;; ++round) {
    auto& arr = arrays[(static_cast<uint64_t>(t) + round) % arrays.size()];
    for (int k = 0; k < o.round; ++k, ++step) {
      const uint32_t i = rng.Below(n);
      a.Free(arr[i]);
      arr[i] = MustAlloc(a, sizes[step % kSizeTable], step);
    }
    r.ops += ls.ops_per_round;
    ls.sync.arrive_and_wait();
    if (ls.finished) break;
  }
  FinishLine(r);
  ls.fill.arrive_and_wait();  // nobody works on an array any more
  for (auto& h : arrays[t]) a.Free(h);
}

// Bounded lock-free queue, one producer and one consumer.
template <class H>
class SpscQueue {
 public:
  bool Push(const H& h) {
    const uint64_t t = tail_.load(std::memory_order_relaxed);
    if (t - head_cache_ == kCapacity) {
      head_cache_ = head_.load(std::memory_order_acquire);  // pairs with Pop's release
      if (t - head_cache_ == kCapacity) return false;
    }
    items_[t % kCapacity] = h;
    tail_.store(t + 1, std::memory_order_release);  // publishes the item to Pop's acquire
    return true;
  }
  bool Pop(H* h) {
    const uint64_t hd = head_.load(std::memory_order_relaxed);
    if (hd == tail_cache_) {
      tail_cache_ = tail_.load(std::memory_order_acquire);  // pairs with Push's release
      if (hd == tail_cache_) return false;
    }
    *h = items_[hd % kCapacity];
    head_.store(hd + 1, std::memory_order_release);  // frees the cell for Push's acquire
    return true;
  }

 private:
  static constexpr uint64_t kCapacity = 4096;
  alignas(64) std::atomic<uint64_t> head_{0};  // consumer's
  uint64_t tail_cache_ = 0;                    // consumer's last view of tail_
  alignas(64) std::atomic<uint64_t> tail_{0};  // producer's
  uint64_t head_cache_ = 0;                    // producer's last view of head_
  alignas(64) H items_[kCapacity];
};

template <class H>
struct ProdConPair {
  SpscQueue<H> queue;
  alignas(64) std::atomic<bool> done{false};
  uint64_t produced = 0;  // valid once done (release/acquire)
};

template <class A>
void ProdCon(A& a, Control& c, ProdConPair<typename A::Handle>& pair, bool producer,
             ThreadResult& r) {
  StartLine(c, r);
  if (producer) {
    uint64_t made = 0;
    while (!c.Done(made)) {  // ops_per_thread allocations: the pair makes 2x that many calls
      for (int k = 0; k < 256; ++k, ++made) {
        const auto h = MustAlloc(a, 64, made);
        for (int spins = 0; !pair.queue.Push(h);) Backoff(&spins);
      }
    }
    pair.produced = made;
    pair.done.store(true, std::memory_order_release);  // pairs with the consumer's acquire
    r.ops = made;
  } else {
    uint64_t freed = 0;
    typename A::Handle h;
    for (int spins = 0;;) {
      if (pair.queue.Pop(&h)) {
        a.Free(h);
        ++freed;
        spins = 0;
      } else if (pair.done.load(std::memory_order_acquire) && freed == pair.produced) {
        break;  // everything produced is freed: the queue is empty
      } else {
        Backoff(&spins);
      }
    }
    r.ops = freed;
  }
  FinishLine(r);
}

struct RunResult {
  uint64_t ops = 0;
  double seconds = 0;              // wall, start line to the last thread's finish
  double worker_cpu_seconds = 0;   // the workload threads' CPU time
  double process_cpu_seconds = 0;  // the whole process (pmrt's advancer included)
  double alloc_cpu_seconds = 0;    // threadtest: the workers' CPU in allocation phases
};

double ProcessCpuSeconds() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  const auto sec = [](const timeval& tv) { return tv.tv_sec + tv.tv_usec * 1e-6; };
  return sec(ru.ru_utime) + sec(ru.ru_stime);
}

// Starts `o.threads` threads running body(t, result), times them from the common start line.
template <class Body>
RunResult RunThreads(const Options& o, Control& c, Body body) {
  std::vector<ThreadResult> res(static_cast<size_t>(o.threads));
  std::vector<std::thread> threads;
  for (int t = 0; t < o.threads; ++t) threads.emplace_back([&, t] { body(t, res[t]); });
  while (c.ready.load(std::memory_order_acquire) < o.threads) std::this_thread::yield();
  const double t0 = NowSeconds();
  const double cpu0 = ProcessCpuSeconds();
  c.go.store(true, std::memory_order_release);
  if (c.ops_per_thread == 0) {
    std::this_thread::sleep_for(std::chrono::duration<double>(o.seconds));
    c.stop.store(true, std::memory_order_relaxed);
  }
  for (auto& th : threads) th.join();
  RunResult rr;
  rr.process_cpu_seconds = ProcessCpuSeconds() - cpu0;
  double end = t0;
  for (const auto& r : res) {
    rr.ops += r.ops;
    rr.worker_cpu_seconds += r.cpu;
    rr.alloc_cpu_seconds += r.alloc_cpu;
    end = std::max(end, r.end);
  }
  rr.seconds = end - t0;
  return rr;
}

template <class A>
RunResult RunWorkload(A& a, const Options& o) {
  Control c;
  c.threads = o.threads;
  c.ops_per_thread = o.ops / static_cast<uint64_t>(o.threads);
  a.BeginMeasure();
  if (o.test == "threadtest") {
    return RunThreads(o, c, [&](int t, ThreadResult& r) { ThreadTest(a, o, c, t, r); });
  }
  if (o.test == "shbench") {
    return RunThreads(o, c, [&](int t, ThreadResult& r) { ShBench(a, o, c, t, r); });
  }
  if (o.test == "larson") {
    LarsonShared ls(c, o);
    std::vector<std::vector<typename A::Handle>> arrays(static_cast<size_t>(o.threads));
    return RunThreads(o, c, [&](int t, ThreadResult& r) { Larson(a, o, c, ls, arrays, t, r); });
  }
  // prodcon
  auto pairs = std::make_unique<ProdConPair<typename A::Handle>[]>(o.threads / 2);
  return RunThreads(o, c,
                    [&](int t, ThreadResult& r) { ProdCon(a, c, pairs[t / 2], t % 2 == 0, r); });
}

template <class A>
int Run(A& a, const Options& o) {
  const RunResult rr = RunWorkload(a, o);
  const double ops_per_sec = static_cast<double>(rr.ops) / rr.seconds;
  // As if every thread had a core of its own: ops per process-CPU-second, times the threads.
  const double per_cpu = rr.process_cpu_seconds > 0
                             ? static_cast<double>(rr.ops) / rr.process_cpu_seconds * o.threads
                             : 0.0;
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  JsonLine j;
  j.Add("allocator", o.allocator)
      .Add("test", o.test)
      .Add("threads", o.threads)
      .Add("ops", rr.ops)
      .Add("seconds", rr.seconds)
      .Add("ops_per_sec", ops_per_sec)
      .Add("worker_cpu_seconds", rr.worker_cpu_seconds)
      .Add("process_cpu_seconds", rr.process_cpu_seconds)
      .Add("ops_per_cpu_sec", per_cpu)
      .Add("max_rss_mib", static_cast<uint64_t>(ru.ru_maxrss) / 1024)
      .Add("pmem_is_pmem_force", std::string(std::getenv("PMEM_IS_PMEM_FORCE") != nullptr
                                                 ? std::getenv("PMEM_IS_PMEM_FORCE")
                                                 : ""));
  std::string human = absl::StrFormat(
      "allocbench allocator=%s test=%s threads=%d ops=%d seconds=%.3f ops/s=%.3fM "
      "cpu-normalized=%.3fM",
      o.allocator, o.test, o.threads, rr.ops, rr.seconds, ops_per_sec / 1e6, per_cpu / 1e6);
  if (o.test == "threadtest" && rr.ops > 0) {
    // Worker CPU per call in each phase; the allocator's background work (pmrt's advancer:
    // boundary flush, reclamation) is process_cpu_seconds - worker_cpu_seconds.
    const double calls = static_cast<double>(rr.ops) / 2;
    j.Add("alloc_cpu_ns", rr.alloc_cpu_seconds / calls * 1e9)
        .Add("free_cpu_ns", (rr.worker_cpu_seconds - rr.alloc_cpu_seconds) / calls * 1e9)
        .Add("background_cpu_ns_per_pair",
             (rr.process_cpu_seconds - rr.worker_cpu_seconds) / calls * 1e9);
    human += absl::StrFormat(" alloc=%.1fns free=%.1fns background=%.1fns/pair",
                             rr.alloc_cpu_seconds / calls * 1e9,
                             (rr.worker_cpu_seconds - rr.alloc_cpu_seconds) / calls * 1e9,
                             (rr.process_cpu_seconds - rr.worker_cpu_seconds) / calls * 1e9);
  }
  a.Report(rr.ops, &j, &human);
  std::printf("%s\n", human.c_str());
  if (o.json) std::printf("%s\n", j.str().c_str());
  std::fflush(stdout);
  return 0;
}

// ---- command line -----------------------------------------------------------------------------

int Usage(const std::string& why) {
  std::fprintf(
      stderr,
      "pmrt-allocbench: %s\n"
      "usage: pmrt-allocbench --allocator pmrt|pmdk|malloc "
      "--test threadtest|shbench|larson|prodcon|restart --threads N\n"
      "         [--seconds S | --ops N] [--json] [--pool PATH] "
      "[--backend pmem|msync|eadr]\n"
      "         [--pool-size BYTES] [--keep-pool] [--batch N] [--slots N] [--round N]"
      " [--seed N]\n"
      "         [--objects N] [--repeat K]   (restart)\n"
      "         [--pmrt-sync-every N]   (equal durability: shared frees, a Sync every N calls)\n"
      "         [--teardown] [--pmrt-guard-batch N] [--epoch-ms N] [--pmrt-free "
      "shared|unshared]   (pmrt)\n",
      why.c_str());
  return 2;
}

bool ParseArgs(int argc, char** argv, Options* o, std::string* err) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--json") {
      o->json = true;
      continue;
    }
    if (a == "--keep-pool") {
      o->keep_pool = true;
      continue;
    }
    if (a == "--teardown") {
      o->teardown = true;
      continue;
    }
    if (i + 1 >= argc) {
      *err = "missing value after " + a;
      return false;
    }
    const std::string v = argv[++i];
    bool ok = true;
    if (a == "--allocator")
      o->allocator = v;
    else if (a == "--test")
      o->test = v;
    else if (a == "--threads")
      ok = absl::SimpleAtoi(v, &o->threads) && o->threads > 0;
    else if (a == "--seconds")
      ok = absl::SimpleAtod(v, &o->seconds) && o->seconds > 0;
    else if (a == "--ops")
      ok = absl::SimpleAtoi(v, &o->ops);
    else if (a == "--pool")
      o->pool = v;
    else if (a == "--pool-size")
      ok = absl::SimpleAtoi(v, &o->pool_size);
    else if (a == "--batch")
      ok = absl::SimpleAtoi(v, &o->batch) && o->batch > 0;
    else if (a == "--slots")
      ok = absl::SimpleAtoi(v, &o->slots) && o->slots > 0;
    else if (a == "--round")
      ok = absl::SimpleAtoi(v, &o->round) && o->round > 0;
    else if (a == "--seed")
      ok = absl::SimpleAtoi(v, &o->seed);
    else if (a == "--epoch-ms")
      ok = absl::SimpleAtoi(v, &o->epoch_ms) && o->epoch_ms > 0;
    else if (a == "--pmrt-free")
      ok = (v == "shared" || v == "unshared") && ((o->pmrt_shared_free = v == "shared"), true);
    else if (a == "--pmrt-guard-batch")
      ok = absl::SimpleAtoi(v, &o->pmrt_guard_batch) && o->pmrt_guard_batch >= 0;
    else if (a == "--pmrt-sync-every")
      ok = absl::SimpleAtoi(v, &o->pmrt_sync_every) && o->pmrt_sync_every > 0;
    else if (a == "--objects")
      ok = absl::SimpleAtoi(v, &o->objects);
    else if (a == "--repeat")
      ok = absl::SimpleAtoi(v, &o->repeat) && o->repeat > 0;
    else if (a == "--backend") {
      auto b = ParseBackend(v);
      ok = b.ok() && *b != BackendKind::kSim;
      if (ok) o->backend = *b;
    } else {
      *err = "unknown flag " + a;
      return false;
    }
    if (!ok) {
      *err = "bad value for " + a + ": " + v;
      return false;
    }
  }
  const std::string& t = o->test;
  if (t != "threadtest" && t != "shbench" && t != "larson" && t != "prodcon" && t != "restart") {
    *err = "unknown test " + t;
    return false;
  }
  if (o->allocator != "pmrt" && o->allocator != "pmdk" && o->allocator != "malloc") {
    *err = "unknown allocator " + o->allocator;
    return false;
  }
  if (t == "prodcon" && o->threads % 2 != 0) {
    *err = "prodcon needs an even --threads (producer/consumer pairs)";
    return false;
  }
  if (o->pool_size == 0) o->pool_size = (t == "restart" ? uint64_t{2} : uint64_t{1}) << 30;
  if (o->pmrt_guard_batch > 0 && t != "threadtest" && t != "shbench") {
    *err = "--pmrt-guard-batch is for threadtest and shbench (no thread waits for another)";
    return false;
  }
  if (t == "restart" && o->allocator == "malloc") {
    *err = "restart measures a persistent heap: --allocator pmrt or pmdk";
    return false;
  }
  return true;
}

}  // namespace
}  // namespace pmrt::allocbench

int main(int argc, char** argv) {
  // Before any libpmem/libpmemobj call: /dev/shm counts as persistent memory (see the top).
  if (std::getenv("PMEM_IS_PMEM_FORCE") == nullptr) setenv("PMEM_IS_PMEM_FORCE", "1", 1);
  using namespace pmrt::allocbench;
  Options o;
  std::string err;
  if (!ParseArgs(argc, argv, &o, &err)) return Usage(err);
  if (o.test == "restart") return RunRestart(o);
  if (o.allocator == "malloc") {
    MallocAllocator a;
    return Run(a, o);
  }
  if (o.allocator == "pmdk") {
    PmdkAllocator a(o);
    return Run(a, o);
  }
  // Teardown is skipped by default: alloc::Heap::~Heap runs one Advance() to retire pending
  // frees, but a concurrent Advance() of the background advancer may still be running
  // reclamation callbacks (Heap::ReleaseFreed) that it detached earlier, after the heap is gone
  // (a use-after-free: SIGSEGV or "double free or corruption" at exit, mostly at T=2).
  // The pool file is already unlinked, so nothing is left behind. --teardown exercises it.
  auto a = std::make_unique<PmrtAllocator>(o);
  const int rc = Run(*a, o);
  if (!o.teardown) {
    std::fflush(stdout);
    std::_Exit(rc);
  }
  a.reset();
  return rc;
}
