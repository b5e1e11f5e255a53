#include "ds/internal/tree_find.h"

#include <algorithm>

#include "ds/internal/key_slice.h"

namespace pmrt::ds_internal {

LeafAndVersion FindLeaf(NodeHeader* entry, uint64_t slice) {
retry:
  NodeHeader* n = entry;
  uint64_t v = n->version.Stable();
  if (NodeVersion::IsDeleted(v)) return {nullptr, 0};
  // 1. Climb to the layer's current root. A node loses kRoot only after its parent link is set,
  // both under kSplitting, so a stable non-root version guarantees the link is visible.
  while (!NodeVersion::IsRoot(v)) {
    n = HeaderOf(ParentOf(n));
    v = n->version.Stable();
  }
  // 2. Descend. The child's version is read before the parent is validated: if the parent is
  // unchanged, the child had not yet split away our key when we read its version (a split keeps
  // the child dirty until the parent has been marked), and a later split shows in the child's
  // own version.
  while (!NodeVersion::IsLeaf(v)) {
    InteriorNode* in = AsInterior(n);
    const int nkeys = std::min(in->size(), kInteriorWidth);
    NodeHeader* child = in->child[in->ChildIndex(slice, nkeys)].load(std::memory_order_acquire);
    const uint64_t child_version = child != nullptr ? child->version.Stable() : 0;
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

LeafAndVersion Advance(LeafNode* leaf, uint64_t slice) {
  uint64_t v = leaf->version().Stable();
  for (;;) {
    if (NodeVersion::IsDeleted(v)) return {nullptr, 0};
    LeafNode* next = leaf->next.load(std::memory_order_acquire);
    // `next` may be dereferenced only if `leaf` was still linked after the load (then `next` was
    // linked too, and is not freed before our Guard ends).
    if (leaf->version().HasChanged(v)) {
      v = leaf->version().Stable();
      continue;
    }
    if (next == nullptr || slice < next->low_bound.load(std::memory_order_relaxed)) {
      return {leaf, v};
    }
    leaf = next;
    v = leaf->version().Stable();
  }
}

LeafNode* LockLeaf(NodeHeader* entry, uint64_t slice) {
  for (;;) {
    LeafNode* leaf = FindLeaf(entry, slice).leaf;
    if (leaf == nullptr) return nullptr;
    leaf->version().Lock();
    // Move right hand over hand (left to right is the sibling lock order). Under leaf's lock
    // leaf->next is linked and not being removed (its removal needs leaf's lock).
    while (!NodeVersion::IsDeleted(leaf->version().Load())) {
      LeafNode* next = leaf->next.load(std::memory_order_acquire);
      if (next == nullptr || slice < next->low_bound.load(std::memory_order_relaxed)) return leaf;
      next->version().Lock();
      leaf->version().Unlock();
      leaf = next;
    }
    leaf->version().Unlock();  // removed before we locked it: descend again
  }
}

InteriorNode* LockParent(NodeHeader* node) {
  for (;;) {
    InteriorNode* parent = ParentOf(node);
    parent->version().Lock();
    if (ParentOf(node) == parent) return parent;
    parent->version().Unlock();  // the parent split and handed node to its new sibling
  }
}

void SetParent(NodeHeader* node, InteriorNode* parent) {
  if (NodeVersion::IsLeaf(node->version.Load())) {
    AsLeaf(node)->parent.store(parent, std::memory_order_release);
  } else {
    AsInterior(node)->parent.store(parent, std::memory_order_release);
  }
}

const ValueObject* Lookup(const TreeCore& tree, std::string_view key) {
  KeyCursor k(key);
  NodeHeader* entry = tree.root.load(std::memory_order_acquire);
  for (;;) {
    LeafAndVersion lv = FindLeaf(entry, k.slice());
    NodeHeader* next_layer = nullptr;
    while (lv.leaf != nullptr) {
      LeafNode* leaf = lv.leaf;
      const LeafPermuter perm = leaf->perm();
      bool found;
      const int pos = leaf->LowerBound(k.pos(), perm, &found);
      uint8_t kx = 0;
      uint64_t bits = 0;
      if (found) {
        kx = leaf->keylenx[perm[pos]].load(std::memory_order_relaxed);
        // Acquire pairs with the release store that installed the value (its bytes are visible).
        bits = leaf->lv[perm[pos]].load(std::memory_order_acquire);
      }
      if (leaf->version().HasChanged(lv.version)) {
        lv = Advance(leaf, k.slice());
        continue;
      }
      // Validated: (kx, bits) were the slot's contents while the key was live in the leaf.
      if (!found) return nullptr;
      if (kx == kKeyLenLayer) {
        next_layer = reinterpret_cast<NodeHeader*>(bits);
        break;
      }
      const ValueObject* value = ValueRef::FromBits(bits).get();
      if (kx == kKeyLenSuffix && value->suffix() != k.suffix()) return nullptr;
      return value;
    }
    if (next_layer != nullptr) {
      entry = next_layer;
      k.Descend();
    } else {  // a removed leaf or layer: start over from the top
      k.Reset();
      entry = tree.root.load(std::memory_order_acquire);
    }
  }
}

}  // namespace pmrt::ds_internal
