// Structural checker for a quiescent Masstree (no concurrent writers).
#ifndef PMRT_DS_INTERNAL_TREE_CHECK_H_
#define PMRT_DS_INTERNAL_TREE_CHECK_H_

#include <cstddef>

#include "absl/status/status.h"
#include "ds/internal/tree_core.h"

namespace pmrt::ds_internal {

// What a check found.
struct TreeShape {
  size_t keys = 0;          // live keys, all layers
  size_t layers = 0;        // layer 0 included
  size_t leaves = 0;        // border nodes
  size_t empty_leaves = 0;  // border nodes without keys
  size_t interiors = 0;     // interior nodes
  int height = 0;           // levels of layer 0 (1: a single border node)
};

// Checks, for every layer: root flags and parent links; interior separators strictly ascending
// and inside the range the parent gives; children non-null exactly up to nkeys; all leaves at
// one depth; every border node's permutation valid, its keys strictly ascending and inside its
// range, its low bound equal to the range's start; the leaf chain (next/prev) equal to the
// in-order leaves; no version word locked, dirty or deleted; layer links and value objects
// consistent with keylenx (suffix present exactly for class-9 keys). Fills *shape (may be
// null). Returns kInternal with the first violation found.
// The durable tree adds, per border node: the node epoch is not ahead of the current epoch,
// perm_log is a valid permutation, and each valid value log names a slot of its own line.
// REQUIRES: no thread modifies the tree during the call; inside a Guard (the durable tree
// repairs nodes on first access). Instantiated in tree_check.cc for both policies.
template <class P>
absl::Status CheckTree(const TreeCore<P>& tree, TreeShape* shape);

}  // namespace pmrt::ds_internal

#endif  // PMRT_DS_INTERNAL_TREE_CHECK_H_
