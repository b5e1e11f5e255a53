// On-media layout of the persistent heap (the pool's heap region). docs/alloc.md has the long
// form.
//
//   heap region offset 0      HeapHeader (one line; magic, geometry, crc)
//   + kMetaOffset             chunk metadata, 23 LoggedLines per chunk (metadata apart from data):
//       version 2:  LoggedLine header[chunk_count], then LoggedLine bits[chunk_count][22]
//       version 1:  ChunkMeta[chunk_count] = {header, bits[22]} interleaved
//   + data_offset             chunk data: chunk_count x 64 KiB, each 64 KiB aligned in the pool
//
// Per chunk: one header line (its state word) and the allocation bitmap, 22 lines of 192 bits
// (bit i = block i allocated). Opening reads every chunk's header line: contiguous in version 2
// (one 64-byte line per 64 KiB chunk: 1/1024 of the heap), one page per ~3 chunks in version 1.
// Every LoggedLine carries its own undo copy and epoch tag (in-cache-line logging), so allocation
// and free never flush or fence: after a crash, a line whose tag names a failed epoch is restored
// from its undo copy.
//
// An all-zero heap region (apart from the header) is a valid empty heap: every chunk free.
//
// Growth (Pool::Grow) adds a segment after the last chunk: chunks keep one numbering and one
// data stride (chunk c's data at data_offset + c x 64 KiB, whatever its segment), and a grown
// segment's first chunks hold its own metadata instead of data:
//
//   segment start (chunk `first`'s data offset)
//   + 0                     SegmentHeader (one line)
//   + 64                    LoggedLine header[chunk_count]
//   + 64 + 64 x count       LoggedLine bits[chunk_count][22]
//   chunks first .. first + meta_chunks - 1: this metadata (never allocated; their own header
//   lines stay zero); the rest: data
//
// Segment 0 is the one HeapHeader describes. A segment follows the last one wherever the pool
// (its size after the last growth) has room for two more chunks; a growth always fills the
// room it adds but for less than a chunk, and Format leaves less than two, so "room for two
// chunks" and "a growth put a segment here" are the same.
#ifndef PMRT_ALLOC_INTERNAL_HEAP_LAYOUT_H_
#define PMRT_ALLOC_INTERNAL_HEAP_LAYOUT_H_

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace pmrt::alloc_internal {

inline constexpr uint64_t kHeapMagic = 0x5041454854524D50ull;  // "PMRTHEAP"
// Version 2 keeps every chunk's header line together, then every bitmap (Load reads one
// contiguous array); version 1 interleaves them as ChunkMeta records. Both are read.
inline constexpr uint32_t kHeapVersion = 2;
inline constexpr uint32_t kFirstSplitMetaVersion = 2;
inline constexpr size_t kChunkSize = 64 * 1024;
inline constexpr size_t kChunkShift = 16;
inline constexpr size_t kMinBlock = 16;
inline constexpr size_t kMaxBlocksPerChunk = kChunkSize / kMinBlock;  // 4096
inline constexpr size_t kWordsPerLine = 3;
inline constexpr size_t kBitsPerLine = kWordsPerLine * 64;  // 192
inline constexpr size_t kBitmapLines = (kMaxBlocksPerChunk + kBitsPerLine - 1) / kBitsPerLine;
inline constexpr size_t kLiveWords = kMaxBlocksPerChunk / 64;  // 64 words of block bits

// A cache line that logs itself: three data words, their undo copies, and a tag (the epoch of
// the undo copy). Protocol (alloc/internal/logged_line.h): if the tag's epoch is a failed epoch
// of an earlier run, restore words from undo; on the first modification in epoch e copy words
// to undo, then store tag e; then modify words. All in one line, so PCSO persists the stores
// in program order and no flush or fence is needed.
struct alignas(64) LoggedLine {
  std::atomic<uint64_t> word[kWordsPerLine];
  std::atomic<uint64_t> undo[kWordsPerLine];
  std::atomic<uint64_t> tag;  // epoch of the undo copy; 0 = never written
  uint64_t reserved;
};
static_assert(sizeof(LoggedLine) == 64);

// Chunk header word 0: kind in bits 0..7, size class in 8..15, run length (chunks) in 16..47.
enum class ChunkKind : uint8_t { kFree = 0, kSmall = 1, kExtent = 2 };
inline constexpr uint64_t MakeState(ChunkKind kind, uint32_t size_class, uint32_t run) {
  return static_cast<uint64_t>(kind) | uint64_t{size_class} << 8 | uint64_t{run} << 16;
}
inline constexpr ChunkKind StateKind(uint64_t s) { return static_cast<ChunkKind>(s & 0xFF); }
inline constexpr uint32_t StateClass(uint64_t s) { return static_cast<uint32_t>((s >> 8) & 0xFF); }
inline constexpr uint32_t StateRun(uint64_t s) { return static_cast<uint32_t>(s >> 16); }

struct ChunkMeta {
  LoggedLine header;              // word[0] = state
  LoggedLine bits[kBitmapLines];  // allocation bitmap of a kSmall chunk
};
static_assert(sizeof(ChunkMeta) == 64 * 23);

struct alignas(64) HeapHeader {
  uint64_t magic;        // kHeapMagic once initialized; 0 in a fresh pool
  uint32_t version;      // kHeapVersion
  uint32_t chunk_size;   // kChunkSize
  uint64_t chunk_count;  // chunks in the heap
  uint64_t data_offset;  // offset of chunk 0's data from the heap region start
  uint32_t crc;          // CRC32C of the fields above
  uint32_t pad;
};
static_assert(sizeof(HeapHeader) == 64);
inline constexpr size_t kMetaOffset = 64;

inline constexpr uint64_t kSegmentMagic = 0x47455348544D5250ull;  // "PMRTHSEG"
struct alignas(64) SegmentHeader {
  uint64_t magic;        // kSegmentMagic
  uint64_t first_chunk;  // number of the segment's first chunk
  uint64_t chunk_count;  // chunks in the segment, its metadata chunks included
  uint64_t meta_chunks;  // MetaChunksFor(chunk_count)
  uint32_t crc;          // CRC32C of the fields above
  uint32_t pad;
  uint64_t reserved[3];
};
static_assert(sizeof(SegmentHeader) == 64);

// Chunks a grown segment of `count` chunks needs for its header and metadata lines.
inline constexpr uint64_t MetaChunksFor(uint64_t count) {
  return (sizeof(SegmentHeader) + count * sizeof(ChunkMeta) + kChunkSize - 1) / kChunkSize;
}

}  // namespace pmrt::alloc_internal

#endif  // PMRT_ALLOC_INTERNAL_HEAP_LAYOUT_H_
