// Masstree removal: a key leaves its border node's permutation; a border node left empty is
// unlinked from the leaf chain and its parent; a deeper layer left empty is unlinked from the
// layer above. Unlinked nodes and values go to the allocator's Retire* (freed after readers).
//
// Removing an empty border node R locks, in the global lock order, its left sibling L, then R,
// (durable tree: then R's right sibling, whose prev link changes), then the ancestors that
// change, bottom-up (docs/masstree.md, "Removal"). R's key range joins L's: R's parent drops R
// and the separator in front of it, so the slot leading to L covers R's range too, and L->next
// skips R. When R is its parent's first child, the parent's lower bound moves up to its first
// separator, and the ancestor separator that named the old bound moves with it. Interior nodes
// left without children go with R. Removed nodes are marked deleted, so readers and writers
// that reach them start over from above. A layer's leftmost leaf stays until the whole layer is
// empty; then the layer is unlinked from the layer above. Layer 0 keeps its root, and a tree
// never loses height. Node removal is best effort: it gives up quietly (leaving an empty leaf)
// when the situation changed under it, or when the durable tree's undo log is full.
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
template <class P>
bool LockRemovalPath(const P& p, NodeHeader* node, RemovalPath* path) {
  NodeHeader* cur = node;
  for (;;) {
    if (NodeVersion::IsRoot(cur->version.Load()) || path->n == 2 * kMaxLevels) {
      path->UnlockAll();
      return false;
    }
    InteriorNode* parent = LockParent(p, cur);
    path->locked[path->n++] = parent;
    const int i = ChildPosition(p, parent, cur);
    if (parent->size() == 0) {  // cur is the parent's only child: the parent goes too
      cur = HeaderOf(parent);
      continue;
    }
    path->dead = path->n - 1;
    path->top = parent;
    path->top_index = i;
    if (i > 0) return true;
    break;
  }
  for (cur = HeaderOf(path->top);;) {
    if (NodeVersion::IsRoot(cur->version.Load()) || path->n == 2 * kMaxLevels) {
      path->UnlockAll();
      return false;
    }
    InteriorNode* g = LockParent(p, cur);
    path->locked[path->n++] = g;
    const int j = ChildPosition(p, g, cur);
    if (j > 0) {
      path->redirect = g;
      path->redirect_index = j - 1;
      return true;
    }
    cur = HeaderOf(g);
  }
}

// Removes separator `key_index` and child `child_index` from the locked, dirty node `in`.
inline void RemoveFromInterior(InteriorNode* in, int key_index, int child_index) {
  const int n = in->size();
  for (int j = key_index; j + 1 < n; ++j) {
    in->ikey[j].store(in->ikey[j + 1].load(std::memory_order_relaxed), std::memory_order_relaxed);
  }
  // Children shift left one at a time, so a racing reader (FindLeaf, acquire loads) finds a
  // live node or a duplicate in every slot.
  for (int j = child_index; j < n; ++j) {
    in->child[j].word().store(in->child[j + 1].raw(std::memory_order_relaxed),
                              std::memory_order_release);
  }
  in->child[n].word().store(0, std::memory_order_release);  // no slot keeps naming the child
  in->nkeys.store(static_cast<uint32_t>(n - 1), std::memory_order_relaxed);
}

// Durable tree: logs what unlinking r changes (l, r's right sibling, top, redirect).
template <class A, class P>
bool LogUnlink(Writer<A, P>& w, LeafNode* l, LeafNode* next, const RemovalPath& path) {
  const P& p = w.p();
  return p.LogLeaf(l, w.epoch) && (next == nullptr || p.LogLeaf(next, w.epoch)) &&
         p.LogInterior(path.top, w.epoch) &&
         (path.top_index > 0 || p.LogInterior(path.redirect, w.epoch));
}

// Unlinks the empty border node `r` (unlocked on entry and exit) from the leaf chain and from
// its parent; gives up quietly when the situation changed (r refilled, siblings moved) or the
// durable tree's undo log is full. A layer's leftmost leaf is never unlinked here (RemoveLayer
// takes whole layers).
template <class A, class P>
void UnlinkLeaf(Writer<A, P>& w, LeafNode* r) {
  const P& p = w.p();
  for (int attempt = 0; attempt < 8; ++attempt) {
    // r->prev is protected by the left sibling's lock: once l is locked and still r's prev, it
    // stays so. (Reading it unlocked is safe: l was linked when read, so not yet freed.)
    LeafNode* l = r->prev.Load(p, std::memory_order_acquire);
    if (l == nullptr) return;
    p.Ready(HeaderOf(l));
    l->version().Lock();
    if (NodeVersion::IsDeleted(l->version().Load()) ||
        r->prev.Load(p, std::memory_order_relaxed) != l) {
      l->version().Unlock();
      continue;
    }
    r->version().Lock();
    const uint64_t rv = r->version().Load();
    LeafNode* next = nullptr;
    if constexpr (P::kDurable) {
      // next's prev link changes: locked (left to right) so its log copy is consistent.
      next = r->next.Load(p, std::memory_order_relaxed);
      if (next != nullptr) {
        p.Ready(HeaderOf(next));
        next->version().Lock();
      }
    }
    RemovalPath path;
    if (NodeVersion::IsDeleted(rv) || NodeVersion::IsRoot(rv) || r->perm().size() != 0 ||
        !LockRemovalPath(p, HeaderOf(r), &path)) {
      if (next != nullptr) next->version().Unlock();
      r->version().Unlock();
      l->version().Unlock();
      return;
    }
    if (!LogUnlink(w, l, next, path)) {
      path.UnlockAll();
      if (next != nullptr) next->version().Unlock();
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
    LeafNode* after = r->next.Load(p, std::memory_order_relaxed);
    if (after != nullptr) after->prev.Store(p, l, std::memory_order_release);
    l->next.Store(p, after, std::memory_order_release);
    path.UnlockAll();
    if (next != nullptr) next->version().Unlock();
    r->version().Unlock();
    l->version().Unlock();
    w.alloc.RetireNode(r, sizeof(LeafNode));
    for (int i = 0; i < path.dead; ++i) w.alloc.RetireNode(path.locked[i], sizeof(InteriorNode));
    return;
  }
}

// `sub`, the leftmost border node of the layer below the slot for `k` (positioned at the upper
// layer) in the layer entered at `entry`, was found empty and alone: unlinks the layer (sub and
// the single-child interior nodes above it). Returns the upper border node when that became
// empty in turn (unlocked), else nullptr.
template <class A, class P>
LeafNode* RemoveLayer(Writer<A, P>& w, NodeHeader* entry, const KeyCursor& k, LeafNode* sub) {
  const P& p = w.p();
  LeafNode* up = LockLeaf(p, entry, k.slice());  // upper layer before lower layer
  if (up == nullptr) return nullptr;
  LeafPermuter perm = up->perm();
  bool found;
  const int pos = up->LowerBound(k.pos(), perm, &found);
  if (!found || up->keylenx[perm[pos]].load(std::memory_order_relaxed) != kKeyLenLayer ||
      up->lv[perm[pos]].load(std::memory_order_relaxed) != EncodeLink(p, HeaderOf(sub))) {
    up->version().Unlock();
    return nullptr;
  }
  sub->version().Lock();
  InteriorNode* chain[kMaxLevels];
  int n = 0;
  bool ok = !NodeVersion::IsDeleted(sub->version().Load()) && sub->perm().size() == 0 &&
            sub->next.raw(std::memory_order_relaxed) == 0;
  // Interior nodes above the layer's only leaf each have that one child (child, then parent).
  for (NodeHeader* cur = HeaderOf(sub); ok && !NodeVersion::IsRoot(cur->version.Load());) {
    InteriorNode* parent = LockParent(p, cur);
    chain[n++] = parent;
    ok = parent->size() == 0 && n < kMaxLevels;
    cur = HeaderOf(parent);
  }
  // Only the upper leaf's permutation changes (the slot leaves it, as a removal); the layer's
  // nodes are only marked deleted (their version words) and freed with the epoch.
  ok = ok && p.PrepareLeafWrite(up, w.epoch, -1);
  if (ok) {
    sub->version().MarkDeleted();  // readers and writers that reach it start over from the top
    for (int i = 0; i < n; ++i) chain[i]->version().MarkDeleted();
    up->version().MarkInserting();
    perm.RemoveAt(pos);
    p.PublishPerm(up, perm.value(), w.epoch, /*removal=*/true);
  }
  for (int i = n - 1; i >= 0; --i) chain[i]->version().Unlock();
  sub->version().Unlock();
  up->version().Unlock();
  if (!ok) return nullptr;
  w.alloc.RetireNode(sub, sizeof(LeafNode));
  for (int i = 0; i < n; ++i) w.alloc.RetireNode(chain[i], sizeof(InteriorNode));
  return perm.size() == 0 ? up : nullptr;
}

// Collects what `leaf` (found empty after a removal in the layer entered at entries.back(),
// with k positioned at that layer) leaves behind: the leaf itself, and layers that become empty,
// upwards.
template <class A, class P>
void CollectEmpty(Writer<A, P>& w, std::vector<NodeHeader*>& entries, KeyCursor k, LeafNode* leaf) {
  const P& p = w.p();
  while (leaf != nullptr) {
    LeafNode* prev = leaf->prev.Load(p, std::memory_order_acquire);
    if (prev != nullptr) {
      UnlinkLeaf(w, leaf);
      // The layer may now be its leftmost leaf alone, and empty.
      p.Ready(HeaderOf(prev));
      if (prev->prev.raw(std::memory_order_acquire) != 0 ||
          prev->next.raw(std::memory_order_acquire) != 0 || prev->perm().size() != 0) {
        return;
      }
      leaf = prev;
      continue;
    }
    if (entries.size() < 2 || leaf->next.raw(std::memory_order_acquire) != 0) return;
    entries.pop_back();
    k.Ascend();
    leaf = RemoveLayer(w, entries.back(), k, leaf);
  }
}

// Removes `key`: kRemoved, kAbsent, or kNoLog (durable: the undo log is full; nothing changed).
template <class A, class P>
WriteOutcome RemoveKey(Writer<A, P>& w, std::string_view key) {
  const P& p = w.p();
  KeyCursor k(key);
  std::vector<NodeHeader*> entries;  // entry of each layer walked, for collecting empty layers
  entries.push_back(w.tree.Root());
  for (;;) {
    LeafNode* leaf = LockLeaf(p, entries.back(), k.slice());
    if (leaf == nullptr) {  // the layer was removed: start over from the top
      k.Reset();
      entries.assign(1, w.tree.Root());
      continue;
    }
    LeafPermuter perm = leaf->perm();
    bool found;
    const int pos = leaf->LowerBound(k.pos(), perm, &found);
    if (!found) {
      leaf->version().Unlock();
      return WriteOutcome::kAbsent;
    }
    const int slot = perm[pos];
    const uint8_t kx = leaf->keylenx[slot].load(std::memory_order_relaxed);
    const uint64_t bits = leaf->lv[slot].load(std::memory_order_relaxed);
    if (kx == kKeyLenLayer) {
      leaf->version().Unlock();
      entries.push_back(DecodeLink<NodeHeader>(p, bits));
      k.Descend();
      continue;
    }
    ValueObject* old = ValueRef::FromBits(bits).get(p);
    if (kx == kKeyLenSuffix && old->suffix() != k.suffix()) {
      leaf->version().Unlock();
      return WriteOutcome::kAbsent;
    }
    if (!p.PrepareLeafWrite(leaf, w.epoch, -1)) {
      leaf->version().Unlock();
      return WriteOutcome::kNoLog;
    }
    // The slot may be reused by a later insert while a reader still holds the old permutation,
    // so removal changes the version (kInserting): such readers retry.
    leaf->version().MarkInserting();
    perm.RemoveAt(pos);
    p.PublishPerm(leaf, perm.value(), w.epoch, /*removal=*/true);
    leaf->version().Unlock();
    w.alloc.RetireValue(old, ValueBytes(w.p(), old));
    w.tree.size.Add(-1);
    if (perm.size() == 0) CollectEmpty(w, entries, k, leaf);
    return WriteOutcome::kRemoved;
  }
}

// Retires the subtree rooted at `n` with every value and deeper layer in it (the transient
// tree's destructor). REQUIRES: no other thread uses the tree.
template <class A, class P>
void DestroyNode(Writer<A, P>& w, NodeHeader* n) {
  const P& p = w.p();
  p.Ready(n);
  if (NodeVersion::IsLeaf(n->version.Load())) {
    LeafNode* leaf = AsLeaf(n);
    const LeafPermuter perm = leaf->perm();
    for (int i = 0; i < perm.size(); ++i) {
      const uint64_t bits = leaf->lv[perm[i]].load(std::memory_order_relaxed);
      if (leaf->keylenx[perm[i]].load(std::memory_order_relaxed) == kKeyLenLayer) {
        NodeHeader* sub = DecodeLink<NodeHeader>(p, bits);
        p.Ready(sub);
        while (!NodeVersion::IsRoot(sub->version.Load())) {
          sub = HeaderOf(ParentOf(p, sub));
          p.Ready(sub);
        }
        DestroyNode(w, sub);
      } else {
        ValueObject* v = ValueRef::FromBits(bits).get(p);
        w.alloc.RetireValue(v, ValueBytes(w.p(), v));
      }
    }
    w.alloc.RetireNode(leaf, sizeof(LeafNode));
    return;
  }
  InteriorNode* in = AsInterior(n);
  for (int i = 0; i <= in->size(); ++i) {
    DestroyNode(w, in->child[i].Load(p, std::memory_order_relaxed));
  }
  w.alloc.RetireNode(in, sizeof(InteriorNode));
}

}  // namespace pmrt::ds_internal

#endif  // PMRT_DS_INTERNAL_TREE_REMOVE_H_
