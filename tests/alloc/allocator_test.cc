// Unit tests of the persistent heap: size classes, extents, alignment, exhaustion and recovery
// from it, misuse, cross-thread frees, the grace period, crash rollback and the transaction
// hooks. Crash consistency under the simulator is in alloc_crash_test.cc.
#include "alloc/allocator.h"

#include <sys/mman.h>

#include <cstring>
#include <mutex>
#include <set>
#include <thread>

#include "alloc/internal/heap_layout.h"
#include "base/crc32c.h"
#include "epoch/epoch.h"
#include "epoch/pool.h"
#include "gtest/gtest.h"
#include "tests/util/test_util.h"

namespace pmrt::alloc {
namespace {

constexpr size_t kPoolSize = 16 << 20;

class Memory {
 public:
  explicit Memory(size_t size = kPoolSize) : size_(size) {
    base_ = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  }
  ~Memory() { munmap(base_, size_); }
  void* base() const { return base_; }
  size_t size() const { return size_; }
  void CopyFrom(const Memory& o) { std::memcpy(base_, o.base_, size_); }

 private:
  void* base_;
  size_t size_;
};

struct Runtime {  // members are destroyed heap first, pool last
  std::unique_ptr<Pool> pool;
  std::unique_ptr<epoch::Manager> epochs;
  std::unique_ptr<Heap> heap;
};

Runtime Open(Memory& m, bool create,
             std::chrono::milliseconds interval = std::chrono::milliseconds(0)) {
  PoolOptions po;
  po.backend = BackendKind::kEadr;
  auto pool = create ? Pool::CreateInMemory(m.base(), m.size(), "alloc-test", po)
                     : Pool::OpenInMemory(m.base(), m.size(), "alloc-test", po);
  EXPECT_OK(pool);
  epoch::ManagerOptions eo;
  eo.interval = interval;
  auto epochs = epoch::Manager::Open(**pool, eo);
  EXPECT_OK(epochs);
  auto heap = Heap::Open(**pool, **epochs);
  EXPECT_OK(heap);
  Runtime r;
  r.pool = std::move(*pool);
  r.epochs = std::move(*epochs);
  r.heap = std::move(*heap);
  return r;
}

// `freed` (a block of `size` bytes freed in the running epoch) is not among `n` allocations of
// the same size in this epoch, and comes back within 5000 allocations once the epoch has closed.
void ExpectReusedOnlyAfterTheEpochCloses(Runtime& r, void* freed, size_t size, int n) {
  std::set<void*> same_epoch;
  for (int i = 0; i < n; ++i) same_epoch.insert(r.heap->Allocate(size));
  EXPECT_EQ(same_epoch.count(freed), 0u);
  ASSERT_OK(r.epochs->Advance());
  bool reused = false;
  for (int i = 0; i < 5000 && !reused; ++i) reused = r.heap->Allocate(size) == freed;
  EXPECT_TRUE(reused);
}

std::set<uint64_t> LiveOffsets(const Heap& h) {
  std::set<uint64_t> s;
  EXPECT_OK(h.Walk([&](const BlockInfo& b) { s.insert(b.offset); }));
  return s;
}

TEST(SizeClassTest, ClassesCoverSizesWithBoundedWaste) {
  for (size_t size = 1; size <= kMaxSmallSize; size += (size < 1024 ? 1 : 97)) {
    const int c = SizeClasses::For(size, 16);
    ASSERT_GE(c, 0) << size;
    EXPECT_GE(SizeClasses::Size(c), size);
    if (size > 128) {
      EXPECT_LE(SizeClasses::Size(c), size * 5 / 4 + 16) << size;
    }
  }
  EXPECT_EQ(SizeClasses::For(kMaxSmallSize + 1, 16), -1);
  EXPECT_EQ(SizeClasses::Size(SizeClasses::For(100, 64)) % 64, 0u);
  EXPECT_EQ(SizeClasses::Size(SizeClasses::For(10, 4096)), 4096u);
  EXPECT_EQ(SizeClasses::For(10, 8192), -1);  // an extent
}

TEST(HeapTest, SmallBlocksAreDistinctAlignedAndSized) {
  Memory m;
  Runtime r = Open(m, true);
  std::vector<std::pair<uint8_t*, size_t>> blocks;
  for (size_t size : {1, 16, 17, 64, 100, 128, 129, 1000, 4096, 8192, 30000}) {
    for (size_t align : {16, 64, 256}) {
      auto* p = static_cast<uint8_t*>(r.heap->Allocate(size, align));
      ASSERT_NE(p, nullptr) << size;
      EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % align, 0u);
      EXPECT_GE(r.heap->UsableSize(p), size);
      std::memset(p, 0xAB, size);
      blocks.push_back({p, size});
    }
  }
  std::sort(blocks.begin(), blocks.end());
  for (size_t i = 1; i < blocks.size(); ++i) {
    EXPECT_LE(blocks[i - 1].first + blocks[i - 1].second, blocks[i].first) << "overlap";
  }
  EXPECT_EQ(LiveOffsets(*r.heap).size(), blocks.size());
  ASSERT_OK(r.heap->Check());
}

TEST(HeapTest, ExtentsHaveNoArtificialCap) {
  Memory m;
  Runtime r = Open(m, true);
  void* big = r.heap->Allocate(10 << 20);  // most of a 16 MiB pool
  ASSERT_NE(big, nullptr);
  EXPECT_GE(r.heap->UsableSize(big), size_t{10 << 20});
  void* mid = r.heap->Allocate(100 * 1024, 65536);
  ASSERT_NE(mid, nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(mid) % 65536, 0u);
  HeapStats st = r.heap->Stats();
  EXPECT_EQ(st.live_extents, 2u);
  ASSERT_OK(r.heap->Free(big));
  ASSERT_OK(r.heap->Free(mid));
  ASSERT_OK(r.epochs->Advance());
  EXPECT_NE(r.heap->Allocate(12 << 20), nullptr);  // the runs coalesced
  EXPECT_EQ(r.heap->Allocate(64 << 20), nullptr);
  EXPECT_EQ(Heap::LastError(), AllocError::kTooLarge);
  EXPECT_EQ(r.heap->Allocate(16, 3), nullptr);
  EXPECT_EQ(Heap::LastError(), AllocError::kBadAlignment);
  EXPECT_THAT(r.heap->TryAllocate(16, 3),
              testing::StatusIs(absl::StatusCode::kInvalidArgument, "alignment"));
}

TEST(HeapTest, ExhaustionFailsCleanlyAndRecoversAfterFrees) {
  Memory m(4 << 20);
  Runtime r = Open(m, true);
  std::vector<void*> got;
  for (void* p; (p = r.heap->Allocate(4000)) != nullptr;) got.push_back(p);
  // The epochs are advanced by hand here: the allocation cannot wait for a boundary.
  EXPECT_EQ(Heap::LastError(), AllocError::kPoolFullCannotWait);
  EXPECT_THAT(r.heap->TryAllocate(4000),
              testing::StatusIs(absl::StatusCode::kResourceExhausted, "pool full"));
  ASSERT_GT(got.size(), 100u);
  const auto live = LiveOffsets(*r.heap);
  EXPECT_EQ(live.size(), got.size());  // a failed allocation changes nothing
  for (size_t i = 0; i < got.size(); i += 2) ASSERT_OK(r.heap->Free(got[i]));
  {
    // Frees are not reusable before their epoch ends, and inside the caller's own guard the
    // allocation cannot wait for that.
    epoch::Guard g(*r.epochs);
    EXPECT_EQ(r.heap->Allocate(4000), nullptr);
    EXPECT_EQ(Heap::LastError(), AllocError::kPoolFullCannotWait);
    EXPECT_THAT(r.heap->TryAllocate(4000),
                testing::StatusIs(absl::StatusCode::kResourceExhausted, "cannot wait"));
  }
  ASSERT_OK(r.epochs->Advance());
  for (size_t i = 0; i < got.size(); i += 2) EXPECT_NE(r.heap->Allocate(4000), nullptr);
  ASSERT_OK(r.heap->Check());
}

// A full heap whose blocks were freed in the running epoch: outside a guard the allocation
// advances the epoch itself (the frees' grace period ends) instead of failing.
TEST(HeapTest, FullHeapWaitsForPendingFreesInsteadOfFailing) {
  Memory m(4 << 20);
  // A background advancer that will not tick during the test: only Allocate advances.
  Runtime r = Open(m, true, std::chrono::hours(1));
  std::vector<void*> got;
  for (void* p; (p = r.heap->Allocate(4000)) != nullptr;) got.push_back(p);
  ASSERT_GT(got.size(), 100u);
  const uint64_t before = r.epochs->current();
  for (void* p : got) ASSERT_OK(r.heap->Free(p));
  for (size_t i = 0; i < got.size(); ++i) ASSERT_NE(r.heap->Allocate(4000), nullptr) << i;
  EXPECT_GT(r.epochs->current(), before);
  // Full again, and nothing awaits a grace period: once the boundaries that gather free blocks
  // have run (the last wait asked for two), a full heap fails at once, without advancing.
  // (The frees above asked the advancer for an early boundary, which it may run at any time:
  // only advances it did not start count.)
  EXPECT_EQ(r.heap->Allocate(4000), nullptr);
  EXPECT_EQ(Heap::LastError(), AllocError::kPoolFull);
  // The advancer counts a requested advance before running it, so one counted before `now` may
  // complete after it: ten failed allocations may see at most that one beyond those requested.
  const epoch::ManagerStats now = r.epochs->stats();
  for (int i = 0; i < 10; ++i) {
    EXPECT_EQ(r.heap->Allocate(4000), nullptr);
    EXPECT_EQ(Heap::LastError(), AllocError::kPoolFull);
  }
  const epoch::ManagerStats later = r.epochs->stats();
  EXPECT_LE(later.advances - now.advances, later.requested_advances - now.requested_advances + 1);
  ASSERT_OK(r.heap->Check());
  // With manual clocking the caller owns the boundaries: a full heap fails at once.
  Memory m2(4 << 20);
  Runtime manual = Open(m2, true);
  std::vector<void*> more;
  for (void* p; (p = manual.heap->Allocate(4000)) != nullptr;) more.push_back(p);
  for (void* p : more) ASSERT_OK(manual.heap->Free(p));
  const uint64_t manual_epoch = manual.epochs->current();
  EXPECT_EQ(manual.heap->Allocate(4000), nullptr);
  EXPECT_EQ(manual.epochs->current(), manual_epoch);
}

TEST(HeapTest, MisuseIsRefusedAndChangesNothing) {
  Memory m;
  Runtime r = Open(m, true);
  auto* p = static_cast<uint8_t*>(r.heap->Allocate(64));
  ASSERT_NE(p, nullptr);
  const auto before = LiveOffsets(*r.heap);
  int stack_var = 0;
  EXPECT_THAT(r.heap->Free(&stack_var),
              testing::StatusIs(absl::StatusCode::kInvalidArgument, "not inside the heap"));
  EXPECT_THAT(r.heap->Free(p + 16), testing::StatusIs(absl::StatusCode::kInvalidArgument,
                                                      "not the start of a heap block"));
  ASSERT_OK(r.heap->Free(p));
  EXPECT_THAT(r.heap->Free(p),
              testing::StatusIs(absl::StatusCode::kFailedPrecondition, "double free"));
  EXPECT_EQ(LiveOffsets(*r.heap).size(), before.size() - 1);
  void* ext = r.heap->Allocate(1 << 20);
  ASSERT_OK(r.heap->Free(ext));
  EXPECT_THAT(r.heap->Free(ext),
              testing::StatusIs(absl::StatusCode::kFailedPrecondition, "double free"));
  ASSERT_OK(r.heap->Check());
}

// FreeUnshared of a block allocated in the running epoch makes it reusable at once, in the
// freeing thread's list. A thread that only frees (a consumer) must not strand those blocks:
// here 128 MiB pass through a 4 MiB heap in one epoch.
TEST(HeapTest, AConsumerThreadDoesNotStrandFreedBlocks) {
  Memory m(4 << 20);
  Runtime r = Open(m, true);  // manual epochs: everything below runs in one epoch
  const uint64_t e = r.epochs->current();
  std::vector<void*> batch(1000);
  for (int round = 0; round < 2000; ++round) {
    for (void*& p : batch) {
      p = r.heap->Allocate(64);
      ASSERT_NE(p, nullptr) << "round " << round << ": " << AllocErrorName(Heap::LastError());
    }
    std::thread consumer([&] {
      for (void* p : batch) ASSERT_OK(r.heap->FreeUnshared(p));
    });
    consumer.join();
  }
  EXPECT_EQ(r.epochs->current(), e);
  EXPECT_TRUE(LiveOffsets(*r.heap).empty());
  ASSERT_OK(r.heap->Check());
}

// FreeUnshared's fast path and FreeImpl agree: a block of the running epoch is reused at once;
// one allocated before the epoch began waits for the epoch to close (its allocation is durable,
// so its old contents may still be needed after a crash); misuse is refused and changes nothing.
TEST(HeapTest, FreeUnsharedReusesOnlyBlocksOfTheRunningEpoch) {
  Memory m;
  Runtime r = Open(m, true);
  void* fresh = r.heap->Allocate(80);
  ASSERT_OK(r.heap->FreeUnshared(fresh));
  EXPECT_EQ(r.heap->Allocate(80), fresh);  // the thread's list is LIFO

  void* old = r.heap->Allocate(80);
  ASSERT_OK(r.epochs->Advance());
  ASSERT_OK(r.heap->FreeUnshared(old));
  EXPECT_THAT(r.heap->FreeUnshared(old),
              testing::StatusIs(absl::StatusCode::kFailedPrecondition, "double free"));
  ExpectReusedOnlyAfterTheEpochCloses(r, old, 80, 3000);

  const auto before = LiveOffsets(*r.heap);
  void* p = r.heap->Allocate(80);
  EXPECT_THAT(r.heap->FreeUnshared(static_cast<char*>(p) + 16),
              testing::StatusIs(absl::StatusCode::kInvalidArgument, "not the start"));
  EXPECT_THAT(r.heap->FreeUnshared(r.pool->base()),
              testing::StatusIs(absl::StatusCode::kInvalidArgument, "not inside the heap"));
  ASSERT_OK(r.heap->FreeUnshared(p));
  EXPECT_THAT(r.heap->FreeUnshared(p),
              testing::StatusIs(absl::StatusCode::kFailedPrecondition, "double free"));
  EXPECT_EQ(LiveOffsets(*r.heap), before);
  ASSERT_OK(r.heap->Check());
}

// Blocks a thread frees come back to that thread's lists, also after a grace period, so two
// threads never work on blocks of one live-map line (each change would move the line between
// their cores). A thread that allocates what it frees keeps its list however long it grows.
TEST(HeapTest, FreedBlocksReturnToTheThreadThatFreedThem) {
  Memory m(64 << 20);
  Runtime r = Open(m, true);
  std::vector<void*> a_blocks(10000);
  std::thread a([&] {
    for (int round = 0; round < 3; ++round) {
      for (void*& p : a_blocks) p = r.heap->Allocate(64);
      for (void* p : a_blocks) ASSERT_OK(round == 1 ? r.heap->Free(p) : r.heap->FreeUnshared(p));
      ASSERT_OK(r.epochs->Advance());  // round 1's frees pass their grace period
    }
    for (void*& p : a_blocks) p = r.heap->Allocate(64);  // A's own blocks again
  });
  a.join();
  std::set<void*> mine(a_blocks.begin(), a_blocks.end());
  for (void* p : a_blocks) ASSERT_OK(r.heap->FreeUnshared(p));  // allocated in this epoch
  ASSERT_OK(r.epochs->Advance());
  std::thread b([&] {
    for (int i = 0; i < 10000; ++i) {
      void* p = r.heap->Allocate(64);
      ASSERT_NE(p, nullptr);
      EXPECT_EQ(mine.count(p), 0u) << "thread B got a block thread A freed into its own list";
      if (mine.count(p) != 0) return;
    }
  });
  b.join();
  ASSERT_OK(r.heap->Check());
}

// A block another thread frees in the epoch of its allocation goes back to the thread that owns
// its chunk (in batches of 64): allocations in a chunk come from one thread.
TEST(HeapTest, RemoteFreesGoBackToTheChunksOwner) {
  Memory m(64 << 20);
  Runtime r = Open(m, true);
  std::vector<void*> blocks(6400);                   // a multiple of the 64-block send batch
  for (void*& p : blocks) p = r.heap->Allocate(64);  // this thread owns their chunks
  std::thread b([&] {
    for (void* p : blocks) ASSERT_OK(r.heap->FreeUnshared(p));
    for (int i = 0; i < 1000; ++i) {  // B's own allocations come from a chunk of its own
      void* p = r.heap->Allocate(64);
      EXPECT_EQ(std::count(blocks.begin(), blocks.end(), p), 0) << "B reused a remote block";
    }
  });
  b.join();
  std::set<void*> mine(blocks.begin(), blocks.end());
  size_t back = 0;
  // This thread's list still holds the rest of its last chunk (< 1024 blocks), then the inbox.
  for (size_t i = 0; i < blocks.size() + 1024; ++i) back += mine.count(r.heap->Allocate(64));
  EXPECT_EQ(back, blocks.size());
  ASSERT_OK(r.heap->Check());
}

// The other side: when the heap is full, frees waiting in the cache of a thread that has gone
// idle (or exited) are found and reused.
TEST(HeapTest, AnIdleThreadsFreesAreReusedWhenTheHeapIsFull) {
  Memory m(4 << 20);
  Runtime r = Open(m, true);
  void* own = r.heap->Allocate(256);  // this thread has its own cache (it cannot adopt A's)
  ASSERT_OK(r.heap->FreeUnshared(own));
  std::vector<void*> blocks;
  std::atomic<bool> freed_all{false}, done{false};
  std::thread a([&] {
    for (void* p; (p = r.heap->Allocate(256)) != nullptr;) blocks.push_back(p);
    for (void* p : blocks) ASSERT_OK(r.heap->Free(p));  // into A's batch
    freed_all = true;
    while (!done) std::this_thread::yield();  // idle, holding no guard
  });
  while (!freed_all) std::this_thread::yield();
  ASSERT_GT(blocks.size(), 1000u);
  ASSERT_OK(r.epochs->Advance());
  ASSERT_OK(r.epochs->Advance());
  std::set<void*> freed(blocks.begin(), blocks.end());
  size_t reused = 0;
  for (size_t i = 0; i < blocks.size(); ++i) {
    void* p = r.heap->Allocate(256);
    ASSERT_NE(p, nullptr) << "allocation " << i << ": " << AllocErrorName(Heap::LastError());
    reused += freed.count(p);
  }
  done = true;
  a.join();
  // Every allocation succeeded; all but the blocks of this thread's own chunk (where `own`
  // came from, 64 KiB / 256 B) are A's.
  EXPECT_GE(reused, blocks.size() - 256);
  ASSERT_OK(r.heap->Check());
}

// Every free block of a full heap comes back, wherever it waits: blocks an exited thread freed
// into its own list (FreeUnshared), and chunks whose blocks are all free, which return to the
// free runs and then serve any size class or an extent. With the background advancer the
// allocation drives the boundaries itself; with manual epochs the failed allocation asks for
// them and the caller's next two advances do the work.
TEST(HeapTest, AFullHeapGathersEveryFreeBlockAndReturnsEmptyChunks) {
  for (bool clocked : {true, false}) {
    SCOPED_TRACE(clocked ? "background advancer" : "manual epochs");
    Memory m(4 << 20);
    // A background advancer that will not tick during the test: only Allocate advances.
    Runtime r = Open(m, true, std::chrono::milliseconds(clocked ? 3600000 : 0));
    std::vector<void*> blocks;
    std::thread a([&] {
      for (void* p; (p = r.heap->Allocate(64)) != nullptr;) blocks.push_back(p);
      // Allocated in the running epoch: reusable at once, into A's own list.
      for (void* p : blocks) ASSERT_OK(r.heap->FreeUnshared(p));
    });
    a.join();
    ASSERT_GT(blocks.size(), 10000u);
    const HeapStats full = r.heap->Stats();
    EXPECT_EQ(full.used_bytes, 0u);
    EXPECT_EQ(full.largest_free_extent, 0u);  // every chunk holds the 64-byte class
    EXPECT_EQ(full.free_in_small_chunks, full.small_chunks * 64 * 1024);
    const size_t big = 1 << 20;
    void* p = r.heap->Allocate(big);
    if (!clocked) {
      EXPECT_EQ(p, nullptr);
      EXPECT_EQ(Heap::LastError(), AllocError::kPoolFullCannotWait);
      ASSERT_OK(r.epochs->Advance());
      ASSERT_OK(r.epochs->Advance());
      p = r.heap->Allocate(big);
    }
    ASSERT_NE(p, nullptr) << AllocErrorName(Heap::LastError());
    EXPECT_GE(r.heap->Stats().chunks_returned, big / (64 * 1024));
    // Blocks of another class in all that is left: the rest of the 64-byte chunks return too.
    std::vector<void*> other;
    for (void* q; (q = r.heap->Allocate(3000)) != nullptr;) other.push_back(q);
    if (!clocked) {
      ASSERT_OK(r.epochs->Advance());
      ASSERT_OK(r.epochs->Advance());
      for (void* q; (q = r.heap->Allocate(3000)) != nullptr;) other.push_back(q);
    }
    const HeapStats after = r.heap->Stats();
    EXPECT_EQ(after.live_per_class[SizeClasses::For(64, 16)], 0u);
    EXPECT_EQ(after.chunks_returned, full.small_chunks);
    // 3000-byte blocks fill 21 x 3008 bytes of each 64 KiB chunk.
    EXPECT_EQ(other.size(), (full.chunks - big / (64 * 1024)) * 21);
    ASSERT_OK(r.heap->Check());
  }
}

// Frees inside the caller's guard cannot wait for the boundary: the allocation says so, and the
// same allocation outside the guard succeeds.
TEST(HeapTest, AFullHeapUnderAGuardSaysItCannotWait) {
  Memory m(4 << 20);
  Runtime r = Open(m, true, std::chrono::hours(1));
  std::vector<void*> blocks;
  for (void* p; (p = r.heap->Allocate(4000)) != nullptr;) blocks.push_back(p);
  // A few: a thread that frees 1/16 of the heap in an epoch asks for an early boundary.
  for (int i = 0; i < 10; ++i) ASSERT_OK(r.heap->Free(blocks[i]));
  {
    epoch::Guard g(*r.epochs);
    EXPECT_EQ(r.heap->Allocate(4000), nullptr);
    EXPECT_EQ(Heap::LastError(), AllocError::kPoolFullCannotWait);
  }
  EXPECT_NE(r.heap->Allocate(4000), nullptr);
  ASSERT_OK(r.heap->Check());
}

// A producer allocates, a consumer frees with Free (shared: every block waits for its grace
// period) in a heap of 4 MiB, for 30 times the heap's bytes: no allocation fails, and the
// bytes in flight stay bounded (a thread that frees much in one epoch asks for an early
// boundary).
TEST(HeapTest, ProducerConsumerWithSharedFreesRunsInASmallHeap) {
  Memory m(4 << 20);
  Runtime r = Open(m, true, std::chrono::milliseconds(64));
  std::mutex mu;
  std::vector<void*> queue;
  std::atomic<bool> done{false};
  std::thread consumer([&] {
    std::vector<void*> got;
    while (!done || !got.empty()) {
      for (void* p : got) ASSERT_OK(r.heap->Free(p));
      got.clear();
      std::lock_guard<std::mutex> l(mu);
      got.swap(queue);
    }
  });
  const uint64_t total = 30 * r.heap->Stats().heap_bytes / 64;
  for (uint64_t i = 0; i < total; ++i) {
    void* p = r.heap->Allocate(64);
    ASSERT_NE(p, nullptr) << "allocation " << i << ": " << AllocErrorName(Heap::LastError());
    std::memset(p, 1, 64);
    std::unique_lock<std::mutex> l(mu);
    queue.push_back(p);
    while (queue.size() > 4096) {  // the live set stays small: what is full is frees in flight
      l.unlock();
      std::this_thread::yield();
      l.lock();
    }
  }
  done = true;
  consumer.join();
  {
    std::lock_guard<std::mutex> l(mu);
    for (void* p : queue) ASSERT_OK(r.heap->Free(p));
  }
  ASSERT_OK(r.epochs->Sync());
  EXPECT_EQ(r.heap->Stats().used_bytes, 0u);
  ASSERT_OK(r.heap->Check());
}

struct Counted {
  Counted() : v(41) { ++alive; }
  ~Counted() { --alive; }
  uint64_t v;
  static inline int alive = 0;
};

TEST(HeapTest, CallocReallocAndArrays) {
  Memory m;
  Runtime r = Open(m, true);
  // calloc: zeroes a reused block; an overflowing size is refused.
  auto* dirty = static_cast<uint8_t*>(r.heap->Allocate(96));
  std::memset(dirty, 0xAB, 96);
  ASSERT_OK(r.heap->FreeUnshared(dirty));
  auto* z = static_cast<uint8_t*>(r.heap->AllocateZeroed(12, 8));
  ASSERT_EQ(z, dirty);  // the thread's list is LIFO
  for (int i = 0; i < 96; ++i) ASSERT_EQ(z[i], 0) << i;
  EXPECT_EQ(r.heap->AllocateZeroed(SIZE_MAX / 2, 4), nullptr);
  EXPECT_EQ(Heap::LastError(), AllocError::kOverflow);
  // realloc: in place while it fits, moved (contents kept) when it grows, null allocates.
  auto* q = static_cast<uint8_t*>(r.heap->Reallocate(z, 90));
  EXPECT_EQ(q, z);
  std::memset(q, 7, 96);
  auto* grown = static_cast<uint8_t*>(r.heap->Reallocate(q, 200000));
  ASSERT_NE(grown, nullptr);
  EXPECT_NE(grown, q);
  for (int i = 0; i < 96; ++i) ASSERT_EQ(grown[i], 7) << i;
  EXPECT_EQ(r.heap->UsableSize(q), 0u);                            // the old block was freed
  EXPECT_EQ(r.heap->Reallocate(grown, size_t{1} << 40), nullptr);  // too large: p untouched
  EXPECT_EQ(grown[0], 7);
  EXPECT_GT(r.heap->UsableSize(grown), 0u);
  int stack_var = 0;
  EXPECT_EQ(r.heap->Reallocate(&stack_var, 8), nullptr);
  EXPECT_NE(r.heap->Reallocate(nullptr, 40), nullptr);
  // Free(nullptr) is a no-op, as free(NULL).
  ASSERT_OK(r.heap->Free(nullptr));
  ASSERT_OK(r.heap->FreeUnshared(nullptr));

  // pnew_array / pdelete_array: elements constructed and destroyed, the count kept for types
  // with destructors.
  Counted* arr = pnew_array<Counted>(100);
  ASSERT_NE(arr, nullptr);
  EXPECT_EQ(Counted::alive, 100);
  EXPECT_EQ(arr[99].v, 41u);
  ASSERT_OK(pdelete_array(arr));
  EXPECT_EQ(Counted::alive, 0);
  uint32_t* ints = pnew_array<uint32_t>(1000);
  ASSERT_NE(ints, nullptr);
  EXPECT_EQ(ints[999], 0u);                    // value-initialized
  EXPECT_GE(r.heap->UsableSize(ints), 4000u);  // no count in front: the block itself
  ASSERT_OK(pdelete_array(ints));
  EXPECT_EQ(pnew_array<uint64_t>(SIZE_MAX / 4), nullptr);
  EXPECT_EQ(Heap::LastError(), AllocError::kOverflow);
  ASSERT_OK(pdelete_array<Counted>(nullptr));
  ASSERT_OK(r.heap->Check());
}

// A double free is refused and counted (a debug build aborts naming the block instead).
TEST(HeapTest, DoubleFreesAreCounted) {
  Memory m;
  Runtime r = Open(m, true);
  void* p = r.heap->Allocate(64);
  ASSERT_OK(r.heap->Free(p));
#ifdef NDEBUG
  EXPECT_THAT(r.heap->Free(p), testing::StatusIs(absl::StatusCode::kFailedPrecondition, "double"));
  EXPECT_THAT(r.heap->FreeUnshared(p),
              testing::StatusIs(absl::StatusCode::kFailedPrecondition, "double"));
  EXPECT_EQ(r.heap->Stats().double_frees, 2u);
#else
  EXPECT_DEATH((void)r.heap->Free(p), "double free: block at offset");
#endif
}

TEST(HeapTest, GracePeriodDelaysReuseUntilTheEpochCloses) {
  Memory m;
  Runtime r = Open(m, true);
  void* a = r.heap->Allocate(48);
  ASSERT_OK(r.heap->Free(a));
  ExpectReusedOnlyAfterTheEpochCloses(r, a, 48, 5000);
}

TEST(HeapTest, CrossThreadFreesAreReused) {
  Memory m(64 << 20);
  Runtime r = Open(m, true);
  std::vector<void*> blocks(20000);
  std::thread producer([&] {
    for (auto& b : blocks) b = r.heap->Allocate(96);
  });
  producer.join();
  std::thread consumer([&] {
    for (void* b : blocks) ASSERT_OK(r.heap->Free(b));
  });
  consumer.join();
  ASSERT_OK(r.epochs->Advance());
  std::set<void*> old(blocks.begin(), blocks.end());
  int reused = 0;
  std::thread again([&] {
    for (int i = 0; i < 40000; ++i) reused += old.count(r.heap->Allocate(96));
  });
  again.join();
  EXPECT_EQ(reused, 20000);  // every freed block came back exactly once
  EXPECT_EQ(LiveOffsets(*r.heap).size(), 40000u);
}

TEST(HeapTest, ConcurrentAllocFreeWithBackgroundEpochs) {
  Memory m(64 << 20);
  PoolOptions po;
  po.backend = BackendKind::kEadr;
  auto pool = Pool::CreateInMemory(m.base(), m.size(), "alloc-test", po);
  ASSERT_OK(pool);
  epoch::ManagerOptions eo;
  eo.interval = std::chrono::milliseconds(1);
  auto epochs = epoch::Manager::Open(**pool, eo);
  ASSERT_OK(epochs);
  auto heap = Heap::Open(**pool, **epochs);
  ASSERT_OK(heap);
  std::vector<std::vector<void*>> kept(2);
  std::vector<std::thread> ts;
  for (int t = 0; t < 2; ++t) {
    ts.emplace_back([&, t] {
      std::vector<void*> live;
      uint64_t rng = 77 + t;
      for (int i = 0; i < 50000; ++i) {
        rng = rng * 6364136223846793005ull + 1442695040888963407ull;
        if (live.size() < 500 || rng % 2) {
          void* p = (*heap)->Allocate(16 + (rng >> 40) % 2000);
          ASSERT_NE(p, nullptr);
          std::memset(p, t, 16);
          live.push_back(p);
        } else {
          size_t k = (rng >> 20) % live.size();
          ASSERT_OK((*heap)->Free(live[k]));
          live[k] = live.back();
          live.pop_back();
        }
      }
      kept[t] = live;
    });
  }
  for (auto& t : ts) t.join();
  std::set<uint64_t> expect;
  for (auto& v : kept)
    for (void* p : v) expect.insert((*pool)->offset_of(p));
  EXPECT_EQ(LiveOffsets(**heap), expect);
  ASSERT_OK((*heap)->Check());
  HeapStats st = (*heap)->Stats();
  EXPECT_EQ(st.live_blocks, expect.size());
  EXPECT_EQ(st.allocations - st.frees, expect.size());
  heap->reset();
}

TEST(HeapTest, CrashRollsTheHeapBackToTheEpochStart) {
  Memory a, b;
  std::set<uint64_t> at_start;
  {
    Runtime r = Open(a, true);
    std::vector<void*> v;
    for (int i = 0; i < 300; ++i) v.push_back(r.heap->Allocate(16 + i * 7));
    void* ext = r.heap->Allocate(200 * 1024);
    ASSERT_OK(r.epochs->Advance());  // the epoch with these allocations completes
    at_start = LiveOffsets(*r.heap);
    for (int i = 0; i < 300; i += 3) ASSERT_OK(r.heap->Free(v[i]));  // the failed epoch
    ASSERT_OK(r.heap->Free(ext));
    for (int i = 0; i < 300; ++i) ASSERT_NE(r.heap->Allocate(40), nullptr);
    ASSERT_NE(r.heap->Allocate(300 * 1024), nullptr);
    b.CopyFrom(a);  // crash
  }
  Runtime r = Open(b, false);
  EXPECT_EQ(LiveOffsets(*r.heap), at_start);
  ASSERT_OK(r.heap->Check());
  // Nothing live is handed out again.
  for (int i = 0; i < 20000; ++i) {
    void* p = r.heap->Allocate(16 + i % 700);
    ASSERT_NE(p, nullptr);
    ASSERT_EQ(at_start.count(r.pool->offset_of(p)), 0u) << "double allocation";
  }
}

// The transaction hooks through a minimal caller: a "committed transaction" that allocated one
// block and freed another is replayed after the epoch rolled both back.
TEST(HeapTest, TransactionHooksReplayAfterRollback) {
  Memory a, b;
  uint64_t allocated, freed;
  {
    Runtime r = Open(a, true);
    void* old = r.heap->Allocate(64);
    ASSERT_OK(r.epochs->Advance());
    freed = r.pool->offset_of(old);
    allocated = r.pool->offset_of(r.heap->Allocate(64));
    ASSERT_OK(r.heap->Free(old));
    // The transaction commits here (its record, durable, names both); then the epoch crashes.
    b.CopyFrom(a);
  }
  Runtime r = Open(b, false);
  auto live = LiveOffsets(*r.heap);
  EXPECT_EQ(live.count(allocated), 0u);  // the epoch rolled the allocation back...
  EXPECT_EQ(live.count(freed), 1u);      // ...and the free
  {
    epoch::Guard g(*r.epochs);  // replay of the committed record
    ASSERT_OK(r.heap->MarkAllocated(allocated));
    ASSERT_OK(r.heap->MarkFreed(freed));
    ASSERT_OK(r.heap->MarkAllocated(allocated));  // idempotent
    ASSERT_OK(r.heap->MarkFreed(freed));
  }
  live = LiveOffsets(*r.heap);
  EXPECT_EQ(live.count(allocated), 1u);
  EXPECT_EQ(live.count(freed), 0u);
  // An aborted transaction's allocation is reusable at once.
  void* p = r.heap->Allocate(5000);
  ASSERT_OK(r.heap->FreeUnpublished(p));
  bool reused = false;  // in the same epoch, once the thread's cached blocks are used up
  for (int i = 0; i < 100 && !reused; ++i) reused = r.heap->Allocate(5000) == p;
  EXPECT_TRUE(reused);
}

TEST(HeapTest, PnewAndPdeleteUseTheDefaultHeap) {
  Memory m;
  Runtime r = Open(m, true);
  struct Point {
    int x, y;
    Point(int a, int b) : x(a), y(b) {}
  };
  Point* p = pnew<Point>(3, 4);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(p->x + p->y, 7);
  EXPECT_TRUE(r.pool->contains(p, sizeof(*p)));
  ASSERT_OK(pdelete(p));
  EXPECT_THAT(pdelete(p), testing::StatusIs(absl::StatusCode::kFailedPrecondition, "double free"));
}

// Heaps written with version 1 interleave each chunk's header and bitmap (ChunkMeta); version 2
// keeps the headers together. A version 1 heap keeps its layout: its state lands in the
// interleaved records, survives a crash and a reopen, and allocation continues.
TEST(HeapTest, VersionOneHeapKeepsTheInterleavedLayout) {
  Memory a, b;
  { Runtime r = Open(a, true); }  // formats an empty heap (version 2)
  {
    PoolOptions po;
    po.backend = BackendKind::kEadr;
    auto pool = Pool::OpenInMemory(a.base(), a.size(), "alloc-test", po);
    ASSERT_OK(pool);
    auto* h = static_cast<alloc_internal::HeapHeader*>((*pool)->region_base(PoolRegion::kHeap));
    h->version = 1;
    h->crc = Crc32c(h, offsetof(alloc_internal::HeapHeader, crc));
  }
  std::set<uint64_t> at_start;
  {
    Runtime r = Open(a, false);
    std::vector<void*> v;
    for (int i = 0; i < 500; ++i) v.push_back(r.heap->Allocate(16 + i * 13));
    ASSERT_NE(r.heap->Allocate(300 * 1024), nullptr);
    ASSERT_OK(r.epochs->Advance());
    at_start = LiveOffsets(*r.heap);
    // Every chunk that holds a block has its state in the version 1 record: ChunkMeta c.
    const auto* region = static_cast<const uint8_t*>(r.pool->region_base(PoolRegion::kHeap));
    const auto* hh = reinterpret_cast<const alloc_internal::HeapHeader*>(region);
    for (uint64_t off : at_start) {
      const uint64_t c = (off - r.pool->region(PoolRegion::kHeap).offset - hh->data_offset) /
                         alloc_internal::kChunkSize;
      const auto* meta =
          reinterpret_cast<const alloc_internal::ChunkMeta*>(region + alloc_internal::kMetaOffset) +
          c;
      EXPECT_NE(alloc_internal::StateKind(meta->header.word[0].load()),
                alloc_internal::ChunkKind::kFree)
          << "chunk " << c;
    }
    for (int i = 0; i < 500; i += 2) ASSERT_OK(r.heap->Free(v[i]));  // the failed epoch
    for (int i = 0; i < 100; ++i) ASSERT_NE(r.heap->Allocate(48), nullptr);
    b.CopyFrom(a);  // crash
  }
  Runtime r = Open(b, false);
  EXPECT_EQ(LiveOffsets(*r.heap), at_start);
  ASSERT_OK(r.heap->Check());
  for (int i = 0; i < 5000; ++i) {
    void* p = r.heap->Allocate(16 + i % 900);
    ASSERT_NE(p, nullptr);
    ASSERT_EQ(at_start.count(r.pool->offset_of(p)), 0u) << "double allocation";
  }
  ASSERT_OK(r.heap->Check());
}

TEST(HeapTest, CorruptHeaderIsDataLoss) {
  Memory m;
  { Runtime r = Open(m, true); }
  PoolOptions po;
  po.backend = BackendKind::kEadr;
  auto pool = Pool::OpenInMemory(m.base(), m.size(), "alloc-test", po);
  ASSERT_OK(pool);
  epoch::ManagerOptions eo;
  eo.interval = std::chrono::milliseconds(0);
  auto epochs = epoch::Manager::Open(**pool, eo);
  ASSERT_OK(epochs);
  auto* hdr = static_cast<uint8_t*>((*pool)->region_base(PoolRegion::kHeap));
  hdr[20] ^= 1;
  EXPECT_THAT(Heap::Open(**pool, **epochs),
              testing::StatusIs(absl::StatusCode::kDataLoss, "heap header at offset"));
  hdr[20] ^= 1;
}

}  // namespace
}  // namespace pmrt::alloc
