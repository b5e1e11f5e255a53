// Node layouts of the Masstree: border (leaf) nodes and interior nodes, and the 8-byte links
// between them.
//
// Both node kinds are cache-line aligned and start with the NodeVersion word, so a NodeHeader*
// names either kind and its version says which (kLeaf). Every field that another thread may read
// concurrently is a std::atomic read with relaxed loads inside a version-validated section
// (node_version.h), so the optimistic readers are free of data races.
//
// One layout serves both trees. The transient tree leaves the in-cache-line log fields (InCLL,
// DESIGN.md section 4) untouched; the durable tree (ds/internal/durable_policy.h) uses them:
//
//   leaf      line 0  version | parent | permutation | node_epoch | perm_log | prev | next | low
//             line 1  ikey[0..7]
//             line 2  ikey[8..13] | keylenx[0..13] | 2 spare bytes
//             line 3  value_log0 | lv[0..6]
//             line 4  lv[7..13] | value_log1
//
//   interior  line 0  version | parent | nkeys, spare | logged_epoch | recovered_in | ikey[0..2]
//             line 1  ikey[3..10]
//             line 2  ikey[11..14] | child[0..3]
//             line 3  child[4..11]
//             line 4  child[12..15] | created_epoch | (24 bytes padding)
//
// The permutation, its log and the node epoch share line 0; each value log shares a line with
// the seven values it can record, so a logged field and its log always persist together in
// program order. The version word and the parent link come first so that an external-log copy
// of a node can leave them out (bytes [kLoggedBegin, sizeof)): the version is volatile (rebuilt
// at recovery) and the parent link is written under the *parent's* lock, so it is logged on its
// own (docs/masstree.md, "Durability"). Static assertions below check all of it.
//
// Links (parent, prev, next, child[], the layer links in lv[], TreeCore's root) are 8-byte
// words holding the node's address in the transient tree and its pool offset in the durable
// one; NodeLink decodes them against the policy's base address (0 for the transient tree, so
// the decode compiles to nothing).
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
// kKeyLenLayer: lv links the root-entry (leftmost leaf) of a deeper layer holding every key
// with this slice that continues past it (class 9).
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
struct LeafNode;

// A link word's encoding: the address itself (transient, base 0) or base + offset (durable).
// 0 is null in both.
template <class T, class P>
inline T* DecodeLink(const P& p, uint64_t link) {
  if constexpr (P::kDurable) {
    return link == 0 ? nullptr : reinterpret_cast<T*>(p.base() + link);
  } else {
    return reinterpret_cast<T*>(static_cast<uintptr_t>(link));
  }
}
template <class P>
inline uint64_t EncodeLink(const P& p, const void* node) {
  if constexpr (P::kDurable) {
    return node == nullptr ? 0 : reinterpret_cast<uintptr_t>(node) - p.base();
  } else {
    return reinterpret_cast<uintptr_t>(node);
  }
}

// An 8-byte link to a T (see above). Loads and stores name their memory order; the pairing is
// documented at each call site.
template <class T>
class NodeLink {
 public:
  template <class P>
  T* Load(const P& p, std::memory_order mo) const {
    return DecodeLink<T>(p, word_.load(mo));
  }
  template <class P>
  void Store(const P& p, T* node, std::memory_order mo) {
    word_.store(EncodeLink(p, node), mo);
  }
  uint64_t raw(std::memory_order mo) const { return word_.load(mo); }
  std::atomic<uint64_t>& word() { return word_; }

 private:
  std::atomic<uint64_t> word_{0};
};
static_assert(sizeof(NodeLink<int>) == 8);

// Bytes of a node that an external-log copy covers: everything after the version and parent.
inline constexpr size_t kLoggedBegin = 16;

struct alignas(kCacheLine) LeafNode {
  // Line 0: header, parent, permutation and the InCLL-p record (node_epoch, perm_log).
  NodeHeader header;                  // version word (volatile: rebuilt at recovery)
  NodeLink<InteriorNode> parent;      // null at a layer root; protected by the parent's lock
  std::atomic<uint64_t> permutation;  // LeafPermuter value
  std::atomic<uint64_t> node_epoch;   // durable: epoch << 2 | kLogged | kInsertAllowed
  std::atomic<uint64_t> perm_log;     // durable: the permutation when node_epoch began
  NodeLink<LeafNode> prev;            // left sibling; left sibling's lock (durable: ours too)
  NodeLink<LeafNode> next;            // right sibling; protected by this node's lock
  std::atomic<uint64_t> low_bound;    // lowest slice this leaf may hold; never changes
  // Lines 1-2: keys.
  std::atomic<uint64_t> ikey[kLeafWidth];    // slice per slot
  std::atomic<uint8_t> keylenx[kLeafWidth];  // class per slot, or kKeyLenLayer
  uint8_t spare[2];
  // Lines 3-4: values, each line with its packed value log.
  std::atomic<uint64_t> value_log0;      // durable: PackedValLog for lv[0..6]
  std::atomic<uint64_t> lv[kLeafWidth];  // ValueRef bits, or the link to a deeper layer's entry
  std::atomic<uint64_t> value_log1;      // durable: PackedValLog for lv[7..13]

  // Builds an empty leaf in `mem` (sizeof(LeafNode) bytes, 64-aligned). The InCLL fields are
  // zero; the durable policy's InitLeaf arms them.
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
  // The slot holding `k` under `p`, or -1: an exact-match search for readers, linear in sorted
  // order (independent loads, one predictable branch per key, and it stops at the first larger
  // key).
  int FindSlot(KeyPos k, LeafPermuter p) const;
  // Writes slot `slot` (free, so no reader looks at it).
  void WriteSlot(int slot, uint64_t slice, uint8_t kx, uint64_t lv_bits) {
    ikey[slot].store(slice, std::memory_order_relaxed);
    keylenx[slot].store(kx, std::memory_order_relaxed);
    lv[slot].store(lv_bits, std::memory_order_relaxed);
  }
  // The value log of the line holding lv[slot].
  std::atomic<uint64_t>& ValueLogFor(int slot) { return slot < 7 ? value_log0 : value_log1; }
};

struct alignas(kCacheLine) InteriorNode {
  NodeHeader header;              // version word (volatile: rebuilt at recovery)
  NodeLink<InteriorNode> parent;  // null at a layer root; protected by the parent's lock
  std::atomic<uint32_t> nkeys;    // keys in use; nkeys+1 children
  uint32_t spare;
  std::atomic<uint64_t> logged_epoch;  // durable: the epoch of its last external-log copy
  std::atomic<uint64_t> recovered_in;  // durable: version rebuilt in the execution starting here
  std::atomic<uint64_t> ikey[kInteriorWidth];      // separators, strictly ascending
  NodeLink<NodeHeader> child[kInteriorWidth + 1];  // child[i]: slices in [ikey[i-1], ikey[i])
  std::atomic<uint64_t> created_epoch;             // durable: the epoch that allocated the node

  static InteriorNode* Init(void* mem, bool root, bool locked);

  NodeVersion& version() { return header.version; }
  const NodeVersion& version() const { return header.version; }
  int size() const { return static_cast<int>(nkeys.load(std::memory_order_relaxed)); }
  // Index of the child whose range holds `slice`: the number of separators <= slice, for the
  // first `n` separators. Counted over every separator slot with no branch: the loads are
  // independent (the node's lines were prefetched) and there is no misprediction to pay, where
  // a binary search over 15 keys mispredicts about half of its four steps.
  int ChildIndex(uint64_t slice, int n) const {
    int count = 0;
    for (int i = 0; i < kInteriorWidth; ++i) {
      count += static_cast<int>(i < n) &
               static_cast<int>(ikey[i].load(std::memory_order_relaxed) <= slice);
    }
    return count;
  }
};

inline LeafNode* AsLeaf(NodeHeader* h) { return reinterpret_cast<LeafNode*>(h); }
inline InteriorNode* AsInterior(NodeHeader* h) { return reinterpret_cast<InteriorNode*>(h); }
inline NodeHeader* HeaderOf(LeafNode* n) { return n == nullptr ? nullptr : &n->header; }
inline NodeHeader* HeaderOf(InteriorNode* n) { return n == nullptr ? nullptr : &n->header; }
// The parent link of either node kind (it sits at the same offset in both).
inline NodeLink<InteriorNode>& ParentLink(NodeHeader* h) {
  return reinterpret_cast<LeafNode*>(h)->parent;
}
// Acquire pairs with SetParent's release store: a node published as parent is initialized.
template <class P>
inline InteriorNode* ParentOf(const P& p, NodeHeader* h) {
  return ParentLink(h).Load(p, std::memory_order_acquire);
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

inline int LeafNode::FindSlot(KeyPos k, LeafPermuter p) const {
  const int n = p.size();
  for (int i = 0; i < n; ++i) {
    const int slot = p[i];
    const uint64_t slice = ikey[slot].load(std::memory_order_relaxed);
    if (slice < k.slice) continue;
    if (slice > k.slice) return -1;
    const uint8_t cls = ClassOf(keylenx[slot].load(std::memory_order_relaxed));
    if (cls == k.cls) return slot;
    if (cls > k.cls) return -1;
  }
  return -1;
}

// Asks for every line of a node (both kinds are five lines) before its first field is read: a
// descent then waits for one memory latency per node rather than one per line that its search
// touches in turn (the version and permutation, the keys, the link or value).
inline void PrefetchNode(const void* node) {
  static_assert(sizeof(LeafNode) == sizeof(InteriorNode));
  const char* p = static_cast<const char*>(node);
  for (size_t off = 0; off < sizeof(LeafNode); off += kCacheLine) __builtin_prefetch(p + off);
}

// The durable layout depends on these placements (docs/masstree.md, "Node layouts").
static_assert(std::is_standard_layout_v<LeafNode> && std::is_standard_layout_v<InteriorNode>);
static_assert(sizeof(LeafNode) == 5 * kCacheLine && alignof(LeafNode) == kCacheLine);
static_assert(sizeof(InteriorNode) == 5 * kCacheLine && alignof(InteriorNode) == kCacheLine);
static_assert(offsetof(LeafNode, header) == 0 && offsetof(InteriorNode, header) == 0);
static_assert(offsetof(LeafNode, parent) == 8 && offsetof(InteriorNode, parent) == 8,
              "ParentLink() reads the parent at one offset for both kinds");
static_assert(offsetof(LeafNode, parent) + 8 == kLoggedBegin &&
                  offsetof(InteriorNode, parent) + 8 == kLoggedBegin,
              "external-log copies start right after the version and the parent link");
static_assert(offsetof(LeafNode, permutation) / kCacheLine == 0 &&
                  offsetof(LeafNode, node_epoch) / kCacheLine == 0 &&
                  offsetof(LeafNode, perm_log) / kCacheLine == 0,
              "InCLL-p: permutation, its log and the node epoch share line 0");
static_assert(offsetof(LeafNode, ikey) == kCacheLine, "keys start at line 1");
static_assert(offsetof(LeafNode, value_log0) == 3 * kCacheLine &&
                  offsetof(LeafNode, lv[6]) / kCacheLine == 3,
              "value log 0 shares line 3 with lv[0..6]");
static_assert(offsetof(LeafNode, lv[7]) == 4 * kCacheLine &&
                  offsetof(LeafNode, value_log1) / kCacheLine == 4,
              "value log 1 shares line 4 with lv[7..13]");
static_assert(offsetof(InteriorNode, recovered_in) / kCacheLine == 0,
              "the interior's recovery tag is read with its version: same line");
static_assert(offsetof(InteriorNode, created_epoch) + 8 <= sizeof(InteriorNode));
// The transient tree keeps the durable-only fields (node_epoch, perm_log, value_log0/1: never
// written by TransientPolicy) and loses nothing by it: without them a leaf of this width would
// still span five lines, and a lookup reads the same lines (0, the keys, the value's line).
static_assert((sizeof(LeafNode) - 4 * sizeof(uint64_t) + kCacheLine - 1) / kCacheLine ==
                  sizeof(LeafNode) / kCacheLine,
              "a leaf without the durable-only fields would be smaller: give the transient tree "
              "its own layout");

}  // namespace pmrt::ds_internal

#endif  // PMRT_DS_INTERNAL_NODE_LAYOUT_H_
