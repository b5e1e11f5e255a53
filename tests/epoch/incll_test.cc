// The InCLL helpers (epoch/incll.h).
//
// Unit tests: the packed value log's encoding, widening and fallback rule from epoch
// 2^40 + 65530 across every 16-bit wrap; the word and node records' store and recovery
// semantics against a fake epoch view (failed, completed, two crashes in a row); RecoverOnce
// with two racing threads.
//
// Crash tests: an array of records in the crash simulator's memory, modified over many epochs.
// Each epoch boundary is a mini checkpoint: the lines the records' dirty hook registered are
// batch-flushed, then `completed` is flushed and fenced. Every fence is a crash point and store
// hints expose every intermediate line state. At each image the test derives the failed epochs
// from the image's `completed` (as epoch::Manager::Open does), recovers every record and checks
// the values against the model snapshot at the start of the failed epoch. Some images also run
// the next execution under a nested simulator (lazy recovery on first access, two more epochs)
// and crash inside it. Negative controls: each store-order mutant and each test site disabled
// in turn must be caught.
#include "epoch/incll.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <future>
#include <map>
#include <optional>
#include <set>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "testing/sim.h"
#include "tests/util/test_util.h"

namespace pmrt::epoch {
namespace {

using Ranges = std::vector<std::pair<uint64_t, uint64_t>>;
using Log = PackedValLog;

constexpr uint64_t kBase = (uint64_t{1} << 40) + 65530;  // six epochs before a 16-bit wrap
constexpr uint64_t kSpan = Log::kEpochSpan;

class FakeEpochView : public EpochView {
 public:
  FakeEpochView(uint64_t current, uint64_t first, Ranges failed = {})
      : current_(current), first_(first), failed_(std::move(failed)) {}
  uint64_t current() const override { return current_; }
  uint64_t execution_first() const override { return first_; }
  bool IsFailed(uint64_t e) const override {
    for (const auto& [lo, hi] : failed_)
      if (e >= lo && e <= hi) return true;
    return false;
  }
  const Ranges& failed() const { return failed_; }

 private:
  uint64_t current_, first_;
  Ranges failed_;
};

// What Manager::Open derives after a crash: c+1 and c+2 join the failed set, and the new
// execution starts after both.
FakeEpochView AfterCrash(uint64_t completed, Ranges failed) {
  if (failed.empty() || failed.back().second < completed + 1) {
    failed.push_back({completed + 1, completed + 2});
  } else {
    failed.back().second = std::max(failed.back().second, completed + 2);
  }
  const uint64_t first = std::max(completed, failed.back().second) + 1;
  return FakeEpochView(first, first, std::move(failed));
}

struct DirtyLog {
  std::vector<Range> ranges;
  void operator()(const void* addr, size_t len) { ranges.push_back({addr, len}); }
};

const Persister kNoSim;  // eADR: store hints are no-ops

uint64_t Next(uint64_t& s) {
  s ^= s << 13;
  s ^= s >> 7;
  s ^= s << 17;
  return s;
}

// ---- PackedValLog ---------------------------------------------------------------------------

TEST(PackedValLogTest, EncodeDecodeRoundTrip) {
  uint64_t rng = 7;
  const uint64_t offsets[] = {0, 16, 0x1230, Log::kOffsetLimit - 16, Log::kOffsetLimit / 2};
  for (uint32_t index = 0; index < Log::kInvalidIndex; ++index) {
    for (uint64_t off : offsets) {
      for (uint64_t e : {kBase, kBase + 6, kBase + 7, kBase + Next(rng) % (1u << 30)}) {
        Log log;
        ASSERT_TRUE(Log::TryEncode(index, off, e, &log));
        EXPECT_EQ(log.index(), index);
        EXPECT_TRUE(log.valid());
        EXPECT_EQ(log.offset(), off);
        EXPECT_EQ(log.epoch_low(), static_cast<uint16_t>(e));
        EXPECT_EQ(Log::FromBits(log.bits()), log);
      }
    }
  }
  const Log inv = Log::Invalid(kBase + 6);
  EXPECT_FALSE(inv.valid());
  EXPECT_EQ(inv.index(), Log::kInvalidIndex);
  EXPECT_EQ(inv.epoch_low(), 0);  // kBase + 6 = 2^40 + 2^16
  // The layout is the paper's: index in bits 0-3, offset >> 4 in 4-47, epoch low in 48-63.
  Log log;
  ASSERT_TRUE(Log::TryEncode(3, 0x120, 0xABCD, &log));
  EXPECT_EQ(log.bits(), 0xABCD000000000123ull);
}

TEST(PackedValLogTest, TryEncodeRejectsWhatDoesNotFit) {
  const Log before = Log::Invalid(1);
  Log out = before;
  for (uint64_t off : {uint64_t{1}, uint64_t{8}, uint64_t{24}, uint64_t{0x1238}, Log::kOffsetLimit,
                       Log::kOffsetLimit + 16, uint64_t{1} << 63}) {
    EXPECT_FALSE(Log::TryEncode(0, off, kBase, &out)) << off;
  }
  EXPECT_FALSE(Log::TryEncode(Log::kInvalidIndex, 16, kBase, &out));
  EXPECT_FALSE(Log::TryEncode(16, 16, kBase, &out));
  EXPECT_EQ(out, before);  // untouched on failure
  EXPECT_TRUE(Log::TryEncode(14, Log::kOffsetLimit - 16, kBase, &out));
}

// Every epoch at distance 0..65535 below (Widen) or above (WidenUp) the reference comes back
// exactly, for references at and around the first four wrap points after 2^40 + 65530, and
// for every reference in between at a few distances.
TEST(PackedValLogTest, WidenAtAndAroundEveryWrapPoint) {
  const uint64_t first_wrap = (kBase / kSpan + 1) * kSpan;
  for (uint64_t w = first_wrap; w < first_wrap + 4 * kSpan; w += kSpan) {
    for (uint64_t ref = w - 3; ref <= w + 3; ++ref) {
      for (uint64_t d = 0; d < kSpan; ++d) {
        ASSERT_EQ(Log::Widen(static_cast<uint16_t>(ref - d), ref), ref - d) << ref << " " << d;
        ASSERT_EQ(Log::WidenUp(static_cast<uint16_t>(ref + d), ref), ref + d) << ref << " " << d;
      }
    }
  }
  uint64_t rng = 11;
  for (uint64_t ref = kBase; ref < kBase + 4 * kSpan; ++ref) {
    for (uint64_t d : {uint64_t{0}, uint64_t{1}, kSpan - 1, Next(rng) % kSpan}) {
      ASSERT_EQ(Log::Widen(static_cast<uint16_t>(ref - d), ref), ref - d);
      ASSERT_EQ(Log::WidenUp(static_cast<uint16_t>(ref + d), ref), ref + d);
    }
  }
}

TEST(PackedValLogTest, WidenHasNoAnswerBelowZeroOrAboveTheTop) {
  EXPECT_EQ(Log::Widen(5, 3), Log::kNoEpoch);
  EXPECT_EQ(Log::Widen(3, 3), 3u);
  EXPECT_EQ(Log::Widen(0xFFFF, 0x10000), 0xFFFFu);
  EXPECT_EQ(Log::WidenUp(1, UINT64_MAX), Log::kNoEpoch);
  EXPECT_EQ(Log::WidenUp(0xFFFF, UINT64_MAX), UINT64_MAX);
}

TEST(PackedValLogTest, FallbackBoundaries) {
  const uint64_t first_wrap = (kBase / kSpan + 1) * kSpan;
  for (uint64_t node : {kBase, first_wrap - 1, first_wrap, first_wrap + 1, kBase + 3 * kSpan}) {
    for (uint64_t gap : {uint64_t{0}, uint64_t{1}, uint64_t{2}, kSpan - 2, kSpan - 1}) {
      EXPECT_FALSE(Log::NeedsExternalFallback(node + gap, node)) << node << " +" << gap;
    }
    for (uint64_t gap : {kSpan, kSpan + 1, 2 * kSpan, uint64_t{1} << 30}) {
      EXPECT_TRUE(Log::NeedsExternalFallback(node + gap, node)) << node << " +" << gap;
    }
    EXPECT_TRUE(Log::NeedsExternalFallback(node - 1, node));  // the clock behind the node
  }
}

// The rule is exact: a node last modified in n, modified again (value log written) in
// e = n + gap, crash in e. Four media states: node line {n, e} x value line {from n, from e}.
// For every gap up to 65535 each resolves right; at 65536 the stale log is taken for e's.
TEST(PackedValLogTest, FallbackRuleIsExact) {
  const uint64_t first_wrap = (kBase / kSpan + 1) * kSpan;
  auto all_right = [](uint64_t n, uint64_t e) {
    const FakeEpochView view(e + 2, e + 2, {{e, e + 1}});
    Log from_n, from_e;
    EXPECT_TRUE(Log::TryEncode(2, 0x40, n, &from_n));
    EXPECT_TRUE(Log::TryEncode(2, 0x80, e, &from_e));
    return !from_n.NeedsRollback(view, e) && from_e.NeedsRollback(view, e) &&  // node line: e
           !from_n.NeedsRollback(view, n) && from_e.NeedsRollback(view, n);    // node line: n
  };
  for (uint64_t n : {kBase, first_wrap - 1, first_wrap, first_wrap + 1, first_wrap + kSpan / 2}) {
    for (uint64_t gap = 1; gap <= Log::kMaxEpochGap; ++gap) {
      ASSERT_FALSE(Log::NeedsExternalFallback(n + gap, n));
      ASSERT_TRUE(all_right(n, n + gap)) << n << " +" << gap;
    }
    EXPECT_TRUE(Log::NeedsExternalFallback(n + kSpan, n));
    EXPECT_FALSE(all_right(n, n + kSpan)) << "a gap of 2^16 should be ambiguous";
  }
}

TEST(PackedValLogTest, ResolveUsesTheNodeEpochsVerdict) {
  const uint64_t n = kBase;              // low bits 65530
  const Log log = Log::Invalid(n + 10);  // low bits 4, after the wrap
  EXPECT_EQ(log.ResolveEpoch(n, /*node_epoch_failed=*/false), n + 10);
  EXPECT_EQ(log.ResolveEpoch(n, /*node_epoch_failed=*/true), n + 10 - kSpan);
  EXPECT_FALSE(log.NeedsRollback(FakeEpochView(n + 12, n + 12, {{n + 10, n + 11}}), n));
}

// ---- placement ------------------------------------------------------------------------------

struct alignas(64) SampleNode {
  uint64_t header[3];
  NodeInCLL incll;
  std::atomic<uint64_t> permutation;
  uint64_t keys[8];
  InCLLWord<uint64_t> counter;
};
PMRT_ASSERT_SAME_LINE(SampleNode, incll, permutation);
PMRT_ASSERT_SAME_LINE(SampleNode, counter, counter);
static_assert(!SharesLine(offsetof(SampleNode, incll), 24, offsetof(SampleNode, keys) + 8, 8));
static_assert(SharesLine(0, 8, 56, 8) && !SharesLine(56, 16, 56, 8) && !SharesLine(0, 0, 0, 8));

TEST(InCLLPlacementTest, RuntimeLineChecks) {
  alignas(64) uint8_t buf[256];
  EXPECT_TRUE(OnOneLine(buf + 32, 32));
  EXPECT_FALSE(OnOneLine(buf + 40, 32));
  EXPECT_TRUE(SharesLineAt(buf + 64, 8, buf + 120, 8));
  EXPECT_FALSE(SharesLineAt(buf + 64, 8, buf + 128, 8));
  SampleNode node{};
  EXPECT_TRUE(SharesLineAt(&node.incll, sizeof(node.incll), &node.permutation, 8));
  EXPECT_TRUE(OnOneLine(&node.counter, sizeof(node.counter)));
}

// ---- InCLLWord --------------------------------------------------------------------------------

// A word with `v0` durable at kBase, the first epoch of its execution.
void Init(InCLLWord<uint64_t>& w, uint64_t v0) {
  const FakeEpochView first_run(kBase, kBase);
  DirtyLog d;
  w.Recover(first_run, kNoSim, d);
  w.Store(v0, kBase, kNoSim, d);
}

// The same media state in another word (as if the line had been read back after a crash).
void CopyWord(InCLLWord<uint64_t>& to, const InCLLWord<uint64_t>& from) {
  to.value.store(from.value.load());
  to.undo.store(from.undo.load());
  to.epoch.store(from.epoch.load());
}

TEST(InCLLWordTest, FirstStoreInEpochLogsAndRecordsDirtyOnce) {
  InCLLWord<uint64_t> w{};
  Init(w, 10);
  DirtyLog d;
  EXPECT_TRUE(w.Store(11, kBase + 1, kNoSim, d));
  EXPECT_FALSE(w.Store(12, kBase + 1, kNoSim, d));
  ASSERT_EQ(d.ranges.size(), 1u);
  EXPECT_EQ(d.ranges[0].addr, &w);
  EXPECT_EQ(d.ranges[0].len, sizeof(w));
  EXPECT_EQ(w.Load(), 12u);
  EXPECT_EQ(w.undo.load(), 10u);
  EXPECT_EQ(w.tag(), kBase + 1);
}

TEST(InCLLWordTest, ModifyInFailedEpochIsRolledBack) {
  InCLLWord<uint64_t> w{};
  Init(w, 10);
  DirtyLog d;
  w.Store(11, kBase + 1, kNoSim, d);
  w.Store(12, kBase + 1, kNoSim, d);
  const FakeEpochView restart = AfterCrash(kBase, {});  // crash in kBase + 1
  EXPECT_EQ(w.Recover(restart, kNoSim, d), Recovery::kRolledBack);
  EXPECT_EQ(w.Load(), 10u);
  EXPECT_EQ(w.Recover(restart, kNoSim, d), Recovery::kNotNeeded);
}

TEST(InCLLWordTest, ModifyInCompletedEpochIsKept) {
  InCLLWord<uint64_t> w{};
  Init(w, 10);
  DirtyLog d;
  w.Store(11, kBase + 1, kNoSim, d);
  const FakeEpochView restart = AfterCrash(kBase + 1, {});  // crash in kBase + 2
  EXPECT_EQ(w.Recover(restart, kNoSim, d), Recovery::kKept);
  EXPECT_EQ(w.Load(), 11u);
}

// After Recover the recovered value is also the undo for the execution's first epoch.
TEST(InCLLWordTest, RecoveryRearmsForThisExecution) {
  InCLLWord<uint64_t> w{};
  Init(w, 10);
  DirtyLog d;
  w.Store(11, kBase + 1, kNoSim, d);  // completed
  const FakeEpochView restart = AfterCrash(kBase + 1, {});
  DirtyLog rd;
  w.Recover(restart, kNoSim, rd);
  EXPECT_EQ(rd.ranges.size(), 1u);  // the repair is registered for the boundary
  EXPECT_EQ(w.tag(), restart.execution_first());
  EXPECT_EQ(w.undo.load(), 11u);
  // A store in the first epoch logs nothing (and needs nothing: recovery registered the line).
  EXPECT_FALSE(w.Store(20, restart.execution_first(), kNoSim, rd));
  // Crash in that first epoch: back to the recovered value, not to 10.
  const FakeEpochView again = AfterCrash(restart.execution_first() - 1, restart.failed());
  EXPECT_EQ(w.Recover(again, kNoSim, rd), Recovery::kRolledBack);
  EXPECT_EQ(w.Load(), 11u);
}

TEST(InCLLWordTest, TwoCrashesInARow) {
  DirtyLog d;
  // Execution 1: 1 in kBase (completed), 2 in kBase + 1 (crash).
  InCLLWord<uint64_t> w{};
  Init(w, 1);
  w.Store(2, kBase + 1, kNoSim, d);
  const FakeEpochView run2 = AfterCrash(kBase, {});
  const uint64_t x2 = run2.execution_first();
  // (a) Execution 2 never touches the word and crashes later: the tag still names the first
  //     failed epoch, which the durable failed set remembers.
  {
    InCLLWord<uint64_t> a{};
    CopyWord(a, w);
    const FakeEpochView run3 = AfterCrash(x2 + 5, run2.failed());
    EXPECT_EQ(a.Recover(run3, kNoSim, d), Recovery::kRolledBack);
    EXPECT_EQ(a.Load(), 1u);
  }
  // (b) Execution 2 repairs it, writes 3 in x2 + 1 (completed) and 4 in x2 + 2 (crash).
  {
    InCLLWord<uint64_t> b{};
    CopyWord(b, w);
    EXPECT_EQ(b.Recover(run2, kNoSim, d), Recovery::kRolledBack);
    b.Store(3, x2 + 1, kNoSim, d);
    b.Store(4, x2 + 2, kNoSim, d);
    const FakeEpochView run3 = AfterCrash(x2 + 1, run2.failed());
    EXPECT_EQ(b.Recover(run3, kNoSim, d), Recovery::kRolledBack);
    EXPECT_EQ(b.Load(), 3u);
  }
  // (c) Execution 2 repairs it, writes 5 in its first epoch, crashes in it.
  {
    InCLLWord<uint64_t> c{};
    CopyWord(c, w);
    c.Recover(run2, kNoSim, d);
    c.Store(5, x2, kNoSim, d);
    const FakeEpochView run3 = AfterCrash(x2 - 1, run2.failed());
    EXPECT_EQ(c.Recover(run3, kNoSim, d), Recovery::kRolledBack);
    EXPECT_EQ(c.Load(), 1u);
  }
}

// ---- NodeInCLL ----------------------------------------------------------------------------------

TEST(NodeInCLLTest, BeginModifyLogsThePermutationOncePerEpoch) {
  SampleNode node{};
  DirtyLog d;
  const FakeEpochView first_run(kBase, kBase);
  EXPECT_EQ(LazyRecover(node.incll, node.permutation, first_run, kNoSim, d), Recovery::kKept);
  EXPECT_FALSE(BeginModify(node.incll, node.permutation, kBase, kNoSim, d));
  StoreLogged(node.permutation, 0x21, kNoSim);
  EXPECT_TRUE(BeginModify(node.incll, node.permutation, kBase + 1, kNoSim, d));
  EXPECT_TRUE(node.incll.insert_allowed());
  EXPECT_FALSE(node.incll.logged());
  node.incll.clear_insert_allowed();
  node.incll.set_logged();
  StoreLogged(node.permutation, 0x321, kNoSim);
  EXPECT_FALSE(BeginModify(node.incll, node.permutation, kBase + 1, kNoSim, d));
  EXPECT_FALSE(node.incll.insert_allowed());  // flags hold for the rest of the epoch
  EXPECT_TRUE(node.incll.logged());
  EXPECT_EQ(node.incll.perm_log.load(), 0x21u);
  EXPECT_EQ(node.incll.epoch.load(), kBase + 1);
  EXPECT_EQ(d.ranges.size(), 2u);  // the recovery and the first modification in kBase + 1
}

TEST(NodeInCLLTest, LazyRecoverRestoresTheFailedEpochsPermutation) {
  SampleNode node{};
  DirtyLog d;
  LazyRecover(node.incll, node.permutation, FakeEpochView(kBase, kBase), kNoSim, d);
  BeginModify(node.incll, node.permutation, kBase, kNoSim, d);
  StoreLogged(node.permutation, 0x1, kNoSim);
  BeginModify(node.incll, node.permutation, kBase + 1, kNoSim, d);
  StoreLogged(node.permutation, 0x21, kNoSim);
  node.incll.set_logged();
  const FakeEpochView restart = AfterCrash(kBase, {});
  EXPECT_EQ(LazyRecover(node.incll, node.permutation, restart, kNoSim, d), Recovery::kRolledBack);
  EXPECT_EQ(node.permutation.load(), 0x1u);
  EXPECT_EQ(node.incll.perm_log.load(), 0x1u);
  EXPECT_EQ(node.incll.epoch.load(), restart.execution_first());
  EXPECT_TRUE(node.incll.insert_allowed());
  EXPECT_FALSE(node.incll.logged());
  EXPECT_EQ(LazyRecover(node.incll, node.permutation, restart, kNoSim, d), Recovery::kNotNeeded);
}

// ---- RecoverOnce ----------------------------------------------------------------------------

TEST(RecoveryLocksTest, RecoverOnceRunsRecoverExactlyOnceWithTwoThreads) {
  RecoveryLocks locks;
  DirtyLog unused;
  for (int round = 0; round < 300; ++round) {
    InCLLWord<uint64_t> w{};
    Init(w, 100);
    w.Store(200, kBase + 1, kNoSim, unused);
    const FakeEpochView restart = AfterCrash(kBase, {});
    std::atomic<int> runs{0}, ready{0};
    std::atomic<bool> go{false};
    uint64_t seen[2] = {0, 0};
    auto reader = [&](int i) {
      ready.fetch_add(1);
      while (!go.load(std::memory_order_acquire)) std::this_thread::yield();
      RecoverOnce(locks, &w, w.epoch, restart, [&] {
        runs.fetch_add(1);
        DirtyLog d;  // per-thread: only the winner writes it
        w.Recover(restart, kNoSim, d);
      });
      seen[i] = w.Load();
    };
    std::thread a(reader, 0), b(reader, 1);
    while (ready.load() < 2) std::this_thread::yield();
    go.store(true, std::memory_order_release);
    a.join();
    b.join();
    ASSERT_EQ(runs.load(), 1) << "round " << round;
    EXPECT_EQ(seen[0], 100u);
    EXPECT_EQ(seen[1], 100u);
  }
}

TEST(RecoveryLocksTest, FastPathTakesNoLock) {
  RecoveryLocks locks;
  InCLLWord<uint64_t> w{};
  Init(w, 1);
  std::unique_lock<std::mutex> held(locks.For(&w));
  auto f = std::async(std::launch::async, [&] {
    return RecoverOnce(locks, &w, w.epoch, FakeEpochView(kBase, kBase), [] { std::abort(); });
  });
  const bool done = f.wait_for(std::chrono::seconds(10)) == std::future_status::ready;
  held.unlock();
  EXPECT_TRUE(done);
  EXPECT_FALSE(f.get());
}

TEST(RecoveryLocksTest, NeighbouringLinesSpreadOverStripes) {
  std::set<size_t> used;
  for (uintptr_t line = 0; line < RecoveryLocks::kStripes; ++line) {
    used.insert(RecoveryLocks::Index(reinterpret_cast<const void*>(0x7f0000000000 + line * 64)));
  }
  EXPECT_GT(used.size(), RecoveryLocks::kStripes / 2);
}

// ---- crash tests ----------------------------------------------------------------------------

constexpr size_t kSimSize = 1 << 20;
constexpr size_t kCellsOffset = 4096;
constexpr Site kBoundary{"test.incll.boundary"};  // the mini checkpoint's batch flush
constexpr Site kCompletedFlush{"test.incll.completed.flush"};
constexpr Site kCompletedFence{"test.incll.completed.fence"};
constexpr Site kFailedFlush{"test.incll.failed.flush"};  // the next execution's failed set
constexpr Site kFailedFence{"test.incll.failed.fence"};
constexpr Site kTick{"test.incll.tick"};  // an extra crash point inside an epoch

// The test heap's durable header: the checkpoint record and the failed set (what the epoch
// layer keeps in its area), one line each.
struct alignas(64) Header {
  std::atomic<uint64_t> completed;  // the last epoch whose boundary flush finished
  alignas(64) std::atomic<uint64_t> failed_count;
  std::atomic<uint64_t> failed_lo[3];  // inclusive failed ranges, oldest first
  std::atomic<uint64_t> failed_hi[3];
};
static_assert(sizeof(Header) == 128);

Ranges ReadFailed(const Header& h) {
  Ranges r;
  for (uint64_t i = 0; i < std::min<uint64_t>(h.failed_count.load(), 3); ++i)
    r.push_back({h.failed_lo[i].load(), h.failed_hi[i].load()});
  return r;
}

// The records under test, behind one interface.
struct WordCell {
  InCLLWord<uint64_t> w;
  uint64_t Read() const { return w.value.load(std::memory_order_relaxed); }
  const std::atomic<uint64_t>& tag() const { return w.epoch; }
  template <class D>
  void Write(uint64_t v, uint64_t e, const Persister& p, D& dirty) {
    w.Store(v, e, p, dirty);
  }
  template <class D>
  Recovery Recover(const EpochView& view, const Persister& p, D& dirty) {
    return w.Recover(view, p, dirty);
  }
  static std::vector<Site> Mutants() { return {kWordStoreOrder, kWordRecoverOrder}; }
};

struct alignas(64) NodeCell {
  NodeInCLL incll;
  std::atomic<uint64_t> perm;
  uint64_t Read() const { return perm.load(std::memory_order_relaxed); }
  const std::atomic<uint64_t>& tag() const { return incll.epoch; }
  template <class D>
  void Write(uint64_t v, uint64_t e, const Persister& p, D& dirty) {
    BeginModify(incll, perm, e, p, dirty);
    StoreLogged(perm, v, p);
  }
  template <class D>
  Recovery Recover(const EpochView& view, const Persister& p, D& dirty) {
    return LazyRecover(incll, perm, view, p, dirty);
  }
  static std::vector<Site> Mutants() { return {kNodeStoreOrder, kNodeRecoverOrder}; }
};
PMRT_ASSERT_SAME_LINE(NodeCell, incll, perm);

struct CrashConfig {
  uint64_t seed = 1;
  uint64_t target_images = 30000;
  int cells = 24;
  int ops_per_epoch = 5;
  int tick_every = 2;          // a tick fence after every this many operations
  int nested_every = 200;      // every Nth image runs (and crashes) the next execution instead
  std::optional<Site> mutant;  // disabled (or swapped) from epoch kBase + 1 + mutant_delay on
  int mutant_delay = 10;       // steady state: every record has been logged in a few epochs
};

struct CrashOutcome {
  Sim::Stats stats;
  std::vector<Sim::Failure> failures;
  uint64_t epochs = 0, outer_images = 0, nested_runs = 0;
  double seconds = 0;
};

using State = std::vector<uint64_t>;

// One execution over the heap at `base`: epochs of random writes, each ended by a mini
// checkpoint; snapshots[e] is the model once e is complete.
template <class Cell>
struct Execution {
  Execution(void* heap, Persister persister, FakeEpochView v, const CrashConfig& config,
            State start, uint64_t seed)
      : base(static_cast<uint8_t*>(heap)),
        p(persister),
        view(std::move(v)),
        cfg(config),
        model(std::move(start)),
        rng(seed) {}

  uint8_t* base;
  Persister p;
  FakeEpochView view;
  const CrashConfig& cfg;
  State model;
  std::map<uint64_t, State> snapshots;
  uint64_t rng;
  uint64_t next_value = 1000;
  RecoveryLocks* locks = nullptr;  // lazy recovery on first access when set
  std::vector<Range> dirty;

  Header& header() { return *reinterpret_cast<Header*>(base); }
  Cell& cell(size_t i) { return reinterpret_cast<Cell*>(base + kCellsOffset)[i]; }

  void Write(uint64_t e) { WriteCell(e, Next(rng) % model.size()); }

  void WriteCell(uint64_t e, size_t i) {
    auto record = [this](const void* a, size_t n) { dirty.push_back({a, n}); };
    if (locks != nullptr) {
      RecoverOnce(*locks, &cell(i), cell(i).tag(), view, [&] { cell(i).Recover(view, p, record); });
    }
    model[i] = next_value++;
    cell(i).Write(model[i], e, p, record);
  }

  // The mini checkpoint: the epoch's dirty lines, then `completed`.
  void Boundary(uint64_t e) {
    p.FlushBatch(kBoundary, dirty);
    dirty.clear();
    snapshots[e] = model;
    header().completed.store(e, std::memory_order_release);
    p.Persist(kCompletedFlush, kCompletedFence, &header().completed, 8);
  }

  void RunEpoch(uint64_t e) {
    for (int k = 1; k <= cfg.ops_per_epoch; ++k) {
      Write(e);
      if (k % cfg.tick_every == 0) p.Fence(kTick);
    }
    Boundary(e);
  }

  // What epoch::Manager::Open does first: the failed set, then `completed`, both durable.
  void Open() {
    Header& h = header();
    const Ranges& f = view.failed();
    for (size_t i = 0; i < f.size(); ++i) {
      h.failed_lo[i].store(f[i].first);
      h.failed_hi[i].store(f[i].second);
    }
    h.failed_count.store(f.size());
    p.Persist(kFailedFlush, kFailedFence, &h.failed_count, 56);
    h.completed.store(view.execution_first() - 1);
    p.Persist(kCompletedFlush, kCompletedFence, &h.completed, 8);
  }
};

// The oracle: recover every record of the image eagerly and compare with the snapshot of the
// epoch the image says completed last.
template <class Cell>
absl::Status CheckImage(void* base, size_t cells, const std::map<uint64_t, State>& snapshots) {
  const Header& h = *static_cast<const Header*>(base);
  const uint64_t c = h.completed.load();
  const FakeEpochView view = AfterCrash(c, ReadFailed(h));
  auto it = snapshots.find(c);
  if (it == snapshots.end()) return absl::DataLossError(absl::StrCat("no snapshot for ", c));
  auto* cell = reinterpret_cast<Cell*>(static_cast<uint8_t*>(base) + kCellsOffset);
  DirtyLog unused;
  for (size_t i = 0; i < cells; ++i) {
    const uint64_t tag = cell[i].tag().load();
    cell[i].Recover(view, kNoSim, unused);
    if (cell[i].Read() != it->second[i]) {
      return absl::DataLossError(absl::StrCat("cell ", i, " (tag ", tag, ") = ", cell[i].Read(),
                                              ", expected ", it->second[i], " (completed ", c,
                                              ", execution_first ", view.execution_first(), ")"));
    }
    if (cell[i].Recover(view, kNoSim, unused) != Recovery::kNotNeeded)
      return absl::InternalError("recovery is not idempotent");
  }
  return absl::OkStatus();
}

// The next execution on a crash image, under a nested simulator: open, then two epochs whose
// writes repair each record lazily on first access; every fence is a crash point again.
template <class Cell>
absl::Status RunNextExecution(CrashImage& img, const CrashConfig& cfg,
                              const std::map<uint64_t, State>& snapshots) {
  const Header& h = *static_cast<const Header*>(img.base());
  const uint64_t c = h.completed.load();
  auto it = snapshots.find(c);
  if (it == snapshots.end()) return absl::DataLossError(absl::StrCat("no snapshot for ", c));
  Sim::Options o;
  o.random_images = 1;
  o.exhaustive_max_lines = 3;
  o.max_single_line_images = 8;
  RecoveryLocks locks;
  std::optional<Execution<Cell>> ex;  // the handler reads its snapshots
  return img.RunNested(
      o,
      [&](Sim& nested) {
        ex.emplace(nested.working(), nested.persister(), AfterCrash(c, ReadFailed(h)), cfg,
                   it->second, img.id().fence * 7919 + img.id().image + 1);
        ex->locks = &locks;
        ex->next_value = uint64_t{1} << 30;
        ex->snapshots[c] = it->second;  // a crash before Open moved `completed`
        ex->snapshots[ex->view.execution_first() - 1] = it->second;
        ex->Open();
        const uint64_t x = ex->view.execution_first();
        for (uint64_t e = x; e < x + 2; ++e) ex->RunEpoch(e);
      },
      [&](CrashImage& nested_img) {
        return CheckImage<Cell>(nested_img.base(), cfg.cells, ex->snapshots);
      });
}

template <class Cell>
CrashOutcome RunCrash(const CrashConfig& cfg) {
  CrashOutcome out;
  Sim::Options o;
  o.seed = cfg.seed;
  o.max_images = cfg.target_images;
  o.crash_points = Sim::CrashPoints::kNone;  // the setup epoch has no crash points
  auto sim_or = Sim::Create(kSimSize, o);
  EXPECT_OK(sim_or);
  if (!sim_or.ok()) return out;
  Sim& sim = **sim_or;
  Execution<Cell> ex(sim.working(), sim.persister(), FakeEpochView(kBase, kBase), cfg,
                     State(cfg.cells, 0), cfg.seed * 2654435761u + 1);
  // Setup: every record repaired (fresh) and written once in kBase, made durable.
  ex.header().completed.store(kBase - 1);
  sim.persister().Persist(kCompletedFlush, kCompletedFence, &ex.header().completed, 8);
  RecoveryLocks locks;
  ex.locks = &locks;
  for (int i = 0; i < cfg.cells; ++i) ex.WriteCell(kBase, i);
  ex.Boundary(kBase);
  ex.locks = nullptr;  // this execution repaired everything already
  sim.SetHandler([&](CrashImage& img) -> absl::Status {
    // Either check now, or run the next execution on the untouched image (its own crash
    // points check the same state first). Checking first would repair the image behind the
    // nested simulator's back.
    ++out.outer_images;
    if (cfg.nested_every == 0 || out.outer_images % cfg.nested_every != 1) {
      return CheckImage<Cell>(img.base(), cfg.cells, ex.snapshots);
    }
    ++out.nested_runs;
    return RunNextExecution<Cell>(img, cfg, ex.snapshots);
  });
  sim.SetCrashPoints(Sim::CrashPoints::kEveryFence);
  const auto start = std::chrono::steady_clock::now();
  for (uint64_t e = kBase + 1; !sim.failed() && sim.stats().images < cfg.target_images; ++e) {
    if (cfg.mutant && e == kBase + 1 + cfg.mutant_delay) mutation::Disable(*cfg.mutant);
    ex.RunEpoch(e);
    ++out.epochs;
  }
  mutation::EnableAll();
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  out.stats = sim.stats();
  out.failures = sim.failures();
  return out;
}

template <class Cell>
void ExpectEveryImageRecovers(const char* what, uint64_t seed) {
  CrashConfig cfg;
  cfg.seed = seed;
  cfg.target_images = testing::EnvOr("PMRT_SIM_IMAGES", 60000);
  CrashOutcome r = RunCrash<Cell>(cfg);
  ASSERT_TRUE(r.failures.empty()) << r.failures[0].ToString();
  EXPECT_GE(r.stats.images, cfg.target_images);
  std::printf(
      "%s: %lu epochs, %lu crash points, %lu images (%lu in this execution, %lu in %lu next "
      "executions) in %.2f s\n",
      what, r.epochs, r.stats.crash_points, r.stats.images, r.outer_images,
      r.stats.images - r.outer_images, r.nested_runs, r.seconds);
}

TEST(InCLLCrashTest, WordsRecoverToTheFailedEpochsStart) {
  ExpectEveryImageRecovers<WordCell>("InCLLWord", 1);
}

TEST(InCLLCrashTest, NodesRecoverToTheFailedEpochsStart) {
  ExpectEveryImageRecovers<NodeCell>("NodeInCLL", 2);
}

// nested_every = 0: caught by crashes in the execution that runs the mutant alone.
template <class Cell>
bool MutantIsCaught(const Site& site, int nested_every) {
  CrashConfig cfg;
  cfg.target_images = 200000;
  cfg.nested_every = nested_every;
  cfg.mutant = site;
  CrashOutcome r = RunCrash<Cell>(cfg);
  if (r.failures.empty()) {
    std::printf("mutant %-32s SURVIVED %lu images\n", site.name, r.stats.images);
    return false;
  }
  std::printf("mutant %-32s killed after %6lu images (%lu epochs): %s\n", site.name, r.stats.images,
              r.epochs, r.failures[0].message.c_str());
  return true;
}

TEST(InCLLCrashTest, StoreOrderMutantIsCaught) {
  EXPECT_TRUE(MutantIsCaught<WordCell>(kWordStoreOrder, 0));
  EXPECT_TRUE(MutantIsCaught<NodeCell>(kNodeStoreOrder, 0));
}

TEST(InCLLCrashTest, MissingBoundaryFlushIsCaught) {
  EXPECT_TRUE(MutantIsCaught<WordCell>(kBoundary, 0));
  EXPECT_TRUE(MutantIsCaught<NodeCell>(kBoundary, 0));
}

// The rest of the gate: the recovery-order mutants (only a crash in the next execution can
// expose them) and the checkpoint record's flush and fence.
TEST(InCLLCrashTest, MutationGateKillsEverySite) {
  EXPECT_TRUE(MutantIsCaught<WordCell>(kWordRecoverOrder, 20));
  EXPECT_TRUE(MutantIsCaught<NodeCell>(kNodeRecoverOrder, 20));
  EXPECT_TRUE(MutantIsCaught<WordCell>(kCompletedFlush, 0));
  EXPECT_TRUE(MutantIsCaught<WordCell>(kCompletedFence, 0));
  EXPECT_TRUE(MutantIsCaught<NodeCell>(kCompletedFence, 0));
}

}  // namespace
}  // namespace pmrt::epoch
