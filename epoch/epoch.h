// Fine-grained checkpointing: the global epoch clock of a pool, its advance, and recovery of the
// failed epochs. docs/epoch.md has the protocol with every store order.
//
//   auto epochs = pmrt::epoch::Manager::Open(*pool, {});   // recovers, then starts the clock
//   {
//     pmrt::epoch::Guard g(**epochs);        // every piece of epoch-scoped work runs in a guard
//     (*epochs)->log().Snapshot(obj, sizeof(*obj), &obj->logged_epoch);  // first write in e
//     obj->x = 1;                             // plain store: durable at the next boundary
//   }
//   (*epochs)->Sync();                        // returns once everything above is durable
//
// Contract (DESIGN.md section 2): work done in epoch e is durable once epoch e+1 has begun.
// After a crash in e, the pool reopens as it was when e began.
//
// The advance from e to e+1 (background thread every `interval`, or Advance()):
//   1. close e: global := (e+1 | closing); a new guard waits until step 5.
//   2. wait until no thread is still inside a guard of e (a guard's epoch never changes).
//   3. flush every range registered dirty in e (per-thread lists), then one fence. A thread
//      that tries to enter a guard while e is closed writes back its own list meanwhile
//      (its lines are in its own cache) and fences it; the advancer waits for that.
//   4. completed := e, flushed and fenced: from here a crash recovers to the start of e+1.
//   5. open e+1 (global := e+1); blocks of e's external log are reused; objects retired in e
//      are deleted (no guard can still hold them).
// Epochs never overlap: no change of e+1 exists before e is durably complete, so a crash
// leaves exactly one epoch whose changes must be rolled back, and each per-object or per-line
// undo record (one per epoch) is enough. At open the epochs after `completed` are recorded as
// failed (c+1, and c+2 for good measure: it never holds changes).
//
// Thread safety: everything here may be called from any thread. Advance() or Sync() while the
// calling thread holds a Guard would wait for that guard for ever: they return
// kFailedPrecondition instead.
#ifndef PMRT_EPOCH_EPOCH_H_
#define PMRT_EPOCH_EPOCH_H_

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "epoch/epoch_layout.h"
#include "epoch/epoch_view.h"
#include "epoch/external_log.h"
#include "epoch/per_thread.h"
#include "epoch/persist.h"
#include "epoch/pool.h"

namespace pmrt::epoch {

class Manager;

struct ManagerOptions {
  // Period of the background advancer; zero disables it (advance with Advance()/Sync()).
  std::chrono::milliseconds interval{64};
  // Threads that share the boundary's flush work (the advancer is one of them), when the
  // closing epoch has at least flush_parallel_from dirty ranges.
  int flush_threads = 1;
  size_t flush_parallel_from = 1024;
  // Threads for replaying the external log at open.
  int replay_threads = 2;
  // The longest a boundary waits for the guards of the closing epoch (new guards wait
  // meanwhile). An epoch whose guards are still held then cannot complete: the pool enters its
  // failed mode (docs/durability.md) and the epoch reopens, so that no guard waits for it.
  std::chrono::milliseconds max_guard_wait{10000};
  // For `pmrt repair` only: this open may record its crash in the failed-epoch set's last slot,
  // which every other open leaves free, so that a pool whose set is full can still be opened to
  // roll the set up (ClearFailedEpochs).
  bool repair = false;
};

struct ManagerStats {
  uint64_t advances = 0;
  uint64_t lines_flushed = 0;  // dirty lines written back at boundaries
  uint64_t ranges_flushed = 0;
  // Boundary time: steps 1-5 of Manager::Advance, the time new guards wait; its parts below.
  std::chrono::nanoseconds boundary_time{0};
  std::chrono::nanoseconds guard_wait_time{0};  // step 2: the closing epoch's guards ending
  std::chrono::nanoseconds source_time{0};      // step 3: the flush sources (the heap's bitmaps)
  std::chrono::nanoseconds flush_time{0};       // step 3: writing the dirty lines back
  std::chrono::nanoseconds reclaim_time{0};     // step 6, after the next epoch opened
  uint64_t log_entries = 0;                     // external log entries written
  uint64_t log_entries_replayed = 0;            // at the last open
  uint64_t log_blocks_scanned = 0;              // block headers read at the last open
  uint64_t retired = 0, reclaimed = 0;
  uint64_t helped_flushes = 0;      // dirty lists written back by their own thread (HelpFlush)
  uint64_t requested_advances = 0;  // advances the advancer started early (RequestAdvance)
  // CPU time of the background advancer thread since the manager opened (0 without one).
  std::chrono::nanoseconds advancer_cpu{0};
};

// Per-thread state, one per (thread, manager); lives in the manager's registry.
struct alignas(64) ThreadSlot {
  // The epoch this thread's guard runs in, 0 when it holds none. Written by the owner only.
  std::atomic<uint64_t> epoch{0};
  int depth = 0;  // guard nesting, owner only
  // Dirty ranges per epoch parity: the owner appends to dirty[e & 1] while in a guard of e;
  // the advancer drains dirty[e & 1] only after every thread has left e (step 2).
  std::vector<Range> dirty[2];
  // Retired objects per epoch mod 3: the owner appends to retired[e % 3] in a guard of e; the
  // advancer of e -> e+1 frees retired[e % 3] while no guard is open.
  std::vector<std::pair<void*, std::function<void(void*)>>> retired[3];
  ExternalLogCursor log_cursor;  // this thread's append position in the external log
  // Who writes back dirty[e & 1] at the boundary of e: the advancer, or the owner itself when
  // it waits at the closed epoch (Manager::HelpFlush). The last epoch whose list was claimed,
  // and the last one whose write-back (flushes + the claimer's fence) is done.
  std::atomic<uint64_t> flush_claim{0};
  std::atomic<uint64_t> flush_done{0};
};

class Manager : public EpochView {
 public:
  // Attaches to `pool` (one Manager per pool at a time): reads the durable epoch state, records
  // the epochs running at a crash as failed (durably), replays the external log of the failed
  // epochs, starts a new epoch and, with a nonzero interval, the background advancer.
  static absl::StatusOr<std::unique_ptr<Manager>> Open(Pool& pool, ManagerOptions options = {});
  ~Manager() override;  // stops the advancer and advances twice: everything becomes durable

  uint64_t current() const override { return global_.load(std::memory_order_acquire) & ~kClosing; }
  uint64_t execution_first() const override { return execution_first_; }
  bool IsFailed(uint64_t e) const override;
  // The last epoch whose checkpoint is complete (durably recorded).
  uint64_t completed() const { return completed_.load(std::memory_order_acquire); }

  // Advances the epoch once (steps 1-5 above). In the pool's failed mode (Pool::health: a flush
  // of this boundary or an earlier one failed) the epoch is not recorded complete, nothing is
  // released or reclaimed, the next epoch opens (guards never wait on a failed pool) and the
  // failed mode's error is returned.
  absl::Status Advance();
  // Returns once everything this thread did before the call is durable (two advances at most).
  absl::Status Sync();

  // True when the background advancer runs (ManagerOptions::interval > 0). Layers that could
  // advance on their own to free resources (a full heap) do so only then: with manual clocking
  // the caller owns every boundary.
  bool clocked() const { return options_.interval.count() > 0; }
  // Asks the background advancer to start the next boundary now instead of at the end of its
  // interval (a heap whose frees of this epoch grow large). Never waits; callable under a
  // guard; a no-op when the epochs are advanced by hand.
  void RequestAdvance();

  // Registers [addr, addr+len) as modified in the calling thread's current epoch: it will be
  // flushed at the boundary. REQUIRES: the caller holds a Guard. Call once per object per epoch
  // (the in-object epoch mark that InCLL and the external log check is what deduplicates).
  void RecordDirty(const void* addr, size_t len);

  // A producer of extra ranges to write back at every boundary (step 3), for layers that track
  // dirty memory their own way (the allocator's per-chunk line maps). Called with no guard
  // open, inside the advance. Returns an id for RemoveFlushSource.
  using FlushSource = std::function<void(uint64_t epoch, std::vector<Range>& out)>;
  int AddFlushSource(FlushSource source);
  void RemoveFlushSource(int id);

  // Epoch-based reclamation: `deleter(obj)` runs once no guard that could have seen `obj`
  // remains (at the end of the advance that closes the caller's epoch, after that epoch is
  // durable). REQUIRES: the caller holds a Guard; `obj` is already unreachable for guards
  // that start later.
  void Retire(void* obj, std::function<void(void*)> deleter);

  ExternalLog& log() { return *log_; }
  Pool& pool() { return pool_; }
  const Persister& persister() const { return pool_.persister(); }
  ManagerStats stats() const;
  // Tests: runs `hook(e)` inside every Advance once every guard of the closing epoch e has ended
  // and before the advancer claims the threads' dirty lists (a thread that enters a guard then
  // writes its own list back: HelpFlush). Set while no advance runs.
  void SetClosingHookForTesting(std::function<void(uint64_t e)> hook) {
    closing_hook_ = std::move(hook);
  }
  // The failed epochs recorded so far, as inclusive ranges.
  std::vector<std::pair<uint64_t, uint64_t>> failed_ranges() const;
  // Empties the failed-epoch set, durably. Sound only once nothing in the pool names a failed
  // epoch any more: every record recovered lazily (each Masstree node: a full CheckInvariants
  // walk; the heap's metadata lines: Heap::SettleFailedLines) has been recovered in this
  // execution and made durable by a Sync, and the external log and transaction log were
  // replayed by their opens. `pmrt repair` does exactly that for the pools it knows. The count
  // is zeroed by one durable 8-byte store: a crash leaves the whole set or none of it.
  // Errors: kFailedPrecondition under the caller's own guard; the failed mode's error.
  absl::Status ClearFailedEpochs();

  // True when guards use asymmetric fences (membarrier); see Guard.
  static bool AsymmetricFences();

  // The calling thread's slot (created on first use, recycled when a thread exits).
  ThreadSlot& LocalSlot() { return slots_.Local(); }

 private:
  friend class Guard;
  friend class LeafGuard;
  const bool asymmetric_ = AsymmetricFences();  // read by every Guard; fixed per process
  absl::Status InitArea();
  bool ClaimFlush(ThreadSlot& s, uint64_t e);
  void HelpFlush(ThreadSlot& s, uint64_t e);
  absl::Status LoadArea();
  absl::Status RecordFailed(uint64_t lo, uint64_t hi);
  void PersistCompleted(uint64_t e);
  std::vector<ThreadSlot*> Slots();
  Manager(Pool& pool, ManagerOptions options);
  absl::Status Recover();
  void AdvancerLoop();
  void FlushRanges(std::vector<Range>& ranges);
  // The steps of Advance, each run under advance_mu_ at the boundary of the closing epoch e.
  // Step 2: waits for every guard of e in `slots` to end. False when one is still held at
  // `give_up` (ManagerOptions::max_guard_wait): e is reopened and the pool is in its failed mode.
  bool WaitForGuards(uint64_t e, const std::vector<ThreadSlot*>& slots,
                     std::chrono::steady_clock::time_point give_up);
  // The times of one advance's steps, for ManagerStats.
  struct AdvanceTimes {
    std::chrono::steady_clock::time_point start;  // step 1
    std::chrono::steady_clock::duration guard_wait{}, sources{}, flush{}, stall{}, reclaim{};
  };
  // Step 3: claims every dirty list of e that its owner has not claimed (HelpFlush), appends it
  // and the flush sources' ranges to `ranges`, writes them back and waits for the owners'
  // write-backs. Sets times.sources (the flush sources) and times.flush (the write-back).
  void WriteBackEpoch(uint64_t e, const std::vector<ThreadSlot*>& slots, std::vector<Range>& ranges,
                      AdvanceTimes& times);
  // Step 5: unless `failed`, releases e's log blocks and moves the objects retired in e to
  // `reclaim`; then opens e+1 and wakes the guards waiting for it.
  void OpenNextEpoch(uint64_t e, const std::vector<ThreadSlot*>& slots, const absl::Status& failed,
                     std::vector<std::pair<void*, std::function<void(void*)>>>& reclaim);
  // Step 6's accounting: one advance, its write-back, its times and its reclaimed objects.
  void CountAdvance(const std::vector<Range>& ranges, size_t reclaimed, const AdvanceTimes& times);

  Pool& pool_;
  ManagerOptions options_;
  EpochAreaLayout* area_;
  std::unique_ptr<ExternalLog> log_;
  static constexpr uint64_t kClosing = uint64_t{1} << 63;  // set in global_ during an advance
  std::atomic<uint64_t> global_{0};
  std::atomic<uint64_t> completed_{0};
  uint64_t execution_first_ = 0;
  // Failed ranges, a volatile copy of the durable set (read on every lazy recovery check).
  std::vector<std::pair<uint64_t, uint64_t>> failed_;

  PerThread<ThreadSlot> slots_;
  std::mutex advance_mu_;  // one advance at a time; guards flush_sources_
  std::vector<std::pair<int, FlushSource>> flush_sources_;
  int next_source_id_ = 1;
  mutable std::mutex stats_mu_;
  ManagerStats stats_;

  std::function<void(uint64_t)> closing_hook_;
  bool opened_ = false;    // Open succeeded: the destructor completes the running epoch
  bool attached_ = false;  // holds the pool's PoolLayer::kEpochs
  std::mutex clock_mu_;
  std::condition_variable clock_cv_;
  bool stopping_ = false;
  bool advance_requested_ = false;  // guarded by clock_mu_
  std::thread advancer_;
};

// Enters the manager's current epoch for the guard's lifetime. Cheap: one store to the thread's
// own cache line and one load of the global epoch (no read-modify-write on a shared line).
// While an advance is in progress a new (outermost) guard waits for it to finish.
// Nests: an inner guard stays in the outer guard's epoch.
class Guard {
 public:
  explicit Guard(Manager& m);
  // The same with the caller's slot of `m` (Manager::LocalSlot() of this thread, looked up
  // earlier): saves the lookup on hot paths that keep it (the allocator's thread context).
  Guard(Manager& m, ThreadSlot& slot);
  ~Guard();
  Guard(const Guard&) = delete;
  Guard& operator=(const Guard&) = delete;
  uint64_t epoch() const { return slot_->epoch.load(std::memory_order_relaxed); }
  // True when this guard is the calling thread's guard of `m` (slots belong to one manager).
  bool Of(Manager& m) const { return slot_ == &m.LocalSlot(); }
  // True when the epoch this guard holds is no longer the open one: an advance is closing it
  // and waits for the guard to end. A holder that can end its guard at will between two steps
  // of its work (ds::BasicMasstree::Batch) ends it then; a new guard waits out the advance.
  // One relaxed load of the manager's epoch word. REQUIRES: `m` is this guard's manager.
  bool Stale(const Manager& m) const {
    return m.global_.load(std::memory_order_relaxed) != epoch();
  }

  // The same guard without an object, for a holder that keeps the slot and knows when it holds
  // one (a transaction: begin enters, its end exits; no guard object to construct, mark engaged
  // and clear). Enter returns the epoch the thread is in. REQUIRES: `slot` is the calling
  // thread's slot of `m`; every Enter is matched by one Exit on the same thread, nested as
  // guards are.
  static uint64_t Enter(Manager& m, ThreadSlot& slot) {
    Enter(m, &slot);
    return slot.epoch.load(std::memory_order_relaxed);
  }
  // Enter's common case alone, inline and with no call: true when the thread has entered the
  // current epoch (`epoch`, outermost); false, with nothing changed, when it held a guard
  // already, guards use the seq_cst protocol, or an advance is closing the epoch (the caller
  // then uses Enter).
  static bool TryEnter(Manager& m, ThreadSlot& slot, uint64_t& epoch);
  static void Exit(ThreadSlot& slot) {
    // Release: everything the holder wrote (dirty lists, retired lists, data) happens-before
    // the advancer's acquire load that sees the slot leave the epoch.
    if (--slot.depth == 0) slot.epoch.store(0, std::memory_order_release);
  }

 private:
  static void Enter(Manager& m, ThreadSlot* slot);  // the fast path, inline
  // The seq_cst variant, and waiting out an advance. Static, so that the guard's address never
  // escapes.
  static void EnterSlow(Manager& m, ThreadSlot* slot);
  friend class LeafGuard;

  // The only member: the guard is one pointer, kept in a register on hot paths.
  ThreadSlot* slot_;
};

// A guard for a leaf operation: one that opens no other guard while it runs (the allocator's
// fast paths). The same announcement protocol as Guard without the nesting count: when the slot
// announces no epoch the leaf guard is outermost and announces the current one; when an outer
// guard's epoch is announced it runs in that epoch and leaves the slot alone. Cheaper than
// Guard by the count's load and stores on entry and exit. REQUIRES: no Guard is constructed
// on this thread while a LeafGuard is alive (it would take itself for the outermost guard).
class LeafGuard {
 public:
  LeafGuard(Manager& m, ThreadSlot& slot);
  ~LeafGuard() {
    if (own_ != nullptr) own_->epoch.store(0, std::memory_order_release);  // as ~Guard
  }
  LeafGuard(const LeafGuard&) = delete;
  LeafGuard& operator=(const LeafGuard&) = delete;
  uint64_t epoch() const { return epoch_; }

 private:
  ThreadSlot* own_ = nullptr;  // the slot this guard announced in; null when nested
  uint64_t epoch_;
};

// Inline: every allocation, free and tree operation opens a guard.
inline Guard::Guard(Manager& m) : slot_(&m.LocalSlot()) { Enter(m, slot_); }
inline Guard::Guard(Manager& m, ThreadSlot& slot) : slot_(&slot) { Enter(m, slot_); }

inline void Guard::Enter(Manager& m, ThreadSlot* slot) {
  if (slot->depth++ > 0) return;  // nested: stay in the outer guard's epoch
  if (m.asymmetric_) {
    const uint64_t g = m.global_.load(std::memory_order_acquire);
    if ((g & Manager::kClosing) == 0) {
      // Announce, then re-check: either the advancer sees our announcement of g and waits for
      // us, or we see its closing mark and step back. The store goes to this thread's own
      // line; no shared line is written. The store-load order comes from the advancer's
      // membarrier() between its closing store and its scan of the slots (pairs with
      // Manager::Advance step 2).
      slot->epoch.store(g, std::memory_order_relaxed);
      std::atomic_signal_fence(std::memory_order_seq_cst);
      // seq_cst (a plain load on x86-64): the transaction layer's fast lines order a later
      // load after it against a store + seq_cst fence + load of this epoch (txn/reclaim.cc,
      // CloseUnmarked).
      if (m.global_.load(std::memory_order_seq_cst) == g) return;
      slot->epoch.store(0, std::memory_order_seq_cst);  // never block the advancer
    }
  }
  EnterSlow(m, slot);
}

inline bool Guard::TryEnter(Manager& m, ThreadSlot& slot, uint64_t& epoch) {
  if (slot.depth != 0 || !m.asymmetric_) return false;
  const uint64_t g = m.global_.load(std::memory_order_acquire);
  if ((g & Manager::kClosing) != 0) return false;
  slot.epoch.store(g, std::memory_order_relaxed);  // as Enter: announce, then re-check
  std::atomic_signal_fence(std::memory_order_seq_cst);
  if (m.global_.load(std::memory_order_seq_cst) != g) [[unlikely]] {  // (seq_cst: as Enter)
    slot.epoch.store(0, std::memory_order_seq_cst);                   // never block the advancer
    return false;
  }
  slot.depth = 1;
  epoch = g;
  return true;
}

inline Guard::~Guard() { Exit(*slot_); }

inline LeafGuard::LeafGuard(Manager& m, ThreadSlot& slot) {
  epoch_ = slot.epoch.load(std::memory_order_relaxed);  // only this thread writes it
  if (epoch_ != 0) return;                              // nested in an outer guard
  own_ = &slot;
  if (m.asymmetric_) {  // Guard::Enter's fast path (see there)
    const uint64_t g = m.global_.load(std::memory_order_acquire);
    if ((g & Manager::kClosing) == 0) {
      slot.epoch.store(g, std::memory_order_relaxed);
      std::atomic_signal_fence(std::memory_order_seq_cst);
      if (m.global_.load(std::memory_order_acquire) == g) {
        epoch_ = g;
        return;
      }
      slot.epoch.store(0, std::memory_order_seq_cst);
    }
  }
  Guard::EnterSlow(m, &slot);
  epoch_ = slot.epoch.load(std::memory_order_relaxed);
}

}  // namespace pmrt::epoch

#endif  // PMRT_EPOCH_EPOCH_H_
