// Masstree removal: a key leaves its border node's permutation; a border node left empty is
// unlinked from the leaf chain and its parent; a deeper layer left empty is unlinked from the
// layer above. Unlinked nodes and values go to the allocator's Retire* (freed after readers).
//
// Removing an empty border node R locks, in the global lock order, its left sibling L, then R,
// then the ancestors that change, bottom-up (docs/masstree.md, "Removal"). R's key range joins
// L's: R's parent drops R and the separator in front of it, so the slot leading to L covers R's
// range too, and L->next skips R. When R is its parent's first child, the parent's lower bound
// moves up to its first separator, and the ancestor separator that named the old bound moves
// with it. Interior nodes left without children go with R. Removed nodes are marked deleted, so
// readers and writers that reach them start over from above. A layer's leftmost leaf stays until
// the whole layer is empty; then the layer is unlinked from the layer above. Layer 0 keeps its
// root, and a tree never loses height.
//
// REQUIRES for everything here: the caller is inside the allocator's Guard.
#ifndef PMRT_DS_INTERNAL_TREE_REMOVE_H_
#define PMRT_DS_INTERNAL_TREE_REMOVE_H_

#include <cstdint>
#include <string_view>
#include <vector>

#include "ds/internal/key_slice.h"
#include "ds/internal/node_layout.h"
#include "ds/internal/tree_core.h"
#include "ds/internal/tree_find.h"
#include "ds/internal/tree_split.h"
#include "ds/internal/value_ref.h"

namespace pmrt::ds_internal {

// The interior nodes a leaf removal changes, locked bottom-up (the global lock order).
struct RemovalPath {
  InteriorNode* locked[2 * kMaxLevels];
  int n = 0;
  int dead = 0;                 // locked[0, dead) lose their only child and go too
  InteriorNode* top = nullptr;  // locked[dead]: drops the child at top_index
  int top_index = 0;
  InteriorNode* redirect = nullptr;  // top_index == 0: the ancestor whose separator
  int redirect_index = 0;            // redirect->ikey[redirect_index] moves up to top->ikey[0]

  void UnlockAll() {
    for (int i = n - 1; i >= 0; --i) locked[i]->version().Unlock();
  }
};

// Locks what removing the subtree that holds only `node` changes: the single-child ancestors
// that vanish with it, the first ancestor `top` that keeps other children, and, when the
// subtree is top's first child, the ancestor holding the separator of top's lower bound.
// False (everything unlocked) when no such ancestors exist.
inline bool LockRemovalPath(NodeHeader* node, RemovalPath* path) {
  NodeHeader* cur = node;
  for (;;) {
    if (NodeVersion::IsRoot(cur->version.Load()) || path->n == 2 * kMaxLevels) {
      path->UnlockAll();
      return false;
    }
    InteriorNode* p = LockParent(cur);
    path->locked[path->n++] = p;
    const int i = ChildPosition(p, cur);
    if (p->size() == 0) {  // cur is p's only child: p goes too
      cur = HeaderOf(p);
      continue;
    }
    path->dead = path->n - 1;
    path->top = p;
    path->top_index = i;
    if (i > 0) return true;
    break;
  }
  for (cur = HeaderOf(path->top);;) {
    if (NodeVersion::IsRoot(cur->version.Load()) || path->n == 2 * kMaxLevels) {
      path->UnlockAll();
      return false;
    }
    InteriorNode* g = LockParent(cur);
    path->locked[path->n++] = g;
    const int j = ChildPosition(g, cur);
    if (j > 0) {
      path->redirect = g;
      path->redirect_index = j - 1;
      return true;
    }
    cur = HeaderOf(g);
  }
}

// Removes separator `key_index` and child `child_index` from the locked, dirty node `p`.
inline void RemoveFromInterior(InteriorNode* p, int key_index, int child_index) {
  const int n = p->size();
  for (int j = key_index; j + 1 < n; ++j) {
    p->ikey[j].store(p->ikey[j + 1].load(std::memory_order_relaxed), std::memory_order_relaxed);
  }
  // Children shift left one at a time, so a racing reader (FindLeaf, acquire loads) finds a
  // live node or a duplicate in every slot.
  for (int j = child_index; j < n; ++j) {
    p->child[j].store(p->child[j + 1].load(std::memory_order_relaxed), std::memory_order_release);
  }
  p->child[n].store(nullptr, std::memory_order_release);  // no slot keeps naming the child
  p->nkeys.store(static_cast<uint32_t>(n - 1), std::memory_order_relaxed);
}

// Unlinks the empty border node `r` (unlocked on entry and exit) from the leaf chain and from
// its parent; gives up quietly when the situation changed (r refilled, siblings moved). A
// layer's leftmost leaf is never unlinked here (RemoveLayer takes whole layers).
template <class A>
void UnlinkLeaf(A& alloc, LeafNode* r) {
  for (int attempt = 0; attempt < 8; ++attempt) {
    // r->prev is protected by the left sibling's lock: once l is locked and still r's prev, it
    // stays so. (Reading it unlocked is safe: l was linked when read, so not yet freed.)
    LeafNode* l = r->prev.load(std::memory_order_acquire);
    if (l == nullptr) return;
    l->version().Lock();
    if (NodeVersion::IsDeleted(l->version().Load()) ||
        r->prev.load(std::memory_order_relaxed) != l) {
      l->version().Unlock();
      continue;
    }
    r->version().Lock();
    const uint64_t rv = r->version().Load();
    RemovalPath path;
    if (NodeVersion::IsDeleted(rv) || NodeVersion::IsRoot(rv) || r->perm().size() != 0 ||
        !LockRemovalPath(HeaderOf(r), &path)) {
      r->version().Unlock();
      l->version().Unlock();
      return;
    }
    // Every reader overlapping the change retries: r and the vanishing interiors are dirty and
    // deleted, top (and redirect) dirty. All of it is published by the unlocks below.
    r->version().MarkDeleted();
    for (int i = 0; i < path.dead; ++i) path.locked[i]->version().MarkDeleted();
    path.top->version().MarkInserting();
    if (path.top_index > 0) {
      // r's range joins its left sibling's: top's slot for the left subtree now covers it.
      RemoveFromInterior(path.top, path.top_index - 1, path.top_index);
    } else {
      // r's subtree was top's first child: top now starts at its first separator, and the
      // ancestor's separator that named top's old lower bound moves up with it, so the old
      // range routes to the left subtree, whose last leaf (l) takes it over.
      path.redirect->version().MarkInserting();
      path.redirect->ikey[path.redirect_index].store(
          path.top->ikey[0].load(std::memory_order_relaxed), std::memory_order_relaxed);
      RemoveFromInterior(path.top, 0, 0);
    }
    // The chain skips r. next->prev is protected by r's lock (r is next's left sibling).
    LeafNode* next = r->next.load(std::memory_order_relaxed);
    if (next != nullptr) next->prev.store(l, std::memory_order_release);
    l->next.store(next, std::memory_order_release);
    path.UnlockAll();
    r->version().Unlock();
    l->version().Unlock();
    alloc.RetireNode(r, sizeof(LeafNode));
    for (int i = 0; i < path.dead; ++i) alloc.RetireNode(path.locked[i], sizeof(InteriorNode));
    return;
  }
}

// `sub`, the leftmost border node of the layer below the slot for `k` (positioned at the upper
// layer) in the layer entered at `entry`, was found empty and alone: unlinks the layer (sub and
// the single-child interior nodes above it). Returns the upper border node when that became
// empty in turn (unlocked), else nullptr.
template <class A>
LeafNode* RemoveLayer(A& alloc, NodeHeader* entry, const KeyCursor& k, LeafNode* sub) {
  LeafNode* up = LockLeaf(entry, k.slice());  // upper layer before lower layer
  if (up == nullptr) return nullptr;
  LeafPermuter perm = up->perm();
  bool found;
  const int pos = up->LowerBound(k.pos(), perm, &found);
  if (!found || up->keylenx[perm[pos]].load(std::memory_order_relaxed) != kKeyLenLayer ||
      up->lv[perm[pos]].load(std::memory_order_relaxed) !=
          reinterpret_cast<uint64_t>(HeaderOf(sub))) {
    up->version().Unlock();
    return nullptr;
  }
  sub->version().Lock();
  InteriorNode* chain[kMaxLevels];
  int n = 0;
  bool ok = !NodeVersion::IsDeleted(sub->version().Load()) && sub->perm().size() == 0 &&
            sub->next.load(std::memory_order_relaxed) == nullptr;
  // Interior nodes above the layer's only leaf each have that one child (child, then parent).
  for (NodeHeader* cur = HeaderOf(sub); ok && !NodeVersion::IsRoot(cur->version.Load());) {
    InteriorNode* p = LockParent(cur);
    chain[n++] = p;
    ok = p->size() == 0 && n < kMaxLevels;
    cur = HeaderOf(p);
  }
  if (ok) {
    sub->version().MarkDeleted();  // readers and writers that reach it start over from the top
    for (int i = 0; i < n; ++i) chain[i]->version().MarkDeleted();
    up->version().MarkInserting();
    perm.RemoveAt(pos);
    up->permutation.store(perm.value(), std::memory_order_release);
  }
  for (int i = n - 1; i >= 0; --i) chain[i]->version().Unlock();
  sub->version().Unlock();
  up->version().Unlock();
  if (!ok) return nullptr;
  alloc.RetireNode(sub, sizeof(LeafNode));
  for (int i = 0; i < n; ++i) alloc.RetireNode(chain[i], sizeof(InteriorNode));
  return perm.size() == 0 ? up : nullptr;
}

// Collects what `leaf` (found empty after a removal in the layer entered at entries.back(),
// with k positioned at that layer) leaves behind: the leaf itself, and layers that become empty,
// upwards.
template <class A>
void CollectEmpty(A& alloc, std::vector<NodeHeader*>& entries, KeyCursor k, LeafNode* leaf) {
  while (leaf != nullptr) {
    LeafNode* prev = leaf->prev.load(std::memory_order_acquire);
    if (prev != nullptr) {
      UnlinkLeaf(alloc, leaf);
      // The layer may now be its leftmost leaf alone, and empty.
      if (prev->prev.load(std::memory_order_acquire) != nullptr ||
          prev->next.load(std::memory_order_acquire) != nullptr || prev->perm().size() != 0) {
        return;
      }
      leaf = prev;
      continue;
    }
    if (entries.size() < 2 || leaf->next.load(std::memory_order_acquire) != nullptr) return;
    entries.pop_back();
    k.Ascend();
    leaf = RemoveLayer(alloc, entries.back(), k, leaf);
  }
}

// Removes `key`; returns whether it was present.
template <class A>
bool RemoveKey(TreeCore& tree, A& alloc, std::string_view key) {
  KeyCursor k(key);
  std::vector<NodeHeader*> entries;  // entry of each layer walked, for collecting empty layers
  entries.push_back(tree.root.load(std::memory_order_acquire));
  for (;;) {
    LeafNode* leaf = LockLeaf(entries.back(), k.slice());
    if (leaf == nullptr) {  // the layer was removed: start over from the top
      k.Reset();
      entries.assign(1, tree.root.load(std::memory_order_acquire));
      continue;
    }
    LeafPermuter perm = leaf->perm();
    bool found;
    const int pos = leaf->LowerBound(k.pos(), perm, &found);
    if (!found) {
      leaf->version().Unlock();
      return false;
    }
    const int slot = perm[pos];
    const uint8_t kx = leaf->keylenx[slot].load(std::memory_order_relaxed);
    const uint64_t bits = leaf->lv[slot].load(std::memory_order_relaxed);
    if (kx == kKeyLenLayer) {
      leaf->version().Unlock();
      entries.push_back(reinterpret_cast<NodeHeader*>(bits));
      k.Descend();
      continue;
    }
    ValueObject* old = ValueRef::FromBits(bits).get();
    if (kx == kKeyLenSuffix && old->suffix() != k.suffix()) {
      leaf->version().Unlock();
      return false;
    }
    // The slot may be reused by a later insert while a reader still holds the old permutation,
    // so removal changes the version (kInserting): such readers retry.
    leaf->version().MarkInserting();
    perm.RemoveAt(pos);
    leaf->permutation.store(perm.value(), std::memory_order_release);
    leaf->version().Unlock();
    alloc.RetireValue(old, old->size());
    tree.size.Add(-1);
    if (perm.size() == 0) CollectEmpty(alloc, entries, k, leaf);
    return true;
  }
}

// Retires the subtree rooted at `n` with every value and deeper layer in it.
// REQUIRES: no other thread uses the tree.
template <class A>
void DestroyNode(A& alloc, NodeHeader* n) {
  if (NodeVersion::IsLeaf(n->version.Load())) {
    LeafNode* leaf = AsLeaf(n);
    const LeafPermuter perm = leaf->perm();
    for (int i = 0; i < perm.size(); ++i) {
      const uint64_t bits = leaf->lv[perm[i]].load(std::memory_order_relaxed);
      if (leaf->keylenx[perm[i]].load(std::memory_order_relaxed) == kKeyLenLayer) {
        NodeHeader* sub = reinterpret_cast<NodeHeader*>(bits);
        while (!NodeVersion::IsRoot(sub->version.Load())) sub = HeaderOf(ParentOf(sub));
        DestroyNode(alloc, sub);
      } else {
        ValueObject* v = ValueRef::FromBits(bits).get();
        alloc.RetireValue(v, v->size());
      }
    }
    alloc.RetireNode(leaf, sizeof(LeafNode));
    return;
  }
  InteriorNode* in = AsInterior(n);
  for (int i = 0; i <= in->size(); ++i) {
    DestroyNode(alloc, in->child[i].load(std::memory_order_relaxed));
  }
  alloc.RetireNode(in, sizeof(InteriorNode));
}

}  // namespace pmrt::ds_internal

#endif  // PMRT_DS_INTERNAL_TREE_REMOVE_H_
