// Descent through one layer of the Masstree, for readers (optimistic, no shared writes) and for
// writers (which end holding the border node's lock). docs/masstree.md has the protocol.
//
// A "layer entry" is what points into a layer: TreeCore's root for layer 0, a border slot's
// layer link below that. The entry may lag behind root splits (the functions climb parent links)
// and a deeper layer's entry may be a removed layer (they report it, and the caller restarts
// from the root).
//
// Every node reached through a link is passed to the policy's Ready() before its version word or
// any other field is read (the durable tree repairs nodes lazily after a crash; the transient
// policy's Ready is empty). Templates on the policy P; instantiated in tree_find.cc for both.
//
// REQUIRES for everything here: the caller is inside the allocator's Guard, so no node it can
// reach is freed under it.
#ifndef PMRT_DS_INTERNAL_TREE_FIND_H_
#define PMRT_DS_INTERNAL_TREE_FIND_H_

#include <cstdint>
#include <string_view>

#include "ds/internal/node_layout.h"
#include "ds/internal/tree_core.h"
#include "ds/internal/value_ref.h"

namespace pmrt::ds_internal {

struct LeafAndVersion {
  LeafNode* leaf;    // nullptr: restart from above (the layer or the leaf was removed)
  uint64_t version;  // a stable version of leaf
};

// The border node whose key range holds `slice`, with a stable version taken while the path to
// it was valid. leaf == nullptr when `entry` is a removed layer.
template <class P>
LeafAndVersion FindLeaf(const P& p, NodeHeader* entry, uint64_t slice);

// After a reader's validation of `leaf` failed: waits for a stable version and moves right while
// `slice` belongs to a right sibling (the leaf split). leaf == nullptr when a leaf on the way was
// removed (restart from the layer entry).
template <class P>
LeafAndVersion Advance(const P& p, LeafNode* leaf, uint64_t slice);

// Writers: the border node whose range holds `slice`, locked and not deleted, or nullptr when
// `entry` is a removed layer.
template <class P>
LeafNode* LockLeaf(const P& p, NodeHeader* entry, uint64_t slice);

// Locks and returns the parent of `node`, verified to still be its parent after locking (a
// parent link changes only under the parent's lock). REQUIRES: the caller holds node's lock and
// node is not a root.
template <class P>
InteriorNode* LockParent(const P& p, NodeHeader* node);

// Stores `node`'s parent link. REQUIRES: the caller holds the new parent's lock (or the node is
// unpublished), and in the durable tree has logged the link (P::LogParent). Release pairs with
// ParentOf()'s acquire.
template <class P>
void SetParent(const P& p, NodeHeader* node, InteriorNode* parent) {
  ParentLink(node).Store(p, parent, std::memory_order_release);
}

// The value object stored under `key`, or nullptr. REQUIRES: inside a Guard; the object stays
// valid until the Guard ends.
template <class P>
const ValueObject* Lookup(const TreeCore<P>& tree, std::string_view key);

}  // namespace pmrt::ds_internal

#endif  // PMRT_DS_INTERNAL_TREE_FIND_H_
