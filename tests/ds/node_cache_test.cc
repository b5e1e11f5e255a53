// Tests for ds_internal::NodeCache, the transient Masstree's thread-caching allocator: class
// sizes and alignment, reuse on one thread, frees by a thread that never allocates (memory
// stays bounded: the blocks come back to the allocating thread), and thread exit.
#include "ds/internal/node_cache.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "ds/node_allocator.h"

namespace pmrt::ds_internal {
namespace {

TEST(NodeCacheTest, ClassesCoverEverySmallSizeWithTheirAlignment) {
  NodeCache& cache = NodeCache::Global();
  for (size_t size = 1; size <= NodeCache::kMaxSmall; size += 7) {
    const int c = NodeCache::ClassOf(size);
    ASSERT_GE(NodeCache::ClassSize(c), size) << size;
    if (c > 0) {
      ASSERT_LT(NodeCache::ClassSize(c - 1), size) << size;
    }
    void* p = cache.Allocate(size);
    ASSERT_NE(p, nullptr);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 16, 0u) << size;
    if (NodeCache::ClassSize(c) % 64 == 0) {
      EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 64, 0u) << size;
    }
    std::memset(p, 0xab, size);
    cache.Free(p, size);
  }
  void* big = cache.Allocate(NodeCache::kMaxSmall + 1);
  ASSERT_NE(big, nullptr);
  std::memset(big, 1, NodeCache::kMaxSmall + 1);
  cache.Free(big, NodeCache::kMaxSmall + 1);
}

TEST(NodeCacheTest, BatchesHoldSixteenKiBOfBlocksWithinBounds) {
  for (int c = 0; c < NodeCache::kClasses; ++c) {
    const size_t n = (16 * 1024) / NodeCache::ClassSize(c);
    EXPECT_EQ(NodeCache::BatchOf(c), std::clamp<size_t>(n, 8, 128)) << c;
  }
}

TEST(NodeCacheTest, BlocksAreDistinctAndReusedByTheirThread) {
  NodeCache& cache = NodeCache::Global();
  std::set<void*> seen;
  std::vector<void*> blocks;
  for (int i = 0; i < 5000; ++i) {
    void* p = cache.Allocate(320);
    ASSERT_TRUE(seen.insert(p).second) << "a block handed out twice";
    std::memset(p, i & 0xff, 320);
    blocks.push_back(p);
  }
  const size_t held = cache.slab_bytes();
  for (void* p : blocks) cache.Free(p, 320);
  // Allocating as many again carves no new slab: the freed blocks are reused.
  for (int i = 0; i < 5000; ++i) blocks[i] = cache.Allocate(320);
  EXPECT_EQ(cache.slab_bytes(), held);
  for (void* p : blocks) cache.Free(p, 320);
}

TEST(NodeCacheTest, AConsumerThreadsFreesComeBackToTheProducer) {
  // A producer allocates, a consumer frees, 200,000 blocks through a queue of at most 1,000:
  // the memory held stays near what the queue needs, not what the run allocated.
  NodeCache& cache = NodeCache::Global();
  constexpr int kBlocks = 200'000;
  constexpr size_t kSize = 96;
  std::mutex mu;
  std::vector<void*> queue;
  std::atomic<bool> done{false};
  const size_t before = cache.slab_bytes();
  std::thread consumer([&] {
    for (;;) {
      std::vector<void*> take;
      {
        std::lock_guard<std::mutex> l(mu);
        take.swap(queue);
      }
      for (void* p : take) cache.Free(p, kSize);
      if (take.empty() && done.load()) break;
      if (take.empty()) std::this_thread::yield();
    }
  });
  for (int i = 0; i < kBlocks; ++i) {
    void* p = cache.Allocate(kSize);
    ASSERT_NE(p, nullptr);
    std::memset(p, 0x5a, kSize);
    for (;;) {
      std::lock_guard<std::mutex> l(mu);
      if (queue.size() < 1000) {
        queue.push_back(p);
        break;
      }
    }
  }
  done.store(true);
  consumer.join();
  // Allocated in all: 200,000 x 96 B = 19 MB. Held: the queue, two batches per thread, and the
  // batches in transit (a few hundred KiB).
  EXPECT_LT(cache.slab_bytes() - before, size_t{2} << 20);
}

TEST(NodeCacheTest, AnExitedThreadsListsGoToTheOtherThreads) {
  NodeCache& cache = NodeCache::Global();
  constexpr size_t kSize = 4000;  // a class no other test uses
  std::vector<void*> blocks(300);
  std::thread t([&] {
    for (void*& p : blocks) p = cache.Allocate(kSize);
    for (void* p : blocks) cache.Free(p, kSize);  // its lists now hold them; then it exits
  });
  t.join();
  const size_t held = cache.slab_bytes();
  std::vector<void*> again(300);
  for (void*& p : again) p = cache.Allocate(kSize);
  EXPECT_EQ(cache.slab_bytes(), held);
  for (void* p : again) cache.Free(p, kSize);
}

TEST(NodeCacheTest, CachingNodeAllocatorAlignsNodesAndValues) {
  ds::CachingNodeAllocator a;
  void* n = a.AllocateNode(320, 64);
  void* v = a.AllocateValue(40);
  void* w = a.AllocateNode(300, 256);
  ASSERT_NE(n, nullptr);
  ASSERT_NE(v, nullptr);
  ASSERT_NE(w, nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(n) % 64, 0u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(v) % 16, 0u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(w) % 256, 0u);
  {
    ds::CachingNodeAllocator::Guard g(a);
    a.RetireNode(n, 320);
    a.RetireValue(v, 40);
    a.RetireNode(w, 300);
  }
  for (int i = 0; i < 10; ++i) Ebr::Global().Collect();
}

}  // namespace
}  // namespace pmrt::ds_internal
