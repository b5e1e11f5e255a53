// TreeCore: the state one Masstree shares between its read paths and its write paths, and
// Writer, what a write operation carries down the algorithms. Both are templated on the tree
// policy P (TransientPolicy or DurablePolicy, ds/internal/tree_policy.h).
#ifndef PMRT_DS_INTERNAL_TREE_CORE_H_
#define PMRT_DS_INTERNAL_TREE_CORE_H_

#include <atomic>
#include <cstdint>
#include <utility>

#include "ds/internal/node_layout.h"

namespace pmrt::ds_internal {

// A counter split over cache lines, so concurrent writers do not share one line. Sum() is
// exact once writers are quiescent, an estimate while they run.
class StripedCounter {
 public:
  void Add(int64_t delta) {
    stripes_[ThreadStripe()].value.fetch_add(delta, std::memory_order_relaxed);
  }
  int64_t Sum() const {
    int64_t sum = 0;
    for (const Stripe& s : stripes_) sum += s.value.load(std::memory_order_relaxed);
    return sum;
  }

 private:
  static constexpr int kStripes = 16;
  struct alignas(kCacheLine) Stripe {
    std::atomic<int64_t> value{0};
  };
  static int ThreadStripe() {
    static std::atomic<int> next{0};
    thread_local const int stripe = next.fetch_add(1, std::memory_order_relaxed) % kStripes;
    return stripe;
  }
  Stripe stripes_[kStripes];
};

template <class P>
struct TreeCore {
  explicit TreeCore(P p) : policy(std::move(p)) {}

  NodeHeader* Root() const {
    // Acquire pairs with SetRoot's release store: the root it names is initialized.
    return DecodeLink<NodeHeader>(policy, root_word->load(std::memory_order_acquire));
  }
  // REQUIRES: the caller holds the lock of the root being replaced (or the tree is unshared),
  // and, in the durable tree, has logged the word (P::LogRoot).
  void SetRoot(NodeHeader* n) {
    root_word->store(EncodeLink(policy, n), std::memory_order_release);
  }

  P policy;
  // Root link of layer 0: `own_root` (transient) or the word in the pool's tree descriptor
  // (durable). Changes only when that root splits, stored by the splitter while it holds the old
  // root's lock. A reader may find a node that is no longer the root; it climbs parent links
  // (FindLeaf).
  std::atomic<uint64_t>* root_word = &own_root;
  std::atomic<uint64_t> own_root{0};
  StripedCounter size;  // live keys since the tree was created or opened (see BasicMasstree)
};

// What a write operation did.
enum class WriteOutcome {
  kInserted,
  kUpdated,
  kExists,
  kRemoved,
  kAbsent,
  kNoMemory,  // an allocation failed; nothing changed
  kNoLog,     // durable: the external undo log is full until the next epoch; nothing changed
};

// A write operation in progress: the tree, its allocator, and the epoch of the operation's guard
// (0 in the transient tree). REQUIRES: the operation holds the allocator's Guard throughout.
template <class A, class P>
struct Writer {
  TreeCore<P>& tree;
  A& alloc;
  uint64_t epoch;
  const P& p() const { return tree.policy; }
};

}  // namespace pmrt::ds_internal

#endif  // PMRT_DS_INTERNAL_TREE_CORE_H_
