// WordIndex: the volatile hot/cold index of the transaction layer, one 64-bit value per 8-byte
// word of the pool, in an anonymous MAP_NORESERVE mapping as large as the pool (only the pages
// of words that transactions touch become resident; a fresh page reads as "cold"), on
// transparent huge pages where the system allows (word_index.cc).
//
//   value = key:32 (high) | epoch:32 (low)
//   key    0: cold — the word has no live record; its first write in a transaction snapshots it.
//          otherwise the key of the word's newest live record: KeyOf(stamp) of the commit or
//          snapshot record that wrote it, which stays the key when a reclamation cycle folds
//          that record into the compacted log K; CompactKey(seq) for a K record found at open
//          (recovery's pass 1). The reclaimer keeps the keys of K's words (engine_impl.h,
//          k_keys_).
//   epoch  low 32 bits of an epoch in which a transaction touched the word, at most the touch
//          slack (engine_impl.h, kMaxTouchSlack) older than the last such epoch.
//          Compared with a signed 32-bit difference (TouchedBy()).
//
// Beside it, the fast-line map: one byte per 8-word line of the pool (pool size / 64 bytes, also
// MAP_NORESERVE; fresh pages read 0). kFast (1): every word of the line is hot, and the reclaimer
// makes none of them cold before it has set the byte back to 0 and waited for the epoch in which
// it did so to complete (docs/txn.md, "Fast lines"): txn::add's inline path then declares a word
// of the line without reading its slot (one cache miss fewer per word). Written only by the
// reclaimer (0 -> kChecking -> kFast after checking the line's 8 slots; kFast or kFreed -> 0
// before a cold transition) and by a commit whose free makes words cold (slot 0, then kFreed).
//
// Concurrency (docs/txn.md, "The index"): a word is written by the transaction that holds it
// (the caller's isolation) and by the reclaimer, which only ever CASes a value it has read: hot
// -> cold (when the touch epoch has completed; it then flushes the word's line). A transaction that
// finds a value with an epoch more than the touch slack older than its own CASes the epoch forward,
// so the reclaimer's CAS of the old value fails; a more recent epoch it leaves as is, as the
// reclaimer never makes such a word cold while the transaction is open (its cold age is at least
// the slack).
#ifndef PMRT_TXN_INTERNAL_WORD_INDEX_H_
#define PMRT_TXN_INTERNAL_WORD_INDEX_H_

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"

namespace pmrt::txn_internal {

class WordIndex {
 public:
  static absl::StatusOr<std::unique_ptr<WordIndex>> Create(size_t pool_size);
  ~WordIndex();
  WordIndex(const WordIndex&) = delete;
  WordIndex& operator=(const WordIndex&) = delete;

  std::atomic<uint64_t>& at(uint64_t word) { return values_[word]; }
  uint64_t words() const { return words_; }

  // The fast-line map (above).
  // kFreed: unmarked by a commit whose free made words of the line cold; the reclaimer treats
  // it as its own unmarking (ReclaimCycle::DecideOne), as a transaction may still hold another
  // word of the line declared on the fast path.
  static constexpr uint8_t kFast = 1, kChecking = 2, kFreed = 3;
  static constexpr uint64_t LineOf(uint64_t word) { return word >> 3; }
  std::atomic<uint8_t>& line(uint64_t line) { return lines_[line]; }
  std::atomic<uint8_t>* lines() { return lines_; }
  // The reclaimer: whether every word of `line` within the pool is hot and touched after
  // `cold_limit` (seq_cst loads: see TryMarkFast in txn/reclaim.cc).
  bool LineAllHot(uint64_t line, uint64_t cold_limit) {
    const uint64_t end = std::min(words_, (line + 1) * 8);
    for (uint64_t w = line * 8; w < end; ++w) {
      const uint64_t v = values_[w].load(std::memory_order_seq_cst);
      if (Key(v) == 0 || TouchedBy(v, cold_limit)) return false;
    }
    return true;
  }

  // A thread record's key: its stamp modulo kKeyModulus, plus one (1 .. 2^31-1, never 0).
  static constexpr uint32_t kKeyModulus = 0x7FFFFFFFu;
  // Set in the key of a K record after recovery (CompactKey), never in KeyOf's.
  static constexpr uint32_t kCompactBit = 0x80000000u;
  static constexpr uint32_t KeyOf(uint64_t stamp) {
    return static_cast<uint32_t>(1 + stamp % kKeyModulus);
  }
  static constexpr uint32_t CompactKey(uint64_t seq) {
    return kCompactBit | (static_cast<uint32_t>(seq) & ~kCompactBit);
  }
  static constexpr bool IsCompactKey(uint32_t key) { return (key & kCompactBit) != 0; }
  // KeyOf(stamp + n) from key = KeyOf(stamp), without a division. REQUIRES: n < kKeyModulus.
  static constexpr uint32_t KeyAfter(uint32_t key, uint32_t n) {
    const uint64_t sum = uint64_t{key} + n;  // key - 1 = stamp mod m, so sum - 1 < 2m
    return static_cast<uint32_t>(sum > kKeyModulus ? sum - kKeyModulus : sum);
  }
  static constexpr uint64_t Pack(uint32_t key, uint64_t epoch) {
    return uint64_t{key} << 32 | static_cast<uint32_t>(epoch);
  }
  static constexpr uint32_t Key(uint64_t v) { return static_cast<uint32_t>(v >> 32); }
  static constexpr uint32_t Epoch32(uint64_t v) { return static_cast<uint32_t>(v); }
  // Whether v's touch epoch is `limit` or older. Compared on the low 32 bits with a signed
  // difference, so a touch epoch newer than `limit` (a transaction of an epoch that began after
  // the caller read the epoch: the reclaimer holds no guard while it folds) is never taken for an
  // old one. Valid while touch epochs lie within 2^31 epochs (4 years at 64 ms) of `limit`.
  static constexpr bool TouchedBy(uint64_t v, uint64_t limit) {
    return static_cast<int32_t>(Epoch32(v) - static_cast<uint32_t>(limit)) <= 0;
  }

  // Zeroes the whole index and the fast-line map (drops the pages).
  void Clear();

 private:
  WordIndex(std::atomic<uint64_t>* values, uint64_t words, size_t bytes,
            std::atomic<uint8_t>* lines, size_t line_bytes)
      : values_(values), words_(words), bytes_(bytes), lines_(lines), line_bytes_(line_bytes) {}
  std::atomic<uint64_t>* values_;
  uint64_t words_;
  size_t bytes_;
  std::atomic<uint8_t>* lines_;
  size_t line_bytes_;
};

}  // namespace pmrt::txn_internal

#endif  // PMRT_TXN_INTERNAL_WORD_INDEX_H_
