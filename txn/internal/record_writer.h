// Building a log record in memory (docs/txn.md, "On-media format"): the entries one after
// another, then the header, whose checksum over all of it is written last. Used where a record
// is built before it is copied or flushed (the snapshot, the general commit) and, for the header
// alone, by the small commit's portable writer. The caller flushes and fences; nothing here
// persists anything. Only txn/ includes this.
#ifndef PMRT_TXN_INTERNAL_RECORD_WRITER_H_
#define PMRT_TXN_INTERNAL_RECORD_WRITER_H_

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string_view>
#include <vector>

#include "txn/internal/log_layout.h"
#include "txn/internal/log_store.h"

namespace pmrt::txn_internal {

// Bytes of a logical entry of `n` payload bytes: its head, the length word, the padded bytes.
constexpr size_t LogicalEntryBytes(size_t n) { return 16 + (n + 7) / 8 * 8; }

// Record builder over reserved log space.
class RecordWriter {
 public:
  explicit RecordWriter(uint8_t* at) : base_(at), p_(reinterpret_cast<uint64_t*>(at) + 4) {}
  void Data(uint64_t word, uint64_t n, const uint8_t* pool_base) {
    *p_++ = MakeEntryHead(EntryType::kData, n, word);
    if (n == 1) {  // the common case: no library call for 8 bytes
      std::memcpy(p_, pool_base + word * 8, 8);
    } else {
      std::memcpy(p_, pool_base + word * 8, n * 8);
    }
    p_ += n;
  }
  void Values(uint64_t word, uint64_t n, const uint64_t* values) {
    *p_++ = MakeEntryHead(EntryType::kData, n, word);
    std::memcpy(p_, values, n * 8);
    p_ += n;
  }
  void Mark(EntryType t, uint64_t word, uint64_t n) { *p_++ = MakeEntryHead(t, n, word); }
  void Logical(uint64_t tag, std::string_view bytes) {
    const uint64_t n = 1 + (bytes.size() + 7) / 8;
    *p_++ = MakeEntryHead(EntryType::kLogical, n, tag);
    p_[n - 1] = 0;  // the last word's padding
    *p_ = bytes.size();
    std::memcpy(p_ + 1, bytes.data(), bytes.size());
    p_ += n;
  }
  // Writes the header last-but-checksum; returns the record's size in bytes.
  size_t Finish(RecordKind kind, uint64_t stamp, uint64_t epoch, uint64_t gen) {
    const size_t words = static_cast<size_t>(p_ - reinterpret_cast<uint64_t*>(base_));
    FinishHeader(base_, words, kind, stamp, epoch, gen);
    return words * 8;
  }
  // The header of a record of `words` words (header included) whose entries follow it at
  // `base`, then its checksum over all of it.
  static void FinishHeader(void* base, size_t words, RecordKind kind, uint64_t stamp,
                           uint64_t epoch, uint64_t gen) {
    FinishHeader(base, words, kind, stamp, epoch, gen, /*crc=*/0);
    auto* h = static_cast<RecordHeader*>(base);
    h->crc = RecordCrc(h);
  }
  // The same with the checksum already computed (WriteSmallCommit).
  static void FinishHeader(void* base, size_t words, RecordKind kind, uint64_t stamp,
                           uint64_t epoch, uint64_t gen, uint32_t crc) {
    auto* h = static_cast<RecordHeader*>(base);
    h->words = static_cast<uint16_t>(words);
    h->kind = static_cast<uint16_t>(kind);
    h->crc = crc;
    h->stamp = stamp;
    h->epoch = epoch;
    h->gen = gen;
  }

 private:
  uint8_t* base_;
  uint64_t* p_;
};

// Runs of ascending consecutive words, each at most kMaxEntryWords long.
template <class F>
void ForEachRun(const std::vector<uint64_t>& sorted, F&& fn) {
  size_t i = 0;
  while (i < sorted.size()) {
    size_t j = i + 1;
    while (j < sorted.size() && sorted[j] == sorted[j - 1] + 1 && j - i < kMaxEntryWords) ++j;
    fn(i, j);
    i = j;
  }
}

}  // namespace pmrt::txn_internal

#endif  // PMRT_TXN_INTERNAL_RECORD_WRITER_H_
