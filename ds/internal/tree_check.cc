#include "ds/internal/tree_check.h"

#include <algorithm>
#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "ds/internal/durable_policy.h"
#include "ds/internal/key_slice.h"
#include "ds/internal/node_layout.h"
#include "ds/internal/tree_split.h"
#include "ds/internal/value_ref.h"
#include "epoch/pool.h"

namespace pmrt::ds_internal {
namespace {

constexpr uint64_t kBadBits = NodeVersion::kLocked | NodeVersion::kDirty | NodeVersion::kDeleted;

// Names a node: by pool offset in the durable tree (what an operator can look up with the
// pool's tools), by address in the transient one.
template <class P>
std::string Where(const P& p, const void* node, int depth) {
  if constexpr (P::kDurable) {
    return absl::StrCat("node at offset ", EncodeLink(p, node), " in layer ", depth, ": ");
  } else {
    return absl::StrCat("node ", reinterpret_cast<uintptr_t>(node), " in layer ", depth, ": ");
  }
}

// Bytes the checker reads of a node before it knows its kind.
constexpr size_t kNodeBytes = std::max(sizeof(LeafNode), sizeof(InteriorNode));

// The key range a subtree covers: [lo, hi), hi absent for the rightmost subtree.
struct Range {
  uint64_t lo;
  bool has_hi;
  uint64_t hi;
  bool Holds(uint64_t s) const { return s >= lo && (!has_hi || s < hi); }
};

template <class P>
class Checker {
 public:
  Checker(const P& p, TreeVisitor* visitor, bool values)
      : p_(p), visitor_(visitor), values_(values) {}

  // The durable tree's links are pool offsets that a corrupt pool may set to anything: each is
  // checked to lie inside the pool (`bytes` from the target on) before it is read through.
  absl::Status CheckLink(const void* from, int depth, const void* to, size_t bytes, size_t align,
                         const char* what) const {
    if constexpr (P::kDurable) {
      const Pool& pool = p_.epochs().pool();
      const uint64_t off = EncodeLink(p_, to);
      if (off < kPoolHeaderSize || off % align != 0 || !pool.contains(to, bytes)) {
        return Fail(from, depth,
                    absl::StrCat(what, " link to offset ", off, " is not a ", align,
                                 "-byte aligned object of ", bytes, " bytes inside the pool"));
      }
    }
    return absl::OkStatus();
  }

  absl::Status CheckLayer(NodeHeader* entry, int depth) {
    if (depth > kMaxCheckedLayers) {
      return Fail(entry, depth, absl::StrCat("more than ", kMaxCheckedLayers, " layers"));
    }
    NodeHeader* root = entry;
    p_.Ready(root);
    for (int climbs = 0; !NodeVersion::IsRoot(root->version.Load()); ++climbs) {
      InteriorNode* up = ParentOf(p_, root);
      if (up == nullptr || climbs > 64) return Fail(root, depth, "non-root without a parent");
      if (auto s = CheckLink(root, depth, up, kNodeBytes, kCacheLine, "parent"); !s.ok()) return s;
      root = HeaderOf(up);
      p_.Ready(root);
    }
    if (ParentOf(p_, root) != nullptr) return Fail(root, depth, "root with a parent link");
    std::vector<LeafNode*> leaves;
    int leaf_level = -1;
    if (auto s = CheckNode(root, nullptr, Range{0, false, 0}, depth, 0, &leaf_level, &leaves);
        !s.ok()) {
      return s;
    }
    ++shape_.layers;
    if (depth == 0) shape_.height = leaf_level + 1;
    if (depth > 0 && HeaderOf(leaves.front()) != entry) {
      return Fail(entry, depth, "layer link does not name the layer's leftmost leaf");
    }
    return CheckChain(leaves, depth);
  }

  const TreeShape& shape() const { return shape_; }

 private:
  absl::Status Fail(const void* node, int depth, const std::string& what) const {
    return absl::InternalError(absl::StrCat(Where(p_, node, depth), what));
  }

  absl::Status CheckNode(NodeHeader* n, InteriorNode* parent, Range range, int depth, int level,
                         int* leaf_level, std::vector<LeafNode*>* leaves) {
    // A node reached twice (linked from two places, or in a cycle) would be walked again, for
    // ever in a cycle: each node is reached once, before anything else reads it.
    if (!seen_.insert(n).second) return Fail(n, depth, "node reached twice");
    if (level > kMaxLevels) {
      return Fail(n, depth, absl::StrCat("more than ", kMaxLevels, " levels in one layer"));
    }
    p_.Ready(n);
    const uint64_t v = n->version.Load();
    if (v & kBadBits) return Fail(n, depth, "version locked, dirty or deleted");
    if (NodeVersion::IsRoot(v) != (parent == nullptr)) return Fail(n, depth, "root bit wrong");
    if (ParentOf(p_, n) != parent) return Fail(n, depth, "parent link wrong");
    if (visitor_ != nullptr) {
      const bool leaf = NodeVersion::IsLeaf(v);
      if (auto s = visitor_->Node(n, leaf ? sizeof(LeafNode) : sizeof(InteriorNode), leaf, depth);
          !s.ok()) {
        return s;
      }
    }
    if (NodeVersion::IsLeaf(v)) {
      if (*leaf_level >= 0 && *leaf_level != level) return Fail(n, depth, "leaves at two depths");
      *leaf_level = level;
      leaves->push_back(AsLeaf(n));
      ++shape_.leaves;
      if (AsLeaf(n)->perm().size() == 0) ++shape_.empty_leaves;
      return CheckLeaf(AsLeaf(n), range, depth);
    }
    InteriorNode* in = AsInterior(n);
    ++shape_.interiors;
    const int nkeys = in->size();
    if (nkeys > kInteriorWidth) return Fail(n, depth, "too many keys");
    for (int i = 0; i < nkeys; ++i) {
      const uint64_t k = in->ikey[i].load(std::memory_order_relaxed);
      const uint64_t prev = i == 0 ? range.lo : in->ikey[i - 1].load(std::memory_order_relaxed);
      if (k <= prev || (range.has_hi && k >= range.hi)) {
        return Fail(n, depth, absl::StrCat("separator ", i, " out of order or range"));
      }
    }
    for (int i = 0; i <= kInteriorWidth; ++i) {
      NodeHeader* c = in->child[i].Load(p_, std::memory_order_relaxed);
      if ((c != nullptr) != (i <= nkeys)) return Fail(n, depth, "child slots wrong");
      if (c != nullptr) {
        if (auto s = CheckLink(n, depth, c, kNodeBytes, kCacheLine, "child"); !s.ok()) return s;
      }
    }
    for (int i = 0; i <= nkeys; ++i) {
      Range r{i == 0 ? range.lo : in->ikey[i - 1].load(std::memory_order_relaxed),
              i < nkeys || range.has_hi,
              i < nkeys ? in->ikey[i].load(std::memory_order_relaxed) : range.hi};
      if (auto s = CheckNode(in->child[i].Load(p_, std::memory_order_relaxed), in, r, depth,
                             level + 1, leaf_level, leaves);
          !s.ok()) {
        return s;
      }
    }
    return absl::OkStatus();
  }

  absl::Status CheckLeaf(LeafNode* leaf, Range range, int depth) {
    const LeafPermuter perm = leaf->perm();
    if (!perm.IsValid()) return Fail(leaf, depth, "invalid permutation");
    if (leaf->low_bound.load(std::memory_order_relaxed) != range.lo) {
      return Fail(leaf, depth, "low bound differs from the range the parent gives");
    }
    if constexpr (P::kDurable) {
      if (auto s = CheckLeafLogs(leaf, depth); !s.ok()) return s;
    }
    for (int i = 0; i < perm.size(); ++i) {
      const int slot = perm[i];
      const KeyPos pos = leaf->PosAt(slot);
      if (i > 0 && !(leaf->PosAt(perm[i - 1]) < pos)) {
        return Fail(leaf, depth, absl::StrCat("keys out of order at position ", i));
      }
      if (!range.Holds(pos.slice)) return Fail(leaf, depth, "key outside the node's range");
      if (auto s = CheckSlot(leaf, slot, depth); !s.ok()) return s;
    }
    return absl::OkStatus();
  }

  absl::Status CheckSlot(LeafNode* leaf, int slot, int depth) {
    const uint8_t kx = leaf->keylenx[slot].load(std::memory_order_relaxed);
    const uint64_t bits = leaf->lv[slot].load(std::memory_order_relaxed);
    const uint64_t slice = leaf->ikey[slot].load(std::memory_order_relaxed);
    if (kx > kKeyLenLayer) return Fail(leaf, depth, "bad keylenx");
    if (bits == 0) return Fail(leaf, depth, "null value or layer link");
    const size_t mark = prefix_.size();
    if (kx == kKeyLenLayer) {
      NodeHeader* layer = DecodeLink<NodeHeader>(p_, bits);
      if (auto s = CheckLink(leaf, depth, layer, kNodeBytes, kCacheLine, "layer"); !s.ok()) {
        return s;
      }
      AppendSliceBytes(prefix_, slice, kSliceBytes);
      absl::Status s = CheckLayer(layer, depth + 1);
      prefix_.resize(mark);
      return s;
    }
    const ValueObject* value = ValueRef::FromBits(bits).get(p_);
    if (auto s = CheckLink(leaf, depth, value, sizeof(ValueObject), ValueObject::kAlign, "value");
        !s.ok()) {
      return s;
    }
    // The form first: the object's size depends on it.
    if (value->is_inline() != (p_.value_form() == ValueForm::kInline)) {
      return Fail(leaf, depth, "value object of another layout version's form");
    }
    const size_t bytes = ValueBytes(p_, value);
    if (auto s = CheckLink(leaf, depth, value, bytes, ValueObject::kAlign, "value"); !s.ok()) {
      return s;
    }
    if ((kx == kKeyLenSuffix) != (value->suffix_len() > 0)) {
      return Fail(leaf, depth, "suffix present iff the key continues past the slice");
    }
    if (values_ && p_.value_checksums()) CheckValue(leaf, slot, depth, kx, slice, value);
    if (visitor_ != nullptr) {
      if (auto s = visitor_->Value(value, bytes, leaf, slot); !s.ok()) return s;
    }
    ++shape_.keys;
    return absl::OkStatus();
  }

  // The value's checksum against the full key this slot spells and the value bytes.
  // A mismatch is counted and the walk goes on (the structure is still checked).
  void CheckValue(LeafNode* leaf, int slot, int depth, uint8_t kx, uint64_t slice,
                  const ValueObject* value) {
    const size_t mark = prefix_.size();
    AppendSliceBytes(prefix_, slice, kx == kKeyLenSuffix ? kSliceBytes : kx);
    prefix_.append(value->suffix());
    ++shape_.checksummed_values;
    if (ValueChecksum(prefix_, value->value()) != value->checksum()) {
      ++shape_.bad_checksums;
      if (shape_.checksum_failures.size() < TreeShape::kMaxListedFailures) {
        shape_.checksum_failures.push_back(absl::StrCat(
            Where(p_, leaf, depth), "slot ", slot, ": the value object at ", ObjectName(value),
            " (", value->value_len(), " bytes) fails its checksum"));
      }
    }
    prefix_.resize(mark);
  }

  std::string ObjectName(const void* obj) const {
    if constexpr (P::kDurable) {
      return absl::StrCat("offset ", EncodeLink(p_, obj));
    } else {
      return absl::StrCat("address ", reinterpret_cast<uintptr_t>(obj));
    }
  }

  // Durable: the in-line logs are well formed (LeafEpoch, PackedValLog).
  absl::Status CheckLeafLogs(LeafNode* leaf, int depth) {
    const uint64_t e = LeafEpoch::Epoch(leaf->node_epoch.load(std::memory_order_relaxed));
    if (e > p_.epochs().current() || e < p_.epochs().execution_first()) {
      return Fail(
          leaf, depth,
          absl::StrCat("node epoch ", e, " outside [execution_first ",
                       p_.epochs().execution_first(), ", current ", p_.epochs().current(), "]"));
    }
    if (!LeafPermuter(leaf->perm_log.load(std::memory_order_relaxed)).IsValid()) {
      return Fail(leaf, depth, "perm_log is not a valid permutation");
    }
    for (int line = 0; line < 2; ++line) {
      const auto log = epoch::PackedValLog::FromBits(
          (line == 0 ? leaf->value_log0 : leaf->value_log1).load(std::memory_order_relaxed));
      if (log.valid() && (log.index() < 7u * line || log.index() >= 7u * line + 7)) {
        return Fail(leaf, depth, absl::StrCat("value log ", line, " names slot ", log.index()));
      }
    }
    return absl::OkStatus();
  }

  absl::Status CheckChain(const std::vector<LeafNode*>& leaves, int depth) {
    for (size_t i = 0; i < leaves.size(); ++i) {
      LeafNode* want_prev = i == 0 ? nullptr : leaves[i - 1];
      LeafNode* want_next = i + 1 == leaves.size() ? nullptr : leaves[i + 1];
      if (leaves[i]->prev.Load(p_, std::memory_order_relaxed) != want_prev ||
          leaves[i]->next.Load(p_, std::memory_order_relaxed) != want_next) {
        return Fail(leaves[i], depth, "leaf chain differs from the in-order leaves");
      }
    }
    return absl::OkStatus();
  }

  const P& p_;
  TreeVisitor* visitor_;
  const bool values_;
  TreeShape shape_;
  std::string prefix_;                           // bytes of the layers above the one being checked
  absl::flat_hash_set<const NodeHeader*> seen_;  // every node reached so far
};

}  // namespace

template <class P>
absl::Status CheckTree(const TreeCore<P>& tree, TreeShape* shape, TreeVisitor* visitor,
                       bool values) {
  Checker<P> checker(tree.policy, visitor, values);
  NodeHeader* root = tree.Root();
  if (root == nullptr) return absl::InternalError("tree has no root");
  if (auto s = checker.CheckLink(root, 0, root, kNodeBytes, kCacheLine, "root"); !s.ok()) return s;
  tree.policy.Ready(root);
  if (!NodeVersion::IsRoot(root->version.Load())) {
    return absl::InternalError("the tree's root word does not name the layer-0 root");
  }
  absl::Status s = checker.CheckLayer(root, 0);
  if (shape != nullptr) *shape = checker.shape();
  if (s.ok() && checker.shape().bad_checksums > 0) {
    const TreeShape& found = checker.shape();
    return absl::DataLossError(
        absl::StrCat(found.bad_checksums, " of ", found.checksummed_values,
                     " values fail their checksum; first: ", found.checksum_failures.front()));
  }
  return s;
}

template absl::Status CheckTree<TransientPolicy>(const TreeCore<TransientPolicy>&, TreeShape*,
                                                 TreeVisitor*, bool);
template absl::Status CheckTree<DurablePolicy>(const TreeCore<DurablePolicy>&, TreeShape*,
                                               TreeVisitor*, bool);

}  // namespace pmrt::ds_internal
