// In-cache-line logging (InCLL): undo records that live in the same cache line as the data they
// protect, so logging needs no flush and no fence. The protocol, the epoch-tag widening rule and
// the cross-line rules are in docs/epoch.md, section "In-cache-line logging".
//
// Why it works: two stores to one cache line reach media in program order (PCSO, x86), and the
// epoch boundary writes back every line registered dirty in the epoch. So if a line carries
// "old value, then epoch tag, then new value" in that store order, any state the line can have
// on media after a crash is a prefix of that sequence, and recovery can tell from the tag alone
// whether the undo copy must be applied.
//
// This header provides:
//   InCLLWord<T>   one 8-byte word + its undo copy + its epoch tag (one line, 32-byte aligned).
//   PackedValLog   the paper's packed value log: index:4 | offset>>4 :44 | epoch low 16 bits,
//                  with the widening and external-log fallback rules for the 16-bit tag.
//   NodeInCLL      a node's record (node epoch, logged permutation, flags) kept in the line of
//                  the permutation word; BeginModify / StoreLogged / LazyRecover.
//   RecoveryLocks  striped volatile locks, and RecoverOnce: lazy repair on first access.
//   SharesLine, PMRT_ASSERT_SAME_LINE: prove a field and its log share a line.
//
// Example (a counter in pool memory; `m` is the epoch::Manager, `p` its persister):
//
//   struct alignas(64) Counter { pmrt::epoch::InCLLWord<uint64_t> hits; };
//   auto dirty = [&](const void* a, size_t n) { m.RecordDirty(a, n); };
//   // First access after a restart (any thread; cheap once repaired):
//   RecoverOnce(locks, &c->hits, c->hits.epoch, m, [&] { c->hits.Recover(m, p, dirty); });
//   // In a guard of epoch e, under the writer's own lock:
//   c->hits.Store(c->hits.Load() + 1, g.epoch(), p, dirty);
//
// Ordering: in each sequence the first store is relaxed and every later one is a release
// store, which keeps all earlier stores before it for the compiler and the CPU alike (so no
// std::atomic_signal_fence is needed); PCSO then keeps that order on media.
// Every ordering-sensitive store below is followed by `Persister::StoreHint`, so the crash
// simulator can leave the line in each intermediate state. Each such sequence has a store-order
// mutant (`mutation::Swapped(site)`) that tests/epoch/incll_test.cc must catch.
#ifndef PMRT_EPOCH_INCLL_H_
#define PMRT_EPOCH_INCLL_H_

#include <atomic>
#include <cassert>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <type_traits>
#include <utility>

#include "epoch/epoch_view.h"
#include "epoch/persist.h"

namespace pmrt::epoch {

// ---- cache-line placement -----------------------------------------------------------------

// True when [off_a, off_a+size_a) and [off_b, off_b+size_b) lie within one 64-byte line,
// offsets taken from a line-aligned base (the start of an alignas(64) struct).
constexpr bool SharesLine(size_t off_a, size_t size_a, size_t off_b, size_t size_b) {
  if (size_a == 0 || size_b == 0) return false;
  const size_t line = off_a / kCacheLine;
  return (off_a + size_a - 1) / kCacheLine == line && off_b / kCacheLine == line &&
         (off_b + size_b - 1) / kCacheLine == line;
}

// Runtime form for addresses (placement in memory the type system can't see, e.g. a pool).
inline bool SharesLineAt(const void* a, size_t size_a, const void* b, size_t size_b) {
  const auto base = reinterpret_cast<uintptr_t>(a) & ~uintptr_t{kCacheLine - 1};
  return SharesLine(reinterpret_cast<uintptr_t>(a) - base, size_a,
                    reinterpret_cast<uintptr_t>(b) - base, size_b);
}

// True when [p, p+n) does not straddle a line boundary.
inline bool OnOneLine(const void* p, size_t n) { return SharesLineAt(p, n, p, n); }

// Static proof that two fields of `Type` share a cache line. REQUIRES: Type is alignas(64) (or
// a multiple) and standard-layout, so offsets from its start are offsets within lines.
#define PMRT_ASSERT_SAME_LINE(Type, field_a, field_b)                                      \
  static_assert(alignof(Type) % ::pmrt::kCacheLine == 0, #Type " must be alignas(64)");    \
  static_assert(::pmrt::epoch::SharesLine(offsetof(Type, field_a), sizeof(Type::field_a),  \
                                          offsetof(Type, field_b), sizeof(Type::field_b)), \
                #Type "::" #field_a " and " #Type "::" #field_b " must share a cache line")

// ---- common parts --------------------------------------------------------------------------

// The "record dirty" hook: called with the InCLL record's address and size at the first
// modification of the record in an epoch (and at its lazy recovery), so the epoch boundary
// writes the line back. For the epoch layer: [&](const void* a, size_t n) { m.RecordDirty(a, n); }
// A caller that dirties more than the record (a whole node) may ignore the arguments.
template <class F>
concept DirtyRecorder = std::invocable<F&, const void*, size_t>;

// Store-order mutants (mutation gate): when active, the two stores that must come first are
// performed in the wrong order. tests/epoch/incll_test.cc shows the crash simulator catches each.
inline constexpr Site kWordStoreOrder{"epoch.incll.word.store_order"};
inline constexpr Site kWordRecoverOrder{"epoch.incll.word.recover_order"};
inline constexpr Site kNodeStoreOrder{"epoch.incll.node.store_order"};
inline constexpr Site kNodeRecoverOrder{"epoch.incll.node.recover_order"};

// What a lazy recovery did.
enum class Recovery : uint8_t {
  kNotNeeded,   // the tag is already of this execution
  kKept,        // the tag named a completed epoch: value kept, record re-armed
  kRolledBack,  // the tag named a failed epoch: undo copy restored, record re-armed
};

// A release store followed by a store hint: for a field whose stores must stay after the
// InCLL record's stores in program (and so media) order, e.g. the permutation after BeginModify.
inline void StoreLogged(std::atomic<uint64_t>& field, uint64_t v, const Persister& p) {
  // Release: orders the record's earlier stores in this line before this one (no compiler or
  // CPU reordering); PCSO then keeps that order on media.
  field.store(v, std::memory_order_release);
  p.StoreHint(&field, sizeof(field));
}

// ---- InCLLWord ----------------------------------------------------------------------------

// One logged 8-byte word. Layout (32 bytes, 32-aligned, so it never straddles a line):
//
//   +---------+---------+---------+---------+
//   | value   | undo    | epoch   | (pad)   |
//   +---------+---------+---------+---------+
//
// Invariants (on media and in cache):
//   1. If epoch = e then undo holds the value as of the start of e (the store order below makes
//      every persisted prefix keep this).
//   2. A tag below the execution's first epoch belongs to an earlier run: Recover() must run
//      before any Store() in this execution (RecoverOnce does it on first access).
//   3. After Recover(), epoch >= execution_first and undo == value.
// Thread safety: one writer at a time (the caller's lock); Load() may race with Store().
template <class T>
struct alignas(32) InCLLWord {
  static_assert(sizeof(T) == 8 && std::is_trivially_copyable_v<T>,
                "T: 8 bytes, trivially copyable");
  std::atomic<T> value;         // the live value; Load() reads it
  std::atomic<T> undo;          // value as of the start of epoch `epoch`
  std::atomic<uint64_t> epoch;  // the last epoch in which value was modified (logged)

  T Load() const { return value.load(std::memory_order_acquire); }  // pairs with Store's release
  uint64_t tag() const { return epoch.load(std::memory_order_acquire); }

  // Sets value to `v` in epoch `e`. On the first modification in e, calls dirty(this, 32) and
  // logs the old value. Returns true when it was the first modification in e.
  // REQUIRES: the caller is inside epoch e and holds the writer lock; Recover() already ran in
  // this execution (invariant 2).
  template <DirtyRecorder Dirty>
  bool Store(T v, uint64_t e, const Persister& p, Dirty&& dirty) {
    assert(OnOneLine(this, sizeof(*this)));  // placement in pool memory
    const uint64_t tag_now = epoch.load(std::memory_order_relaxed);
    assert(tag_now <= e);  // tags never run ahead of the writer's epoch
    const bool first = tag_now != e;
    if (first) {
      dirty(static_cast<const void*>(this), sizeof(*this));
      Log(e, p);
    }
    // 3. New value. Before: the line holds (old, old, e) or an earlier prefix, all of which
    //    recover to the old value. After: a crash in a failed e restores undo (invariant 1); a
    //    completed e keeps v.
    value.store(v, std::memory_order_release);  // release: after the tag store (and readers'
    p.StoreHint(this, sizeof(*this));           // acquire in Load())
    return first;
  }

  // Lazy recovery, idempotent. If the tag predates this execution: a failed tag restores the
  // undo copy; then the record is re-armed (undo := value, epoch := execution_first) so that
  // the recovered value is also the undo for this execution's first epoch: a crash in this
  // execution with no further write still recovers it, and a Store in execution_first (which
  // sees its own epoch in the tag and logs nothing) has the right undo. Calls dirty(this, 32)
  // when it writes, so the repair becomes durable at the next boundary (a Store in
  // execution_first would not register the line itself).
  // REQUIRES: no concurrent Store or Recover on this word (use RecoverOnce).
  template <DirtyRecorder Dirty>
  Recovery Recover(const EpochView& view, const Persister& p, Dirty&& dirty) {
    const uint64_t t = epoch.load(std::memory_order_acquire);
    const uint64_t x = view.execution_first();
    if (t >= x) return Recovery::kNotNeeded;
    dirty(static_cast<const void*>(this), sizeof(*this));
    const bool failed = view.IsFailed(t);
    if (failed) {
      // R1. Roll back. The tag still names the failed epoch t, so a crash just after this
      //     store restores the same undo again (value == undo either way).
      value.store(undo.load(std::memory_order_relaxed), std::memory_order_relaxed);
      p.StoreHint(this, sizeof(*this));
    }
    Rearm(x, p);
    return failed ? Recovery::kRolledBack : Recovery::kKept;
  }

 private:
  // Steps 1-2 of Store: the undo copy, then the tag.
  void Log(uint64_t e, const Persister& p) {
    if (mutation::Swapped(kWordStoreOrder)) {
      LogSwapped(e, p);
      return;
    }
    // 1. Undo copy. Before and after: the tag still names an older, completed epoch (or this
    //    execution's re-armed one), so recovery keeps value and ignores undo.
    undo.store(value.load(std::memory_order_relaxed), std::memory_order_relaxed);
    p.StoreHint(this, sizeof(*this));
    // 2. Tag. Release: the undo store stays before it. Before: as above. After: if e fails,
    //    recovery restores undo, which step 1 made the value at e's start; value is unchanged
    //    yet, so the restore is harmless.
    epoch.store(e, std::memory_order_release);
    p.StoreHint(this, sizeof(*this));
  }

  // The mutant: tag before undo. A crash between the two leaves tag = e with the undo of an
  // older epoch, and recovery "restores" a stale value.
  void LogSwapped(uint64_t e, const Persister& p) {
    epoch.store(e, std::memory_order_release);
    p.StoreHint(this, sizeof(*this));
    undo.store(value.load(std::memory_order_relaxed), std::memory_order_release);
    p.StoreHint(this, sizeof(*this));
  }

  // R2-R3 of Recover: undo := value, then epoch := x.
  void Rearm(uint64_t x, const Persister& p) {
    const T v = value.load(std::memory_order_relaxed);
    if (mutation::Swapped(kWordRecoverOrder)) {
      epoch.store(x, std::memory_order_release);
      p.StoreHint(this, sizeof(*this));
      undo.store(v, std::memory_order_release);
      p.StoreHint(this, sizeof(*this));
      return;
    }
    // R2. Undo := the recovered value. Release: after R1. Before/after: the tag is still the
    //     old one, whose verdict (restore or keep) yields this same value.
    undo.store(v, std::memory_order_release);
    p.StoreHint(this, sizeof(*this));
    // R3. Tag := execution_first. Release: after R2. After: if execution_first fails, recovery
    //     restores undo = the recovered value; otherwise keeps value (the same value, or a newer
    //     one a later Store logged under its own epoch).
    epoch.store(x, std::memory_order_release);
    p.StoreHint(this, sizeof(*this));
  }
};

static_assert(sizeof(InCLLWord<uint64_t>) == 32 && alignof(InCLLWord<uint64_t>) == 32);
static_assert(std::is_standard_layout_v<InCLLWord<uint64_t>>);
static_assert(offsetof(InCLLWord<uint64_t>, value) == 0);
static_assert(offsetof(InCLLWord<uint64_t>, undo) == 8);
static_assert(offsetof(InCLLWord<uint64_t>, epoch) == 16);
static_assert(std::atomic<uint64_t>::is_always_lock_free);

// ---- PackedValLog -------------------------------------------------------------------------

// The paper's packed value log (one 8-byte word in a node's value line):
//
//   63            48 47                                  4 3     0
//   +---------------+-------------------------------------+-------+
//   | epoch low 16  | offset >> 4 (44 bits)               | index |
//   +---------------+-------------------------------------+-------+
//
// index: the slot whose old value is logged, 0..14; 15 = no slot logged (kInvalidIndex).
// offset: the slot's old value, a 16-byte aligned pool offset below 2^48 (0 = null).
// epoch low 16: the low bits of the epoch in which the log was written.
//
// The 16-bit tag is widened against the node's full epoch N (NodeInCLL::epoch as on media):
// if N failed, the log's epoch is the largest one <= N with those bits (Widen); otherwise the
// smallest one >= N (WidenUp). This is exact when the writer obeys NeedsExternalFallback and
// rewrites every value log of the node at the node's first modification in each epoch
// (docs/epoch.md has the case analysis). A zero word is a log of slot 0, offset 0: initialize
// value logs with Invalid(creation epoch).
class PackedValLog {
 public:
  static constexpr uint32_t kInvalidIndex = 15;
  static constexpr int kIndexBits = 4;
  static constexpr int kOffsetBits = 44;
  static constexpr int kEpochBits = 16;
  static constexpr uint64_t kEpochSpan = uint64_t{1} << kEpochBits;  // 65536
  // The largest distance from the node's previous epoch at which the 16-bit tag still widens
  // to exactly one epoch.
  static constexpr uint64_t kMaxEpochGap = kEpochSpan - 1;
  static constexpr uint64_t kOffsetLimit = uint64_t{1} << (kOffsetBits + 4);  // 2^48
  static constexpr uint64_t kNoEpoch = UINT64_MAX;  // Widen's "no such epoch"

  constexpr PackedValLog() = default;
  static constexpr PackedValLog FromBits(uint64_t bits) { return PackedValLog(bits); }

  // Encodes a log of slot `index` holding `offset`, written in `epoch`. Returns false (and
  // leaves *out alone) when it can't: index >= 15, offset not 16-aligned or >= 2^48. The
  // caller must then use the external log.
  static constexpr bool TryEncode(uint32_t index, uint64_t offset, uint64_t epoch,
                                  PackedValLog* out) {
    if (index >= kInvalidIndex || offset % 16 != 0 || offset >= kOffsetLimit) return false;
    *out = PackedValLog(Pack(index, offset, epoch));
    return true;
  }
  // "No slot logged in `epoch`": what a node's first modification in an epoch writes into
  // every value log it does not use.
  static constexpr PackedValLog Invalid(uint64_t epoch) {
    return PackedValLog(Pack(kInvalidIndex, 0, epoch));
  }

  constexpr uint64_t bits() const { return bits_; }
  constexpr uint32_t index() const { return static_cast<uint32_t>(bits_ & 0xF); }
  constexpr bool valid() const { return index() != kInvalidIndex; }
  constexpr uint64_t offset() const { return ((bits_ >> kIndexBits) & kOffsetMask) << 4; }
  constexpr uint16_t epoch_low() const { return static_cast<uint16_t>(bits_ >> 48); }

  // The largest epoch <= reference whose low 16 bits are `low`; kNoEpoch if none (reference
  // below the distance).
  static constexpr uint64_t Widen(uint16_t low, uint64_t reference) {
    const uint64_t back = (reference - low) & (kEpochSpan - 1);
    return reference >= back ? reference - back : kNoEpoch;
  }
  // The smallest epoch >= reference whose low 16 bits are `low`; kNoEpoch on overflow.
  static constexpr uint64_t WidenUp(uint16_t low, uint64_t reference) {
    const uint64_t ahead = (low - reference) & (kEpochSpan - 1);
    return reference <= UINT64_MAX - ahead ? reference + ahead : kNoEpoch;
  }

  // The fallback rule. At a node's first modification in `current_epoch`, with `node_epoch`
  // the node's epoch before it: true when a 16-bit tag written now could not be widened back
  // unambiguously, i.e. when current_epoch - node_epoch > kMaxEpochGap (= 65535), or the clock
  // is behind the node. Then the node goes to the external log for this epoch (the value logs
  // are still rewritten with Invalid(current_epoch)).
  // Why 65535: after a crash in current_epoch the log's epoch is node_epoch or current_epoch,
  // and the widening reference is whichever of them reached media in the node line; both must
  // lie within one 2^16 window of it. At a gap of exactly 2^16 both have the same low bits and
  // a log left over from node_epoch would be taken for the failed epoch's.
  static constexpr bool NeedsExternalFallback(uint64_t current_epoch, uint64_t node_epoch) {
    return current_epoch < node_epoch || current_epoch - node_epoch > kMaxEpochGap;
  }

  // The full epoch this log was written in, given the node's durable epoch and whether that
  // epoch failed (see the class comment).
  constexpr uint64_t ResolveEpoch(uint64_t node_epoch, bool node_epoch_failed) const {
    return node_epoch_failed ? Widen(epoch_low(), node_epoch) : WidenUp(epoch_low(), node_epoch);
  }
  // True when recovery must write offset() back into slot index(): the log names a slot and
  // was written in a failed epoch.
  bool NeedsRollback(const EpochView& view, uint64_t node_epoch) const {
    if (!valid()) return false;
    const uint64_t e = ResolveEpoch(node_epoch, view.IsFailed(node_epoch));
    return e != kNoEpoch && view.IsFailed(e);
  }

  friend constexpr bool operator==(PackedValLog a, PackedValLog b) { return a.bits_ == b.bits_; }

 private:
  static constexpr uint64_t kOffsetMask = (uint64_t{1} << kOffsetBits) - 1;
  constexpr explicit PackedValLog(uint64_t bits) : bits_(bits) {}
  static constexpr uint64_t Pack(uint32_t index, uint64_t offset, uint64_t epoch) {
    return (epoch & (kEpochSpan - 1)) << 48 | ((offset >> 4) & kOffsetMask) << kIndexBits |
           (index & 0xF);
  }
  uint64_t bits_ = 0;
};
static_assert(sizeof(PackedValLog) == 8 && std::is_trivially_copyable_v<PackedValLog>);

// ---- NodeInCLL ----------------------------------------------------------------------------

// A node's InCLL record (the paper's InCLL_p): the node epoch, the permutation as of that
// epoch's start, and two flags that only mean something while `epoch` is the current epoch.
// Embed it next to the permutation word it logs, inside one line of an alignas(64) node:
//
//   struct alignas(64) Leaf {
//     pmrt::epoch::NodeInCLL incll;            // 24 bytes
//     std::atomic<uint64_t> permutation;       // same line
//     ...
//   };
//   PMRT_ASSERT_SAME_LINE(Leaf, incll, permutation);
//
// Invariants: as InCLLWord's, with perm_log for undo and the permutation for value.
// Thread safety: all calls under the node's writer lock (LazyRecover under RecoverOnce).
struct NodeInCLL {
  static constexpr uint32_t kInsertAllowed = 1;  // inserts may rely on perm_log alone
  static constexpr uint32_t kLogged = 2;         // the node is in the external log for `epoch`

  std::atomic<uint64_t> epoch;     // nodeEpoch: the last epoch in which the node was modified
  std::atomic<uint64_t> perm_log;  // permutationInCLL: the permutation as of epoch's start
  std::atomic<uint32_t> flags;     // kInsertAllowed | kLogged; reset at each first modification

  bool insert_allowed() const {
    return (flags.load(std::memory_order_relaxed) & kInsertAllowed) != 0;
  }
  bool logged() const { return (flags.load(std::memory_order_relaxed) & kLogged) != 0; }
  // Flags are semantically transient (re-armed by BeginModify and LazyRecover), so they need no
  // store order: relaxed, under the writer lock.
  void clear_insert_allowed() {
    flags.store(flags.load(std::memory_order_relaxed) & ~kInsertAllowed, std::memory_order_relaxed);
  }
  void set_logged() {
    flags.store(flags.load(std::memory_order_relaxed) | kLogged, std::memory_order_relaxed);
  }
};
static_assert(sizeof(NodeInCLL) == 24 && std::is_standard_layout_v<NodeInCLL>);

// Prepares a modification of `perm` in epoch `e`. On the first modification in e: calls
// dirty(&n, sizeof n), logs perm into n.perm_log, sets n.epoch = e, resets the flags
// (insert allowed, not logged) and returns true. Otherwise returns false and does nothing.
// The caller then changes perm with StoreLogged (never before this call).
// REQUIRES: n and perm share a line; the writer lock; LazyRecover already ran this execution.
template <DirtyRecorder Dirty>
bool BeginModify(NodeInCLL& n, std::atomic<uint64_t>& perm, uint64_t e, const Persister& p,
                 Dirty&& dirty) {
  assert(SharesLineAt(&n, sizeof(n), &perm, sizeof(perm)));
  const uint64_t tag = n.epoch.load(std::memory_order_relaxed);
  assert(tag <= e);
  if (tag == e) return false;
  dirty(static_cast<const void*>(&n), sizeof(n));
  const uint64_t old = perm.load(std::memory_order_relaxed);
  if (mutation::Swapped(kNodeStoreOrder)) {  // the mutant: epoch before perm_log
    n.epoch.store(e, std::memory_order_release);
    p.StoreHint(&n, sizeof(n));
    n.perm_log.store(old, std::memory_order_release);
    p.StoreHint(&n, sizeof(n));
  } else {
    // 1. perm_log := perm. Before and after: the node epoch is an older, completed one (or this
    //    execution's re-armed one): recovery keeps perm and ignores perm_log.
    n.perm_log.store(old, std::memory_order_relaxed);
    p.StoreHint(&n, sizeof(n));
    // 2. Node epoch := e. Release: after step 1. After: if e fails, recovery restores perm_log,
    //    the permutation at e's start; perm is unchanged yet (the caller's StoreLogged follows).
    n.epoch.store(e, std::memory_order_release);
    p.StoreHint(&n, sizeof(n));
  }
  n.flags.store(NodeInCLL::kInsertAllowed, std::memory_order_relaxed);  // transient: any order
  return true;
}

// Lazy recovery of the node line, idempotent: if the node epoch predates this execution,
// restores perm from perm_log when that epoch failed, then re-arms the record for this
// execution (perm_log := perm, flags reset, epoch := execution_first), calling dirty(&n, 24).
// REQUIRES: no concurrent writer (RecoverOnce on &n.epoch). If the node's other lines depend
// on its epoch (value logs), repair them and make that durable (Flush + Fence) BEFORE calling
// this: once the re-armed epoch reaches media, recovery no longer looks at them
// (docs/epoch.md, "Value logs", invariant 3).
template <DirtyRecorder Dirty>
Recovery LazyRecover(NodeInCLL& n, std::atomic<uint64_t>& perm, const EpochView& view,
                     const Persister& p, Dirty&& dirty) {
  const uint64_t t = n.epoch.load(std::memory_order_acquire);
  const uint64_t x = view.execution_first();
  if (t >= x) return Recovery::kNotNeeded;
  dirty(static_cast<const void*>(&n), sizeof(n));
  const bool failed = view.IsFailed(t);
  if (failed) {
    // R1. Roll back. The epoch still names failed t: a crash here restores perm_log again.
    perm.store(n.perm_log.load(std::memory_order_relaxed), std::memory_order_relaxed);
    p.StoreHint(&perm, sizeof(perm));
  }
  const uint64_t v = perm.load(std::memory_order_relaxed);
  if (mutation::Swapped(kNodeRecoverOrder)) {  // the mutant: epoch before perm_log
    n.epoch.store(x, std::memory_order_release);
    p.StoreHint(&n, sizeof(n));
    n.perm_log.store(v, std::memory_order_release);
    p.StoreHint(&n, sizeof(n));
  } else {
    // R2. perm_log := the recovered permutation. Release: after R1. Before/after: the old
    //     epoch's verdict (restore or keep) still yields this same permutation.
    n.perm_log.store(v, std::memory_order_release);
    p.StoreHint(&n, sizeof(n));
    // R3. Epoch := execution_first. Release: after R2. After: a failed execution_first
    //     restores perm_log, the recovered permutation; otherwise perm is kept.
    n.epoch.store(x, std::memory_order_release);
    p.StoreHint(&n, sizeof(n));
  }
  n.flags.store(NodeInCLL::kInsertAllowed, std::memory_order_relaxed);  // transient
  return failed ? Recovery::kRolledBack : Recovery::kKept;
}

// ---- lazy recovery on first access ----------------------------------------------------------

// Volatile striped locks for lazy recovery: persistent locks are garbage after a crash, so the
// repair of an object is serialized by a stripe chosen by its address. 1024 stripes of one
// cache line each (64 KiB, allocated once). Thread-safe.
class RecoveryLocks {
 public:
  static constexpr size_t kStripes = 1024;
  RecoveryLocks() : stripes_(std::make_unique<Stripe[]>(kStripes)) {}

  std::mutex& For(const void* obj) { return stripes_[Index(obj)].mu; }
  static size_t Index(const void* obj) {
    // Fibonacci hashing of the line address: neighbouring lines land on different stripes.
    const uint64_t line = reinterpret_cast<uintptr_t>(obj) / kCacheLine;
    return static_cast<size_t>((line * 0x9E3779B97F4A7C15ull) >> 54);  // top 10 bits
  }

 private:
  struct alignas(64) Stripe {
    std::mutex mu;
  };
  std::unique_ptr<Stripe[]> stripes_;
};
static_assert(RecoveryLocks::kStripes == size_t{1} << 10);

// Runs `recover()` once for the object at `obj` whose epoch tag is `tag`, if the tag predates
// this execution; returns true when this call ran it. Fast path: one acquire load and a
// compare, no lock. Slow path: the object's stripe lock, a re-check, then recover().
// REQUIRES: recover() leaves tag >= execution_first (InCLLWord::Recover and LazyRecover do) and
// does not call RecoverOnce itself (stripes are not recursive).
template <class F>
bool RecoverOnce(RecoveryLocks& locks, const void* obj, const std::atomic<uint64_t>& tag,
                 uint64_t execution_first, F&& recover) {
  // Acquire pairs with the release tag store that ends recover() (R3): a thread that sees the
  // re-armed tag also sees the repaired contents.
  if (tag.load(std::memory_order_acquire) >= execution_first) [[likely]] {
    return false;
  }
  std::lock_guard<std::mutex> lock(locks.For(obj));
  if (tag.load(std::memory_order_acquire) >= execution_first) return false;  // repaired meanwhile
  recover();
  assert(tag.load(std::memory_order_relaxed) >= execution_first);
  return true;
}
template <class F>
bool RecoverOnce(RecoveryLocks& locks, const void* obj, const std::atomic<uint64_t>& tag,
                 const EpochView& view, F&& recover) {
  return RecoverOnce(locks, obj, tag, view.execution_first(), std::forward<F>(recover));
}

}  // namespace pmrt::epoch

#endif  // PMRT_EPOCH_INCLL_H_
