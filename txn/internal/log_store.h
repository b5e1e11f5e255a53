// LogStore: the transaction layer's persistent log space — the directory, the table of log
// blocks, per-log chains of blocks, appending records, and reading them back. The format is in
// txn/internal/log_layout.h; the protocols in docs/txn.md.
//
//   LogStore store(pool, epochs, heap);
//   RETURN_IF_ERROR(store.Open(block_size));            // finds or creates the directory
//   Chain& c = store.chain(slot);
//   ASSIGN_OR_RETURN(uint8_t* rec, store.Reserve(c, slot, bytes));  // inside a Guard
//   ... write the record, flush it, fence ...
//   store.Publish(c, bytes);
//
// Thread safety: a Chain's append state belongs to its owner (the thread holding the slot, or the
// reclaimer for the compacted log). `Chain::blocks` is guarded by `Chain::mu`: the owner appends
// at the back, the reclaimer trims the front (never the last block). The free pool and the table
// are guarded by the store's mutex.
#ifndef PMRT_TXN_INTERNAL_LOG_STORE_H_
#define PMRT_TXN_INTERNAL_LOG_STORE_H_

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "alloc/allocator.h"
#include "epoch/epoch.h"
#include "epoch/pool.h"
#include "txn/internal/log_layout.h"

namespace pmrt::txn_internal {

inline constexpr uint32_t kNoBlock = UINT32_MAX;
inline constexpr uint64_t kNothingPublished = ~uint64_t{0};

// Persistence sites of the log (docs/txn.md lists what each one orders).
inline constexpr Site kTableFlush{"txn.table.flush"};
inline constexpr Site kBlockFlush{"txn.log.block.flush"};
inline constexpr Site kLinkFlush{"txn.log.link.flush"};
inline constexpr Site kHeadFlush{"txn.log.head.flush"};
// A mutant that writes the pool's link to a new directory without its undo copy (registered
// dirty only): a crash in the creating epoch can then keep the link and roll the directory's
// allocation back. Killed by RuntimeCrashTest's first-open gate, where the runtime's catalog
// allocates before the engine opens.
inline constexpr Site kUnloggedDirectoryLink{"txn.mutant.unlogged.directory_link"};
// A mutant that drops the registration of a block table entry with the epoch boundary (not
// killed yet: the entry is also flushed, and the suite's reclaimer runs on the thread that
// advances, whose boundary fence then makes it durable; the registration covers a background
// reclaimer whose own fence may come after the boundary, LogStore::Grow).
inline constexpr Site kDirtyTable{"txn.mutant.dirty.table"};
// A logic mutant: Grow reuses a table entry in a line ReturnFree undo-logged in the same epoch
// (a failed epoch then erases the entry of a block that holds committed records). The crash
// suite's gate must kill it.
inline constexpr Site kReturnLineMutant{"txn.mutant.return_line_reuse"};

// One log: a thread slot's chain of blocks, or the compacted log's.
struct Chain {
  std::mutex mu;
  std::deque<uint32_t> blocks;  // table indices, head first; guarded by mu
  // Append state (owner only). tail == kNoBlock: the next record starts a new block (at open
  // every log starts a new block, so a torn tail from the previous run is never appended to).
  uint32_t tail = kNoBlock;
  uint32_t pos = 0;
  uint8_t* tail_at = nullptr;  // BlockAt(tail) while tail != kNoBlock (TryReserve's address)
  // (block << 32) | end of the last complete record: what the reclaimer may read. Release store
  // by the owner after the record is written; acquire load by the reclaimer.
  std::atomic<uint64_t> published{kNothingPublished};
};

// A record found valid by ValidRecord.
struct RecordRef {
  const RecordHeader* h;
  uint32_t block;  // table index
  uint32_t pos;    // offset in the block
};

// Returns the record at `pos` of a block whose header has generation `gen`, or null when it is
// not a valid record (size out of the block, wrong gen or kind, bad checksum, malformed entries).
const RecordHeader* ValidRecord(const uint8_t* block, size_t block_size, uint64_t gen, size_t pos);

// The record at `pos` of a block whose records end at `end` (LogStore::RecordsEnd): complete and
// once valid, so only its size is checked, which keeps a walk over a corrupt volatile state
// from looping or leaving the range; null when it does not fit in [pos, end).
inline const RecordHeader* KnownRecord(const uint8_t* block, size_t pos, size_t end) {
  const auto* h = reinterpret_cast<const RecordHeader*>(block + pos);
  const size_t bytes = size_t{h->words} * 8;
  return bytes >= sizeof(RecordHeader) && pos + bytes <= end ? h : nullptr;
}

// Calls fn(head, values) for each entry of a valid record (values is null for kAlloc/kFree; a
// kLogical entry's are its payload words); pad words are skipped.
template <class F>
void ForEachEntry(const RecordHeader* h, F&& fn) {
  const auto* p = reinterpret_cast<const uint64_t*>(h + 1);
  const auto* end = reinterpret_cast<const uint64_t*>(h) + h->words;
  while (p < end) {
    const uint64_t head = *p++;
    if (head == kPadWord) continue;  // padding: no entry
    if (const EntryType t = EntryTypeOf(head); t == EntryType::kData || t == EntryType::kLogical) {
      fn(head, p);
      p += EntryWords(head);
    } else {
      fn(head, static_cast<const uint64_t*>(nullptr));
    }
  }
}

uint32_t RecordCrc(const RecordHeader* h);  // over the record with the crc field taken as zero
uint32_t RecordCrcReference(const RecordHeader* h);  // the same through Crc32c (tests compare)
// Small commits compute their checksum alongside the entries with the crc32 instruction
// (x86-64 SSE 4.2; initialized to whether the processor has it). Tests clear it to run the
// portable path; set only while no transaction runs.
extern bool g_crc_in_commit_loop;

class LogStore {
 public:
  LogStore(Pool& pool, epoch::Manager& epochs, alloc::Heap& heap);

  // Finds the directory through PoolState::txn_directory, or creates one (epoch-scoped, made
  // durable by the Sync the caller runs before any transaction). `block_size` applies only to
  // a new directory. Loads the table. REQUIRES: no Guard held.
  absl::Status Open(size_t block_size, bool* created);

  DirectoryLayout* dir() const { return dir_; }
  size_t block_size() const { return block_size_; }
  // The directory's format version (kDirectoryVersion, or an older one it was created with).
  uint32_t version() const { return version_; }
  uint8_t* BlockAt(uint32_t b) const { return pool_.base() + blocks_[b].offset; }
  uint64_t BlockOffset(uint32_t b) const { return blocks_[b].offset; }
  uint64_t BlockGen(uint32_t b) const { return blocks_[b].gen; }
  uint32_t BlockCount() const { return count_.load(std::memory_order_acquire); }
  // Table index of the block at pool offset `off`, or kNoBlock.
  uint32_t IndexOf(uint64_t off) const;
  Chain& chain(uint32_t slot) { return slot == kCompactSlot ? *compact_ : *chains_[slot]; }
  std::unique_ptr<Chain> TakeCompact() {
    return std::exchange(compact_, std::make_unique<Chain>());
  }
  void SetCompact(std::unique_ptr<Chain> c) { compact_ = std::move(c); }

  // Walks the chain that starts at pool offset `head` for `slot`, at open: fills chain(slot) or
  // `into` with its blocks and calls fn(record) for each valid record, in log order. Records
  // after the first invalid one of a block are skipped; the walk continues through a valid link.
  void WalkChain(uint64_t head, uint32_t slot, Chain& into,
                 const std::function<void(const RecordRef&)>& fn);

  // Re-marks every table block allocated in the heap (Heap::MarkAllocated: a block whose
  // allocation was rolled back with a failed epoch). REQUIRES: a Guard, before any allocation.
  absl::Status MarkTableAllocated();
  // After the walks at open: every table block that is in no chain is free.
  void BuildFreePool();

  // Appends: returns room for `bytes` of record in chain c of `slot`, switching to a new block
  // when the tail is full (header, link or head, and table entry flushed; the caller's next
  // fence covers them; a new heap block's table entry is also registered dirty in the guard's
  // epoch, so its allocation never becomes durable without it). REQUIRES: a Guard; a record
  // that must be durable before the guard's epoch completes is fenced before it ends.
  // kResourceExhausted when no block can be had, kInvalidArgument when the record can never fit in
  // a block.
  absl::StatusOr<uint8_t*> Reserve(Chain& c, uint32_t slot, size_t bytes);
  // Reserve's common case, inline: room for `bytes` in c's tail block, or null (then call
  // Reserve). REQUIRES: bytes <= max_record_bytes().
  uint8_t* TryReserve(Chain& c, size_t bytes) {
    return c.tail != kNoBlock && c.pos + bytes <= block_size_ ? c.tail_at + c.pos : nullptr;
  }
  // The record of `bytes` just reserved is complete (its fence has returned): publish it.
  void Publish(Chain& c, size_t bytes) { PublishValue(c, PublishedAfter(c, bytes)); }
  // The same in two steps: the value to publish (computed before the fence), then the stores.
  static uint64_t PublishedAfter(const Chain& c, size_t bytes) {
    return uint64_t{c.tail} << 32 | (c.pos + static_cast<uint32_t>(bytes));
  }
  void PublishValue(Chain& c, uint64_t published) {
    c.pos = static_cast<uint32_t>(published);
    // Release: the record's bytes happen-before the reclaimer's acquire load of `published`.
    c.published.store(published, std::memory_order_release);
  }
  // Makes the next record of c start a new block.
  void Seal(Chain& c) {
    Leave(c);
    c.tail = kNoBlock;
  }

  // The end of the records in block b of chain c, given c's `published` value (acquired by the
  // caller): for the published block the published position, for a block the chain has left
  // the end of its last record (set by its owner when it moved on, or by WalkChain at open).
  // Every record in [kBlockPayload, end) was written completely by this process, or found valid
  // by WalkChain: its readers need not check it again (the reclaimer's fold skips the checksum).
  // REQUIRES: b is in c and is the published block or precedes it.
  size_t RecordsEnd(uint32_t b, uint64_t published) const {
    return b == static_cast<uint32_t>(published >> 32)
               ? static_cast<size_t>(published & 0xFFFFFFFFu)
               : blocks_[b].end;
  }

  // Returns blocks to the free pool. REQUIRES: no durable structure reaches them any more.
  void Release(const std::vector<uint32_t>& blocks);
  // Gives free-pool blocks back to the heap, all but the `keep` most recently released: in the
  // caller's guard's epoch, each table line first undo-logged in the epoch's external log, its
  // entries zeroed, then the blocks freed (Heap::Free). The epoch's completion makes the whole
  // return durable; its failure rolls back the table lines and the frees together. Returns the
  // number of blocks returned; stops early (the rest stay owned) if the external log is full.
  // REQUIRES: a Guard.
  uint64_t ReturnFree(size_t keep);

  size_t max_record_bytes() const { return block_size_ - kBlockPayload; }
  uint64_t blocks_in_use() const { return in_use_.load(std::memory_order_relaxed); }
  uint64_t blocks_in_use_peak() const { return peak_.load(std::memory_order_relaxed); }
  uint64_t blocks_owned() const;
  std::vector<uint64_t> OwnedOffsets() const;  // the directory and every table block
  // Thread logs may own at most this many blocks; the compacted log only the table's capacity
  // (the reclaimer must always be able to make room).
  // (Relaxed: an automatic budget moves the limit while records take blocks.)
  void set_limit_blocks(uint64_t n) { limit_blocks_.store(n, std::memory_order_relaxed); }
  uint64_t limit_blocks() const { return limit_blocks_.load(std::memory_order_relaxed); }

  Pool& pool() const { return pool_; }
  epoch::Manager& epochs() const { return epochs_; }
  alloc::Heap& heap() const { return heap_; }

 private:
  struct BlockState {
    uint64_t offset = 0;
    uint64_t gen = 0;  // the incarnation of the block's valid header (0: none known)
    // The end of the block's last record, once its chain has left it (RecordsEnd). Written by
    // the chain's owner before it publishes a record in a later block (so the reclaimer, which
    // acquires `published`, reads it ordered), or by WalkChain before any thread runs.
    uint32_t end = kBlockPayload;
  };
  // The owner leaves c's tail block: its records end at c.pos (the published end).
  void Leave(Chain& c) {
    if (c.tail != kNoBlock) blocks_[c.tail].end = c.pos;
  }
  absl::Status Create(size_t block_size);
  absl::StatusOr<uint32_t> Acquire(uint32_t slot);
  absl::StatusOr<uint32_t> Grow(uint32_t slot);
  void InitHeader(uint32_t b, uint32_t slot);
  void Link(uint32_t from, uint32_t to);
  bool HeaderValid(uint32_t b, uint32_t slot) const;

  Pool& pool_;
  epoch::Manager& epochs_;
  alloc::Heap& heap_;
  DirectoryLayout* dir_ = nullptr;
  size_t block_size_ = 0;
  uint32_t version_ = kDirectoryVersion;
  uint64_t* table_ = nullptr;

  mutable std::mutex mu_;  // table growth, by_offset_, free_
  // By table index. blocks_[b] is written before b is published: by Grow (under mu_, before
  // count_'s release store) and by InitHeader (before the block joins a chain under Chain::mu).
  std::unique_ptr<BlockState[]> blocks_;
  std::atomic<uint32_t> count_{0};
  std::unordered_map<uint64_t, uint32_t> by_offset_;
  std::vector<uint32_t> free_;
  std::vector<uint32_t> holes_;  // table entries that are zero below count_, highest first
  // The epoch of the last ReturnFree and the table lines it undo-logged then (Grow avoids them).
  uint64_t return_epoch_ = 0;
  std::unordered_set<uint32_t> return_lines_;
  // Per table line, the epoch in which ReturnFree undo-logged it (ExternalLog::Snapshot's mark;
  // volatile: a mark only needs to hold within the run, as a crash ends the epoch).
  std::unique_ptr<std::atomic<uint64_t>[]> line_marks_ =
      std::make_unique<std::atomic<uint64_t>[]>(kTableCapacity / 8);
  std::atomic<uint64_t> in_use_{0};
  std::atomic<uint64_t> peak_{0};
  std::atomic<uint64_t> limit_blocks_{kTableCapacity};
  std::atomic<uint64_t> next_gen_{0};

  std::unique_ptr<Chain> chains_[kMaxSlots];
  std::unique_ptr<Chain> compact_;
};

}  // namespace pmrt::txn_internal

#endif  // PMRT_TXN_INTERNAL_LOG_STORE_H_
