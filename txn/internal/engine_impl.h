// Engine::Impl: the state behind txn::Engine, shared by the files of txn/: engine.cc (open,
// close, backpressure), txn.cc (begin, add, abort), snapshot.cc (cold words), commit.cc (the
// commit paths and the general record), small_commit.cc (the small commit's record writers),
// reclaim.cc (a reclamation cycle), background.cc (the background thread), close.cc (the clean
// close) and recovery.cc (open). Only txn/ includes this.
#ifndef PMRT_TXN_INTERNAL_ENGINE_IMPL_H_
#define PMRT_TXN_INTERNAL_ENGINE_IMPL_H_

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "txn/internal/log_store.h"
#include "txn/internal/word_index.h"
#include "txn/txn.h"

namespace pmrt::txn_internal {

// Persistence sites of transactions (docs/txn.md, "Store orders").
inline constexpr Site kSnapshotFlush{"txn.snapshot.flush"};
inline constexpr Site kSnapshotFence{"txn.snapshot.fence"};
// The snapshot's fence on its error path (the log has no room for a later record of the call:
// what the earlier ones put in flight is fenced before the guard ends). Not reached by the crash
// suite (docs/testing.md, "Mutation gate results").
inline constexpr Site kSnapshotAbandonFence{"txn.snapshot.abandon.fence"};
inline constexpr Site kCommitFlush{"txn.commit.flush"};
inline constexpr Site kCommitFence{"txn.commit.fence"};
// The small commit's (WriteSmallCommitBody), one site per call site: the record written with
// plain stores and flushed, and its fence; the record streamed (its header's first word, the
// entries of an aligned and of an unaligned record, the words of a record with runs) and its
// fence; the record of one declaration written back with clwb, and its fence.
inline constexpr Site kSmallFlush{"txn.commit.small.flush"};
inline constexpr Site kSmallFence{"txn.commit.small.fence"};
inline constexpr Site kStreamHead{"txn.commit.stream.head"};
inline constexpr Site kStreamPairs{"txn.commit.stream.pairs"};
inline constexpr Site kStreamOdd{"txn.commit.stream.odd"};
inline constexpr Site kStreamRuns{"txn.commit.stream.runs"};
inline constexpr Site kStreamFence{"txn.commit.stream.fence"};
inline constexpr Site kOneClwb{"txn.commit.one.clwb"};
inline constexpr Site kOneFence{"txn.commit.one.fence"};
inline constexpr Site kCompactFlush{"txn.reclaim.compact.flush"};
// The data line of a word the reclaimer turns cold (fenced by kCompactFence).
inline constexpr Site kColdFlush{"txn.reclaim.cold.flush"};
// The close's write-back of every word a record holds (a batch flush, fence included).
inline constexpr Site kCloseWriteBack{"txn.close.writeback"};
inline constexpr Site kCompactFence{"txn.reclaim.compact.fence"};
inline constexpr Site kDescFlush{"txn.reclaim.desc.flush"};
inline constexpr Site kDescFence{"txn.reclaim.desc.fence"};
inline constexpr Site kHeadMoveFlush{"txn.reclaim.head.flush"};
inline constexpr Site kHeadMoveFence{"txn.reclaim.head.fence"};
// Logic mutants for the mutation gate (mutation::Swapped): recovery that replays the thread
// logs in walk order instead of commit order, an incremental cycle that drops the newest
// entry of a cold word while older entries of it stay in earlier segments (SpecPMT's
// multi-thread rule broken), and a reclaimer whose cold age ignores the touch slack (below).
// Each must make the crash suite fail.
inline constexpr Site kOrderMutant{"txn.mutant.recovery_order"};
inline constexpr Site kRuleMutant{"txn.mutant.reclaim_rule"};
inline constexpr Site kSlackMutant{"txn.mutant.touch_slack"};
// And a commit record that leaves out the transaction's logical operations (log_logical): the
// runtime's crash suite must fail with it.
inline constexpr Site kDropLogicalMutant{"txn.mutant.drop_logical"};
// And a small commit that takes its block's next stamp without looking at its words' keys
// (a commit can then replay before an earlier one of the same word: SmallCommitStamp).
inline constexpr Site kStampMutant{"txn.mutant.small_commit_stamp"};
// And one that counts every small commit as solo (SmallCommitSolo: no stamp handed out since its
// block) without reading the counter.
inline constexpr Site kSoloMutant{"txn.mutant.small_commit_solo"};
// And a reclaimer that makes a word of a fast line cold at once when it unmarks the line, without
// waiting for the epoch of the unmarking to complete (ReclaimCycle::DecideOne; docs/txn.md,
// "Fast lines").
inline constexpr Site kGraceMutant{"txn.mutant.fast_line_grace"};
// And one that takes a line a free unmarked (WordIndex::kFreed) for one never marked, making its
// other words cold without a grace period.
inline constexpr Site kFreedMutant{"txn.mutant.fast_line_freed"};
// A mutant that drops the registration of a word recovery replays with the epoch boundary. Not
// killed by the crash suite (docs/testing.md, "Mutation gate results"), also with continuations
// of 3,000 images after recovery: either the registration is redundant (a replayed word keeps
// its record until the reclaimer turns it cold, which writes its line back first: kColdFlush)
// or a test is missing.
inline constexpr Site kDirtyReplayedWord{"txn.mutant.dirty.replayed_word"};
// A mutant that writes the directory's replayed stamp without its undo copy (registered dirty
// only): a crash in recovery's epoch can then keep the stamp and roll back what it covers.
inline constexpr Site kUnloggedReplayedStamp{"txn.mutant.unlogged.replayed_stamp"};

// The touch slack (docs/txn.md, "The index"): a transaction's declaration of a hot word moves
// the word's touch epoch forward (a CAS) only when it is more than this many epochs older than
// the transaction's epoch, and the reclaimer's cold age is never below it. Capped by
// Options::cold_after_epochs and max_cold_after_epochs (0 there: every first touch in an epoch
// CASes, and a word may go cold as soon as its touch epoch has completed).
inline constexpr uint64_t kMaxTouchSlack = 8;

// The errors of a call that needs a transaction open on its thread (`what`: the call), and of
// a call that needs the default engine.
absl::Status NoTransaction(const char* what);
inline absl::Status NoEngine() {
  return absl::FailedPreconditionError("txn: no transaction engine is open (txn::Engine::Open)");
}

// A statistics counter written by one thread and read by any: a relaxed load and store, no
// read-modify-write.
struct OwnerCounter {
  std::atomic<uint64_t> v{0};
  void Add(uint64_t n) {
    v.store(v.load(std::memory_order_relaxed) + n, std::memory_order_relaxed);
  }
  uint64_t Get() const { return v.load(std::memory_order_relaxed); }
};

// The distinct words of a small transaction, at commit: open addressing over a fixed table
// whose slots carry the generation that filled them, so Reset() is one increment.
class SmallWordSet {
 public:
  static constexpr size_t kMaxWords = 64;
  void Reset() { ++gen_; }
  // True if newly inserted. REQUIRES: at most kMaxWords inserts since Reset().
  bool Insert(uint64_t word) {
    for (size_t i = (word * 0x9E3779B97F4A7C15ull) >> (64 - kBits);; i = (i + 1) & (kSlots - 1)) {
      Slot& s = slots_[i];
      if (s.gen != gen_) {
        s = {word, gen_};
        return true;
      }
      if (s.word == word) return false;
    }
  }

 private:
  static constexpr int kBits = 7;
  static constexpr size_t kSlots = size_t{1} << kBits;  // twice kMaxWords
  struct Slot {
    uint64_t word = 0;
    uint64_t gen = 0;
  };
  Slot slots_[kSlots];
  uint64_t gen_ = 0;
};

// A small commit's record as its writers see it (small_commit.cc).
struct SmallRecord;

// Transactions with no allocation or free and at most this many declarations commit through
// Engine::Impl::WriteSmallCommit.
inline constexpr size_t kSmallCommitWrites = 64;

// A transaction's write list is compacted (duplicates dropped) when it reaches this size, then
// at twice its compacted size.
inline constexpr size_t kCompactWritesAt = 256;

// A logical operation of the open transaction (txn::log_logical) and how to revert it.
struct LogicalRec {
  uint64_t tag;
  std::string bytes;
  std::function<void()> undo;
};

struct BlockRec {
  uint64_t offset;
  uint64_t bytes;   // allocations: the requested size rounded up to 8 (recorded whole);
                    // frees: the usable size (the tombstone's range)
  uint64_t usable;  // the block's usable size (its class size)
};

// One thread's transaction state (per engine). Adopted as is by a later thread once its thread
// exits (with its log slot: the log continues); a transaction still open then is aborted by the
// exiting thread first (OnThreadExit). Cache-line aligned (so a multiple of 64 bytes): its owner
// writes it on every transaction, and two threads' states must not share a line.
struct alignas(64) ThreadTx final : alloc::TxScope {
  txn::Engine::Impl* impl = nullptr;
  uint32_t slot = txn_internal::kCompactSlot;  // log slot; kCompactSlot until assigned
  int depth = 0;
  bool aborted = false;  // aborted at an inner level; memory already restored
  absl::Status doom;     // the first error of the transaction
  // A small commit that failed in txn_internal::CommitFast (which returns a bool): its status, for
  // the CommitGeneral call that follows at once (txn::commit) to return.
  absl::Status commit_failed;
  // An open transaction (depth > 0) holds an epoch guard on epoch_slot (epoch::Guard::Enter at
  // begin, Exit at its end); its epoch is hot.epoch.
  alloc::TxScope* outer_scope = nullptr;  // restored at the end (a transaction of another pool)
  // The thread that began the last transaction (a serial number per thread, never reused; 0:
  // none yet), and its slot of the epoch manager (valid while that thread lives).
  uint64_t owner = 0;
  epoch::ThreadSlot* epoch_slot = nullptr;
  // The write list (in hot: begin/end/limit over write_buf), in declaration order; a word may
  // appear more than once.
  Hot hot;
  std::unique_ptr<WriteRec[]> write_buf;
  size_t compact_at = kCompactWritesAt;  // CompactWrites when the list reaches this size
  size_t writes_size() const { return static_cast<size_t>(hot.end - hot.begin); }
  bool writes_empty() const { return hot.end == hot.begin; }
  void PushWrite(const WriteRec& r) {
    if (hot.end == hot.limit) [[unlikely]]
      GrowWrites();
    *hot.end++ = r;
  }
  void GrowWrites();
  std::vector<BlockRec> allocs;
  std::vector<BlockRec> frees;
  std::vector<LogicalRec> logical;
  std::vector<uint64_t> cold;         // scratch: words to snapshot
  std::vector<uint64_t> words;        // scratch: the record's words
  std::unique_ptr<uint64_t[]> stage;  // scratch: the commit record, copied to the log
  SmallWordSet small_set;             // scratch: dedup at commit
  // Watchdog, without a clock read on the hot path: `seq` is odd while a transaction is open
  // (owner: +1 at begin and at end). The background thread notes when it first saw an odd seq
  // and sets `expired` if it is still the same after max_open. Relaxed: advisory, checked at the
  // next call.
  std::atomic<uint64_t> seq{0};
  std::atomic<uint64_t> expired_seq{0};  // == seq: this transaction is past max_open
  bool Expired() const {
    return expired_seq.load(std::memory_order_relaxed) == seq.load(std::memory_order_relaxed);
  }
  uint64_t watch_seq = 0;  // background thread only
  int64_t watch_since = 0;
  // The block of commit-order stamps this thread's small commits take theirs from, [stamp_lo,
  // stamp_end), the next at stamp_next (Engine::Impl::SmallCommitStamp; empty at first).
  uint64_t stamp_lo = 0, stamp_next = 0, stamp_end = 0;
  uint32_t stamp_lo_key = 0;  // WordIndex::KeyOf(stamp_lo), computed once per block
  // Statistics of this thread's transactions.
  OwnerCounter commits, aborts, snapshots, snapshot_words, record_bytes;
  // Commits of one declaration (CommitOne: 48-byte records), one store instead of two; stats()
  // adds them to commits and record_bytes.
  OwnerCounter one_commits;

  void* TxAllocate(size_t size, size_t align) override;
  absl::Status TxFree(void* p) override;
  // PerThread's hook, on the exiting thread: a transaction left open is aborted.
  void OnThreadExit();
};

}  // namespace pmrt::txn_internal

namespace pmrt::txn {

// The internal names every txn/ source uses, in the public namespace its definitions are in.
using txn_internal::BlockRec;
using txn_internal::Chain;
using txn_internal::Descriptor;
using txn_internal::EntryType;
using txn_internal::EntryTypeOf;
using txn_internal::EntryWord;
using txn_internal::EntryWords;
using txn_internal::ForEachEntry;
using txn_internal::kBlockPayload;
using txn_internal::kCompactSlot;
using txn_internal::kMaxEntryWords;
using txn_internal::kMaxSlots;
using txn_internal::kNothingPublished;
using txn_internal::NoTransaction;
using txn_internal::RecordHeader;
using txn_internal::RecordKind;
using txn_internal::ThreadTx;
using txn_internal::WordIndex;
using txn_internal::WriteRec;

class Engine::Impl {
 public:
  Impl(Engine& engine);
  ~Impl();

  // ---- transactions (txn.cc; the commit: commit.cc, small_commit.cc) ----
  txn_internal::ThreadTx& Local() {
    txn_internal::ThreadTx& t = threads_.Local();
    if (t.impl == nullptr) [[unlikely]]
      t.impl = this;
    return t;
  }
  // The calling thread's state when Local() has already set it up and cached it, else null
  // (txn::begin/commit's fast paths: no call, so nothing for them to save).
  txn_internal::ThreadTx* LocalIfReady() {
    // Only Local() fills PerThread's cache, and it sets t.impl right after.
    return threads_.LocalIfCached();
  }
  // Begin and Enter are inline in txn.cc, Commit in commit.cc (their only callers), and
  // EndKeepingGuard below: the common begin and commit are a few checks before Enter /
  // WriteSmallCommit, expanded into txn::begin, txn::commit and Engine::Begin/Commit; the rest is
  // in the Slow functions.
  absl::Status Begin(txn_internal::ThreadTx& t);
  bool BeginReady(txn_internal::ThreadTx& t);  // Begin's test for Enter
  absl::Status BeginSlow(txn_internal::ThreadTx& t);
  // An outermost begin's last steps: depth, the guard (on t.epoch_slot), the watchdog sequence,
  // the allocation scope and txn::add's inline path. REQUIRES: t set up by BeginSlow.
  void Enter(txn_internal::ThreadTx& t);
  // The same once the guard is held, in `epoch`; `is_default`: this is the default engine.
  void Entered(txn_internal::ThreadTx& t, uint64_t epoch, bool is_default);
  absl::Status Commit(txn_internal::ThreadTx& t);
  // Commit's test for WriteSmallCommit (below).
  bool SmallCommitReady(const txn_internal::ThreadTx& t) const;
  absl::Status CommitSlow(txn_internal::ThreadTx& t);
  // Ends the outermost level after a commit attempt that did not end the transaction itself (the
  // general commit, an empty one, or a failed one): with st an error, rolls it back first
  // (unless an inner abort did). Returns st.
  absl::Status EndAfterCommit(txn_internal::ThreadTx& t, absl::Status st);
  absl::Status Abort(txn_internal::ThreadTx& t);
  // A thread exits with t's transaction open: abort it at every level (reported on stderr).
  void AbortAtThreadExit(txn_internal::ThreadTx& t);
  absl::Status Add(txn_internal::ThreadTx& t, const void* p, size_t n);
  void* TxAllocate(txn_internal::ThreadTx& t, size_t size, size_t align);
  absl::Status AddLogical(txn_internal::ThreadTx& t, uint64_t tag, std::string_view bytes,
                          std::function<void()> undo);
  absl::Status TxFree(txn_internal::ThreadTx& t, void* p);

  // ---- recovery (recovery.cc) ----
  absl::Status Recover();
  void SetThresholds();  // after Recover (the block size is known): SetBudget(the options')

  // ---- reclamation (reclaim.cc: a cycle; background.cc: the thread; close.cc: the close) ----
  // `idle`: the background thread's cycle of an idle engine (BackgroundLoop): a full cycle at
  // the smallest cold age (touch_slack), so every word goes cold and the log empties.
  absl::Status Reclaim(bool advance, bool idle = false);
  void StartBackground();
  void StopBackground();
  // At close: writes back the line of every word a live record holds (hot words' lines are not
  // written back by epoch boundaries), so a clean shutdown leaves nothing to replay.
  void WriteBackForClose();
  // After WriteBackForClose, no transaction open: completes the running epoch (every committed
  // transaction's heap changes durable), then retires the whole log with one descriptor (K
  // empty, horizon the completed epoch: no record is applied any more), empties the heads, and
  // returns every log block to the heap (epoch-scoped, completed by a second Sync). The next
  // open reads no record. False when the pool is in the failed mode (the log stays).
  bool RetireForClose();
  // Writes a reclamation descriptor (docs/txn.md, "Reclamation" step 3). REQUIRES: reclaim_mu.
  void WriteDescriptor(uint64_t new_seq, uint64_t new_horizon, uint64_t k_head);

  Engine& engine;
  Pool& pool;
  epoch::Manager& epochs;
  alloc::Heap& heap;
  const Options options;
  txn_internal::LogStore store;
  std::unique_ptr<txn_internal::WordIndex> index;
  // The commit-order stamp: every commit's locked increment takes this line exclusive, so it
  // shares it with nothing a committer reads (the pointers above, read by every commit, would
  // otherwise miss on the other threads' cores after each increment) or the reclaimer writes
  // (its mutex below).
  alignas(64) std::atomic<uint64_t> next_stamp{1};

  // Reclamation state: the current descriptor (horizon, seq, which of the two lines).
  alignas(64) std::mutex reclaim_mu;
  uint64_t horizon = 0;
  uint64_t seq = 0;
  int desc_line = 1;  // the line holding the current descriptor; the next cycle writes the other
  uint64_t compact_bytes = 0;
  uint64_t cold_age = 0;  // epochs; see Options::adaptive_cold; never below touch_slack
  // Fixed at construction (before any transaction): see kMaxTouchSlack.
  uint32_t touch_slack = 0;
  // Incremental cycles since the last full one, K's size after it, and a full one is due (an
  // incremental cycle failed).
  static constexpr uint64_t kMaxIncrementalCycles = 16;
  uint64_t incremental_cycles_ = 0;
  uint64_t full_k_bytes_ = 0;
  bool force_full_ = true;
  // The index key of each data word of the compacted log K, in K's order (chain, records of
  // seq <= the current one, entries, words); under reclaim_mu. A word's key stays what its
  // newest record gave it when that record is folded into K (a commit's or snapshot's
  // KeyOf(stamp); after recovery, CompactKey of the K record's seq, as recovery's index pass
  // sets it), so a cycle writes no index slot for the words it keeps: the index lines stay
  // with the transactions that use them instead of moving to the reclaimer's core and back.
  // A full cycle reads them alongside K (an entry survives iff its key is still the word's)
  // and builds the new K's in k_keys_next_; an incremental one appends its segment's.
  std::vector<uint32_t> k_keys_, k_keys_next_;
  // Fast lines the reclaimer unmarked (to make words of them cold) and the epoch that must
  // complete before it may (CloseUnmarked; kUnmarkedPending during the cycle that unmarked
  // them); under reclaim_mu.
  static constexpr uint64_t kUnmarkedPending = ~uint64_t{0};
  absl::flat_hash_map<uint64_t, uint64_t> unmarked_;
  bool TryMarkFast(uint64_t line_no, uint64_t cold_limit);
  void CloseUnmarked(const std::vector<uint64_t>& lines);

  // Statistics (relaxed counters).
  std::atomic<uint64_t> cycles{0}, full_cycles{0}, words_kept{0}, words_dropped{0}, words_cold{0};
  std::atomic<uint64_t> stalls{0};
  std::atomic<uint64_t> lines_marked{0}, lines_unmarked{0};
  std::function<void()> fold_hook;  // Engine::SetFoldHookForTesting; under reclaim_mu
  bool fail_next_cycle = false;     // Engine::FailNextReclaimForTesting; under reclaim_mu
  uint64_t recovered_records = 0, recovered_words = 0;
  uint64_t records_read_at_open = 0;
  std::chrono::nanoseconds recovery_time{0};

 private:
  absl::Status AssignSlot(txn_internal::ThreadTx& t);
  absl::Status Doom(txn_internal::ThreadTx& t, absl::Status st);
  absl::Status Snapshot(txn_internal::ThreadTx& t);
  absl::Status WriteCommit(txn_internal::ThreadTx& t);
  // WriteCommit's step 5 for the blocks t frees: their words cold in the index, and their lines
  // no longer fast (WordIndex::kFreed).
  void MakeFreedWordsCold(const txn_internal::ThreadTx& t);

 public:
  // A transaction with no allocation or free and 1 to kSmallCommitWrites declarations: writes
  // its record and ends it (rolled back if the record finds no room).
  absl::Status WriteSmallCommit(txn_internal::ThreadTx& t);  // dispatches to one of these:
  absl::Status WriteSmallCommitPortable(txn_internal::ThreadTx& t);
  absl::Status WriteSmallCommitCrc(txn_internal::ThreadTx& t);        // x86-64 with SSE 4.2
  absl::Status WriteSmallCommitStream(txn_internal::ThreadTx& t);     // and kPmem: streamed
  absl::Status WriteSmallCommitStreamSim(txn_internal::ThreadTx& t);  // the same under the sim
  // A transaction of one declaration (the most common of all) where its commit needs no call
  // (SmallCommitOneReady), on x86-64 with SSE 4.2, streamed or (FlushesInline) flushed with an
  // inline clwb: commits it and returns true (it cannot fail); else returns false having
  // changed nothing. The body then knows the record's shape (one entry), keeps fewer values
  // live and spills none (each store is one more that the previous commit's fence holds back).
  // REQUIRES: SmallCommitReady(t), t.writes_size() == 1.
  [[gnu::always_inline]] bool CommitOne(txn_internal::ThreadTx& t);
  // The record goes at `at` (SmallCommitOneReady's), in the log's tail block. REQUIRES:
  // SmallCommitOneReady, no mutation site disabled, one_path_ kClwb (FlushesInline) or
  // kStream (StreamsRecords).
  bool CommitOneCrc(txn_internal::ThreadTx& t, uint8_t* at);
  bool CommitOneLine(txn_internal::ThreadTx& t, uint8_t* at);  // kClwbLine: padded to the line
  bool CommitOneStream(txn_internal::ThreadTx& t, uint8_t* at);
  // The three under the crash simulator (SimOps), whatever mutation site is disabled: each of
  // its calls checks its own.
  enum class OnePath : uint8_t;
  bool CommitOneSim(txn_internal::ThreadTx& t, uint8_t* at, OnePath path);
  // Where the record of one declaration goes when its commit needs no call, else null. `line`:
  // with the pad that ends it at a cache line (LinePad), which must fit in the block too.
  [[gnu::always_inline]] uint8_t* SmallCommitOneReady(txn_internal::ThreadTx& t, bool line);
  // How CommitOne writes its record on this pool (fixed at open, from the pool's persister, the
  // processor and the directory's version): not at all (kNone: the general small commit does),
  // streamed, with an inline clwb, or with an inline clwb and padded to end at a cache line
  // (kClwbLine: a version-2 directory; docs/txn.md, "Line-ending records"); kSim*: the same
  // three on a kSim persister that models kPmem (the crash simulator runs them with SimOps).
  enum class OnePath : uint8_t {
    kNone,
    kStream,
    kClwb,
    kClwbLine,
    kSimStream,
    kSimClwb,
    kSimClwbLine
  };
  OnePath one_path_ = OnePath::kNone;
  // The persister is the crash simulator's modelling kPmem: the streamed writers run with SimOps.
  bool sim_seam_ = false;
  // Whether records of one declaration end at a cache line, padded (set at open: a version-2
  // directory whose records are not streamed; one_path_ kClwbLine follows from it).
  bool pad_ones_ = false;
  // (kOne: one_at is SmallCommitOneReady's; kLine: the record is padded to its line's end.)
  // (Ops: the primitives of streamed and clwb'd records, PmemOps or SimOps; epoch/persist.h.)
  template <bool kCrcInLoop, bool kStream, bool kOne = false, bool kLine = false,
            class Ops = PmemOps>
  [[gnu::always_inline]] absl::Status WriteSmallCommitBody(txn_internal::ThreadTx& t,
                                                           uint8_t* one_at = nullptr);
  // The body's last steps, once the record's words after the first are in the log: its first
  // word (the checksum) and flush, the transaction's end, the fence, the published position, the
  // index and the guard. `crc`: the record's checksum.
  template <bool kCrcInLoop, bool kStream, bool kOne, class Ops>
  [[gnu::always_inline]] absl::Status EndSmallCommit(txn_internal::ThreadTx& t,
                                                     const Persister& persister,
                                                     txn_internal::Chain& log,
                                                     const txn_internal::SmallRecord& r,
                                                     uint64_t crc);
  // The commit-order stamp of a small commit: the next of the thread's block when `solo`
  // (SmallCommitSolo) or `older` (every declared word's newest record has a smaller stamp than
  // that one, by StampPrecedes on the word's index slot read with acquire before the call),
  // else the first of a new block
  // (docs/txn.md, "Commit order"). `stamp_key` gets its WordIndex::KeyOf.
  [[gnu::always_inline]] bool SmallCommitSolo(const txn_internal::ThreadTx& t) const;
  [[gnu::always_inline]] uint64_t SmallCommitStamp(txn_internal::ThreadTx& t, bool solo, bool older,
                                                   uint32_t& stamp_key);
  [[gnu::cold, gnu::noinline]] absl::Status SmallCommitFailed(txn_internal::ThreadTx& t,
                                                              absl::Status st);

 private:
  void RollBack(txn_internal::ThreadTx& t);
  [[gnu::cold]] absl::Status AddRefused(txn_internal::ThreadTx& t, const void* p, size_t n);
  [[gnu::noinline]] static void CompactWrites(txn_internal::ThreadTx& t);
  void End(txn_internal::ThreadTx& t);
  // End without releasing the guard (the caller releases it); `small`: a small commit's
  // transaction (no allocation, no free).
  void EndKeepingGuard(txn_internal::ThreadTx& t, bool small = false);
  bool InFresh(const txn_internal::ThreadTx& t, uint64_t word) const;
  // Wakes the background thread when the log has reached the size at which it runs a cycle.
  void KickIfOverTrigger() {
    // kick_blocks_: the trigger, raised by the background thread to where its hysteresis would
    // run a cycle (a kick below that only wakes it for nothing); never without the thread.
    if (store.blocks_in_use() < kick_blocks_.load(std::memory_order_relaxed)) return;
    if (!bg_kick_.load(std::memory_order_relaxed)) Kick();
  }
  [[gnu::noinline]] void Kick();
  // Waits (holding no guard) while the log is at the stall size, for at most
  // Options::max_log_wait; a log that is still full then cannot drain, and the pool enters its
  // failed mode (the returned error names the pool and why).
  absl::Status WaitForRoom();

  // Log sizes in blocks: begin() waits for the reclaimer from stall_blocks_ on; committers
  // wake it from trigger_blocks_ on (see KickIfOverTrigger).
  // Relaxed atomics: an automatic budget (AdaptBudget) changes them while transactions run.
  std::atomic<uint64_t> stall_blocks_{~uint64_t{0}};
  // stall_blocks_ with the background reclaimer on, else never (BeginReady's one comparison).
  std::atomic<uint64_t> begin_stall_blocks_{~uint64_t{0}};
  std::atomic<uint64_t> trigger_blocks_{0};

 public:
  // The log budget in effect: Options::log_budget capped by the block limit (SetBudget); with
  // an automatic budget (Options::log_budget 0) adapted to the compacted log (AdaptBudget).
  std::atomic<uint64_t> budget{0};
  uint64_t Budget() const { return budget.load(std::memory_order_relaxed); }
  // The automatic budget: on, its starting size (the pool-sized default, also its floor), and
  // the full cycles in a row that found the compacted log small (AdaptBudget).
  bool auto_budget = false;
  uint64_t auto_budget_base = 0;
  int small_k_cycles_ = 0;
  uint64_t adapt_calls_ = 0;  // AdaptBudget's calls with a grown budget (its pressure test)
  std::atomic<uint64_t> budget_changes{0};
  // After a full (non-idle) cycle that left the compacted log at k_bytes; under reclaim_mu.
  void AdaptBudget(uint64_t k_bytes);
  void SetBudget(uint64_t bytes);

  template <class F>
  void ForEachThread(F&& f) {
    threads_.ForEach(f);
  }
  // CPU time of the background reclaimer thread so far (Stats::reclaimer_cpu).
  std::chrono::nanoseconds BackgroundCpu() const;

 private:
  void BackgroundLoop();
  void Watchdog();

  PerThread<txn_internal::ThreadTx> threads_;
  std::mutex slot_mu_;
  bool slot_used_[txn_internal::kMaxSlots] = {};

  std::mutex bg_mu_;
  std::condition_variable bg_cv_;
  bool bg_stop_ = false;
  std::atomic<bool> bg_kick_{false};  // set by committers when the log passes the trigger
  // The log size (in blocks) at which a committer wakes the background thread: the trigger, or
  // the level at which the thread's hysteresis would run a cycle (set by the thread after each
  // look; SetThresholds starts it at the trigger, or at never without the thread). Below it a
  // kick would only wake the thread for nothing (it polls every 5 ms anyway).
  std::atomic<uint64_t> kick_blocks_{~uint64_t{0}};
  // The background reclaimer's last cycle's error (OK after a cycle that succeeded), for the
  // cause WaitForRoom gives a log that cannot drain.
  std::mutex reclaim_error_mu_;
  absl::Status reclaim_error_;
  std::thread bg_;
};

// Inline here: End (txn.cc) and the small commit's writers (small_commit.cc) expand it.
[[gnu::always_inline]] inline void Engine::Impl::EndKeepingGuard(txn_internal::ThreadTx& t,
                                                                 bool small) {
  t.hot.end = t.hot.begin;
  // (hot.words stays: with tls_hot reset no add() reads it, and Commit's fast path needs depth 1.)
  if (txn_internal::tls_hot == &t.hot) txn_internal::tls_hot = &txn_internal::g_no_hot;
  // A small commit's transaction has neither (SmallCommitReady).
  if (!small && !t.allocs.empty()) t.allocs.clear();
  if (!small && !t.frees.empty()) t.frees.clear();
  if (!small && !t.logical.empty()) t.logical.clear();
  if (t.compact_at != txn_internal::kCompactWritesAt) t.compact_at = txn_internal::kCompactWritesAt;
  t.depth = 0;
  t.seq.store(t.seq.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);  // even
  alloc::tls_tx_scope = t.outer_scope;
  if (t.outer_scope != nullptr) t.outer_scope = nullptr;
}

}  // namespace pmrt::txn

#endif  // PMRT_TXN_INTERNAL_ENGINE_IMPL_H_
