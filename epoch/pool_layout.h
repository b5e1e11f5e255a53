// On-media layout of a pmrt pool's first two pages. docs/format.md has the full description.
//
//   offset 0      PoolHeader   (4 KiB; immutable after Create; CRC32C over all fields before it)
//   offset 4096   PoolState    (4 KiB; mutable words, each alone in its cache line)
//   root.offset   root object region            (header.root)
//   epoch.offset  epoch layer state              (header.epoch)
//   log.offset    external undo log areas        (header.log)
//   heap.offset   allocator heap, to the end     (header.heap)
//
// Every multi-byte field is little-endian (x86-64 is the only supported target). Offsets are
// pool-relative; no raw pointer is ever stored.
#ifndef PMRT_EPOCH_POOL_LAYOUT_H_
#define PMRT_EPOCH_POOL_LAYOUT_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <type_traits>

namespace pmrt {

inline constexpr char kPoolMagic[8] = {'P', 'M', 'R', 'T', 'P', 'O', 'O', 'L'};
inline constexpr uint16_t kFormatMajor = 1;  // incompatible changes
inline constexpr uint16_t kFormatMinor = 1;  // compatible additions (1: growth)
inline constexpr size_t kPoolHeaderSize = 4096;
inline constexpr size_t kPoolStateSize = 4096;
inline constexpr size_t kLayoutNameMax = 63;  // bytes, plus a terminating NUL

// A region of the pool: [offset, offset + size).
struct RegionDesc {
  uint64_t offset;
  uint64_t size;
};
static_assert(sizeof(RegionDesc) == 16);

// +---------+-------+-------+-------------+-----------+-------------+-------------+
// | magic 8 | major | minor | header_size | pool_size | create_time | uuid 16     |
// +---------+-------+-------+-------------+-----------+-------------+-------------+
// | layout[64] | root | epoch | log | heap (RegionDesc each) | reserved ... | crc32c |
// +------------+------+-------+-----+------------------------+--------------+--------+
struct PoolHeader {
  char magic[8];                    // kPoolMagic
  uint16_t major;                   // kFormatMajor at creation; Open refuses a newer major
  uint16_t minor;                   // kFormatMinor at creation
  uint32_t header_size;             // kPoolHeaderSize
  uint64_t pool_size;               // bytes; the file is at least this long
  uint64_t create_time_ns;          // CLOCK_REALTIME at Create
  uint8_t uuid[16];                 // random, identifies the pool
  char layout[kLayoutNameMax + 1];  // NUL-terminated, NUL-padded layout name
  RegionDesc root;                  // the typed root object
  RegionDesc epoch;                 // epoch clock and failed-epoch set (epoch/)
  RegionDesc log;                   // external undo log areas (epoch/)
  RegionDesc heap;                  // persistent heap (alloc/), to the end of the pool
  uint8_t reserved[kPoolHeaderSize - 8 - 2 - 2 - 4 - 8 - 8 - 16 - 64 - 4 * 16 - 8];
  uint32_t checksum;      // CRC32C of every byte before this field
  uint32_t checksum_pad;  // zero
};
static_assert(sizeof(PoolHeader) == kPoolHeaderSize);
static_assert(std::is_trivially_copyable_v<PoolHeader>);
static_assert(offsetof(PoolHeader, checksum) == kPoolHeaderSize - 8);

// Mutable pool state. Each word sits alone in its cache line so that one can be persisted
// without dragging a neighbour's half-done update to media.
struct alignas(64) PoolStateLine {
  std::atomic<uint64_t> value;
  uint8_t pad[56];
};
static_assert(sizeof(PoolStateLine) == 64);

struct PoolState {
  // 1 after a clean Close(); set to 0 (durably) by Open before anything else is written.
  PoolStateLine clean_shutdown;
  // Number of opens, persisted at each open (lets tests and tools tell runs apart).
  PoolStateLine open_count;
  // sizeof(T) of the root object type bound by the first root<T>() call; 0 = never bound.
  PoolStateLine root_type_size;
  // Pool offset of the transaction layer's directory (txn/, docs/txn.md); 0 = none yet.
  PoolStateLine txn_directory;
  // The pool's size after its last growth (Pool::Grow, format 1.1); 0 = never grown, the
  // header's pool_size. Written once per growth, after the grown space is durable: the commit.
  PoolStateLine grown_size;
  PoolStateLine reserved[kPoolStateSize / 64 - 5];
};
static_assert(sizeof(PoolState) == kPoolStateSize);
static_assert(std::atomic<uint64_t>::is_always_lock_free);

}  // namespace pmrt

#endif  // PMRT_EPOCH_POOL_LAYOUT_H_
