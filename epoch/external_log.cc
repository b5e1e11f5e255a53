#include "epoch/external_log.h"

#include <cstring>
#include <thread>

#include "absl/strings/str_cat.h"
#include "base/crc32c.h"
#include "epoch/epoch.h"

namespace pmrt::epoch {
namespace {

constexpr Site kBlockFlush{"epoch.log.block.flush"};
constexpr Site kDirFlush{"epoch.log.dir.flush"};
constexpr Site kEntryFlush{"epoch.log.entry.flush"};
constexpr Site kEntryFence{"epoch.log.entry.fence"};
constexpr Site kReplayFlush{"epoch.log.replay.flush"};
constexpr Site kReplayFence{"epoch.log.replay.fence"};
constexpr Site kFreeFlush{"epoch.log.free.flush"};
// A mutant that drops the logged object's registration with the boundary (the gate in
// tests/epoch/epoch_crash_test.cc must kill it).
constexpr Site kDirtyLogged{"epoch.mutant.dirty.logged_object"};

uint32_t BlockCrc(uint64_t epoch) {
  uint64_t words[2] = {epoch, kLogBlockMagic};
  return Crc32c(words, sizeof(words));
}

uint32_t EntryCrc(const LogEntryHeader& h, const void* data) {
  uint32_t c = Crc32c(&h, offsetof(LogEntryHeader, crc));
  return Crc32c(data, h.size, c);
}

size_t EntrySpan(size_t size) {
  return (sizeof(LogEntryHeader) + size + kLogEntryAlign - 1) / kLogEntryAlign * kLogEntryAlign;
}

}  // namespace

ExternalLog::ExternalLog(Pool& pool, Manager& manager)
    : pool_(pool),
      manager_(manager),
      base_(static_cast<uint8_t*>(pool.region_base(PoolRegion::kLog))),
      blocks_(static_cast<uint32_t>(pool.region(PoolRegion::kLog).size / kLogBlockSize)) {}

absl::Status ExternalLog::Configure(bool directory) {
  dir_blocks_ = directory ? kLogDirectoryBlocks(blocks_) : 0;
  if (blocks_ <= dir_blocks_) {
    return absl::FailedPreconditionError(absl::StrCat(
        pool_.path(), ": log region at offset ", pool_.region(PoolRegion::kLog).offset, " of ",
        pool_.region(PoolRegion::kLog).size, " bytes holds no log block beside its directory"));
  }
  // Every block starts free: Replay (run before any Snapshot) frees the failed ones durably, and
  // a block of a completed epoch is never applied, whatever its header says.
  std::lock_guard<std::mutex> l(free_mu_);
  free_.clear();
  for (uint32_t i = dir_blocks_; i < blocks_; ++i) free_.push_back(i);
  return absl::OkStatus();
}

void ExternalLog::Unmark(const std::vector<uint32_t>& blocks) {
  // No flush: a bit set on media for a block whose epoch is complete costs Replay one header
  // read and nothing else (the header's epoch is not failed). The line reaches media with the
  // next StartBlock that flushes it, or by eviction.
  if (dir_blocks_ == 0) return;
  for (uint32_t b : blocks) DirWord(b)->fetch_and(~DirBit(b), std::memory_order_relaxed);
}

size_t ExternalLog::blocks_free() const {
  std::lock_guard<std::mutex> l(free_mu_);
  return free_.size();
}

absl::Status ExternalLog::Snapshot(void* obj, size_t size, std::atomic<uint64_t>* mark) {
  ThreadSlot& slot = manager_.LocalSlot();
  const uint64_t e = slot.epoch.load(std::memory_order_relaxed);
  if (mark->load(std::memory_order_relaxed) == e) return absl::OkStatus();  // logged in e
  if (size > kMaxLoggedObject || !pool_.contains(obj, size)) {
    return absl::InvalidArgumentError(absl::StrCat(
        pool_.path(), ": external log: object at offset ", pool_.offset_of(obj), " of ", size,
        " bytes is outside the pool or larger than ", kMaxLoggedObject, " bytes"));
  }
  // The failed mode (the pool's health): an entry could not be made durable, so the object must
  // not change; nothing is modified and the mark is unchanged.
  if (pool_.failed()) return pool_.health();
  if (auto st = AppendEntry(slot.log_cursor, e, obj, size); !st.ok()) return st;
  if (pool_.failed()) return pool_.health();  // this entry's fence failed
  // The entry is durable (fenced in AppendEntry). Only now may the object change: a crash from
  // here on finds the entry and restores the object's bytes as of this moment. The mark is part
  // of the object, so the logged copy holds the old mark and recovery restores that too.
  mark->store(e, std::memory_order_release);
  if (!mutation::Swapped(kDirtyLogged)) manager_.RecordDirty(obj, size);
  return absl::OkStatus();
}

absl::Status ExternalLog::StartBlock(ExternalLogCursor& cur, uint64_t epoch) {
  uint32_t block;
  {
    std::lock_guard<std::mutex> l(free_mu_);
    if (free_.empty()) {
      return absl::ResourceExhaustedError(absl::StrCat(
          pool_.path(), ": external undo log is full: all ", blocks_, " blocks of ", kLogBlockSize,
          " bytes (log region at offset ", pool_.region(PoolRegion::kLog).offset,
          ") hold entries of epochs not yet complete; create the pool with a larger log area"));
    }
    // First in, first out: blocks take turns (spreading media writes over the region) instead
    // of the same few being rewritten every epoch.
    block = free_.front();
    free_.pop_front();
  }
  LogBlockHeader* h = Block(block);
  // The header names the epoch whose entries follow. Flushed here, fenced together with the
  // block's first entry (AppendEntry): no entry is relied on before that fence, so until then
  // the header may or may not be on media — with the old header (a complete epoch, or 0) the
  // block replays nothing, with the new one it replays entries whose crc is right.
  h->magic = kLogBlockMagic;
  h->crc = BlockCrc(epoch);
  h->pad = 0;
  h->epoch.store(epoch, std::memory_order_release);
  manager_.persister().Flush(kBlockFlush, h, sizeof(*h));
  // The block's directory bit, flushed here and fenced with the first entry like the header:
  // any entry recovery relies on (its fence has returned) is in a block whose bit is durable.
  // Until that fence the bit may or may not be on media; a set bit over a block with no valid
  // entry of a failed epoch replays nothing.
  if (dir_blocks_ > 0) {
    std::atomic<uint64_t>* w = DirWord(block);
    w->fetch_or(DirBit(block), std::memory_order_relaxed);
    manager_.persister().Flush(kDirFlush, w, sizeof(*w));
  }
  // Entries left from the block's earlier use carry that use's epoch, never this one (an epoch
  // number is never reused), so replay stops at the first of them.
  cur.epoch = epoch;
  cur.block = block;
  cur.offset = sizeof(LogBlockHeader);
  cur.used[epoch & 1].push_back(block);
  return absl::OkStatus();
}

absl::Status ExternalLog::AppendEntry(ExternalLogCursor& cur, uint64_t epoch, const void* obj,
                                      size_t size) {
  const size_t span = EntrySpan(size);
  if (cur.epoch != epoch || cur.offset + span > kLogBlockSize) {
    if (auto st = StartBlock(cur, epoch); !st.ok()) return st;
  }
  uint8_t* at = reinterpret_cast<uint8_t*>(Block(cur.block)) + cur.offset;
  LogEntryHeader h{epoch, pool_.offset_of(obj), static_cast<uint32_t>(size), 0};
  h.crc = EntryCrc(h, obj);
  std::memcpy(at, &h, sizeof(h));
  std::memcpy(at + sizeof(h), obj, size);
  // Entry durable before the caller modifies the object. The crc covers header and data: a
  // crash with the entry partly on media leaves a crc mismatch, and the entry is ignored —
  // correctly, since the object was not modified before this fence returned.
  manager_.persister().Flush(kEntryFlush, at, sizeof(h) + size);
  manager_.persister().Fence(kEntryFence);
  cur.offset += static_cast<uint32_t>(span);
  entries_written_.fetch_add(1, std::memory_order_relaxed);
  return absl::OkStatus();
}

void ExternalLog::Release(ExternalLogCursor& cur, uint64_t completed_epoch) {
  auto& used = cur.used[completed_epoch & 1];
  if (used.empty()) return;
  if (cur.epoch == completed_epoch) cur.epoch = 0;  // next Snapshot starts a fresh block
  // Unmarked before the blocks are free again: a later StartBlock's mark of the same block then
  // follows this clear in the word's modification order and is the value its flush writes back.
  Unmark(used);
  std::lock_guard<std::mutex> l(free_mu_);
  free_.insert(free_.end(), used.begin(), used.end());
  used.clear();
}

uint64_t ExternalLog::ReplayBlock(uint32_t block, const EpochView& view) {
  LogBlockHeader* h = Block(block);
  const uint64_t e = h->epoch.load(std::memory_order_relaxed);
  if (e == 0 || h->magic != kLogBlockMagic || h->crc != BlockCrc(e) || !view.IsFailed(e)) return 0;
  uint64_t applied = 0;
  for (size_t off = sizeof(LogBlockHeader); off + sizeof(LogEntryHeader) <= kLogBlockSize;) {
    LogEntryHeader eh;
    const uint8_t* at = reinterpret_cast<const uint8_t*>(h) + off;
    std::memcpy(&eh, at, sizeof(eh));
    if (eh.epoch != e || eh.size == 0 || eh.size > kLogBlockSize - off - sizeof(eh)) break;
    if (!pool_.contains_offset(eh.target, eh.size) || eh.target == 0) break;
    if (EntryCrc(eh, at + sizeof(eh)) != eh.crc) break;  // torn: nothing after it was relied on
    void* target = pool_.base() + eh.target;
    std::memcpy(target, at + sizeof(eh), eh.size);
    manager_.persister().Flush(kReplayFlush, target, eh.size);
    ++applied;
    off += EntrySpan(eh.size);
  }
  return applied;
}

absl::StatusOr<uint64_t> ExternalLog::Replay(const EpochView& view, int threads) {
  // 1. Apply every failed block's entries (independent: one entry per object per epoch).
  //    With a directory only the marked blocks can hold an entry that was relied on (their bit
  //    was fenced with the entry); marked blocks of complete epochs are unmarked on the way.
  std::vector<uint32_t> failed, stale;
  auto consider = [&](uint32_t b) {
    ++blocks_scanned_;
    const uint64_t e = Block(b)->epoch.load(std::memory_order_relaxed);
    if (e != 0 && view.IsFailed(e)) {
      failed.push_back(b);
    } else {
      stale.push_back(b);
    }
  };
  blocks_scanned_ = 0;
  if (dir_blocks_ == 0) {
    for (uint32_t b = 0; b < blocks_; ++b) consider(b);
    stale.clear();
  } else {
    for (uint32_t w = 0; w < (blocks_ + 63) / 64; ++w) {
      uint64_t bits =
          reinterpret_cast<std::atomic<uint64_t>*>(base_)[w].load(std::memory_order_relaxed);
      while (bits != 0) {
        const uint32_t b = w * 64 + static_cast<uint32_t>(__builtin_ctzll(bits));
        bits &= bits - 1;
        if (b >= dir_blocks_ && b < blocks_) consider(b);
      }
    }
    Unmark(stale);
  }
  if (failed.empty()) return 0;  // no crash, or replayed and freed already: no fence needed
  std::atomic<uint64_t> applied{0};
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t i; (i = next.fetch_add(1)) < failed.size();) {
      applied.fetch_add(ReplayBlock(failed[i], view));
    }
    // 2. This thread's restored objects are durable (a fence orders only its own flushes).
    manager_.persister().Fence(kReplayFence);
  };
  const int n = std::max(1, std::min<int>(threads, static_cast<int>(failed.size() / 4 + 1)));
  if (manager_.persister().kind() == BackendKind::kSim || n == 1) {
    work();  // the simulator is driven from one thread, deterministically
  } else {
    std::vector<std::thread> pool;
    for (int t = 0; t < n; ++t) pool.emplace_back(work);
    for (auto& t : pool) t.join();
  }
  // 3. Free the replayed blocks. Flushed here and fenced by the caller (Manager::Recover moves
  //    `completed` and fences) before the new execution modifies anything: until then a crash
  //    replays them again, which is harmless since nothing has modified the objects since;
  //    after it they are never replayed, which matters once the objects change again.
  for (uint32_t b : failed) {
    Block(b)->epoch.store(0, std::memory_order_release);
    manager_.persister().Flush(kFreeFlush, Block(b), sizeof(LogBlockHeader));
  }
  Unmark(failed);  // after the headers: a free block's bit only costs a header read
  return applied.load();
}

}  // namespace pmrt::epoch
