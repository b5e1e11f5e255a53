// Speculative-logging transactions (SpecPMT): failure-atomic, durable updates with one fence
// per commit. docs/txn.md has the log format, the commit, reclamation and recovery protocols.
//
//   auto engine = pmrt::txn::Engine::Open(*pool, *epochs, *heap);   // recovers, then runs
//   ...
//   {
//     std::lock_guard<std::mutex> l(account_mu);     // isolation is the caller's (see below)
//     auto st = pmrt::txn::Run([&]() -> absl::Status {
//       RETURN_IF_ERROR(pmrt::txn::write(&a->balance, a->balance - 10));
//       RETURN_IF_ERROR(pmrt::txn::add(&b->balance, sizeof(b->balance)));  // before in-place
//       b->balance += 10;
//       Entry* e = pmrt::alloc::pnew<Entry>(10);       // part of the transaction
//       if (e == nullptr) return absl::ResourceExhaustedError("no room");
//       return pmrt::txn::write(&b->last, pmrt::pptr<Entry>(*pool, e));
//     });                                               // committed (durable) or aborted
//   }
//
// Semantics
//   * Atomicity and durability: when commit() returns OK the transaction is durable; after a
//     crash every transaction whose commit returned is there, the one whose commit was running
//     may or may not be, and no other one is (not a single word of it).
//   * Declaring writes: `add(p, n)` before modifying [p, p+n) in place, or `write(&field, v)`.
//     Both are cheap for a word declared again in the same transaction, and cheap (no flush, no
//     fence) for a word that has a live log record ("hot"). The first write of a "cold" word
//     (never logged, or its record reclaimed) costs a flush and a fence: its old value is
//     appended to the log first. Granularity is the aligned 8-byte word: add(p, n) covers every
//     word that [p, p+n) touches, and the log records whole words.
//   * Allocation: alloc::pnew / pdelete called inside a transaction belong to it. A block
//     allocated in it is recorded whole at commit (its constructor's and later stores need no
//     add()); it is freed again if the transaction aborts. pdelete runs the destructor at once
//     and frees the block at commit (a no-op on abort). A block allocated in a transaction is
//     limited by the log block size (about half of Options::block_size).
//   * Abort (abort(), or an error status returned by Run's function) restores every declared
//     word to its value at the transaction's start from a volatile copy, frees its allocations
//     and drops its frees. Nothing durable needs undoing.
//   * Flat nesting: begin() inside a transaction only counts a level; an inner commit does
//     nothing; an inner abort aborts the whole transaction at once (memory restored), after
//     which every add/write and commit at any level returns kAborted until the outermost level
//     ends with commit() or abort().
//   * Ownership: a transaction belongs to the thread that began it; every call acts on the
//     calling thread's transaction (Scope checks its thread). commit/abort without begin, and
//     add/write outside a transaction, return kFailedPrecondition. A transaction holds an
//     epoch::Guard from begin to commit (it never spans an epoch boundary), so it must be short:
//     one open longer than Options::max_open is reported on stderr and fails with
//     kDeadlineExceeded at its next call (it aborts at commit). Do not call epoch Advance/Sync
//     or Engine::Reclaim inside a transaction (they wait for it). A thread that exits with a
//     transaction open aborts it at exit, as its crash would (reported on stderr).
//   * Isolation is the caller's, as in PMDK: hold locks around the whole transaction for the
//     data it touches. Two threads must not write different bytes of the same 8-byte word in
//     concurrent transactions (the word is the unit of logging, as in word-based STMs).
//   * Scope of data: a word written by transactions must be written only by transactions (or
//     be dead), and a block written or allocated in transactions must be freed in one (its
//     free is what stops older records of its words from being replayed into its next life).
//
// Errors in a transaction doom it: the failing call returns the error, later add/write calls
// return it too, and commit() aborts and returns it.
//
// Thread safety: Engine is thread-safe; transactions are per thread.
#ifndef PMRT_TXN_TXN_H_
#define PMRT_TXN_TXN_H_

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <type_traits>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "alloc/allocator.h"
#include "epoch/epoch.h"
#include "epoch/per_thread.h"
#include "epoch/pool.h"
#include "txn/internal/fast_path.h"

namespace pmrt::txn {

class Engine;

// A logical operation of a layer above the engine, as its transaction's commit record holds it
// (log_logical): the layer's tag (< 2^46), the commit-order stamp of its transaction, and the
// layer's bytes, a view of the record in the pool, valid during the replay_logical call.
struct LogicalOp {
  uint64_t tag;
  uint64_t stamp;
  std::string_view bytes;
};

inline constexpr size_t kAutoLogBudgetMin = size_t{1} << 20;
inline constexpr size_t kAutoLogBudgetMax = size_t{32} << 20;

struct Options {
  // Log bytes the reclaimer aims to stay under; a cycle runs once the log holds more than
  // `reclaim_trigger` of it. Capped at 4/7 of the thread logs' block limit (below; so at most
  // 64 MiB with 32 KiB blocks, 8 MiB with 4 KiB ones), so that the reclaimer starts, and begin()
  // waits, before the logs reach their limit, with room left for the compacted log;
  // Stats::log_budget is the budget in effect. 0 (the default): automatic. It starts sized to
  // the pool, 1/16 of the heap's bytes within [1 MiB, 32 MiB] (kAutoLogBudget*), so that the log,
  // which may reach twice its budget, holds at most 1/8 of a small pool, and then follows the
  // hot set: after each full cycle it doubles while the compacted log (one entry per hot word)
  // is over 1/8 of it, up to the block limit's cap, if the heap's free chunks are at least 4
  // times the growth; it halves, not below its start, when the compacted log stays under 1/32
  // of it or the heap's free chunks fall under it (docs/txn.md, "The automatic budget").
  // Without it a hot set larger than the budget allows goes cold and every write of it pays a
  // snapshot. The hard limit (log_limit 0) follows it, twice the budget.
  size_t log_budget = 0;
  double reclaim_trigger = 0.5;
  // Hard limit on the thread logs' bytes (blocks owned); 0: 2 x log_budget. At most 3584
  // blocks. With the background reclaimer, begin() waits (holding no guard) while the log is
  // above the budget (or 7/8 of this limit); a record that still finds no room fails with
  // kResourceExhausted.
  size_t log_limit = 0;
  // Bytes per log block (a power of two in [4 KiB, 32 KiB]); used only when the pool has no
  // transaction directory yet. A record (one transaction) must fit in a block.
  size_t block_size = 32 * 1024;
  // Run the background reclaimer (and the watchdog). Without it, call Reclaim().
  bool background = true;
  // A word not touched by a transaction in the last `cold_after_epochs` completed epochs may go
  // cold at reclamation (its record is dropped; its next write is snapshotted, one fence). With
  // `adaptive_cold`, the reclaimer tunes this age after each cycle to the budget: it doubles
  // (up to max_cold_after_epochs) while the compacted log is under 1/4 of the budget, and halves
  // when it is over 1/2, never below the touch slack: min(8, cold_after_epochs,
  // max_cold_after_epochs) epochs. A transaction's declaration of a word touched within the
  // slack takes no CAS on the word's index slot (docs/txn.md, "The index").
  uint64_t cold_after_epochs = 64;
  bool adaptive_cold = true;
  uint64_t max_cold_after_epochs = 1024;
  // Fast lines (docs/txn.md, "Fast lines"): the reclaimer marks each 8-word line whose words are
  // all hot, and txn::add's inline path declares a word of such a line without reading its index
  // slot; a word of a marked line goes cold only after the reclaimer has unmarked the line and
  // the epoch of that has completed. Off: every declaration reads the slot.
  bool fast_lines = true;
  // A transaction open longer than this is reported and fails at its next call.
  std::chrono::milliseconds max_open{1000};
  // With the background reclaimer, the longest a begin() waits for the log to come back under
  // the stall size. A log still full then cannot drain (the reclaimer's cycles fail, or the
  // epoch they need cannot complete): the pool enters its failed mode (docs/durability.md).
  std::chrono::milliseconds max_log_wait{10000};
  // Recovery of a crashed pool calls this with the logical operations (log_logical) of the
  // committed transactions whose epochs were rolled back, in commit order, after their words and
  // allocations are replayed and in the same epoch (so that they become durable with them). An
  // error fails Open. A crashed pool whose log holds such operations and an engine without this
  // handler: Open fails (kFailedPrecondition), since they would be lost.
  std::function<absl::Status(const std::vector<LogicalOp>&)> replay_logical;
};

struct Stats {
  uint64_t commits = 0;  // committed transactions that wrote a record
  uint64_t aborts = 0;
  uint64_t snapshots = 0;  // snapshot records (cold words), each one fence
  uint64_t snapshot_words = 0;
  uint64_t record_bytes = 0;  // bytes of commit records written (their line padding not counted)
  uint64_t log_bytes = 0;     // blocks in logs x block size, now
  uint64_t log_bytes_peak = 0;
  uint64_t log_bytes_owned = 0;  // blocks owned (in logs or free) x block size
  uint64_t compact_bytes = 0;    // the compacted log after the last cycle
  uint64_t cycles = 0;           // reclamation cycles completed
  uint64_t full_cycles = 0;      // of which rewrote the compacted log (the others appended)
  uint64_t words_kept = 0;       // live entries copied to the compacted log, all cycles
  uint64_t words_dropped = 0;    // superseded entries dropped
  uint64_t words_cold = 0;       // newest entries dropped (the word went cold)
  uint64_t lines_marked = 0;     // lines the reclaimer made fast (docs/txn.md, "Fast lines")
  uint64_t lines_unmarked = 0;   // fast lines it unmarked to make words of them cold
  uint64_t horizon = 0;          // epoch horizon of the last cycle
  uint64_t cold_age = 0;         // the cold age (epochs) the next cycle uses
  uint64_t stalls = 0;           // begin() calls that waited for the reclaimer
  // CPU time of the background reclaimer thread since the engine opened (0 without one).
  std::chrono::nanoseconds reclaimer_cpu{0};
  uint64_t log_budget = 0;         // the budget in effect (Options::log_budget, capped)
  uint64_t budget_changes = 0;     // times an automatic budget grew or shrank
  uint64_t recovered_records = 0;  // records replayed at open
  // Valid records the open read from the logs (0 after a clean close: it retires the log).
  uint64_t records_read_at_open = 0;
  uint64_t recovered_words = 0;
  std::chrono::nanoseconds recovery_time{0};
};

class Engine {
 public:
  // Attaches to the pool's transaction directory (creating it in a new pool) and recovers:
  // committed transactions are replayed in commit order after the epoch layer's rollback (so
  // call it right after Heap::Open, before anything allocates), uncommitted ones are undone.
  // REQUIRES: the calling thread holds no Guard. One Engine per pool.
  static absl::StatusOr<std::unique_ptr<Engine>> Open(Pool& pool, epoch::Manager& epochs,
                                                      alloc::Heap& heap, Options options = {});
  ~Engine();  // REQUIRES: no transaction open
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // The first engine opened that is still open (used by txn::begin and friends).
  static Engine* Default() { return txn_internal::g_default.load(std::memory_order_acquire); }

  absl::Status Begin();
  absl::Status Commit();
  absl::Status Abort();
  absl::Status Add(const void* p, size_t n);
  bool InTransaction();
  // txn::log_logical on this engine's transaction of the calling thread.
  absl::Status LogLogical(uint64_t tag, std::string_view bytes, std::function<void()> undo);

  // Runs one reclamation cycle now (advancing the epoch first when `advance` and nothing new
  // is durable). REQUIRES: the calling thread has no transaction open and holds no Guard (with
  // advance=false, other threads may have transactions open).
  absl::Status Reclaim(bool advance = true);

  Stats stats() const;
  // Pool offsets of every heap block the engine owns: its directory and its log blocks (in
  // logs or free). For heap accounting in tools and tests.
  std::vector<uint64_t> OwnedBlocks() const;
  // Whether the 8-word line holding pool address p is fast now (docs/txn.md, "Fast lines"):
  // txn::add declares its words without reading their index slots. For tests and tools.
  bool IsFastLine(const void* p) const;
  // Tests: every log's next record starts a new block (the most recently freed one).
  void SealLogsForTesting();
  // Tests: gives the log's free blocks back to the heap but the `keep` most recent (what the
  // background reclaimer does after each cycle). REQUIRES: the calling thread holds no Guard.
  // Returns the number of blocks given back.
  uint64_t GiveBackLogBlocksForTesting(size_t keep);
  // Tests: the reclaimer calls `hook` on its own thread each time it has gathered a batch of
  // entries to decide, in the middle of a cycle's fold (before anything of the cycle is fenced).
  // Set it while no cycle runs.
  void SetFoldHookForTesting(std::function<void()> hook);
  // Tests: the next reclamation cycle fails (kAborted) once its new compacted log is written
  // and fenced, before the descriptor names it: the path of a cycle that fails in its fold (no
  // block for K'), with every bit of the cycle's volatile state to undo.
  void FailNextReclaimForTesting();
  Pool& pool() const { return pool_; }
  epoch::Manager& epochs() const { return epochs_; }
  alloc::Heap& heap() const { return heap_; }
  const Options& options() const { return options_; }

  class Impl;  // txn/internal/engine_impl.h

 private:
  friend bool txn_internal::BeginFast();  // the default engine's: straight to Impl
  friend bool txn_internal::CommitFast();
  friend absl::Status txn_internal::CommitGeneral();
  Engine(Pool& pool, epoch::Manager& epochs, alloc::Heap& heap, Options options);

  Pool& pool_;
  bool attached_ = false;  // holds the pool's PoolLayer::kTransactions
  epoch::Manager& epochs_;
  alloc::Heap& heap_;
  Options options_;
  std::unique_ptr<Impl> impl_;
};

// The calling thread's transaction on the default engine.
inline absl::Status begin() {
  if (txn_internal::BeginFast()) [[likely]]
    return absl::OkStatus();
  return txn_internal::BeginGeneral();
}
inline absl::Status commit() {
  if (txn_internal::CommitFast()) [[likely]]
    return absl::OkStatus();
  return txn_internal::CommitGeneral();
}
absl::Status abort();

// Declares [p, p+n) about to be modified in place (see above).
//
// Inline: an aligned 8-byte word of a hot word (one with a live record) in a transaction that
// has not allocated, with room in the write list. It reads the word's index slot (moving its
// touch epoch forward with a CAS when the word was not touched in the last few epochs, as the
// general path does) and keeps the word's old value. A transaction of K random words is then a
// short loop whose cache misses (index slot and data line of each word) the processor overlaps;
// everything else takes the general path.
[[gnu::always_inline]] inline absl::Status add(const void* p, size_t n) {
  if (txn_internal::AddInline(p, n)) [[likely]]
    return absl::OkStatus();
  return txn_internal::AddGeneral(p, n);
}
// *field = value, declared: add(field, sizeof(T)) then the store (not done if add fails).
template <class T>
[[gnu::always_inline]] inline absl::Status write(T* field, const T& value) {
  static_assert(std::is_trivially_copyable_v<T>, "txn::write stores trivially copyable values");
  if (txn_internal::AddInline(field, sizeof(T))) [[likely]] {
    std::memcpy(static_cast<void*>(field), &value, sizeof(T));
    return absl::OkStatus();
  }
  absl::Status st = txn_internal::AddGeneral(field, sizeof(T));
  if (st.ok()) std::memcpy(static_cast<void*>(field), &value, sizeof(T));
  return st;
}
bool in_transaction();

// Adds a logical operation to the calling thread's transaction on the default engine: `bytes`
// go into its commit record under `tag` (< 2^46), to be handed to Options::replay_logical if the
// transaction commits and its epoch is rolled back by a crash. The caller has already applied
// the operation (on the epoch scope); `undo` reverts it, and runs (newest first, before the
// declared words are restored) if the transaction aborts. Errors: kFailedPrecondition (no
// transaction), kInvalidArgument (the record could not hold it: the transaction is doomed).
absl::Status log_logical(uint64_t tag, std::string_view bytes, std::function<void()> undo);

// A hint that a transaction will soon declare [p, p+n) (add or write): starts loading the data's
// cache lines and the word index's slots for them, as a declaration's first steps would, without
// waiting for them. No effect on any transaction's semantics; never fails; a few instructions.
// For a program that knows the words of its next transaction while the current one runs (a
// queue of requests, a batch): called before the current commit, it lets the next
// transaction's cache misses overlap this commit's fence instead of following it
// (docs/performance.md, "Why the targets are missed"). Outside the default engine's pool it
// prefetches the data only.
[[gnu::always_inline]] inline void prefetch(const void* p, size_t n = 8) {
  const auto a = reinterpret_cast<uintptr_t>(p);
  const uintptr_t base = txn_internal::g_prefetch_base.load(std::memory_order_relaxed);
  const uint64_t size = txn_internal::g_prefetch_size.load(std::memory_order_relaxed);
  const uintptr_t index = txn_internal::g_prefetch_index.load(std::memory_order_relaxed);
  const uint64_t off = a - base;
  const bool indexed = off < size && n <= size - off;
  for (uintptr_t line = a & ~uintptr_t{63}; line < a + n; line += 64) {
    __builtin_prefetch(reinterpret_cast<const void*>(line), 1);
    // The slots of the line's 8 words: 64 bytes of the index, one line of it per data line
    // (8 bytes of index per 8-byte word, so the same offsets).
    if (indexed) __builtin_prefetch(reinterpret_cast<const void*>(index + (line - base)), 1);
  }
}

// Runs fn() in a transaction: commits when it returns OK (returning the commit's status),
// aborts and returns its error otherwise. fn returns absl::Status, or void (always commits).
template <class Fn>
absl::Status Run(Fn&& fn) {
  if (absl::Status st = begin(); !st.ok()) return st;
  if constexpr (std::is_void_v<std::invoke_result_t<Fn>>) {
    fn();
  } else {
    absl::Status st = fn();
    if (!st.ok()) {
      (void)abort();
      return st;
    }
  }
  return commit();
}

// RAII form: begins in the constructor; Commit() commits; the destructor aborts a transaction
// that was neither committed nor aborted. Must be used on the thread that created it.
class Scope {
 public:
  Scope();
  ~Scope();
  Scope(const Scope&) = delete;
  Scope& operator=(const Scope&) = delete;
  const absl::Status& begin_status() const { return begin_; }
  absl::Status Commit();
  absl::Status Abort();

 private:
  absl::Status CheckThread() const;
  absl::Status begin_;
  std::thread::id owner_;
  bool open_ = false;
};

}  // namespace pmrt::txn

namespace pmrt::txn_internal {
// Fault injection for tests: the next `count` reclamation cycles (of any engine) fail with
// kResourceExhausted before doing anything; 0 clears it.
void InjectReclaimFailures(uint64_t count);
}  // namespace pmrt::txn_internal

#endif  // PMRT_TXN_TXN_H_
