// On-media layout of the transaction layer (txn/). docs/txn.md has the long form, with every
// store order.
//
// Everything lives in heap blocks (alloc::Heap small blocks, so a rolled-back allocation can be
// re-marked with Heap::MarkAllocated):
//
//   PoolState::txn_directory ──> directory block (kDirectorySize bytes)
//     line 0          DirectoryHeader {magic, version, block_size, crc}
//     lines 1, 2      Descriptor[2]: the compacted log K and the reclaim horizon (A/B, seq + crc)
//     line 3          replayed_stamp: allocation ops of records up to this stamp are applied
//     1 KiB at 256    heads[kMaxSlots]: first block of each thread log (8-byte offsets, 0 = none)
//     4 KiB..         table[kTableCapacity]: every log block the layer owns (offsets, 0 = unused)
//
//   log block (block_size bytes, a heap block of that size class):
//     line 0          BlockHeader {magic, gen, slot, crc}       written when the block is (re)used
//     line 1          BlockLink {next, next_gen, gen, crc}      written when the log moves on
//     128..           records, 8-byte aligned, back to back; a record never crosses a block
//
//   record:  RecordHeader {words, kind, crc, stamp, epoch, gen}  (32 bytes)
//            then entries: u64 EntryHead {type:2 | nwords:16 | word index:46}, then for a data
//            entry nwords x 8 bytes of values (kAlloc / kFree entries carry no values); a head
//            of 0 (kPadWord) is padding, one word that is no entry (version 2: the one-word
//            commit pads its record to end at a cache line, docs/txn.md "Line-ending records")
//
// A record is valid iff its size fits the block, its gen equals the block header's gen, and its
// CRC32C (over the whole record, crc field zero) is right. The checksum is the commit mark.
#ifndef PMRT_TXN_INTERNAL_LOG_LAYOUT_H_
#define PMRT_TXN_INTERNAL_LOG_LAYOUT_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <type_traits>

namespace pmrt::txn_internal {

inline constexpr uint64_t kDirectoryMagic = 0x524944584E54524Dull;  // "MRTNXDIR"
inline constexpr uint64_t kBlockMagic = 0x4B4C42584E54524Dull;      // "MRTNXBLK"
// Version 2 added pad words (kPadWord) to records. A version-1 directory is read and written as
// version 1 (its records are never padded), so a binary that knows only version 1 can still
// open it; it refuses a version-2 directory (newer than supported) instead of taking a padded
// record for the torn end of its log.
inline constexpr uint32_t kDirectoryVersion = 2;
inline constexpr uint32_t kFirstPaddedVersion = 2;
inline constexpr size_t kDirectorySize = 32 * 1024;
inline constexpr size_t kMaxSlots = 128;           // thread logs
inline constexpr uint32_t kCompactSlot = 0xFFFFu;  // the compacted log's blocks
inline constexpr size_t kTableOffset = 4096;
inline constexpr size_t kTableCapacity = (kDirectorySize - kTableOffset) / 8;  // 3584 blocks
inline constexpr size_t kBlockPayload = 128;  // offset of the first record in a block
inline constexpr size_t kMinBlockSize = 4096;
inline constexpr size_t kMaxBlockSize = 32 * 1024;  // the heap's largest small class

struct alignas(64) DirectoryHeader {
  uint64_t magic;       // kDirectoryMagic
  uint32_t version;     // kDirectoryVersion
  uint32_t block_size;  // bytes per log block, fixed at creation
  uint32_t crc;         // CRC32C of the fields above
  uint32_t pad;
};
static_assert(sizeof(DirectoryHeader) == 64);

// One of the two reclamation descriptors; the valid one with the higher seq is current.
// Thread-log records of epochs <= horizon are folded into the compacted log K (or dropped) and
// are never applied; K's records are.
struct alignas(64) Descriptor {
  uint64_t seq;        // reclamation cycle number (0: never written)
  uint64_t horizon;    // epoch horizon of the cycle
  uint64_t k_head;     // pool offset of K's first block, 0 = K is empty
  uint64_t max_stamp;  // every stamp issued before the cycle is below this
  uint32_t crc;        // CRC32C of the fields above
  uint32_t pad;
};
static_assert(sizeof(Descriptor) == 64);

struct DirectoryLayout {
  DirectoryHeader header;
  Descriptor desc[2];
  alignas(64) std::atomic<uint64_t> replayed_stamp;  // see RecoveryStep 5 in docs/txn.md
  alignas(256) std::atomic<uint64_t> heads[kMaxSlots];
};
static_assert(offsetof(DirectoryLayout, desc) == 64);
static_assert(offsetof(DirectoryLayout, replayed_stamp) == 192);
static_assert(offsetof(DirectoryLayout, heads) == 256);
static_assert(sizeof(DirectoryLayout) <= kTableOffset);

struct alignas(64) BlockHeader {
  uint64_t magic;  // kBlockMagic
  uint64_t gen;    // this incarnation: (open_count << 32) | per-run counter; never repeats
  uint32_t slot;   // owning log: thread slot, or kCompactSlot
  uint32_t crc;    // CRC32C of magic, gen, slot
};

struct alignas(64) BlockLink {
  uint64_t next;      // pool offset of the next block of the log
  uint64_t next_gen;  // that block's gen when it was linked
  uint64_t gen;       // this block's gen: a link left from an earlier incarnation is invalid
  uint32_t crc;       // CRC32C of the three fields above
  uint32_t pad;
};
static_assert(sizeof(BlockHeader) == 64 && sizeof(BlockLink) == 64);

enum class RecordKind : uint16_t {
  kCommit = 1,    // a committed transaction: new values, allocations, frees
  kSnapshot = 2,  // old values of cold words, written (and fenced) before their first write
  kCompact = 3,   // the compacted log: newest values folded by the reclaimer
};

struct RecordHeader {
  uint16_t words;  // size of the record in 8-byte words, header included
  uint16_t kind;   // RecordKind
  uint32_t crc;    // CRC32C of the whole record with this field zero
  uint64_t stamp;  // commit-order stamp (kCompact: the cycle's seq)
  uint64_t epoch;  // epoch the record was written in (kCompact: the cycle's horizon)
  uint64_t gen;    // gen of the block holding the record
};
static_assert(sizeof(RecordHeader) == 32 && std::is_trivially_copyable_v<RecordHeader>);

// kLogical: an operation of a layer above (a named index's put or remove, say), opaque to the
// engine: the head's word field holds the layer's tag, its count the payload words that follow
// (the first the payload's length in bytes, then the bytes, zero-padded to a word). Replayed
// through Options::replay_logical when its transaction's epoch is rolled back.
enum class EntryType : uint64_t { kData = 0, kAlloc = 1, kFree = 2, kLogical = 3 };
inline constexpr uint64_t kMaxEntryWords = (uint64_t{1} << 16) - 1;
inline constexpr uint64_t kWordIndexMask = (uint64_t{1} << 46) - 1;

// Padding inside a record: a zero entry head stands for itself alone (no values follow). A data
// entry of zero words is otherwise invalid, so no real entry has this head.
inline constexpr uint64_t kPadWord = 0;
// The pad that makes a record of `bytes` at `at` end at a cache line boundary (0 to 56 bytes; a
// multiple of 8 where at and bytes are).
inline constexpr size_t LinePad(uintptr_t at, size_t bytes) { return (0 - (at + bytes)) & 63; }
inline constexpr size_t kMaxLinePad = 56;

inline constexpr uint64_t MakeEntryHead(EntryType t, uint64_t nwords, uint64_t word) {
  return static_cast<uint64_t>(t) << 62 | nwords << 46 | word;
}
inline constexpr EntryType EntryTypeOf(uint64_t head) { return static_cast<EntryType>(head >> 62); }
inline constexpr uint64_t EntryWords(uint64_t head) { return (head >> 46) & kMaxEntryWords; }
inline constexpr uint64_t EntryWord(uint64_t head) { return head & kWordIndexMask; }

}  // namespace pmrt::txn_internal

#endif  // PMRT_TXN_INTERNAL_LOG_LAYOUT_H_
