// The crash simulator, proven on a tiny redo log (tools/toy_redo_log.h): the correct
// protocol survives every image, each planted bug and each disabled persistence site is caught,
// and a failure replays alone from its id.
#include "testing/sim.h"

#include <chrono>
#include <cstdio>
#include <cstring>
#include <set>
#include <thread>

#include "epoch/pool.h"
#include "gtest/gtest.h"
#include "tests/util/crash_suite.h"
#include "tests/util/test_util.h"
#include "tools/toy_redo_log.h"

namespace pmrt {
namespace {

using toy::Model;
using toy::ToyBug;
using toy::ToyStore;

constexpr size_t kSmallPool = 1 << 20;

// ---- the simulator on raw memory --------------------------------------------------------------

constexpr Site kTestFlush{"test.flush"};
constexpr Site kTestFence{"test.fence"};

TEST(SimTest, UnflushedStoreMayBeLostAndFencedStoreNever) {
  auto sim = Sim::Create(kSmallPool, {});
  ASSERT_OK(sim);
  auto* w = static_cast<uint64_t*>((*sim)->working());
  Persister p = (*sim)->persister();
  std::set<uint64_t> seen_a, seen_b;
  (*sim)->SetHandler([&](CrashImage& img) {
    auto* m = static_cast<uint64_t*>(img.base());
    seen_a.insert(m[0]);
    seen_b.insert(m[64]);
    // At fence 2, a (line 0) was flushed and fenced before the crash point: it must be there.
    if (img.id().fence >= 2 && m[0] != 1) return absl::DataLossError("fenced store lost");
    return absl::OkStatus();
  });
  w[0] = 1;
  p.Persist(kTestFlush, kTestFence, &w[0], 8);  // crash point: a pending, not yet durable
  w[64] = 2;                                    // line 8: never flushed
  p.Fence(kTestFence);                          // crash point: a durable, b maybe evicted
  EXPECT_FALSE((*sim)->failed()) << (*sim)->Report();
  EXPECT_EQ(seen_b, (std::set<uint64_t>{0, 2}));  // b both lost and evicted
  EXPECT_EQ((*sim)->stats().crash_points, 2u);
}

// CopyFlush on the simulator is a copy then a flush of the destination: pending at the first
// crash point after it, durable once fenced.
TEST(SimTest, CopyFlushIsDurableAfterTheFence) {
  auto sim = Sim::Create(kSmallPool, {});
  ASSERT_OK(sim);
  auto* w = static_cast<uint64_t*>((*sim)->working());
  Persister p = (*sim)->persister();
  std::set<uint64_t> seen;
  (*sim)->SetHandler([&](CrashImage& img) {
    auto* m = static_cast<uint64_t*>(img.base());
    seen.insert(m[9]);
    if (img.id().fence >= 2 && (m[8] != 11 || m[9] != 12)) {
      return absl::DataLossError("fenced copy lost");
    }
    return absl::OkStatus();
  });
  const uint64_t src[2] = {11, 12};
  p.CopyFlush(kTestFlush, &w[8], src, sizeof(src));
  p.Fence(kTestFence);  // crash point: the copy pending (either way)
  p.Fence(kTestFence);  // crash point: durable
  EXPECT_FALSE((*sim)->failed()) << (*sim)->Report();
  EXPECT_EQ(seen, (std::set<uint64_t>{0, 12}));
}

// The pmem primitives under the simulator (SimOps): a streamed word and a clwb'd line may reach
// media at any time after the store, and are durable only after a fence of the thread that
// issued them; another thread's fence does not make them durable.
TEST(SimTest, StreamedAndClwbdWordsAreDurableAfterTheirThreadsFence) {
  Sim::Options o;
  o.pmem = true;
  auto sim = Sim::Create(kSmallPool, o);
  ASSERT_OK(sim);
  auto* w = static_cast<uint64_t*>((*sim)->working());
  const Persister p((*sim)->persister());
  ASSERT_TRUE(p.FlushesInline());
  std::set<uint64_t> seen_stream, seen_clwb;
  bool own_fence_done = false;
  (*sim)->SetHandler([&](CrashImage& img) {
    auto* m = static_cast<uint64_t*>(img.base());
    seen_stream.insert(m[0]);
    seen_clwb.insert(m[16]);
    if (own_fence_done && (m[0] != 7 || m[16] != 9)) {
      return absl::DataLossError("a word fenced by its own thread was lost");
    }
    return absl::OkStatus();
  });
  epoch_internal::ThreadCounters& c = epoch_internal::LocalCounters();
  const PersistCounts before = CountersSnapshot(BackendKind::kSim);
  SimOps::Stream8(p, kTestFlush, &w[0], 7);
  w[16] = 9;
  SimOps::Clwb(p, kTestFlush, &w[16], 8);
  std::thread([&] { p.Fence(kTestFence); }).join();  // crash point; makes nothing of ours durable
  EXPECT_EQ(seen_stream, (std::set<uint64_t>{0, 7}));
  EXPECT_EQ(seen_clwb, (std::set<uint64_t>{0, 9}));
  SimOps::Fence(p, kTestFence, c);  // crash point: still either way; then durable
  own_fence_done = true;
  p.Fence(kTestFence);  // crash point: durable
  EXPECT_FALSE((*sim)->failed()) << (*sim)->Report();
  EXPECT_EQ((CountersSnapshot(BackendKind::kSim) - before).fences, 3u);
  // A disabled site leaves the store alone: it reaches media only if evicted.
  seen_stream.clear();
  own_fence_done = false;
  mutation::Disable(kTestFlush);
  SimOps::Stream8(p, kTestFlush, &w[0], 8);
  p.Fence(kTestFence);
  p.Fence(kTestFence);
  mutation::EnableAll();
  EXPECT_EQ(seen_stream, (std::set<uint64_t>{7, 8}));
}

// max_images_per_point caps the images of each crash point (a seeded sample of the per-line
// versions) so that the budget reaches more crash points.
TEST(SimTest, ImagesPerCrashPointAreCapped) {
  for (const uint64_t cap : {uint64_t{0}, uint64_t{12}}) {
    Sim::Options o;
    o.max_images_per_point = cap;
    o.exhaustive_max_lines = 2;
    auto sim = Sim::Create(kSmallPool, o);
    ASSERT_OK(sim);
    auto* w = static_cast<uint64_t*>((*sim)->working());
    Persister p = (*sim)->persister();
    (*sim)->SetHandler([](CrashImage&) { return absl::OkStatus(); });
    for (int i = 0; i < 16; ++i) {  // 16 dirty lines, each with two flushed versions
      w[i * 8] = 1;
      p.Flush(kTestFlush, &w[i * 8], 8);
      w[i * 8] = 2;
      p.Flush(kTestFlush, &w[i * 8], 8);
    }
    p.Fence(kTestFence);
    EXPECT_EQ((*sim)->stats().crash_points, 1u);
    if (cap == 0) {
      EXPECT_GT((*sim)->stats().images, 64u);
    } else {
      EXPECT_EQ((*sim)->stats().images, cap);
    }
  }
}

TEST(SimTest, FirstCrashPointSeesPendingFlushEitherWay) {
  auto sim = Sim::Create(kSmallPool, {});
  ASSERT_OK(sim);
  auto* w = static_cast<uint64_t*>((*sim)->working());
  std::set<uint64_t> seen;
  (*sim)->SetHandler([&](CrashImage& img) {
    seen.insert(static_cast<uint64_t*>(img.base())[8]);
    return absl::OkStatus();
  });
  w[8] = 7;
  (*sim)->persister().Persist(kTestFlush, kTestFence, &w[8], 8);
  EXPECT_EQ(seen, (std::set<uint64_t>{0, 7}));
}

TEST(SimTest, ExhaustiveSubsetsWhenFewLinesAreDirty) {
  auto sim = Sim::Create(kSmallPool, {});
  ASSERT_OK(sim);
  auto* w = static_cast<uint8_t*>((*sim)->working());
  std::set<int> subsets;
  (*sim)->SetHandler([&](CrashImage& img) {
    auto* m = static_cast<uint8_t*>(img.base());
    subsets.insert(m[0] | m[64] << 1 | m[128] << 2 | m[4096] << 3);
    return absl::OkStatus();
  });
  w[0] = w[64] = w[128] = w[4096] = 1;  // four dirty lines on two pages
  (*sim)->persister().Fence(kTestFence);
  EXPECT_EQ(subsets.size(), 16u);
}

TEST(SimTest, StoreHintsExposeIntermediateLineStates) {
  auto sim = Sim::Create(kSmallPool, {});
  ASSERT_OK(sim);
  auto* w = static_cast<uint64_t*>((*sim)->working());
  Persister p = (*sim)->persister();
  std::set<std::pair<uint64_t, uint64_t>> seen;
  (*sim)->SetHandler([&](CrashImage& img) {
    auto* m = static_cast<uint64_t*>(img.base());
    seen.insert({m[0], m[1]});
    return absl::OkStatus();
  });
  w[0] = 1;
  p.StoreHint(&w[0], 8);
  w[1] = 1;
  p.StoreHint(&w[1], 8);
  p.Fence(kTestFence);
  // PCSO prefixes of the line only: (0,0), (1,0), (1,1); never (0,1).
  EXPECT_EQ(seen, (std::set<std::pair<uint64_t, uint64_t>>{{0, 0}, {1, 0}, {1, 1}}));
}

TEST(SimTest, ImageWritesNeverReachMedia) {
  auto sim = Sim::Create(kSmallPool, {});
  ASSERT_OK(sim);
  (*sim)->SetHandler([&](CrashImage& img) {
    auto* m = static_cast<uint64_t*>(img.base());
    if (m[100] != 0) return absl::DataLossError("an earlier image's write leaked into media");
    m[100] = 42;
    return absl::OkStatus();
  });
  for (int i = 0; i < 5; ++i) (*sim)->persister().Fence(kTestFence);
  EXPECT_FALSE((*sim)->failed()) << (*sim)->Report();
}

// The images share one mapping of the media (Sim::RevertImage): every image starts from the media
// as it is at its crash point, both on pages earlier images wrote (dropped after each image) and
// on pages images only read (kept mapped from one image to the next), while media lines change
// between images.
TEST(SimTest, EachImageStartsFromTheMediaAsItIsNow) {
  constexpr size_t kPages = 16, kWritten = 8, kWordsPerPage = 4096 / 8;
  auto sim = Sim::Create(kSmallPool, {});
  ASSERT_OK(sim);
  auto* w = static_cast<uint64_t*>((*sim)->working());
  Persister p = (*sim)->persister();
  uint64_t durable = 0;  // every page's word 1 holds this on media at the checked crash points
  bool exact = false;
  uint64_t checked = 0;
  (*sim)->SetHandler([&](CrashImage& img) {
    auto* m = static_cast<uint64_t*>(img.base());
    for (size_t pg = 0; pg < kPages; ++pg) {
      uint64_t* word = m + pg * kWordsPerPage;
      if (word[2] != 0) return absl::DataLossError("an earlier image's write is in this image");
      if (exact && word[1] != durable) return absl::DataLossError("a media change is missing");
      if (pg >= kWritten) continue;  // pages this image only reads
      word[1] = 99;                  // the image's own copy of the page
      word[2] = 7;
    }
    checked += exact ? 1 : 0;
    return absl::OkStatus();
  });
  for (uint64_t round = 1; round <= 4; ++round) {
    for (size_t pg = 0; pg < kPages; ++pg) w[pg * kWordsPerPage + 1] = round;
    p.Flush(kTestFlush, w, kPages * 4096);
    exact = false;
    p.Fence(kTestFence);  // crash point: the flushed lines pending
    durable = round;
    exact = true;
    p.Fence(kTestFence);  // crash point: every page's word 1 durable
  }
  EXPECT_FALSE((*sim)->failed()) << (*sim)->Report();
  EXPECT_EQ(checked, 4u);
}

TEST(SimTest, ReplayIdRoundTrips) {
  auto id = SimReplayId::Parse("7:123:45");
  ASSERT_OK(id);
  EXPECT_EQ(id->seed, 7u);
  EXPECT_EQ(id->fence, 123u);
  EXPECT_EQ(id->image, 45u);
  EXPECT_EQ(id->ToString(), "7:123:45");
  EXPECT_THAT(SimReplayId::Parse("7:x"),
              testing::StatusIs(absl::StatusCode::kInvalidArgument, "seed:fence:image"));
}

// ---- the toy redo log under the simulator -----------------------------------------------------

struct ToyConfig {
  ToyBug bug = ToyBug::kNone;
  Sim::Options options;
  size_t pool_size = kSmallPool;
  uint64_t target_images = 20000;
  int max_transactions = 100000;
  int nested_every = 10;  // every Nth image also crashes during recovery and after it
};

struct ToyOutcome {
  Sim::Stats stats;
  std::vector<Sim::Failure> failures;
  std::map<uint32_t, std::string> sites;
  double seconds = 0;
  int transactions = 0;
};

// Opens the image through the real pool open path and recovers the toy.
absl::StatusOr<std::unique_ptr<Pool>> OpenImage(void* base, size_t size, const PoolOptions& po) {
  return Pool::OpenInMemory(base, size, "toy", po, "crash-image");
}

absl::Status CheckImage(CrashImage& img, const Model& model, const ToyConfig& cfg) {
  PoolOptions po;
  po.backend = BackendKind::kEadr;
  auto pool = OpenImage(img.base(), img.size(), po);
  if (!pool.ok()) return pool.status();
  ToyStore store((*pool)->region_base(PoolRegion::kHeap), (*pool)->persister(), cfg.bug);
  store.Recover();
  if (auto st = model.Check(store.Read()); !st.ok()) return st;
  store.Recover();  // recovery is idempotent
  return model.Check(store.Read());
}

// Recovers under a nested simulator (so recovery's own fences are crash points), then runs two
// more transactions on the recovered store and crashes inside them too.
absl::Status CheckImageNested(CrashImage& img, const Model& model, const ToyConfig& cfg) {
  Model after;  // the continuation's model, set once recovery has finished
  bool recovered = false;
  absl::Status first = absl::OkStatus();
  Sim::Options nested_options;
  nested_options.random_images = 2;
  nested_options.exhaustive_max_lines = 6;
  auto handler = [&](CrashImage& nested_img) -> absl::Status {
    PoolOptions po;
    po.backend = BackendKind::kEadr;
    auto pool = OpenImage(nested_img.base(), nested_img.size(), po);
    if (!pool.ok()) return pool.status();
    ToyStore store((*pool)->region_base(PoolRegion::kHeap), (*pool)->persister(), cfg.bug);
    store.Recover();
    return recovered ? after.Check(store.Read()) : model.Check(store.Read());
  };
  auto st = img.RunNested(
      nested_options,
      [&](Sim& nested) {
        PoolOptions po;
        po.backend = BackendKind::kSim;
        po.sim = &nested;
        auto pool = OpenImage(img.base(), img.size(), po);
        if (!pool.ok()) {
          first = pool.status();
          return;
        }
        ToyStore store((*pool)->region_base(PoolRegion::kHeap), (*pool)->persister(), cfg.bug);
        store.Recover();
        first = model.Check(store.Read());
        if (!first.ok()) return;
        after.states = {store.Read()};
        recovered = true;
        uint64_t rng = img.id().fence * 7919 + img.id().image + 1;
        for (int t = 0; t < 2; ++t) {
          auto tx = toy::RandomTx(rng);
          after.Begin(tx);
          uint64_t seq = store.Commit(tx);
          after.End();
          store.Apply(seq);
        }
      },
      handler);
  if (!first.ok()) return first;
  return st;
}

ToyOutcome RunToy(const ToyConfig& cfg) {
  ToyOutcome out;
  Sim::Options o = cfg.options;
  o.max_images = cfg.target_images;
  auto sim_or = Sim::Create(cfg.pool_size, o);
  EXPECT_OK(sim_or);
  if (!sim_or.ok()) return out;
  Sim& sim = **sim_or;
  const Sim::CrashPoints mode = sim.options().crash_points;
  sim.SetCrashPoints(Sim::CrashPoints::kNone);  // no crash before the pool exists
  PoolOptions po;
  po.backend = BackendKind::kSim;
  po.sim = &sim;
  auto pool = Pool::CreateInMemory(sim.working(), cfg.pool_size, "toy", po, "sim-pool");
  EXPECT_OK(pool);
  if (!pool.ok()) return out;
  ToyStore store((*pool)->region_base(PoolRegion::kHeap), (*pool)->persister(), cfg.bug);
  Model model;
  sim.SetHandler([&](CrashImage& img) -> absl::Status {
    if (cfg.nested_every > 0 && img.id().image % cfg.nested_every == 1) {
      return CheckImageNested(img, model, cfg);
    }
    return CheckImage(img, model, cfg);
  });
  sim.SetCrashPoints(mode);
  uint64_t rng = sim.options().seed * 2654435761u + 1;
  auto start = std::chrono::steady_clock::now();
  for (int t = 0;
       t < cfg.max_transactions && !sim.failed() && sim.stats().images < cfg.target_images; ++t) {
    auto tx = toy::RandomTx(rng);
    model.Begin(tx);
    uint64_t seq = store.Commit(tx);
    model.End();
    store.Apply(seq);
    ++out.transactions;
  }
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  out.stats = sim.stats();
  out.failures = sim.failures();
  out.sites = sim.sites_seen();
  return out;
}

using testing::EnvOr;

TEST(ToyCrashTest, CorrectProtocolPassesEveryImage) {
  ToyConfig cfg;
  cfg.target_images = pmrt::testing::MainImages(100000);
  ToyOutcome r = RunToy(cfg);
  ASSERT_TRUE(r.failures.empty()) << r.failures[0].ToString();
  EXPECT_GE(r.stats.images, cfg.target_images);
  std::printf("toy redo log: %d transactions, %lu crash points, %lu images in %.2f s (%.0f/s)\n",
              r.transactions, r.stats.crash_points, r.stats.images, r.seconds,
              r.stats.images / r.seconds);
}

TEST(ToyCrashTest, CorrectProtocolOn64MiBPoolRandomCrashPoints) {
  ToyConfig cfg;
  cfg.pool_size = 64 << 20;
  cfg.options.seed = 99;
  cfg.options.crash_points = Sim::CrashPoints::kRandom;
  cfg.options.probability = 0.5;
  cfg.target_images = EnvOr("PMRT_SIM_IMAGES_64M", 20000);
  cfg.nested_every = 0;
  ToyOutcome r = RunToy(cfg);
  ASSERT_TRUE(r.failures.empty()) << r.failures[0].ToString();
  std::printf("64 MiB pool: %lu images in %.2f s = %.0f images/s\n", r.stats.images, r.seconds,
              r.stats.images / r.seconds);
}

class PlantedBugTest : public ::testing::TestWithParam<ToyBug> {};

std::string BugTestName(const ::testing::TestParamInfo<ToyBug>& p) {
  std::string n = toy::BugName(p.param);
  std::erase(n, '-');
  return n;
}

ToyConfig WithImages(uint64_t images) {
  ToyConfig cfg;
  cfg.target_images = images;
  return cfg;
}

TEST_P(PlantedBugTest, IsCaught) {
  ToyConfig cfg;
  cfg.bug = GetParam();
  cfg.target_images = 200000;
  ToyOutcome r = RunToy(cfg);
  ASSERT_FALSE(r.failures.empty())
      << "planted bug " << toy::BugName(cfg.bug) << " survived " << r.stats.images << " images";
  std::printf("%s caught after %lu images: %s\n", toy::BugName(cfg.bug), r.stats.images,
              r.failures[0].ToString().c_str());
}

INSTANTIATE_TEST_SUITE_P(NegativeControls, PlantedBugTest,
                         ::testing::Values(ToyBug::kMissingFlush, ToyBug::kMissingFence,
                                           ToyBug::kWrongFlushAddress,
                                           ToyBug::kCommitBeforePayloadInLine,
                                           ToyBug::kNonIdempotentRecovery),
                         BugTestName);

// The mutation gate: every persistence site of the toy, and its in-line store order, disabled in
// turn; the crash suite must fail for each one. (The pool's sites have their own gate below.)
TEST(ToyCrashTest, MutationGateKillsEverySite) {
  ToyOutcome baseline = RunToy(WithImages(2000));
  ASSERT_TRUE(baseline.failures.empty());
  std::map<uint32_t, std::string> sites;
  for (const Site& s : ToyStore::Sites()) sites[s.id] = s.name;
  for (const auto& [id, name] : baseline.sites) {
    if (name.rfind("toy.", 0) == 0) {
      EXPECT_TRUE(sites.count(id)) << name << " not in Sites()";
    }
  }
  const auto survivors = testing::RunMutationGate(
      sites,
      [] {
        ToyOutcome r = RunToy(WithImages(200000));
        return testing::CrashOutcome{r.stats, r.failures, r.sites, r.seconds};
      },
      "toy");
  EXPECT_TRUE(survivors.empty()) << "surviving mutants: " << ::testing::PrintToString(survivors);
}

TEST(ToyCrashTest, FailureReplaysAloneFromItsId) {
  ToyConfig cfg;
  cfg.bug = ToyBug::kMissingFence;
  cfg.nested_every = 0;
  ToyOutcome first = RunToy(cfg);
  ASSERT_FALSE(first.failures.empty());
  const SimReplayId id = first.failures[0].id;
  cfg.options.replay = id;
  ToyOutcome again = RunToy(cfg);
  ASSERT_EQ(again.failures.size(), 1u);
  EXPECT_EQ(again.failures[0].id.ToString(), id.ToString());
  EXPECT_EQ(again.stats.crash_points, 1u);
  EXPECT_LE(again.stats.images, 1u + 256u);  // the image plus its minimization
  EXPECT_EQ(again.failures[0].evicted_offsets, first.failures[0].evicted_offsets);
}

// ---- Pool::Create under the simulator ---------------------------------------------------------

// A crash anywhere inside Create must never leave an image that opens as a valid pool unless
// the pool is complete.
TEST(PoolCrashTest, CreateIsAllOrNothing) {
  auto sim = Sim::Create(kSmallPool, {});
  ASSERT_OK(sim);
  uint64_t opened = 0, refused = 0;
  (*sim)->SetHandler([&](CrashImage& img) -> absl::Status {
    PoolOptions po;
    po.backend = BackendKind::kEadr;
    auto pool = Pool::OpenInMemory(img.base(), img.size(), "toy", po, "create-image");
    if (!pool.ok()) {
      ++refused;
      if (pool.status().code() != absl::StatusCode::kDataLoss) return pool.status();
      return absl::OkStatus();
    }
    ++opened;
    const PoolState& st = (*pool)->state();
    if ((*pool)->region(PoolRegion::kHeap).size == 0) return absl::DataLossError("no heap");
    if (st.root_type_size.value.load() != 0) return absl::DataLossError("root bound");
    return absl::OkStatus();
  });
  PoolOptions po;
  po.backend = BackendKind::kSim;
  po.sim = sim->get();
  auto pool = Pool::CreateInMemory((*sim)->working(), kSmallPool, "toy", po);
  ASSERT_OK(pool);
  EXPECT_FALSE((*sim)->failed()) << (*sim)->Report();
  EXPECT_GT(refused, 0u);
  std::printf("create crash images: %lu refused (not a pool yet), %lu opened\n", refused, opened);
}

// The pool's whole life under the simulator, every fence a crash point: create over an old pool,
// bind the root, close, reopen, close. What each completed step promises must hold in every
// image taken after it; an image taken during a step may show the step done or not done.
struct RootA {
  uint64_t a;
};
struct RootB {
  uint64_t b[2];
};

struct LifecycleOutcome {
  std::vector<Sim::Failure> failures;
  std::map<uint32_t, std::string> sites;
  uint64_t images = 0;
};

LifecycleOutcome RunPoolLifecycle() {
  LifecycleOutcome out;
  auto sim_or = Sim::Create(kSmallPool, {});
  EXPECT_OK(sim_or);
  Sim& sim = **sim_or;
  PoolOptions po;
  po.backend = BackendKind::kSim;
  po.sim = &sim;
  // An old pool, used and closed, whose memory the new pool is created over.
  sim.SetCrashPoints(Sim::CrashPoints::kNone);
  uint8_t old_uuid[16];
  uint64_t old_opens;
  {
    auto old = Pool::CreateInMemory(sim.working(), kSmallPool, "old", po);
    EXPECT_OK(old);
    EXPECT_OK((*old)->root<RootB>());
    std::memcpy(old_uuid, (*old)->header().uuid, 16);
    old_opens = (*old)->open_count();
    EXPECT_OK((*old)->Close());
  }
  enum Step { kCreating, kCreated, kBound, kClosed, kOpening, kReopened, kClosing, kClosedAgain };
  Step step = kCreating;
  uint8_t new_uuid[16] = {};
  sim.SetHandler([&](CrashImage& img) -> absl::Status {
    PoolOptions eadr;
    eadr.backend = BackendKind::kEadr;
    auto p = Pool::OpenInMemory(img.base(), img.size(), "toy", eadr, "image");
    if (step == kCreating) {
      // The old pool intact, no pool at all, or the complete new one; never a mix.
      auto o = Pool::OpenInMemory(img.base(), img.size(), "old", eadr, "image");
      if (o.ok()) {
        if (std::memcmp((*o)->header().uuid, old_uuid, 16) != 0 ||
            (*o)->open_count() != old_opens + 1) {
          return absl::DataLossError("old pool damaged by a crash during Create");
        }
        return absl::OkStatus();
      }
      if (!p.ok()) {
        return p.status().code() == absl::StatusCode::kDataLoss ? absl::OkStatus() : p.status();
      }
      // Open counts: Create's own open (0 or 1 durable) plus this check's.
      if ((*p)->open_count() > 2 || (*p)->state().root_type_size.value.load() != 0) {
        return absl::DataLossError("new header over old state");
      }
      return absl::OkStatus();
    }
    if (!p.ok()) return p.status();  // created: must always open from here on
    if (std::memcmp((*p)->header().uuid, new_uuid, 16) != 0) {
      return absl::DataLossError("the old pool came back after Create returned");
    }
    if (step >= kBound && (*p)->state().root_type_size.value.load() != sizeof(RootA)) {
      return absl::DataLossError("root binding lost");
    }
    if ((step == kClosed || step == kClosedAgain) && !(*p)->was_clean_shutdown()) {
      return absl::DataLossError("Close returned but the pool reopens as crashed");
    }
    if (step == kReopened && (*p)->was_clean_shutdown()) {
      return absl::DataLossError("a crash after Open looks like a clean shutdown");
    }
    // Open clears the clean flag durably before it writes anything else: a persisted count of
    // the reopen (create 1, reopen 2, this check 3) implies a cleared flag.
    if (step == kOpening && (*p)->open_count() >= 3 && (*p)->was_clean_shutdown()) {
      return absl::DataLossError("open count persisted before the clean flag was cleared");
    }
    if (step >= kReopened && (*p)->open_count() < 3) {  // this check's own open is one more
      return absl::DataLossError("open count lost");
    }
    return absl::OkStatus();
  });
  sim.SetCrashPoints(Sim::CrashPoints::kEveryFence);
  {
    auto pool = Pool::CreateInMemory(sim.working(), kSmallPool, "toy", po);
    EXPECT_OK(pool);
    std::memcpy(new_uuid, (*pool)->header().uuid, 16);
    step = kCreated;
    sim.persister().Fence(Site("test.after.create"));  // a crash point after Create returned
    EXPECT_OK((*pool)->root<RootA>());
    step = kBound;
    EXPECT_OK((*pool)->Close());
    step = kClosed;
    sim.persister().Fence(Site("test.after.close"));
  }
  {
    step = kOpening;  // a crash inside Open may show the pool closed or open
    auto pool = Pool::OpenInMemory(sim.working(), kSmallPool, "toy", po);
    EXPECT_OK(pool);
    step = kReopened;
    sim.persister().Fence(Site("test.after.open"));
    step = kClosing;
    EXPECT_OK((*pool)->Close());
    step = kClosedAgain;
    sim.persister().Fence(Site("test.after.close"));
  }
  out.failures = sim.failures();
  out.sites = sim.sites_seen();
  out.images = sim.stats().images;
  return out;
}

TEST(PoolCrashTest, LifecycleKeepsEveryPromise) {
  LifecycleOutcome r = RunPoolLifecycle();
  ASSERT_TRUE(r.failures.empty()) << r.failures[0].ToString();
  std::printf("pool lifecycle: %lu images\n", r.images);
}

TEST(PoolCrashTest, MutationGateKillsEveryPoolSite) {
  LifecycleOutcome baseline = RunPoolLifecycle();
  ASSERT_TRUE(baseline.failures.empty());
  // The gate's explicit list: every flush and fence of the pool's create, open, root binding
  // and close.
  const std::vector<Site> pool_sites = {
      Site("pool.create.invalidate"), Site("pool.create.invalidate.fence"),
      Site("pool.create.zero"),       Site("pool.create.zero.fence"),
      Site("pool.create.header"),     Site("pool.open.dirty"),
      Site("pool.open.dirty.fence"),  Site("pool.open.count"),
      Site("pool.open.count.fence"),  Site("pool.root.bind"),
      Site("pool.root.bind.fence"),   Site("pool.close.clean"),
      Site("pool.close.clean.fence")};
  const auto survivors = testing::RunMutationGate(
      testing::ExpectSites(baseline.sites, "pool.", pool_sites),
      [] {
        LifecycleOutcome r = RunPoolLifecycle();
        testing::CrashOutcome out;
        out.failures = r.failures;
        out.stats.images = r.images;
        return out;
      },
      "pool");
  EXPECT_TRUE(survivors.empty()) << "surviving mutants: " << ::testing::PrintToString(survivors);
}

}  // namespace
}  // namespace pmrt
