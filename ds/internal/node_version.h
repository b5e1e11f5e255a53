// NodeVersion: the lock and optimistic-concurrency word at the start of every Masstree node.
//
// One 64-bit word per node carries the node's lock, its "dirty" bits (a change is in progress),
// two change counters, and the node's kind:
//
//   bit  0      kLocked     a writer owns the node
//   bit  1      kInserting  a writer is changing keys in place (readers must retry)
//   bit  2      kSplitting  a writer is moving keys to another node (readers restart higher)
//   bit  3      kDeleted    the node is unlinked; it is retired, never reused while reachable
//   bit  4      kRoot       the node is the root of its layer
//   bit  5      kLeaf       border (leaf) node, else interior
//   bits 8-31   vinsert     bumped when a writer that set kInserting unlocks
//   bits 32-63  vsplit      bumped when a writer that set kSplitting unlocks
//
// Readers never write the word. A reader takes a stable (not dirty) snapshot, reads the node's
// fields with relaxed atomic loads, then calls HasChanged(): an acquire fence followed by a
// reload. A writer sets a dirty bit and issues a release fence before its first field store, and
// unlocks with a release store, so a reader whose field loads observed any part of a change sees
// the dirty bit or a bumped counter (the seqlock argument: the writer's release fence
// synchronizes with the reader's acquire fence). docs/masstree.md has the whole protocol.
//
// Counters are 24 and 32 bits wide: a reader would have to sleep through 2^24 in-place changes
// of one node for a stale snapshot to validate.
#ifndef PMRT_DS_INTERNAL_NODE_VERSION_H_
#define PMRT_DS_INTERNAL_NODE_VERSION_H_

#include <atomic>
#include <cstdint>
#include <thread>

namespace pmrt::ds_internal {

// Spins briefly, then yields: locks are held for short critical sections, but cores are shared.
class Backoff {
 public:
  void Pause() {
    if (++spins_ < 64) {
#if defined(__x86_64__) || defined(__i386__)
      __builtin_ia32_pause();
#endif
    } else {
      std::this_thread::yield();
    }
  }

 private:
  int spins_ = 0;
};

class NodeVersion {
 public:
  static constexpr uint64_t kLocked = 1u << 0;
  static constexpr uint64_t kInserting = 1u << 1;
  static constexpr uint64_t kSplitting = 1u << 2;
  static constexpr uint64_t kDeleted = 1u << 3;
  static constexpr uint64_t kRoot = 1u << 4;
  static constexpr uint64_t kLeaf = 1u << 5;
  static constexpr uint64_t kDirty = kInserting | kSplitting;
  static constexpr int kVinsertShift = 8;
  static constexpr uint64_t kVinsertMask = ((uint64_t{1} << 24) - 1) << kVinsertShift;
  static constexpr int kVsplitShift = 32;
  static constexpr uint64_t kVsplitMask = ~uint64_t{0} << kVsplitShift;

  // A version word of a fresh node. `locked` nodes are created by splits and published only
  // after their owner has finished linking them.
  static constexpr uint64_t Initial(bool leaf, bool root, bool locked) {
    return (leaf ? kLeaf : 0) | (root ? kRoot : 0) | (locked ? kLocked : 0);
  }

  NodeVersion() = default;
  explicit NodeVersion(uint64_t v) : word_(v) {}
  NodeVersion(const NodeVersion&) = delete;
  NodeVersion& operator=(const NodeVersion&) = delete;

  // Re-initializes a node that no other thread can see yet.
  void Reset(uint64_t v) { word_.store(v, std::memory_order_relaxed); }

  // The current word, unvalidated. Acquire pairs with Unlock()'s release store.
  uint64_t Load() const { return word_.load(std::memory_order_acquire); }

  // Waits until no writer has a change in progress and returns that version. Acquire pairs with
  // Unlock(): the fields the unlocking writer stored are visible to the caller's loads.
  uint64_t Stable() const {
    uint64_t v = word_.load(std::memory_order_acquire);
    Backoff backoff;
    while (v & kDirty) {
      backoff.Pause();
      v = word_.load(std::memory_order_acquire);
    }
    return v;
  }

  // True when the node changed since `v` (a Stable() result) in any way except its lock bit.
  // The acquire fence orders the caller's preceding relaxed field loads before the reload; it
  // pairs with the release fence in MarkInserting()/MarkSplitting().
  bool HasChanged(uint64_t v) const {
    std::atomic_thread_fence(std::memory_order_acquire);
    return ((word_.load(std::memory_order_relaxed) ^ v) & ~kLocked) != 0;
  }

  // True when `now` (a later Stable()) shows a split or deletion since `v`: keys may have moved
  // to a sibling, so the reader must move right or restart from above.
  static bool SplitSince(uint64_t v, uint64_t now) {
    return ((v ^ now) & (kVsplitMask | kDeleted)) != 0;
  }

  // Acquires the lock and returns the locked word. Acquire pairs with Unlock()'s release store:
  // the previous owner's changes are visible to the new owner.
  uint64_t Lock() {
    uint64_t v = word_.load(std::memory_order_relaxed);
    Backoff backoff;
    for (;;) {
      if (!(v & kLocked) && word_.compare_exchange_weak(v, v | kLocked, std::memory_order_acquire,
                                                        std::memory_order_relaxed)) {
        return v | kLocked;
      }
      backoff.Pause();
      v = word_.load(std::memory_order_relaxed);
    }
  }

  // REQUIRES: the caller holds the lock. Announces an in-place change of keys/slots; readers
  // that overlap it fail HasChanged(). The release fence orders this store before the caller's
  // following field stores (pairs with the acquire fence in HasChanged()).
  void MarkInserting() { SetBits(kInserting); }
  // REQUIRES: the caller holds the lock. Announces that keys move to another node.
  void MarkSplitting() { SetBits(kSplitting); }
  // REQUIRES: the caller holds the lock. The node leaves the tree; readers that reach it
  // restart. Also marks it splitting, so overlapping readers retry.
  void MarkDeleted() { SetBits(kDeleted | kSplitting); }
  // REQUIRES: the caller holds the lock. The node stops (or starts) being its layer's root.
  // Only done during a root split, under kSplitting.
  void SetRoot(bool root) {
    uint64_t v = word_.load(std::memory_order_relaxed);
    word_.store(root ? (v | kRoot) : (v & ~kRoot), std::memory_order_relaxed);
  }

  // REQUIRES: the caller holds the lock. Clears the lock and dirty bits and bumps the counter of
  // each dirty bit. Release: every field store made under the lock happens-before any reader
  // or locker that observes the new word (pairs with Stable()/Load()/Lock()).
  void Unlock() {
    uint64_t v = word_.load(std::memory_order_relaxed);
    if (v & kInserting) {
      v = (v & ~kVinsertMask) | ((v + (uint64_t{1} << kVinsertShift)) & kVinsertMask);
    }
    if (v & kSplitting) v += uint64_t{1} << kVsplitShift;  // wraps out of the word's top
    word_.store(v & ~(kLocked | kDirty), std::memory_order_release);
  }

  static bool IsLocked(uint64_t v) { return v & kLocked; }
  static bool IsDeleted(uint64_t v) { return v & kDeleted; }
  static bool IsRoot(uint64_t v) { return v & kRoot; }
  static bool IsLeaf(uint64_t v) { return v & kLeaf; }

 private:
  void SetBits(uint64_t bits) {
    uint64_t v = word_.load(std::memory_order_relaxed);
    word_.store(v | bits, std::memory_order_relaxed);
    // Orders the dirty bit before the caller's field stores; pairs with HasChanged()'s fence.
    std::atomic_thread_fence(std::memory_order_release);
  }

  std::atomic<uint64_t> word_{0};
};
static_assert(sizeof(NodeVersion) == 8);

}  // namespace pmrt::ds_internal

#endif  // PMRT_DS_INTERNAL_NODE_VERSION_H_
