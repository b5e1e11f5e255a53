// DurablePolicy: the Masstree's durability on the epoch scope (DESIGN.md contract 1), after the
// InCLL paper (reference/incll-fine-grain-checkpointing-paper.txt, sections 3-5). The tree's
// algorithms call these hooks (the contract is IsTreePolicy in tree_policy.h); docs/masstree.md,
// "Durability", has the protocol with every case.
//
//   * Leaves log their permutation in place (InCLL-p: perm_log + node_epoch in line 0) and one
//     replaced value per value line in place (PackedValLog in value_log0/1). A second update in
//     a value line within an epoch moves the key to a slot free since the epoch began (logged
//     by perm_log alone; a slot filled in the epoch needs no log at all), or, when there is no
//     such slot, goes to the external log, as do an insert into a slot freed in the same epoch,
//     a 16-bit tag that could not be widened back (PackedValLog::NeedsExternalFallback), a value
//     offset that does not encode, and every structural change (split, new layer, sibling
//     links): one copy of the node per epoch, flagged kLogged.
//   * Interior nodes and the tree descriptor go to the external log (their logged_epoch mark).
//   * Parent links are written under the parent's lock, not the child's, so they are logged as
//     their own 8-byte objects, never inside a node's copy (copies start at kLoggedBegin).
//   * Nodes created in the epoch are not logged: if the epoch fails the heap frees them.
//   * Every line changed in an epoch is registered dirty at its first change (RecordDirty, or
//     the external log, or the heap for new blocks), so the boundary writes it back.
//   * Recovery: the external log is replayed at epoch::Manager::Open; each node is repaired
//     lazily at its first access in an execution (Ready), under a striped volatile lock.
//
// Thread safety: the hooks run under the node locks the algorithms hold (documented per hook);
// Ready may be called by any thread inside a guard.
#ifndef PMRT_DS_INTERNAL_DURABLE_POLICY_H_
#define PMRT_DS_INTERNAL_DURABLE_POLICY_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>

#include "ds/durable_stats.h"
#include "ds/internal/node_layout.h"
#include "ds/internal/tree_policy.h"
#include "epoch/epoch.h"
#include "epoch/incll.h"
#include "epoch/persist.h"
#include "epoch/pool.h"

namespace pmrt::ds_internal {

// A durable leaf's node_epoch word: the paper's nodeEpoch with its two flags.
//
//   63                                    2   1        0
//   +---------------------------------------+--------+--------------+
//   | epoch (62 bits)                       | logged | insert ok    |
//   +---------------------------------------+--------+--------------+
//
// The flags mean something only while the epoch is the current one; they are re-armed at the
// node's first change in each epoch and at its recovery, so their stores need no order.
struct LeafEpoch {
  static constexpr uint64_t kInsertAllowed = 1;  // no key left the node in this epoch
  static constexpr uint64_t kLogged = 2;  // the node is in the external log (or new) this epoch
  static constexpr int kShift = 2;
  static constexpr uint64_t Make(uint64_t e, uint64_t flags) { return e << kShift | flags; }
  static constexpr uint64_t Epoch(uint64_t word) { return word >> kShift; }
};

// The tree's persistent entry point, allocated in the pool; its offset reopens the tree.
//
//   line 0  magic | version, leaf_size | root | logged_epoch | reserved[4]
//
// `root` is the pool offset of layer 0's root node; it changes when that root splits, after the
// descriptor is copied to the external log (logged_epoch is the copy's mark). Version 2 trees
// write a checksum trailer into every value object, version 3 trees (the default) the inline
// checksum form (value_ref.h); version 1 trees have none and are read and written without it.
struct alignas(64) MasstreeDescriptor {
  static constexpr uint64_t kMagic = 0x45455254534D4D50ull;  // "PMMSTREE"
  static constexpr uint32_t kVersion = 3;
  static constexpr uint32_t kFirstChecksumVersion = 2;
  static constexpr uint32_t kFirstInlineChecksumVersion = 3;
  static constexpr uint32_t kOldestVersion = 1;
  uint64_t magic;                      // kMagic
  uint32_t version;                    // kVersion
  uint32_t leaf_size;                  // sizeof(LeafNode): a layout check
  std::atomic<uint64_t> root;          // pool offset of layer 0's root
  std::atomic<uint64_t> logged_epoch;  // external-log mark
  uint64_t reserved[4];
};
static_assert(sizeof(MasstreeDescriptor) == 64 && std::is_standard_layout_v<MasstreeDescriptor>);

// The leaf's logged fields share lines with their logs (DESIGN.md section 4).
PMRT_ASSERT_SAME_LINE(LeafNode, permutation, perm_log);
PMRT_ASSERT_SAME_LINE(LeafNode, permutation, node_epoch);
PMRT_ASSERT_SAME_LINE(LeafNode, lv[0], value_log0);
PMRT_ASSERT_SAME_LINE(LeafNode, lv[6], value_log0);
PMRT_ASSERT_SAME_LINE(LeafNode, lv[7], value_log1);
PMRT_ASSERT_SAME_LINE(LeafNode, lv[13], value_log1);

// Persistence sites and store-order mutants of the durable tree (the mutation gate in
// tests/ds/durable_masstree_crash_test.cc must kill each).
inline constexpr Site kLeafStoreOrder{"ds.masstree.leaf.store_order"};      // perm_log, node_epoch
inline constexpr Site kPermStoreOrder{"ds.masstree.perm.store_order"};      // record, permutation
inline constexpr Site kValueStoreOrder{"ds.masstree.value.store_order"};    // value log, value
inline constexpr Site kLeafRecoverOrder{"ds.masstree.leaf.recover_order"};  // R2, R3
inline constexpr Site kValueRecoverOrder{"ds.masstree.value.recover_order"};  // V1, V2
inline constexpr Site kRecoverValueFlush{"ds.masstree.recover.value.flush"};
inline constexpr Site kRecoverValueFence{"ds.masstree.recover.value.fence"};
inline constexpr Site kRecoverNodeFlush{"ds.masstree.recover.node.flush"};
// A logic mutant (negative control): a relocation that leaves insert-allowed set, so an insert
// later in the epoch may overwrite the slot the key left, which perm_log still lists.
inline constexpr Site kRelocateKeepsInsert{"ds.masstree.relocate.keeps_insert_allowed"};
inline constexpr Site kRecoverNodeFence{"ds.masstree.recover.node.fence"};
// Mutants that drop one registration of a change with the epoch layer each: an external-log
// snapshot (the object changed unlogged and unregistered), a leaf's first change in an epoch
// and a leaf's repair not registered dirty, and the descriptor's snapshot at a tree's creation.
inline constexpr Site kDropSnapshot{"ds.masstree.mutant.snapshot"};
inline constexpr Site kDirtyLeafRecord{"ds.masstree.mutant.dirty.leaf_record"};
inline constexpr Site kDirtyLeafRepair{"ds.masstree.mutant.dirty.leaf_repair"};
inline constexpr Site kDropDescriptorSnapshot{"ds.masstree.mutant.descriptor_snapshot"};

using ds::DurableStats;  // (ds/durable_stats.h)

class DurablePolicy {
 public:
  static constexpr bool kDurable = true;

  // REQUIRES: `epochs` is open on `pool`; `desc` lies in the pool. The policy reads the
  // execution's first epoch once: it must be created after Manager::Open.
  DurablePolicy(Pool& pool, epoch::Manager& epochs, MasstreeDescriptor* desc);

  uintptr_t base() const { return base_; }
  epoch::Manager& epochs() const { return *m_; }
  const Persister& persister() const { return p_; }
  MasstreeDescriptor* descriptor() const { return desc_; }
  DurableStats stats() const;
  // The value object form of the tree's layout version: plain (1), trailer (2), inline (3).
  ValueForm value_form() const { return form_; }
  bool value_checksums() const { return form_ != ValueForm::kPlain; }

  // Lazy recovery: repairs `n` if this execution has not yet (its version word, and for a leaf
  // the in-line logs of a failed epoch). Fast path: one acquire load of a word in the node's
  // first line (read with the version anyway) and a compare. REQUIRES: inside a guard.
  void Ready(NodeHeader* n) const {
    // The kind bit is set when a node is created and never changes, so it is right even in a
    // version word a crash left locked or dirty.
    if (NodeVersion::IsLeaf(n->version.Load())) {
      // Acquire pairs with the release store that ends RepairLeaf (step R3): a thread that sees
      // the re-armed epoch sees the repaired node.
      if (AsLeaf(n)->node_epoch.load(std::memory_order_acquire) >= ready_leaf_word_) [[likely]] {
        return;
      }
      RecoverLeaf(AsLeaf(n));
    } else {
      // Acquire pairs with the release store of recovered_in in RepairInterior.
      if (AsInterior(n)->recovered_in.load(std::memory_order_acquire) >= x_) [[likely]]
        return;
      RecoverInterior(AsInterior(n));
    }
  }

  // Leaf hooks. REQUIRES for all: the leaf's lock, a guard of epoch e, Ready(leaf) done.
  bool PrepareLeafWrite(LeafNode* leaf, uint64_t e, int insert_slot) const;
  void PublishPerm(LeafNode* leaf, uint64_t perm, uint64_t e, bool removal) const;
  UpdateKind UpdateValue(LeafNode* leaf, int slot, uint64_t bits, uint64_t e) const;
  bool LogLeaf(LeafNode* leaf, uint64_t e) const;
  // REQUIRES: the node's lock (LogInterior); the lock of node's current parent (LogParent); the
  // lock of the root being replaced (LogRoot).
  bool LogInterior(InteriorNode* in, uint64_t e) const;
  bool LogParent(NodeHeader* node, uint64_t e) const;
  bool LogRoot(uint64_t e) const;
  // New nodes, before they are published.
  void InitLeaf(LeafNode* leaf, uint64_t e) const;
  void InitInterior(InteriorNode* in, uint64_t e) const;

 private:
  struct Counters {
    std::atomic<uint64_t> leaf_log_copies{0}, interior_log_copies{0}, parent_log_copies{0};
    std::atomic<uint64_t> relocations{0};
    std::atomic<uint64_t> leaves_recovered{0}, interiors_recovered{0};
    std::atomic<uint64_t> perms_rolled_back{0}, values_rolled_back{0};
  };
  void RecoverLeaf(LeafNode* leaf) const;
  void RecoverInterior(InteriorNode* in) const;
  void RepairLeaf(LeafNode* leaf) const;
  void RepairValueLines(LeafNode* leaf, uint64_t n) const;
  void BeginRecord(LeafNode* leaf, uint64_t e, int keep_line, uint64_t old_perm) const;
  int StartFreeSlot(LeafNode* leaf) const;
  void Relocate(LeafNode* leaf, int slot, int to, uint64_t bits) const;
  bool CopyLeaf(LeafNode* leaf, uint64_t e) const;
  bool Snapshot(void* obj, size_t size, std::atomic<uint64_t>* mark) const;

  uintptr_t base_;
  epoch::Manager* m_;
  Persister p_;
  uint64_t x_;                // execution_first
  uint64_t ready_leaf_word_;  // LeafEpoch::Make(x_, 0): a leaf word below it needs repair
  MasstreeDescriptor* desc_;
  ValueForm form_;
  std::unique_ptr<epoch::RecoveryLocks> locks_;
  std::unique_ptr<Counters> counters_;
};
static_assert(IsTreePolicy<DurablePolicy>);

}  // namespace pmrt::ds_internal

#endif  // PMRT_DS_INTERNAL_DURABLE_POLICY_H_
