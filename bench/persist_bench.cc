// Persistence seam and crash simulator figures (docs/performance.md):
//
//   BM_PersistLine/<backend>   one cache-line store + flush + fence on a /dev/shm pool file
//   BM_RecordPersist/<how>/<lines>  a log record persisted: in place + Flush, or CopyFlush
//                              with each RecordWrites mode (which the pool should default to)
//   BM_ReloadAfterFlush/<flush>/<reload>  whether a flushed line stays in the cache
//   BM_FlushBatch/<lines>      the pmem batch flush of N dirty lines (the epoch boundary's core)
//   BM_SimImages/<pool MiB>    crash images per second over the toy redo log
//
// Run: PMEM_IS_PMEM_FORCE=1 build/release/bench/persist_bench
#include <benchmark/benchmark.h>
#include <unistd.h>

#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "epoch/persist.h"
#include "epoch/pool.h"
#include "testing/sim.h"
#include "tools/toy_redo_log.h"

namespace pmrt {
namespace {

constexpr Site kBenchFlush{"bench.flush"};
constexpr Site kBenchFence{"bench.fence"};

std::unique_ptr<Pool> BenchPool(BackendKind kind,
                                std::optional<RecordWrites> writes = std::nullopt) {
  const std::string path = "/dev/shm/pmrt-persist-bench-" + std::to_string(getpid()) + ".pool";
  unlink(path.c_str());
  PoolOptions o;
  o.backend = kind;
  o.record_writes = writes;
  auto pool = Pool::Create(path, 64 << 20, "bench", o);
  unlink(path.c_str());  // the mapping stays valid
  if (!pool.ok()) std::abort();
  return std::move(*pool);
}

void BM_PersistLine(benchmark::State& state) {
  auto kind = static_cast<BackendKind>(state.range(0));
  auto pool = BenchPool(kind);
  auto* lines = static_cast<uint64_t*>(pool->region_base(PoolRegion::kHeap));
  const Persister& p = pool->persister();
  uint64_t i = 0;
  for (auto _ : state) {
    uint64_t* w = &lines[(i % 1024) * 8];
    *w = ++i;
    p.Persist(kBenchFlush, kBenchFence, w, 8);
  }
  state.SetLabel(std::string(BackendName(kind)));
}
BENCHMARK(BM_PersistLine)
    ->Arg(static_cast<int>(BackendKind::kPmem))
    ->Arg(static_cast<int>(BackendKind::kEadr))
    ->Arg(static_cast<int>(BackendKind::kMsync));

// A log record of N lines appended to a 16 MiB ring, made durable with one fence: written in
// place then flushed (arg 0), or built in a cached buffer and copied with CopyFlush (the
// general commit path of txn/), non-temporal (arg 1, RecordWrites::kStream) or stores + clwb
// (arg 2, kFlush). Side by side in one run: 1 against 2 is the choice DefaultRecordWrites makes
// for this processor (its label says which it picked); 0 against 2 is the staging copy's cost.
void BM_RecordPersist(benchmark::State& state) {
  const bool copy = state.range(0) != 0;
  auto pool = BenchPool(BackendKind::kPmem,
                        state.range(0) == 1 ? RecordWrites::kStream : RecordWrites::kFlush);
  const size_t bytes = static_cast<size_t>(state.range(1)) * kCacheLine;
  auto* ring = static_cast<uint8_t*>(pool->region_base(PoolRegion::kHeap));
  const size_t ring_bytes = 16 << 20;
  std::vector<uint64_t> stage(bytes / 8);
  const Persister& p = pool->persister();
  size_t at = 0;
  uint64_t v = 0;
  for (auto _ : state) {
    uint64_t* dst = reinterpret_cast<uint64_t*>(ring + at);
    uint64_t* out = copy ? stage.data() : dst;
    for (size_t i = 0; i < bytes / 8; ++i) out[i] = ++v;
    if (copy) {
      p.CopyFlush(kBenchFlush, dst, stage.data(), bytes);
    } else {
      p.Flush(kBenchFlush, dst, bytes);
    }
    p.Fence(kBenchFence);
    at = (at + bytes) % ring_bytes;
  }
  const std::string how = copy ? absl::StrCat("stage + CopyFlush (",
                                              std::string(RecordWritesName(p.record_writes())), ")")
                               : "in place + Flush";
  state.SetLabel(absl::StrCat(
      how, " + Fence; default here: ", std::string(RecordWritesName(DefaultRecordWrites()))));
}
BENCHMARK(BM_RecordPersist)->ArgsProduct({{0, 1, 2}, {1, 2, 4, 8, 10, 12, 16, 64}});

// Does a flush leave the line in the cache? Store to a line, optionally flush it (clwb here),
// fence, and optionally load it back, the next line's address depending on the loaded value
// (so the load's latency counts). The reload's cost is the difference between /1/1 and /1/0
// (after a flush) and between /0/1 and /0/0 (without one). On the AMD EPYC of the measurements
// (docs/epoch.md, "Design notes") clwb evicts the line: the epoch boundary's write-back makes
// the next access to each written-back line a memory miss.
void BM_ReloadAfterFlush(benchmark::State& state) {
  auto pool = BenchPool(BackendKind::kPmem);
  const bool flush = state.range(0) != 0;
  const bool reload = state.range(1) != 0;
  auto* lines = static_cast<uint64_t*>(pool->region_base(PoolRegion::kHeap));
  const Persister& p = pool->persister();
  uint64_t i = 0;
  for (auto _ : state) {
    volatile uint64_t* w = &lines[(i % 512) * 8];
    *w = i + 1;
    if (flush) p.Flush(kBenchFlush, const_cast<uint64_t*>(w), 8);
    p.Fence(kBenchFence);
    i = reload ? *w : i + 1;
  }
  benchmark::DoNotOptimize(i);
  state.SetLabel(std::string(flush ? "store + clwb + sfence" : "store + sfence") +
                 (reload ? " + reload" : ""));
}
BENCHMARK(BM_ReloadAfterFlush)->ArgsProduct({{0, 1}, {0, 1}});

void BM_FlushBatch(benchmark::State& state) {
  auto pool = BenchPool(BackendKind::kPmem);
  const int n = static_cast<int>(state.range(0));
  auto* base = static_cast<uint8_t*>(pool->region_base(PoolRegion::kHeap));
  std::vector<Range> ranges;
  for (int i = 0; i < n; ++i) ranges.push_back({base + static_cast<size_t>(i) * 4096, 64});
  uint64_t v = 0;
  for (auto _ : state) {
    for (auto& r : ranges) *static_cast<uint64_t*>(const_cast<void*>(r.addr)) = ++v;
    pool->persister().FlushBatch(kBenchFlush, ranges);
  }
  state.SetItemsProcessed(state.iterations() * n);
}
BENCHMARK(BM_FlushBatch)->Arg(1)->Arg(64)->Arg(1024)->Arg(8192);

void BM_SimImages(benchmark::State& state) {
  const size_t size = static_cast<size_t>(state.range(0)) << 20;
  auto sim = Sim::Create(size, {});
  if (!sim.ok()) std::abort();
  (*sim)->SetCrashPoints(Sim::CrashPoints::kNone);
  PoolOptions po;
  po.backend = BackendKind::kSim;
  po.sim = sim->get();
  auto pool = Pool::CreateInMemory((*sim)->working(), size, "toy", po);
  if (!pool.ok()) std::abort();
  toy::ToyStore store((*pool)->region_base(PoolRegion::kHeap), (*pool)->persister());
  toy::Model model;
  (*sim)->SetHandler([&](CrashImage& img) -> absl::Status {
    PoolOptions eadr;
    eadr.backend = BackendKind::kEadr;
    auto p = Pool::OpenInMemory(img.base(), img.size(), "toy", eadr);
    if (!p.ok()) return p.status();
    toy::ToyStore s((*p)->region_base(PoolRegion::kHeap), (*p)->persister());
    s.Recover();
    return model.Check(s.Read());
  });
  (*sim)->SetCrashPoints(Sim::CrashPoints::kEveryFence);
  uint64_t rng = 3;
  for (auto _ : state) {
    auto tx = toy::RandomTx(rng);
    model.Begin(tx);
    uint64_t seq = store.Commit(tx);
    model.End();
    store.Apply(seq);
  }
  if ((*sim)->failed()) state.SkipWithError((*sim)->Report().c_str());
  state.counters["images_per_s"] =
      benchmark::Counter(static_cast<double>((*sim)->stats().images), benchmark::Counter::kIsRate);
  // The pool's Close (in its destructor, after `model` is gone) fences: no crash points there.
  (*sim)->SetCrashPoints(Sim::CrashPoints::kNone);
}
BENCHMARK(BM_SimImages)->Arg(1)->Arg(64)->Arg(256)->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace pmrt

BENCHMARK_MAIN();
