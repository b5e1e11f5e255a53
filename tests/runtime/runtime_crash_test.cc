// pmrt::Runtime under the crash simulator: transactions that mix word writes, allocations and
// frees (pnew/pdelete inside the transaction) and operations on a named index. One or two
// workers (real threads in lock step) run them; between their steps, epoch advances (while no
// transaction is open) and reclamation cycles interleave. The index's operations of a committed
// transaction are applied to the tree in place (epoch scope) and logged in its commit record:
// an epoch rolled back by a crash takes them with it, and recovery replays them from the record.
//
// Oracle, at every crash image, after the runtime's recovery: the words, the objects and the
// index equal the state after the last transaction whose commit returned, or that plus the
// transaction whose commit was running (only then); the heap holds exactly the live objects,
// the trees' nodes, values and descriptors and the engine's blocks (no leak, nothing lost); both
// trees pass their checks. Every twentieth image also crashes during the recovery and during a
// continuation (a reclamation and an advance) after it.
#include <array>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <map>
#include <optional>
#include <set>
#include <string>

#include "absl/strings/str_cat.h"
#include "alloc/allocator.h"
#include "epoch/epoch.h"
#include "epoch/pool.h"
#include "gtest/gtest.h"
#include "runtime/runtime.h"
#include "testing/sim.h"
#include "tests/alloc/heap_runtime.h"
#include "tests/util/crash_suite.h"
#include "tests/util/lockstep.h"
#include "tests/util/test_util.h"
#include "txn/internal/engine_impl.h"
#include "txn/internal/log_store.h"
#include "txn/txn.h"

namespace pmrt {
namespace {

using pmrt::testing::EnvOr;
using pmrt::testing::Next;

constexpr size_t kPoolSize = 8 << 20;
constexpr int kW = 16;    // words
constexpr int kO = 4;     // object slots, each named in the index as "obj<k>"
constexpr int kKeys = 8;  // plain keys "key<i>"
constexpr char kLayout[] = "pmrt-runtime";

struct Obj {
  uint64_t v[2];
};
struct Root {
  uint64_t words[kW];
  uint64_t objs[kO];  // pool offsets; 0 = empty
};

struct State {
  std::array<uint64_t, kW> words{};
  std::array<uint64_t, kO> off{};
  std::array<std::array<uint64_t, 2>, kO> obj{};
  std::map<std::string, std::string> index;
  bool operator==(const State&) const = default;
};

struct Pending {
  bool open = false;
  std::map<int, uint64_t> words;
  std::map<int, std::pair<uint64_t, std::array<uint64_t, 2>>> objs;
  std::map<std::string, std::optional<std::string>> keys;  // nullopt: removed
};

std::string ObjKey(int k) { return absl::StrCat("obj", k); }
std::string PlainKey(int i) { return absl::StrCat("key", i); }
std::string RefOf(uint64_t off) { return std::string(reinterpret_cast<const char*>(&off), 8); }

struct Model {
  State committed;
  Pending pending[2];
  int committing = -1;

  State With(const Pending& p) const {
    State s = committed;
    for (const auto& [i, v] : p.words) s.words[i] = v;
    for (const auto& [k, o] : p.objs) {
      s.off[k] = o.first;
      s.obj[k] = o.first == 0 ? std::array<uint64_t, 2>{} : o.second;
    }
    for (const auto& [key, v] : p.keys) {
      if (v.has_value()) {
        s.index[key] = *v;
      } else {
        s.index.erase(key);
      }
    }
    return s;
  }
  std::pair<uint64_t, std::array<uint64_t, 2>> Slot(int w, int k) const {
    auto it = pending[w].objs.find(k);
    if (it != pending[w].objs.end()) return it->second;
    return {committed.off[k], committed.obj[k]};
  }
  std::optional<std::string> Key(int w, const std::string& key) const {
    auto it = pending[w].keys.find(key);
    if (it != pending[w].keys.end()) return it->second;
    auto c = committed.index.find(key);
    return c == committed.index.end() ? std::nullopt : std::optional<std::string>(c->second);
  }
  bool Locked(int w, int word, int slot, const std::string& key) const {
    for (int o = 0; o < 2; ++o) {
      if (o == w || !pending[o].open) continue;
      if (word >= 0 && pending[o].words.count(word)) return true;
      if (slot >= 0 && pending[o].objs.count(slot)) return true;
      if (!key.empty() && pending[o].keys.count(key)) return true;
    }
    return false;
  }
  absl::Status Check(const State& got) const {
    if (got == committed) return absl::OkStatus();
    if (committing >= 0 && got == With(pending[committing])) return absl::OkStatus();
    for (int i = 0; i < kW; ++i) {
      if (got.words[i] != committed.words[i]) {
        return absl::DataLossError(
            absl::StrCat("word ", i, " = ", got.words[i], ", expected ", committed.words[i]));
      }
    }
    for (int k = 0; k < kO; ++k) {
      if (got.off[k] != committed.off[k] || got.obj[k] != committed.obj[k]) {
        return absl::DataLossError(absl::StrCat("object slot ", k, " = offset ", got.off[k],
                                                ", expected ", committed.off[k]));
      }
    }
    for (const auto& [k, v] : committed.index) {
      auto it = got.index.find(k);
      if (it == got.index.end()) return absl::DataLossError(absl::StrCat("index key ", k, " lost"));
      if (it->second != v) return absl::DataLossError(absl::StrCat("index key ", k, " changed"));
    }
    for (const auto& [k, v] : got.index) {
      if (!committed.index.count(k)) {
        return absl::DataLossError(absl::StrCat("index key ", k, " should not be there"));
      }
    }
    return absl::DataLossError("state differs");
  }
};

RuntimeOptions TestOptions() {
  RuntimeOptions o;
  o.epochs.interval = std::chrono::milliseconds(0);
  o.txn.background = false;
  o.txn.block_size = 4096;
  o.txn.log_budget = 64 << 10;
  o.txn.log_limit = 2 << 20;
  o.txn.cold_after_epochs = 0;
  o.txn.adaptive_cold = false;
  o.background_replay = false;  // (the simulator runs one thread at a time)
  return o;
}

Root* RootOf(Runtime& rt) { return *rt.root<Root>(); }
Index* IndexOf(Runtime& rt) { return *rt.find_index("idx"); }

std::vector<std::string> AllKeys() {
  std::vector<std::string> keys;
  for (int k = 0; k < kO; ++k) keys.push_back(ObjKey(k));
  for (int i = 0; i < kKeys; ++i) keys.push_back(PlainKey(i));
  return keys;
}

State Read(Runtime& rt, bool scan = true) {
  State s;
  Root* r = RootOf(rt);
  for (int i = 0; i < kW; ++i) s.words[i] = r->words[i];
  for (int k = 0; k < kO; ++k) {
    s.off[k] = r->objs[k];
    if (s.off[k] != 0 && rt.pool().contains_offset(s.off[k], sizeof(Obj))) {
      const auto* o = static_cast<const Obj*>(rt.pool().at(s.off[k]));
      s.obj[k] = {o->v[0], o->v[1]};
    }
  }
  // get() first: after a crash it answers from the replay journal (nothing applied yet); then
  // scan(), which applies every pending entry. The two must agree.
  Index* index = IndexOf(rt);
  std::map<std::string, std::string> got;
  for (const std::string& key : AllKeys()) {
    if (auto v = index->get(key)) got.emplace(key, *v);
  }
  if (!scan) {
    s.index = std::move(got);
    return s;
  }
  index->scan("", ~size_t{0}, [&](std::string_view k, std::string_view v) {
    s.index.emplace(std::string(k), std::string(v));
    return true;
  });
  if (got != s.index) s.index.emplace("<get and scan disagree>", "");
  return s;
}

// Collects the heap blocks a tree holds: its nodes and value objects.
class Blocks : public ds::TreeVisitor {
 public:
  explicit Blocks(Pool& pool, std::set<uint64_t>* out) : pool_(pool), out_(out) {}
  absl::Status Node(const void* node, size_t, bool, int) override { return Add(node); }
  absl::Status Value(const void* value, size_t, const void*, int) override { return Add(value); }

 private:
  absl::Status Add(const void* p) {
    if (!out_->insert(pool_.offset_of(p)).second) {
      return absl::DataLossError(absl::StrCat("block at ", pool_.offset_of(p), " reached twice"));
    }
    return absl::OkStatus();
  }
  Pool& pool_;
  std::set<uint64_t>* out_;
};

// The heap holds exactly the objects, the two trees and the engine's blocks.
absl::Status CheckHeap(Runtime& rt, const State& s) {
  std::set<uint64_t> want;
  for (uint64_t b : rt.engine().OwnedBlocks()) want.insert(b);
  for (int k = 0; k < kO; ++k)
    if (s.off[k] != 0) want.insert(s.off[k]);
  Blocks blocks(rt.pool(), &want);
  ds::DurableMasstree& index = IndexOf(rt)->tree();
  if (auto st = index.CheckInvariants(nullptr, &blocks); !st.ok()) return st;
  want.insert(index.descriptor());
  if (auto st = rt.catalog().CheckInvariants(nullptr, &blocks); !st.ok()) return st;
  want.insert(rt.catalog().descriptor());
  const auto& header = *static_cast<const RuntimeHeader*>(rt.pool().region_base(PoolRegion::kRoot));
  if (header.journal != 0) want.insert(header.journal);
  return alloc::test_runtime::CheckBlocksAre(rt.heap(), want);
}

// Set when the live tree disagrees with the model during the workload.
std::atomic<bool> g_diverged{false};

// One step of worker w's transaction.
void Step(Runtime& rt, Model& m, int w, uint64_t& rng) {
  txn::Engine& e = rt.engine();
  Pending& p = m.pending[w];
  Root* root = RootOf(rt);
  Index* index = IndexOf(rt);
  uint64_t r = Next(rng);
  if (p.open && r % 4 == 0) {
    if (r % 7 == 0) {
      ASSERT_OK(e.Abort());
      // The abort reverted the transaction's index operations: each key it touched is back to
      // its committed state (no other transaction holds it).
      for (const auto& [key, v] : p.keys) {
        auto c = m.committed.index.find(key);
        const std::optional<std::string> want =
            c == m.committed.index.end() ? std::nullopt : std::optional<std::string>(c->second);
        if (index->get(key) != want) g_diverged = true;
      }
    } else {
      m.committing = w;
      absl::Status st = e.Commit();
      m.committing = -1;
      if (st.ok()) {
        m.committed = m.With(p);
      } else {
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
    const uint64_t kind = r % 6;
    if (kind <= 1) {  // a word
      const int i = static_cast<int>((r >> 8) % kW);
      if (m.Locked(w, i, -1, "")) continue;
      const uint64_t v = (r >> 16) | 1;
      ASSERT_OK(e.Add(&root->words[i], 8));
      root->words[i] = v;
      p.words[i] = v;
    } else if (kind == 2) {  // an object slot, and its name in the index
      const int k = static_cast<int>((r >> 8) % kO);
      if (m.Locked(w, -1, k, ObjKey(k))) continue;
      auto [off, contents] = m.Slot(w, k);
      if (off == 0) {
        auto* o = static_cast<Obj*>(alloc::tls_tx_scope->TxAllocate(sizeof(Obj), alignof(Obj)));
        ASSERT_NE(o, nullptr);
        o->v[0] = contents[0] = (r >> 12) | 1;
        o->v[1] = contents[1] = (r >> 20) | 1;
        const uint64_t noff = rt.pool().offset_of(o);
        ASSERT_OK(e.Add(&root->objs[k], 8));
        root->objs[k] = noff;
        p.objs[k] = {noff, contents};
        ASSERT_OK(index->put(ObjKey(k), RefOf(noff)));
        p.keys[ObjKey(k)] = RefOf(noff);
      } else if ((r >> 24) % 2 == 0) {
        ASSERT_OK(alloc::tls_tx_scope->TxFree(rt.pool().at(off)));
        ASSERT_OK(e.Add(&root->objs[k], 8));
        root->objs[k] = 0;
        p.objs[k] = {0, {}};
        auto removed = index->remove(ObjKey(k));
        ASSERT_OK(removed);
        ASSERT_TRUE(*removed);
        p.keys[ObjKey(k)] = std::nullopt;
      } else {
        auto* o = static_cast<Obj*>(rt.pool().at(off));
        ASSERT_OK(e.Add(&o->v[0], 8));
        o->v[0] = contents[0] = (r >> 30) | 2;
        p.objs[k] = {off, contents};
      }
    } else {  // a plain key: put or remove
      const std::string key = PlainKey(static_cast<int>((r >> 8) % kKeys));
      if (m.Locked(w, -1, -1, key)) continue;
      if (kind <= 4) {
        const std::string v = absl::StrCat("v", r >> 40);
        ASSERT_OK(index->put(key, v));
        p.keys[key] = v;
      } else {
        auto removed = index->remove(key);
        ASSERT_OK(removed);
        // The tree disagrees with the model (an abort that left its change behind): the run
        // has failed, as a crash image's check would have.
        if (*removed != m.Key(w, key).has_value()) g_diverged = true;
        p.keys[key] = std::nullopt;
      }
    }
  }
}

absl::StatusOr<std::unique_ptr<Runtime>> OpenImage(void* base, const PoolOptions& po) {
  auto pool = Pool::OpenInMemory(base, kPoolSize, kLayout, po, "crash-image");
  if (!pool.ok()) return pool.status();
  return Runtime::Attach(std::move(*pool), TestOptions());
}

absl::Status CheckRecovered(Runtime& rt, const Model& m) {
  State got = Read(rt);
  if (auto st = m.Check(got); !st.ok()) return st;
  return CheckHeap(rt, got);
}

// The continuation after a recovery: the state read with get() alone (the replay journal
// answers), then new values put on half the plain keys (each put applies its key's pending entry
// first, epoch-scoped like the put), a sync, and scan() (which applies the rest). Every image of
// it must recover to the state before the puts or, once the sync returned, after them: an entry
// applied whose mark is lost would bring back its old value over a new one.
absl::Status CheckNested(CrashImage& img, const Model& outer, uint64_t images_so_far) {
  State after, after_puts;
  bool recovered = false, synced = false;
  Sim::Options o = pmrt::testing::NestedSimOptions(0.3);
  o.max_images = images_so_far + 30;
  auto handler = [&](CrashImage& inner) -> absl::Status {
    auto r = OpenImage(inner.base(), pmrt::testing::EadrPoolOptions());
    if (!r.ok()) return r.status();
    if (!recovered) return CheckRecovered(**r, outer);
    State got = Read(**r);
    if (!(got == after_puts) && (synced || !(got == after))) {
      return absl::DataLossError(synced ? "the synced puts after the recovery were lost"
                                        : "the recovered state changed");
    }
    return CheckHeap(**r, got);
  };
  return pmrt::testing::RunNestedCheck(
      img, o,
      [&](Sim& nested) -> absl::Status {
        auto r = OpenImage(img.base(), pmrt::testing::SimPoolOptions(nested));
        if (!r.ok()) return r.status();
        after = Read(**r, /*scan=*/false);
        if (auto st = outer.Check(after); !st.ok()) return st;
        recovered = true;
        after_puts = after;
        Index* index = IndexOf(**r);
        for (int i = 0; i < kKeys; i += 2) {
          const std::string v = absl::StrCat("after-", i);
          if (auto st = index->put(PlainKey(i), v); !st.ok()) return st.status();
          after_puts.index[PlainKey(i)] = v;
        }
        if (auto st = (*r)->sync(); !st.ok()) return st;
        synced = true;
        State got = Read(**r);
        if (!(got == after_puts)) return absl::DataLossError("the live state after the puts");
        if (auto st = CheckHeap(**r, got); !st.ok()) return st;
        if (auto st = (*r)->engine().Reclaim(/*advance=*/true); !st.ok()) return st;
        return (*r)->sync();
      },
      handler);
}

struct Config : pmrt::testing::CrashConfig {
  Config() {
    nested_every = 50;
    options.max_single_line_images = 4;
    options.random_images = 4;
    options.exhaustive_max_lines = 5;
  }
  uint64_t picks = 16;  // 0 an advance, 1 a reclamation cycle, else a step
};

struct Outcome : pmrt::testing::CrashOutcome {
  uint64_t commits = 0, aborts = 0;
  bool diverged = false;  // the live tree disagreed with the model
};

Outcome RunCrash(const Config& cfg) {
  Model model;
  g_diverged = false;
  return pmrt::testing::RunUnderSim<Outcome>(
      kPoolSize, cfg.options, cfg.target_images,
      [&](Sim& sim, PoolOptions po) -> absl::StatusOr<std::unique_ptr<Runtime>> {
        auto pool = Pool::CreateInMemory(sim.working(), kPoolSize, kLayout, po, "sim-pool");
        if (!pool.ok()) return pool.status();
        auto rt = Runtime::Attach(std::move(*pool), TestOptions());
        if (!rt.ok()) return rt;
        (void)RootOf(**rt);
        if (auto idx = (*rt)->index("idx"); !idx.ok()) return idx.status();
        EXPECT_OK((*rt)->sync());
        return rt;
      },
      [&](Sim& sim, CrashImage& img) -> absl::Status {
        if (cfg.nested_every > 0 && img.id().image % cfg.nested_every == 5) {
          return CheckNested(img, model, sim.stats().images);
        }
        auto r = OpenImage(img.base(), pmrt::testing::EadrPoolOptions());
        if (!r.ok()) return r.status();
        return CheckRecovered(**r, model);
      },
      [&](Sim& sim, std::unique_ptr<Runtime>& rt, Outcome& out) {
        auto rngs = pmrt::testing::WorkerRngs(cfg.threads, sim.options().seed, 7877);
        {
          pmrt::testing::Lockstep workers(cfg.threads,
                                          [&](int t) { Step(*rt, model, t, rngs[t]); });
          pmrt::testing::RunSchedule(
              sim, cfg.target_images, workers, cfg.threads, sim.options().seed + 9, cfg.picks,
              [&](uint64_t pick, uint64_t&) {
                if (pick == 0) {
                  if (!model.pending[0].open && !model.pending[1].open) {
                    EXPECT_OK(rt->epochs().Advance());
                  }
                } else if (pick == 1) {
                  EXPECT_OK(rt->engine().Reclaim(/*advance=*/false));
                } else {
                  return false;
                }
                return true;
              },
              [] { return !::testing::Test::HasFailure() && !g_diverged; });
          for (int t = 0; t < cfg.threads; ++t) {
            while (model.pending[t].open) workers.Step(t);
          }
        }
        const txn::Stats s = rt->engine().stats();
        out.commits = s.commits;
        out.aborts = s.aborts;
        out.diverged = g_diverged;
      });
}

void Report(const char* what, const Outcome& r) {
  std::printf(
      "%s: %lu crash points (and %lu in nested recoveries), %lu images in %.2f s (%lu commits, "
      "%lu aborts)\n",
      what, r.stats.crash_points, r.stats.nested_crash_points, r.stats.images, r.seconds, r.commits,
      r.aborts);
}

// The negative controls: each logic mutant must make the suite fail. A recovery that replays no
// index operation, or replays them newest first; a commit record without them; an abort that
// leaves them in the tree.
TEST(RuntimeCrashTest, MutationGateKillsTheLogicMutants) {
  const std::map<uint32_t, std::string> mutants = {
      {runtime_internal::kSkipReplayMutant.id, runtime_internal::kSkipReplayMutant.name},
      {runtime_internal::kReplayOrderMutant.id, runtime_internal::kReplayOrderMutant.name},
      {runtime_internal::kNoUndoMutant.id, runtime_internal::kNoUndoMutant.name},
      {runtime_internal::kUnrecordedMarkMutant.id, runtime_internal::kUnrecordedMarkMutant.name},
      {txn_internal::kUnloggedReplayedStamp.id, txn_internal::kUnloggedReplayedStamp.name},
      {txn_internal::kDropLogicalMutant.id, txn_internal::kDropLogicalMutant.name}};
  const auto survivors = pmrt::testing::RunMutationGate(
      mutants,
      [] {
        Config cfg;
        cfg.threads = 2;
        cfg.options.seed = 7;
        cfg.target_images = EnvOr("PMRT_GATE_IMAGES", 10000);
        return RunCrash(cfg);
      },
      "runtime", [](const Outcome& o) { return !o.failures.empty() || o.diverged; });
  EXPECT_TRUE(survivors.empty()) << ::testing::PrintToString(survivors);
}

// The first open of a fresh pool, crashed at every fence: the catalog's creation and the
// runtime header, the transaction engine's directory and its link in the pool state, the first
// index and a first committed transaction, the close. Every image must open (a recovery that
// finds the directory link of a rolled-back epoch and takes it for a log to recover would refuse
// the catalog's allocation before the engine's recovery), hold exactly what it created, and then
// take an index and a committed transaction of its own.
struct FirstOpenOutcome : pmrt::testing::CrashOutcome {
  uint64_t opened_images = 0;
};

FirstOpenOutcome RunFirstOpen(uint64_t seed) {
  FirstOpenOutcome out;
  Sim::Options options;
  options.seed = seed;
  options.max_images_per_point = pmrt::testing::kMainImagesPerPoint;
  auto sim_or = Sim::Create(kPoolSize, options);
  EXPECT_OK(sim_or);
  if (!sim_or.ok()) return out;
  Sim& sim = **sim_or;
  sim.SetCrashPoints(Sim::CrashPoints::kNone);
  auto pool = Pool::CreateInMemory(sim.working(), kPoolSize, kLayout,
                                   pmrt::testing::SimPoolOptions(sim), "sim-pool");
  EXPECT_OK(pool);
  if (!pool.ok()) return out;
  bool committing = false, committed = false;
  sim.SetHandler([&](CrashImage& img) -> absl::Status {
    auto r = OpenImage(img.base(), pmrt::testing::EadrPoolOptions());
    if (!r.ok()) return r.status();
    Runtime& rt = **r;
    ++out.opened_images;
    auto found = rt.find_index("idx");
    State got;
    if (found.ok()) {
      got = Read(rt);
    } else if (found.status().code() != absl::StatusCode::kNotFound) {
      return found.status();
    }
    const bool has_key = got.index.count("key0") != 0;
    if (committed && !has_key) return absl::DataLossError("the committed key0 was lost");
    if (has_key && !committed && !committing) {
      return absl::DataLossError("key0 is there before its transaction committed");
    }
    if (found.ok()) {
      if (auto st = CheckHeap(rt, got); !st.ok()) return st;
    }
    // The recovered runtime takes an index and a transaction of its own.
    auto idx = rt.index("idx");
    if (!idx.ok()) return idx.status();
    if (auto st = rt.engine().Begin(); !st.ok()) return st;
    if (auto st = (*idx)->put("key1", "after"); !st.ok()) return st.status();
    if (auto st = rt.engine().Commit(); !st.ok()) return st;
    if (auto st = rt.sync(); !st.ok()) return st;
    got = Read(rt);
    if (got.index["key1"] != "after") return absl::DataLossError("key1 after the recovery");
    return CheckHeap(rt, got);
  });
  sim.SetCrashPoints(options.crash_points);
  const auto start = std::chrono::steady_clock::now();
  [&] {
    auto rt = Runtime::Attach(std::move(*pool), TestOptions());
    ASSERT_OK(rt);
    (void)RootOf(**rt);
    auto idx = (*rt)->index("idx");
    ASSERT_OK(idx);
    ASSERT_OK((*rt)->engine().Begin());
    ASSERT_OK((*idx)->put("key0", "first"));
    committing = true;
    ASSERT_OK((*rt)->engine().Commit());
    committed = true;
    committing = false;
    ASSERT_OK((*rt)->sync());
    ASSERT_OK((*rt)->Close());
  }();
  pmrt::testing::FinishRun(sim, start, &out);
  return out;
}

TEST(RuntimeCrashTest, FirstOpenIsCrashAtomic) {
  // Several seeds: each draws other random subsets of the dirty lines at each crash point.
  const uint64_t first = EnvOr("PMRT_RUNTIME_SEED", 3);
  for (uint64_t seed = first; seed < first + 8; ++seed) {
    const FirstOpenOutcome r = RunFirstOpen(seed);
    ASSERT_TRUE(r.failures.empty()) << r.failures[0].ToString();
    std::printf("first open, seed %lu: %lu crash points, %lu images in %.2f s\n", seed,
                r.stats.crash_points, r.stats.images, r.seconds);
    EXPECT_GT(r.stats.crash_points, 20u);
    EXPECT_EQ(r.opened_images, r.stats.images);
  }
}

// An epoch-scoped remove of a key, then a transaction that removes it again (finding it absent)
// and writes another key: a crash before the epoch completes rolls the first remove back, and the
// transaction's replay must remove the key all the same. Every image where the transaction's
// write is there must have the key absent.
pmrt::testing::CrashOutcome RunRemoveAfterEpochScopedRemove(uint64_t seed) {
  pmrt::testing::CrashOutcome out;
  Sim::Options options;
  options.seed = seed;
  options.max_images_per_point = pmrt::testing::kMainImagesPerPoint;
  auto sim_or = Sim::Create(kPoolSize, options);
  EXPECT_OK(sim_or);
  if (!sim_or.ok()) return out;
  Sim& sim = **sim_or;
  sim.SetCrashPoints(Sim::CrashPoints::kNone);
  auto pool = Pool::CreateInMemory(sim.working(), kPoolSize, kLayout,
                                   pmrt::testing::SimPoolOptions(sim), "sim-pool");
  EXPECT_OK(pool);
  if (!pool.ok()) return out;
  bool committed = false;
  sim.SetHandler([&](CrashImage& img) -> absl::Status {
    auto r = OpenImage(img.base(), pmrt::testing::EadrPoolOptions());
    if (!r.ok()) return r.status();
    auto idx = (*r)->find_index("idx");
    if (!idx.ok()) return idx.status();
    const bool txn_there = (*idx)->get("after").has_value();
    if (committed && !txn_there) return absl::DataLossError("the committed transaction was lost");
    if (txn_there && (*idx)->get("k").has_value()) {
      return absl::DataLossError("the transaction's remove of k was not replayed");
    }
    return absl::OkStatus();
  });
  const auto start = std::chrono::steady_clock::now();
  [&] {
    auto rt = Runtime::Attach(std::move(*pool), TestOptions());
    ASSERT_OK(rt);
    auto idx = (*rt)->index("idx");
    ASSERT_OK(idx);
    ASSERT_OK((*idx)->put("k", "before"));
    ASSERT_OK((*rt)->sync());
    sim.SetCrashPoints(options.crash_points);
    ASSERT_OK((*idx)->remove("k"));  // epoch-scoped
    ASSERT_OK((*rt)->engine().Begin());
    auto removed = (*idx)->remove("k");
    ASSERT_OK(removed);
    EXPECT_FALSE(*removed);
    ASSERT_OK((*idx)->put("after", "txn"));
    ASSERT_OK((*rt)->engine().Commit());
    committed = true;
    ASSERT_OK((*rt)->sync());
    ASSERT_OK((*rt)->Close());
  }();
  pmrt::testing::FinishRun(sim, start, &out);
  return out;
}

TEST(RuntimeCrashTest, TransactionRemoveOutlastsARolledBackEpochScopedRemove) {
  for (uint64_t seed = 1; seed <= 4; ++seed) {
    const pmrt::testing::CrashOutcome r = RunRemoveAfterEpochScopedRemove(seed);
    ASSERT_TRUE(r.failures.empty()) << r.failures[0].ToString();
    EXPECT_GT(r.stats.images, 0u);
  }
}

// The directory link written without its undo copy must make the first-open suite fail.
TEST(RuntimeCrashTest, MutationGateKillsTheUnloggedDirectoryLink) {
  const auto survivors = pmrt::testing::RunMutationGate(
      {{txn_internal::kUnloggedDirectoryLink.id, txn_internal::kUnloggedDirectoryLink.name}},
      [] { return RunFirstOpen(3); }, "runtime first open");
  EXPECT_TRUE(survivors.empty()) << ::testing::PrintToString(survivors);
}

TEST(RuntimeCrashTest, OneThread) {
  const auto cfg = pmrt::testing::MainRunConfig<Config>(1, EnvOr("PMRT_RUNTIME_SEED", 1), 70000);
  const Outcome r = RunCrash(cfg);
  ASSERT_NO_FATAL_FAILURE(pmrt::testing::ExpectFinishedRun(
      r, cfg.target_images, [](const Outcome& o) { Report("runtime, 1 thread", o); }));
  EXPECT_FALSE(r.diverged);
  EXPECT_GT(r.commits, 50u);
}

TEST(RuntimeCrashTest, TwoThreads) {
  const auto cfg = pmrt::testing::MainRunConfig<Config>(2, EnvOr("PMRT_RUNTIME_SEED", 2), 70000);
  const Outcome r = RunCrash(cfg);
  ASSERT_NO_FATAL_FAILURE(pmrt::testing::ExpectFinishedRun(
      r, cfg.target_images, [](const Outcome& o) { Report("runtime, 2 threads", o); }));
  EXPECT_FALSE(r.diverged);
  EXPECT_GT(r.commits, 50u);
}

}  // namespace
}  // namespace pmrt
