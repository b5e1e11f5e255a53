// Process-kill loop over the persistent heap on a real pool file: a child allocates and frees
// (small blocks and extents) with explicit epoch advances until SIGKILL; the parent reopens the
// file through Pool::Open, Manager::Open and Heap::Open and checks that the heap walk is exactly
// the model after the last completed epoch: zero leaked blocks (allocated but not in the model)
// and zero resurrected blocks (freed in a completed epoch but live again). Every operation the
// child performs is written to a shared log page before it returns, so the parent knows the
// exact block of each allocation.
#include <sys/mman.h>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <set>

#include "alloc/allocator.h"
#include "epoch/epoch.h"
#include "epoch/pool.h"
#include "gtest/gtest.h"
#include "testing/kill_harness.h"
#include "tests/alloc/heap_runtime.h"
#include "tests/util/test_util.h"

namespace pmrt::alloc {
namespace {

constexpr size_t kPoolSize = 16 << 20;
constexpr size_t kMaxOps = 1 << 20;
constexpr int kOpsPerEpoch = 50;
constexpr size_t kMaxGrownSize = 24 << 20;  // where a growing pool stops growing and fills

struct OpRecord {
  uint64_t offset;  // block the operation allocated or freed
  uint64_t alloc;   // 1 allocation, 0 free
};

// Shared with the child: its operations, how many are in a completed epoch, and whether an
// advance was in flight (then the ops before it may or may not be durable).
struct OpLog {
  std::atomic<uint64_t> ops{0};
  std::atomic<uint64_t> durable_ops{0};
  std::atomic<uint64_t> advancing_from{0};  // ops count when the in-flight advance began, +1
  std::atomic<uint64_t> full_heaps{0};      // allocations that found the heap full, all children
  std::atomic<uint64_t> growths{0};         // pool growths, all children
  OpRecord records[kMaxOps];
};

// The child's backend alternates between msync and pmem (clwb + sfence on the file's mapping),
// so that the pmem paths run under the kills too; the checks open with msync.
absl::StatusOr<test_runtime::HeapRuntime> OpenRuntime(const std::string& path,
                                                      BackendKind backend = BackendKind::kMsync,
                                                      size_t grow_by = 0) {
  PoolOptions po;
  po.backend = backend;
  po.grow_by = grow_by;
  po.max_size = kMaxGrownSize;
  auto pool = Pool::Open(path, "alloc-kill", po);
  if (!pool.ok()) return pool.status();
  return test_runtime::OpenHeapRuntime(std::move(*pool));
}

std::set<uint64_t> Walk(const Heap& h) {
  std::set<uint64_t> live;
  (void)h.Walk([&](const BlockInfo& b) { live.insert(b.offset); });
  return live;
}

std::set<uint64_t> Apply(std::set<uint64_t> live, const OpLog& log, uint64_t n) {
  for (uint64_t i = 0; i < n; ++i) {
    if (log.records[i].alloc) {
      live.insert(log.records[i].offset);
    } else {
      live.erase(log.records[i].offset);
    }
  }
  return live;
}

struct KillTally {
  uint64_t total_ops = 0, leaked = 0, resurrected = 0, live = 0, full_heaps = 0, growths = 0;
};

// `kills` children, each allocating and freeing until SIGKILLed; the checker opens the file and
// compares the heap walk with the last completed epoch. `planted` (a negative control): the
// child reports every operation durable as soon as it returns, as a heap that lost its
// epoch-scoped writes would; the check must catch it.
// `pool_size` small enough to fill: an allocation that finds the heap full makes the child free
// half its blocks next (the failed allocation asks the next boundaries to gather free blocks
// and return empty chunks, which run under the kills).
// `grow_by`: the child's pool grows by this much whenever its heap is full, up to kMaxGrownSize
// (growths under the kills), and then fills.
absl::Status RunKills(int kills, bool planted, KillTally& tally, size_t pool_size = kPoolSize,
                      size_t grow_by = 0) {
  testing::TempDir dir;
  const std::string path = dir.File("heap.pool");
  {
    auto pool = Pool::Create(path, pool_size, "alloc-kill");
    if (!pool.ok()) return pool.status();
  }
  auto* log = static_cast<OpLog*>(
      mmap(nullptr, sizeof(OpLog), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0));
  if (log == MAP_FAILED) return absl::InternalError("mmap of the op log failed");
  KillLoopOptions o;
  o.kills = kills;
  o.max_delay_us = 4000;
  // Every other kill comes within 2 ms of the child's second full heap or growth (it counts
  // them in progress.user[0]), so that the pool reaches its largest size and fills there: a
  // timed kill alone gets there only where children run fast enough.
  o.aim_every = 2;
  o.aim_slot = 0;
  o.aim_value = 2;
  o.aim_max_delay_us = 2000;
  std::set<uint64_t> model;  // live blocks before the current child started
  uint64_t& total_ops = tally.total_ops;
  uint64_t& leaked = tally.leaked;
  uint64_t& resurrected = tally.resurrected;
  auto st = RunKillLoop(
      o,
      [&](int iteration, KillProgress& progress) {
        auto r = OpenRuntime(path, iteration % 2 == 1 ? BackendKind::kPmem : BackendKind::kMsync,
                             grow_by);
        if (!r.ok()) _exit(4);
        const uint64_t growths_before = log->growths.load();
        std::vector<uint64_t> live(model.begin(), model.end());
        uint64_t rng = 0x9E3779B97F4A7C15ull * (iteration + 1);
        size_t drain_to = 0;
        progress.ready.store(1);
        for (uint64_t n = 0; n < kMaxOps; ++n) {
          rng ^= rng << 13;
          rng ^= rng >> 7;
          rng ^= rng << 17;
          OpRecord rec;
          if (live.size() <= drain_to) drain_to = 0;
          if (drain_to == 0 && (live.size() < 50 || rng % 5 < 3)) {
            const size_t size = rng % 29 == 0 ? 70000 + rng % 100000 : 16 + (rng >> 8) % 2000;
            void* p = r->heap->Allocate(size);
            if (p == nullptr) {  // full: free half, then fill again
              log->full_heaps.fetch_add(1);
              progress.user[0].fetch_add(1);
              drain_to = live.size() / 2;
              continue;
            }
            rec = {r->pool->offset_of(p), 1};
            live.push_back(rec.offset);
          } else {
            const size_t k = (rng >> 12) % live.size();
            rec = {live[k], 0};
            if (!r->heap->Free(r->pool->at(live[k])).ok()) _exit(5);
            live[k] = live.back();
            live.pop_back();
          }
          if (r->pool->growths() != 0 &&
              log->growths.load() != growths_before + r->pool->growths()) {
            progress.user[0].fetch_add(1);
          }
          log->growths.store(growths_before + r->pool->growths());
          log->records[log->ops.load()] = rec;
          log->ops.fetch_add(1);
          if (planted) log->durable_ops.store(log->ops.load());
          if (log->ops.load() % kOpsPerEpoch == 0) {
            log->advancing_from.store(log->ops.load() + 1);
            if (!r->epochs->Advance().ok()) _exit(6);
            log->durable_ops.store(log->ops.load());
            log->advancing_from.store(0);
          }
        }
        _exit(7);  // ran out of log space before the kill
      },
      [&](int, const KillProgress&) -> absl::Status {
        auto r = OpenRuntime(path);
        if (!r.ok()) return r.status();
        if (auto c = r->heap->Check(); !c.ok()) return c;
        const std::set<uint64_t> got = Walk(*r->heap);
        const std::set<uint64_t> durable = Apply(model, *log, log->durable_ops.load());
        const uint64_t adv = log->advancing_from.load();
        const bool ok = got == durable || (adv != 0 && got == Apply(model, *log, adv - 1));
        if (!ok) {
          for (uint64_t b : got) leaked += durable.count(b) == 0;
          for (uint64_t b : durable) resurrected += got.count(b) == 0;
          return absl::DataLossError(absl::StrCat("heap walk differs from the last completed ",
                                                  "epoch: ", leaked, " blocks live that should ",
                                                  "not be, ", resurrected, " missing"));
        }
        total_ops += log->ops.load();
        model = got;
        log->ops.store(0);
        log->durable_ops.store(0);
        log->advancing_from.store(0);
        return absl::OkStatus();
      });
  tally.live = model.size();
  tally.full_heaps = log->full_heaps.load();
  tally.growths = log->growths.load();
  munmap(log, sizeof(OpLog));
  return st;
}

int Kills() {
  const char* env = std::getenv("PMRT_KILLS");
  return env ? std::atoi(env) : 500;
}

TEST(AllocKillTest, NoLeakNoResurrectionAcrossSigkill) {
  KillTally t;
  EXPECT_OK(RunKills(Kills(), /*planted=*/false, t));
  EXPECT_EQ(t.leaked, 0u);
  EXPECT_EQ(t.resurrected, 0u);
  std::printf(
      "%d kills (msync and pmem children), %lu heap operations, %lu blocks live at the "
      "end\n",
      Kills(), t.total_ops, t.live);
}

// The same over a 4 MiB pool that fills again and again: full heaps, gathered blocks and
// returned chunks under the kills, `Heap::Check` and the exact walk after each.
TEST(AllocKillTest, AHeapThatFillsLosesNothingAcrossSigkill) {
  KillTally t;
  const int kills = std::max(20, Kills() * 2 / 5);
  EXPECT_OK(RunKills(kills, /*planted=*/false, t, 4 << 20));
  EXPECT_EQ(t.leaked, 0u);
  EXPECT_EQ(t.resurrected, 0u);
  EXPECT_GT(t.full_heaps, 0u) << "the pool never filled";
  std::printf("%d kills over a filling 4 MiB pool, %lu heap operations, %lu full heaps\n", kills,
              t.total_ops, t.full_heaps);
}

// Its negative control: operations reported durable before their epoch is are caught.
TEST(AllocKillNegativeControl, OperationsReportedDurableTooEarlyAreCaught) {
  KillTally t;
  EXPECT_THAT(RunKills(20, /*planted=*/true, t),
              testing::StatusIs(absl::StatusCode::kDataLoss, "heap walk differs"));
}

// A 2 MiB pool that grows by 256 KiB whenever its heap is full, up to 24 MiB, then fills: kills
// land in growths (file extended, segment written, size committed) and in allocations from grown
// segments; every reopen finds a size the pool committed, `Heap::Check` passes and the walk is
// the last completed epoch's.
TEST(AllocKillTest, APoolThatGrowsLosesNothingAcrossSigkill) {
  KillTally t;
  const int kills = std::max(20, Kills() * 2 / 5);
  EXPECT_OK(RunKills(kills, /*planted=*/false, t, 2 << 20, Pool::kMinGrowth));
  EXPECT_EQ(t.leaked, 0u);
  EXPECT_EQ(t.resurrected, 0u);
  EXPECT_GT(t.growths, static_cast<uint64_t>(kills / 20)) << "the pool hardly grew";
  // (A short loop, the sanitizer build's, may end before the pool reaches its largest size.)
  if (kills >= 100) {
    EXPECT_GT(t.full_heaps, 0u) << "the pool never filled at its largest";
  }
  std::printf(
      "%d kills over a 2 MiB pool growing to 24 MiB, %lu heap operations, %lu growths, "
      "%lu full heaps\n",
      kills, t.total_ops, t.growths, t.full_heaps);
}

}  // namespace
}  // namespace pmrt::alloc
