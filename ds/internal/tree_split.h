// Splits: a full border node takes a new key by splitting, and the new right sibling is linked
// into the parent, splitting interior nodes (and growing a new root) as far up as needed.
//
// Protocol (docs/masstree.md, "Splits"):
//   1. With the leaf locked (durable tree: and its right sibling, whose prev link changes),
//      lock every ancestor that will change, child before parent: the parent always (it gains a
//      child), its parent too when it is full, and so on. A full root means a new root.
//   2. Allocate the new leaf, one interior node per full ancestor, and the new root; the durable
//      policy copies every existing node that will change to the external log (LogSplit). On
//      failure release everything: nothing has changed.
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

// An interior split keeps keys [0, kInteriorKeep) and children [0, kInteriorKeep] of the
// combined n+1 keys and n+2 children; key kInteriorKeep goes up.
inline constexpr int kInteriorKeep = (kInteriorWidth + 1) / 2;

// The index of `child` in `parent`. REQUIRES: parent locked, child one of its children.
template <class P>
int ChildPosition(const P& p, InteriorNode* parent, NodeHeader* child) {
  const int n = parent->size();
  for (int i = 0; i <= n; ++i) {
    if (parent->child[i].Load(p, std::memory_order_relaxed) == child) return i;
  }
  std::abort();  // the parent link and the child array disagree: the tree is corrupt
}

// Step 3. Splits the locked, full `leaf`, putting the new key (slice, kx, bits) at sorted
// position `pos` on whichever side it belongs. Returns the new right sibling (locked).
// REQUIRES (durable): leaf and its right sibling logged in w.epoch.
template <class A, class P>
LeafNode* SplitLeaf(Writer<A, P>& w, LeafNode* leaf, void* mem, int pos, uint64_t slice, uint8_t kx,
                    uint64_t bits) {
  const P& p = w.p();
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
  // sibling until this store; the durable tree holds next's lock too). The release store of
  // leaf->next publishes the initialized right node to readers moving right (they load next
  // with acquire).
  LeafNode* next = leaf->next.Load(p, std::memory_order_relaxed);
  right->next.Store(p, next, std::memory_order_relaxed);
  right->prev.Store(p, leaf, std::memory_order_relaxed);
  p.InitLeaf(right, w.epoch);
  if (next != nullptr) next->prev.Store(p, right, std::memory_order_release);
  leaf->next.Store(p, right, std::memory_order_release);
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
template <class P>
void InsertChild(const P& p, InteriorNode* in, int i, uint64_t sep, NodeHeader* right) {
  const int n = in->size();
  in->version().MarkInserting();
  for (int j = n; j > i; --j) {
    in->ikey[j].store(in->ikey[j - 1].load(std::memory_order_relaxed), std::memory_order_relaxed);
  }
  // Children shift right one at a time, so a racing reader finds live nodes (or a duplicate) in
  // every slot; release publishes `right` to readers descending with acquire.
  for (int j = n + 1; j > i + 1; --j) {
    in->child[j].word().store(in->child[j - 1].raw(std::memory_order_relaxed),
                              std::memory_order_release);
  }
  in->ikey[i].store(sep, std::memory_order_relaxed);
  in->child[i + 1].Store(p, right, std::memory_order_release);
  in->nkeys.store(static_cast<uint32_t>(n + 1), std::memory_order_relaxed);
  SetParent(p, right, in);
}

// The combined children of a full `in` with `right` inserted after child index `i`.
template <class P>
void CombinedChildren(const P& p, InteriorNode* in, int i, NodeHeader* right, NodeHeader** kids) {
  for (int j = 0, from = 0; j <= kInteriorWidth + 1; ++j) {
    kids[j] = j == i + 1 ? right : in->child[from++].Load(p, std::memory_order_relaxed);
  }
}

// Step 4, parent full: splits `in` into in and `in2` (new, locked) with (sep, right) inserted
// after child index `i`. Returns the separator that goes up.
template <class P>
uint64_t SplitInterior(const P& p, InteriorNode* in, InteriorNode* in2, int i, uint64_t sep,
                       NodeHeader* right) {
  constexpr int n = kInteriorWidth;
  constexpr int m = kInteriorKeep;  // in keeps keys [0, m) and children [0, m]; key m goes up
  uint64_t keys[n + 1];
  NodeHeader* kids[n + 2];
  for (int j = 0, from = 0; j <= n; ++j) {
    keys[j] = j == i ? sep : in->ikey[from++].load(std::memory_order_relaxed);
  }
  CombinedChildren(p, in, i, right, kids);
  in->version().MarkSplitting();
  for (int j = m + 1; j <= n; ++j) in2->ikey[j - m - 1].store(keys[j], std::memory_order_relaxed);
  for (int j = m + 1; j <= n + 1; ++j) {
    in2->child[j - m - 1].Store(p, kids[j], std::memory_order_relaxed);
    SetParent(p, kids[j], in2);  // protected by in's lock, which we hold (logged: LogSplit)
  }
  in2->nkeys.store(n - m, std::memory_order_relaxed);
  for (int j = 0; j < m; ++j) in->ikey[j].store(keys[j], std::memory_order_relaxed);
  for (int j = 0; j <= n; ++j) {
    // Slots past the kept children are cleared: a slot never names a node that left `in`, so a
    // racing reader never reaches a node that could be freed before its Guard ends.
    in->child[j].Store(p, j <= m ? kids[j] : nullptr, std::memory_order_release);
  }
  in->nkeys.store(m, std::memory_order_relaxed);
  if (i + 1 <= m) SetParent(p, right, in);
  return keys[m];
}

// Step 4 at the top: `left` was its layer's root; a new root takes both halves.
template <class A, class P>
void GrowRoot(Writer<A, P>& w, void* mem, NodeHeader* left, uint64_t sep, NodeHeader* right) {
  const P& p = w.p();
  InteriorNode* root = InteriorNode::Init(mem, /*root=*/true, /*locked=*/true);
  p.InitInterior(root, w.epoch);
  root->ikey[0].store(sep, std::memory_order_relaxed);
  root->child[0].Store(p, left, std::memory_order_relaxed);
  root->child[1].Store(p, right, std::memory_order_relaxed);
  root->nkeys.store(1, std::memory_order_relaxed);
  // Release publishes the new root to readers that climb from `left` (ParentOf: acquire).
  SetParent(p, left, root);
  SetParent(p, right, root);
  left->version.SetRoot(false);  // left is locked and kSplitting: readers wait, then climb
  // Layer 0 is entered through the tree's root word; deeper layers through their leftmost
  // leaf, which readers climb from. The root word changes only under the lock of the root it
  // names.
  if (w.tree.Root() == left) w.tree.SetRoot(HeaderOf(root));
  right->version.Unlock();
  left->version.Unlock();
  root->version().Unlock();
}

template <class A, class P>
void ReleasePlan(Writer<A, P>& w, SplitPlan& plan) {
  if (plan.leaf_mem != nullptr) w.alloc.RetireNode(plan.leaf_mem, sizeof(LeafNode));
  for (int i = 0; i < plan.interiors; ++i) {
    if (plan.interior_mem[i] != nullptr) {
      w.alloc.RetireNode(plan.interior_mem[i], sizeof(InteriorNode));
    }
  }
  for (int i = plan.locked - 1; i >= 0; --i) plan.ancestors[i]->version().Unlock();
}

// Steps 1-2 (locks and allocations). False when out of memory (every lock but leaf's
// released, nothing changed).
template <class A, class P>
bool PlanSplit(Writer<A, P>& w, LeafNode* leaf, SplitPlan& plan) {
  NodeHeader* cur = HeaderOf(leaf);
  for (;;) {
    if (NodeVersion::IsRoot(cur->version.Load())) {
      plan.new_root = true;
      break;
    }
    if (plan.locked == kMaxLevels) std::abort();  // deeper than any real tree can be
    InteriorNode* parent = LockParent(w.p(), cur);
    plan.ancestors[plan.locked++] = parent;
    if (parent->size() < kInteriorWidth) break;
    cur = HeaderOf(parent);
  }
  const int full = plan.new_root ? plan.locked : plan.locked - 1;
  plan.interiors = full + (plan.new_root ? 1 : 0);
  plan.leaf_mem = w.alloc.AllocateNode(sizeof(LeafNode), alignof(LeafNode));
  bool ok = plan.leaf_mem != nullptr;
  for (int i = 0; i < plan.interiors; ++i) {
    plan.interior_mem[i] =
        ok ? w.alloc.AllocateNode(sizeof(InteriorNode), alignof(InteriorNode)) : nullptr;
    ok = ok && plan.interior_mem[i] != nullptr;
  }
  if (!ok) ReleasePlan(w, plan);
  return ok;
}

// Step 2, durable tree: logs every existing node and link the split will change, before any
// change: the leaf and its right sibling (`next`, whose prev link changes), every locked
// ancestor, the parent links of the children that move to a split ancestor's new sibling, the
// old root's parent link and the tree's root word when the root grows. False when the
// external log is full (nothing changed).
template <class A, class P>
bool LogSplit(Writer<A, P>& w, LeafNode* leaf, LeafNode* next, const SplitPlan& plan) {
  const P& p = w.p();
  const uint64_t e = w.epoch;
  if (!p.LogLeaf(leaf, e) || (next != nullptr && !p.LogLeaf(next, e))) return false;
  NodeHeader* left = HeaderOf(leaf);
  for (int level = 0; level < plan.locked; ++level) {
    InteriorNode* in = plan.ancestors[level];
    if (!p.LogInterior(in, e)) return false;
    if (in->size() == kInteriorWidth) {
      // Old children whose place in the combined array (with the new node after `left`) is
      // past kInteriorKeep move to the new sibling: their parent links change.
      const int i = ChildPosition(p, in, left);
      for (int k = 0; k <= kInteriorWidth; ++k) {
        const int combined = k <= i ? k : k + 1;
        if (combined > kInteriorKeep &&
            !p.LogParent(in->child[k].Load(p, std::memory_order_relaxed), e)) {
          return false;
        }
      }
    }
    left = HeaderOf(in);
  }
  if (plan.new_root) {
    if (!p.LogParent(left, e)) return false;
    if (w.tree.Root() == left && !p.LogRoot(e)) return false;
  }
  return true;
}

// Inserts (slice, kx, bits) at sorted position `pos` of the locked, full `leaf` by splitting.
// kInserted: every lock is released (leaf's too). kNoMemory / kNoLog: leaf still locked and
// nothing changed.
template <class A, class P>
WriteOutcome SplitLeafAndInsert(Writer<A, P>& w, LeafNode* leaf, int pos, uint64_t slice,
                                uint8_t kx, uint64_t bits) {
  const P& p = w.p();
  LeafNode* next = nullptr;
  if constexpr (P::kDurable) {
    // The right sibling's prev link changes: the durable tree locks it (left to right, before
    // any interior node: the lock order) so that its external-log copy is consistent.
    next = leaf->next.Load(p, std::memory_order_acquire);
    if (next != nullptr) {
      p.Ready(HeaderOf(next));
      next->version().Lock();
    }
  }
  SplitPlan plan;
  if (!PlanSplit(w, leaf, plan)) {
    if (next != nullptr) next->version().Unlock();
    return WriteOutcome::kNoMemory;
  }
  if (!LogSplit(w, leaf, next, plan)) {
    ReleasePlan(w, plan);
    if (next != nullptr) next->version().Unlock();
    return WriteOutcome::kNoLog;
  }
  NodeHeader* left = HeaderOf(leaf);
  LeafNode* new_leaf = SplitLeaf(w, leaf, plan.leaf_mem, pos, slice, kx, bits);
  if (next != nullptr) next->version().Unlock();
  NodeHeader* right = HeaderOf(new_leaf);
  uint64_t sep = new_leaf->low_bound.load(std::memory_order_relaxed);
  int next_mem = 0;
  for (int level = 0;; ++level) {
    if (level == plan.locked) {  // left is the root (leaf or full interior)
      GrowRoot(w, plan.interior_mem[next_mem], left, sep, right);
      return WriteOutcome::kInserted;
    }
    InteriorNode* in = plan.ancestors[level];
    const int i = ChildPosition(p, in, left);
    if (in->size() < kInteriorWidth) {
      InsertChild(p, in, i, sep, right);
      right->version.Unlock();
      left->version.Unlock();
      in->version().Unlock();
      return WriteOutcome::kInserted;
    }
    InteriorNode* in2 =
        InteriorNode::Init(plan.interior_mem[next_mem++], /*root=*/false, /*locked=*/true);
    p.InitInterior(in2, w.epoch);
    sep = SplitInterior(p, in, in2, i, sep, right);
    right->version.Unlock();
    left->version.Unlock();
    left = HeaderOf(in);
    right = HeaderOf(in2);
  }
}

}  // namespace pmrt::ds_internal

#endif  // PMRT_DS_INTERNAL_TREE_SPLIT_H_
