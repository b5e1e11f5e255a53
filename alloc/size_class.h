// Size classes of the persistent heap: 16 B to 32 KiB, blocks carved from 64 KiB chunks.
//
//   16..128 step 16, then four classes per doubling (160, 192, 224, 256, 320, ...) up to 32 KiB.
//   Worst-case internal waste is 25% above 128 B. Anything larger, or aligned beyond 4 KiB, is
//   an extent: a run of whole chunks.
#ifndef PMRT_ALLOC_SIZE_CLASS_H_
#define PMRT_ALLOC_SIZE_CLASS_H_

#include <array>
#include <cstddef>
#include <cstdint>

namespace pmrt::alloc {

inline constexpr size_t kMaxSmallSize = 32 * 1024;
inline constexpr size_t kMaxSmallAlign = 4096;

struct SizeClasses {
  static constexpr int kCount = 8 + 4 * 8;  // 40
  static constexpr std::array<uint32_t, kCount> kSizes = [] {
    std::array<uint32_t, kCount> s{};
    int n = 0;
    for (uint32_t v = 16; v <= 128; v += 16) s[n++] = v;
    for (uint32_t base = 128; base < kMaxSmallSize; base *= 2)
      for (uint32_t q = 1; q <= 4; ++q) s[n++] = base + base / 4 * q;
    return s;
  }();
  static_assert(kSizes[kCount - 1] == kMaxSmallSize);
  static constexpr std::array<uint64_t, kCount> kReciprocals = [] {
    std::array<uint64_t, kCount> r{};
    for (int i = 0; i < kCount; ++i) r[i] = ((uint64_t{1} << 32) + kSizes[i] - 1) / kSizes[i];
    return r;
  }();
  // Class of sizes up to 1024 bytes by (size + 15) / 16.
  static constexpr std::array<int8_t, 65> kSmallTable = [] {
    std::array<int8_t, 65> t{};
    for (size_t q = 0; q <= 64; ++q) {
      int c = 0;
      while (kSizes[c] < q * 16) ++c;
      t[q] = static_cast<int8_t>(c);
    }
    return t;
  }();

  // The smallest class holding `size` bytes whose block size is a multiple of `align`
  // (a power of two <= kMaxSmallAlign); -1 when none (use an extent).
  static int For(size_t size, size_t align) {
    if (size == 0) size = 1;
    if (size > kMaxSmallSize || align > kMaxSmallAlign) return -1;
    int c = size <= 1024 ? kSmallTable[(size + 15) / 16] : FirstAbove128(size);
    if (align <= 16) return c;
    for (; c < kCount; ++c)
      if (kSizes[c] % align == 0) return c;
    return -1;
  }
  // Block index of byte `rel` of a chunk of class c: rel / Size(c) without a division. Exact
  // for rel < 2^16: the multiplier's error stays below 2^-16 < 1 / Size(c).
  static uint32_t BlockOf(uint32_t rel, int c) {
    return static_cast<uint32_t>((uint64_t{rel} * kReciprocals[c]) >> 32);
  }
  static uint32_t Size(int c) { return kSizes[c]; }
  // A table, not a division: the free path reads it on every call (Locate's bound check and
  // FreeUnshared's spill check).
  static constexpr std::array<uint32_t, kCount> kBlocksPerChunk = [] {
    std::array<uint32_t, kCount> b{};
    for (int i = 0; i < kCount; ++i) b[i] = 65536 / kSizes[i];
    return b;
  }();
  static uint32_t BlocksPerChunk(int c) { return kBlocksPerChunk[c]; }

 private:
  static int FirstAbove128(size_t size) {
    int c = 8;
    while (kSizes[c] < size) ++c;
    return c;
  }
};

}  // namespace pmrt::alloc

#endif  // PMRT_ALLOC_SIZE_CLASS_H_
