// The external undo log: object-granularity undo records for changes the in-line logs can't
// cover (splits, interior nodes, any object without InCLL fields).
//
//   // inside a Guard, before the first modification of `node` in this epoch:
//   if (auto st = manager.log().Snapshot(node, sizeof(*node), &node->logged_epoch); !st.ok())
//     return st;                      // kResourceExhausted: the log is full, nothing modified
//   node->field = ...;                // free until the next epoch: the object is logged
//
// Snapshot copies the object's bytes into the calling thread's log block, flushes and fences
// them, and only then sets the object's mark to the guard's epoch and registers the object dirty
// (so the boundary flushes it). The mark makes every later Snapshot of the object in the same
// epoch a single load and compare. The on-media format is in epoch/epoch_layout.h.
//
// Recovery (Manager::Open) replays, for every block whose epoch is failed, its valid entries:
// each restores an object to its bytes at its first modification in the failed epoch. An object
// is logged at most once per epoch, so entries have no ordering dependencies and the replay runs
// on several threads. The replayed blocks are then freed durably, so a later crash never applies
// them again.
//
// Thread safety: Snapshot may be called from any thread holding a Guard; each thread appends to
// its own blocks. The object must not be modified concurrently by another thread while it is
// snapshotted (callers hold the object's lock, as Masstree writers do).
#ifndef PMRT_EPOCH_EXTERNAL_LOG_H_
#define PMRT_EPOCH_EXTERNAL_LOG_H_

#include <atomic>
#include <cstdint>
#include <deque>
#include <mutex>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "epoch/epoch_layout.h"
#include "epoch/epoch_view.h"
#include "epoch/pool.h"

namespace pmrt::epoch {

class Manager;

// A thread's append position; lives in the thread's slot of the Manager.
struct ExternalLogCursor {
  uint64_t epoch = 0;             // epoch of the current block; 0 = none
  uint32_t block = 0;             // index of the current block
  uint32_t offset = 0;            // next entry's offset inside the block
  std::vector<uint32_t> used[2];  // blocks used per epoch parity, freed once the epoch completes
};

class ExternalLog {
 public:
  ExternalLog(Pool& pool, Manager& manager);

  // Chooses the region's layout from the epoch area's version (before Replay and before any
  // Snapshot): with a directory (version >= 2) its blocks are reserved and Replay reads only
  // the blocks it marks; without one (version 1) every block is a log block and Replay reads
  // every header. Rebuilds the free list (every block free; Replay frees the failed ones).
  absl::Status Configure(bool directory);

  // Undo-logs [obj, obj + size) unless `*mark` already equals the caller's epoch (see above).
  // REQUIRES: the caller holds a Guard; obj is inside the pool; size <= kMaxLoggedObject.
  // Errors: kResourceExhausted (no free block), kInvalidArgument (object too large or outside
  // the pool). On error nothing is modified and the mark is unchanged.
  absl::Status Snapshot(void* obj, size_t size, std::atomic<uint64_t>* mark);

  // Recovery: replays the entries of failed epochs, makes the restored objects durable, then
  // frees the replayed blocks (flushed; the caller's next fence makes the frees durable, and it
  // must come before anything modifies a restored object). Returns the number of entries
  // applied. Idempotent.
  absl::StatusOr<uint64_t> Replay(const EpochView& view, int threads);

  // Returns the blocks a thread used in a completed epoch to the free list.
  void Release(ExternalLogCursor& cursor, uint64_t completed_epoch);

  // Log blocks (the directory's blocks excluded).
  size_t blocks_total() const { return blocks_ - dir_blocks_; }
  // Blocks whose header Replay read at the last open (those marked in the directory).
  uint64_t blocks_scanned() const { return blocks_scanned_; }
  size_t blocks_free() const;
  uint64_t entries_written() const { return entries_written_.load(std::memory_order_relaxed); }

 private:
  absl::Status AppendEntry(ExternalLogCursor& cur, uint64_t epoch, const void* obj, size_t size);
  absl::Status StartBlock(ExternalLogCursor& cur, uint64_t epoch);
  LogBlockHeader* Block(uint32_t i) const {
    return reinterpret_cast<LogBlockHeader*>(base_ + static_cast<size_t>(i) * kLogBlockSize);
  }
  uint64_t ReplayBlock(uint32_t block, const EpochView& view);
  // The directory word holding block b's bit. REQUIRES: dir_blocks_ > 0.
  std::atomic<uint64_t>* DirWord(uint32_t b) const {
    return reinterpret_cast<std::atomic<uint64_t>*>(base_) + b / 64;
  }
  static uint64_t DirBit(uint32_t b) { return uint64_t{1} << (b % 64); }
  // Clears the directory bits of blocks whose entries recovery will never need again.
  void Unmark(const std::vector<uint32_t>& blocks);

  Pool& pool_;
  Manager& manager_;
  uint8_t* base_;
  uint32_t blocks_;
  uint32_t dir_blocks_ = 0;  // leading blocks that hold the directory (0: version 1, none)
  uint64_t blocks_scanned_ = 0;
  mutable std::mutex free_mu_;
  std::deque<uint32_t> free_;  // volatile, in the order blocks are handed out; rebuilt at open
  std::atomic<uint64_t> entries_written_{0};
};

}  // namespace pmrt::epoch

#endif  // PMRT_EPOCH_EXTERNAL_LOG_H_
