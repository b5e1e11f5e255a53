// On-media layout of the epoch layer: the epoch area (header.epoch region) and the external undo
// log (header.log region). docs/format.md and docs/epoch.md describe them in full.
//
// Epoch area:
//   line 0   EpochAreaHeader {magic, version, crc}        written once, at first attach
//   line 1   completed        every epoch <= completed is durable or recorded failed
//   line 2   failed_count     number of valid entries in failed[]
//   line 3.. failed[]         inclusive ranges [lo, hi] of failed epochs, 4 per line
//
// External log: the log region is an array of 64 KiB blocks.
//   Version 2 areas (every pool created since): the first kLogDirectoryBlocks(n) blocks are the
//   block directory, one bit per block (bit b of word b / 64): set (durably, fenced with the
//   block's first entry) before a block holds an entry that recovery may need; cleared when the
//   block's epoch is complete. Recovery reads only the headers of blocks whose bit is set, so
//   opening does not read one page per block. Version 1 areas have no directory: every block is
//   a log block and recovery reads every header.
//   block line 0   LogBlockHeader {epoch, magic, crc}    the epoch the block's entries belong to
//   then entries, each starting on a line:
//                  LogEntryHeader {epoch, target, size, crc} + `size` bytes of the object
//   An entry is applied only if its crc (over header fields and data) is right and its epoch
//   equals the block's epoch and is a failed epoch. A block's first bad entry ends the block.
#ifndef PMRT_EPOCH_EPOCH_LAYOUT_H_
#define PMRT_EPOCH_EPOCH_LAYOUT_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <type_traits>

namespace pmrt::epoch {

inline constexpr uint64_t kEpochAreaMagic = 0x48434F5045544D50ull;  // "PMTEPOCH"
inline constexpr uint64_t kLogBlockMagic = 0x4B4C42474F4C4D50ull;   // "PMLOGBLK"
inline constexpr uint32_t kEpochAreaVersion = 2;  // 2: the log region has a block directory
inline constexpr uint32_t kEpochAreaFirstDirectoryVersion = 2;
inline constexpr size_t kMaxFailedRanges = 4000;  // fills a 64 KiB epoch area
inline constexpr size_t kLogBlockSize = 64 * 1024;

struct alignas(64) EpochAreaHeader {
  uint64_t magic;    // kEpochAreaMagic once initialized; 0 in a fresh pool
  uint32_t version;  // kEpochAreaVersion
  uint32_t crc;      // CRC32C of magic and version
};

struct FailedRange {
  uint64_t lo, hi;  // inclusive
};

struct EpochAreaLayout {
  EpochAreaHeader header;
  alignas(64) std::atomic<uint64_t> completed;
  alignas(64) std::atomic<uint64_t> failed_count;
  alignas(64) FailedRange failed[kMaxFailedRanges];
};
static_assert(offsetof(EpochAreaLayout, completed) == 64);
static_assert(offsetof(EpochAreaLayout, failed_count) == 128);
static_assert(offsetof(EpochAreaLayout, failed) == 192);
inline constexpr size_t kEpochAreaMinSize = sizeof(EpochAreaLayout);
static_assert(kEpochAreaMinSize <= 64 * 1024, "fits the default epoch area (PoolOptions)");

struct alignas(64) LogBlockHeader {
  std::atomic<uint64_t> epoch;  // 0: free
  uint64_t magic;               // kLogBlockMagic
  uint32_t crc;                 // CRC32C of epoch and magic
  uint32_t pad;
};
static_assert(sizeof(LogBlockHeader) == 64);

struct LogEntryHeader {
  uint64_t epoch;   // must equal the block's epoch
  uint64_t target;  // pool offset of the logged object
  uint32_t size;    // bytes of object data following this header
  uint32_t crc;     // CRC32C of epoch, target, size and the data
};
static_assert(sizeof(LogEntryHeader) == 24);
inline constexpr size_t kLogEntryAlign = 64;
// Blocks a directory needs for `blocks` log blocks (each directory block maps 524,288 blocks).
inline constexpr uint32_t kLogDirectoryBlocks(uint64_t blocks) {
  return static_cast<uint32_t>((blocks + kLogBlockSize * 8 - 1) / (kLogBlockSize * 8));
}
inline constexpr size_t kMaxLoggedObject =
    kLogBlockSize - sizeof(LogBlockHeader) - sizeof(LogEntryHeader);

}  // namespace pmrt::epoch

#endif  // PMRT_EPOCH_EPOCH_LAYOUT_H_
