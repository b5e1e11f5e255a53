// The durable Masstree's runtime as its crash-simulator and process-kill tests open it: a pool
// whose root holds the tree's descriptor, with its epoch manager, heap and tree.
#ifndef PMRT_TESTS_DS_DURABLE_TREE_RUNTIME_H_
#define PMRT_TESTS_DS_DURABLE_TREE_RUNTIME_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "alloc/allocator.h"
#include "ds/durable_masstree.h"
#include "epoch/epoch.h"
#include "epoch/pool.h"
#include "tests/alloc/heap_runtime.h"

namespace pmrt::ds::tree_runtime {

struct TreeRoot {
  uint64_t tree;  // the tree's descriptor offset
};

// The pool, manager and heap, and the tree (destroyed first).
struct TreeRuntime : alloc::test_runtime::HeapRuntime {
  std::unique_ptr<DurableMasstree> tree;
};

// Opens the layers over an opened pool (the real recovery path: the manager's log replay, the
// heap, the tree's open with lazy repair), the manager advancing every `interval` (0: manually).
inline absl::StatusOr<TreeRuntime> OpenTree(std::unique_ptr<Pool> pool,
                                            std::chrono::milliseconds interval) {
  TreeRuntime r;
  if (auto st = alloc::test_runtime::OpenHeapLayers(std::move(pool), r, {.interval = interval});
      !st.ok()) {
    return st;
  }
  auto root = r.pool->root<TreeRoot>();
  if (!root.ok()) return root.status();
  auto t = DurableMasstree::Open(*r.pool, *r.epochs, *r.heap, (*root)->tree);
  if (!t.ok()) return t.status();
  r.tree = std::move(*t);
  return r;
}

// Creates a tree in a fresh pool and records it in the root; `fill(tree)` (if any) then runs,
// and closing the layers (the manager advances twice) makes all of it durable.
inline absl::Status CreateTree(Pool& pool,
                               const std::function<void(DurableMasstree&)>& fill = nullptr) {
  auto m = epoch::Manager::Open(pool, {.interval = std::chrono::milliseconds(0)});
  if (!m.ok()) return m.status();
  auto h = alloc::Heap::Open(pool, **m);
  if (!h.ok()) return h.status();
  auto t = DurableMasstree::Create(pool, **m, **h);
  if (!t.ok()) return t.status();
  {
    epoch::Guard g(**m);
    TreeRoot* root = *pool.root<TreeRoot>();
    root->tree = (*t)->descriptor();
    (*m)->RecordDirty(root, sizeof(TreeRoot));
  }
  if (fill) fill(**t);
  return absl::OkStatus();
}

}  // namespace pmrt::ds::tree_runtime

#endif  // PMRT_TESTS_DS_DURABLE_TREE_RUNTIME_H_
