// Tree policies: how the one Masstree source is transient or durable.
//
// Every algorithm in ds/internal is a template on a policy P and calls the policy at each point
// where durability needs something: before the first access to a node in an execution (lazy
// recovery), before a leaf's permutation or value changes (in-cache-line logs), before a node is
// changed in ways those logs can't cover (external log), and when nodes are created. The
// transient policy below implements every hook as nothing (or as the plain store the transient
// tree always made), so the transient tree compiles to the same code as before durability
// existed: no InCLL field is written, nothing is logged or flushed. The durable policy is in
// ds/internal/durable_policy.h; docs/masstree.md, "Durability", has the protocol.
//
// Hooks that can fail return false when the external undo log is full; they fail before
// anything is modified, and the caller gives up the operation without having changed the tree
// (the public operation then waits for an epoch boundary and retries).
#ifndef PMRT_DS_INTERNAL_TREE_POLICY_H_
#define PMRT_DS_INTERNAL_TREE_POLICY_H_

#include <atomic>
#include <concepts>
#include <cstdint>

#include "ds/internal/node_layout.h"
#include "ds/internal/value_ref.h"

namespace pmrt::ds_internal {

// What UpdateValue did.
enum class UpdateKind : uint8_t { kInPlace, kRelocated, kNoLog };

// The contract of a tree policy. `e` is always the epoch of the calling operation's guard.
//   kDurable, base(): link encoding (node_layout.h).
//   Ready(node): the node's version and fields are safe to read (repairs it once per execution).
//   PrepareLeafWrite(leaf, e, slot): before a key is inserted into free `slot` (or, slot < 0,
//       before a key is removed) of the locked leaf; the caller then writes the slot and calls
//       PublishPerm(leaf, perm, e, removal) to store the new permutation.
//   UpdateValue(leaf, slot, bits, e): replaces the value of the key in `slot` of the locked leaf
//       with `bits` (logging it first): kInPlace (lv[slot] := bits), kRelocated (the durable
//       tree moved the key to another slot with the new value, and marked the leaf inserting),
//       or kNoLog (nothing changed).
//   LogLeaf / LogInterior(node, e): before any other change of the locked node in e.
//   LogParent(node, e): before node's parent link changes (caller holds the old parent's lock).
//   LogRoot(e): before TreeCore's root word changes.
//   InitLeaf / InitInterior(node, e): a node created in e, before it is published.
//   value_form(): the form of the value objects the tree writes (value_ref.h); value_checksums()
//       says whether that form carries a checksum.
template <class P>
concept IsTreePolicy = requires(const P& p, NodeHeader* h, LeafNode* l, InteriorNode* in,
                                uint64_t v, int slot, bool b) {
  { P::kDurable } -> std::convertible_to<bool>;
  { p.base() } -> std::convertible_to<uintptr_t>;
  p.Ready(h);
  { p.PrepareLeafWrite(l, v, slot) } -> std::same_as<bool>;
  p.PublishPerm(l, v, v, b);
  { p.UpdateValue(l, slot, v, v) } -> std::same_as<UpdateKind>;
  { p.LogLeaf(l, v) } -> std::same_as<bool>;
  { p.LogInterior(in, v) } -> std::same_as<bool>;
  { p.LogParent(h, v) } -> std::same_as<bool>;
  { p.LogRoot(v) } -> std::same_as<bool>;
  p.InitLeaf(l, v);
  p.InitInterior(in, v);
  { p.value_form() } -> std::convertible_to<ValueForm>;
  { p.value_checksums() } -> std::convertible_to<bool>;
};

// Durability compiled out: links are addresses, nothing is logged, nothing needs repair.
struct TransientPolicy {
  static constexpr bool kDurable = false;
  static constexpr uintptr_t base() { return 0; }

  void Ready(NodeHeader*) const {}
  bool PrepareLeafWrite(LeafNode*, uint64_t, int) const { return true; }
  // Release publishes the slot written before it (pairs with LeafNode::perm()'s acquire).
  void PublishPerm(LeafNode* leaf, uint64_t perm, uint64_t, bool) const {
    leaf->permutation.store(perm, std::memory_order_release);
  }
  // One 8-byte store replaces the value; release publishes the new object's bytes (pairs with
  // the readers' acquire load of lv).
  UpdateKind UpdateValue(LeafNode* leaf, int slot, uint64_t bits, uint64_t) const {
    leaf->lv[slot].store(bits, std::memory_order_release);
    return UpdateKind::kInPlace;
  }
  bool LogLeaf(LeafNode*, uint64_t) const { return true; }
  bool LogInterior(InteriorNode*, uint64_t) const { return true; }
  bool LogParent(NodeHeader*, uint64_t) const { return true; }
  bool LogRoot(uint64_t) const { return true; }
  void InitLeaf(LeafNode*, uint64_t) const {}
  void InitInterior(InteriorNode*, uint64_t) const {}
  static constexpr ValueForm value_form() { return ValueForm::kPlain; }
  static constexpr bool value_checksums() { return false; }
};
static_assert(IsTreePolicy<TransientPolicy>);

// The policy an allocator selects: A::Policy when it names one, else the transient policy.
template <class A>
struct PolicyOfImpl {
  using type = TransientPolicy;
};
template <class A>
requires requires { typename A::Policy; }
struct PolicyOfImpl<A> {
  using type = typename A::Policy;
};
template <class A>
using PolicyOf = typename PolicyOfImpl<A>::type;

}  // namespace pmrt::ds_internal

#endif  // PMRT_DS_INTERNAL_TREE_POLICY_H_
