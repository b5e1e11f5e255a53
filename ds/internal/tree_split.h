// Splits: a full border node takes a new key by splitting, and the new right sibling is linked
// into the parent, splitting interior nodes (and growing a new root) as far up as needed.
//
// Protocol (docs/masstree.md, "Splits"):
//   1. With the leaf locked, lock every ancestor that will change, child before parent: the
//      parent always (it gains a child), its parent too when it is full, and so on. A full root
//      means a new root.
//   2. Allocate the new leaf, one interior node per full ancestor, and the new root. On failure
//      release everything: nothing has changed.
//   3. Split the leaf (kSplitting): the upper half moves to the new leaf, which is linked into
//      the leaf chain while still locked.
//   4. Going up, insert (separator, new node) into the parent (kInserting), or split the full
//      parent (kSplitting) and carry its middle separator up. A node's lock, and so its dirty
//      bit, is released only after its parent has been changed: a reader that sees the split
//      node's new version finds the parent changed too.
//
// REQUIRES for everything here: the caller is inside the allocator's Guard.
#ifndef PMRT_DS_INTERNAL_TREE_SPLIT_H_
#define PMRT_DS_INTERNAL_TREE_SPLIT_H_

#include <cstdint>
#include <cstdlib>

#include "ds/internal/key_slice.h"
#include "ds/internal/node_layout.h"
#include "ds/internal/tree_core.h"
#include "ds/internal/tree_find.h"

namespace pmrt::ds_internal {

// Levels of one layer: 15-way interior nodes make 2^64 keys fit in far fewer.
inline constexpr int kMaxLevels = 24;

// What a split needs, gathered before anything is modified.
struct SplitPlan {
  InteriorNode* ancestors[kMaxLevels];  // locked, bottom-up; all but the last are full
  int locked = 0;                       // number of locked ancestors
  bool new_root = false;                // the topmost node to split is its layer's root
  void* leaf_mem = nullptr;
  void* interior_mem[kMaxLevels + 1];  // one per full ancestor, then the new root
  int interiors = 0;
};

// Where the split leaf's entries go. `pos` is the new key's sorted position among the 15.
// Returns m: entries [0, m) stay, [m, 15) move. Keys with one slice stay together (interior
// nodes route by slice alone); at most 10 keys share a slice, so a boundary always exists.
inline int ChooseLeafSplit(const KeyPos* c, int pos) {
  constexpr int n = kLeafWidth + 1;
  // Appending past the last key (sequential inserts): the new leaf starts with the new key
  // alone, so ascending loads leave full leaves behind.
  if (pos == n - 1 && c[n - 2].slice != c[n - 1].slice) return n - 1;
  for (int d = 0; d < n; ++d) {
    for (int m : {(n + 1) / 2 + d, (n + 1) / 2 - d - 1}) {
      if (m >= 1 && m < n && c[m - 1].slice != c[m].slice) return m;
    }
  }
  std::abort();  // unreachable: more than 10 keys with one slice
}

// The index of `child` in `parent`. REQUIRES: parent locked, child one of its children.
inline int ChildPosition(InteriorNode* parent, NodeHeader* child) {
  const int n = parent->size();
  for (int i = 0; i <= n; ++i) {
    if (parent->child[i].load(std::memory_order_relaxed) == child) return i;
  }
  std::abort();  // the parent link and the child array disagree: the tree is corrupt
}

// Step 3. Splits the locked, full `leaf`, putting the new key (slice, kx, bits) at sorted
// position `pos` on whichever side it belongs. Returns the new right sibling (locked).
inline LeafNode* SplitLeaf(LeafNode* leaf, void* mem, int pos, uint64_t slice, uint8_t kx,
                           uint64_t bits) {
  constexpr int n = kLeafWidth + 1;
  LeafPermuter perm = leaf->perm();
  KeyPos c[n];
  for (int i = 0; i < n; ++i) {
    c[i] = i == pos ? KeyPos{slice, ClassOf(kx)} : leaf->PosAt(perm[i < pos ? i : i - 1]);
  }
  const int m = ChooseLeafSplit(c, pos);
  leaf->version().MarkSplitting();
  LeafNode* right = LeafNode::Init(mem, /*root=*/false, /*locked=*/true, c[m].slice);
  for (int i = m; i < n; ++i) {
    if (i == pos) {
      right->WriteSlot(i - m, slice, kx, bits);
      continue;
    }
    const int s = perm[i < pos ? i : i - 1];
    right->WriteSlot(i - m, leaf->ikey[s].load(std::memory_order_relaxed),
                     leaf->keylenx[s].load(std::memory_order_relaxed),
                     leaf->lv[s].load(std::memory_order_relaxed));
  }
  right->permutation.store(LeafPermuter::Identity(n - m).value(), std::memory_order_relaxed);
  // Link into the leaf chain. next->prev is protected by leaf's lock (leaf is next's left
  // sibling until this store). The release store of leaf->next publishes the initialized right
  // node to readers moving right (they load next with acquire).
  LeafNode* next = leaf->next.load(std::memory_order_relaxed);
  right->next.store(next, std::memory_order_relaxed);
  right->prev.store(leaf, std::memory_order_relaxed);
  if (next != nullptr) next->prev.store(right, std::memory_order_release);
  leaf->next.store(right, std::memory_order_release);
  // Keep the lower part. The slots that moved become free; the new key, when it stays, reuses
  // the first of them (readers are kept out by kSplitting).
  if (pos < m) {
    perm.Truncate(m - 1);
    leaf->WriteSlot(perm.InsertAt(pos), slice, kx, bits);
  } else {
    perm.Truncate(m);
  }
  leaf->permutation.store(perm.value(), std::memory_order_release);
  return right;
}

// Step 4, parent not full: inserts (sep, right) just after child index `i`.
inline void InsertChild(InteriorNode* p, int i, uint64_t sep, NodeHeader* right) {
  const int n = p->size();
  p->version().MarkInserting();
  for (int j = n; j > i; --j) {
    p->ikey[j].store(p->ikey[j - 1].load(std::memory_order_relaxed), std::memory_order_relaxed);
  }
  // Children shift right one at a time, so a racing reader finds live nodes (or a duplicate) in
  // every slot; release publishes `right` to readers descending with acquire.
  for (int j = n + 1; j > i + 1; --j) {
    p->child[j].store(p->child[j - 1].load(std::memory_order_relaxed), std::memory_order_release);
  }
  p->ikey[i].store(sep, std::memory_order_relaxed);
  p->child[i + 1].store(right, std::memory_order_release);
  p->nkeys.store(static_cast<uint32_t>(n + 1), std::memory_order_relaxed);
  SetParent(right, p);
}

// Step 4, parent full: splits `p` into p and `p2` (new, locked) with (sep, right) inserted after
// child index `i`. Returns the separator that goes up.
inline uint64_t SplitInterior(InteriorNode* p, InteriorNode* p2, int i, uint64_t sep,
                              NodeHeader* right) {
  constexpr int n = kInteriorWidth;
  constexpr int m = (n + 1) / 2;  // p keeps keys [0, m) and children [0, m]; key m goes up
  uint64_t keys[n + 1];
  NodeHeader* kids[n + 2];
  for (int j = 0, from = 0; j <= n; ++j) {
    keys[j] = j == i ? sep : p->ikey[from++].load(std::memory_order_relaxed);
  }
  for (int j = 0, from = 0; j <= n + 1; ++j) {
    kids[j] = j == i + 1 ? right : p->child[from++].load(std::memory_order_relaxed);
  }
  p->version().MarkSplitting();
  for (int j = m + 1; j <= n; ++j) p2->ikey[j - m - 1].store(keys[j], std::memory_order_relaxed);
  for (int j = m + 1; j <= n + 1; ++j) {
    p2->child[j - m - 1].store(kids[j], std::memory_order_relaxed);
    SetParent(kids[j], p2);  // protected by p's lock, which we hold
  }
  p2->nkeys.store(n - m, std::memory_order_relaxed);
  for (int j = 0; j < m; ++j) p->ikey[j].store(keys[j], std::memory_order_relaxed);
  for (int j = 0; j <= n; ++j) {
    // Slots past the kept children are cleared: a slot never names a node that left p, so a
    // racing reader never reaches a node that could be freed before its Guard ends.
    p->child[j].store(j <= m ? kids[j] : nullptr, std::memory_order_release);
  }
  p->nkeys.store(m, std::memory_order_relaxed);
  if (i + 1 <= m) SetParent(right, p);
  return keys[m];
}

// Step 4 at the top: `left` was its layer's root; a new root takes both halves.
inline void GrowRoot(TreeCore& tree, void* mem, NodeHeader* left, uint64_t sep, NodeHeader* right) {
  InteriorNode* root = InteriorNode::Init(mem, /*root=*/true, /*locked=*/true);
  root->ikey[0].store(sep, std::memory_order_relaxed);
  root->child[0].store(left, std::memory_order_relaxed);
  root->child[1].store(right, std::memory_order_relaxed);
  root->nkeys.store(1, std::memory_order_relaxed);
  // Release publishes the new root to readers that climb from `left` (ParentOf: acquire).
  SetParent(left, root);
  SetParent(right, root);
  left->version.SetRoot(false);  // left is locked and kSplitting: readers wait, then climb
  // Layer 0 is entered through tree.root; deeper layers through their leftmost leaf, which
  // readers climb from. tree.root changes only under the lock of the root it names.
  if (tree.root.load(std::memory_order_relaxed) == left) {
    tree.root.store(HeaderOf(root), std::memory_order_release);
  }
  right->version.Unlock();
  left->version.Unlock();
  root->version().Unlock();
}

template <class A>
void ReleasePlan(A& alloc, SplitPlan& plan) {
  if (plan.leaf_mem != nullptr) alloc.RetireNode(plan.leaf_mem, sizeof(LeafNode));
  for (int i = 0; i < plan.interiors; ++i) {
    if (plan.interior_mem[i] != nullptr)
      alloc.RetireNode(plan.interior_mem[i], sizeof(InteriorNode));
  }
  for (int i = plan.locked - 1; i >= 0; --i) plan.ancestors[i]->version().Unlock();
}

// Steps 1-2. False when out of memory (every lock but leaf's released, nothing changed).
template <class A>
bool PlanSplit(A& alloc, LeafNode* leaf, SplitPlan& plan) {
  NodeHeader* cur = HeaderOf(leaf);
  for (;;) {
    if (NodeVersion::IsRoot(cur->version.Load())) {
      plan.new_root = true;
      break;
    }
    if (plan.locked == kMaxLevels) std::abort();  // deeper than any real tree can be
    InteriorNode* parent = LockParent(cur);
    plan.ancestors[plan.locked++] = parent;
    if (parent->size() < kInteriorWidth) break;
    cur = HeaderOf(parent);
  }
  const int full = plan.new_root ? plan.locked : plan.locked - 1;
  plan.interiors = full + (plan.new_root ? 1 : 0);
  plan.leaf_mem = alloc.AllocateNode(sizeof(LeafNode), alignof(LeafNode));
  bool ok = plan.leaf_mem != nullptr;
  for (int i = 0; i < plan.interiors; ++i) {
    plan.interior_mem[i] =
        ok ? alloc.AllocateNode(sizeof(InteriorNode), alignof(InteriorNode)) : nullptr;
    ok = ok && plan.interior_mem[i] != nullptr;
  }
  if (!ok) ReleasePlan(alloc, plan);
  return ok;
}

// Inserts (slice, kx, bits) at sorted position `pos` of the locked, full `leaf` by splitting.
// On success every lock is released (leaf's too) and true returned; false when out of memory,
// with leaf still locked and nothing changed.
template <class A>
bool SplitLeafAndInsert(TreeCore& tree, A& alloc, LeafNode* leaf, int pos, uint64_t slice,
                        uint8_t kx, uint64_t bits) {
  SplitPlan plan;
  if (!PlanSplit(alloc, leaf, plan)) return false;
  NodeHeader* left = HeaderOf(leaf);
  LeafNode* new_leaf = SplitLeaf(leaf, plan.leaf_mem, pos, slice, kx, bits);
  NodeHeader* right = HeaderOf(new_leaf);
  uint64_t sep = new_leaf->low_bound.load(std::memory_order_relaxed);
  int next_mem = 0;
  for (int level = 0;; ++level) {
    if (level == plan.locked) {  // left is the root (leaf or full interior)
      GrowRoot(tree, plan.interior_mem[next_mem], left, sep, right);
      return true;
    }
    InteriorNode* p = plan.ancestors[level];
    const int i = ChildPosition(p, left);
    if (p->size() < kInteriorWidth) {
      InsertChild(p, i, sep, right);
      right->version.Unlock();
      left->version.Unlock();
      p->version().Unlock();
      return true;
    }
    InteriorNode* p2 =
        InteriorNode::Init(plan.interior_mem[next_mem++], /*root=*/false, /*locked=*/true);
    sep = SplitInterior(p, p2, i, sep, right);
    right->version.Unlock();
    left->version.Unlock();
    left = HeaderOf(p);
    right = HeaderOf(p2);
  }
}

}  // namespace pmrt::ds_internal

#endif  // PMRT_DS_INTERNAL_TREE_SPLIT_H_
