// The clean close (Engine's destructor): every word a live record holds written back in place,
// in one batch with one fence (WriteBackForClose); then, with no transaction open, the running
// epoch completed and one descriptor that retires the whole log (RetireForClose), so that the
// next open reads no record. docs/txn.md, "A clean close retires the log", has the store order.
#include <cstdint>
#include <mutex>
#include <vector>

#include "txn/internal/engine_impl.h"

namespace pmrt::txn {

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

}  // namespace pmrt::txn
