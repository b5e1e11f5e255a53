// Recovery at Engine::Open: find the logs, rebuild the hot/cold index, replay committed records
// in commit order and apply the snapshots of uncommitted transactions (one pass: the newest
// record of each word wins), redo the allocations and frees of committed transactions of the
// failed epoch, and make it all durable. docs/txn.md, "Recovery".
#include <algorithm>
#include <cstring>
#include <tuple>
#include <unordered_set>

#include "absl/strings/str_cat.h"
#include "base/crc32c.h"
#include "base/status_macros.h"
#include "txn/internal/engine_impl.h"

namespace pmrt::txn {

using txn_internal::Chain;
using txn_internal::Descriptor;
using txn_internal::EntryType;
using txn_internal::EntryTypeOf;
using txn_internal::EntryWord;
using txn_internal::EntryWords;
using txn_internal::ForEachEntry;
using txn_internal::kCompactSlot;
using txn_internal::kMaxSlots;
using txn_internal::RecordKind;
using txn_internal::RecordRef;
using txn_internal::WordIndex;

namespace {

bool DescriptorValid(const Descriptor& d) {
  return d.seq != 0 && d.crc == Crc32c(&d, offsetof(Descriptor, crc));
}

// The key under which a record's words are indexed.
uint32_t RecordKey(const RecordRef& r) {
  return r.h->kind == static_cast<uint16_t>(RecordKind::kCompact)
             ? WordIndex::CompactKey(r.h->stamp)
             : WordIndex::KeyOf(r.h->stamp);
}

}  // namespace

absl::Status Engine::Impl::Recover() {
  const auto start = std::chrono::steady_clock::now();
  // 0. The directory (created in a new pool; the Sync makes it durable before any transaction
  //    can put a block in its table).
  bool created = false;
  RETURN_IF_ERROR(store.Open(options.block_size, &created));
  if (created) RETURN_IF_ERROR(epochs.Sync());
  // Records of one declaration end at a cache line (docs/txn.md, "Line-ending records"), except
  // in a version-1 directory, which keeps version-1 records (no pad words) for its older
  // readers, and where records are streamed (non-temporal stores; not measured padded).
  pad_ones_ = store.version() >= txn_internal::kFirstPaddedVersion &&
              !pool.persister().StreamsRecords(sizeof(txn_internal::RecordHeader) + 16);
  if (one_path_ == OnePath::kClwb && pad_ones_) one_path_ = OnePath::kClwbLine;
  if (one_path_ == OnePath::kSimClwb && pad_ones_) one_path_ = OnePath::kSimClwbLine;
  txn_internal::DirectoryLayout* dir = store.dir();

  // 1. The current reclamation descriptor: the valid one with the higher seq. A torn or stale
  //    one (crc) is ignored; the other is then the last one written completely.
  int cur = -1;
  for (int i = 0; i < 2; ++i) {
    if (DescriptorValid(dir->desc[i]) && (cur < 0 || dir->desc[i].seq > dir->desc[cur].seq))
      cur = i;
  }
  Descriptor d{};
  if (cur >= 0) d = dir->desc[cur];
  horizon = d.horizon;
  seq = d.seq;
  desc_line = cur >= 0 ? cur : 1;
  uint64_t max_stamp = d.max_stamp;

  // 2. Walk the compacted log K and every thread log. Thread records of epochs <= horizon were
  //    folded into K by the cycle that wrote the descriptor (or dropped): never applied.
  std::vector<RecordRef> compact, recs;
  if (d.k_head != 0) {
    store.WalkChain(d.k_head, kCompactSlot, store.chain(kCompactSlot), [&](const RecordRef& r) {
      ++records_read_at_open;
      // Every segment up to the current cycle's; a later one is a failed cycle's.
      if (r.h->kind == static_cast<uint16_t>(RecordKind::kCompact) && r.h->stamp <= d.seq)
        compact.push_back(r);
    });
  }
  for (uint32_t s = 0; s < kMaxSlots; ++s) {
    const uint64_t head = dir->heads[s].load(std::memory_order_acquire);
    if (head == 0) continue;
    store.WalkChain(head, s, store.chain(s), [&](const RecordRef& r) {
      ++records_read_at_open;
      if (r.h->kind == static_cast<uint16_t>(RecordKind::kCompact)) return;
      max_stamp = std::max(max_stamp, r.h->stamp);
      if (r.h->epoch > horizon) recs.push_back(r);
    });
  }
  // 3. Commit order: K first, in chain order (its segments oldest first; every entry of it
  //    predates every thread record still applied: those are of later epochs), then the thread
  //    records by stamp.
  if (!mutation::Swapped(txn_internal::kOrderMutant)) {
    std::stable_sort(recs.begin(), recs.end(), [](const RecordRef& a, const RecordRef& b) {
      return a.h->stamp < b.h->stamp;
    });
  }

  // 4. Pass 1, the index: in commit order, each record becomes the newest of its words; a free
  //    (tombstone) makes its block's words cold, so no older record is replayed into the
  //    block's next life.
  auto index_pass = [&](const RecordRef& r) {
    const uint64_t v = WordIndex::Pack(RecordKey(r), r.h->epoch);
    ForEachEntry(r.h, [&](uint64_t head, const uint64_t*) {
      const EntryType t = EntryTypeOf(head);
      if (t == EntryType::kAlloc || t == EntryType::kLogical) return;
      const uint64_t store_v = t == EntryType::kData ? v : 0;
      for (uint64_t w = EntryWord(head), n = EntryWords(head); n > 0; --n, ++w) {
        if (w < index->words()) index->at(w).store(store_v, std::memory_order_relaxed);
      }
    });
  };
  for (const RecordRef& r : compact) index_pass(r);
  for (const RecordRef& r : recs) index_pass(r);
  // The reclaimer's keys of K's data words (k_keys_): the key index_pass gave each.
  k_keys_.clear();
  for (const RecordRef& r : compact) {
    ForEachEntry(r.h, [&](uint64_t head, const uint64_t*) {
      if (EntryTypeOf(head) == EntryType::kData)
        k_keys_.insert(k_keys_.end(), EntryWords(head), RecordKey(r));
    });
  }

  const bool crashed = !pool.was_clean_shutdown();
  // The logical operations of the committed transactions replayed in step 6, in commit order.
  std::vector<LogicalOp> logical;
  if (crashed) {
    epoch::Guard g(epochs);
    // 5. Pass 2, the data: each word takes the value of its newest record (redo for committed
    //    transactions; for a word an uncommitted transaction modified in place, its newest
    //    record is the committed value or that transaction's snapshot: undo). Registered dirty:
    //    durable at the Sync below. Idempotent: a crash before then replays the same values.
    uint8_t* base = pool.base();
    auto apply = [&](const RecordRef& r) {
      const uint32_t key = RecordKey(r);
      ForEachEntry(r.h, [&](uint64_t head, const uint64_t* values) {
        if (EntryTypeOf(head) != EntryType::kData) return;
        const uint64_t w0 = EntryWord(head), n = EntryWords(head);
        if ((w0 + n) * 8 > pool.size()) return;
        for (uint64_t i = 0; i < n; ++i) {
          if (WordIndex::Key(index->at(w0 + i).load(std::memory_order_relaxed)) != key) continue;
          std::memcpy(base + (w0 + i) * 8, &values[i], 8);
          if (!mutation::Swapped(txn_internal::kDirtyReplayedWord)) {
            epochs.RecordDirty(base + (w0 + i) * 8, 8);
          }
          ++recovered_words;
        }
      });
      ++recovered_records;
    };
    for (const RecordRef& r : compact) apply(r);
    for (const RecordRef& r : recs) apply(r);
    // 6. The heap: log blocks whose allocation was rolled back are re-marked; then the
    //    allocations and frees of committed transactions of failed epochs not yet replayed
    //    (stamp above replayed_stamp), each block taking its last operation. Every
    //    MarkAllocated runs before any MarkFreed (which may start using a chunk).
    RETURN_IF_ERROR(store.MarkTableAllocated());
    const uint64_t replayed = dir->replayed_stamp.load(std::memory_order_acquire);
    // (offset, op, usable size), in commit order.
    std::vector<std::tuple<uint64_t, EntryType, uint64_t>> ops;
    for (const RecordRef& r : recs) {
      if (r.h->stamp <= replayed || r.h->kind != static_cast<uint16_t>(RecordKind::kCommit) ||
          !epochs.PredatesExecution(r.h->epoch) || !epochs.IsFailed(r.h->epoch)) {
        continue;
      }
      ForEachEntry(r.h, [&](uint64_t head, const uint64_t* values) {
        const EntryType t = EntryTypeOf(head);
        if (t == EntryType::kAlloc || t == EntryType::kFree) {
          ops.emplace_back(EntryWord(head) * 8, t, EntryWords(head) * 8);
        } else if (t == EntryType::kLogical) {
          logical.push_back({EntryWord(head), r.h->stamp,
                             std::string(reinterpret_cast<const char*>(values + 1), values[0])});
        }
      });
    }
    std::unordered_set<uint64_t> seen;
    std::vector<std::tuple<uint64_t, EntryType, uint64_t>> last;
    for (auto it = ops.rbegin(); it != ops.rend(); ++it) {
      if (seen.insert(std::get<0>(*it)).second) last.push_back(*it);
    }
    for (const auto& [off, t, usable] : last)
      if (t == EntryType::kAlloc) RETURN_IF_ERROR(heap.MarkAllocated(off, usable));
    for (const auto& [off, t, usable] : last)
      if (t == EntryType::kFree) RETURN_IF_ERROR(heap.MarkFreed(off));
  }
  if (!logical.empty()) {
    // 6b. The layers above replay their operations (outside this function's guard: each takes
    //     its own), in the same epoch as steps 5-6, so that step 7 makes them durable too and
    //     step 8's stamp covers them. Without a handler they would be lost: refused.
    if (!options.replay_logical) {
      return absl::FailedPreconditionError(absl::StrCat(
          pool.path(), ": the transaction log holds ", logical.size(),
          " committed operations of a layer above the engine (a pmrt::Runtime's named indexes) "
          "to replay; open the pool with that layer (pmrt::Runtime::Open)"));
    }
    RETURN_IF_ERROR(options.replay_logical(logical));
  }
  if (crashed) {
    // 7. Everything above becomes durable (the boundary writes back the replayed words and the
    //    heap's changes).
    RETURN_IF_ERROR(epochs.Sync());
    // 8. Allocation ops up to max_stamp are applied and durable. Epoch-scoped: durable at the
    //    next boundary. A crash before that replays them again, which is idempotent: nothing
    //    that could contradict them (a later free) is durable before this word is.
    if (max_stamp > dir->replayed_stamp.load(std::memory_order_relaxed)) {
      epoch::Guard g(epochs);
      dir->replayed_stamp.store(max_stamp, std::memory_order_release);
      if (!mutation::Swapped(txn_internal::kDirtyReplayedStamp)) {
        epochs.RecordDirty(&dir->replayed_stamp, sizeof(uint64_t));
      }
    }
  }
  next_stamp.store(std::max(max_stamp, dir->replayed_stamp.load()) + 1);
  store.BuildFreePool();
  {
    Chain& k = store.chain(kCompactSlot);
    std::lock_guard<std::mutex> l(k.mu);
    compact_bytes = k.blocks.size() * store.block_size();
  }
  recovery_time = std::chrono::steady_clock::now() - start;
  // Committed transactions are replayed (durable by the Sync above, the rest epoch-scoped):
  // the pool may be marked cleanly shut down as far as this layer is concerned.
  pool.AcknowledgeRecovery(Pool::kRecoveredTxn);
  return absl::OkStatus();
}

}  // namespace pmrt::txn
