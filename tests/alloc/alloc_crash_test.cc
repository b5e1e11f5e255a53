// The persistent heap under the crash simulator: random allocations and frees (Free and
// FreeUnshared; small blocks and extents) by one or two threads, with epoch advances. At every
// crash image, after recovery:
//   * the heap walk equals the model at the start of the failed epoch (no leak: frees of
//     completed epochs are free; no resurrection: allocations of the failed epoch are gone),
//   * Check() finds the metadata consistent,
//   * new allocations never return a block that is live (no double allocation),
//   * every live block holds what was written into it at its allocation (its first and last
//     words: a fresh block's stores are durable with its epoch, no registration by the caller).
// Every twentieth image also crashes during recovery and during the next run's operations.
// The mutation gate disables each persistence site of the allocator (and swaps its in-line
// store order) in turn; each must make this suite fail.
#include <cstdio>
#include <cstring>
#include <map>

#include "alloc/allocator.h"
#include "alloc/internal/logged_line.h"
#include "epoch/epoch.h"
#include "epoch/pool.h"
#include "gtest/gtest.h"
#include "testing/sim.h"
#include "tests/alloc/heap_runtime.h"
#include "tests/util/crash_suite.h"
#include "tests/util/lockstep.h"
#include "tests/util/test_util.h"

namespace pmrt::alloc {
namespace {

constexpr size_t kPoolSize = 8 << 20;
using Live = std::map<uint64_t, uint64_t>;  // offset -> usable size

struct Model {
  Live live, at_start;
  bool advancing = false;
  // After an allocation finds the heap full, frees until half the blocks are gone: the next
  // boundaries gather the free blocks and return empty chunks (a failed allocation asks for
  // that), which the allocations after them reuse for other sizes and extents.
  size_t drain_to = 0;
  absl::Status Check(const Live& got) const {
    if (got == at_start || (advancing && got == live)) return absl::OkStatus();
    for (const auto& [off, size] : got)
      if (!at_start.count(off)) {
        return absl::DataLossError(absl::StrCat("block at ", off, " (", size,
                                                " bytes) is live but was not at the epoch start"));
      }
    for (const auto& [off, size] : at_start)
      if (!got.count(off)) {
        return absl::DataLossError(absl::StrCat("block at ", off, " (", size,
                                                " bytes) was live at the epoch start but is gone"));
      }
    return absl::DataLossError("a block's size differs from the epoch start");
  }
};

using testing::Next;

using Runtime = test_runtime::HeapRuntime;

absl::StatusOr<Runtime> OpenRuntime(void* base, const PoolOptions& po, size_t pool_size) {
  auto pool = Pool::OpenInMemory(base, pool_size, "alloc-crash", po, "crash-image");
  if (!pool.ok()) return pool.status();
  return test_runtime::OpenHeapRuntime(std::move(*pool));
}

Live Walk(const Heap& h) {
  Live live;
  (void)h.Walk([&](const BlockInfo& b) { live[b.offset] = b.size; });
  return live;
}

// What a block at pool offset `off` holds in its first and last words (written at allocation).
uint64_t Stamp(uint64_t off) { return off * 0x9E3779B97F4A7C15ull | 1; }

// One operation: allocate (mostly small, sometimes an extent) or free a random live block.
void Operate(Heap& heap, Model& model, uint64_t& rng) {
  const uint64_t r = Next(rng);
  if (model.live.size() <= model.drain_to) model.drain_to = 0;
  if (model.drain_to == 0 && (model.live.size() < 8 || r % 5 < 3)) {
    const size_t size = r % 23 == 0 ? 64 * 1024 + r % (150 * 1024) : 1 + (r >> 8) % 3000;
    void* p = heap.Allocate(size);
    if (p == nullptr) {  // full: free half, then fill again
      model.drain_to = model.live.size() / 2;
      return;
    }
    const uint64_t off = heap.pool().offset_of(p);
    const size_t usable = heap.UsableSize(p);
    model.live[off] = usable;
    const uint64_t stamp = Stamp(off);
    std::memcpy(p, &stamp, 8);
    std::memcpy(static_cast<uint8_t*>(p) + usable - 8, &stamp, 8);
  } else {
    auto it = model.live.begin();
    std::advance(it, static_cast<long>((r >> 8) % model.live.size()));
    // Half the frees say the block is the caller's alone (FreeUnshared: one allocated in the
    // running epoch is reusable at once); the crash contract is the same.
    void* p = heap.pool().at(it->first);
    ASSERT_OK((r >> 40) % 2 == 0 ? heap.Free(p) : heap.FreeUnshared(p));
    model.live.erase(it);
  }
}

void AdvanceTracked(epoch::Manager& m, Model& model) {
  model.advancing = true;
  ASSERT_OK(m.Advance());
  model.advancing = false;
  model.at_start = model.live;
}

// Recovery result checks: walk == model, Check(), and no live block is handed out again.
absl::Status CheckRecovered(Runtime& r, const Model& model, Live* recovered = nullptr) {
  Live got = Walk(*r.heap);
  if (auto st = model.Check(got); !st.ok()) return st;
  if (auto st = r.heap->Check(); !st.ok()) return st;
  for (const auto& [off, size] : got) {
    uint64_t first, last;
    std::memcpy(&first, r.pool->at(off), 8);
    std::memcpy(&last, static_cast<const uint8_t*>(r.pool->at(off)) + size - 8, 8);
    if (first != Stamp(off) || last != Stamp(off)) {
      return absl::DataLossError(absl::StrCat("block at ", off, " (", size,
                                              " bytes) lost what was written at its allocation"));
    }
  }
  if (recovered != nullptr) *recovered = got;
  for (int i = 0; i < 40; ++i) {
    void* p = r.heap->Allocate(i % 7 == 0 ? 70000 : 16 + i * 37);
    if (p == nullptr) continue;
    const uint64_t off = r.pool->offset_of(p);
    auto it = got.upper_bound(off);
    if (it != got.begin() && std::prev(it)->first + std::prev(it)->second > off) {
      return absl::DataLossError(absl::StrCat("double allocation: block at ", off,
                                              " lies inside live block ", std::prev(it)->first));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckNested(CrashImage& img, const Model& outer, size_t pool_size) {
  Model after;
  bool recovered = false;
  auto handler = [&](CrashImage& inner) -> absl::Status {
    auto r = OpenRuntime(inner.base(), testing::EadrPoolOptions(), pool_size);
    if (!r.ok()) return r.status();
    return CheckRecovered(*r, recovered ? after : outer);
  };
  return testing::RunNestedCheck(
      img, testing::NestedSimOptions(0.3),
      [&](Sim& nested) -> absl::Status {
        auto r = OpenRuntime(img.base(), testing::SimPoolOptions(nested), pool_size);
        if (!r.ok()) return r.status();
        Live got = Walk(*r->heap);
        if (auto st = outer.Check(got); !st.ok()) return st;
        after.live = after.at_start = got;
        recovered = true;
        uint64_t rng = img.id().fence * 977 + img.id().image + 3;
        for (int round = 0; round < 2; ++round) {
          for (int i = 0; i < 6; ++i) Operate(*r->heap, after, rng);
          AdvanceTracked(*r->epochs, after);
        }
        Operate(*r->heap, after, rng);
        after.advancing = true;  // the runtime's destructors advance
        return absl::OkStatus();
      },
      handler);
}

struct Config : testing::CrashConfig {
  size_t pool_size = kPoolSize;
  // Growth: the simulator's memory is max_size bytes (at least the pool), and a full heap grows
  // the pool by grow_by until it reaches them (then allocations fail and the workload frees).
  size_t max_size = 0;
  size_t grow_by = 0;
  size_t memory() const { return std::max(pool_size, max_size); }
  Config() {
    options.max_single_line_images = 8;
    options.random_images = 6;
  }
};

using Outcome = testing::CrashOutcome;
using testing::EnvOr;

struct RunStats {
  uint64_t chunks_returned = 0;
  uint64_t growths = 0;
};

Outcome RunCrash(const Config& cfg, RunStats* stats = nullptr) {
  Model model;
  return testing::RunUnderSim<Outcome>(
      cfg.memory(), cfg.options, cfg.target_images,
      [&cfg](Sim& sim, const PoolOptions& sim_po) {
        PoolOptions po = sim_po;
        po.max_size = cfg.memory();
        po.grow_by = cfg.grow_by;
        {
          auto pool =
              Pool::CreateInMemory(sim.working(), cfg.pool_size, "alloc-crash", po, "sim-pool");
          EXPECT_OK(pool);
        }
        return OpenRuntime(sim.working(), po, cfg.memory());
      },
      [&](Sim&, CrashImage& img) -> absl::Status {
        if (cfg.nested_every > 0 && img.id().image % cfg.nested_every == 5) {
          return CheckNested(img, model, cfg.memory());
        }
        auto r = OpenRuntime(img.base(), testing::EadrPoolOptions(), cfg.memory());
        if (!r.ok()) return r.status();
        return CheckRecovered(*r, model);
      },
      [&](Sim& sim, Runtime& rt, Outcome&) {
        auto rngs = testing::WorkerRngs(cfg.threads, sim.options().seed, 7919);
        testing::Lockstep workers(cfg.threads, [&](int t) { Operate(*rt.heap, model, rngs[t]); });
        testing::RunSchedule(
            sim, cfg.target_images, workers, cfg.threads, sim.options().seed + 5, 10,
            testing::AdvanceOnPickZero([&] { AdvanceTracked(*rt.epochs, model); }));
        if (stats != nullptr) {
          stats->chunks_returned = rt.heap->Stats().chunks_returned;
          stats->growths = rt.pool->growths();
        }
      });
}

TEST(AllocCrashTest, OneThread) {
  const auto cfg = testing::MainRunConfig<Config>(1, 1, 100000);
  testing::ExpectFinishedRun(RunCrash(cfg), cfg.target_images, "alloc, 1 thread");
}

TEST(AllocCrashTest, TwoThreads) {
  const auto cfg = testing::MainRunConfig<Config>(2, 3, 100000);
  testing::ExpectFinishedRun(RunCrash(cfg), cfg.target_images, "alloc, 2 threads");
}

// A heap of a few chunks, filled again and again: full allocations ask the next boundaries to
// gather every free block and return empty chunks (logged in the closing epoch, whose failure
// must bring them back as they were), which later allocations take for other sizes and extents.
TEST(AllocCrashTest, FullHeapReturnsEmptyChunks) {
  for (int threads : {1, 2}) {
    auto cfg = testing::MainRunConfig<Config>(threads, threads == 1 ? 1 : 3, 40000);
    cfg.pool_size = 2 << 20;
    RunStats stats;
    testing::ExpectFinishedRun(RunCrash(cfg, &stats), cfg.target_images,
                               threads == 1 ? "alloc full, 1 thread" : "alloc full, 2 threads");
    EXPECT_GT(stats.chunks_returned, 0u) << "the workload never returned an empty chunk";
  }
}

// Config of the growth runs: a 2 MiB pool in 4 MiB of memory, grown 256 KiB at a time whenever
// the heap is full (crashes at the growths' fences, allocations in grown segments, chunk return
// there), then full at 4 MiB.
Config GrowthConfig(int threads, uint64_t seed, uint64_t images) {
  auto cfg = testing::MainRunConfig<Config>(threads, seed, images);
  cfg.pool_size = 2 << 20;
  cfg.max_size = 4 << 20;
  cfg.grow_by = Pool::kMinGrowth;
  return cfg;
}

TEST(AllocCrashTest, GrowthIsCrashAtomic) {
  for (int threads : {1, 2}) {
    const Config cfg = GrowthConfig(threads, threads == 1 ? 11 : 13, 40000);
    RunStats stats;
    testing::ExpectFinishedRun(RunCrash(cfg, &stats), cfg.target_images,
                               threads == 1 ? "alloc grow, 1 thread" : "alloc grow, 2 threads");
    EXPECT_GE(stats.growths, 4u) << "the workload did not grow the pool to its memory";
  }
}

// The growth's persistence steps (the segment's header, its fence) are reached only by a pool
// that grows: the gate runs the growth workload.
TEST(AllocCrashTest, MutationGateKillsTheGrowthSites) {
  const auto survivors = testing::RunMutationGate(
      {{Site("alloc.grow.segment").id, "alloc.grow.segment"},
       {Site("alloc.grow.segment.fence").id, "alloc.grow.segment.fence"}},
      [] {
        Config cfg = GrowthConfig(1, 11, 40000);
        cfg.target_images = 40000;
        return RunCrash(cfg);
      },
      "alloc");
  EXPECT_TRUE(survivors.empty()) << ::testing::PrintToString(survivors);
}

TEST(AllocCrashTest, MutationGateKillsEverySite) {
  Config base;
  base.target_images = 3000;
  Outcome baseline = RunCrash(base);
  ASSERT_TRUE(baseline.failures.empty()) << baseline.failures[0].ToString();
  // The gate's explicit list: the heap header's flush and fence; the logged line's store order
  // and the dropped registrations of dirty memory (mutants the simulator never sees as flushes).
  // (MarkAllocated's two, alloc.mutant.dirty.bitmap_mark and bitmap_init, are in the
  // transaction suite's gate: recovery of committed allocations is what calls it.)
  const auto survivors = testing::RunMutationGate(
      testing::ExpectSites(baseline.sites, "alloc.",
                           {Site("alloc.heap.header.flush"), Site("alloc.heap.header.fence")},
                           {alloc_internal::kLineOrderSite, alloc_internal::kDirtyChunkState,
                            alloc_internal::kDirtyExtent}),
      [] {
        Config cfg;
        cfg.target_images = 60000;
        return RunCrash(cfg);
      },
      "alloc");
  EXPECT_TRUE(survivors.empty()) << ::testing::PrintToString(survivors);
}

// The chunk return's one persistence step (its logged state line joins the boundary's flush)
// is reached only by a heap that fills: the gate runs the full-heap workload.
TEST(AllocCrashTest, MutationGateKillsTheChunkReturnSite) {
  const Site site = alloc_internal::kDirtyChunkReturn;
  const auto survivors = testing::RunMutationGate(
      {{site.id, site.name}},
      [] {
        Config cfg;
        cfg.pool_size = 2 << 20;
        cfg.target_images = 40000;
        return RunCrash(cfg);
      },
      "alloc");
  EXPECT_TRUE(survivors.empty()) << ::testing::PrintToString(survivors);
}

}  // namespace
}  // namespace pmrt::alloc
