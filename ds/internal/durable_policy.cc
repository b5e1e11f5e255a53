#include "ds/internal/durable_policy.h"

#include <cstdio>
#include <cstdlib>

namespace pmrt::ds_internal {
namespace {

using epoch::PackedValLog;

constexpr size_t kLeafLoggedBytes = sizeof(LeafNode) - kLoggedBegin;
constexpr size_t kInteriorLoggedBytes = sizeof(InteriorNode) - kLoggedBegin;

void* LoggedPart(void* node) { return static_cast<uint8_t*>(node) + kLoggedBegin; }

std::atomic<uint64_t>& ValueLogOfLine(LeafNode* leaf, int line) {
  return line == 0 ? leaf->value_log0 : leaf->value_log1;
}
int LineOf(int slot) { return slot < 7 ? 0 : 1; }

}  // namespace

DurablePolicy::DurablePolicy(Pool& pool, epoch::Manager& epochs, MasstreeDescriptor* desc)
    : base_(reinterpret_cast<uintptr_t>(pool.base())),
      m_(&epochs),
      p_(pool.persister()),
      x_(epochs.execution_first()),
      ready_leaf_word_(LeafEpoch::Make(x_, 0)),
      desc_(desc),
      form_(desc->version >= MasstreeDescriptor::kFirstInlineChecksumVersion ? ValueForm::kInline
            : desc->version >= MasstreeDescriptor::kFirstChecksumVersion     ? ValueForm::kTrailer
                                                                             : ValueForm::kPlain),
      locks_(std::make_unique<epoch::RecoveryLocks>()),
      counters_(std::make_unique<Counters>()) {}

DurableStats DurablePolicy::stats() const {
  DurableStats s;
  s.leaf_log_copies = counters_->leaf_log_copies.load(std::memory_order_relaxed);
  s.interior_log_copies = counters_->interior_log_copies.load(std::memory_order_relaxed);
  s.parent_log_copies = counters_->parent_log_copies.load(std::memory_order_relaxed);
  s.relocations = counters_->relocations.load(std::memory_order_relaxed);
  s.leaves_recovered = counters_->leaves_recovered.load(std::memory_order_relaxed);
  s.interiors_recovered = counters_->interiors_recovered.load(std::memory_order_relaxed);
  s.perms_rolled_back = counters_->perms_rolled_back.load(std::memory_order_relaxed);
  s.values_rolled_back = counters_->values_rolled_back.load(std::memory_order_relaxed);
  return s;
}

bool DurablePolicy::Snapshot(void* obj, size_t size, std::atomic<uint64_t>* mark) const {
  if (mutation::Swapped(kDropSnapshot)) return true;
  const absl::Status st = m_->log().Snapshot(obj, size, mark);
  if (st.ok()) return true;
  if (st.code() == absl::StatusCode::kResourceExhausted) return false;  // full until a boundary
  if (m_->pool().failed()) return false;  // the failed mode: refused (WaitForLogSpace says so)
  // Anything else (an object outside the pool) is a bug that leaves the tree's durability
  // uncertain: stop rather than modify an unlogged node.
  std::fprintf(stderr, "pmrt::ds durable Masstree: %s\n", st.ToString().c_str());
  std::abort();
}

// ---- first change of a leaf in an epoch, logged in place ------------------------------------

void DurablePolicy::BeginRecord(LeafNode* leaf, uint64_t e, int keep_line, uint64_t old) const {
  // From here on any line of the node may change in e; the boundary writes them all back.
  if (!mutation::Swapped(kDirtyLeafRecord)) m_->RecordDirty(leaf, sizeof(LeafNode));
  const uint64_t word = LeafEpoch::Make(e, LeafEpoch::kInsertAllowed);
  if (mutation::Swapped(kLeafStoreOrder)) {  // the mutant: node epoch before perm_log
    leaf->node_epoch.store(word, std::memory_order_release);
    p_.StoreHint(leaf, kCacheLine);
    leaf->perm_log.store(old, std::memory_order_release);
    p_.StoreHint(leaf, kCacheLine);
  } else {
    // 1. perm_log := permutation. Before and after: node_epoch names an older, completed epoch
    //    (or this execution's re-armed first one), so recovery keeps the permutation and
    //    ignores perm_log.
    leaf->perm_log.store(old, std::memory_order_relaxed);
    p_.StoreHint(leaf, kCacheLine);
    // 2. node_epoch := e. Release: after step 1 in this line (PCSO keeps the order on media).
    //    After: if e fails, recovery restores perm_log, the permutation as e began; the
    //    permutation itself is unchanged yet (PublishPerm stores it next), so that is harmless.
    leaf->node_epoch.store(word, std::memory_order_release);
    p_.StoreHint(leaf, kCacheLine);
  }
  // Value logs (docs/epoch.md, invariant 1): every valid log is rewritten for e, so no log of
  // an older epoch can alias e's 16-bit tag later. An invalid log never restores anything,
  // whatever its tag, so it is left alone; `keep_line` is rewritten by the caller. These lines
  // are not line 0, and need no order with it: each of the four combinations of (node line,
  // value line) on media resolves right (docs/epoch.md, "Value logs").
  for (int line = 0; line < 2; ++line) {
    if (line == keep_line) continue;
    std::atomic<uint64_t>& w = ValueLogOfLine(leaf, line);
    if (PackedValLog::FromBits(w.load(std::memory_order_relaxed)).valid()) {
      // Before: the old log (of the node's previous epoch, completed) restores nothing. After:
      // no log. Either way this line's values are kept, and none of them has changed in e.
      w.store(PackedValLog::Invalid(e).bits(), std::memory_order_relaxed);
      p_.StoreHint(&w, sizeof(w));
    }
  }
}

bool DurablePolicy::CopyLeaf(LeafNode* leaf, uint64_t e) const {
  const uint64_t w = leaf->node_epoch.load(std::memory_order_relaxed);
  // The node's own kLogged flag is its mark (checked by the callers), so the external log gets a
  // throwaway one and always copies.
  std::atomic<uint64_t> mark{0};
  if (!Snapshot(LoggedPart(leaf), kLeafLoggedBytes, &mark)) return false;
  counters_->leaf_log_copies.fetch_add(1, std::memory_order_relaxed);
  if (LeafEpoch::Epoch(w) == e) {
    // Already changed in e: the copy holds e's in-line record (node epoch e, perm_log and the
    // value logs as of e's start), which recovery applies after replaying the copy.
    leaf->node_epoch.store(w | LeafEpoch::kLogged, std::memory_order_relaxed);
    return true;
  }
  // First change in e, logged. Re-arm the in-line record for e (so later changes in e see
  // their epoch and the flag). No store order is needed: if e fails, the copy (the node as e
  // began, with the in-line record of a completed epoch, which restores nothing) is replayed
  // over every byte written here.
  m_->RecordDirty(leaf, sizeof(LeafNode));  // (the Snapshot registered it too; harmless)
  leaf->perm_log.store(leaf->permutation.load(std::memory_order_relaxed),
                       std::memory_order_relaxed);
  for (int line = 0; line < 2; ++line) {
    std::atomic<uint64_t>& v = ValueLogOfLine(leaf, line);
    if (PackedValLog::FromBits(v.load(std::memory_order_relaxed)).valid()) {
      v.store(PackedValLog::Invalid(e).bits(), std::memory_order_relaxed);  // invariant 1
    }
  }
  leaf->node_epoch.store(LeafEpoch::Make(e, LeafEpoch::kInsertAllowed | LeafEpoch::kLogged),
                         std::memory_order_release);
  return true;
}

bool DurablePolicy::PrepareLeafWrite(LeafNode* leaf, uint64_t e, int insert_slot) const {
  const uint64_t w = leaf->node_epoch.load(std::memory_order_relaxed);
  if (LeafEpoch::Epoch(w) != e) {
    // First change in e. The value logs' 16-bit tags are widened against the node epoch: after
    // a gap of 2^16 epochs they could alias, so the node is copied instead (the fallback rule).
    if (epoch::PackedValLog::NeedsExternalFallback(e, LeafEpoch::Epoch(w))) {
      return CopyLeaf(leaf, e);
    }
    return true;  // PublishPerm writes the in-line record
  }
  if ((w & (LeafEpoch::kLogged | LeafEpoch::kInsertAllowed)) != 0 || insert_slot < 0) return true;
  // A key left this node in e (insert no longer allowed). If the slot about to be written is
  // one perm_log still lists, rolling e back would resurrect that key with the new key's bytes:
  // the node must be copied first (the paper's insAllowed rule, narrowed to that slot).
  const LeafPermuter at_start(leaf->perm_log.load(std::memory_order_relaxed));
  for (int i = 0; i < at_start.size(); ++i) {
    if (at_start[i] == insert_slot) return CopyLeaf(leaf, e);
  }
  return true;
}

void DurablePolicy::PublishPerm(LeafNode* leaf, uint64_t perm, uint64_t e, bool removal) const {
  uint64_t w = leaf->node_epoch.load(std::memory_order_relaxed);
  if (LeafEpoch::Epoch(w) != e) {
    if (mutation::Swapped(kPermStoreOrder)) {
      // The mutant: the new permutation reaches the line before its undo record.
      const uint64_t old = leaf->permutation.load(std::memory_order_relaxed);
      leaf->permutation.store(perm, std::memory_order_release);
      p_.StoreHint(leaf, kCacheLine);
      BeginRecord(leaf, e, -1, old);
      if (removal) {
        leaf->node_epoch.store(LeafEpoch::Make(e, 0), std::memory_order_relaxed);
      }
      return;
    }
    BeginRecord(leaf, e, -1, leaf->permutation.load(std::memory_order_relaxed));
    w = LeafEpoch::Make(e, LeafEpoch::kInsertAllowed);
  }
  if (removal && (w & LeafEpoch::kInsertAllowed) != 0) {
    // A slot freed in e must not be refilled without a copy (PrepareLeafWrite). A transient
    // flag in the node-epoch word: no order with anything.
    leaf->node_epoch.store(w & ~LeafEpoch::kInsertAllowed, std::memory_order_relaxed);
  }
  // 3. The new permutation. Release: after the record's stores in this line (and, for an
  //    insert, after the slot was written). Before: a failed e restores perm_log (the
  //    permutation as e began), a completed node epoch keeps the old permutation. After: a
  //    failed e restores perm_log; a completed e keeps this permutation.
  leaf->permutation.store(perm, std::memory_order_release);
  p_.StoreHint(leaf, kCacheLine);
}

namespace {

bool LiveIn(LeafPermuter p, int slot) {
  for (int i = 0; i < p.size(); ++i) {
    if (p[i] == slot) return true;
  }
  return false;
}

}  // namespace

int DurablePolicy::StartFreeSlot(LeafNode* leaf) const {
  const LeafPermuter now(leaf->permutation.load(std::memory_order_relaxed));
  const LeafPermuter at_start(leaf->perm_log.load(std::memory_order_relaxed));
  for (int i = now.size(); i < kLeafWidth; ++i) {
    if (!LiveIn(at_start, now[i])) return now[i];
  }
  return -1;
}

void DurablePolicy::Relocate(LeafNode* leaf, int slot, int to, uint64_t bits) const {
  // The key moves from `slot` to `to`, a slot free since the epoch began, with its new value;
  // `slot` (old value untouched) becomes free. Only the permutation is logged (perm_log, in
  // place: this is not the node's first change in the epoch), and a rollback restores it: the
  // key is back in `slot` with its old value, and `to` is free again.
  const LeafPermuter now(leaf->permutation.load(std::memory_order_relaxed));
  // `to` is free, so no reader looks at it: plain stores, published by the permutation.
  leaf->WriteSlot(to, leaf->ikey[slot].load(std::memory_order_relaxed),
                  leaf->keylenx[slot].load(std::memory_order_relaxed), bits);
  // The new permutation: `to` takes `slot`'s sorted position; `slot` goes to the back of the
  // free list (the last to be reused; reusing it in this epoch needs a copy of the node).
  uint64_t v = static_cast<uint64_t>(now.size());
  int out = 0;
  auto put = [&](int s) { v |= static_cast<uint64_t>(s) << (4 + 4 * out++); };
  for (int i = 0; i < now.size(); ++i) put(now[i] == slot ? to : now[i]);
  for (int i = now.size(); i < kLeafWidth; ++i) {
    if (now[i] != to) put(now[i]);
  }
  put(slot);
  // `slot` leaves the permutation and could be refilled (after a copy) while a reader still
  // holds the old permutation: as for a removal, such readers must retry.
  leaf->version().MarkInserting();
  if (!mutation::Swapped(kRelocateKeepsInsert)) {
    const uint64_t w = leaf->node_epoch.load(std::memory_order_relaxed);
    leaf->node_epoch.store(w & ~LeafEpoch::kInsertAllowed, std::memory_order_relaxed);
  }
  counters_->relocations.fetch_add(1, std::memory_order_relaxed);
  // The permutation (release: publishes slot `to`; line 0 already holds this epoch's record, so
  // before and after this store a failed epoch restores perm_log, a completed one keeps it).
  leaf->permutation.store(v, std::memory_order_release);
  p_.StoreHint(leaf, kCacheLine);
}

UpdateKind DurablePolicy::UpdateValue(LeafNode* leaf, int slot, uint64_t bits, uint64_t e) const {
  const uint64_t w = leaf->node_epoch.load(std::memory_order_relaxed);
  std::atomic<uint64_t>& log_word = leaf->ValueLogFor(slot);
  const uint64_t old = leaf->lv[slot].load(std::memory_order_relaxed);
  PackedValLog log;
  bool write_log = false;
  if (LeafEpoch::Epoch(w) != e) {
    // First change in e: the in-line record, with this slot's log in its line.
    if (PackedValLog::NeedsExternalFallback(e, LeafEpoch::Epoch(w)) ||
        !PackedValLog::TryEncode(static_cast<uint32_t>(slot), old, e, &log)) {
      if (!CopyLeaf(leaf, e)) return UpdateKind::kNoLog;
    } else {
      BeginRecord(leaf, e, LineOf(slot), leaf->permutation.load(std::memory_order_relaxed));
      write_log = true;
    }
  } else if ((w & LeafEpoch::kLogged) == 0) {
    const PackedValLog cur = PackedValLog::FromBits(log_word.load(std::memory_order_relaxed));
    if (!LiveIn(LeafPermuter(leaf->perm_log.load(std::memory_order_relaxed)), slot)) {
      // The slot was filled in e (an insert or a relocation): a rollback frees it again, so
      // its value as e began does not matter.
    } else if (cur.valid() && cur.index() == static_cast<uint32_t>(slot)) {
      // This slot was logged in e already (every valid log of a node whose epoch is e was
      // written in e): its value as e began is safe.
    } else if (!cur.valid() && PackedValLog::TryEncode(static_cast<uint32_t>(slot), old, e, &log)) {
      write_log = true;
    } else if (const int to = StartFreeSlot(leaf); to >= 0) {
      // The line's one log holds another slot of e: move the key to a slot free since e began
      // (logged by perm_log alone) rather than copy the node to the external log.
      Relocate(leaf, slot, to, bits);
      return UpdateKind::kRelocated;
    } else if (!CopyLeaf(leaf, e)) {
      return UpdateKind::kNoLog;
    }
  }
  if (write_log && mutation::Swapped(kValueStoreOrder)) {  // the mutant: value before its log
    leaf->lv[slot].store(bits, std::memory_order_release);
    p_.StoreHint(&leaf->lv[slot], 8);
    log_word.store(log.bits(), std::memory_order_release);
    p_.StoreHint(&log_word, 8);
    return UpdateKind::kInPlace;
  }
  if (write_log) {
    // V1. The slot's log (old value, slot, e's low 16 bits). Before: the line's previous log
    //     (none, or one of the node's previous, completed epoch) restores nothing. After: if e
    //     fails, the slot is restored to `old` whether or not line 0 reached media (the tag
    //     widens to e either way); the value is unchanged yet, so that is harmless.
    log_word.store(log.bits(), std::memory_order_relaxed);
    p_.StoreHint(&log_word, 8);
  }
  // V2. The new value. Release: after V1 in this line, and publishes the new object's bytes to
  //     readers (their acquire load of lv). After: a failed e restores the logged value (or
  //     replays the node's copy); a completed e keeps this one.
  leaf->lv[slot].store(bits, std::memory_order_release);
  p_.StoreHint(&leaf->lv[slot], 8);
  return UpdateKind::kInPlace;
}

bool DurablePolicy::LogLeaf(LeafNode* leaf, uint64_t e) const {
  const uint64_t w = leaf->node_epoch.load(std::memory_order_relaxed);
  if (LeafEpoch::Epoch(w) == e && (w & LeafEpoch::kLogged) != 0) return true;
  return CopyLeaf(leaf, e);
}

// ---- external log: interior nodes, parent links, the descriptor ------------------------------

bool DurablePolicy::LogInterior(InteriorNode* in, uint64_t e) const {
  if (in->logged_epoch.load(std::memory_order_relaxed) == e) return true;  // copied (or new) in e
  if (!Snapshot(LoggedPart(in), kInteriorLoggedBytes, &in->logged_epoch)) return false;
  counters_->interior_log_copies.fetch_add(1, std::memory_order_relaxed);
  return true;
}

bool DurablePolicy::LogParent(NodeHeader* node, uint64_t e) const {
  // A node's parent link changes only to a node created in the same epoch (a split's new
  // sibling or new root), so the first change in e is from the link as e began, and later
  // changes in e are from a node created in e. Logging only the first gives one entry per link
  // per epoch: replay needs no order.
  InteriorNode* old = ParentOf(*this, node);
  if (old != nullptr && old->created_epoch.load(std::memory_order_relaxed) == e) return true;
  std::atomic<uint64_t> mark{0};
  if (!Snapshot(&ParentLink(node).word(), sizeof(uint64_t), &mark)) return false;
  counters_->parent_log_copies.fetch_add(1, std::memory_order_relaxed);
  return true;
}

bool DurablePolicy::LogRoot(uint64_t) const {
  return Snapshot(desc_, sizeof(*desc_), &desc_->logged_epoch);
}

// ---- new nodes --------------------------------------------------------------------------------

void DurablePolicy::InitLeaf(LeafNode* leaf, uint64_t e) const {
  // Created in e: if e fails the heap frees it, so nothing about it needs logging in e (kLogged)
  // and its lines are registered dirty by the heap's allocation. Value logs start invalid
  // (docs/epoch.md invariant 2: a zero word would be a log of slot 0).
  leaf->perm_log.store(leaf->permutation.load(std::memory_order_relaxed),
                       std::memory_order_relaxed);
  leaf->value_log0.store(PackedValLog::Invalid(e).bits(), std::memory_order_relaxed);
  leaf->value_log1.store(PackedValLog::Invalid(e).bits(), std::memory_order_relaxed);
  leaf->node_epoch.store(LeafEpoch::Make(e, LeafEpoch::kInsertAllowed | LeafEpoch::kLogged),
                         std::memory_order_relaxed);
}

void DurablePolicy::InitInterior(InteriorNode* in, uint64_t e) const {
  in->created_epoch.store(e, std::memory_order_relaxed);
  in->logged_epoch.store(e, std::memory_order_relaxed);  // new in e: never copied in e
  in->recovered_in.store(x_, std::memory_order_relaxed);
}

// ---- lazy recovery ---------------------------------------------------------------------------

void DurablePolicy::RecoverLeaf(LeafNode* leaf) const {
  epoch::RecoverOnce(*locks_, leaf, leaf->node_epoch, ready_leaf_word_, [&] { RepairLeaf(leaf); });
}

void DurablePolicy::RecoverInterior(InteriorNode* in) const {
  epoch::RecoverOnce(*locks_, in, in->recovered_in, x_, [&] {
    // An interior node's contents are restored eagerly (external log replay at open); only its
    // version word, which a crash may have left locked or dirty, is rebuilt: root bit from the
    // parent link, no lock, counters from zero.
    in->version().Reset(NodeVersion::Initial(
        /*leaf=*/false, /*root=*/in->parent.raw(std::memory_order_relaxed) == 0, false));
    // Release: publishes the rebuilt version (pairs with Ready's acquire load). Nothing on media
    // depends on this tag: a node found with an older one in a later run is rebuilt again, so
    // it needs no flush and no dirty registration.
    in->recovered_in.store(x_, std::memory_order_release);
    counters_->interiors_recovered.fetch_add(1, std::memory_order_relaxed);
  });
}

// RepairLeaf's value lines, of a leaf whose node epoch is n: in each line, the slot its valid log
// names rolled back when the log says so (V1), then the log dropped (V2); if either line was
// rewritten, both are flushed and fenced before this returns, so before the caller re-arms the
// node epoch.
void DurablePolicy::RepairValueLines(LeafNode* leaf, uint64_t n) const {
  bool rewrote = false;
  for (int line = 0; line < 2; ++line) {
    std::atomic<uint64_t>& log_word = ValueLogOfLine(leaf, line);
    const PackedValLog log = PackedValLog::FromBits(log_word.load(std::memory_order_relaxed));
    if (!log.valid()) continue;
    const int slot = static_cast<int>(log.index());
    const bool in_line = slot >= line * 7 && slot < line * 7 + 7;
    const bool rollback = in_line && log.NeedsRollback(*m_, n);
    if (rollback) counters_->values_rolled_back.fetch_add(1, std::memory_order_relaxed);
    if (mutation::Swapped(kValueRecoverOrder)) {  // the mutant: log dropped before the rollback
      log_word.store(PackedValLog::Invalid(x_).bits(), std::memory_order_release);
      p_.StoreHint(&log_word, 8);
      if (rollback) leaf->lv[slot].store(log.offset(), std::memory_order_release);
      p_.StoreHint(&log_word, 8);
    } else {
      // V1. Roll the slot back. The log still names it: a crash now restores the same value.
      if (rollback) {
        leaf->lv[slot].store(log.offset(), std::memory_order_relaxed);
        p_.StoreHint(&log_word, 8);
      }
      // V2. Drop the log. Release: after V1 in this line. After: the line holds its recovered
      //     value and no log.
      log_word.store(PackedValLog::Invalid(x_).bits(), std::memory_order_release);
      p_.StoreHint(&log_word, 8);
    }
    rewrote = true;
  }
  if (rewrote) {
    // Both value lines durable before R3 below: were line 0 to reach media with the new epoch
    // first, a line still holding a failed value and its log would resolve the log against
    // the new epoch and keep the failed value.
    p_.Flush(kRecoverValueFlush, &leaf->value_log0, 2 * kCacheLine);
    p_.Fence(kRecoverValueFence);
  }
}

void DurablePolicy::RepairLeaf(LeafNode* leaf) const {
  const uint64_t n = LeafEpoch::Epoch(leaf->node_epoch.load(std::memory_order_acquire));
  const bool failed = m_->IsFailed(n);
  // Everything below (and any change in the current epoch, which may find its first change
  // already done when the current epoch is execution_first) must reach media at the boundary.
  if (!mutation::Swapped(kDirtyLeafRepair)) m_->RecordDirty(leaf, sizeof(LeafNode));
  // Value lines first (docs/epoch.md, invariant 3): repaired and durable before the node epoch
  // is re-armed, since from then on recovery would resolve their logs against the new epoch.
  RepairValueLines(leaf, n);
  // Line 0, in the order of epoch::LazyRecover (docs/epoch.md, "Node records").
  // R1. Roll the permutation back if n failed. node_epoch still names n: a crash here restores
  //     perm_log again.
  if (failed) {
    counters_->perms_rolled_back.fetch_add(1, std::memory_order_relaxed);
    leaf->permutation.store(leaf->perm_log.load(std::memory_order_relaxed),
                            std::memory_order_relaxed);
    p_.StoreHint(leaf, kCacheLine);
  }
  const uint64_t perm = leaf->permutation.load(std::memory_order_relaxed);
  // The version word may have been left locked, dirty or deleted by the crash: rebuilt (root
  // bit from the parent link) before R3 publishes the node to other threads.
  leaf->version().Reset(NodeVersion::Initial(
      /*leaf=*/true, /*root=*/leaf->parent.raw(std::memory_order_relaxed) == 0, false));
  const uint64_t word = LeafEpoch::Make(x_, LeafEpoch::kInsertAllowed);
  if (mutation::Swapped(kLeafRecoverOrder)) {  // the mutant: epoch re-armed before perm_log
    leaf->node_epoch.store(word, std::memory_order_release);
    p_.StoreHint(leaf, kCacheLine);
    leaf->perm_log.store(perm, std::memory_order_release);
    p_.StoreHint(leaf, kCacheLine);
  } else {
    // R2. perm_log := the recovered permutation. Release: after R1. Before and after: n's
    //     verdict (restore or keep) yields this same permutation.
    leaf->perm_log.store(perm, std::memory_order_release);
    p_.StoreHint(leaf, kCacheLine);
    // R3. node_epoch := execution_first. Release: after R2, and publishes the repair (pairs
    //     with Ready's acquire). After: a failed execution_first restores perm_log, the
    //     recovered permutation; a completed one keeps the permutation.
    leaf->node_epoch.store(word, std::memory_order_release);
    p_.StoreHint(leaf, kCacheLine);
  }
  // A change later in this same epoch writes value logs tagged with it, and until this epoch
  // completes, line 0 may still hold its pre-repair epoch n on media. Those logs are resolved
  // against n then: right when n completed and lies within 2^16 epochs (WidenUp reaches the
  // current epoch), wrong when n failed (Widen looks below n) or is farther. In those cases the
  // repaired line 0 is made durable now, before any such change.
  const uint64_t now = m_->LocalSlot().epoch.load(std::memory_order_relaxed);
  if (failed || PackedValLog::NeedsExternalFallback(now, n)) {
    p_.Flush(kRecoverNodeFlush, leaf, kCacheLine);
    p_.Fence(kRecoverNodeFence);
  }
  counters_->leaves_recovered.fetch_add(1, std::memory_order_relaxed);
}

}  // namespace pmrt::ds_internal
