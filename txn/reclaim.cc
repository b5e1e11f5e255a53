// A reclamation cycle (docs/txn.md, "Reclamation", has the argument, including SpecPMT's
// multi-thread rule): every record of the epochs up to the newest completed one is folded into a
// new compacted log K' (per word only its newest record is kept, and that too is dropped when the
// word goes cold); K' and the lines of the words made cold are fenced; then the descriptor that
// makes K' the compacted log is written, and its fence is the cycle's commit point (a crash
// before it recovers from the old descriptor, with every folded record still in its log); then
// the thread logs' heads move past the folded blocks, fenced before any of those blocks is
// reused; then the folded blocks are freed. One cycle at a time, under reclaim_mu, run by the
// background thread (background.cc) or Engine::Reclaim. The reclaimer also marks and unmarks fast
// lines (TryMarkFast, CloseUnmarked; docs/txn.md, "Fast lines").
#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "base/crc32c.h"
#include "base/status_macros.h"
#include "txn/internal/compact_writer.h"
#include "txn/internal/engine_impl.h"

namespace pmrt::txn_internal {
namespace {
std::atomic<uint64_t> g_reclaim_failures{0};
}  // namespace

void InjectReclaimFailures(uint64_t count) { g_reclaim_failures.store(count); }

// True (and one failure fewer left) when a reclamation failure is injected.
bool TakeInjectedReclaimFailure() {
  for (uint64_t n = g_reclaim_failures.load(std::memory_order_relaxed); n != 0;) {
    if (g_reclaim_failures.compare_exchange_weak(n, n - 1)) return true;
  }
  return false;
}
}  // namespace pmrt::txn_internal

namespace pmrt::txn {

using txn_internal::CompactWriter;

namespace {

// The keys of K's data words (Engine::Impl::k_keys_) do not match K's records: a bug. The cycle
// fails before anything of it is durable; nothing is dropped.
absl::Status KeysMismatch(size_t at) {
  return absl::InternalError(absl::StrCat(
      "txn: reclamation: the compacted log's volatile keys do not match its records (at word ", at,
      "); nothing was dropped"));
}

// A thread log to trim once the cycle's descriptor is durable: its first `keep` blocks hold only
// folded records.
struct Trim {
  uint32_t slot;
  size_t keep;
};

// One cycle: its state, and a method per step (numbered as in docs/txn.md, "Reclamation"). Run
// once, under reclaim_mu, by Engine::Impl::Reclaim. Nothing of the cycle is durable before step
// 3's fence; a cycle that fails before it leaves the engine as it found it, except that words it
// made cold stay cold (safe: their records are still in the logs) and that the next cycle is a
// full one.
class ReclaimCycle {
 public:
  // `idle`: the background thread's cycle of an idle engine (Engine::Impl::Reclaim).
  ReclaimCycle(Engine::Impl& impl, bool idle) : impl_(impl), idle_(idle) {}

  // Steps 0 to 5. OK when the cycle's descriptor is durable, or when no epoch has completed
  // since the last cycle (nothing to fold); else the fold's error (nothing of the cycle durable)
  // or the epoch advance's.
  absl::Status Run(bool advance);

 private:
  // An entry of K or of a thread log, queued for its decision (Decide) with the key of the
  // record it came from.
  struct Pending {
    uint64_t word;
    uint64_t value;
    uint32_t key;
  };
  static constexpr size_t kBatch = 1024, kPrefetchAhead = 24;

  // 0. The cold age, the fast lines whose grace period has ended, and the kind of cycle.
  void Plan();
  void ExpireUnmarked();
  // 1 and 2. The fold into K' (1a: K itself, in a full cycle; 1b: the thread logs), then the
  // fence that makes K' and the lines of the words made cold durable.
  void Fold();
  void FoldCompactLog();
  void FoldThreadLog(uint32_t s);
  template <class F>
  void Walk(uint32_t slot, uint32_t b, size_t end, F&& fn);
  absl::Status Consider(const RecordHeader* h, uint32_t key, bool from_k);
  absl::Status CarryTombstone(uint64_t head);
  absl::Status Decide();
  absl::Status DecideOne(const Pending& e);
  // A failed fold: K' given up.
  void Abandon();
  // 3 to 5, and the engine's state after them.
  void SwitchDescriptor();
  std::vector<uint32_t> MoveHeads();
  void FreeBlocks(std::vector<uint32_t> freed);
  void Conclude();

  Engine::Impl& impl_;
  const bool idle_;
  // Step 0.
  uint64_t h_new_ = 0;            // the new horizon: the newest completed epoch
  uint64_t cold_limit_ = 0;       // a word last touched in an epoch <= this may go cold
  uint64_t new_seq_ = 0;          // the seq of this cycle's descriptor and of K''s records
  size_t bs_ = 0;                 // the log's block size
  bool full_ = false;             // a full cycle rewrites K; an incremental one appends a segment
  std::unique_ptr<Chain> k_new_;  // a full cycle's K' (until it becomes the compacted log)
  Chain* k_out_ = nullptr;        // where K' goes: *k_new_, or the current K (a new segment)
  // The keys of K''s data words (see k_keys_): k_keys_next_ built afresh by a full cycle, k_keys_
  // appended to by an incremental one (cut back to k_keys_before_ if the cycle fails).
  std::vector<uint32_t>* k_keys_out_ = nullptr;
  size_t k_keys_before_ = 0;
  // Steps 1 and 2.
  std::optional<CompactWriter> out_;    // writes K'
  std::vector<Pending> pending_;        // entries queued for Decide
  size_t k_key_at_ = 0;                 // K's data words read so far (their keys: k_keys_)
  std::vector<uint64_t> unmarked_now_;  // the fast lines this cycle unmarked
  std::vector<Trim> trims_;             // the thread logs whose head moves in step 4
  absl::Status failed_ = absl::OkStatus();
  // Step 5: K''s size in blocks.
  uint64_t k_blocks_ = 0;
  // Statistics: entries kept, superseded, made cold; lines marked fast; K''s bytes.
  uint64_t kept_ = 0, dropped_ = 0, cold_ = 0, marked_ = 0, k_bytes_ = 0;
};

absl::Status ReclaimCycle::Run(bool advance) {
  Engine::Impl& e = impl_;
  // 0. The horizon: the newest completed epoch. Every record of an epoch <= it is complete (its
  //    guard ended). Its data lines are not necessarily durable: a hot word's committed value
  //    is in its newest record, and its line is written back when the word goes cold (1).
  if (advance && e.epochs.completed() <= e.horizon) RETURN_IF_ERROR(e.epochs.Advance());
  h_new_ = e.epochs.completed();
  if (h_new_ <= e.horizon) return absl::OkStatus();
  Plan();
  Fold();
  if (e.fail_next_cycle && failed_.ok()) {
    e.fail_next_cycle = false;
    failed_ = absl::AbortedError("txn: reclamation cycle failed on request (a test)");
  }
  if (!failed_.ok()) {
    Abandon();
    return failed_;
  }
  SwitchDescriptor();
  FreeBlocks(MoveHeads());
  Conclude();
  return absl::OkStatus();
}

void ReclaimCycle::Plan() {
  Engine::Impl& e = impl_;
  const bool pressure = e.store.blocks_in_use() * e.store.block_size() > e.Budget();
  // Over budget: a full cycle (K's superseded entries go too), but the cold age stays what the
  // budget affords (adapted in Conclude): zeroing it would drop the whole hot set each time the
  // log touches the budget, and every word would then pay a snapshot.
  // Never below the touch slack: a transaction open in epoch E declared its words without a CAS
  // when their touch epochs were >= E - touch_slack, and E > h_new (its guard keeps E from
  // completing), so cold_limit = h_new - age < E - touch_slack keeps all of them hot.
  // An idle engine's cycle (BackgroundLoop): no transaction has run for a while, so every word
  // past the touch slack goes cold and the compacted log shrinks to nothing.
  const uint64_t age = mutation::Swapped(txn_internal::kSlackMutant) ? 0
                       : idle_                                       ? e.touch_slack
                               : std::max<uint64_t>(e.cold_age, e.touch_slack);
  ExpireUnmarked();
  cold_limit_ = h_new_ > age ? h_new_ - age : 0;
  new_seq_ = e.seq + 1;
  bs_ = e.store.block_size();
  uint64_t k_blocks_before;
  {
    Chain& k = e.store.chain(kCompactSlot);
    std::lock_guard<std::mutex> l(k.mu);
    k_blocks_before = k.blocks.size();
  }
  // A full cycle rewrites K (dropping superseded entries and cold words); an incremental one
  // only appends the newly folded live entries to K as a new segment (records of seq new_seq):
  // it never drops a word's newest entry, so older entries of the word left in earlier segments
  // are always followed by a newer one (recovery applies K's records in chain order).
  full_ = e.force_full_ || pressure ||
          e.incremental_cycles_ >= Engine::Impl::kMaxIncrementalCycles ||
          k_blocks_before * bs_ >= std::max<uint64_t>(2 * e.full_k_bytes_, e.Budget() / 8);

  k_new_ = std::make_unique<Chain>();
  k_out_ = full_ ? k_new_.get() : &e.store.chain(kCompactSlot);
  // The keys of the new K's data words (see k_keys_): a full cycle builds them afresh, an
  // incremental one appends to the current K's (cut back if the cycle fails).
  k_keys_out_ = full_ ? &e.k_keys_next_ : &e.k_keys_;
  if (full_) e.k_keys_next_.clear();
  k_keys_before_ = e.k_keys_.size();
}

void ReclaimCycle::ExpireUnmarked() {
  // Fast lines unmarked by earlier cycles whose epoch has completed: their words may go cold now
  // (docs/txn.md, "Fast lines").
  auto& unmarked = impl_.unmarked_;
  for (auto it = unmarked.begin(); it != unmarked.end();) {
    if (it->second <= h_new_) {
      unmarked.erase(it++);
    } else {
      ++it;
    }
  }
}

void ReclaimCycle::Fold() {
  Engine::Impl& e = impl_;
  // This cycle's unmarkings: the epoch they wait for is read once the fold is over (or has
  // failed), after a fence (CloseUnmarked).
  absl::Cleanup close_unmarked = [&] { e.CloseUnmarked(unmarked_now_); };
  if (!full_) e.store.Seal(*k_out_);  // the new segment starts in a new block
  out_.emplace(e.store, *k_out_, new_seq_, h_new_);
  // A word's entry survives iff it is the word's newest record (index key) and the word is
  // not going cold. SpecPMT's multi-thread rule: every older record of the word is in this
  // cycle's set too (all records of epochs <= h_new, of every log), so the newest one is
  // never dropped while an older one could still be replayed after it.
  //
  // The entries are queued and decided in order (Decide), each index slot prefetched
  // kPrefetchAhead entries before it is read: the slots are scattered, and a K record holds
  // thousands.
  pending_.reserve(kBatch);
  FoldCompactLog();
  if (full_ && failed_.ok() && k_key_at_ != e.k_keys_.size()) failed_ = KeysMismatch(k_key_at_);
  // 1b. Every thread log: its records of epochs in (horizon, h_new], up to what its owner
  //     has published (the published record and everything before it are complete).
  for (uint32_t s = 0; s < kMaxSlots && failed_.ok(); ++s) FoldThreadLog(s);
  if (failed_.ok()) failed_ = Decide();
  std::move(close_unmarked).Invoke();
  out_->Finish();
  k_bytes_ = out_->bytes();
  // 2. K' (records, block headers, links, table entries) and the lines of the words that
  //    went cold durable before the descriptor that makes K' the compacted log.
  e.pool.persister().Fence(txn_internal::kCompactFence);
}

// 1a. Full cycle: the current compacted log, every segment (each data word's key is the
//     next of k_keys_, in K's order; records of a failed cycle, seq > the current one, are
//     not part of it and have no keys).
//     The records are read as written (KnownRecord): every one up to a block's RecordsEnd
//     is complete, written by this process or found valid when the log was walked at open,
//     so its checksum is not computed again (docs/txn.md, "Design notes", "The reclaimer").
void ReclaimCycle::FoldCompactLog() {
  Engine::Impl& e = impl_;
  std::vector<uint32_t> old_k;
  uint64_t k_pub = kNothingPublished;
  if (full_) {
    Chain& k = e.store.chain(kCompactSlot);
    k_pub = k.published.load(std::memory_order_acquire);
    std::lock_guard<std::mutex> l(k.mu);
    old_k.assign(k.blocks.begin(), k.blocks.end());
  }
  if (k_pub == kNothingPublished) old_k.clear();  // K holds no record yet
  for (uint32_t b : old_k) {
    Walk(kCompactSlot, b, e.store.RecordsEnd(b, k_pub), [&](const RecordHeader* h) {
      if (h->stamp <= e.seq) failed_ = Consider(h, 0, /*from_k=*/true);
      return true;
    });
  }
}

// 1b for one thread log (slot s).
void ReclaimCycle::FoldThreadLog(uint32_t s) {
  Engine::Impl& e = impl_;
  Chain& c = e.store.chain(s);
  const uint64_t pub = c.published.load(std::memory_order_acquire);
  if (pub == kNothingPublished) return;
  std::vector<uint32_t> blocks;
  {
    std::lock_guard<std::mutex> l(c.mu);
    blocks.assign(c.blocks.begin(), c.blocks.end());
  }
  const auto pub_block = static_cast<uint32_t>(pub >> 32);
  size_t keep = blocks.empty() ? 0 : blocks.size() - 1;  // never the last block
  for (size_t i = 0; i < blocks.size() && failed_.ok(); ++i) {
    const uint32_t b = blocks[i];
    bool newer = false;
    Walk(s, b, e.store.RecordsEnd(b, pub), [&](const RecordHeader* h) {
      if (h->epoch > h_new_) {
        newer = true;
        return false;
      }
      if (h->epoch > e.horizon) failed_ = Consider(h, WordIndex::KeyOf(h->stamp), false);
      return true;
    });
    if (newer || b == pub_block) {
      keep = std::min(keep, i);
      break;
    }
  }
  if (keep > 0) trims_.push_back({s, keep});
}

// The records of block b of a log (`slot`) up to `end`, in order, to `fn` until it returns false
// or the cycle has failed.
template <class F>
void ReclaimCycle::Walk(uint32_t slot, uint32_t b, size_t end, F&& fn) {
  const uint8_t* base = impl_.store.BlockAt(b);
  for (size_t pos = kBlockPayload; pos < end && failed_.ok();) {
    const RecordHeader* h = txn_internal::KnownRecord(base, pos, end);
    if (h == nullptr) {
      failed_ = absl::InternalError(absl::StrCat(
          "txn: reclamation found a record that does not fit its log (slot ", slot,
          ", block at pool offset ", impl_.store.BlockOffset(b), ", offset ", pos, ", end ", end,
          "): the log's volatile state is inconsistent; nothing was dropped"));
      return;
    }
    if (!fn(h)) return;
    pos += size_t{h->words} * 8;
  }
}

// A record's entries, queued for Decide. A thread record's entries all have its key; a K
// record's data words take theirs from k_keys_, in order (from_k).
absl::Status ReclaimCycle::Consider(const RecordHeader* h, uint32_t key, bool from_k) {
  absl::Status st = absl::OkStatus();
  ForEachEntry(h, [&](uint64_t head, const uint64_t* values) {
    if (!st.ok()) return;
    const EntryType type = EntryTypeOf(head);
    if (type == EntryType::kFree && !full_) {
      st = CarryTombstone(head);
      return;
    }
    if (type != EntryType::kData) return;  // allocations; tombstones in a full cycle: done
    for (uint64_t i = 0, w = EntryWord(head); i < EntryWords(head); ++i, ++w) {
      if (from_k) {
        if (k_key_at_ == impl_.k_keys_.size()) [[unlikely]] {
          st = KeysMismatch(impl_.k_keys_.size());
          return;
        }
        key = impl_.k_keys_[k_key_at_++];
      }
      pending_.push_back({w, values[i], key});
      if (pending_.size() == kBatch) {
        st = Decide();
        if (!st.ok()) return;
      }
    }
  });
  return st;
}

// A tombstone in an incremental cycle. A tombstone is the newest record of the freed block's
// words. A full cycle drops every older entry of them (their keys no longer match); an
// incremental one does not read K, whose earlier segments may hold such entries, so it carries
// the tombstone into its segment for the words that are still cold (no newer record: a newer one
// is kept in this segment or comes later, and overrides K at recovery). Without it, recovery
// would replay K's old entries into the block's next life.
absl::Status ReclaimCycle::CarryTombstone(uint64_t head) {
  WordIndex& index = *impl_.index;
  absl::Status st = absl::OkStatus();
  const uint64_t first = EntryWord(head), end = first + EntryWords(head);
  for (uint64_t w = first; w < end && st.ok();) {
    if (w >= index.words() || index.at(w).load(std::memory_order_acquire) != 0) {
      ++w;
      continue;
    }
    uint64_t n = 1;
    while (w + n < end && n < kMaxEntryWords &&
           index.at(w + n).load(std::memory_order_acquire) == 0)
      ++n;
    st = out_->Mark(EntryType::kFree, w, n);
    w += n;
  }
  return st;
}

// The queued entries, in order, each index slot prefetched kPrefetchAhead entries before
// DecideOne reads it.
absl::Status ReclaimCycle::Decide() {
  if (impl_.fold_hook) [[unlikely]]
    impl_.fold_hook();
  WordIndex& index = *impl_.index;
  const size_t n = pending_.size();
  for (size_t i = 0; i < std::min(n, kPrefetchAhead); ++i)
    __builtin_prefetch(&index.at(pending_[i].word), 1);
  for (size_t i = 0; i < n; ++i) {
    if (i + kPrefetchAhead < n) __builtin_prefetch(&index.at(pending_[i + kPrefetchAhead].word), 1);
    RETURN_IF_ERROR(DecideOne(pending_[i]));
  }
  pending_.clear();
  return absl::OkStatus();
}

// One entry: dropped (superseded), made cold, or kept in K'.
[[gnu::always_inline]] inline absl::Status ReclaimCycle::DecideOne(const Pending& e) {
  Engine::Impl& impl = impl_;
  WordIndex& index = *impl.index;
  std::atomic<uint64_t>& slot = index.at(e.word);
  uint64_t v = slot.load(std::memory_order_acquire);
  if (WordIndex::Key(v) != e.key) {
    ++dropped_;  // superseded by a newer record (or a tombstone)
    return absl::OkStatus();
  }
  // Cold: the last transaction that touched the word ran in an epoch <= cold_limit, so
  // it has ended and the word holds its value (committed, or restored by an abort). The
  // CAS fails if a transaction touches the word meanwhile (it moves the epoch first):
  // then the entry stays, as that transaction may still fail. After the CAS the word's
  // line is flushed; step 2's fence makes it durable before the descriptor that drops
  // the word's record (a transaction that writes the word after the CAS snapshots it
  // first, so the line may also carry its uncommitted value: the snapshot undoes it).
  //
  // A word of a fast line (WordIndex::kFast) may be declared by an open transaction that
  // did not read its slot (txn::add's inline path), so its touch epoch says nothing: the
  // line is unmarked instead, and its words may go cold once the epoch read after that
  // (CloseUnmarked) has completed, when every transaction that could have seen the line
  // fast has ended. Until then (unmarked_) the entry stays.
  // A line a free unmarked (kFreed) is unmarked here as if by this cycle. The byte is
  // read once: a free's kFreed stored after this read overwrites nothing this cycle
  // relies on (a 0 read here was stored by a reclaimer, and a fast-path declaration
  // before it has had its grace period).
  const uint64_t line_no = WordIndex::LineOf(e.word);
  std::atomic<uint8_t>& line = index.line(line_no);
  const uint8_t b = line.load(std::memory_order_relaxed);
  auto unmark = [&] {
    line.store(0, std::memory_order_seq_cst);
    impl.unmarked_.insert_or_assign(line_no, Engine::Impl::kUnmarkedPending);
    unmarked_now_.push_back(line_no);
  };
  // (The mutant takes a kFreed line for one never marked.)
  const bool freed = b == WordIndex::kFreed && !mutation::Swapped(txn_internal::kFreedMutant);
  if (freed) [[unlikely]]
    unmark();
  if ((full_ || mutation::Swapped(txn_internal::kRuleMutant)) &&
      WordIndex::TouchedBy(v, cold_limit_)) {
    bool may_cold = !freed && !impl.unmarked_.contains(line_no);
    if (b == WordIndex::kFast) {
      // (The mutant makes the word cold now, without waiting.)
      if (mutation::Swapped(txn_internal::kGraceMutant)) {
        line.store(0, std::memory_order_seq_cst);
      } else {
        unmark();
        may_cold = false;
      }
    }
    if (may_cold && slot.compare_exchange_strong(v, 0, std::memory_order_acq_rel)) {
      impl.pool.persister().Flush(txn_internal::kColdFlush, impl.pool.base() + e.word * 8, 8);
      ++cold_;
      return absl::OkStatus();
    }
  } else if (impl.options.fast_lines && b == 0 && !impl.unmarked_.contains(line_no)) {
    marked_ += impl.TryMarkFast(line_no, cold_limit_) ? 1 : 0;
  }
  // Kept: the entry moves to K' with the key it had, which the index still holds (a
  // word's key is not rewritten when its newest record moves into K, so this cycle
  // writes no index slot of a word it keeps: those are the lines the transactions use).
  RETURN_IF_ERROR(out_->Add(e.word, e.value));
  k_keys_out_->push_back(e.key);
  ++kept_;
  return absl::OkStatus();
}

void ReclaimCycle::Abandon() {
  // Nothing durable refers to K' (a full cycle's chain is unreachable; an incremental
  // segment's records carry a seq above the durable descriptor's and are ignored). Words made
  // cold stay cold (their records are still in the logs, and a transaction snapshots a cold
  // word again): safe either way. The next cycle is a full one, which drops a partial segment.
  if (full_) {
    std::vector<uint32_t> unused(k_new_->blocks.begin(), k_new_->blocks.end());
    impl_.store.Release(unused);
  } else {
    impl_.force_full_ = true;
    impl_.k_keys_.resize(k_keys_before_);  // the failed segment's records are skipped from now on
  }
}

void ReclaimCycle::SwitchDescriptor() {
  // 3. The descriptor, into the line not holding the current one. Its fence is the cycle's
  //    commit point: before it a crash recovers from the old descriptor (every folded record is
  //    still in its log), after it from the new one (K' replaces them). A torn write fails its
  //    crc and the old one stays current.
  uint64_t k_head;
  {
    std::lock_guard<std::mutex> l(k_out_->mu);
    k_head = k_out_->blocks.empty() ? 0 : impl_.store.BlockOffset(k_out_->blocks.front());
  }
  impl_.WriteDescriptor(new_seq_, h_new_, k_head);
}

std::vector<uint32_t> ReclaimCycle::MoveHeads() {
  // 4. Move the heads of the thread logs past the folded blocks (aligned 8-byte stores: old or
  //    new head on media, both fine now), durably before any of those blocks is reused.
  txn_internal::LogStore& store = impl_.store;
  const Persister& persister = impl_.pool.persister();
  std::vector<uint32_t> freed;
  for (const Trim& t : trims_) {
    Chain& c = store.chain(t.slot);
    std::lock_guard<std::mutex> l(c.mu);
    for (size_t i = 0; i < t.keep; ++i) {
      freed.push_back(c.blocks.front());
      c.blocks.pop_front();
    }
    store.dir()->heads[t.slot].store(store.BlockOffset(c.blocks.front()),
                                     std::memory_order_release);
    persister.Flush(txn_internal::kHeadMoveFlush, &store.dir()->heads[t.slot], 8);
  }
  if (!trims_.empty()) persister.Fence(txn_internal::kHeadMoveFence);
  return freed;
}

void ReclaimCycle::FreeBlocks(std::vector<uint32_t> freed) {
  // 5. Free the folded blocks and, after a full cycle, the old compacted log (unreachable from
  //    durable state). The folded thread blocks go last: the free pool hands out its most recent
  //    blocks first, so they are reused soonest (what the crash test's gate needs to see step
  //    4's fence).
  txn_internal::LogStore& store = impl_.store;
  if (full_) {
    Chain& k = store.chain(kCompactSlot);
    std::lock_guard<std::mutex> l(k.mu);
    freed.insert(freed.begin(), k.blocks.begin(), k.blocks.end());
  }
  store.Seal(*k_out_);
  {
    std::lock_guard<std::mutex> l(k_out_->mu);
    k_blocks_ = k_out_->blocks.size();
  }
  if (full_) store.SetCompact(std::move(k_new_));
  store.Release(freed);
}

void ReclaimCycle::Conclude() {
  Engine::Impl& e = impl_;
  if (full_) e.k_keys_.swap(e.k_keys_next_);
  e.seq = new_seq_;
  e.horizon = h_new_;
  e.compact_bytes = k_blocks_ * bs_;
  if (full_) {
    e.full_k_bytes_ = e.compact_bytes;
    e.incremental_cycles_ = 0;
    e.force_full_ = false;
    e.full_cycles.fetch_add(1, std::memory_order_relaxed);
  } else {
    ++e.incremental_cycles_;
  }
  // An automatic budget first follows the hot set (AdaptBudget); the cold age then adapts to
  // the budget in effect.
  if (full_ && e.auto_budget && !idle_) e.AdaptBudget(k_bytes_);
  if (full_ && e.options.adaptive_cold && !idle_) {
    // Keep as many words hot as the budget affords: the compacted log holds one entry per hot
    // word, and a cold word costs a fence at its next first write.
    const uint64_t budget = e.Budget();
    if (k_bytes_ > budget / 2) {
      e.cold_age = std::max<uint64_t>(e.cold_age / 2, e.touch_slack);
    } else if (k_bytes_ < budget / 4) {
      e.cold_age = std::min(e.options.max_cold_after_epochs, e.cold_age * 2 + 1);
    }
  }
  e.cycles.fetch_add(1, std::memory_order_relaxed);
  e.words_kept.fetch_add(kept_, std::memory_order_relaxed);
  e.words_dropped.fetch_add(dropped_, std::memory_order_relaxed);
  e.words_cold.fetch_add(cold_, std::memory_order_relaxed);
  e.lines_marked.fetch_add(marked_, std::memory_order_relaxed);
}

}  // namespace

absl::Status Engine::Impl::Reclaim(bool advance, bool idle) {
  std::lock_guard<std::mutex> cycle_lock(reclaim_mu);
  if (idle) force_full_ = true;  // drops the compacted log's entries of the words that go cold
  if (txn_internal::TakeInjectedReclaimFailure()) {
    return absl::ResourceExhaustedError("reclamation: injected failure");
  }
  ReclaimCycle cycle(*this, idle);
  return cycle.Run(advance);
}

void Engine::Impl::WriteDescriptor(uint64_t new_seq, uint64_t new_horizon, uint64_t k_head) {
  // Into the line not holding the current descriptor; the stamp counter as max_stamp (every
  // stamp issued so far is below it). Flushed and fenced: the caller's commit point.
  Descriptor d{};
  d.seq = new_seq;
  d.horizon = new_horizon;
  d.k_head = k_head;
  d.max_stamp = next_stamp.load(std::memory_order_relaxed);
  d.crc = Crc32c(&d, offsetof(Descriptor, crc));
  const int line = 1 - desc_line;
  std::memcpy(&store.dir()->desc[line], &d, sizeof(d));
  pool.persister().Flush(txn_internal::kDescFlush, &store.dir()->desc[line], sizeof(d));
  pool.persister().Fence(txn_internal::kDescFence);
  desc_line = line;
}

// A line whose words the reclaimer saw hot, none of them a cold candidate (a line with a stale
// word would be unmarked again by the next full cycle, every time, and the stale word would
// never go cold), becomes fast: 0 -> kChecking, the 8 slots, kChecking -> kFast, all seq_cst. A
// commit that frees words of the line stores each slot 0 and then, unless its seq_cst load of
// the byte reads 0 or kFreed, the byte kFreed (WriteCommit): if this check read a slot before
// its 0, that byte store comes after the CAS to kChecking (the free's load read kChecking), so
// the CAS to kFast fails; or, if both CASes came first, the byte ends kFreed before the freed
// words can be declared again (the heap frees them after). No other thread makes a word cold
// (the reclaimer is this one, under reclaim_mu).
bool Engine::Impl::TryMarkFast(uint64_t line_no, uint64_t cold_limit) {
  // First without a CAS: a line with a cold or stale word (Zipfian workloads keep many) costs
  // no locked instruction on the map, whose lines the transactions read.
  if (!index->LineAllHot(line_no, cold_limit)) return false;
  std::atomic<uint8_t>& line = index->line(line_no);
  uint8_t expected = 0;
  if (!line.compare_exchange_strong(expected, WordIndex::kChecking, std::memory_order_seq_cst))
    return false;
  expected = WordIndex::kChecking;
  const uint8_t to = index->LineAllHot(line_no, cold_limit) ? WordIndex::kFast : 0;
  return line.compare_exchange_strong(expected, to, std::memory_order_seq_cst) &&
         to == WordIndex::kFast;
}

// The epoch this cycle's unmarkings wait for: read after a fence that follows their stores. A
// transaction that loaded such a byte before its store (and so may declare the line's words
// without reading their slots) loaded the global epoch before that, as its guard's (txn::begin
// enters the guard before any add): so its epoch is at most the one read here, and once that
// epoch has completed the transaction has ended (committed: the slots hold its key and epoch,
// and the cold CAS of the value read before fails or sees the new touch epoch; or aborted: the
// words hold their committed values again). A transaction that loads the byte after the store
// sees 0 and reads the slot, with the touch slack's protection (Engine::Add).
void Engine::Impl::CloseUnmarked(const std::vector<uint64_t>& lines) {
  if (lines.empty()) return;
  std::atomic_thread_fence(std::memory_order_seq_cst);
  const uint64_t e = epochs.current();
  for (uint64_t l : lines) unmarked_[l] = e;
  lines_unmarked.fetch_add(lines.size(), std::memory_order_relaxed);
}

}  // namespace pmrt::txn
