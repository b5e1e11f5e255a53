// Node layouts of the Masstree: border (leaf) nodes and interior nodes.
//
// Both are cache-line aligned and start with the NodeVersion word, so a NodeHeader* names
// either kind and its version says which (kLeaf). Every field that another thread may read
// concurrently is a std::atomic read with relaxed loads inside a version-validated section
// (node_version.h), so the optimistic readers are free of data races.
//
// The border node is laid out for the durable tree's in-cache-line logs (InCLL, DESIGN.md
// section 4, docs/masstree.md); the reserved fields are unused by the transient tree:
//
//   line 0  version | permutation | incll_epoch_flags | perm_log | parent | prev | next | low_bound
//   line 1  ikey[0..7]
//   line 2  ikey[8..13] | keylenx[0..13] | 2 spare bytes
//   line 3  value_log0 | lv[0..6]
//   line 4  lv[7..13] | value_log1
//
// The permutation, its log and the node epoch share line 0; each value log shares a line with
// the seven values it can record, so a logged field and its log always persist together in
// program order. Static assertions below check it.
//
// Links are raw pointers in the transient tree; the durable tree stores 8-byte pool offsets in
// the same words (ValueRef for values; node links will get the same treatment).
#ifndef PMRT_DS_INTERNAL_NODE_LAYOUT_H_
#define PMRT_DS_INTERNAL_NODE_LAYOUT_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <new>
#include <type_traits>

#include "ds/internal/key_slice.h"
#include "ds/internal/node_version.h"
#include "ds/internal/permuter.h"
#include "ds/internal/value_ref.h"

namespace pmrt::ds_internal {

inline constexpr int kLeafWidth = 14;      // keys per border node (InCLL: one less than 15)
inline constexpr int kInteriorWidth = 15;  // keys per interior node; one more child
inline constexpr size_t kCacheLine = 64;

// keylenx values of a border slot: 0..8 is the key's length in its slice (class 0..8);
// kKeyLenSuffix: the key continues, its suffix is in the value object (class 9);
// kKeyLenLayer: lv points at the root of a deeper layer holding every key with this slice that
// continues past it (class 9).
inline constexpr uint8_t kKeyLenSuffix = kClassSuffix;
inline constexpr uint8_t kKeyLenLayer = kClassSuffix + 1;
inline constexpr uint8_t ClassOf(uint8_t keylenx) {
  return keylenx >= kKeyLenSuffix ? kClassSuffix : keylenx;
}

using LeafPermuter = Permuter<kLeafWidth>;

// The common first member of both node kinds. A NodeHeader* is pointer-interconvertible with
// the node that contains it (both node structs are standard-layout, header first).
struct NodeHeader {
  NodeVersion version;
};

struct InteriorNode;

struct alignas(kCacheLine) LeafNode {
  // Line 0: header, permutation and the InCLL-p fields.
  NodeHeader header;                        // version word
  std::atomic<uint64_t> permutation;        // LeafPermuter value
  std::atomic<uint64_t> incll_epoch_flags;  // reserved: node epoch:62 | insert allowed | logged
  std::atomic<uint64_t> perm_log;           // reserved: permutation when the node epoch began
  std::atomic<InteriorNode*> parent;        // null at a layer root; protected by parent's lock
  std::atomic<LeafNode*> prev;              // left sibling; protected by the left sibling's lock
  std::atomic<LeafNode*> next;              // right sibling; protected by this node's lock
  std::atomic<uint64_t> low_bound;          // lowest slice this leaf may hold; never changes
  // Lines 1-2: keys.
  std::atomic<uint64_t> ikey[kLeafWidth];    // slice per slot
  std::atomic<uint8_t> keylenx[kLeafWidth];  // class per slot, or kKeyLenLayer
  uint8_t spare[2];
  // Lines 3-4: values, each line with its packed value log.
  std::atomic<uint64_t> value_log0;      // reserved: InCLL for lv[0..6]
  std::atomic<uint64_t> lv[kLeafWidth];  // ValueRef bits, or NodeHeader* of a layer root
  std::atomic<uint64_t> value_log1;      // reserved: InCLL for lv[7..13]

  // Builds an empty leaf in `mem` (sizeof(LeafNode) bytes, 64-aligned).
  static LeafNode* Init(void* mem, bool root, bool locked, uint64_t low_bound);

  NodeVersion& version() { return header.version; }
  const NodeVersion& version() const { return header.version; }
  // Acquire pairs with the release store that published the permutation: the slots it lists
  // were written before it (a new key's slot is written while free, then published).
  LeafPermuter perm() const { return LeafPermuter(permutation.load(std::memory_order_acquire)); }
  KeyPos PosAt(int slot) const {
    return {ikey[slot].load(std::memory_order_relaxed),
            ClassOf(keylenx[slot].load(std::memory_order_relaxed))};
  }
  // Sorted position of the first key >= `k` under `p`; *found when that key equals `k`.
  int LowerBound(KeyPos k, LeafPermuter p, bool* found) const;
  // Writes slot `slot` (free, so no reader looks at it).
  void WriteSlot(int slot, uint64_t slice, uint8_t kx, uint64_t lv_bits) {
    ikey[slot].store(slice, std::memory_order_relaxed);
    keylenx[slot].store(kx, std::memory_order_relaxed);
    lv[slot].store(lv_bits, std::memory_order_relaxed);
  }
};

struct alignas(kCacheLine) InteriorNode {
  NodeHeader header;            // version word
  std::atomic<uint32_t> nkeys;  // keys in use; nkeys+1 children
  uint32_t spare;
  std::atomic<InteriorNode*> parent;           // null at a layer root; protected by parent's lock
  std::atomic<uint64_t> logged_epoch;          // reserved: epoch of its last external-log copy
  std::atomic<uint64_t> ikey[kInteriorWidth];  // separators, strictly ascending
  std::atomic<NodeHeader*> child[kInteriorWidth + 1];  // child[i]: slices in [ikey[i-1], ikey[i])

  static InteriorNode* Init(void* mem, bool root, bool locked);

  NodeVersion& version() { return header.version; }
  const NodeVersion& version() const { return header.version; }
  int size() const { return static_cast<int>(nkeys.load(std::memory_order_relaxed)); }
  // Index of the child whose range holds `slice`: the number of separators <= slice, for the
  // first `n` separators.
  int ChildIndex(uint64_t slice, int n) const {
    int lo = 0, hi = n;
    while (lo < hi) {
      const int mid = (lo + hi) / 2;
      if (ikey[mid].load(std::memory_order_relaxed) <= slice) {
        lo = mid + 1;
      } else {
        hi = mid;
      }
    }
    return lo;
  }
};

inline LeafNode* AsLeaf(NodeHeader* h) { return reinterpret_cast<LeafNode*>(h); }
inline InteriorNode* AsInterior(NodeHeader* h) { return reinterpret_cast<InteriorNode*>(h); }
inline NodeHeader* HeaderOf(LeafNode* n) { return &n->header; }
inline NodeHeader* HeaderOf(InteriorNode* n) { return &n->header; }
inline InteriorNode* ParentOf(NodeHeader* h) {
  return NodeVersion::IsLeaf(h->version.Load())
             ? AsLeaf(h)->parent.load(std::memory_order_acquire)
             : AsInterior(h)->parent.load(std::memory_order_acquire);
}

inline LeafNode* LeafNode::Init(void* mem, bool root, bool locked, uint64_t low) {
  auto* n = new (mem) LeafNode();
  n->header.version.Reset(NodeVersion::Initial(/*leaf=*/true, root, locked));
  n->permutation.store(LeafPermuter::Identity(0).value(), std::memory_order_relaxed);
  n->low_bound.store(low, std::memory_order_relaxed);
  return n;
}

inline InteriorNode* InteriorNode::Init(void* mem, bool root, bool locked) {
  auto* n = new (mem) InteriorNode();
  n->header.version.Reset(NodeVersion::Initial(/*leaf=*/false, root, locked));
  return n;
}

inline int LeafNode::LowerBound(KeyPos k, LeafPermuter p, bool* found) const {
  int lo = 0, hi = p.size();
  while (lo < hi) {
    const int mid = (lo + hi) / 2;
    if (PosAt(p[mid]) < k) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  *found = lo < p.size() && PosAt(p[lo]) == k;
  return lo;
}

// The durable layout depends on these placements (docs/masstree.md, "Border node").
static_assert(std::is_standard_layout_v<LeafNode> && std::is_standard_layout_v<InteriorNode>);
static_assert(sizeof(LeafNode) == 5 * kCacheLine && alignof(LeafNode) == kCacheLine);
static_assert(sizeof(InteriorNode) == 5 * kCacheLine);
static_assert(offsetof(LeafNode, header) == 0 && offsetof(InteriorNode, header) == 0);
static_assert(offsetof(LeafNode, permutation) / kCacheLine == 0 &&
                  offsetof(LeafNode, incll_epoch_flags) / kCacheLine == 0 &&
                  offsetof(LeafNode, perm_log) / kCacheLine == 0,
              "InCLL-p: permutation, its log and the node epoch share line 0");
static_assert(offsetof(LeafNode, ikey) == kCacheLine, "keys start at line 1");
static_assert(offsetof(LeafNode, value_log0) == 3 * kCacheLine &&
                  offsetof(LeafNode, lv[6]) / kCacheLine == 3,
              "value log 0 shares line 3 with lv[0..6]");
static_assert(offsetof(LeafNode, lv[7]) == 4 * kCacheLine &&
                  offsetof(LeafNode, value_log1) / kCacheLine == 4,
              "value log 1 shares line 4 with lv[7..13]");

}  // namespace pmrt::ds_internal

#endif  // PMRT_DS_INTERNAL_NODE_LAYOUT_H_
