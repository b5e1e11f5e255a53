// Transactions under the crash simulator. One or two workers (real threads in lock step) run
// transactions over a small persistent root: 48 words and 6 object slots. A transaction spans
// several steps — it writes words, allocates an object into an empty slot (pnew inside the
// transaction), changes an object in place (add), or frees one (pdelete) — and ends with commit
// or abort; between its steps the other worker's transactions, reclamation cycles (while
// transactions are open) and epoch advances (while none is) interleave. Small log blocks
// (4 KiB), and words going cold at every cycle, exercise block chaining, reuse, snapshots and
// the compacted log.
//
// Oracle, at every crash image, after recovery: the words and objects equal the state after the
// last transaction whose commit returned, or that plus the transaction whose commit was running
// (only then); never anything else. The heap holds exactly the live objects of that state plus
// the engine's own blocks (no leak, nothing lost). Every twentieth image also crashes during
// recovery and during a continuation (transactions, a reclamation, an advance) after it.
// The mutation gate disables each persistence site of txn/ in turn; each must make this fail.
#include <array>
#include <cstdio>
#include <map>
#include <set>

#include "alloc/allocator.h"
#include "alloc/internal/logged_line.h"
#include "epoch/epoch.h"
#include "epoch/pool.h"
#include "gtest/gtest.h"
#include "testing/sim.h"
#include "tests/txn/txn_runtime.h"
#include "tests/util/crash_suite.h"
#include "tests/util/lockstep.h"
#include "tests/util/test_util.h"
#include "txn/internal/engine_impl.h"
#include "txn/txn.h"

namespace pmrt::txn {
namespace {

constexpr size_t kPoolSize = 8 << 20;
constexpr int kW = 48;
constexpr int kO = 6;

struct Obj {
  uint64_t v[4];
  uint64_t pad[2];  // 48 bytes: a class whose blocks do not tile a chunk from its start
};
struct Root {
  uint64_t words[kW];
  uint64_t objs[kO];  // pool offsets of objects allocated in transactions; 0 = empty
};

struct State {
  std::array<uint64_t, kW> words{};
  std::array<uint64_t, kO> off{};
  std::array<std::array<uint64_t, 4>, kO> obj{};
  bool operator==(const State&) const = default;
};

// One worker's open transaction: its effects if it commits.
struct Pending {
  bool open = false;
  std::map<int, uint64_t> words;
  std::map<int, std::pair<uint64_t, std::array<uint64_t, 4>>> objs;  // slot -> (off, contents)
};

struct Model {
  State committed;
  Pending pending[2];
  int committing = -1;  // the worker inside commit(): its effects may or may not be there

  State With(const Pending& p) const {
    State s = committed;
    for (const auto& [i, v] : p.words) s.words[i] = v;
    for (const auto& [k, o] : p.objs) {
      s.off[k] = o.first;
      s.obj[k] = o.first == 0 ? std::array<uint64_t, 4>{} : o.second;
    }
    return s;
  }
  // The slot as the worker's transaction sees it.
  std::pair<uint64_t, std::array<uint64_t, 4>> Slot(int w, int k) const {
    auto it = pending[w].objs.find(k);
    if (it != pending[w].objs.end()) return it->second;
    return {committed.off[k], committed.obj[k]};
  }
  bool LockedByOther(int w, int word) const {
    for (int o = 0; o < 2; ++o)
      if (o != w && pending[o].open && pending[o].words.count(word)) return true;
    return false;
  }
  bool SlotLockedByOther(int w, int k) const {
    for (int o = 0; o < 2; ++o)
      if (o != w && pending[o].open && pending[o].objs.count(k)) return true;
    return false;
  }
  absl::Status Check(const State& got) const {
    if (got == committed) return absl::OkStatus();
    if (committing >= 0 && got == With(pending[committing])) return absl::OkStatus();
    const State& want = committed;
    for (int i = 0; i < kW; ++i) {
      if (got.words[i] != want.words[i]) {
        return absl::DataLossError(
            absl::StrCat("word ", i, " = ", got.words[i], ", expected ", want.words[i],
                         committing >= 0 ? " (or the committing transaction's state)" : ""));
      }
    }
    for (int k = 0; k < kO; ++k) {
      if (got.off[k] != want.off[k] || got.obj[k] != want.obj[k]) {
        return absl::DataLossError(absl::StrCat("object slot ", k, " = offset ", got.off[k], " [",
                                                got.obj[k][0], "], expected ", want.off[k], " [",
                                                want.obj[k][0], "]"));
      }
    }
    return absl::DataLossError("state differs");
  }
};

using pmrt::testing::EnvOr;
using pmrt::testing::Next;

// cold_after: Options::cold_after_epochs, and with it the touch slack (min(8, cold_after)).
// 0: a word goes cold as soon as its touch epoch has completed, and every first touch in an
// epoch CASes. 2: a declaration skips the CAS of a word touched in the 2 epochs before, and the
// reclaimer leaves words touched that recently hot.
Options TestOptions(uint64_t cold_after, size_t budget = 64 << 10) {
  Options o;
  o.background = false;
  o.block_size = 4096;
  o.log_budget = budget;
  o.log_limit = 2 << 20;  // the schedule may go long without an advance
  o.cold_after_epochs = cold_after;
  o.adaptive_cold = false;
  return o;
}

Root* RootOf(Pool& pool) { return *pool.root<Root>(); }

State Read(Pool& pool) {
  State s;
  Root* r = RootOf(pool);
  for (int i = 0; i < kW; ++i) s.words[i] = r->words[i];
  for (int k = 0; k < kO; ++k) {
    s.off[k] = r->objs[k];
    if (s.off[k] != 0 && pool.contains(pool.at(s.off[k]), sizeof(Obj))) {
      const Obj* o = static_cast<const Obj*>(pool.at(s.off[k]));
      for (int j = 0; j < 4; ++j) s.obj[k][j] = o->v[j];
    }
  }
  return s;
}

// The heap holds exactly the state's objects and the engine's blocks.
absl::Status CheckHeap(testing::Runtime& r, const State& s) {
  std::set<uint64_t> want;
  for (uint64_t b : r.engine->OwnedBlocks()) want.insert(b);
  for (int k = 0; k < kO; ++k)
    if (s.off[k] != 0) want.insert(s.off[k]);
  return alloc::test_runtime::CheckBlocksAre(*r.heap, want);
}

// Declares the word at p in e's open transaction: on the default engine, half the time through
// txn::add (its inline path for hot words), otherwise e.Add (the general path).
absl::Status Declare(Engine& e, void* p, uint64_t r) {
  if (Engine::Default() == &e && (r & (uint64_t{1} << 40)) != 0) return add(p, 8);
  return e.Add(p, 8);
}

// One step of worker w's transaction on `e` (the engine whose pool `pool` is).
void Step(Engine& e, Pool& pool, Model& m, int w, uint64_t& rng) {
  Pending& p = m.pending[w];
  Root* root = RootOf(pool);
  uint64_t r = Next(rng);
  if (p.open && r % 4 == 0) {  // end it
    if (r % 9 == 0) {
      ASSERT_OK(e.Abort());
    } else {
      m.committing = w;
      absl::Status st = e.Commit();
      m.committing = -1;
      if (st.ok()) {
        m.committed = m.With(p);
      } else {  // out of log space: the transaction aborted
        ASSERT_EQ(st.code(), absl::StatusCode::kResourceExhausted) << st;
      }
    }
    p = Pending{};
    return;
  }
  if (!p.open) {
    ASSERT_OK(e.Begin());
    p.open = true;
  }
  for (int n = 1 + static_cast<int>(Next(rng) % 3); n > 0; --n) {
    r = Next(rng);
    if (r % 4 != 0) {  // a word
      const int i = static_cast<int>((r >> 8) % kW);
      if (m.LockedByOther(w, i)) continue;
      const uint64_t v = (r >> 16) | 1;
      ASSERT_OK(Declare(e, &root->words[i], r));
      root->words[i] = v;
      p.words[i] = v;
      continue;
    }
    const int k = static_cast<int>((r >> 8) % kO);
    if (m.SlotLockedByOther(w, k)) continue;
    auto [off, contents] = m.Slot(w, k);
    if (off == 0) {  // allocate into the empty slot, inside the transaction
      Obj* o = static_cast<Obj*>(alloc::tls_tx_scope->TxAllocate(sizeof(Obj), alignof(Obj)));
      ASSERT_NE(o, nullptr);
      for (int j = 0; j < 4; ++j) o->v[j] = contents[j] = (r >> 12) + j;
      const uint64_t noff = pool.offset_of(o);
      ASSERT_OK(e.Add(&root->objs[k], 8));
      root->objs[k] = noff;
      p.objs[k] = {noff, contents};
    } else if ((r >> 20) % 3 == 0) {  // free it
      ASSERT_OK(alloc::tls_tx_scope->TxFree(pool.at(off)));
      ASSERT_OK(e.Add(&root->objs[k], 8));
      root->objs[k] = 0;
      p.objs[k] = {0, {}};
    } else {  // change a field in place
      Obj* o = static_cast<Obj*>(pool.at(off));
      const int j = static_cast<int>((r >> 24) % 4);
      ASSERT_OK(Declare(e, &o->v[j], r));
      o->v[j] = contents[j] = (r >> 30) | 2;
      p.objs[k] = {off, contents};
    }
  }
}

absl::StatusOr<testing::Runtime> OpenImage(void* base, const PoolOptions& po, uint64_t cold_after) {
  auto pool = Pool::OpenInMemory(base, kPoolSize, "txn-crash", po, "crash-image");
  if (!pool.ok()) return pool.status();
  return testing::Attach(std::move(*pool), TestOptions(cold_after));
}

absl::Status CheckRecovered(testing::Runtime& r, const Model& m) {
  State got = Read(*r.pool);
  if (auto st = m.Check(got); !st.ok()) return st;
  return CheckHeap(r, got);
}

// Recovery under crashes, then a short continuation under crashes.
absl::Status CheckNested(CrashImage& img, const Model& outer, uint64_t images_so_far,
                         uint64_t cold_after) {
  Model after;
  bool recovered = false;
  Sim::Options o = pmrt::testing::NestedSimOptions(0.3);
  o.max_images = images_so_far + 30;  // a nested run is cheap next to the crash points it adds
  auto handler = [&](CrashImage& inner) -> absl::Status {
    auto r = OpenImage(inner.base(), pmrt::testing::EadrPoolOptions(), cold_after);
    if (!r.ok()) return r.status();
    return CheckRecovered(*r, recovered ? after : outer);
  };
  return pmrt::testing::RunNestedCheck(
      img, o,
      [&](Sim& nested) -> absl::Status {
        auto r = OpenImage(img.base(), pmrt::testing::SimPoolOptions(nested), cold_after);
        if (!r.ok()) return r.status();
        State got = Read(*r->pool);
        if (auto st = outer.Check(got); !st.ok()) return st;
        if (auto st = CheckHeap(*r, got); !st.ok()) return st;
        after.committed = got;
        recovered = true;
        uint64_t rng = img.id().fence * 977 + img.id().image + 3;
        Engine& e = *r->engine;
        for (int round = 0; round < 2; ++round) {
          for (int i = 0; i < 5; ++i) {
            // Engine-specific calls (the default engine is the outer one).
            Step(e, *r->pool, after, 0, rng);
            if (::testing::Test::HasFatalFailure()) return absl::OkStatus();
          }
          if (after.pending[0].open) {
            after.committing = 0;
            absl::Status cst = e.Commit();
            after.committing = -1;
            if (!cst.ok()) return cst;
            after.committed = after.With(after.pending[0]);
            after.pending[0] = Pending{};
          }
          if (auto rst = e.Reclaim(/*advance=*/true); !rst.ok()) return rst;
        }
        return absl::OkStatus();
      },
      handler);
}

struct Config : pmrt::testing::CrashConfig {
  Config() {
    nested_every = 50;
    options.max_single_line_images = 4;
    options.random_images = 4;
    options.exhaustive_max_lines = 5;  // more crash points rather than all subsets at a few
  }
  uint64_t cold_after = 0;   // TestOptions
  size_t budget = 64 << 10;  // TestOptions (the workers' engine only)
  uint64_t picks = 16;       // the schedule's: 0 an advance, 1 a reclamation cycle, else a step
  // With options.pmem, how the seam writes records (persist.h, RecordWrites): the one-word
  // commit and the small commit streamed (kStream) or written back with clwb (kFlush).
  RecordWrites writes = RecordWrites::kFlush;
};

// A configuration whose seam models persistent memory (Sim::Options::pmem): the commit paths
// that run on the pmem backend (the one-word commit, streamed records) run under the simulator.
Config PmemConfig(RecordWrites writes) {
  Config cfg;
  cfg.options.pmem = true;
  cfg.writes = writes;
  return cfg;
}

struct Outcome : pmrt::testing::CrashOutcome {
  uint64_t commits = 0, cycles = 0, full_cycles = 0, snapshots = 0, lines_marked = 0,
           lines_unmarked = 0;
  uint64_t padded = 0;           // records of one declaration padded to a line, seen in the logs
  uint64_t blocks_returned = 0;  // log blocks given back to the heap during the run
};

Outcome RunCrash(const Config& cfg) {
  Model model;
  return pmrt::testing::RunUnderSim<Outcome>(
      kPoolSize, cfg.options, cfg.target_images,
      [&](Sim& sim, PoolOptions po) -> absl::StatusOr<testing::Runtime> {
        po.record_writes = cfg.writes;
        auto pool = Pool::CreateInMemory(sim.working(), kPoolSize, "txn-crash", po, "sim-pool");
        if (!pool.ok()) return pool.status();
        auto rt = testing::Attach(std::move(*pool), TestOptions(cfg.cold_after, cfg.budget));
        if (!rt.ok()) return rt;
        (void)RootOf(*rt->pool);
        EXPECT_OK(rt->epochs->Sync());
        return rt;
      },
      [&](Sim& sim, CrashImage& img) -> absl::Status {
        if (cfg.nested_every > 0 && img.id().image % cfg.nested_every == 5) {
          return CheckNested(img, model, sim.stats().images, cfg.cold_after);
        }
        auto r = OpenImage(img.base(), pmrt::testing::EadrPoolOptions(), cfg.cold_after);
        if (!r.ok()) return r.status();
        return CheckRecovered(*r, model);
      },
      [&](Sim& sim, testing::Runtime& rt, Outcome& out) {
        Engine& engine = *rt.engine;
        uint64_t returned = 0, reclaims = 0;
        // The crash images cover line-ending records (docs/txn.md): the stamps of the padded
        // records of one declaration found in the logs before each reclamation and at the end.
        std::set<uint64_t> padded;
        auto see_padded = [&] {
          for (const txn_internal::RecordHeader* h : testing::ThreadLogRecords(*rt.pool)) {
            const testing::RecordShape shape = testing::ShapeOf(h);
            if (shape.one_word() && shape.pad_words != 0) padded.insert(h->stamp);
          }
        };
        {
          auto rngs = pmrt::testing::WorkerRngs(cfg.threads, sim.options().seed, 7919);
          pmrt::testing::Lockstep workers(
              cfg.threads, [&](int t) { Step(engine, *rt.pool, model, t, rngs[t]); });
          pmrt::testing::RunSchedule(
              sim, cfg.target_images, workers, cfg.threads, sim.options().seed + 5, cfg.picks,
              [&](uint64_t pick, uint64_t& sched) {
                if (pick == 0) {
                  if (!model.pending[0].open && !model.pending[1].open) {
                    EXPECT_OK(rt.epochs->Advance());
                  }
                } else if (pick == 1) {
                  see_padded();
                  EXPECT_OK(engine.Reclaim(/*advance=*/false));
                  // Sometimes the next records go to new blocks at once: the blocks just freed
                  // are reused before any other fence (the window a missing head fence opens).
                  if (Next(sched) % 2 == 0) engine.SealLogsForTesting();
                  // Every fourth cycle, the free blocks but the four most recently freed go
                  // back to the heap (table lines undo-logged in this epoch), and later blocks
                  // reuse their table entries. (Its own count, not the schedule's generator:
                  // the schedule stays what the gate's kills were measured with.)
                  if (++reclaims % 4 == 0) returned += engine.GiveBackLogBlocksForTesting(4);
                } else {
                  return false;
                }
                return true;
              },
              [] { return !::testing::Test::HasFailure(); });
          // Leave no transaction open (the workers' threads end with the Lockstep).
          for (int t = 0; t < cfg.threads; ++t) {
            while (model.pending[t].open) workers.Step(t);
          }
        }
        const Stats s = engine.stats();
        out.commits = s.commits;
        out.cycles = s.cycles;
        out.full_cycles = s.full_cycles;
        out.snapshots = s.snapshots;
        out.lines_marked = s.lines_marked;
        out.lines_unmarked = s.lines_unmarked;
        see_padded();
        out.padded = padded.size();
        out.blocks_returned = returned;
      });
}

void Report(const char* what, const Outcome& r) {
  std::printf(
      "%s: %lu crash points (and %lu in nested recoveries), %lu images (max dirty lines %lu) in "
      "%.2f s (%lu commits, %lu "
      "snapshots, %lu cycles, %lu full; fast lines %lu marked, %lu unmarked; %lu records padded "
      "to a line; %lu log blocks given back)\n",
      what, r.stats.crash_points, r.stats.nested_crash_points, r.stats.images,
      r.stats.max_dirty_lines, r.seconds, r.commits, r.snapshots, r.cycles, r.full_cycles,
      r.lines_marked, r.lines_unmarked, r.padded, r.blocks_returned);
}

TEST(TxnCrashTest, OneThread) {
  const auto cfg = pmrt::testing::MainRunConfig<Config>(1, EnvOr("PMRT_TXN_SEED", 1), 100000);
  const Outcome r = RunCrash(cfg);
  ASSERT_NO_FATAL_FAILURE(pmrt::testing::ExpectFinishedRun(
      r, cfg.target_images, [](const Outcome& o) { Report("txn, 1 thread", o); }));
  EXPECT_GT(r.full_cycles, 0u);
  EXPECT_GT(r.cycles, r.full_cycles) << "incremental cycles too";
  EXPECT_GT(r.padded, 0u) << "no record of one declaration padded to its line";
  EXPECT_GT(r.blocks_returned, 0u) << "no log block went back to the heap";
}

TEST(TxnCrashTest, TwoThreads) {
  const auto cfg = pmrt::testing::MainRunConfig<Config>(2, EnvOr("PMRT_TXN_SEED", 3), 100000);
  const Outcome r = RunCrash(cfg);
  ASSERT_NO_FATAL_FAILURE(pmrt::testing::ExpectFinishedRun(
      r, cfg.target_images, [](const Outcome& o) { Report("txn, 2 threads", o); }));
  EXPECT_GT(r.padded, 0u) << "no record of one declaration padded to its line";
}

// The commit paths of persistent memory (the pmem backend), run by the simulator with their own
// code: the one-word commit written back with clwb and padded to its line, the general small
// commit flushed; and streamed (non-temporal stores), the one-word commit and the small commit.
// A main run on the pmem seam with `writes` (2 threads): it must reach each of `sites`.
Outcome RunOnPmem(RecordWrites writes, uint64_t seed, const char* label,
                  const std::vector<Site>& sites) {
  Config cfg = PmemConfig(writes);
  cfg.threads = 2;
  cfg.options.seed = EnvOr("PMRT_TXN_SEED", seed);
  cfg.target_images = pmrt::testing::MainImages(60000) / 2;
  cfg.options.max_images_per_point = pmrt::testing::kMainImagesPerPoint;
  const Outcome r = RunCrash(cfg);
  pmrt::testing::ExpectFinishedRun(r, cfg.target_images,
                                   [label](const Outcome& o) { Report(label, o); });
  for (const Site& site : sites) {
    EXPECT_EQ(r.sites.count(site.id), 1u) << site.name << " not reached";
  }
  return r;
}

TEST(TxnCrashTest, TwoThreadsOnPmemWithClwb) {
  const Outcome r = RunOnPmem(RecordWrites::kFlush, 11, "txn, 2 threads, pmem clwb",
                              {txn_internal::kOneClwb, txn_internal::kOneFence,
                               txn_internal::kSmallFlush, txn_internal::kSmallFence});
  EXPECT_GT(r.padded, 0u) << "no record of one declaration padded to its line";
}

TEST(TxnCrashTest, TwoThreadsOnPmemStreamed) {
  const Outcome r =
      RunOnPmem(RecordWrites::kStream, 13, "txn, 2 threads, pmem stream",
                {txn_internal::kOneFence, txn_internal::kStreamHead, txn_internal::kStreamPairs,
                 txn_internal::kStreamOdd, txn_internal::kStreamRuns, txn_internal::kStreamFence});
  EXPECT_EQ(r.padded, 0u) << "streamed records are not padded";
}

// The touch slack: words declared without a CAS because they were touched in the two epochs
// before stay hot through every cycle that runs while their transaction is open.
TEST(TxnCrashTest, TwoThreadsWithTouchSlack) {
  auto cfg = pmrt::testing::MainRunConfig<Config>(2, EnvOr("PMRT_TXN_SEED", 5), 30000);
  cfg.cold_after = 2;
  const Outcome r = RunCrash(cfg);
  ASSERT_NO_FATAL_FAILURE(pmrt::testing::ExpectFinishedRun(
      r, cfg.target_images, [](const Outcome& o) { Report("txn, 2 threads, touch slack 2", o); }));
  EXPECT_GT(r.full_cycles, 0u);
}

// Its negative control: a reclaimer whose cold age ignores the slack makes a word an open
// transaction declared (without a CAS) go cold; its line, flushed with the transaction's
// uncommitted value, is then not undone by any record.
// One logic mutant's gate: the crash suite run with `cfg` must fail with it.
void ExpectGateKills(const Site& mutant, Config cfg, const char* label) {
  cfg.target_images = EnvOr("PMRT_GATE_IMAGES", 40000);
  const auto survivors = pmrt::testing::RunMutationGate(
      {{mutant.id, mutant.name}}, [&] { return RunCrash(cfg); }, label);
  EXPECT_TRUE(survivors.empty()) << ::testing::PrintToString(survivors);
}

TEST(TxnCrashTest, MutationGateKillsTheTouchSlackMutant) {
  Config cfg;
  cfg.threads = 2;
  cfg.cold_after = 2;
  ExpectGateKills(txn_internal::kSlackMutant, cfg, "txn touch slack");
}

// Fast lines (docs/txn.md, "Fast lines"): frequent full cycles (a budget always exceeded) and
// advances, and a cold age of 1, so that lines are marked fast, declared on txn::add's inline
// path without their slots, and unmarked by cycles that run while such a transaction is open.
Config FastLinesConfig() {
  Config cfg;
  cfg.threads = 2;
  cfg.cold_after = 1;
  cfg.budget = 4096;
  cfg.picks = 6;
  return cfg;
}

TEST(TxnCrashTest, TwoThreadsWithFastLines) {
  Config cfg = FastLinesConfig();
  cfg.options.seed = EnvOr("PMRT_TXN_SEED", 9);
  cfg.target_images = pmrt::testing::MainImages(60000) / 2;
  const Outcome r = RunCrash(cfg);
  ASSERT_NO_FATAL_FAILURE(pmrt::testing::ExpectFinishedRun(
      r, cfg.target_images, [](const Outcome& o) { Report("txn, 2 threads, fast lines", o); }));
  EXPECT_GT(r.lines_marked, 0u);
  EXPECT_GT(r.lines_unmarked, 0u);
}

// (txn.mutant.fast_line_freed, the same for a line a free unmarked, needs a free and another
// thread's fast-path declaration in one line at the right moment, which this schedule does not
// reach: TxnTest.AFreeUnmarksTheLineWithAGracePeriodForTheOtherWordsOfIt sets it up and kills it.)
// Its negative control: a reclaimer that makes the words of a line cold as it unmarks it,
// without waiting for the epoch of the unmarking, makes a word cold that an open transaction
// declared on the fast path; its line, flushed with the uncommitted value, is undone by no record.
TEST(TxnCrashTest, MutationGateKillsTheFastLineGraceMutant) {
  ExpectGateKills(txn_internal::kGraceMutant, FastLinesConfig(), "txn fast lines");
}

// The gate's explicit lists: the persistence sites each configuration reaches (the sim backend's
// generic seam; the pmem seam with clwb; the pmem seam streamed). A site added to txn/ that a
// configuration reaches without an entry here fails the gate, as does one no longer reached.
const std::vector<Site> kGenericSites = {
    txn_internal::kSnapshotFlush, txn_internal::kSnapshotFence, txn_internal::kCommitFlush,
    txn_internal::kCommitFence,   txn_internal::kSmallFlush,    txn_internal::kSmallFence,
    txn_internal::kCompactFlush,  txn_internal::kColdFlush,     txn_internal::kCompactFence,
    txn_internal::kDescFlush,     txn_internal::kDescFence,     txn_internal::kHeadMoveFlush,
    txn_internal::kHeadMoveFence, txn_internal::kTableFlush,    txn_internal::kBlockFlush,
    txn_internal::kLinkFlush,     txn_internal::kHeadFlush,     txn_internal::kCloseWriteBack};
const std::vector<Site> kClwbOnlySites = {txn_internal::kOneClwb, txn_internal::kOneFence};
const std::vector<Site> kStreamOnlySites = {txn_internal::kOneFence,    txn_internal::kStreamHead,
                                            txn_internal::kStreamPairs, txn_internal::kStreamOdd,
                                            txn_internal::kStreamRuns,  txn_internal::kStreamFence};

std::vector<Site> Plus(std::vector<Site> a, const std::vector<Site>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

TEST(TxnCrashTest, MutationGateKillsEverySite) {
  Config base;
  base.threads = 2;
  base.target_images = 3000;
  Outcome baseline = RunCrash(base);
  ASSERT_TRUE(baseline.failures.empty()) << baseline.failures[0].ToString();
  // The logic mutants (negative controls): no persistence site, so add them by name.
  const auto sites = pmrt::testing::ExpectSites(
      baseline.sites, "txn.", kGenericSites,
      {txn_internal::kOrderMutant, txn_internal::kRuleMutant, txn_internal::kStampMutant,
       txn_internal::kSoloMutant, alloc_internal::kDirtyBitmapMark,
       alloc_internal::kDirtyBitmapInit, txn_internal::kReturnLineMutant});
  const auto survivors = pmrt::testing::RunMutationGate(
      sites,
      [] {
        Config cfg;
        cfg.threads = 2;
        cfg.target_images = EnvOr("PMRT_GATE_IMAGES", 40000);
        return RunCrash(cfg);
      },
      "txn");
  EXPECT_TRUE(survivors.empty()) << ::testing::PrintToString(survivors);
}

}  // namespace
}  // namespace pmrt::txn

namespace pmrt::txn {
namespace {

// The commit paths of persistent memory under the gate: each site only they reach (the one-word
// commit's clwb and fence, the streamed records' stores and fence) disabled in turn, in the
// configuration that reaches it, must make the suite fail.
void ExpectPmemGateKills(RecordWrites writes, const std::vector<Site>& only, const char* label) {
  Config base = PmemConfig(writes);
  base.threads = 2;
  base.options.seed = 11;
  base.target_images = 3000;
  const Outcome baseline = RunCrash(base);
  ASSERT_TRUE(baseline.failures.empty()) << baseline.failures[0].ToString();
  (void)pmrt::testing::ExpectSites(baseline.sites, "txn.", Plus(kGenericSites, only));
  std::map<uint32_t, std::string> mutants;
  for (const Site& s : only) mutants[s.id] = s.name;
  const auto survivors = pmrt::testing::RunMutationGate(
      mutants,
      [&] {
        Config cfg = PmemConfig(writes);
        cfg.threads = 2;
        cfg.options.seed = 11;
        cfg.target_images = EnvOr("PMRT_GATE_IMAGES", 40000) / 2;
        return RunCrash(cfg);
      },
      label);
  EXPECT_TRUE(survivors.empty()) << ::testing::PrintToString(survivors);
}

TEST(TxnCrashTest, MutationGateKillsEveryPmemClwbSite) {
  ExpectPmemGateKills(RecordWrites::kFlush, kClwbOnlySites, "txn pmem clwb");
}

TEST(TxnCrashTest, MutationGateKillsEveryPmemStreamSite) {
  ExpectPmemGateKills(RecordWrites::kStream, kStreamOnlySites, "txn pmem stream");
}

}  // namespace
}  // namespace pmrt::txn
