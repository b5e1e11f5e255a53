// Masstree writes that add or replace keys: put and insert-if-absent, and new layers when two
// keys share a slice. Templated on the NodeAllocator (ds/node_allocator.h) and the tree policy
// (ds/internal/tree_policy.h); the descent and locking they use are in tree_find.h, splits of
// full nodes in tree_split.h.
//
// Locking: a writer locks one border node (LockLeaf) and changes it in place; only a split
// locks more (tree_split.h). Every allocation, and every external-log copy the durable policy
// needs, happens before the first change, so an allocation failure (or a full undo log) leaves
// the tree unchanged.
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
#include "ds/internal/tree_policy.h"
#include "ds/internal/tree_split.h"
#include "ds/internal/value_ref.h"

namespace pmrt::ds_internal {

enum class PutMode { kUpsert, kInsertIfAbsent };

// A new value object of the tree's form for a key whose bytes after its slice are `suffix`,
// with the checksum `crc` where the form keeps one; nullptr when out of memory.
template <class A, class P>
ValueObject* NewValue(Writer<A, P>& w, std::string_view suffix, std::string_view value,
                      uint32_t crc) {
  const ValueForm form = w.p().value_form();
  void* mem = w.alloc.AllocateValue(ValueObject::SizeFor(form, suffix.size(), value.size()));
  if (mem == nullptr) return nullptr;
  return ValueObject::Init(mem, form, suffix, value, crc);
}
// The same for the whole key `key` (the checksum is computed only where the tree keeps one).
template <class A, class P>
ValueObject* NewValue(Writer<A, P>& w, std::string_view key, std::string_view suffix,
                      std::string_view value) {
  return NewValue(w, suffix, value, w.p().value_checksums() ? ValueChecksum(key, value) : 0);
}

// Slot `slot` of the locked `leaf` holds a key that continues past its slice (value `old`), and
// a different key with the same slice is being inserted: moves the stored key into a new layer
// and links the layer from the slot. Returns kInserted with *sub set to the layer's root, or
// kNoMemory / kNoLog (nothing changed). The caller retires `old` after unlocking.
template <class A, class P>
WriteOutcome MakeLayer(Writer<A, P>& w, LeafNode* leaf, int slot, const ValueObject* old,
                       NodeHeader** sub_out) {
  const P& p = w.p();
  KeyCursor rest(old->suffix());  // at least one byte: the key continued past the slice
  void* mem = w.alloc.AllocateNode(sizeof(LeafNode), alignof(LeafNode));
  if (mem == nullptr) return WriteOutcome::kNoMemory;
  // The full key is unchanged, so is the checksum: the old one is copied.
  ValueObject* moved = NewValue(w, rest.cls() == kClassSuffix ? rest.suffix() : "", old->value(),
                                p.value_checksums() ? old->checksum() : 0);
  if (moved == nullptr || !p.LogLeaf(leaf, w.epoch)) {  // the slot changes meaning: a copy
    w.alloc.RetireNode(mem, sizeof(LeafNode));          // never published
    if (moved == nullptr) return WriteOutcome::kNoMemory;
    w.alloc.RetireValue(moved, ValueBytes(p, moved));
    return WriteOutcome::kNoLog;
  }
  LeafNode* sub = LeafNode::Init(mem, /*root=*/true, /*locked=*/false, /*low=*/0);
  LeafPermuter perm;
  sub->WriteSlot(perm.InsertAt(0), rest.slice(), rest.cls(), ValueRef::FromObject(p, moved).bits());
  sub->permutation.store(perm.value(), std::memory_order_relaxed);
  p.InitLeaf(sub, w.epoch);
  // The slot changes meaning (value -> layer) in place: readers overlapping it must retry.
  leaf->version().MarkInserting();
  leaf->keylenx[slot].store(kKeyLenLayer, std::memory_order_relaxed);
  // Release publishes the initialized layer; pairs with the acquire loads of lv in readers.
  leaf->lv[slot].store(EncodeLink(p, HeaderOf(sub)), std::memory_order_release);
  *sub_out = HeaderOf(sub);
  return WriteOutcome::kInserted;
}

// Adds (slice, kx, lv_bits) at sorted position `pos` of the locked, not full `leaf`. False when
// the durable policy could not log the change (nothing changed).
template <class P>
bool InsertIntoLeaf(const P& p, uint64_t e, LeafNode* leaf, int pos, uint64_t slice, uint8_t kx,
                    uint64_t bits) {
  LeafPermuter perm = leaf->perm();
  if (!p.PrepareLeafWrite(leaf, e, perm.NextFreeSlot())) return false;
  const int slot = perm.InsertAt(pos);
  // The slot is free, so no reader looks at it: plain relaxed stores, then the permutation's
  // release store publishes them (pairs with LeafNode::perm()'s acquire). Readers need no
  // version change: they see the old permutation (no new key) or the new one (complete slot).
  leaf->WriteSlot(slot, slice, kx, bits);
  p.PublishPerm(leaf, perm.value(), e, /*removal=*/false);
  return true;
}

// Inserts or updates `key`. See BasicMasstree::put for the contract. `previous` (may be null)
// receives the replaced value of an update.
template <class A, class P>
WriteOutcome PutKey(Writer<A, P>& w, std::string_view key, std::string_view value, PutMode mode,
                    std::string* previous = nullptr) {
  // No value object holds more (value_ref.h): refused like an allocation that failed.
  if (value.size() > ValueObject::kMaxValueBytes || key.size() > ValueObject::kMaxSuffixBytes) {
    return WriteOutcome::kNoMemory;
  }
  const P& p = w.p();
  KeyCursor k(key);
  NodeHeader* entry = w.tree.Root();
  for (;;) {
    LeafNode* leaf = LockLeaf(p, entry, k.slice());
    if (leaf == nullptr) {  // the layer was removed: start over from the top
      k.Reset();
      entry = w.tree.Root();
      continue;
    }
    const LeafPermuter perm = leaf->perm();
    bool found;
    const int pos = leaf->LowerBound(k.pos(), perm, &found);
    if (!found) {
      const bool long_key = k.cls() == kClassSuffix;
      ValueObject* nv = NewValue(w, key, long_key ? k.suffix() : "", value);
      if (nv == nullptr) {
        leaf->version().Unlock();
        return WriteOutcome::kNoMemory;
      }
      const uint64_t bits = ValueRef::FromObject(p, nv).bits();
      WriteOutcome out = WriteOutcome::kInserted;
      if (perm.size() < kLeafWidth) {
        if (!InsertIntoLeaf(p, w.epoch, leaf, pos, k.slice(), k.cls(), bits)) {
          out = WriteOutcome::kNoLog;
        }
        leaf->version().Unlock();
      } else {
        out = SplitLeafAndInsert(w, leaf, pos, k.slice(), k.cls(), bits);
        // On success the split released every lock it held, leaf's included.
        if (out != WriteOutcome::kInserted) leaf->version().Unlock();
      }
      if (out != WriteOutcome::kInserted) {
        w.alloc.RetireValue(nv, ValueBytes(p, nv));  // never published
        return out;
      }
      w.tree.size.Add(1);
      return WriteOutcome::kInserted;
    }
    const int slot = perm[pos];
    const uint8_t kx = leaf->keylenx[slot].load(std::memory_order_relaxed);
    const uint64_t bits = leaf->lv[slot].load(std::memory_order_relaxed);
    if (kx == kKeyLenLayer) {
      leaf->version().Unlock();
      entry = DecodeLink<NodeHeader>(p, bits);
      k.Descend();
      continue;
    }
    ValueObject* old = ValueRef::FromBits(bits).get(p);
    if (kx == kKeyLenSuffix && old->suffix() != k.suffix()) {
      NodeHeader* sub = nullptr;
      const WriteOutcome out = MakeLayer(w, leaf, slot, old, &sub);
      leaf->version().Unlock();
      if (out != WriteOutcome::kInserted) return out;
      w.alloc.RetireValue(old, ValueBytes(p, old));
      entry = sub;
      k.Descend();
      continue;
    }
    if (mode == PutMode::kInsertIfAbsent) {
      leaf->version().Unlock();
      return WriteOutcome::kExists;
    }
    ValueObject* nv = NewValue(w, key, kx == kKeyLenSuffix ? k.suffix() : "", value);
    if (nv == nullptr) {
      leaf->version().Unlock();
      return WriteOutcome::kNoMemory;
    }
    // One 8-byte store replaces the value (logged first by the durable policy); the key does not
    // move, so readers need no version change: they get the old object or the new one. (The
    // durable policy may instead move the key to another slot, marking the leaf inserting.)
    if (p.UpdateValue(leaf, slot, ValueRef::FromObject(p, nv).bits(), w.epoch) ==
        UpdateKind::kNoLog) {
      leaf->version().Unlock();
      w.alloc.RetireValue(nv, ValueBytes(p, nv));  // never published
      return WriteOutcome::kNoLog;
    }
    leaf->version().Unlock();
    // (The old object stays allocated until the writer's guard ends: retired, not freed.)
    if (previous != nullptr) previous->assign(old->value());
    w.alloc.RetireValue(old, ValueBytes(p, old));
    return WriteOutcome::kUpdated;
  }
}

}  // namespace pmrt::ds_internal

#endif  // PMRT_DS_INTERNAL_TREE_INSERT_H_
