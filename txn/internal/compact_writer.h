// CompactWriter: the writer of the compacted log K' (docs/txn.md, "Reclamation"), one kCompact
// record per log block, each built in a staging buffer and copied into its block when complete.
// Its records carry the cycle's seq (the descriptor that makes them current comes after them)
// and its horizon. It flushes each record it closes and fences nothing: the cycle's fence
// (kCompactFence) makes them durable before the descriptor that names them. Used by the
// reclamation cycle (reclaim.cc) only; only txn/ includes this.
#ifndef PMRT_TXN_INTERNAL_COMPACT_WRITER_H_
#define PMRT_TXN_INTERNAL_COMPACT_WRITER_H_

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>

#include "absl/status/status.h"
#include "base/status_macros.h"
#include "epoch/epoch.h"
#include "txn/internal/engine_impl.h"
#include "txn/internal/log_layout.h"
#include "txn/internal/log_store.h"

namespace pmrt::txn_internal {

// Writes the compacted log: one kCompact record per block, filled entry by entry in a staging
// buffer (a run's head is rewritten as the run grows) and copied into its block when complete
// (CopyFlush). A block's record is large enough to go with non-temporal stores whatever the
// pool's record writes (kStreamAlwaysFrom; only a cycle's last, partly filled record may be
// smaller): K' reaches memory without being read first or passing through this core's caches,
// where it would evict lines the transactions use (a full cycle writes all of K', one entry per
// hot word).
class CompactWriter {
 public:
  CompactWriter(LogStore& store, Chain& chain, uint64_t seq, uint64_t horizon)
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
    h->crc = RecordCrc(h);
    store_.pool().persister().CopyFlush(kCompactFlush, at_, rec_, used_);
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

  LogStore& store_;
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

}  // namespace pmrt::txn_internal

#endif  // PMRT_TXN_INTERNAL_COMPACT_WRITER_H_
