// TreeCore: the state one Masstree shares between its (non-template) read paths and its
// allocator-templated write paths.
#ifndef PMRT_DS_INTERNAL_TREE_CORE_H_
#define PMRT_DS_INTERNAL_TREE_CORE_H_

#include <atomic>
#include <cstdint>

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

struct TreeCore {
  // Root of layer 0. Changes only when that root splits, stored by the splitter while it holds
  // the old root's lock (release; readers load with acquire). A reader may find a node that is no
  // longer the root; it climbs parent links (FindLeaf).
  std::atomic<NodeHeader*> root{nullptr};
  StripedCounter size;  // live keys
};

}  // namespace pmrt::ds_internal

#endif  // PMRT_DS_INTERNAL_TREE_CORE_H_
