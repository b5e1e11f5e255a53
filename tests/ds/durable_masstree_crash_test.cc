// The durable Masstree under the crash simulator: random puts (inserts and updates), removes and
// gets by one or two threads (in lock step), over integer keys, short keys and keys that share
// slices (new layers), on a tree big enough to split leaves and interior nodes, with epoch
// advances in between. Every fence is a crash point; at each, crash images (subsets of the dirty
// lines, each in any state the store hints recorded) are recovered through the real open path
// (Pool, epoch::Manager with its log replay, alloc::Heap, DurableMasstree::Open with lazy
// repair), and:
//   * the tree's contents equal the model at the start of the failed epoch (or, for a crash
//     inside an advance, at the start of the next one),
//   * CheckInvariants() passes (structure, leaf chain, in-line log fields),
//   * the heap's live blocks are exactly the tree's nodes, values and descriptor (no leak, no
//     block reachable but free),
//   * lookups agree with the recovered contents.
// Every twentieth image instead runs the next execution under a nested simulator: recovery, an
// advance, operations (which repair nodes lazily, in a later epoch than the execution's first),
// more advances; every fence there is a crash point too (a crash during lazy recovery, during
// the operations after it, or during the runtime's teardown), checked the same way.
//
// The mutation gate disables each persistence site of the durable tree, and swaps each of its
// in-line store orders, in turn; each must make this suite fail.
#include <sys/mman.h>

#include <cstdio>
#include <cstdlib>
#include <map>
#include <set>
#include <string>

#include "absl/strings/str_cat.h"
#include "alloc/allocator.h"
#include "ds/durable_masstree.h"
#include "ds/internal/durable_policy.h"
#include "ds/internal/node_layout.h"
#include "epoch/epoch.h"
#include "epoch/pool.h"
#include "gtest/gtest.h"
#include "testing/sim.h"
#include "tests/ds/durable_tree_oracle.h"
#include "tests/ds/durable_tree_runtime.h"
#include "tests/util/crash_suite.h"
#include "tests/util/lockstep.h"
#include "tests/util/test_util.h"

namespace pmrt::ds {
namespace {

using ds_internal::DurablePolicy;
using ds_internal::InteriorNode;
using ds_internal::LeafNode;
using ds_internal::NodeHeader;

constexpr size_t kPoolSize = 8 << 20;
constexpr char kLayout[] = "masstree-crash";
using oracle::Contents;
using oracle::Printable;
using oracle::Scan;

using testing::EnvOr;
using testing::Next;
using tree_runtime::TreeRuntime;

struct Model {
  Contents live, at_start;
  bool advancing = false;

  absl::Status Check(const Contents& got) const {
    if (got == at_start || (advancing && got == live)) return absl::OkStatus();
    return absl::DataLossError(
        absl::StrCat("recovered contents differ from the failed epoch's start: ", Diff(got)));
  }
  std::string Diff(const Contents& got) const { return oracle::Diff(got, at_start); }
};

// The keys: 8-byte integers (most), short keys, keys sharing 8- and 16-byte prefixes (new
// layers, and layers emptied and collected), and a hot set of a dozen neighbours (one leaf:
// several updates of one value line in an epoch, inserts into slots freed in the epoch).
std::string KeyOf(uint64_t r) {
  const uint64_t i = r % 700;
  switch ((r >> 16) % 8) {
    case 3:
      return "hot/" + std::to_string(i % 12);
    case 0:
      return "shared/prefix/" + std::to_string(i % 40);
    case 1:
      return "shared/prefix/longer/" + std::to_string(i % 25);
    case 2:
      return std::string(ds::U64Key(i).view()).substr(0, 1 + i % 7);
    default:
      return std::string(ds::U64Key(i * 2654435761u % 100003).view());
  }
}

std::string ValueOf(uint64_t r) { return absl::StrCat("v", r % 100000, std::string(r % 5, '.')); }

using Runtime = TreeRuntime;

absl::StatusOr<Runtime> OpenRuntime(void* base, const PoolOptions& po) {
  auto pool = Pool::OpenInMemory(base, kPoolSize, kLayout, po, "crash-image");
  if (!pool.ok()) return pool.status();
  return tree_runtime::OpenTree(std::move(*pool), std::chrono::milliseconds(0));
}

// One operation, checked against the model (which it updates).
absl::Status Operate(DurableMasstree& t, Model& model, uint64_t& rng) {
  const uint64_t r = Next(rng);
  const std::string key = KeyOf(r >> 8);
  const int op = static_cast<int>(r % 10);
  if (op < 5) {
    const std::string value = ValueOf(r >> 20);
    const PutResult want = model.live.count(key) ? PutResult::kUpdated : PutResult::kInserted;
    const PutResult got = t.put(key, value);
    model.live[key] = value;
    if (got != want) return absl::InternalError(absl::StrCat("put ", Printable(key), " wrong"));
  } else if (op < 8) {
    const bool want = model.live.erase(key) > 0;
    if (t.remove(key) != want) {
      return absl::InternalError(absl::StrCat("remove ", Printable(key), " wrong"));
    }
  } else {
    auto it = model.live.find(key);
    const std::optional<std::string> want =
        it == model.live.end() ? std::nullopt : std::optional(it->second);
    if (t.get(key) != want) return absl::InternalError(absl::StrCat("get ", Printable(key)));
  }
  return absl::OkStatus();
}

absl::Status AdvanceTracked(epoch::Manager& m, Model& model) {
  model.advancing = true;
  absl::Status st = m.Advance();
  model.advancing = false;
  model.at_start = model.live;
  return st;
}

// The heap's live blocks are exactly what the tree reaches.
absl::Status CheckHeap(Runtime& r) {
  return oracle::CheckHeapMatchesTree(*r.tree, *r.epochs, *r.heap);
}

// Recovery checks: contents == model, invariants, heap == reachable, lookups agree.
absl::Status CheckRecovered(Runtime& r, const Model& model, Contents* recovered = nullptr) {
  const Contents got = Scan(*r.tree);
  if (auto st = model.Check(got); !st.ok()) return st;
  if (auto st = r.tree->CheckInvariants(); !st.ok()) return st;
  if (auto st = CheckHeap(r); !st.ok()) return st;
  int n = 0;
  for (const auto& [k, v] : got) {
    if (n++ % 7 != 0) continue;
    if (r.tree->get(k) != v) return absl::DataLossError(absl::StrCat("get ", Printable(k)));
  }
  if (recovered != nullptr) *recovered = got;
  return absl::OkStatus();
}

struct NestedTally {
  uint64_t runs = 0, lazy = 0, leaves = 0, values = 0, perms = 0;
};
NestedTally g_nested;

// Keys whose value the epoch that failed had changed (added, removed or replaced).
std::vector<std::string> ChangedKeys(const Model& m) {
  std::vector<std::string> out;
  for (const auto& [k, v] : m.live) {
    auto it = m.at_start.find(k);
    if (it == m.at_start.end() || it->second != v) out.push_back(k);
  }
  for (const auto& [k, v] : m.at_start) {
    if (!m.live.count(k)) out.push_back(k);
  }
  return out;
}

absl::Status CheckNested(CrashImage& img, const Model& outer) {
  Model after;
  bool recovered = false;
  // Repair nodes lazily in a later epoch than the execution's first (docs/masstree.md): when
  // the image's state is known without reading it (no advance in flight), advance before the
  // first access, and check the contents only at the end.
  const bool lazy_first = !outer.advancing && (img.id().image * 31 + img.id().fence) % 3 != 0;
  auto handler = [&](CrashImage& inner) -> absl::Status {
    auto r = OpenRuntime(inner.base(), testing::EadrPoolOptions());
    if (!r.ok()) return r.status();
    return CheckRecovered(*r, recovered ? after : outer);
  };
  return testing::RunNestedCheck(
      img, testing::NestedSimOptions(lazy_first ? 0.5 : 0.15),
      [&](Sim& nested) -> absl::Status {
        auto r = OpenRuntime(img.base(), testing::SimPoolOptions(nested));
        if (!r.ok()) return r.status();
        absl::Status first = absl::OkStatus();
        if (lazy_first) {
          after.live = after.at_start = outer.at_start;
          recovered = true;
          first = AdvanceTracked(*r->epochs, after);
          // The keys the failed epoch changed sit in the leaves whose repair rolls something
          // back: read each (repairing its leaf in this later epoch, with its fences), then
          // update it in the same epoch (value logs tagged with an epoch the pre-repair node
          // epoch on media must not hide).
          uint64_t n = 0;
          for (const std::string& k : ChangedKeys(outer)) {
            if (!first.ok() || ++n > 12) break;
            auto it = after.live.find(k);
            if (r->tree->get(k) !=
                (it == after.live.end() ? std::nullopt : std::optional(it->second))) {
              first = absl::DataLossError(absl::StrCat("nested run: get ", Printable(k)));
            } else if (n % 2 == 1) {
              r->tree->put(k, absl::StrCat("nested", n));
              after.live[k] = absl::StrCat("nested", n);
            }
          }
        } else {
          Contents got = Scan(*r->tree);
          first = outer.Check(got);
          after.live = after.at_start = got;
          recovered = true;
        }
        if (!first.ok()) return first;
        uint64_t rng = img.id().fence * 977 + img.id().image + 3;
        for (int round = 0; round < 3 && first.ok(); ++round) {
          for (int i = 0; i < 8 && first.ok(); ++i) first = Operate(*r->tree, after, rng);
          if (first.ok()) first = AdvanceTracked(*r->epochs, after);
        }
        if (first.ok()) first = Operate(*r->tree, after, rng);
        if (first.ok() && Scan(*r->tree) != after.live) {
          first = absl::DataLossError("nested run: contents differ from its model");
        }
        const auto d = r->tree->durable_stats();
        g_nested.runs++;
        g_nested.lazy += lazy_first;
        g_nested.leaves += d.leaves_recovered;
        g_nested.values += d.values_rolled_back;
        g_nested.perms += d.perms_rolled_back;
        after.advancing = true;  // the runtime's destructors advance
        return first;
      },
      handler);
}

// A fixed sequence first, with every fence a crash point: ten keys in a leaf of their own (a
// layer below "scenario"), made durable; then in one epoch an update of the first key (the
// line's value log), an update of the second (same line: the key moves to a slot free since the
// epoch began), and four inserts, the last of which reuses the slot the second key left (the
// node must be copied first). Random workloads reach this rarely.
absl::Status Scenario(Runtime& rt, Model& model, Sim& sim) {
  auto key = [](int i) { return absl::StrCat("scenario/", i < 10 ? "0" : "", i); };
  auto put = [&](int i, const std::string& v) -> absl::Status {
    rt.tree->put(key(i), v);
    model.live[key(i)] = v;
    return absl::OkStatus();
  };
  for (int i = 0; i < 10; ++i) (void)put(i, "s0");
  if (auto st = AdvanceTracked(*rt.epochs, model); !st.ok()) return st;
  const auto mode = sim.options().crash_points;
  sim.SetCrashPoints(Sim::CrashPoints::kEveryFence);
  (void)put(0, "s1");
  (void)put(1, "s1");
  for (int i = 10; i < 14; ++i) (void)put(i, "s1");
  absl::Status st = AdvanceTracked(*rt.epochs, model);
  sim.SetCrashPoints(mode);
  if (!st.ok()) return st;
  if (oracle::Scan(*rt.tree) != model.live) {
    return absl::InternalError("scenario: contents differ from the model");
  }
  return absl::OkStatus();
}

struct Config : testing::CrashConfig {
  int preload = 300;
  int advance_every = 12;  // one scheduling pick in this many is an advance
  Config() {
    nested_every = 60;
    // A fifth of the fences are crash points: uncapped, each has ~100 images (every recorded
    // version of every dirty line, twice), so this buys many more operations per image. The
    // main tests cap the images per point (MainRunConfig) and crash at every fence instead.
    options.crash_points = Sim::CrashPoints::kRandom;
    options.probability = 0.2;
    options.max_single_line_images = 8;
    options.random_images = 6;
  }
};

struct Outcome : testing::CrashOutcome {
  std::string live_error;  // a wrong answer in the running workload
  ds::DurableStats durable;
  uint64_t ops = 0, advances = 0, top_images = 0;
};

Outcome RunCrash(const Config& cfg) {
  Model model;
  uint64_t top_images = 0;
  return testing::RunUnderSim<Outcome>(
      kPoolSize, cfg.options, cfg.target_images,
      [&](Sim& sim, const PoolOptions& po) -> absl::StatusOr<Runtime> {
        // Setup (no crash points): the pool, the tree, a preload, all durable.
        {
          auto pool = Pool::CreateInMemory(sim.working(), kPoolSize, kLayout, po, "sim-pool");
          if (!pool.ok()) return pool.status();
          absl::Status st = tree_runtime::CreateTree(**pool, [&](DurableMasstree& t) {
            uint64_t rng = sim.options().seed * 31 + 7;
            for (int i = 0; i < cfg.preload; ++i) {
              const uint64_t r = Next(rng);
              const std::string key = KeyOf(r >> 8);
              t.put(key, ValueOf(r >> 20));
              model.live[key] = ValueOf(r >> 20);
            }
            model.at_start = model.live;
          });
          EXPECT_OK(st);
        }
        return OpenRuntime(sim.working(), po);
      },
      [&](Sim&, CrashImage& img) -> absl::Status {
        ++top_images;
        // One image in nested_every, spread over the kinds of image a crash point makes.
        if (cfg.nested_every > 0 &&
            (img.id().image + img.id().fence * 7) % static_cast<uint64_t>(cfg.nested_every) == 1) {
          return CheckNested(img, model);
        }
        auto r = OpenRuntime(img.base(), testing::EadrPoolOptions());
        if (!r.ok()) return r.status();
        return CheckRecovered(*r, model);
      },
      [&](Sim& sim, Runtime& rt, Outcome& out) {
        if (absl::Status st = Scenario(rt, model, sim); !st.ok()) out.live_error = st.ToString();
        {
          auto rngs = testing::WorkerRngs(cfg.threads, sim.options().seed, 7919);
          testing::Lockstep workers(cfg.threads, [&](int t) {
            if (!out.live_error.empty()) return;
            if (absl::Status st = Operate(*rt.tree, model, rngs[t]); !st.ok()) {
              out.live_error = st.ToString();
            }
            ++out.ops;
          });
          testing::RunSchedule(
              sim, cfg.target_images, workers, cfg.threads, sim.options().seed + 5,
              static_cast<uint64_t>(cfg.advance_every), testing::AdvanceOnPickZero([&] {
                if (absl::Status st = AdvanceTracked(*rt.epochs, model); !st.ok()) {
                  out.live_error = st.ToString();
                }
                ++out.advances;
              }),
              [&] { return out.live_error.empty(); });
        }
        out.durable = rt.tree->durable_stats();
        out.top_images = top_images;
      });
}

void Report(const char* what, const Outcome& r) {
  std::printf(
      "%s: %lu ops, %lu advances, %lu crash points (and %lu in nested recoveries; max %lu dirty "
      "lines), %lu images (%lu top-level) in %.2f s; "
      "leaf copies %lu, interior copies %lu, parent-link copies %lu, relocations %lu; %lu hints "
      "%lu flushes\n",
      what, r.ops, r.advances, r.stats.crash_points, r.stats.nested_crash_points,
      r.stats.max_dirty_lines, r.stats.images, r.top_images, r.seconds, r.durable.leaf_log_copies,
      r.durable.interior_log_copies, r.durable.parent_log_copies, r.durable.relocations,
      r.stats.store_hints, r.stats.flushes);
  std::printf(
      "  nested runs %lu (%lu lazy-first): %lu leaves repaired, %lu values and %lu "
      "permutations rolled back\n",
      g_nested.runs, g_nested.lazy, g_nested.leaves, g_nested.values, g_nested.perms);
  g_nested = {};
}

// The main tests: every fence a crash point with kMainImagesPerPoint images, and a nested check
// (a crash during recovery, hundreds of images) in one image of 500.
Config MainConfig(int threads, uint64_t seed) {
  auto cfg = testing::MainRunConfig<Config>(threads, seed, 60000);
  cfg.options.crash_points = Sim::CrashPoints::kEveryFence;
  cfg.nested_every = static_cast<int>(EnvOr("PMRT_NESTED_EVERY", 500));
  return cfg;
}

TEST(DurableMasstreeCrashTest, OneThread) {
  auto cfg = MainConfig(1, EnvOr("PMRT_SIM_SEED", 1));
  cfg.advance_every = static_cast<int>(EnvOr("PMRT_ADVANCE_EVERY", 12));
  const Outcome r = RunCrash(cfg);
  EXPECT_EQ(r.live_error, "");
  testing::ExpectFinishedRun(r, cfg.target_images,
                             [](const Outcome& o) { Report("durable masstree, 1 thread", o); });
}

TEST(DurableMasstreeCrashTest, TwoThreads) {
  const auto cfg = MainConfig(2, EnvOr("PMRT_SIM_SEED", 3));
  const Outcome r = RunCrash(cfg);
  EXPECT_EQ(r.live_error, "");
  testing::ExpectFinishedRun(r, cfg.target_images,
                             [](const Outcome& o) { Report("durable masstree, 2 threads", o); });
}

// Each persistence site of the durable tree disabled, and each in-line store order swapped, in
// turn: the suite must catch every one.
TEST(DurableMasstreeCrashTest, MutationGateKillsEverySite) {
  Config base;
  base.target_images = 3000;
  Outcome baseline = RunCrash(base);
  ASSERT_TRUE(baseline.failures.empty()) << baseline.failures[0].ToString();
  // The gate's explicit list: the flush and fence sites the suite must reach (a "ds." site
  // added without an entry here fails), and the store-order and logic mutants, which the
  // simulator never sees as flushes.
  const auto sites = testing::ExpectSites(
      baseline.sites, "ds.",
      {ds_internal::kRecoverValueFlush, ds_internal::kRecoverValueFence,
       ds_internal::kRecoverNodeFlush, ds_internal::kRecoverNodeFence},
      {ds_internal::kLeafStoreOrder, ds_internal::kPermStoreOrder, ds_internal::kValueStoreOrder,
       ds_internal::kLeafRecoverOrder, ds_internal::kValueRecoverOrder,
       ds_internal::kRelocateKeepsInsert, ds_internal::kDropSnapshot, ds_internal::kDirtyLeafRecord,
       ds_internal::kDirtyLeafRepair});
  const auto survivors = testing::RunMutationGate(
      sites,
      [] {
        Config cfg;
        cfg.target_images = EnvOr("PMRT_GATE_IMAGES", 100000);
        cfg.nested_every = 4;
        cfg.options.seed = 17;
        return RunCrash(cfg);
      },
      "durable masstree",
      // A wrong answer in the running workload kills the mutant too.
      [](const Outcome& r) { return !r.failures.empty() || !r.live_error.empty(); });
  EXPECT_TRUE(survivors.empty()) << ::testing::PrintToString(survivors);
}

}  // namespace
}  // namespace pmrt::ds
