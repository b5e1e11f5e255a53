// Masstree writes that add or replace keys: put and insert-if-absent, and new layers when two
// keys share a slice. Templated on the NodeAllocator (ds/node_allocator.h); the descent and
// locking they use are in tree_find.h, splits of full nodes in tree_split.h.
//
// Locking: a writer locks one border node (LockLeaf) and changes it in place; only a split
// locks more (tree_split.h). Every allocation happens before the first change, so an
// allocation failure leaves the tree unchanged.
//
// REQUIRES for everything here: the caller is inside the allocator's Guard.
#ifndef PMRT_DS_INTERNAL_TREE_INSERT_H_
#define PMRT_DS_INTERNAL_TREE_INSERT_H_

#include <cstdint>
#include <string_view>

#include "ds/internal/key_slice.h"
#include "ds/internal/node_layout.h"
#include "ds/internal/tree_core.h"
#include "ds/internal/tree_find.h"
#include "ds/internal/tree_split.h"
#include "ds/internal/value_ref.h"

namespace pmrt::ds_internal {

enum class PutMode { kUpsert, kInsertIfAbsent };
enum class WriteOutcome { kInserted, kUpdated, kExists, kNoMemory };

// A new value object for a key whose bytes after its slice are `suffix`; nullptr when out of
// memory.
template <class A>
ValueObject* NewValue(A& alloc, std::string_view suffix, std::string_view value) {
  void* mem = alloc.AllocateValue(ValueObject::SizeFor(suffix.size(), value.size()));
  return mem == nullptr ? nullptr : ValueObject::Init(mem, suffix, value);
}

// Slot `slot` of the locked `leaf` holds a key that continues past its slice (value `old`), and
// a different key with the same slice is being inserted: moves the stored key into a new layer
// and links the layer from the slot. Returns the layer's root, or nullptr when out of memory
// (nothing changed). The caller retires `old` after unlocking.
template <class A>
NodeHeader* MakeLayer(A& alloc, LeafNode* leaf, int slot, const ValueObject* old) {
  KeyCursor rest(old->suffix());  // at least one byte: the key continued past the slice
  void* mem = alloc.AllocateNode(sizeof(LeafNode), alignof(LeafNode));
  if (mem == nullptr) return nullptr;
  ValueObject* moved =
      NewValue(alloc, rest.cls() == kClassSuffix ? rest.suffix() : "", old->value());
  if (moved == nullptr) {
    alloc.RetireNode(mem, sizeof(LeafNode));  // never published
    return nullptr;
  }
  LeafNode* sub = LeafNode::Init(mem, /*root=*/true, /*locked=*/false, /*low=*/0);
  LeafPermuter perm;
  sub->WriteSlot(perm.InsertAt(0), rest.slice(), rest.cls(), ValueRef::FromObject(moved).bits());
  sub->permutation.store(perm.value(), std::memory_order_relaxed);
  // The slot changes meaning (value -> layer) in place: readers overlapping it must retry.
  leaf->version().MarkInserting();
  leaf->keylenx[slot].store(kKeyLenLayer, std::memory_order_relaxed);
  // Release publishes the initialized layer; pairs with the acquire loads of lv in readers.
  leaf->lv[slot].store(reinterpret_cast<uint64_t>(HeaderOf(sub)), std::memory_order_release);
  return HeaderOf(sub);
}

// Adds (slice, kx, lv_bits) at sorted position `pos` of the locked, not full `leaf`.
inline void InsertIntoLeaf(LeafNode* leaf, int pos, uint64_t slice, uint8_t kx, uint64_t bits) {
  LeafPermuter perm = leaf->perm();
  const int slot = perm.InsertAt(pos);
  // The slot is free, so no reader looks at it: plain relaxed stores, then the permutation's
  // release store publishes them (pairs with LeafNode::perm()'s acquire). Readers need no
  // version change: they see the old permutation (no new key) or the new one (complete slot).
  leaf->WriteSlot(slot, slice, kx, bits);
  leaf->permutation.store(perm.value(), std::memory_order_release);
}

// Inserts or updates `key`. See BasicMasstree::put for the contract.
template <class A>
WriteOutcome PutKey(TreeCore& tree, A& alloc, std::string_view key, std::string_view value,
                    PutMode mode) {
  KeyCursor k(key);
  NodeHeader* entry = tree.root.load(std::memory_order_acquire);
  for (;;) {
    LeafNode* leaf = LockLeaf(entry, k.slice());
    if (leaf == nullptr) {  // the layer was removed: start over from the top
      k.Reset();
      entry = tree.root.load(std::memory_order_acquire);
      continue;
    }
    const LeafPermuter perm = leaf->perm();
    bool found;
    const int pos = leaf->LowerBound(k.pos(), perm, &found);
    if (!found) {
      const bool long_key = k.cls() == kClassSuffix;
      ValueObject* nv = NewValue(alloc, long_key ? k.suffix() : "", value);
      const uint64_t bits = ValueRef::FromObject(nv).bits();
      if (nv != nullptr && perm.size() < kLeafWidth) {
        InsertIntoLeaf(leaf, pos, k.slice(), k.cls(), bits);
        leaf->version().Unlock();
      } else if (nv == nullptr ||
                 !SplitLeafAndInsert(tree, alloc, leaf, pos, k.slice(), k.cls(), bits)) {
        leaf->version().Unlock();
        if (nv != nullptr) alloc.RetireValue(nv, nv->size());  // never published
        return WriteOutcome::kNoMemory;
      }  // else the split released every lock it held, leaf's included
      tree.size.Add(1);
      return WriteOutcome::kInserted;
    }
    const int slot = perm[pos];
    const uint8_t kx = leaf->keylenx[slot].load(std::memory_order_relaxed);
    const uint64_t bits = leaf->lv[slot].load(std::memory_order_relaxed);
    if (kx == kKeyLenLayer) {
      leaf->version().Unlock();
      entry = reinterpret_cast<NodeHeader*>(bits);
      k.Descend();
      continue;
    }
    ValueObject* old = ValueRef::FromBits(bits).get();
    if (kx == kKeyLenSuffix && old->suffix() != k.suffix()) {
      NodeHeader* sub = MakeLayer(alloc, leaf, slot, old);
      leaf->version().Unlock();
      if (sub == nullptr) return WriteOutcome::kNoMemory;
      alloc.RetireValue(old, old->size());
      entry = sub;
      k.Descend();
      continue;
    }
    if (mode == PutMode::kInsertIfAbsent) {
      leaf->version().Unlock();
      return WriteOutcome::kExists;
    }
    ValueObject* nv = NewValue(alloc, kx == kKeyLenSuffix ? k.suffix() : "", value);
    if (nv == nullptr) {
      leaf->version().Unlock();
      return WriteOutcome::kNoMemory;
    }
    // One 8-byte store replaces the value; the key does not move, so readers need no version
    // change: they get the old object or the new one (release pairs with their acquire load).
    leaf->lv[slot].store(ValueRef::FromObject(nv).bits(), std::memory_order_release);
    leaf->version().Unlock();
    alloc.RetireValue(old, old->size());
    return WriteOutcome::kUpdated;
  }
}

}  // namespace pmrt::ds_internal

#endif  // PMRT_DS_INTERNAL_TREE_INSERT_H_
