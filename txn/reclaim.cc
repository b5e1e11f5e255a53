// The reclaimer: folds every record of epochs up to the newest completed one into a new
// compacted log K' (keeping, per word, only the newest record, and dropping it too when the
// word went cold), switches the descriptor, then frees the folded blocks. One cycle at a time;
// run by the background thread (log over budget) or by Engine::Reclaim. docs/txn.md,
// "Reclamation", has the argument, including SpecPMT's multi-thread rule.
#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "base/crc32c.h"
#include "base/status_macros.h"
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
using txn_internal::kNoBlock;
using txn_internal::kNothingPublished;
using txn_internal::MakeEntryHead;
using txn_internal::RecordHeader;
using txn_internal::RecordKind;
using txn_internal::WordIndex;

namespace {

// Writes the compacted log: one kCompact record per block, filled entry by entry in a staging
// buffer (a run's head is rewritten as the run grows) and copied into its block when complete
// (CopyFlush). A block's record is large enough to go with non-temporal stores whatever the
// pool's record writes (kStreamAlwaysFrom; only a cycle's last, partly filled record may be
// smaller): K' reaches memory without being read first or passing through this core's caches,
// where it would evict lines the transactions use (a full cycle writes all of K', one entry per
// hot word).
class CompactWriter {
 public:
  CompactWriter(txn_internal::LogStore& store, Chain& chain, uint64_t seq, uint64_t horizon)
      : store_(store), chain_(chain), seq_(seq), horizon_(horizon) {}

  absl::Status Add(uint64_t word, uint64_t value) {
    if (run_head_ != nullptr && word == run_word_ + run_len_ && run_len_ < kMaxEntryWords &&
        used_ + 8 <= room_) {
      ++run_len_;
      *run_head_ = MakeEntryHead(EntryType::kData, run_len_, run_word_);
    } else {
      if (rec_ == nullptr || used_ + 16 > room_) RETURN_IF_ERROR(Next());
      run_head_ = reinterpret_cast<uint64_t*>(rec_ + used_);
      run_word_ = word;
      run_len_ = 1;
      *run_head_ = MakeEntryHead(EntryType::kData, 1, word);
      used_ += 8;
    }
    std::memcpy(rec_ + used_, &value, 8);
    used_ += 8;
    return absl::OkStatus();
  }

  // A mark entry (a tombstone carried into an incremental segment): the head alone.
  absl::Status Mark(EntryType type, uint64_t word, uint64_t n) {
    if (rec_ == nullptr || used_ + 8 > room_) RETURN_IF_ERROR(Next());
    const uint64_t head = MakeEntryHead(type, n, word);
    std::memcpy(rec_ + used_, &head, 8);
    used_ += 8;
    run_head_ = nullptr;  // the next data entry starts a new run
    return absl::OkStatus();
  }

  // Closes the last record (copied into its block and flushed; the caller fences).
  void Finish() {
    if (rec_ == nullptr) return;
    auto* h = reinterpret_cast<RecordHeader*>(rec_);
    h->words = static_cast<uint16_t>(used_ / 8);
    h->kind = static_cast<uint16_t>(RecordKind::kCompact);
    h->crc = 0;
    h->stamp = seq_;
    h->epoch = horizon_;
    h->gen = store_.BlockGen(chain_.tail);
    h->crc = txn_internal::RecordCrc(h);
    store_.pool().persister().CopyFlush(txn_internal::kCompactFlush, at_, rec_, used_);
    store_.Publish(chain_, used_);
    bytes_ += used_;
    rec_ = nullptr;
    run_head_ = nullptr;
  }
  uint64_t bytes() const { return bytes_; }

 private:
  absl::Status Next() {
    Finish();
    // A whole block's payload: one record per block. Taken inside a guard, held only this long:
    // a block the heap allocates here is an allocation of the guard's epoch, and Reserve
    // registers its table entry dirty in that epoch, so the boundary that makes the allocation
    // durable writes the entry back with it (a crash never leaks the block). The fold itself
    // holds no guard: a guard held through it (milliseconds in a full cycle) kept every epoch
    // boundary waiting, and with it every transaction's begin (docs/txn.md, "Reclamation").
    {
      epoch::Guard g(store_.epochs());
      ASSIGN_OR_RETURN(at_, store_.Reserve(chain_, kCompactSlot, store_.max_record_bytes()));
    }
    room_ = store_.max_record_bytes();
    if (stage_ == nullptr) stage_ = std::make_unique<uint64_t[]>(room_ / 8);
    rec_ = reinterpret_cast<uint8_t*>(stage_.get());
    used_ = sizeof(RecordHeader);
    return absl::OkStatus();
  }

  txn_internal::LogStore& store_;
  Chain& chain_;
  const uint64_t seq_, horizon_;
  std::unique_ptr<uint64_t[]> stage_;  // the record being built
  uint8_t* rec_ = nullptr;             // stage_ while a record is open
  uint8_t* at_ = nullptr;              // its place in the log
  size_t used_ = 0, room_ = 0;
  uint64_t* run_head_ = nullptr;
  uint64_t run_word_ = 0, run_len_ = 0;
  uint64_t bytes_ = 0;
};

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

}  // namespace

absl::Status Engine::Impl::Reclaim(bool advance, bool idle) {
  std::lock_guard<std::mutex> cycle_lock(reclaim_mu);
  if (idle) force_full_ = true;  // drops the compacted log's entries of the words that go cold
  if (txn_internal::TakeInjectedReclaimFailure()) {
    return absl::ResourceExhaustedError("reclamation: injected failure");
  }
  // 0. The horizon: the newest completed epoch. Every record of an epoch <= it is complete (its
  //    guard ended). Its data lines are not necessarily durable: a hot word's committed value
  //    is in its newest record, and its line is written back when the word goes cold (1).
  if (advance && epochs.completed() <= horizon) RETURN_IF_ERROR(epochs.Advance());
  const uint64_t h_new = epochs.completed();
  if (h_new <= horizon) return absl::OkStatus();
  const bool pressure = store.blocks_in_use() * store.block_size() > budget;
  // Over budget: a full cycle (K's superseded entries go too), but the cold age stays what the
  // budget affords (adapted below): zeroing it would drop the whole hot set each time the log
  // touches the budget, and every word would then pay a snapshot.
  // Never below the touch slack: a transaction open in epoch E declared its words without a CAS
  // when their touch epochs were >= E - touch_slack, and E > h_new (its guard keeps E from
  // completing), so cold_limit = h_new - age < E - touch_slack keeps all of them hot.
  // An idle engine's cycle (BackgroundLoop): no transaction has run for a while, so every word
  // past the touch slack goes cold and the compacted log shrinks to nothing.
  const uint64_t age = mutation::Swapped(txn_internal::kSlackMutant) ? 0
                       : idle                                        ? touch_slack
                              : std::max<uint64_t>(cold_age, touch_slack);
  // Fast lines unmarked by earlier cycles whose epoch has completed: their words may go cold now
  // (docs/txn.md, "Fast lines").
  for (auto it = unmarked_.begin(); it != unmarked_.end();) {
    if (it->second <= h_new) {
      unmarked_.erase(it++);
    } else {
      ++it;
    }
  }
  // This cycle's unmarkings: the epoch they wait for is read once the fold is over (or has
  // failed), after a fence (CloseUnmarked).
  std::vector<uint64_t> unmarked_now;
  absl::Cleanup close_unmarked = [&] { CloseUnmarked(unmarked_now); };
  uint64_t marked = 0;
  const uint64_t cold_limit = h_new > age ? h_new - age : 0;
  const uint64_t new_seq = seq + 1;
  const size_t bs = store.block_size();
  uint64_t k_blocks_before;
  {
    Chain& k = store.chain(kCompactSlot);
    std::lock_guard<std::mutex> l(k.mu);
    k_blocks_before = k.blocks.size();
  }
  // A full cycle rewrites K (dropping superseded entries and cold words); an incremental one
  // only appends the newly folded live entries to K as a new segment (records of seq new_seq):
  // it never drops a word's newest entry, so older entries of the word left in earlier segments
  // are always followed by a newer one (recovery applies K's records in chain order).
  const bool full = force_full_ || pressure || incremental_cycles_ >= kMaxIncrementalCycles ||
                    k_blocks_before * bs >= std::max<uint64_t>(2 * full_k_bytes_, budget / 8);

  auto k_new = std::make_unique<Chain>();
  Chain& k_out = full ? *k_new : store.chain(kCompactSlot);
  // The keys of the new K's data words (see k_keys_): a full cycle builds them afresh, an
  // incremental one appends to the current K's (cut back if the cycle fails).
  std::vector<uint32_t>& k_keys_out = full ? k_keys_next_ : k_keys_;
  if (full) k_keys_next_.clear();
  const size_t k_keys_before = k_keys_.size();
  uint64_t kept = 0;
  std::vector<Trim> trims;
  uint64_t dropped = 0, cold = 0, k_bytes = 0;
  absl::Status failed = absl::OkStatus();
  {
    if (!full) store.Seal(k_out);  // the new segment starts in a new block
    CompactWriter out(store, k_out, new_seq, h_new);
    // A word's entry survives iff it is the word's newest record (index key) and the word is
    // not going cold. SpecPMT's multi-thread rule: every older record of the word is in this
    // cycle's set too (all records of epochs <= h_new, of every log), so the newest one is
    // never dropped while an older one could still be replayed after it.
    //
    // The entries are queued and decided in order, each index slot prefetched kPrefetchAhead
    // entries before it is read: the slots are scattered, and a K record holds thousands.
    struct Pending {
      uint64_t word;
      uint64_t value;
      uint32_t key;
    };
    static constexpr size_t kBatch = 1024, kPrefetchAhead = 24;
    std::vector<Pending> pending;
    pending.reserve(kBatch);
    auto decide = [&]() -> absl::Status {
      if (fold_hook) [[unlikely]]
        fold_hook();
      const size_t n = pending.size();
      for (size_t i = 0; i < std::min(n, kPrefetchAhead); ++i)
        __builtin_prefetch(&index->at(pending[i].word), 1);
      for (size_t i = 0; i < n; ++i) {
        if (i + kPrefetchAhead < n)
          __builtin_prefetch(&index->at(pending[i + kPrefetchAhead].word), 1);
        const Pending& e = pending[i];
        std::atomic<uint64_t>& slot = index->at(e.word);
        uint64_t v = slot.load(std::memory_order_acquire);
        if (WordIndex::Key(v) != e.key) {
          ++dropped;  // superseded by a newer record (or a tombstone)
          continue;
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
        std::atomic<uint8_t>& line = index->line(line_no);
        const uint8_t b = line.load(std::memory_order_relaxed);
        auto unmark = [&] {
          line.store(0, std::memory_order_seq_cst);
          unmarked_.insert_or_assign(line_no, kUnmarkedPending);
          unmarked_now.push_back(line_no);
        };
        // (The mutant takes a kFreed line for one never marked.)
        const bool freed = b == WordIndex::kFreed && !mutation::Swapped(txn_internal::kFreedMutant);
        if (freed) [[unlikely]]
          unmark();
        if ((full || mutation::Swapped(txn_internal::kRuleMutant)) &&
            WordIndex::TouchedBy(v, cold_limit)) {
          bool may_cold = !freed && !unmarked_.contains(line_no);
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
            pool.persister().Flush(txn_internal::kColdFlush, pool.base() + e.word * 8, 8);
            ++cold;
            continue;
          }
        } else if (options.fast_lines && b == 0 && !unmarked_.contains(line_no)) {
          marked += TryMarkFast(line_no, cold_limit) ? 1 : 0;
        }
        // Kept: the entry moves to K' with the key it had, which the index still holds (a
        // word's key is not rewritten when its newest record moves into K, so this cycle
        // writes no index slot of a word it keeps: those are the lines the transactions use).
        RETURN_IF_ERROR(out.Add(e.word, e.value));
        k_keys_out.push_back(e.key);
        ++kept;
      }
      pending.clear();
      return absl::OkStatus();
    };
    // A thread record's entries all have its key; a K record's data words take theirs from
    // k_keys_, in order (from_k).
    size_t k_key_at = 0;
    auto consider = [&](const RecordHeader* h, uint32_t key, bool from_k) -> absl::Status {
      absl::Status st = absl::OkStatus();
      ForEachEntry(h, [&](uint64_t head, const uint64_t* values) {
        if (!st.ok()) return;
        const EntryType type = EntryTypeOf(head);
        if (type == EntryType::kFree && !full) {
          // A tombstone is the newest record of the freed block's words. A full cycle drops
          // every older entry of them (their keys no longer match); an incremental one does not
          // read K, whose earlier segments may hold such entries, so it carries the tombstone
          // into its segment for the words that are still cold (no newer record: a newer one
          // is kept in this segment or comes later, and overrides K at recovery). Without it,
          // recovery would replay K's old entries into the block's next life.
          const uint64_t first = EntryWord(head), end = first + EntryWords(head);
          for (uint64_t w = first; w < end && st.ok();) {
            if (w >= index->words() || index->at(w).load(std::memory_order_acquire) != 0) {
              ++w;
              continue;
            }
            uint64_t n = 1;
            while (w + n < end && n < kMaxEntryWords &&
                   index->at(w + n).load(std::memory_order_acquire) == 0)
              ++n;
            st = out.Mark(EntryType::kFree, w, n);
            w += n;
          }
          return;
        }
        if (type != EntryType::kData) return;  // allocations; tombstones in a full cycle: done
        for (uint64_t i = 0, w = EntryWord(head); i < EntryWords(head); ++i, ++w) {
          if (from_k) {
            if (k_key_at == k_keys_.size()) [[unlikely]] {
              st = KeysMismatch(k_keys_.size());
              return;
            }
            key = k_keys_[k_key_at++];
          }
          pending.push_back({w, values[i], key});
          if (pending.size() == kBatch) {
            st = decide();
            if (!st.ok()) return;
          }
        }
      });
      return st;
    };
    // 1a. Full cycle: the current compacted log, every segment (each data word's key is the
    //     next of k_keys_, in K's order; records of a failed cycle, seq > the current one, are
    //     not part of it and have no keys).
    //     The records are read as written (KnownRecord): every one up to a block's RecordsEnd
    //     is complete, written by this process or found valid when the log was walked at open,
    //     so its checksum is not computed again (that was ~30% of the fold's time at K = 16).
    auto walk = [&](uint32_t slot, uint32_t b, size_t end, auto&& fn) {
      const uint8_t* base = store.BlockAt(b);
      for (size_t pos = kBlockPayload; pos < end && failed.ok();) {
        const RecordHeader* h = txn_internal::KnownRecord(base, pos, end);
        if (h == nullptr) {
          failed = absl::InternalError(absl::StrCat(
              "txn: reclamation found a record that does not fit its log (slot ", slot,
              ", block at pool offset ", store.BlockOffset(b), ", offset ", pos, ", end ", end,
              "): the log's volatile state is inconsistent; nothing was dropped"));
          return;
        }
        if (!fn(h)) return;
        pos += size_t{h->words} * 8;
      }
    };
    std::vector<uint32_t> old_k;
    uint64_t k_pub = kNothingPublished;
    if (full) {
      Chain& k = store.chain(kCompactSlot);
      k_pub = k.published.load(std::memory_order_acquire);
      std::lock_guard<std::mutex> l(k.mu);
      old_k.assign(k.blocks.begin(), k.blocks.end());
    }
    if (k_pub == kNothingPublished) old_k.clear();  // K holds no record yet
    for (uint32_t b : old_k) {
      walk(kCompactSlot, b, store.RecordsEnd(b, k_pub), [&](const RecordHeader* h) {
        if (h->stamp <= seq) failed = consider(h, 0, /*from_k=*/true);
        return true;
      });
    }
    if (full && failed.ok() && k_key_at != k_keys_.size()) failed = KeysMismatch(k_key_at);
    // 1b. Every thread log: its records of epochs in (horizon, h_new], up to what its owner
    //     has published (the published record and everything before it are complete).
    for (uint32_t s = 0; s < kMaxSlots && failed.ok(); ++s) {
      Chain& c = store.chain(s);
      const uint64_t pub = c.published.load(std::memory_order_acquire);
      if (pub == kNothingPublished) continue;
      std::vector<uint32_t> blocks;
      {
        std::lock_guard<std::mutex> l(c.mu);
        blocks.assign(c.blocks.begin(), c.blocks.end());
      }
      const auto pub_block = static_cast<uint32_t>(pub >> 32);
      size_t keep = blocks.empty() ? 0 : blocks.size() - 1;  // never the last block
      for (size_t i = 0; i < blocks.size() && failed.ok(); ++i) {
        const uint32_t b = blocks[i];
        bool newer = false;
        walk(s, b, store.RecordsEnd(b, pub), [&](const RecordHeader* h) {
          if (h->epoch > h_new) {
            newer = true;
            return false;
          }
          if (h->epoch > horizon) failed = consider(h, WordIndex::KeyOf(h->stamp), false);
          return true;
        });
        if (newer || b == pub_block) {
          keep = std::min(keep, i);
          break;
        }
      }
      if (keep > 0) trims.push_back({s, keep});
    }
    if (failed.ok()) failed = decide();
    std::move(close_unmarked).Invoke();
    out.Finish();
    k_bytes = out.bytes();
    // 2. K' (records, block headers, links, table entries) and the lines of the words that
    //    went cold durable before the descriptor that makes K' the compacted log.
    pool.persister().Fence(txn_internal::kCompactFence);
  }
  if (fail_next_cycle && failed.ok()) {
    fail_next_cycle = false;
    failed = absl::AbortedError("txn: reclamation cycle failed on request (a test)");
  }
  if (!failed.ok()) {
    // Nothing durable refers to K' (a full cycle's chain is unreachable; an incremental
    // segment's records carry a seq above the durable descriptor's and are ignored). Words made
    // cold stay cold (their records are still in the logs, and a transaction snapshots a cold
    // word again): safe either way. The next cycle is a full one, which drops a partial segment.
    if (full) {
      std::vector<uint32_t> unused(k_new->blocks.begin(), k_new->blocks.end());
      store.Release(unused);
    } else {
      force_full_ = true;
      k_keys_.resize(k_keys_before);  // the failed segment's records are skipped from now on
    }
    return failed;
  }
  // 3. The descriptor, into the line not holding the current one. Its fence is the cycle's
  //    commit point: before it a crash recovers from the old descriptor (every folded record is
  //    still in its log), after it from the new one (K' replaces them). A torn write fails its
  //    crc and the old one stays current.
  uint64_t k_head;
  {
    std::lock_guard<std::mutex> l(k_out.mu);
    k_head = k_out.blocks.empty() ? 0 : store.BlockOffset(k_out.blocks.front());
  }
  WriteDescriptor(new_seq, h_new, k_head);
  // 4. Move the heads of the thread logs past the folded blocks (aligned 8-byte stores: old or
  //    new head on media, both fine now), durably before any of those blocks is reused.
  std::vector<uint32_t> freed;
  for (const Trim& t : trims) {
    Chain& c = store.chain(t.slot);
    std::lock_guard<std::mutex> l(c.mu);
    for (size_t i = 0; i < t.keep; ++i) {
      freed.push_back(c.blocks.front());
      c.blocks.pop_front();
    }
    store.dir()->heads[t.slot].store(store.BlockOffset(c.blocks.front()),
                                     std::memory_order_release);
    pool.persister().Flush(txn_internal::kHeadMoveFlush, &store.dir()->heads[t.slot], 8);
  }
  if (!trims.empty()) pool.persister().Fence(txn_internal::kHeadMoveFence);
  // 5. Free the folded blocks and, after a full cycle, the old compacted log (unreachable from
  //    durable state). The folded thread blocks go last: the free pool hands out its most recent
  //    blocks first, so they are reused soonest (what the crash test's gate needs to see step
  //    4's fence).
  if (full) {
    Chain& k = store.chain(kCompactSlot);
    std::lock_guard<std::mutex> l(k.mu);
    freed.insert(freed.begin(), k.blocks.begin(), k.blocks.end());
  }
  store.Seal(k_out);
  uint64_t k_blocks;
  {
    std::lock_guard<std::mutex> l(k_out.mu);
    k_blocks = k_out.blocks.size();
  }
  if (full) store.SetCompact(std::move(k_new));
  store.Release(freed);
  if (full) k_keys_.swap(k_keys_next_);
  seq = new_seq;
  horizon = h_new;
  compact_bytes = k_blocks * bs;
  if (full) {
    full_k_bytes_ = compact_bytes;
    incremental_cycles_ = 0;
    force_full_ = false;
    full_cycles.fetch_add(1, std::memory_order_relaxed);
  } else {
    ++incremental_cycles_;
  }
  if (full && options.adaptive_cold && !idle) {
    // Keep as many words hot as the budget affords: the compacted log holds one entry per hot
    // word, and a cold word costs a fence at its next first write.
    if (k_bytes > budget / 2) {
      cold_age = std::max<uint64_t>(cold_age / 2, touch_slack);
    } else if (k_bytes < budget / 4) {
      cold_age = std::min(options.max_cold_after_epochs, cold_age * 2 + 1);
    }
  }
  cycles.fetch_add(1, std::memory_order_relaxed);
  words_kept.fetch_add(kept, std::memory_order_relaxed);
  words_dropped.fetch_add(dropped, std::memory_order_relaxed);
  words_cold.fetch_add(cold, std::memory_order_relaxed);
  lines_marked.fetch_add(marked, std::memory_order_relaxed);
  return absl::OkStatus();
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

// ---- the background thread ------------------------------------------------------------------

void Engine::Impl::StartBackground() {
  if (options.background) bg_ = std::thread([this] { BackgroundLoop(); });
}

void Engine::Impl::WriteBackForClose() {
  // REQUIRES: no transaction open, the background thread stopped. Every data entry of K and of
  // the thread logs (up to what each owner published), flushed in one batch with one fence;
  // the pool's clean close follows, after which Recover replays nothing.
  std::lock_guard<std::mutex> cycle_lock(reclaim_mu);
  const size_t bs = store.block_size();
  const uint8_t* data = pool.base();
  std::vector<Range> ranges;
  auto add = [&](const RecordHeader* h) {
    ForEachEntry(h, [&](uint64_t head, const uint64_t*) {
      if (EntryTypeOf(head) != EntryType::kData) return;
      const uint64_t w = EntryWord(head), n = EntryWords(head);
      if ((w + n) * 8 <= pool.size()) ranges.push_back({data + w * 8, n * 8});
    });
  };
  for (uint32_t s = 0; s <= kMaxSlots; ++s) {
    const uint32_t slot = s == kMaxSlots ? kCompactSlot : s;
    Chain& c = store.chain(slot);
    uint64_t pub = kNothingPublished;
    if (slot != kCompactSlot) {
      pub = c.published.load(std::memory_order_acquire);
      if (pub == kNothingPublished) continue;
    }
    std::vector<uint32_t> blocks;
    {
      std::lock_guard<std::mutex> l(c.mu);
      blocks.assign(c.blocks.begin(), c.blocks.end());
    }
    for (uint32_t b : blocks) {
      const uint8_t* base = store.BlockAt(b);
      const bool last = slot != kCompactSlot && b == static_cast<uint32_t>(pub >> 32);
      const size_t end = last ? static_cast<size_t>(pub & 0xFFFFFFFFu) : bs;
      for (size_t pos = kBlockPayload; pos < end;) {
        const RecordHeader* h = txn_internal::ValidRecord(base, bs, store.BlockGen(b), pos);
        if (h == nullptr) break;
        if (slot != kCompactSlot || h->stamp <= seq) add(h);
        pos += size_t{h->words} * 8;
      }
      if (last) break;
    }
  }
  pool.persister().FlushBatch(txn_internal::kCloseWriteBack, ranges);
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

bool Engine::Impl::RetireForClose() {
  // 1. Every committed transaction's allocations and frees durable in the heap (the thread
  //    records are what would redo them after a failed epoch) and the write-back's lines with
  //    them: the running epoch completes.
  if (!epochs.Sync().ok()) return false;
  std::unique_lock<std::mutex> cycle_lock(reclaim_mu);
  // 2. One descriptor retires every record: K empty, and a horizon at the completed epoch, at or
  //    above the epoch of every record in the thread logs (no transaction runs now), so recovery
  //    applies none of them and replays no allocation. Its fence is the commit point: before it
  //    a crash recovers from the old descriptor, replaying values equal to what the write-back
  //    made durable. max_stamp keeps the next run's stamps above every stamp issued.
  const uint64_t completed = epochs.completed();
  WriteDescriptor(seq + 1, completed, /*k_head=*/0);
  if (pool.failed()) return false;
  seq = seq + 1;
  horizon = completed;
  // 3. Empty heads: the next open walks no block (a head left on media names only retired
  //    records, so these need no fence of their own; the pool's clean close fences them).
  for (uint32_t s = 0; s < kMaxSlots; ++s) {
    auto& head = store.dir()->heads[s];
    if (head.load(std::memory_order_relaxed) == 0) continue;
    head.store(0, std::memory_order_release);
    pool.persister().Flush(txn_internal::kHeadMoveFlush, &head, 8);
  }
  // 4. Every block is free now: back to the heap, durable with the next epoch.
  std::vector<uint32_t> all;
  for (uint32_t s = 0; s <= kMaxSlots; ++s) {
    Chain& c = store.chain(s == kMaxSlots ? kCompactSlot : s);
    std::lock_guard<std::mutex> l(c.mu);
    all.insert(all.end(), c.blocks.begin(), c.blocks.end());
    c.blocks.clear();
    c.tail = txn_internal::kNoBlock;
    c.published.store(txn_internal::kNothingPublished, std::memory_order_release);
  }
  store.Release(all);
  {
    epoch::Guard g(epochs);
    (void)store.ReturnFree(0);
  }
  cycle_lock.unlock();
  return epochs.Sync().ok();
}

void Engine::Impl::StopBackground() {
  {
    std::lock_guard<std::mutex> l(bg_mu_);
    bg_stop_ = true;
  }
  bg_cv_.notify_all();
  if (bg_.joinable()) bg_.join();
}

// The background thread runs a cycle once the log has grown by budget / kRegrowthDivisor since
// the last cycle (BackgroundLoop).
constexpr uint64_t kRegrowthDivisor = 8;

void Engine::Impl::BackgroundLoop() {
  // The committers' trigger in bytes (SetThresholds; the log grows by whole blocks, so `used`
  // reaches it exactly when it reaches reclaim_trigger of the budget).
  const uint64_t trigger = trigger_blocks_ * store.block_size();
  uint64_t floor = 0;  // log bytes right after the last cycle: the compacted log and the tails
  // Free blocks kept after a cycle: what the log takes until the next one (it runs again once
  // the log has grown by budget / kRegrowthDivisor), twice over. The rest go back to the heap.
  const uint64_t keep_blocks = 2 * (budget / kRegrowthDivisor / store.block_size() + 1);
  // Idleness: no transaction ended for kIdleAfter. An idle engine runs a cycle every
  // kIdleCycleEvery (each advances the epochs, so words age and go cold and the compacted log
  // shrinks) and gives every free block back, until a cycle changes nothing.
  constexpr auto kIdleAfter = std::chrono::milliseconds(500);
  constexpr auto kIdleCycleEvery = std::chrono::milliseconds(250);
  uint64_t seen_activity = ~uint64_t{0};
  auto active_at = std::chrono::steady_clock::now();
  auto idle_cycle_at = active_at;
  int idle_unchanged = 0;  // idle cycles in a row that changed nothing (kIdleCycles: stop)
  constexpr int kIdleCycles = 16;
  auto give_back = [&](uint64_t keep) {
    epoch::Guard g(epochs);
    (void)store.ReturnFree(keep);
  };
  std::unique_lock<std::mutex> l(bg_mu_);
  while (!bg_stop_) {
    bg_cv_.wait_for(l, std::chrono::milliseconds(5), [&] { return bg_stop_ || bg_kick_.load(); });
    if (bg_stop_) break;
    bg_kick_.store(false);
    l.unlock();
    Watchdog();
    const uint64_t used = store.blocks_in_use() * store.block_size();
    // Hysteresis: a cycle rewrites the compacted log, so run one only when the log has grown by
    // an eighth of the budget since the last cycle left it (or is over the budget: writers
    // wait). Not more: the log also grows while a cycle runs, and a cycle started later left
    // writers waiting at the budget (docs/txn.md, "Design notes", "The reclaimer"); each cycle
    // then folds fewer records, so the reclaimer works more.
    // Writers wait from stall_blocks_ on (budget / block size, rounded down): a log there runs
    // a cycle even when a budget that is not a whole number of blocks is not reached yet.
    const bool writers_wait = store.blocks_in_use() >= stall_blocks_;
    if (used >= trigger &&
        (used >= floor + budget / kRegrowthDivisor || used >= budget || writers_wait)) {
      absl::Status st = Reclaim(/*advance=*/true);
      if (!st.ok()) {
        std::fprintf(stderr, "pmrt txn: reclamation failed: %s\n", st.ToString().c_str());
      }
      {
        std::lock_guard<std::mutex> el(reclaim_error_mu_);
        reclaim_error_ = std::move(st);
      }
      floor = store.blocks_in_use() * store.block_size();
      give_back(keep_blocks);
    } else if (used < floor) {
      floor = used;
    }
    // An idle engine: its log shrinks to what its hot words need, all of it back in the heap.
    const auto now = std::chrono::steady_clock::now();
    uint64_t activity = 0;
    threads_.ForEach([&](const txn_internal::ThreadTx& t) {
      activity += t.commits.Get() + t.one_commits.Get() + t.aborts.Get() + t.seq.load();
    });
    if (activity != seen_activity) {
      seen_activity = activity;
      active_at = now;
      idle_unchanged = 0;
    } else if (idle_unchanged < kIdleCycles && now - active_at >= kIdleAfter &&
               now - idle_cycle_at >= kIdleCycleEvery) {
      idle_cycle_at = now;
      const uint64_t owned_before = store.blocks_owned();
      const uint64_t in_use_before = store.blocks_in_use();
      if (Reclaim(/*advance=*/true, /*idle=*/true).ok()) give_back(0);
      floor = store.blocks_in_use() * store.block_size();
      const bool unchanged =
          store.blocks_owned() == owned_before && store.blocks_in_use() >= in_use_before;
      idle_unchanged = unchanged ? idle_unchanged + 1 : 0;
    }
    // Committers kick only once the log reaches the size at which the test above runs a cycle.
    const uint64_t next = std::min(std::max(trigger, floor + budget / kRegrowthDivisor), budget);
    kick_blocks_.store((next + store.block_size() - 1) / store.block_size(),
                       std::memory_order_relaxed);
    l.lock();
  }
}

void Engine::Impl::Watchdog() {
  const int64_t now = std::chrono::duration_cast<std::chrono::nanoseconds>(
                          std::chrono::steady_clock::now().time_since_epoch())
                          .count();
  const int64_t limit =
      std::chrono::duration_cast<std::chrono::nanoseconds>(options.max_open).count();
  threads_.ForEach([&](txn_internal::ThreadTx& t) {
    const uint64_t open = t.seq.load(std::memory_order_relaxed);
    if ((open & 1) == 0) return;  // no transaction open
    if (open != t.watch_seq) {    // a new one: start its clock
      t.watch_seq = open;
      t.watch_since = now;
      return;
    }
    if (t.watch_since == 0 || now - t.watch_since <= limit) return;
    t.watch_since = 0;  // reported
    t.expired_seq.store(open, std::memory_order_relaxed);
    t.hot.words.store(0, std::memory_order_relaxed);  // its next add takes the general path
    // (Not t.slot: the owner writes it without synchronization with this thread.)
    std::fprintf(stderr,
                 "pmrt txn: a transaction has been open for more than %lld ms (max_open); it "
                 "holds back the epoch boundary and will fail with kDeadlineExceeded at its "
                 "next call\n",
                 static_cast<long long>(options.max_open.count()));
  });
}

}  // namespace pmrt::txn
