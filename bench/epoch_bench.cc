// Fine-grained checkpointing figures (docs/performance.md, "Epoch checkpointing"):
//
//   BM_Boundary/<backend>/<lines>/<stride>   one Manager::Advance (steps 1-5 of epoch/epoch.h)
//       after <lines> cache lines were written and registered with RecordDirty inside a Guard;
//       stride 64 = adjacent lines; 8192 = one line on every other page, so no two dirty
//       lines share or neighbour a page (msync cannot coalesce). Only the Advance is timed.
//   BM_BoundaryScattered/<backend>/<lines>/<sorted>/<huge>   the same with <lines> random lines
//       of a 1 GiB region, registered in random or in address order (what sorting would buy),
//       on 4 KiB pages or (huge=1) on 2 MiB pages (what the TLB costs).
//   BM_GuardEnterExit/threads:<n>          Guard constructor + destructor, per operation
//   BM_GuardRecordDirty/threads:<n>        Guard + one 8-byte store + RecordDirty, per operation
// Times: wall time (and, for the boundary, cpu_* counters: the advancing thread's CPU time,
// which includes msync's system time); the guard rows are timed in thread CPU time, since on a
// shared machine a batch's wall time also counts time the thread was not scheduled.
//   BM_FlushShare/<backend>/<MiB>/<work>   2 writer threads doing random 8-byte writes to a
//       <MiB> region, one guard per write, RecordDirty at a line's first write in an epoch
//       (deduplicated with a volatile per-line epoch tag in DRAM), background advancer every
//       64 ms, for about 2 s. <work> dependent multiply-adds of private work (~1.2 ns each at
//       2.6 GHz) before each write: 0 = pure writes, 500 = a Masstree-like operation rate.
//       Counters: flush_share = ManagerStats.flush_time / wall, boundary_share =
//       boundary_time / wall (new guards wait during a boundary, so this is the writers'
//       stall), the writers' throughput against the same loop with no epoch layer (thru_loss)
//       and with guards but nothing registered (guard_only), and the advancer's CPU time.
//
//   BM_MsyncScattered/<lines>/<span>      what-if: the msync fence over <lines> scattered lines,
//       one msync per dirty page (today) or one over the span ($PMRT_BENCH_DIR, default /dev/shm)
//   BM_GuardFenceModel/<mode>/threads:2    what-if: random stores with no guard, with the
//       Guard's seq_cst announce, or with a relaxed announce (an asymmetric-fence guard)
//
// Every pool is a file in /dev/shm, unlinked once mapped, with its backend forced through
// PoolOptions.backend. Run with PMEM_IS_PMEM_FORCE=1 so that libpmem treats the /dev/shm
// mapping as persistent memory (the pmem rows then measure clwb/clflushopt + sfence on DRAM):
//
//   PMEM_IS_PMEM_FORCE=1 build-bench/bench/epoch_bench
//   PMEM_IS_PMEM_FORCE=1 build-bench/bench/epoch_bench --benchmark_filter=FlushShare
#include <benchmark/benchmark.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "epoch/epoch.h"
#include "epoch/persist.h"
#include "epoch/pool.h"

namespace pmrt::epoch {
namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

std::unique_ptr<Pool> BenchPool(BackendKind kind, size_t heap_bytes) {
  static std::atomic<int> serial{0};
  const std::string path = "/dev/shm/pmrt-epoch-bench-" + std::to_string(getpid()) + "-" +
                           std::to_string(serial.fetch_add(1)) + ".pool";
  unlink(path.c_str());
  PoolOptions o;
  o.backend = kind;
  o.log_area_size = 1 << 20;
  auto pool = Pool::Create(path, heap_bytes + (4 << 20), "epoch-bench", o);
  unlink(path.c_str());  // the mapping stays valid
  if (!pool.ok()) {
    std::fprintf(stderr, "epoch_bench: %s\n", pool.status().ToString().c_str());
    std::abort();
  }
  return std::move(*pool);
}

std::unique_ptr<Manager> BenchManager(Pool& pool, std::chrono::milliseconds interval) {
  ManagerOptions o;
  o.interval = interval;
  auto m = Manager::Open(pool, o);
  if (!m.ok()) {
    std::fprintf(stderr, "epoch_bench: %s\n", m.status().ToString().c_str());
    std::abort();
  }
  return std::move(*m);
}

uint64_t Next(uint64_t& s) {
  s ^= s << 13;
  s ^= s >> 7;
  s ^= s << 17;
  return s;
}

double ThreadCpuSeconds() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

double ProcessCpuSeconds() {
  rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  auto tv = [](const timeval& t) { return static_cast<double>(t.tv_sec) + t.tv_usec * 1e-6; };
  return tv(ru.ru_utime) + tv(ru.ru_stime);
}

// ---- (a) the cost of one epoch boundary --------------------------------------------------------

void BM_Boundary(benchmark::State& state) {
  const auto kind = static_cast<BackendKind>(state.range(0));
  const auto lines = static_cast<size_t>(state.range(1));
  const auto stride = static_cast<size_t>(state.range(2));
  auto pool = BenchPool(kind, std::max<size_t>(lines * stride, 1 << 20));
  auto m = BenchManager(*pool, std::chrono::milliseconds(0));
  auto* heap = static_cast<uint8_t*>(pool->region_base(PoolRegion::kHeap));
  for (size_t i = 0; i < lines; ++i) heap[i * stride] = 1;  // fault every page in, untimed
  if (!m->Advance().ok()) std::abort();
  const ManagerStats before = m->stats();
  const PersistCounts counts_before = CountersSnapshot(kind);
  uint64_t v = 0;
  double timed = 0, cpu = 0;  // wall and this thread's CPU seconds inside Advance
  for (auto _ : state) {
    {
      Guard g(*m);
      ++v;
      for (size_t i = 0; i < lines; ++i) {
        auto* w = reinterpret_cast<uint64_t*>(heap + i * stride);
        *w = v;
        m->RecordDirty(w, sizeof(*w));
      }
    }
    const auto t0 = Clock::now();
    const double c0 = ThreadCpuSeconds();
    absl::Status st = m->Advance();
    cpu += ThreadCpuSeconds() - c0;
    const double s = Seconds(Clock::now() - t0);
    if (!st.ok()) state.SkipWithError(st.ToString().c_str());
    timed += s;
    state.SetIterationTime(s);
  }
  const ManagerStats after = m->stats();
  const PersistCounts counts = CountersSnapshot(kind) - counts_before;
  const auto n = static_cast<double>(state.iterations());
  state.SetLabel(std::string(BackendName(kind)));
  state.counters["lines"] = static_cast<double>(lines);
  state.counters["ns_per_line"] = lines == 0 ? 0 : timed * 1e9 / (n * static_cast<double>(lines));
  state.counters["cpu_us"] = cpu * 1e6 / n;
  state.counters["cpu_ns_per_line"] = lines == 0 ? 0 : cpu * 1e9 / (n * static_cast<double>(lines));
  state.counters["flush_us"] =
      std::chrono::duration<double, std::micro>(after.flush_time - before.flush_time).count() / n;
  state.counters["fences"] = static_cast<double>(counts.fences) / n;
  state.counters["lines_flushed"] =
      static_cast<double>(after.lines_flushed - before.lines_flushed) / n;
}

void BoundaryArgs(benchmark::internal::Benchmark* b) {
  for (BackendKind k : {BackendKind::kPmem, BackendKind::kMsync, BackendKind::kEadr}) {
    for (int64_t lines : {0, 64, 1024, 16384, 131072}) {
      b->Args({static_cast<int64_t>(k), lines, 64});
    }
    for (int64_t lines : {64, 1024, 16384}) b->Args({static_cast<int64_t>(k), lines, 8192});
  }
}
BENCHMARK(BM_Boundary)->Apply(BoundaryArgs)->UseManualTime()->Unit(benchmark::kMicrosecond);

// Anonymous memory backed by 2 MiB pages where the kernel allows (MADV_HUGEPAGE), for an
// in-memory pool: what the boundary costs without a TLB miss per scattered line.
struct HugeMemory {
  explicit HugeMemory(size_t n) : size(n) {
    void* p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) std::abort();
    base = p;
    madvise(base, size, MADV_HUGEPAGE);
  }
  ~HugeMemory() { munmap(base, size); }
  void* base;
  size_t size;
};

std::unique_ptr<Pool> HugePool(BackendKind kind, HugeMemory& mem) {
  PoolOptions o;
  o.backend = kind;
  o.log_area_size = 1 << 20;
  auto pool = Pool::CreateInMemory(mem.base, mem.size, "epoch-bench", o, "huge-pages");
  if (!pool.ok()) {
    std::fprintf(stderr, "epoch_bench: %s\n", pool.status().ToString().c_str());
    std::abort();
  }
  return std::move(*pool);
}

// The same boundary with <lines> random distinct lines of a 1 GiB region (the dirty set of a
// large heap), registered in random order (sorted=0) or in address order (sorted=1): the
// boundary flushes in registration order, so this shows what sorting the ranges would buy.
// pages=4096: a /dev/shm pool file (4 KiB pages; tmpfs huge pages are off on the test machine);
// pages=2M: an in-memory pool on anonymous memory with MADV_HUGEPAGE (pmem and eadr only).
void BM_BoundaryScattered(benchmark::State& state) {
  const auto kind = static_cast<BackendKind>(state.range(0));
  const auto lines = static_cast<size_t>(state.range(1));
  const bool sorted = state.range(2) != 0;
  const bool huge = state.range(3) != 0;
  constexpr size_t kRegion = size_t{1} << 30;
  std::unique_ptr<HugeMemory> mem;
  if (huge) mem = std::make_unique<HugeMemory>(kRegion + (8 << 20));
  auto pool = huge ? HugePool(kind, *mem) : BenchPool(kind, kRegion);
  auto m = BenchManager(*pool, std::chrono::milliseconds(0));
  auto* heap = static_cast<uint8_t*>(pool->region_base(PoolRegion::kHeap));
  for (size_t off = 0; off < kRegion; off += 4096) heap[off] = 1;  // fault in, untimed
  std::vector<size_t> at;
  uint64_t rng = 42;
  std::vector<bool> taken(kRegion / kCacheLine);
  while (at.size() < lines) {
    const size_t line = Next(rng) % taken.size();
    if (!taken[line]) {
      taken[line] = true;
      at.push_back(line * kCacheLine);
    }
  }
  if (sorted) std::sort(at.begin(), at.end());
  if (!m->Advance().ok()) std::abort();
  const ManagerStats before = m->stats();
  uint64_t v = 0;
  double timed = 0, cpu = 0;  // wall and this thread's CPU seconds inside Advance
  for (auto _ : state) {
    {
      Guard g(*m);
      ++v;
      for (size_t off : at) {
        auto* w = reinterpret_cast<uint64_t*>(heap + off);
        *w = v;
        m->RecordDirty(w, sizeof(*w));
      }
    }
    const auto t0 = Clock::now();
    const double c0 = ThreadCpuSeconds();
    absl::Status st = m->Advance();
    cpu += ThreadCpuSeconds() - c0;
    const double s = Seconds(Clock::now() - t0);
    if (!st.ok()) state.SkipWithError(st.ToString().c_str());
    timed += s;
    state.SetIterationTime(s);
  }
  const ManagerStats after = m->stats();
  const auto n = static_cast<double>(state.iterations());
  state.SetLabel(absl::StrCat(std::string(BackendName(kind)), sorted ? " sorted" : " random",
                              huge ? " 2M-pages" : " 4K-pages"));
  state.counters["ns_per_line"] = timed * 1e9 / (n * static_cast<double>(lines));
  state.counters["cpu_ns_per_line"] = cpu * 1e9 / (n * static_cast<double>(lines));
  state.counters["flush_us"] =
      std::chrono::duration<double, std::micro>(after.flush_time - before.flush_time).count() / n;
}

void ScatteredArgs(benchmark::internal::Benchmark* b) {
  for (BackendKind k : {BackendKind::kPmem, BackendKind::kMsync, BackendKind::kEadr}) {
    for (int64_t lines : {16384, 131072}) {
      for (int64_t sorted : {0, 1}) b->Args({static_cast<int64_t>(k), lines, sorted, 0});
    }
  }
  for (int64_t lines : {16384, 131072}) {
    for (int64_t sorted : {0, 1})
      b->Args({static_cast<int64_t>(BackendKind::kPmem), lines, sorted, 1});
  }
}
BENCHMARK(BM_BoundaryScattered)
    ->Apply(ScatteredArgs)
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);

// ---- (b) the cost of a guard ---------------------------------------------------------------

// One manager shared by the benchmark's threads (eadr: RecordDirty's ranges cost no flush).
// Thread 0 advances between timed batches, so the dirty lists stay short.
struct Shared {
  std::unique_ptr<Pool> pool = BenchPool(BackendKind::kEadr, 8 << 20);
  std::unique_ptr<Manager> m = BenchManager(*pool, std::chrono::milliseconds(0));
};
Shared& GuardShared() {
  static Shared* s = new Shared;
  return *s;
}

constexpr int kBatch = 1024;
constexpr int kBatchesPerAdvance = 64;

template <bool kRecordDirty>
void GuardLoop(benchmark::State& state) {
  Shared& sh = GuardShared();
  Manager& m = *sh.m;
  // Each thread writes its own 64 KiB (1024 lines) of the heap.
  auto* mine = static_cast<uint64_t*>(sh.pool->region_base(PoolRegion::kHeap)) +
               static_cast<size_t>(state.thread_index()) * kBatch * 8;
  uint64_t batches = 0;
  double timed = 0, cpu = 0;
  for (auto _ : state) {
    const double c0 = ThreadCpuSeconds();
    const auto t0 = Clock::now();
    for (int i = 0; i < kBatch; ++i) {
      Guard g(m);
      if constexpr (kRecordDirty) {
        uint64_t* w = mine + static_cast<size_t>(i) * 8;
        *w = g.epoch();
        m.RecordDirty(w, sizeof(*w));
      } else {
        benchmark::DoNotOptimize(&g);
      }
    }
    const double s = Seconds(Clock::now() - t0);
    const double c = ThreadCpuSeconds() - c0;
    timed += s;
    cpu += c;
    // The thread's CPU time: on a shared 2-core machine a batch's wall time also counts the
    // time the thread was not scheduled.
    state.SetIterationTime(c);
    if (state.thread_index() == 0 && ++batches % kBatchesPerAdvance == 0) (void)m.Advance();
  }
  state.SetItemsProcessed(state.iterations() * kBatch);
  // Per thread: nanoseconds per guard (timed batches only), averaged over the threads.
  const auto ops = static_cast<double>(state.iterations() * kBatch);
  state.counters["ns_per_op"] =
      benchmark::Counter(cpu * 1e9 / ops, benchmark::Counter::kAvgThreads);
  state.counters["wall_ns_per_op"] =
      benchmark::Counter(timed * 1e9 / ops, benchmark::Counter::kAvgThreads);
}

void BM_GuardEnterExit(benchmark::State& state) { GuardLoop<false>(state); }
void BM_GuardRecordDirty(benchmark::State& state) { GuardLoop<true>(state); }
BENCHMARK(BM_GuardEnterExit)->Threads(1)->Threads(2)->UseManualTime();
BENCHMARK(BM_GuardRecordDirty)->Threads(1)->Threads(2)->UseManualTime();

// ---- (c) the share of a 64 ms epoch spent flushing ---------------------------------------------

constexpr int kWriters = 2;
constexpr auto kRunFor = std::chrono::seconds(2);

struct WriterRun {
  uint64_t ops = 0;
  double seconds = 0;
  double writer_cpu = 0;   // CPU seconds of the writer threads
  double process_cpu = 0;  // CPU seconds of the whole process over the run
};

// `steps` dependent multiply-adds: private work that touches no memory.
inline uint64_t Work(uint64_t x, int steps) {
  for (int i = 0; i < steps; ++i) x = x * 6364136223846793005ull + 1442695040888963407ull;
  return x;
}

enum class WriterMode {
  kBare,        // plain stores, no epoch layer
  kGuardOnly,   // one guard per store, nothing registered (isolates the guard's cost)
  kCheckpoint,  // one guard per store + first-touch RecordDirty: the real thing
};

// Random 8-byte writes to `lines` lines from kWriters threads for kRunFor. With kCheckpoint, a
// line's first write in an epoch registers the line (tag[] dedupes).
WriterRun RunWriters(WriterMode mode, Manager* m, uint64_t* heap, size_t lines,
                     std::atomic<uint32_t>* tag, int work) {
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> ops{0};
  std::atomic<uint64_t> cpu_ns{0};
  std::vector<std::thread> threads;
  const double cpu0 = ProcessCpuSeconds();
  const auto start = Clock::now();
  for (int t = 0; t < kWriters; ++t) {
    threads.emplace_back([&, t] {
      const double c0 = ThreadCpuSeconds();
      uint64_t rng = 0x9E3779B97F4A7C15ull * static_cast<uint64_t>(t + 1);
      uint64_t n = 0, sink = 0;
      while (!stop.load(std::memory_order_relaxed)) {
        for (int k = 0; k < 256; ++k, ++n) {
          const uint64_t r = Next(rng);
          const size_t line = static_cast<size_t>(r % lines);
          uint64_t* w = heap + line * 8 + (r >> 61);
          if (work > 0) sink = Work(sink + r, work);
          if (mode == WriterMode::kBare) {
            *w = r;
            continue;
          }
          Guard g(*m);
          *w = r;
          if (mode == WriterMode::kGuardOnly) continue;
          const auto e = static_cast<uint32_t>(g.epoch());
          // Relaxed: the tag is a private dedupe hint; two writers racing on one line both
          // register it, which only flushes the line twice.
          if (tag[line].load(std::memory_order_relaxed) != e) {
            tag[line].store(e, std::memory_order_relaxed);
            m->RecordDirty(heap + line * 8, kCacheLine);
          }
        }
      }
      benchmark::DoNotOptimize(sink);
      ops.fetch_add(n);
      cpu_ns.fetch_add(static_cast<uint64_t>((ThreadCpuSeconds() - c0) * 1e9));
    });
  }
  std::this_thread::sleep_for(kRunFor);
  stop = true;
  for (auto& th : threads) th.join();
  WriterRun r;
  r.seconds = Seconds(Clock::now() - start);
  r.process_cpu = ProcessCpuSeconds() - cpu0;
  r.ops = ops.load();
  r.writer_cpu = static_cast<double>(cpu_ns.load()) * 1e-9;
  return r;
}

void BM_FlushShare(benchmark::State& state) {
  const auto kind = static_cast<BackendKind>(state.range(0));
  const size_t bytes = static_cast<size_t>(state.range(1)) << 20;
  const int work = static_cast<int>(state.range(2));
  const size_t lines = bytes / kCacheLine;
  auto pool = BenchPool(kind, bytes);
  auto* heap = static_cast<uint64_t*>(pool->region_base(PoolRegion::kHeap));
  for (size_t i = 0; i < bytes / 8; i += 512) heap[i] = 0;  // fault every page in, untimed
  std::unique_ptr<std::atomic<uint32_t>[]> tag(new std::atomic<uint32_t>[lines]());
  for (auto _ : state) {
    // Baseline: the same writes with no epoch layer at all.
    const WriterRun base = RunWriters(WriterMode::kBare, nullptr, heap, lines, nullptr, work);
    auto m = BenchManager(*pool, std::chrono::milliseconds(64));
    const WriterRun guarded =
        RunWriters(WriterMode::kGuardOnly, m.get(), heap, lines, nullptr, work);
    const ManagerStats s0 = m->stats();
    const WriterRun run =
        RunWriters(WriterMode::kCheckpoint, m.get(), heap, lines, tag.get(), work);
    const ManagerStats s1 = m->stats();
    const double flush = std::chrono::duration<double>(s1.flush_time - s0.flush_time).count();
    const double boundary =
        std::chrono::duration<double>(s1.boundary_time - s0.boundary_time).count();
    const auto advances = static_cast<double>(s1.advances - s0.advances);
    const auto flushed = static_cast<double>(s1.lines_flushed - s0.lines_flushed);
    const double thru = static_cast<double>(run.ops) / run.seconds;
    const double base_thru = static_cast<double>(base.ops) / base.seconds;
    state.counters["flush_share_pct"] = 100 * flush / run.seconds;
    state.counters["boundary_share_pct"] = 100 * boundary / run.seconds;
    state.counters["advances"] = advances;
    state.counters["lines_per_epoch"] = advances == 0 ? 0 : flushed / advances;
    state.counters["ns_per_line"] = flushed == 0 ? 0 : flush * 1e9 / flushed;
    state.counters["Mops_s"] = thru * 1e-6;
    state.counters["base_Mops_s"] = base_thru * 1e-6;
    state.counters["guard_only_Mops_s"] = static_cast<double>(guarded.ops) / guarded.seconds * 1e-6;
    state.counters["thru_loss_pct"] = 100 * (1 - thru / base_thru);
    // Process CPU not spent by the writers: the advancer's (the main thread sleeps).
    state.counters["advancer_cpu_pct"] = 100 * (run.process_cpu - run.writer_cpu) / run.seconds;
    state.SetIterationTime(run.seconds);
  }
  state.SetLabel(std::string(BackendName(kind)));
}

void FlushShareArgs(benchmark::internal::Benchmark* b) {
  for (BackendKind k : {BackendKind::kPmem, BackendKind::kMsync, BackendKind::kEadr}) {
    for (int64_t mib : {64, 1024}) b->Args({static_cast<int64_t>(k), mib, 0});
    b->Args({static_cast<int64_t>(k), 1024, 500});
  }
}
BENCHMARK(BM_FlushShare)
    ->Apply(FlushShareArgs)
    ->Iterations(1)
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);

// ---- what-if figures for the epoch layer's design choices ---------------------------------

// The msync backend's fence with <lines> scattered dirty lines of a 1 GiB file: one msync per
// dirty page, sorted and merged (what MsyncFence does today) against one msync over the span of
// the pages. The file is in $PMRT_BENCH_DIR (default /dev/shm; point it at a disk directory to
// see a real file system).
void BM_MsyncScattered(benchmark::State& state) {
  const auto lines = static_cast<size_t>(state.range(0));
  const bool one_span = state.range(1) != 0;
  const char* dir = std::getenv("PMRT_BENCH_DIR");
  const std::string path = std::string(dir != nullptr ? dir : "/dev/shm") + "/pmrt-msync-bench-" +
                           std::to_string(getpid());
  const size_t size = size_t{1} << 30;
  const int fd = open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC, 0600);
  if (fd < 0 || ftruncate(fd, static_cast<off_t>(size)) != 0) std::abort();
  unlink(path.c_str());
  auto* p = static_cast<uint8_t*>(mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0));
  if (p == MAP_FAILED) std::abort();
  uint64_t rng = 42;
  std::vector<size_t> pages;
  for (size_t i = 0; i < lines; ++i)
    pages.push_back((Next(rng) % (size / kCacheLine)) * kCacheLine / 4096);
  std::sort(pages.begin(), pages.end());
  pages.erase(std::unique(pages.begin(), pages.end()), pages.end());
  for (auto _ : state) {
    for (size_t pg : pages) ++p[pg * 4096];
    const auto t0 = Clock::now();
    if (one_span) {
      msync(p + pages.front() * 4096, (pages.back() - pages.front() + 1) * 4096, MS_SYNC);
    } else {
      for (size_t pg : pages) msync(p + pg * 4096, 4096, MS_SYNC);
    }
    state.SetIterationTime(Seconds(Clock::now() - t0));
  }
  state.counters["msync_calls"] = one_span ? 1 : static_cast<double>(pages.size());
  state.SetLabel(one_span ? "one msync over the span" : "one msync per dirty page");
  munmap(p, size);
  close(fd);
}
BENCHMARK(BM_MsyncScattered)
    ->Args({1024, 0})
    ->Args({1024, 1})
    ->Args({16384, 0})
    ->Args({16384, 1})
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);

// The guard's store-load fence in a loop of random 8-byte stores over 64 MiB (one store per
// "guard"), without the rest of the epoch layer: mode 0 bare stores; 1 the Guard's fast path
// (seq_cst announce, seq_cst re-check, release exit); 2 the fast path an asymmetric fence would
// allow (relaxed announce + compiler barrier; the advancer would pay a membarrier instead).
struct alignas(64) FenceSlot {
  std::atomic<uint64_t> epoch{0};
};
std::atomic<uint64_t> g_fence_clock{1};

void BM_GuardFenceModel(benchmark::State& state) {
  const int mode = static_cast<int>(state.range(0));
  constexpr size_t kWords = (size_t{64} << 20) / 8;
  static uint64_t* heap = [] {
    auto* h = static_cast<uint64_t*>(
        mmap(nullptr, kWords * 8, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
    for (size_t i = 0; i < kWords; i += 512) h[i] = 1;
    return h;
  }();
  static FenceSlot slots[64];
  FenceSlot& slot = slots[state.thread_index() % 64];
  uint64_t rng = 0x9E3779B97F4A7C15ull * static_cast<uint64_t>(state.thread_index() + 1);
  double cpu = 0;
  for (auto _ : state) {
    const double c0 = ThreadCpuSeconds();
    for (int k = 0; k < kBatch; ++k) {
      const uint64_t r = Next(rng);
      uint64_t* w = heap + r % kWords;
      if (mode == 0) {
        *w = r;
        continue;
      }
      const uint64_t g = g_fence_clock.load(std::memory_order_acquire);
      if (mode == 1) {
        slot.epoch.store(g, std::memory_order_seq_cst);
        if (g_fence_clock.load(std::memory_order_seq_cst) != g) continue;
      } else {
        slot.epoch.store(g, std::memory_order_relaxed);
        std::atomic_signal_fence(std::memory_order_seq_cst);
        if (g_fence_clock.load(std::memory_order_relaxed) != g) continue;
      }
      *w = r;
      slot.epoch.store(0, std::memory_order_release);
    }
    const double c = ThreadCpuSeconds() - c0;
    cpu += c;
    state.SetIterationTime(c);
  }
  static const char* kNames[] = {"bare stores", "seq_cst announce (Guard today)",
                                 "relaxed announce (asymmetric fence)"};
  state.SetLabel(kNames[mode]);
  state.counters["ns_per_op"] =
      benchmark::Counter(cpu * 1e9 / static_cast<double>(state.iterations() * kBatch),
                         benchmark::Counter::kAvgThreads);
}
BENCHMARK(BM_GuardFenceModel)->DenseRange(0, 2)->Threads(2)->UseManualTime();

void AddConfiguration() {
  const char* force = std::getenv("PMEM_IS_PMEM_FORCE");
  benchmark::AddCustomContext("pmrt.PMEM_IS_PMEM_FORCE", force == nullptr ? "(unset)" : force);
  benchmark::AddCustomContext("pmrt.pool_dir", "/dev/shm (unlinked after mapping)");
  benchmark::AddCustomContext("pmrt.cpus", std::to_string(std::thread::hardware_concurrency()));
  benchmark::AddCustomContext("pmrt.flush_share",
                              "2 writers, 64 ms background advancer, 2 s per run, "
                              "random 8-byte writes, one guard per write");
  benchmark::AddCustomContext("pmrt.guard",
                              "eadr pool; thread 0 advances every 64 batches of 1024");
}

}  // namespace
}  // namespace pmrt::epoch

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  pmrt::epoch::AddConfiguration();
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
