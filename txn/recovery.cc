// Recovery at Engine::Open: find the logs, rebuild the hot/cold index, replay committed records
// in commit order and apply the snapshots of uncommitted transactions (one pass: the newest
// record of each word wins), redo the allocations and frees of committed transactions of the
// failed epoch, and make it all durable. docs/txn.md, "Recovery".
#include <algorithm>
#include <cstring>
#include <string>
#include <tuple>
#include <unordered_set>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/crc32c.h"
#include "base/status_macros.h"
#include "txn/internal/engine_impl.h"

namespace pmrt::txn {

using txn_internal::RecordRef;

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

// One open's recovery: what the steps find, and a method per step (Engine::Impl::Recover runs
// them in order). Steps 5 and 6 run only on a crashed pool, inside one epoch guard (the caller's);
// the records found point into the mapped log.
class Recovery {
 public:
  explicit Recovery(Engine::Impl& impl) : impl_(impl) {}

  absl::Status OpenDirectory();   // 0
  void ReadDescriptor();          // 1
  void WalkLogs();                // 2
  void SortByStamp();             // 3
  void RebuildIndex();            // 4
  void ReplayData();              // 5
  absl::Status ReplayHeap();      // 6
  absl::Status ReplayLogical();   // 6b
  absl::Status RecordReplayed();  // 7 (8 is the caller's Sync)
  void Finish();                  // the engine's volatile state after recovery

 private:
  Engine::Impl& impl_;
  txn_internal::DirectoryLayout* dir_ = nullptr;
  Descriptor d_{};                  // the current reclamation descriptor (zero: none)
  uint64_t max_stamp_ = 0;          // every stamp found is at most this
  std::vector<RecordRef> compact_;  // K's records, in chain order
  std::vector<RecordRef> recs_;     // the thread records still applied (epoch > horizon)
  // The logical operations of the committed transactions replayed in step 6, in commit order
  // (handed to the layer above in step 6b).
  std::vector<LogicalOp> logical_;
};

absl::Status Recovery::OpenDirectory() {
  Engine::Impl& e = impl_;
  // 0. The directory (created in a new pool; the Sync makes it durable before any transaction
  //    can put a block in its table).
  bool created = false;
  RETURN_IF_ERROR(e.store.Open(e.options.block_size, &created));
  if (created) RETURN_IF_ERROR(e.epochs.Sync());
  // Records of one declaration end at a cache line (docs/txn.md, "Line-ending records"), except
  // in a version-1 directory, which keeps version-1 records (no pad words) for its older
  // readers, and where records are streamed (non-temporal stores; not measured padded).
  e.pad_ones_ = e.store.version() >= txn_internal::kFirstPaddedVersion &&
                !e.pool.persister().StreamsRecords(sizeof(txn_internal::RecordHeader) + 16);
  using OnePath = Engine::Impl::OnePath;
  if (e.one_path_ == OnePath::kClwb && e.pad_ones_) e.one_path_ = OnePath::kClwbLine;
  if (e.one_path_ == OnePath::kSimClwb && e.pad_ones_) e.one_path_ = OnePath::kSimClwbLine;
  dir_ = e.store.dir();
  return absl::OkStatus();
}

void Recovery::ReadDescriptor() {
  Engine::Impl& e = impl_;
  // 1. The current reclamation descriptor: the valid one with the higher seq. A torn or stale
  //    one (crc) is ignored; the other is then the last one written completely.
  int cur = -1;
  for (int i = 0; i < 2; ++i) {
    if (DescriptorValid(dir_->desc[i]) && (cur < 0 || dir_->desc[i].seq > dir_->desc[cur].seq))
      cur = i;
  }
  if (cur >= 0) d_ = dir_->desc[cur];
  e.horizon = d_.horizon;
  e.seq = d_.seq;
  e.desc_line = cur >= 0 ? cur : 1;
  max_stamp_ = d_.max_stamp;
}

void Recovery::WalkLogs() {
  Engine::Impl& e = impl_;
  // 2. Walk the compacted log K and every thread log. Thread records of epochs <= horizon were
  //    folded into K by the cycle that wrote the descriptor (or dropped): never applied.
  if (d_.k_head != 0) {
    e.store.WalkChain(
        d_.k_head, kCompactSlot, e.store.chain(kCompactSlot), [&](const RecordRef& r) {
          ++e.records_read_at_open;
          // Every segment up to the current cycle's; a later one is a failed cycle's.
          if (r.h->kind == static_cast<uint16_t>(RecordKind::kCompact) && r.h->stamp <= d_.seq)
            compact_.push_back(r);
        });
  }
  // Room for as many records as the blocks could hold (the smallest is a header and one entry):
  // the vector never grows by copying, and pages it does not reach are never touched.
  recs_.reserve(size_t{e.store.BlockCount()} * e.store.block_size() / (sizeof(RecordHeader) + 16));
  for (uint32_t s = 0; s < kMaxSlots; ++s) {
    const uint64_t head = dir_->heads[s].load(std::memory_order_acquire);
    if (head == 0) continue;
    e.store.WalkChain(head, s, e.store.chain(s), [&](const RecordRef& r) {
      ++e.records_read_at_open;
      if (r.h->kind == static_cast<uint16_t>(RecordKind::kCompact)) return;
      max_stamp_ = std::max(max_stamp_, r.h->stamp);
      if (r.h->epoch > e.horizon) recs_.push_back(r);
    });
  }
}

void Recovery::SortByStamp() {
  // 3. Commit order: K first, in chain order (its segments oldest first; every entry of it
  //    predates every thread record still applied: those are of later epochs), then the thread
  //    records by stamp.
  if (!mutation::Swapped(txn_internal::kOrderMutant)) {
    std::stable_sort(recs_.begin(), recs_.end(), [](const RecordRef& a, const RecordRef& b) {
      return a.h->stamp < b.h->stamp;
    });
  }
}

void Recovery::RebuildIndex() {
  Engine::Impl& e = impl_;
  txn_internal::WordIndex& index = *e.index;
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
        if (w < index.words()) index.at(w).store(store_v, std::memory_order_relaxed);
      }
    });
  };
  for (const RecordRef& r : compact_) index_pass(r);
  for (const RecordRef& r : recs_) index_pass(r);
  // The reclaimer's keys of K's data words (k_keys_): the key index_pass gave each.
  e.k_keys_.clear();
  for (const RecordRef& r : compact_) {
    ForEachEntry(r.h, [&](uint64_t head, const uint64_t*) {
      if (EntryTypeOf(head) == EntryType::kData)
        e.k_keys_.insert(e.k_keys_.end(), EntryWords(head), RecordKey(r));
    });
  }
}

void Recovery::ReplayData() {
  Engine::Impl& e = impl_;
  // 5. Pass 2, the data: each word takes the value of its newest record (redo for committed
  //    transactions; for a word an uncommitted transaction modified in place, its newest
  //    record is the committed value or that transaction's snapshot: undo). Registered dirty:
  //    durable at the Sync below. Idempotent: a crash before then replays the same values.
  uint8_t* base = e.pool.base();
  auto apply = [&](const RecordRef& r) {
    const uint32_t key = RecordKey(r);
    ForEachEntry(r.h, [&](uint64_t head, const uint64_t* values) {
      if (EntryTypeOf(head) != EntryType::kData) return;
      const uint64_t w0 = EntryWord(head), n = EntryWords(head);
      if ((w0 + n) * 8 > e.pool.size()) return;
      for (uint64_t i = 0; i < n; ++i) {
        if (WordIndex::Key(e.index->at(w0 + i).load(std::memory_order_relaxed)) != key) continue;
        std::memcpy(base + (w0 + i) * 8, &values[i], 8);
        if (!mutation::Swapped(txn_internal::kDirtyReplayedWord)) {
          e.epochs.RecordDirty(base + (w0 + i) * 8, 8);
        }
        ++e.recovered_words;
      }
    });
    ++e.recovered_records;
  };
  for (const RecordRef& r : compact_) apply(r);
  for (const RecordRef& r : recs_) apply(r);
}

absl::Status Recovery::ReplayHeap() {
  Engine::Impl& e = impl_;
  // 6. The heap: log blocks whose allocation was rolled back are re-marked; then the
  //    allocations and frees of committed transactions of failed epochs not yet replayed
  //    (stamp above replayed_stamp), each block taking its last operation. Every
  //    MarkAllocated runs before any MarkFreed (which may start using a chunk).
  RETURN_IF_ERROR(e.store.MarkTableAllocated());
  const uint64_t replayed = dir_->replayed_stamp.load(std::memory_order_acquire);
  // (offset, op, usable size), in commit order.
  std::vector<std::tuple<uint64_t, EntryType, uint64_t>> ops;
  for (const RecordRef& r : recs_) {
    if (r.h->stamp <= replayed || r.h->kind != static_cast<uint16_t>(RecordKind::kCommit) ||
        !e.epochs.PredatesExecution(r.h->epoch) || !e.epochs.IsFailed(r.h->epoch)) {
      continue;
    }
    ForEachEntry(r.h, [&](uint64_t head, const uint64_t* values) {
      const EntryType t = EntryTypeOf(head);
      if (t == EntryType::kAlloc || t == EntryType::kFree) {
        ops.emplace_back(EntryWord(head) * 8, t, EntryWords(head) * 8);
      } else if (t == EntryType::kLogical) {
        logical_.push_back(
            {EntryWord(head), r.h->stamp,
             std::string_view(reinterpret_cast<const char*>(values + 1), values[0])});
      }
    });
  }
  std::unordered_set<uint64_t> seen;
  std::vector<std::tuple<uint64_t, EntryType, uint64_t>> last;
  for (auto it = ops.rbegin(); it != ops.rend(); ++it) {
    if (seen.insert(std::get<0>(*it)).second) last.push_back(*it);
  }
  for (const auto& [off, t, usable] : last)
    if (t == EntryType::kAlloc) RETURN_IF_ERROR(e.heap.MarkAllocated(off, usable));
  for (const auto& [off, t, usable] : last)
    if (t == EntryType::kFree) RETURN_IF_ERROR(e.heap.MarkFreed(off));
  return absl::OkStatus();
}

absl::Status Recovery::ReplayLogical() {
  Engine::Impl& e = impl_;
  if (logical_.empty()) return absl::OkStatus();
  // 6b. The layers above replay their operations, inside steps 5-7's guard: in their epoch,
  //     with the stamp that covers them. Without a handler they would be lost: refused.
  if (!e.options.replay_logical) {
    return absl::FailedPreconditionError(absl::StrCat(
        e.pool.path(), ": the transaction log holds ", logical_.size(),
        " committed operations of a layer above the engine (a pmrt::Runtime's named indexes) "
        "to replay; open the pool with that layer (pmrt::Runtime::Open)"));
  }
  return e.options.replay_logical(logical_);
}

absl::Status Recovery::RecordReplayed() {
  Engine::Impl& e = impl_;
  // 7. The stamp of the last transaction replayed, in the epoch of steps 5-6b (the caller's
  //    guard), undo-logged first: a crash before that epoch completes rolls it back with the
  //    replayed words, the heap's operations and the layer above's journal, and the next
  //    recovery replays them all again; once the epoch completes, none is replayed again.
  //    Replaying after that epoch would not be idempotent: a block a replayed transaction freed
  //    may have been allocated again since (by step 6b's journal, say), and a second free would
  //    take it from its new owner.
  if (max_stamp_ <= dir_->replayed_stamp.load(std::memory_order_relaxed)) return absl::OkStatus();
  if (!mutation::Swapped(txn_internal::kUnloggedReplayedStamp)) {
    std::atomic<uint64_t> logged{0};  // written once per recovery: no mark of its own
    RETURN_IF_ERROR(e.epochs.log().Snapshot(&dir_->replayed_stamp, sizeof(uint64_t), &logged));
  } else {
    e.epochs.RecordDirty(&dir_->replayed_stamp, sizeof(uint64_t));
  }
  dir_->replayed_stamp.store(max_stamp_, std::memory_order_release);
  return absl::OkStatus();
}

void Recovery::Finish() {
  Engine::Impl& e = impl_;
  e.next_stamp.store(std::max(max_stamp_, dir_->replayed_stamp.load()) + 1);
  e.store.BuildFreePool();
  Chain& k = e.store.chain(kCompactSlot);
  std::lock_guard<std::mutex> l(k.mu);
  e.compact_bytes = k.blocks.size() * e.store.block_size();
}

}  // namespace

absl::Status Engine::Impl::Recover() {
  const auto start = std::chrono::steady_clock::now();
  Recovery r(*this);
  RETURN_IF_ERROR(r.OpenDirectory());
  r.ReadDescriptor();
  r.WalkLogs();
  r.SortByStamp();
  r.RebuildIndex();
  const bool crashed = !pool.was_clean_shutdown();
  if (crashed) {
    // Steps 5 to 7 run inside one epoch guard: the replayed words, the heap's changes, the layer
    // above's (its own guards nest in this one) and the stamp belong to one epoch, which step
    // 8's Sync makes durable, all of it or (a crash first) none.
    absl::Status st;
    {
      epoch::Guard g(epochs);
      r.ReplayData();
      st = r.ReplayHeap();
      if (st.ok()) st = r.ReplayLogical();
      if (st.ok()) st = r.RecordReplayed();
    }
    if (!st.ok()) {
      // Part of steps 5-6b may stand in this epoch without the stamp: none of it may become
      // durable (the teardown's advances would make it so, and the next open would apply the
      // heap's operations a second time). The failed mode records no epoch complete.
      pool.health_state().Fail(absl::StrCat("transaction recovery failed: ", st.message()));
      return st;
    }
    RETURN_IF_ERROR(epochs.Sync());  // 8
  }
  r.Finish();
  recovery_time = std::chrono::steady_clock::now() - start;
  // Committed transactions are replayed (durable by the Sync above, the rest epoch-scoped):
  // the pool may be marked cleanly shut down as far as this layer is concerned.
  pool.AcknowledgeRecovery(Pool::kRecoveredTxn);
  return absl::OkStatus();
}

}  // namespace pmrt::txn
