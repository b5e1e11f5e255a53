// The snapshot of cold words (docs/txn.md, "Transactions", add step 4): a word with no live record
// has nothing that could restore it if an uncommitted value reached media, so before the first
// in-place store of a transaction to it, its committed value goes to the log: records of kind
// kSnapshot, each flushed as it is written, then one fence for all of them; only then does the
// index name the word hot (with the snapshot's key) and may the caller store to it. A crash
// before the fence leaves the word untouched in place; after it, recovery puts the snapshot's
// value back unless a later commit record of the word is valid.
#include <algorithm>
#include <cstring>
#include <utility>
#include <vector>

#include "txn/internal/engine_impl.h"
#include "txn/internal/record_writer.h"

namespace pmrt::txn {

using txn_internal::ForEachRun;
using txn_internal::RecordWriter;

absl::Status Engine::Impl::Snapshot(ThreadTx& t) {
  // Cold words have no live record, so nothing could restore them if an uncommitted value
  // reached media. Their current (committed) values go to the log first: records of kind
  // kSnapshot, flushed, then one fence; only then may the caller store to them.
  std::vector<uint64_t>& cold = t.cold;
  std::sort(cold.begin(), cold.end());
  const uint8_t* base = pool.base();
  txn_internal::Chain& log = store.chain(t.slot);
  const size_t max_bytes = store.max_record_bytes();
  std::vector<std::pair<uint64_t, uint64_t>> stamped;  // (first index in cold, stamp)
  size_t i = 0;
  while (i < cold.size()) {
    // As many words as fit in one record (runs of consecutive words share an entry head).
    size_t bytes = sizeof(RecordHeader), j = i;
    uint64_t run = 0;
    while (j < cold.size()) {
      const bool extends = j > i && cold[j] == cold[j - 1] + 1 && run < kMaxEntryWords;
      const size_t more = extends ? 8 : 16;
      if (bytes + more > max_bytes) break;
      bytes += more;
      run = extends ? run + 1 : 1;
      ++j;
    }
    const uint64_t stamp = next_stamp.fetch_add(1, std::memory_order_relaxed);
    absl::StatusOr<uint8_t*> reserved = store.Reserve(log, t.slot, bytes);
    if (!reserved.ok()) {
      // Whatever an earlier record of this call put in flight (a new block's table entry)
      // is fenced before the guard can end, as on the normal path.
      pool.persister().Fence(txn_internal::kSnapshotAbandonFence);
      return reserved.status();
    }
    uint8_t* at = *reserved;
    RecordWriter w(at);
    std::vector<uint64_t> part(cold.begin() + static_cast<ptrdiff_t>(i),
                               cold.begin() + static_cast<ptrdiff_t>(j));
    ForEachRun(part, [&](size_t a, size_t b) { w.Data(part[a], b - a, base); });
    const size_t written =
        w.Finish(RecordKind::kSnapshot, stamp, t.hot.epoch, store.BlockGen(log.tail));
    pool.persister().Flush(txn_internal::kSnapshotFlush, at, written);
    store.Publish(log, written);
    stamped.emplace_back(i, stamp);
    i = j;
  }
  // One fence for every snapshot record of this call. After it the old values are durable and
  // the in-place stores may reach media in any order.
  pool.persister().Fence(txn_internal::kSnapshotFence);
  t.snapshots.Add(stamped.size());
  t.snapshot_words.Add(cold.size());
  for (size_t r = 0; r < stamped.size(); ++r) {
    const size_t end = r + 1 < stamped.size() ? stamped[r + 1].first : cold.size();
    const uint32_t key = WordIndex::KeyOf(stamped[r].second);
    for (size_t c = stamped[r].first; c < end; ++c) {
      const uint64_t w = cold[c];
      // A cold word is written only by its holder: the reclaimer CASes only hot values.
      index->at(w).store(WordIndex::Pack(key, t.hot.epoch), std::memory_order_release);
      uint64_t old;
      std::memcpy(&old, base + w * 8, 8);
      t.PushWrite({w, old});
    }
  }
  KickIfOverTrigger();
  return absl::OkStatus();
}

}  // namespace pmrt::txn
