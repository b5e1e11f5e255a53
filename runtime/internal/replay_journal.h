// The replay journal: the index operations of committed transactions that a crash rolled back,
// kept in the pool until each is applied to its tree (Runtime's lazy replay, docs/durability.md
// "Restart").
//
// Recovery does not apply them before Open returns: it writes them, deduplicated (the last
// operation of each key), into one heap block published in RuntimeHeader::journal, in the epoch
// of the engine's recovery, whose Sync makes the journal durable before the engine records the
// transactions as replayed. After Open, reads answer from the journal for a key it holds, a write
// to such a key applies its entry first, and a background thread (or finish_replay) applies the
// rest. Applying entry i writes the tree and marks[i] = the epoch of the application, under one
// guard: the mark is durable exactly when the tree's change is (both epoch-scoped, one epoch),
// so an entry is applied iff its mark names an epoch of an earlier execution that did not fail.
// A later operation on that key, in the same epoch or after, can be durable only with the mark,
// so an entry never overwrites a newer value. Once every entry is applied and durable, the block
// is freed and the header cleared (one epoch).
//
// Layout: JournalHeader (64 bytes), then marks[count] (8 bytes each), then per entry: the tag
// (index id << 1 | op), the key's and value's lengths (4 bytes each), the key and the value,
// padded to 8 bytes. The CRC32C covers count, stamp_hi, payload_bytes and the payload (the
// marks, written after, are not covered).
#ifndef PMRT_RUNTIME_INTERNAL_REPLAY_JOURNAL_H_
#define PMRT_RUNTIME_INTERNAL_REPLAY_JOURNAL_H_

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "alloc/allocator.h"
#include "epoch/epoch.h"
#include "epoch/pool.h"
#include "txn/txn.h"

namespace pmrt::runtime_internal {

struct JournalHeader {
  static constexpr uint64_t kMagic = 0x314e524a54524d50ull;  // "PMRTJRN1"
  uint64_t magic;
  uint64_t count;          // entries
  uint64_t stamp_hi;       // the newest commit stamp among the operations it holds
  uint64_t payload_bytes;  // after the marks
  uint32_t crc;
  uint32_t reserved;
  uint64_t pad[3];
};
static_assert(sizeof(JournalHeader) == 64);

// An index operation to apply: an entry of a journal (mark set), or a logged one not yet
// journaled (mark null; it points into the engine's LogicalOp).
struct IndexOp {
  uint64_t id;
  bool remove;
  std::string_view key, value;
  uint64_t* mark;
};

// A journal read from the pool. Its views point into the pool's block.
struct Journal {
  uint64_t offset = 0;  // of the block; 0: none
  uint64_t stamp_hi = 0;
  std::vector<IndexOp> entries;
};

// Decodes a logged operation's bytes (the key's length, 4 bytes, the key, then a put's value).
bool DecodeLoggedOp(std::string_view bytes, std::string_view* key, std::string_view* value);

// Reads and checks the journal at pool offset `offset` (kDataLoss naming what and where).
absl::StatusOr<Journal> ReadJournal(Pool& pool, const alloc::Heap& heap, uint64_t offset);

// True when `mark` records an application whose epoch completed before this execution.
bool AppliedDurably(const epoch::Manager& epochs, uint64_t mark);

// The operations still to apply, in order: the entries of `old` (may be null) not applied
// durably, then the operations of `logged` newer than old's stamp_hi, the last one of each key
// only; operations of an index id not in `ids` (sorted) are dropped. *stamp_hi receives the
// newest stamp of the result's sources. kDataLoss for a logged operation that does not decode.
absl::StatusOr<std::vector<IndexOp>> PlanReplay(const epoch::Manager& epochs, const Journal* old,
                                                const std::vector<txn::LogicalOp>& logged,
                                                const std::vector<uint64_t>& ids,
                                                uint64_t* stamp_hi);

// Writes `ops` as a new journal block (allocated from `heap` in the caller's guard: the heap
// writes a fresh block back with its epoch). Returns the block's pool offset.
absl::StatusOr<uint64_t> WriteJournal(Pool& pool, alloc::Heap& heap,
                                      const std::vector<IndexOp>& ops, uint64_t stamp_hi);

}  // namespace pmrt::runtime_internal

#endif  // PMRT_RUNTIME_INTERNAL_REPLAY_JOURNAL_H_
