// Fine-grained checkpointing under the crash simulator: a sample persistent structure whose
// records are undo-logged in the external log, updated by one or two threads with epoch
// advances in between. At every crash image the recovered structure must equal the model
// snapshot taken at the start of the failed epoch (or, for a crash inside an advance, the
// snapshot at the start of the next one). Every twentieth image also crashes during recovery and
// after a few operations of the next execution. The mutation gate disables each persistence
// site of the epoch layer in turn; each must make this suite fail.
#include <array>
#include <cstdio>
#include <cstring>

#include "epoch/epoch.h"
#include "epoch/epoch_layout.h"
#include "epoch/incll.h"
#include "epoch/pool.h"
#include "gtest/gtest.h"
#include "testing/sim.h"
#include "tests/epoch/logged_records.h"
#include "tests/util/crash_suite.h"
#include "tests/util/lockstep.h"
#include "tests/util/test_util.h"

namespace pmrt::epoch {
namespace {

// 72 log blocks: more than one word of the log's block directory, so a block replayed at
// recovery and the first block of the next execution need not share a directory line.
constexpr size_t kPoolSize = 8 << 20;
constexpr size_t kLogAreaSize = 72 * kLogBlockSize;
using logged_records::kRecords;
using logged_records::kWords;
using logged_records::Record;
using logged_records::Records;

// Beside the records, InCLL-logged words: recovered lazily (on first access), so their
// rollback depends on the durable failed-epoch set long after the crash that failed them.
constexpr int kSlots = 32;
using Slot = InCLLWord<uint64_t>;
static_assert(sizeof(Slot) == 32);

struct State {
  std::array<std::array<uint64_t, kWords>, kRecords> records{};
  std::array<uint64_t, kSlots> slots{};
  bool operator==(const State&) const = default;
};

Slot* Slots(Pool& pool) { return reinterpret_cast<Slot*>(Records(pool) + kRecords); }

// The structure as recovery defines it: a slot whose tag is a failed epoch of an earlier run
// reads as its undo copy (its lazy recovery has not run yet).
State Read(Pool& pool, const EpochView& view) {
  State s;
  for (int r = 0; r < kRecords; ++r) {
    std::memcpy(s.records[r].data(), Records(pool)[r].words, sizeof(s.records[r]));
  }
  for (int i = 0; i < kSlots; ++i) {
    const Slot& w = Slots(pool)[i];
    const uint64_t t = w.tag();
    s.slots[i] = view.PredatesExecution(t) && view.IsFailed(t) ? w.undo.load() : w.Load();
  }
  return s;
}

// What the recovered structure may look like.
struct Model {
  State state{};           // now
  State epoch_start{};     // when the current epoch began
  bool advancing = false;  // inside Advance(): the next epoch's start is allowed too
  absl::Status Check(const State& got) const {
    if (got == epoch_start || (advancing && got == state)) return absl::OkStatus();
    const std::string alt = advancing ? " or the next epoch's start" : "";
    for (int r = 0; r < kRecords; ++r)
      for (int w = 0; w < kWords; ++w)
        if (got.records[r][w] != epoch_start.records[r][w]) {
          return absl::DataLossError(
              absl::StrCat("record ", r, " word ", w, " = ", got.records[r][w], ", expected ",
                           epoch_start.records[r][w], " (the failed epoch's start)", alt));
        }
    for (int i = 0; i < kSlots; ++i)
      if (got.slots[i] != epoch_start.slots[i]) {
        return absl::DataLossError(absl::StrCat("InCLL slot ", i, " = ", got.slots[i],
                                                ", expected ", epoch_start.slots[i],
                                                " (the failed epoch's start)", alt));
      }
    return absl::DataLossError("recovered state is neither allowed snapshot");
  }
};

using testing::Next;

// One operation: either log a record (first time in the epoch) and change a few of its words,
// or store to an InCLL slot (recovering it first if this run has not touched it yet).
RecoveryLocks g_recovery_locks;

void Operate(Manager& m, Model& model, uint64_t& rng) {
  Guard g(m);
  auto dirty = [&m](const void* a, size_t n) { m.RecordDirty(a, n); };
  if (Next(rng) % 3 == 0) {
    const int i = static_cast<int>(Next(rng) % kSlots);
    Slot& w = Slots(m.pool())[i];
    RecoverOnce(g_recovery_locks, &w, w.epoch, m, [&] { w.Recover(m, m.persister(), dirty); });
    const uint64_t v = Next(rng) % 100000 + 1;
    w.Store(v, g.epoch(), m.persister(), dirty);
    model.state.slots[i] = v;
    return;
  }
  Record* recs = Records(m.pool());
  const int r = static_cast<int>(Next(rng) % kRecords);
  absl::Status st = m.log().Snapshot(&recs[r], sizeof(Record), &recs[r].logged_epoch);
  ASSERT_TRUE(st.ok()) << st;
  for (int k = 0, n = 1 + static_cast<int>(Next(rng) % 3); k < n; ++k) {
    const int w = static_cast<int>(Next(rng) % kWords);
    recs[r].words[w] = Next(rng) % 100000 + 1;
    model.state.records[r][w] = recs[r].words[w];
  }
}

void AdvanceTracked(Manager& m, Model& model) {
  model.advancing = true;
  ASSERT_OK(m.Advance());
  model.advancing = false;
  model.epoch_start = model.state;
}

ManagerOptions Manual() {
  ManagerOptions o;
  o.interval = std::chrono::milliseconds(0);
  return o;
}

// An advance during which worker `w` enters a guard while the epoch is closing (before the
// advancer claims the dirty lists): the worker writes its own list back and fences (HelpFlush),
// then waits for the epoch to open. `help_only[w]` makes the worker's step that guard alone.
void AdvanceHelped(Manager& m, Model& model, testing::Lockstep& workers,
                   std::vector<char>& help_only, int w) {
  model.advancing = true;
  const uint64_t before = m.stats().helped_flushes;
  m.SetClosingHookForTesting([&](uint64_t) {
    help_only[w] = 1;
    workers.Start(w);
    while (m.stats().helped_flushes == before) std::this_thread::yield();
  });
  EXPECT_OK(m.Advance());
  m.SetClosingHookForTesting(nullptr);
  workers.Wait();
  model.advancing = false;
  model.epoch_start = model.state;
}

absl::StatusOr<State> RecoverImage(void* base, const PoolOptions& po,
                                   std::unique_ptr<Pool>* keep_pool = nullptr,
                                   std::unique_ptr<Manager>* keep_manager = nullptr) {
  auto pool = Pool::OpenInMemory(base, kPoolSize, "epoch-crash", po, "crash-image");
  if (!pool.ok()) return pool.status();
  auto m = Manager::Open(**pool, Manual());
  if (!m.ok()) return m.status();
  State s = Read(**pool, **m);
  if (keep_manager != nullptr) {
    *keep_pool = std::move(*pool);
    *keep_manager = std::move(*m);
  }
  return s;
}

// Recovery under a nested simulator, then two operations and an advance of the next execution,
// crashing at every fence of all of it. With `deep_every`, one inner image in that many is itself
// recovered under a
// simulator (depth 2), crashing at each of that recovery's fences: a crash in the next
// execution before any of its epochs completed makes that recovery widen the failed range the
// first one recorded, in place (Manager::RecordFailed). (Half its fences are crash points:
// depth-2 images are many per image above them.)
absl::Status CheckNested(CrashImage& img, const Model& outer, uint64_t deep_every) {
  Model after;
  bool recovered = false;
  auto handler = [&](CrashImage& inner) -> absl::Status {
    const Model& want = recovered ? after : outer;
    if (deep_every != 0 && inner.id().image % deep_every == 1) {
      return testing::RunNestedCheck(
          inner, testing::NestedSimOptions(0.5),
          [&](Sim& deeper) -> absl::Status {
            auto s = RecoverImage(inner.base(), testing::SimPoolOptions(deeper));
            if (!s.ok()) return s.status();
            return want.Check(*s);
          },
          [&](CrashImage& deepest) -> absl::Status {
            auto s = RecoverImage(deepest.base(), testing::EadrPoolOptions());
            if (!s.ok()) return s.status();
            return want.Check(*s);
          });
    }
    auto s = RecoverImage(inner.base(), testing::EadrPoolOptions());
    if (!s.ok()) return s.status();
    return want.Check(*s);
  };
  // A sample of the next execution's fences.
  return testing::RunNestedCheck(
      img, testing::NestedSimOptions(0.3),
      [&](Sim& nested) -> absl::Status {
        std::unique_ptr<Pool> pool;
        std::unique_ptr<Manager> m;
        auto s = RecoverImage(img.base(), testing::SimPoolOptions(nested), &pool, &m);
        if (!s.ok()) return s.status();
        if (auto st = outer.Check(*s); !st.ok()) return st;
        after.state = after.epoch_start = *s;
        recovered = true;
        uint64_t rng = img.id().fence * 131 + img.id().image + 7;
        for (int round = 0; round < 2; ++round) {
          for (int i = 0; i < 4; ++i) Operate(*m, after, rng);
          AdvanceTracked(*m, after);
        }
        Operate(*m, after, rng);
        after.advancing = true;  // the manager's destructor advances: everything may persist
        return absl::OkStatus();
      },
      handler);
}

// Fewer images per crash point, more crash points: the dirty set holds every record changed in
// the epoch, and spreading the budget over many fences covers more of the protocol.
Sim::Options SpreadOptions() {
  Sim::Options o;
  o.max_single_line_images = 8;
  o.random_images = 6;
  return o;
}

struct CrashConfig : testing::CrashConfig {
  CrashConfig() { options = SpreadOptions(); }
  // The boundary's write-back shared by this many threads (ManagerOptions::flush_threads) from
  // this many dirty ranges on (flush_parallel_from); and one advance in `help_every` (0: none)
  // during which a worker enters a guard while the epoch is closing, so that it writes its own
  // dirty list back (Manager::HelpFlush).
  int flush_threads = 1;
  size_t flush_parallel_from = 1024;
  uint64_t help_every = 0;
  // One nested image in this many (0: none) recovered again under a simulator (CheckNested).
  uint64_t deep_every = 0;
};

using testing::CrashOutcome;
using testing::EnvOr;

// The pool and its manager, as the workload uses them (the manager is destroyed first).
struct Runtime {
  std::unique_ptr<Pool> pool;
  std::unique_ptr<Manager> m;
};

// Drives `threads` workers one operation at a time (a seeded schedule), with an epoch advance
// every few operations, until the simulator has built `target_images` images.
CrashOutcome RunCrash(const CrashConfig& cfg) {
  Model model;
  return testing::RunUnderSim<CrashOutcome>(
      kPoolSize, cfg.options, cfg.target_images,
      [&cfg](Sim& sim, PoolOptions po) -> absl::StatusOr<Runtime> {
        po.log_area_size = kLogAreaSize;
        Runtime rt;
        auto pool = Pool::CreateInMemory(sim.working(), kPoolSize, "epoch-crash", po, "sim-pool");
        if (!pool.ok()) return pool.status();
        rt.pool = std::move(*pool);
        ManagerOptions mo = Manual();
        mo.flush_threads = cfg.flush_threads;
        mo.flush_parallel_from = cfg.flush_parallel_from;
        auto m = Manager::Open(*rt.pool, mo);
        if (!m.ok()) return m.status();
        rt.m = std::move(*m);
        return rt;
      },
      [&](Sim&, CrashImage& img) -> absl::Status {
        if (cfg.nested_every > 0 && img.id().image % cfg.nested_every == 3) {
          return CheckNested(img, model, cfg.deep_every);
        }
        auto s = RecoverImage(img.base(), testing::EadrPoolOptions());
        if (!s.ok()) return s.status();
        return model.Check(*s);
      },
      [&](Sim& sim, Runtime& rt, CrashOutcome&) {
        auto rngs = testing::WorkerRngs(cfg.threads, sim.options().seed, 1000003);
        std::vector<char> help_only(cfg.threads, 0);
        testing::Lockstep workers(cfg.threads, [&](int t) {
          if (help_only[t] != 0) {
            help_only[t] = 0;
            Guard g(*rt.m);
            return;
          }
          Operate(*rt.m, model, rngs[t]);
        });
        // An odd seed starts with an advance: the first durable state write then meets the
        // area's header write with no other fence in between.
        if (sim.options().seed % 2 == 1) AdvanceTracked(*rt.m, model);
        uint64_t advances = 0;
        testing::RunSchedule(sim, cfg.target_images, workers, cfg.threads, sim.options().seed + 17,
                             8, testing::AdvanceOnPickZero([&] {
                               if (cfg.help_every != 0 && ++advances % cfg.help_every == 0) {
                                 AdvanceHelped(
                                     *rt.m, model, workers, help_only,
                                     static_cast<int>(advances / cfg.help_every % cfg.threads));
                               } else {
                                 AdvanceTracked(*rt.m, model);
                               }
                             }));
      });
}

CrashConfig WithImages(uint64_t images) {
  CrashConfig cfg;
  cfg.target_images = images;
  return cfg;
}

TEST(EpochCrashTest, OneThreadRecoversTheFailedEpochsStart) {
  const auto cfg = testing::MainRunConfig<CrashConfig>(1, 1, 200000);
  testing::ExpectFinishedRun(RunCrash(cfg), cfg.target_images, "1 thread");
}

// Two workers, the boundary's write-back shared by two threads when the epoch dirtied a few
// ranges (the advancer's share and a helper's, each fenced by its own thread), and one advance
// in three during which a worker writes its own dirty list back (HelpFlush).
CrashConfig SharedBoundary(CrashConfig cfg) {
  cfg.flush_threads = 2;
  cfg.flush_parallel_from = 4;
  cfg.help_every = 3;
  return cfg;
}

TEST(EpochCrashTest, TwoThreadsRecoverTheFailedEpochsStart) {
  const auto cfg = SharedBoundary(testing::MainRunConfig<CrashConfig>(2, 2, 200000));
  const CrashOutcome r = RunCrash(cfg);
  testing::ExpectFinishedRun(r, cfg.target_images, "2 threads, shared boundary");
  for (const char* name : {"epoch.boundary.batch", "epoch.boundary.share", "epoch.boundary.helper",
                           "epoch.boundary.help"}) {
    EXPECT_EQ(r.sites.count(Site(name).id), 1u) << name << " not reached";
  }
}

// Crashes during the recovery of a recovery: one nested image in eight recovered again under a
// simulator (the failed range widened in place: epoch.failed.widen.*).
TEST(EpochCrashTest, CrashesDuringTheRecoveryOfARecovery) {
  auto cfg = testing::MainRunConfig<CrashConfig>(1, 5, 100000);
  cfg.deep_every = 8;
  const CrashOutcome r = RunCrash(cfg);
  testing::ExpectFinishedRun(r, cfg.target_images, "1 thread, depth-2 recoveries");
  EXPECT_EQ(r.sites.count(Site("epoch.failed.widen.fence").id), 1u) << "no range widened";
}

// Manager::ClearFailedEpochs under the simulator: a pool with three recorded failed ranges has
// its set cleared, then advances. Every crash image opens (a crash: its own range is added
// last) with the three old ranges or with none, and every image from a fence after the call
// returned with none. Returns the images that broke that.
size_t RunClearScenario() {
  Sim::Options so;
  so.crash_points = Sim::CrashPoints::kNone;  // the setup
  auto sim_or = Sim::Create(kPoolSize, so);
  EXPECT_OK(sim_or);
  if (!sim_or.ok()) return 1;
  Sim& sim = **sim_or;
  auto pool = Pool::CreateInMemory(sim.working(), kPoolSize, "epoch-crash",
                                   testing::SimPoolOptions(sim), "sim-pool");
  EXPECT_OK(pool);
  if (!pool.ok()) return 1;
  auto m = Manager::Open(**pool, Manual());
  EXPECT_OK(m);
  if (!m.ok()) return 1;
  for (int i = 0; i < 6; ++i) EXPECT_OK((*m)->Advance());
  auto* area = static_cast<EpochAreaLayout*>((*pool)->region_base(PoolRegion::kEpoch));
  area->failed[0] = {1, 1};
  area->failed[1] = {3, 3};
  area->failed[2] = {5, 5};
  area->failed_count.store(3);
  (*pool)->persister().Persist(Site("test.clear.setup"), Site("test.clear.setup.fence"),
                               &area->failed_count,
                               offsetof(EpochAreaLayout, failed) + 3 * sizeof(FailedRange) -
                                   offsetof(EpochAreaLayout, failed_count));
  bool returned = false;
  sim.SetHandler([&](CrashImage& img) -> absl::Status {
    auto p = Pool::OpenInMemory(img.base(), kPoolSize, "epoch-crash", testing::EadrPoolOptions(),
                                "crash-image");
    if (!p.ok()) return p.status();
    auto mm = Manager::Open(**p, Manual());
    if (!mm.ok()) return mm.status();
    const size_t old = (*mm)->failed_ranges().size() - 1;  // this crash's range is the last
    if (old != 0 && (returned || old != 3)) {
      return absl::InternalError(absl::StrCat(old, " old failed ranges",
                                              returned ? " after ClearFailedEpochs returned" : ""));
    }
    return absl::OkStatus();
  });
  sim.SetCrashPoints(Sim::CrashPoints::kEveryFence);
  EXPECT_OK((*m)->ClearFailedEpochs());
  returned = true;
  EXPECT_OK((*m)->Advance());
  sim.SetCrashPoints(Sim::CrashPoints::kNone);
  EXPECT_GT(sim.stats().images, 0u);
  const size_t failures = sim.failures().size();
  m->reset();
  pool->reset();
  return failures;
}

TEST(EpochCrashTest, ClearingTheFailedSetIsAtomic) {
  EXPECT_EQ(RunClearScenario(), 0u);
  // Each of its two sites disabled: an image after the return still has the old ranges.
  for (const char* name : {"epoch.failed.clear.flush", "epoch.failed.clear.fence"}) {
    mutation::Disable(Site(name));
    EXPECT_GT(RunClearScenario(), 0u) << name << " disabled and no image noticed";
    mutation::EnableAll();
  }
}

// The gate's explicit list: every flush/fence/batch-flush site of the epoch layer (the pool's
// sites have their own gate). A site the suite reaches without an entry here fails the gate.
const std::vector<Site> kEpochSites = {
    Site("epoch.header.flush"),       Site("epoch.header.fence"),
    Site("epoch.failed.range.flush"), Site("epoch.failed.count.flush"),
    Site("epoch.failed.fence"),       Site("epoch.failed.widen.flush"),
    Site("epoch.failed.widen.fence"), Site("epoch.completed.flush"),
    Site("epoch.completed.fence"),    Site("epoch.boundary.batch"),
    Site("epoch.boundary.share"),     Site("epoch.boundary.helper"),
    Site("epoch.boundary.help"),      Site("epoch.log.block.flush"),
    Site("epoch.log.dir.flush"),      Site("epoch.log.entry.flush"),
    Site("epoch.log.entry.fence"),    Site("epoch.log.replay.flush"),
    Site("epoch.log.replay.fence"),   Site("epoch.log.free.flush")};

// The gate's two configurations, both with two workers and the shared boundary (each thread's
// log blocks and dirty lists exercised), seed 2 (even: no advance before the workers' first
// fences, header.fence's window). `deep`: one nested image in eight recovered again (the
// failed range widened in place, failed.widen.*); it reaches every site but boundary.help
// slowly (one advance in three is helped and the depth-2 recoveries take many images: over
// 100,000), which the shallow configuration reaches within about 32,000.
CrashConfig GateConfig(uint64_t images, bool deep) {
  CrashConfig cfg = SharedBoundary(WithImages(images));
  cfg.threads = 2;
  cfg.options.seed = 2;
  cfg.deep_every = deep ? 8 : 0;
  return cfg;
}

// Every site disabled in turn. A mutant runs the deep configuration and, if that does not kill
// it, the shallow one; the baseline runs both, and the sites they reach together are the list.
TEST(EpochCrashTest, MutationGateKillsEverySite) {
  CrashOutcome baseline = RunCrash(GateConfig(30000, /*deep=*/true));
  ASSERT_TRUE(baseline.failures.empty());
  const CrashOutcome shallow = RunCrash(GateConfig(40000, /*deep=*/false));
  ASSERT_TRUE(shallow.failures.empty());
  baseline.sites.insert(shallow.sites.begin(), shallow.sites.end());
  const auto survivors = testing::RunMutationGate(
      testing::ExpectSites(baseline.sites, "epoch.", kEpochSites,
                           {Site("epoch.mutant.dirty.logged_object")}),
      [] {
        // failed.fence (a rare interleaving) and the boundary's shared write-back are the
        // slowest of the deep run (under 25,000 images); boundary.help, of the shallow one
        // (~32,000).
        CrashOutcome r = RunCrash(GateConfig(30000, /*deep=*/true));
        if (!r.failures.empty()) return r;
        const uint64_t images = r.stats.images;
        r = RunCrash(GateConfig(60000, /*deep=*/false));
        r.stats.images += images;
        return r;
      },
      "epoch");
  EXPECT_TRUE(survivors.empty()) << ::testing::PrintToString(survivors);
}

}  // namespace
}  // namespace pmrt::epoch
