#include "ds/internal/tree_find.h"

#include <algorithm>

#include "ds/internal/durable_policy.h"
#include "ds/internal/key_slice.h"
#include "ds/internal/tree_policy.h"

namespace pmrt::ds_internal {

template <class P>
LeafAndVersion FindLeaf(const P& p, NodeHeader* entry, uint64_t slice) {
retry:
  NodeHeader* n = entry;
  PrefetchNode(n);
  p.Ready(n);
  uint64_t v = n->version.Stable();
  if (NodeVersion::IsDeleted(v)) return {nullptr, 0};
  // 1. Climb to the layer's current root. A node loses kRoot only after its parent link is set,
  // both under kSplitting, so a stable non-root version guarantees the link is visible.
  while (!NodeVersion::IsRoot(v)) {
    n = HeaderOf(ParentOf(p, n));
    p.Ready(n);
    v = n->version.Stable();
  }
  // 2. Descend. The child's version is read before the parent is validated: if the parent is
  // unchanged, the child had not yet split away our key when we read its version (a split keeps
  // the child dirty until the parent has been marked), and a later split shows in the child's
  // own version. A child slot only ever holds a live child or null, so the child may be
  // repaired (Ready) before the parent is validated.
  while (!NodeVersion::IsLeaf(v)) {
    InteriorNode* in = AsInterior(n);
    const int nkeys = std::min(in->size(), kInteriorWidth);
    NodeHeader* child = in->child[in->ChildIndex(slice, nkeys)].Load(p, std::memory_order_acquire);
    uint64_t child_version = 0;
    if (child != nullptr) {
      PrefetchNode(child);
      p.Ready(child);
      child_version = child->version.Stable();
    }
    if (child == nullptr || in->version().HasChanged(v)) {
      const uint64_t now = in->version().Stable();
      if (NodeVersion::SplitSince(v, now)) goto retry;  // keys left this node: start over
      v = now;
      continue;
    }
    if (NodeVersion::IsDeleted(child_version)) goto retry;  // unlinked after we read the slot
    n = child;
    v = child_version;
  }
  return {AsLeaf(n), v};
}

template <class P>
LeafAndVersion Advance(const P& p, LeafNode* leaf, uint64_t slice) {
  uint64_t v = leaf->version().Stable();
  for (;;) {
    if (NodeVersion::IsDeleted(v)) return {nullptr, 0};
    LeafNode* next = leaf->next.Load(p, std::memory_order_acquire);
    // `next` may be dereferenced only if `leaf` was still linked after the load (then `next` was
    // linked too, and is not freed before our Guard ends).
    if (leaf->version().HasChanged(v)) {
      v = leaf->version().Stable();
      continue;
    }
    // low_bound never changes after a node is created, so it may be read before Ready.
    if (next == nullptr || slice < next->low_bound.load(std::memory_order_relaxed)) {
      return {leaf, v};
    }
    leaf = next;
    PrefetchNode(leaf);
    p.Ready(HeaderOf(leaf));
    v = leaf->version().Stable();
  }
}

template <class P>
LeafNode* LockLeaf(const P& p, NodeHeader* entry, uint64_t slice) {
  for (;;) {
    LeafNode* leaf = FindLeaf(p, entry, slice).leaf;
    if (leaf == nullptr) return nullptr;
    leaf->version().Lock();
    // Move right hand over hand (left to right is the sibling lock order). Under leaf's lock
    // leaf->next is linked and not being removed (its removal needs leaf's lock).
    while (!NodeVersion::IsDeleted(leaf->version().Load())) {
      LeafNode* next = leaf->next.Load(p, std::memory_order_acquire);
      if (next == nullptr || slice < next->low_bound.load(std::memory_order_relaxed)) return leaf;
      p.Ready(HeaderOf(next));
      next->version().Lock();
      leaf->version().Unlock();
      leaf = next;
    }
    leaf->version().Unlock();  // removed before we locked it: descend again
  }
}

template <class P>
InteriorNode* LockParent(const P& p, NodeHeader* node) {
  for (;;) {
    InteriorNode* parent = ParentOf(p, node);
    p.Ready(HeaderOf(parent));
    parent->version().Lock();
    if (ParentOf(p, node) == parent) return parent;
    parent->version().Unlock();  // the parent split and handed node to its new sibling
  }
}

template <class P>
const ValueObject* Lookup(const TreeCore<P>& tree, std::string_view key) {
  const P& p = tree.policy;
  KeyCursor k(key);
  NodeHeader* entry = tree.Root();
  for (;;) {
    LeafAndVersion lv = FindLeaf(p, entry, k.slice());
    NodeHeader* next_layer = nullptr;
    while (lv.leaf != nullptr) {
      LeafNode* leaf = lv.leaf;
      const LeafPermuter perm = leaf->perm();
      const int slot = leaf->FindSlot(k.pos(), perm);
      const bool found = slot >= 0;
      uint8_t kx = 0;
      uint64_t bits = 0;
      if (found) {
        kx = leaf->keylenx[slot].load(std::memory_order_relaxed);
        // Acquire pairs with the release store that installed the value (its bytes are visible).
        bits = leaf->lv[slot].load(std::memory_order_acquire);
      }
      if (leaf->version().HasChanged(lv.version)) {
        lv = Advance(p, leaf, k.slice());
        continue;
      }
      // Validated: (kx, bits) were the slot's contents while the key was live in the leaf.
      if (!found) return nullptr;
      if (kx == kKeyLenLayer) {
        next_layer = DecodeLink<NodeHeader>(p, bits);
        break;
      }
      const ValueObject* value = ValueRef::FromBits(bits).get(p);
      if (kx == kKeyLenSuffix && value->suffix() != k.suffix()) return nullptr;
      return value;
    }
    if (next_layer != nullptr) {
      entry = next_layer;
      k.Descend();
    } else {  // a removed leaf or layer: start over from the top
      k.Reset();
      entry = tree.Root();
    }
  }
}

#define PMRT_INSTANTIATE_FIND(P)                                        \
  template LeafAndVersion FindLeaf<P>(const P&, NodeHeader*, uint64_t); \
  template LeafAndVersion Advance<P>(const P&, LeafNode*, uint64_t);    \
  template LeafNode* LockLeaf<P>(const P&, NodeHeader*, uint64_t);      \
  template InteriorNode* LockParent<P>(const P&, NodeHeader*);          \
  template const ValueObject* Lookup<P>(const TreeCore<P>&, std::string_view);
PMRT_INSTANTIATE_FIND(TransientPolicy)
PMRT_INSTANTIATE_FIND(DurablePolicy)
#undef PMRT_INSTANTIATE_FIND

}  // namespace pmrt::ds_internal
