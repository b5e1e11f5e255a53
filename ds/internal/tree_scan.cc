#include "ds/internal/tree_scan.h"

#include <string>

#include "ds/internal/durable_policy.h"
#include "ds/internal/key_slice.h"
#include "ds/internal/node_layout.h"
#include "ds/internal/tree_find.h"

namespace pmrt::ds_internal {
namespace {

// Where a scan stands in one layer.
struct Bound {
  enum class Kind { kAll, kFromKey, kAfter };
  Kind kind = Kind::kAll;
  KeyPos pos{0, 0};       // kFromKey: the start key's position; kAfter: the last finished entry
  std::string_view rest;  // kFromKey with pos.cls == kClassSuffix: start key bytes after slice
  bool inclusive = true;  // kFromKey: whether the start key itself is visited

  static Bound FromKey(std::string_view key, bool inclusive) {
    KeyCursor k(key);
    Bound b;
    b.kind = Kind::kFromKey;
    b.pos = k.pos();
    if (b.pos.cls == kClassSuffix) b.rest = k.suffix();
    b.inclusive = inclusive;
    return b;
  }
  static Bound After(KeyPos pos) {
    Bound b;
    b.kind = Kind::kAfter;
    b.pos = pos;
    return b;
  }
  uint64_t start_slice() const { return kind == Kind::kAll ? 0 : pos.slice; }
};

// A validated copy of a border node's live entries, in key order.
struct LeafSnapshot {
  int n = 0;
  KeyPos pos[kLeafWidth];
  uint8_t keylenx[kLeafWidth];
  uint64_t lv[kLeafWidth];
  LeafNode* next = nullptr;
};

// Fills `s` from `*leaf`, moving right past splits (by `slice`). False: a node was removed.
template <class P>
bool Snapshot(const P& p, LeafAndVersion* at, uint64_t slice, LeafSnapshot* s) {
  for (;;) {
    LeafNode* leaf = at->leaf;
    const LeafPermuter perm = leaf->perm();
    s->n = perm.size();
    for (int i = 0; i < s->n; ++i) {
      const int slot = perm[i];
      s->pos[i] = leaf->PosAt(slot);
      s->keylenx[i] = leaf->keylenx[slot].load(std::memory_order_relaxed);
      // Acquire pairs with the release store that installed the value or layer.
      s->lv[i] = leaf->lv[slot].load(std::memory_order_acquire);
      // The visit reads every value object in turn: ask for them all now. (A prefetch never
      // faults, so bits read before the validation below are harmless here.)
      __builtin_prefetch(ValueRef::FromBits(s->lv[i]).get(p));
    }
    s->next = leaf->next.Load(p, std::memory_order_acquire);
    if (s->next != nullptr) PrefetchNode(s->next);
    if (!leaf->version().HasChanged(at->version)) return true;
    *at = Advance(p, leaf, slice);
    if (at->leaf == nullptr) return false;
  }
}

template <class P>
class Scanner {
 public:
  Scanner(const P& p, ScanVisitor visit) : p_(p), visit_(visit) {}

  // Visits the keys of the layer entered at `entry` (all prefixed by prefix_) from `bound` on.
  // Returns false when the visitor stopped the scan.
  bool ScanLayer(NodeHeader* entry, Bound bound) {
  restart:
    LeafAndVersion at = FindLeaf(p_, entry, bound.start_slice());
    if (at.leaf == nullptr) return true;  // the layer was removed: it had become empty
    for (;;) {
      LeafSnapshot s;
      if (!Snapshot(p_, &at, bound.start_slice(), &s)) goto restart;
      for (int i = 0; i < s.n; ++i) {
        Bound sub;  // for a deeper layer: everything, unless the start key leads into it
        if (!Admits(bound, s, i, &sub)) continue;
        if (!Visit(s, i, sub)) return false;
        bound = Bound::After(s.pos[i]);
      }
      if (s.next == nullptr) return true;
      at.leaf = s.next;
      p_.Ready(HeaderOf(at.leaf));
      at.version = at.leaf->version().Stable();
      if (NodeVersion::IsDeleted(at.version)) goto restart;
    }
  }

 private:
  // Whether entry i of `s` is at or after `bound`; sets *sub for a layer entry.
  bool Admits(const Bound& bound, const LeafSnapshot& s, int i, Bound* sub) const {
    switch (bound.kind) {
      case Bound::Kind::kAll:
        return true;
      case Bound::Kind::kAfter:
        return bound.pos < s.pos[i];
      case Bound::Kind::kFromKey:
        break;
    }
    if (s.pos[i] < bound.pos) return false;
    if (bound.pos < s.pos[i]) return true;
    if (bound.pos.cls != kClassSuffix) return bound.inclusive;  // the start key itself
    if (s.keylenx[i] == kKeyLenLayer) {
      *sub = Bound::FromKey(bound.rest, bound.inclusive);
      return true;
    }
    const int c = ValueRef::FromBits(s.lv[i]).get(p_)->suffix().compare(bound.rest);
    return c > 0 || (c == 0 && bound.inclusive);
  }

  bool Visit(const LeafSnapshot& s, int i, const Bound& sub) {
    const size_t mark = prefix_.size();
    bool go;
    if (s.keylenx[i] == kKeyLenLayer) {
      AppendSliceBytes(prefix_, s.pos[i].slice, kSliceBytes);
      go = ScanLayer(DecodeLink<NodeHeader>(p_, s.lv[i]), sub);
    } else {
      const ValueObject& value = *ValueRef::FromBits(s.lv[i]).get(p_);
      const bool has_suffix = s.keylenx[i] == kKeyLenSuffix;
      AppendSliceBytes(prefix_, s.pos[i].slice, has_suffix ? kSliceBytes : s.keylenx[i]);
      if (has_suffix) prefix_.append(value.suffix());
      go = visit_(prefix_, value);
    }
    prefix_.resize(mark);
    return go;
  }

  const P& p_;
  ScanVisitor visit_;
  std::string prefix_;  // bytes of the layers above the current one
};

}  // namespace

template <class P>
void ScanTree(const TreeCore<P>& tree, std::string_view from, bool inclusive, ScanVisitor visit) {
  Scanner<P> scanner(tree.policy, visit);
  scanner.ScanLayer(tree.Root(), Bound::FromKey(from, inclusive));
}

template void ScanTree<TransientPolicy>(const TreeCore<TransientPolicy>&, std::string_view, bool,
                                        ScanVisitor);
template void ScanTree<DurablePolicy>(const TreeCore<DurablePolicy>&, std::string_view, bool,
                                      ScanVisitor);

}  // namespace pmrt::ds_internal
