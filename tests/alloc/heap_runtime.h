// Test helper: a pool with its epoch manager (advanced manually) and heap, opened through the
// real recovery path (the manager's log replay, the heap's open). The allocator's crash-simulator
// and process-kill tests use it as is; the durable Masstree's and the
// transactions' tests add the tree or the engine.
#ifndef PMRT_TESTS_ALLOC_HEAP_RUNTIME_H_
#define PMRT_TESTS_ALLOC_HEAP_RUNTIME_H_

#include <chrono>
#include <cstdint>
#include <memory>
#include <set>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "alloc/allocator.h"
#include "epoch/epoch.h"
#include "epoch/pool.h"

namespace pmrt::alloc::test_runtime {

// The heap's metadata checks out and its live blocks are exactly `want` (pool offsets): a block
// not in `want` leaked, one of `want` not live is lost.
inline absl::Status CheckBlocksAre(const Heap& heap, const std::set<uint64_t>& want) {
  if (auto st = heap.Check(); !st.ok()) return st;
  std::set<uint64_t> got;
  (void)heap.Walk([&](const BlockInfo& b) { got.insert(b.offset); });
  for (uint64_t b : got)
    if (!want.count(b)) return absl::DataLossError(absl::StrCat("heap block at ", b, " leaked"));
  for (uint64_t b : want)
    if (!got.count(b))
      return absl::DataLossError(absl::StrCat("block at ", b, " is not allocated"));
  return absl::OkStatus();
}

struct HeapRuntime {
  std::unique_ptr<Pool> pool;
  std::unique_ptr<epoch::Manager> epochs;
  std::unique_ptr<Heap> heap;
};

// Opens the manager (by default advanced manually) and the heap over an opened pool, into `r`,
// which takes the pool.
inline absl::Status OpenHeapLayers(std::unique_ptr<Pool> pool, HeapRuntime& r,
                                   const epoch::ManagerOptions& eo = {
                                       .interval = std::chrono::milliseconds(0)}) {
  r.pool = std::move(pool);
  auto m = epoch::Manager::Open(*r.pool, eo);
  if (!m.ok()) return m.status();
  r.epochs = std::move(*m);
  auto h = Heap::Open(*r.pool, *r.epochs);
  if (!h.ok()) return h.status();
  r.heap = std::move(*h);
  return absl::OkStatus();
}

inline absl::StatusOr<HeapRuntime> OpenHeapRuntime(std::unique_ptr<Pool> pool) {
  HeapRuntime r;
  if (auto st = OpenHeapLayers(std::move(pool), r); !st.ok()) return st;
  return r;
}

}  // namespace pmrt::alloc::test_runtime

#endif  // PMRT_TESTS_ALLOC_HEAP_RUNTIME_H_
