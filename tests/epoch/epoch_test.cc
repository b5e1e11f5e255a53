// Unit tests of the epoch clock, guards, failed-epoch bookkeeping, reclamation and the external
// undo log. Crash consistency under the simulator is in epoch_crash_test.cc.
#include "epoch/epoch.h"

#include <sys/mman.h>

#include <cstring>
#include <thread>

#include "base/crc32c.h"
#include "epoch/pool.h"
#include "gtest/gtest.h"
#include "tests/util/test_util.h"

namespace pmrt::epoch {
namespace {

constexpr size_t kPoolSize = 4 << 20;

// Pool memory that can be "crashed": a copy of it is what a kill (everything evicted) leaves.
class Memory {
 public:
  Memory() {
    base_ = mmap(nullptr, kPoolSize, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  }
  ~Memory() { munmap(base_, kPoolSize); }
  void* base() const { return base_; }
  void CopyFrom(const Memory& other) { std::memcpy(base_, other.base_, kPoolSize); }

 private:
  void* base_;
};

PoolOptions Eadr() {
  PoolOptions o;
  o.backend = BackendKind::kEadr;
  return o;
}

ManagerOptions Manual() {
  ManagerOptions o;
  o.interval = std::chrono::milliseconds(0);
  return o;
}

struct Opened {
  std::unique_ptr<Pool> pool;
  std::unique_ptr<Manager> epochs;
};

Opened Open(Memory& m, bool create) {
  auto pool = create ? Pool::CreateInMemory(m.base(), kPoolSize, "epoch-test", Eadr())
                     : Pool::OpenInMemory(m.base(), kPoolSize, "epoch-test", Eadr());
  EXPECT_OK(pool);
  auto epochs = Manager::Open(**pool, Manual());
  EXPECT_OK(epochs);
  return {std::move(*pool), std::move(*epochs)};
}

TEST(EpochTest, FreshPoolStartsAtEpochOne) {
  Memory m;
  Opened o = Open(m, true);
  EXPECT_EQ(o.epochs->completed(), 0u);
  EXPECT_EQ(o.epochs->current(), 1u);
  EXPECT_EQ(o.epochs->execution_first(), 1u);
  EXPECT_TRUE(o.epochs->failed_ranges().empty());
  ASSERT_OK(o.epochs->Advance());
  EXPECT_EQ(o.epochs->completed(), 1u);
  EXPECT_EQ(o.epochs->current(), 2u);
}

TEST(EpochTest, CleanReopenContinuesWithoutFailedEpochs) {
  Memory m;
  uint64_t last;
  {
    Opened o = Open(m, true);
    for (int i = 0; i < 5; ++i) ASSERT_OK(o.epochs->Advance());
    last = o.epochs->current();
  }  // manager advances to make everything durable, pool closes cleanly
  Opened o = Open(m, false);
  EXPECT_TRUE(o.epochs->failed_ranges().empty());
  EXPECT_GT(o.epochs->execution_first(), last);
  EXPECT_TRUE(o.epochs->PredatesExecution(last));
}

// An open that fails in recovery (a malformed failed range; a failed-epoch set with no room for
// this crash's range) writes nothing: the half-built manager's destructor does not advance, so
// `completed` and the rest of the area stay as they were and the next open recovers again.
TEST(EpochTest, AFailedOpenLeavesTheAreaUnchanged) {
  for (const bool full : {false, true}) {
    Memory a, b, before;
    {
      Opened o = Open(a, true);
      for (int i = 0; i < 3; ++i) ASSERT_OK(o.epochs->Advance());
      b.CopyFrom(a);  // a crash
    }
    auto pool = Pool::OpenInMemory(b.base(), kPoolSize, "epoch-test", Eadr());
    ASSERT_OK(pool);
    auto* area = static_cast<EpochAreaLayout*>((*pool)->region_base(PoolRegion::kEpoch));
    if (full) {  // every range an ordinary open may use taken, none contiguous with this crash's
      for (size_t i = 0; i + 1 < kMaxFailedRanges; ++i) area->failed[i] = {10 * i + 1, 10 * i + 2};
      area->failed_count.store(kMaxFailedRanges - 1);
      area->completed.store(10 * kMaxFailedRanges + 100);
    } else {  // range 1 has lo > hi
      area->failed[0] = {1, 2};
      area->failed[1] = {9, 3};
      area->failed_count.store(2);
    }
    before.CopyFrom(b);
    auto m = Manager::Open(**pool, Manual());
    ASSERT_FALSE(m.ok());
    EXPECT_EQ(m.status().code(),
              full ? absl::StatusCode::kResourceExhausted : absl::StatusCode::kDataLoss)
        << m.status();
    EXPECT_EQ(std::memcmp(b.base(), before.base(), kPoolSize), 0)
        << (full ? "full set" : "malformed range") << ": the failed open wrote to the pool";
  }
}

// A full failed-epoch set: an ordinary open is refused (above); an open for repair records
// the crash in the reserved last slot, and ClearFailedEpochs empties the set durably, so later
// crashes are recorded from slot 0 again. The epochs before stay predating the execution.
TEST(EpochTest, ARepairOpenUsesTheLastSlotAndClearEmptiesTheSet) {
  Memory a, b, c;
  {
    Opened o = Open(a, true);
    for (int i = 0; i < 3; ++i) ASSERT_OK(o.epochs->Advance());
    b.CopyFrom(a);  // a crash
  }
  uint64_t completed;
  {
    auto pool = Pool::OpenInMemory(b.base(), kPoolSize, "epoch-test", Eadr());
    ASSERT_OK(pool);
    auto* area = static_cast<EpochAreaLayout*>((*pool)->region_base(PoolRegion::kEpoch));
    completed = area->completed.load();
    for (size_t i = 0; i + 1 < kMaxFailedRanges; ++i) area->failed[i] = {i + 1, i + 1};
    ASSERT_LT(kMaxFailedRanges, completed + 0x100000);
    // Ranges below `completed`: shift it up past them, with room before this crash's range.
    area->completed.store(completed + 2 * kMaxFailedRanges);
    area->failed_count.store(kMaxFailedRanges - 1);
    EXPECT_EQ(Manager::Open(**pool, Manual()).status().code(),
              absl::StatusCode::kResourceExhausted);
    ManagerOptions repair = Manual();
    repair.repair = true;
    auto m = Manager::Open(**pool, repair);
    ASSERT_OK(m);
    EXPECT_EQ((*m)->failed_ranges().size(), kMaxFailedRanges);
    const uint64_t crashed = completed + 2 * kMaxFailedRanges + 1;
    EXPECT_TRUE((*m)->IsFailed(crashed));
    ASSERT_OK((*m)->ClearFailedEpochs());
    EXPECT_TRUE((*m)->failed_ranges().empty());
    EXPECT_FALSE((*m)->IsFailed(crashed));
    EXPECT_EQ(area->failed_count.load(), 0u);
    ASSERT_OK((*m)->Advance());
    c.CopyFrom(b);  // a crash after the repair
    // Under a guard of the caller's own: refused, not a wait.
    Guard g(**m);
    EXPECT_EQ((*m)->ClearFailedEpochs().code(), absl::StatusCode::kFailedPrecondition);
  }
  // The next crash's range is the only one, in slot 0.
  Opened o = Open(c, false);
  ASSERT_EQ(o.epochs->failed_ranges().size(), 1u);
  EXPECT_GT(o.epochs->failed_ranges()[0].first, completed + 2 * kMaxFailedRanges);
}

TEST(EpochTest, FailedEpochsAcrossSeveralCrashesInARow) {
  Memory a, b, c, d;
  uint64_t crashed_in;
  {
    Opened o = Open(a, true);
    for (int i = 0; i < 3; ++i) ASSERT_OK(o.epochs->Advance());
    crashed_in = o.epochs->current();  // 5
    b.CopyFrom(a);                     // crash: the process dies here
  }
  {
    Opened o = Open(b, false);
    ASSERT_EQ(o.epochs->failed_ranges().size(), 1u);
    EXPECT_TRUE(o.epochs->IsFailed(crashed_in));
    EXPECT_TRUE(o.epochs->IsFailed(crashed_in + 1));  // an advance may have begun
    EXPECT_FALSE(o.epochs->IsFailed(crashed_in - 1));
    EXPECT_FALSE(o.epochs->IsFailed(crashed_in + 2));
    EXPECT_EQ(o.epochs->execution_first(), crashed_in + 2);
    c.CopyFrom(b);  // crash again at once, during the first epoch of the new execution
  }
  {
    Opened o = Open(c, false);
    // Contiguous with the earlier range: widened in place, one range.
    ASSERT_EQ(o.epochs->failed_ranges().size(), 1u);
    EXPECT_TRUE(o.epochs->IsFailed(crashed_in + 2));
    EXPECT_TRUE(o.epochs->IsFailed(crashed_in + 3));
    for (int i = 0; i < 4; ++i) ASSERT_OK(o.epochs->Advance());
    d.CopyFrom(c);  // and a third crash after some completed epochs
  }
  Opened o = Open(d, false);
  auto ranges = o.epochs->failed_ranges();
  ASSERT_EQ(ranges.size(), 2u);
  EXPECT_EQ(ranges[0], std::make_pair(crashed_in, crashed_in + 3));
  EXPECT_FALSE(o.epochs->IsFailed(ranges[0].second + 1));  // completed in the third run
  EXPECT_TRUE(o.epochs->IsFailed(ranges[1].first));
}

TEST(EpochTest, CorruptEpochAreaIsDataLoss) {
  Memory m, broken;
  { Opened o = Open(m, true); }
  broken.CopyFrom(m);
  {
    auto pool = Pool::OpenInMemory(broken.base(), kPoolSize, "epoch-test", Eadr(), "broken");
    ASSERT_OK(pool);
    auto* area = static_cast<EpochAreaLayout*>((*pool)->region_base(PoolRegion::kEpoch));
    area->header.crc ^= 1;
    EXPECT_THAT(Manager::Open(**pool, Manual()),
                testing::StatusIs(absl::StatusCode::kDataLoss, "epoch area at offset"));
    area->header.crc ^= 1;
    area->failed_count.store(kMaxFailedRanges + 1);
    EXPECT_THAT(Manager::Open(**pool, Manual()),
                testing::StatusIs(absl::StatusCode::kDataLoss, "failed-epoch count"));
    area->header.magic = 0;  // state without a header: never a fresh area
    EXPECT_THAT(Manager::Open(**pool, Manual()),
                testing::StatusIs(absl::StatusCode::kDataLoss, "has no header but holds data"));
  }
}

TEST(EpochTest, AdvanceWaitsForGuardsOfTheOldEpoch) {
  Memory m;
  Opened o = Open(m, true);
  std::atomic<bool> entered{false}, release{false}, advanced{false};
  std::thread holder([&] {
    Guard g(*o.epochs);
    entered = true;
    while (!release) std::this_thread::yield();
    // The advance has closed the epoch but cannot complete while we are inside.
    EXPECT_FALSE(advanced.load());
  });
  while (!entered) std::this_thread::yield();
  const uint64_t e = o.epochs->current();
  std::thread advancer([&] {
    ASSERT_OK(o.epochs->Advance());
    advanced = true;
  });
  while (o.epochs->current() == e) std::this_thread::yield();  // step 1 happened
  EXPECT_EQ(o.epochs->completed(), e - 1);                     // step 4 did not
  release = true;
  holder.join();
  advancer.join();
  EXPECT_EQ(o.epochs->completed(), e);
}

TEST(EpochTest, NestedGuardStaysInOuterEpoch) {
  Memory m;
  Opened o = Open(m, true);
  Guard outer(*o.epochs);
  Guard inner(*o.epochs);
  EXPECT_EQ(inner.epoch(), outer.epoch());
}

// LeafGuard: outermost, it announces the epoch and an advance waits for it; nested in a Guard,
// it runs in the outer epoch and leaves the slot announced when it ends.
TEST(EpochTest, LeafGuardAnnouncesWhenOutermostAndLeavesAnOuterGuardAlone) {
  Memory m;
  Opened o = Open(m, true);
  epoch::ThreadSlot& slot = o.epochs->LocalSlot();
  {
    Guard outer(*o.epochs);
    {
      LeafGuard leaf(*o.epochs, slot);
      EXPECT_EQ(leaf.epoch(), outer.epoch());
    }
    EXPECT_EQ(slot.epoch.load(), outer.epoch());  // still inside the outer guard
  }
  EXPECT_EQ(slot.epoch.load(), 0u);
  {
    LeafGuard leaf(*o.epochs, slot);
    EXPECT_EQ(leaf.epoch(), o.epochs->current());
    EXPECT_EQ(slot.epoch.load(), leaf.epoch());
  }
  EXPECT_EQ(slot.epoch.load(), 0u);

  std::atomic<bool> entered{false}, release{false}, advanced{false};
  std::thread holder([&] {
    LeafGuard g(*o.epochs, o.epochs->LocalSlot());
    entered = true;
    while (!release) std::this_thread::yield();
    EXPECT_FALSE(advanced.load());  // the advance cannot complete while the leaf guard is open
  });
  while (!entered) std::this_thread::yield();
  const uint64_t e = o.epochs->current();
  std::thread advancer([&] {
    ASSERT_OK(o.epochs->Advance());
    advanced = true;
  });
  while (o.epochs->current() == e) std::this_thread::yield();
  EXPECT_EQ(o.epochs->completed(), e - 1);
  release = true;
  holder.join();
  advancer.join();
  EXPECT_EQ(o.epochs->completed(), e);
}

TEST(EpochTest, RetiredObjectIsFreedWhenItsEpochCloses) {
  Memory m;
  Opened o = Open(m, true);
  int freed = 0;
  {
    Guard g(*o.epochs);
    o.epochs->Retire(&freed, [](void* p) { ++*static_cast<int*>(p); });
  }
  EXPECT_EQ(freed, 0);
  ASSERT_OK(o.epochs->Advance());
  EXPECT_EQ(freed, 1);
  ASSERT_OK(o.epochs->Advance());
  EXPECT_EQ(freed, 1);
}

TEST(EpochTest, ReaderInTheSameEpochDelaysReclamation) {
  Memory m;
  Opened o = Open(m, true);
  std::atomic<int> freed{0};
  std::atomic<bool> reading{false}, done{false}, advanced{false};
  std::thread reader([&] {
    Guard g(*o.epochs);  // may hold the object the other thread retires below
    reading = true;
    while (!done) std::this_thread::yield();
    EXPECT_EQ(freed.load(), 0);
  });
  while (!reading) std::this_thread::yield();
  {
    Guard g(*o.epochs);
    o.epochs->Retire(&freed, [](void* p) { static_cast<std::atomic<int>*>(p)->fetch_add(1); });
  }
  std::thread advancer([&] {
    ASSERT_OK(o.epochs->Advance());
    advanced = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_FALSE(advanced.load());
  done = true;
  reader.join();
  advancer.join();
  EXPECT_EQ(freed.load(), 1);
}

TEST(EpochTest, NewGuardWaitsForAnAdvanceInProgress) {
  Memory m;
  Opened o = Open(m, true);
  std::atomic<bool> release{false}, entered_old{false}, entered_new{false};
  std::thread holder([&] {
    Guard g(*o.epochs);
    entered_old = true;
    while (!release) std::this_thread::yield();
  });
  while (!entered_old) std::this_thread::yield();
  const uint64_t e = o.epochs->current();
  std::thread advancer([&] { ASSERT_OK(o.epochs->Advance()); });
  while (o.epochs->current() == e) std::this_thread::yield();  // closing
  std::thread late([&] {
    Guard g(*o.epochs);
    entered_new = true;
    EXPECT_GE(o.epochs->completed(), e);  // e is durable before anything runs in e+1
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_FALSE(entered_new.load());
  release = true;
  holder.join();
  advancer.join();
  late.join();
  EXPECT_TRUE(entered_new.load());
}

TEST(EpochTest, ConcurrentGuardsDirtyRangesAndBackgroundAdvances) {
  Memory m;
  auto pool = Pool::CreateInMemory(m.base(), kPoolSize, "epoch-test", Eadr());
  ASSERT_OK(pool);
  ManagerOptions opts;
  opts.interval = std::chrono::milliseconds(1);
  auto epochs = Manager::Open(**pool, opts);
  ASSERT_OK(epochs);
  auto* heap = static_cast<uint64_t*>((*pool)->region_base(PoolRegion::kHeap));
  std::atomic<int> deleted{0};
  std::vector<std::thread> workers;
  for (int t = 0; t < 2; ++t) {
    workers.emplace_back([&, t] {
      for (int i = 0; i < 20000; ++i) {
        Guard g(**epochs);
        uint64_t* w = &heap[(t * 512 + i % 512) * 8];
        *w = g.epoch();
        (*epochs)->RecordDirty(w, 8);
        if (i % 100 == 0) {
          (*epochs)->Retire(&deleted,
                            [](void* p) { static_cast<std::atomic<int>*>(p)->fetch_add(1); });
        }
      }
    });
  }
  for (auto& w : workers) w.join();
  ASSERT_OK((*epochs)->Sync());
  epochs->reset();  // drains every retired object
  EXPECT_EQ(deleted.load(), 400);
}

TEST(EpochTest, SyncCompletesTheCallersEpoch) {
  Memory m;
  Opened o = Open(m, true);
  uint64_t e;
  {
    Guard g(*o.epochs);
    e = g.epoch();
  }
  ASSERT_OK(o.epochs->Sync());
  EXPECT_GE(o.epochs->completed(), e);
}

// ---- external undo log ------------------------------------------------------------------------

struct Record {
  std::atomic<uint64_t> logged_epoch;
  uint64_t words[31];
};

TEST(ExternalLogTest, CrashRestoresTheObjectAsOfTheEpochStart) {
  Memory a, b;
  Record* rec;
  {
    Opened o = Open(a, true);
    rec = static_cast<Record*>(o.pool->region_base(PoolRegion::kHeap));
    {
      Guard g(*o.epochs);
      ASSERT_OK(o.epochs->log().Snapshot(rec, sizeof(*rec), &rec->logged_epoch));
      rec->words[0] = 1;  // epoch e: completes below
    }
    ASSERT_OK(o.epochs->Advance());
    {
      Guard g(*o.epochs);
      ASSERT_OK(o.epochs->log().Snapshot(rec, sizeof(*rec), &rec->logged_epoch));
      rec->words[0] = 2;  // epoch e+1: crashes
      ASSERT_OK(o.epochs->log().Snapshot(rec, sizeof(*rec), &rec->logged_epoch));  // free
      rec->words[1] = 3;
      EXPECT_EQ(o.epochs->stats().log_entries, 2u);  // once per object per epoch
    }
    b.CopyFrom(a);
  }
  Opened o = Open(b, false);
  auto* r = static_cast<Record*>(o.pool->region_base(PoolRegion::kHeap));
  EXPECT_EQ(r->words[0], 1u);
  EXPECT_EQ(r->words[1], 0u);
  EXPECT_EQ(o.epochs->stats().log_entries_replayed, 1u);
}

// The block directory: recovery reads the headers of the blocks marked in it (those used in
// epochs not yet complete), not one header per block of the region.
TEST(ExternalLogTest, RecoveryReadsOnlyTheBlocksTheDirectoryMarks) {
  Memory a, b;
  {
    Opened o = Open(a, true);
    ASSERT_GE(o.epochs->log().blocks_total(), 3u);
    auto* heap = static_cast<uint8_t*>(o.pool->region_base(PoolRegion::kHeap));
    auto snapshot_blocks = [&](size_t first, size_t n) {
      Guard g(*o.epochs);
      for (size_t i = first; i < first + n; ++i) {  // one object fills a block
        auto* mark = reinterpret_cast<std::atomic<uint64_t>*>(heap + i * kMaxLoggedObject);
        ASSERT_OK(o.epochs->log().Snapshot(mark, kMaxLoggedObject, mark));
        heap[i * kMaxLoggedObject + 100] = 7;
      }
    };
    snapshot_blocks(0, 1);  // complete below: its bit is cleared
    ASSERT_OK(o.epochs->Advance());
    ASSERT_OK(o.epochs->Advance());
    snapshot_blocks(1, 2);  // the crashing epoch
    b.CopyFrom(a);
  }
  {
    Opened o = Open(b, false);
    const ManagerStats st = o.epochs->stats();
    EXPECT_EQ(st.log_blocks_scanned, 2u);
    EXPECT_EQ(st.log_entries_replayed, 2u);
    auto* heap = static_cast<uint8_t*>(o.pool->region_base(PoolRegion::kHeap));
    for (size_t i = 0; i < 3; ++i) EXPECT_EQ(heap[i * kMaxLoggedObject + 100], i < 1 ? 7 : 0);
    a.CopyFrom(b);  // crash again right after recovery: nothing is left to read
  }
  Opened o = Open(a, false);
  EXPECT_EQ(o.epochs->stats().log_blocks_scanned, 0u);
  EXPECT_EQ(o.epochs->stats().log_entries_replayed, 0u);
}

// Pools whose epoch area is version 1 have no directory: every block is a log block and
// recovery reads every header. They keep working unchanged.
TEST(ExternalLogTest, VersionOneAreaHasNoDirectoryAndStillRecovers) {
  Memory a, b;
  size_t v2_blocks = 0;
  {
    Opened o = Open(a, true);
    v2_blocks = o.epochs->log().blocks_total();
  }
  {
    auto pool = Pool::OpenInMemory(a.base(), kPoolSize, "epoch-test", Eadr());
    ASSERT_OK(pool);
    auto* h = static_cast<EpochAreaHeader*>((*pool)->region_base(PoolRegion::kEpoch));
    h->version = 1;
    h->crc = Crc32c(h, offsetof(EpochAreaHeader, crc));
  }
  Record* rec;
  {
    Opened o = Open(a, false);
    EXPECT_EQ(o.epochs->log().blocks_total(), v2_blocks + 1);  // block 0 is a log block again
    rec = static_cast<Record*>(o.pool->region_base(PoolRegion::kHeap));
    Guard g(*o.epochs);
    ASSERT_OK(o.epochs->log().Snapshot(rec, sizeof(*rec), &rec->logged_epoch));
    rec->words[0] = 9;
    b.CopyFrom(a);
  }
  Opened o = Open(b, false);
  EXPECT_EQ(o.epochs->stats().log_blocks_scanned, v2_blocks + 1);
  EXPECT_EQ(o.epochs->stats().log_entries_replayed, 1u);
  EXPECT_EQ(static_cast<Record*>(o.pool->region_base(PoolRegion::kHeap))->words[0], 0u);
}

TEST(ExternalLogTest, FullLogFailsLoudlyAndRecoversAfterTheEpoch) {
  Memory m;
  Opened o = Open(m, true);
  const size_t blocks = o.epochs->log().blocks_total();
  ASSERT_GE(blocks, 2u);
  auto* heap = static_cast<uint8_t*>(o.pool->region_base(PoolRegion::kHeap));
  const size_t big = kMaxLoggedObject;  // one object fills a block
  {
    Guard g(*o.epochs);
    for (size_t i = 0; i < blocks; ++i) {
      auto* mark = reinterpret_cast<std::atomic<uint64_t>*>(heap + i * big);
      ASSERT_OK(o.epochs->log().Snapshot(heap + i * big, big, mark));
    }
    auto* mark = reinterpret_cast<std::atomic<uint64_t>*>(heap + blocks * big);
    const uint64_t before = mark->load();
    EXPECT_THAT(
        o.epochs->log().Snapshot(heap + blocks * big, big, mark),
        testing::StatusIs(absl::StatusCode::kResourceExhausted, "external undo log is full"));
    EXPECT_EQ(mark->load(), before);
  }
  ASSERT_OK(o.epochs->Advance());
  EXPECT_EQ(o.epochs->log().blocks_free(), blocks);
  Guard g(*o.epochs);
  auto* mark = reinterpret_cast<std::atomic<uint64_t>*>(heap + blocks * big);
  EXPECT_OK(o.epochs->log().Snapshot(heap + blocks * big, big, mark));
}

TEST(ExternalLogTest, RejectsObjectsOutsideThePoolOrTooLarge) {
  Memory m;
  Opened o = Open(m, true);
  Guard g(*o.epochs);
  Record outside{};
  EXPECT_THAT(o.epochs->log().Snapshot(&outside, sizeof(outside), &outside.logged_epoch),
              testing::StatusIs(absl::StatusCode::kInvalidArgument, "outside the pool"));
  auto* heap = static_cast<uint8_t*>(o.pool->region_base(PoolRegion::kHeap));
  EXPECT_THAT(o.epochs->log().Snapshot(heap, kMaxLoggedObject + 1,
                                       reinterpret_cast<std::atomic<uint64_t>*>(heap)),
              testing::StatusIs(absl::StatusCode::kInvalidArgument, "larger than"));
}

}  // namespace
}  // namespace pmrt::epoch
