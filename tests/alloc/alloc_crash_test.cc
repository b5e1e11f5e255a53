// The persistent heap under the crash simulator: random allocations and frees (small blocks and
// extents) by one or two threads, with epoch advances. At every crash image, after recovery:
//   * the heap walk equals the model at the start of the failed epoch (no leak: frees of
//     completed epochs are free; no resurrection: allocations of the failed epoch are gone),
//   * Check() finds the metadata consistent,
//   * new allocations never return a block that is live (no double allocation).
// Every twentieth image also crashes during recovery and during the next run's operations.
// The mutation gate disables each persistence site of the allocator (and swaps its in-line
// store order) in turn; each must make this suite fail.
#include <cstdio>
#include <map>

#include "alloc/allocator.h"
#include "alloc/internal/logged_line.h"
#include "epoch/epoch.h"
#include "epoch/pool.h"
#include "epoch/sim.h"
#include "gtest/gtest.h"
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

uint64_t Next(uint64_t& s) {
  s ^= s << 13;
  s ^= s >> 7;
  s ^= s << 17;
  return s;
}

struct Runtime {
  std::unique_ptr<Pool> pool;
  std::unique_ptr<epoch::Manager> epochs;
  std::unique_ptr<Heap> heap;
};

absl::StatusOr<Runtime> OpenRuntime(void* base, const PoolOptions& po) {
  Runtime r;
  auto pool = Pool::OpenInMemory(base, kPoolSize, "alloc-crash", po, "crash-image");
  if (!pool.ok()) return pool.status();
  r.pool = std::move(*pool);
  epoch::ManagerOptions eo;
  eo.interval = std::chrono::milliseconds(0);
  auto m = epoch::Manager::Open(*r.pool, eo);
  if (!m.ok()) return m.status();
  r.epochs = std::move(*m);
  auto h = Heap::Open(*r.pool, *r.epochs);
  if (!h.ok()) return h.status();
  r.heap = std::move(*h);
  return r;
}

Live Walk(const Heap& h) {
  Live live;
  (void)h.Walk([&](const BlockInfo& b) { live[b.offset] = b.size; });
  return live;
}

// One operation: allocate (mostly small, sometimes an extent) or free a random live block.
void Operate(Heap& heap, Model& model, uint64_t& rng) {
  const uint64_t r = Next(rng);
  if (model.live.size() < 8 || r % 5 < 3) {
    const size_t size = r % 23 == 0 ? 64 * 1024 + r % (150 * 1024) : 1 + (r >> 8) % 3000;
    void* p = heap.Allocate(size);
    if (p == nullptr) return;  // full: a later free makes room
    model.live[heap.pool().offset_of(p)] = heap.UsableSize(p);
  } else {
    auto it = model.live.begin();
    std::advance(it, static_cast<long>((r >> 8) % model.live.size()));
    ASSERT_OK(heap.Free(heap.pool().at(it->first)));
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

absl::Status CheckNested(CrashImage& img, const Model& outer) {
  Model after;
  bool recovered = false;
  absl::Status first = absl::OkStatus();
  Sim::Options o;
  o.random_images = 1;
  o.exhaustive_max_lines = 4;
  o.max_single_line_images = 4;
  o.crash_points = Sim::CrashPoints::kRandom;
  o.probability = 0.3;
  auto handler = [&](CrashImage& inner) -> absl::Status {
    PoolOptions po;
    po.backend = BackendKind::kEadr;
    auto r = OpenRuntime(inner.base(), po);
    if (!r.ok()) return r.status();
    return CheckRecovered(*r, recovered ? after : outer);
  };
  auto st = img.RunNested(
      o,
      [&](Sim& nested) {
        PoolOptions po;
        po.backend = BackendKind::kSim;
        po.sim = &nested;
        auto r = OpenRuntime(img.base(), po);
        if (!r.ok()) {
          first = r.status();
          return;
        }
        Live got = Walk(*r->heap);
        first = outer.Check(got);
        if (!first.ok()) return;
        after.live = after.at_start = got;
        recovered = true;
        uint64_t rng = img.id().fence * 977 + img.id().image + 3;
        for (int round = 0; round < 2; ++round) {
          for (int i = 0; i < 6; ++i) Operate(*r->heap, after, rng);
          AdvanceTracked(*r->epochs, after);
        }
        Operate(*r->heap, after, rng);
        after.advancing = true;  // the runtime's destructors advance
      },
      handler);
  if (!first.ok()) return first;
  return st;
}

struct Config {
  Sim::Options options;
  uint64_t target_images = 30000;
  int threads = 1;
  int nested_every = 20;
  Config() {
    options.max_single_line_images = 8;
    options.random_images = 6;
  }
};

using Outcome = testing::CrashOutcome;
using testing::EnvOr;

Outcome RunCrash(const Config& cfg) {
  Outcome out;
  Sim::Options so = cfg.options;
  so.max_images = cfg.target_images;
  auto sim_or = Sim::Create(kPoolSize, so);
  EXPECT_OK(sim_or);
  if (!sim_or.ok()) return out;
  Sim& sim = **sim_or;
  const auto mode = sim.options().crash_points;
  sim.SetCrashPoints(Sim::CrashPoints::kNone);
  PoolOptions po;
  po.backend = BackendKind::kSim;
  po.sim = &sim;
  {
    auto pool = Pool::CreateInMemory(sim.working(), kPoolSize, "alloc-crash", po, "sim-pool");
    EXPECT_OK(pool);
  }
  auto rt = OpenRuntime(sim.working(), po);
  EXPECT_OK(rt);
  if (!rt.ok()) return out;
  Model model;
  sim.SetHandler([&](CrashImage& img) -> absl::Status {
    if (cfg.nested_every > 0 && img.id().image % cfg.nested_every == 5) {
      return CheckNested(img, model);
    }
    PoolOptions eadr;
    eadr.backend = BackendKind::kEadr;
    auto r = OpenRuntime(img.base(), eadr);
    if (!r.ok()) return r.status();
    return CheckRecovered(*r, model);
  });
  sim.SetCrashPoints(mode);
  const auto start = std::chrono::steady_clock::now();
  {
    std::vector<uint64_t> rngs(cfg.threads);
    for (int t = 0; t < cfg.threads; ++t) rngs[t] = sim.options().seed * 7919 + t + 1;
    testing::Lockstep workers(cfg.threads, [&](int t) { Operate(*rt->heap, model, rngs[t]); });
    uint64_t sched = sim.options().seed + 5;
    while (!sim.failed() && sim.stats().images < cfg.target_images) {
      const uint64_t pick = Next(sched) % 10;
      if (pick == 0) {
        AdvanceTracked(*rt->epochs, model);
      } else {
        workers.Step(static_cast<int>(pick % cfg.threads));
      }
    }
  }
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  sim.SetCrashPoints(Sim::CrashPoints::kNone);
  out.stats = sim.stats();
  out.failures = sim.failures();
  out.sites = sim.sites_seen();
  return out;
}

TEST(AllocCrashTest, OneThread) {
  Config cfg;
  cfg.target_images = EnvOr("PMRT_SIM_IMAGES", 100000) / 2;
  Outcome r = RunCrash(cfg);
  ASSERT_TRUE(r.failures.empty()) << r.failures[0].ToString();
  EXPECT_GE(r.stats.images, cfg.target_images);
  std::printf("alloc, 1 thread: %lu crash points, %lu images in %.2f s\n", r.stats.crash_points,
              r.stats.images, r.seconds);
}

TEST(AllocCrashTest, TwoThreads) {
  Config cfg;
  cfg.threads = 2;
  cfg.options.seed = 3;
  cfg.target_images = EnvOr("PMRT_SIM_IMAGES", 100000) / 2;
  Outcome r = RunCrash(cfg);
  ASSERT_TRUE(r.failures.empty()) << r.failures[0].ToString();
  EXPECT_GE(r.stats.images, cfg.target_images);
  std::printf("alloc, 2 threads: %lu crash points, %lu images in %.2f s\n", r.stats.crash_points,
              r.stats.images, r.seconds);
}

TEST(AllocCrashTest, MutationGateKillsEverySite) {
  Config base;
  base.target_images = 3000;
  Outcome baseline = RunCrash(base);
  ASSERT_TRUE(baseline.failures.empty()) << baseline.failures[0].ToString();
  const auto survivors = testing::RunMutationGate(
      testing::SitesWithPrefix(baseline.sites, "alloc.", {alloc_internal::kLineOrderSite}),
      [] {
        Config cfg;
        cfg.target_images = 60000;
        return RunCrash(cfg);
      },
      "alloc");
  EXPECT_TRUE(survivors.empty()) << ::testing::PrintToString(survivors);
}

}  // namespace
}  // namespace pmrt::alloc
