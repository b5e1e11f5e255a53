// NodeCache: the transient Masstree's memory: a process-wide, thread-caching allocator of
// small blocks (nodes and value objects), so that allocation and free on the tree's hot paths
// touch only the calling thread's own lists.
//
//   void* p = NodeCache::Global().Allocate(320);   // 64-aligned: 320 is a multiple of 64
//   NodeCache::Global().Free(p, 320);              // any thread, same size
//
// Size classes: 16-byte steps up to 1 KiB, 128-byte steps up to kMaxSmall (8 KiB). A block of a
// class whose size is a multiple of 64 is 64-byte aligned, every block is 16-byte aligned.
// Larger requests go to malloc/free (the size passed to Free says which).
//
// Each thread keeps a free list per class. A list that runs dry takes a batch from the class's
// central list, or carves a new slab (64 KiB or more). A list that grows past two batches hands
// one back to the central list, so a thread that only frees what others allocated (a consumer)
// holds at most two batches per class; the rest returns to whoever allocates. A thread's lists
// go to the central lists when it exits. Slabs are kept for the life of the process: freed
// blocks are reused, never returned to the operating system (slab_bytes() reports what is held).
//
// Thread safety: every member may be called from any thread; a block may be freed by another
// thread than the one that allocated it.
#ifndef PMRT_DS_INTERNAL_NODE_CACHE_H_
#define PMRT_DS_INTERNAL_NODE_CACHE_H_

#include <array>
#include <atomic>
#include <boost/intrusive/slist.hpp>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <vector>

namespace pmrt::ds_internal {

class NodeCache {
 public:
  static constexpr size_t kMaxSmall = 8192;
  static constexpr int kFineClasses = 64;  // 16, 32, ..., 1024
  static constexpr int kClasses = kFineClasses + (kMaxSmall - 1024) / 128;

  // The process-wide instance (never destroyed, so thread exit can always reach it).
  static NodeCache& Global();

  // `size` bytes (16-aligned; 64-aligned when the class size is a multiple of 64), or nullptr.
  void* Allocate(size_t size);
  // Frees `p`, allocated with this `size` (by any thread).
  void Free(void* p, size_t size);

  // Bytes of slabs carved so far (the cache's footprint, less large blocks).
  size_t slab_bytes() const { return slab_bytes_.load(std::memory_order_relaxed); }

  static constexpr int ClassOf(size_t size) {
    if (size <= 1024) return size == 0 ? 0 : static_cast<int>((size + 15) / 16) - 1;
    return kFineClasses + static_cast<int>((size - 1024 + 127) / 128) - 1;
  }
  static constexpr size_t ClassSize(int c) {
    return c < kFineClasses ? static_cast<size_t>(c + 1) * 16
                            : 1024 + static_cast<size_t>(c - kFineClasses + 1) * 128;
  }
  // Blocks moved between a thread's list and the central list at a time: 16 KiB of blocks,
  // within [8, 128]. A table (constant-initialized, below the class), so that Free's check
  // costs a load, not a division.
  static const std::array<uint32_t, kClasses> kBatch;
  static uint32_t BatchOf(int c) { return kBatch[c]; }

  // A free block: its first word links it into a chain (Boost.Intrusive's hook, no safe-mode
  // checks: a block's link is written only while it is free).
  struct Block : boost::intrusive::slist_base_hook<
                     boost::intrusive::link_mode<boost::intrusive::normal_link>> {};
  // A chain of free blocks, null-terminated (linear), its length kept with it (a thread list's
  // size decides when it hands a batch back).
  using Chain = boost::intrusive::slist<Block, boost::intrusive::constant_time_size<true>,
                                        boost::intrusive::size_type<uint32_t>,
                                        boost::intrusive::linear<true>>;

 private:
  friend struct NodeCacheThread;
  struct Central {
    std::mutex mu;
    std::vector<Chain> batches;  // each BatchOf(class) blocks, or fewer
  };

  NodeCache() = default;
  // Fills an empty thread list of class `c`; false when out of memory.
  bool Refill(int c, Chain& list);
  // Moves one batch from a thread list of class `c` to the central list.
  void Release(int c, Chain& list);
  // Moves a whole thread list to the central list (thread exit).
  void ReleaseAll(int c, Chain& list);

  Central central_[kClasses];
  std::atomic<size_t> slab_bytes_{0};
};

inline constexpr std::array<uint32_t, NodeCache::kClasses> NodeCache::kBatch = [] {
  std::array<uint32_t, kClasses> t{};
  for (int c = 0; c < kClasses; ++c) {
    const size_t n = (16 * 1024) / ClassSize(c);
    t[c] = n < 8 ? 8 : n > 128 ? 128 : static_cast<uint32_t>(n);
  }
  return t;
}();

}  // namespace pmrt::ds_internal

#endif  // PMRT_DS_INTERNAL_NODE_CACHE_H_
