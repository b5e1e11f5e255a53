#include "base/crc32c.h"

#include <cstdint>
#include <cstring>
#include <numeric>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace pmrt {
namespace {

// Bit-at-a-time CRC32C straight from the definition (reflected polynomial 0x82F63B78): an
// independent reference for whichever fast path (SSE4.2 or table) Crc32c takes on this CPU.
uint32_t ReferenceCrc32c(const uint8_t* p, size_t n) {
  uint32_t c = 0xFFFFFFFFu;
  for (size_t i = 0; i < n; ++i) {
    c ^= p[i];
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
  }
  return ~c;
}

TEST(Crc32cTest, CheckValue) {
  const char* s = "123456789";
  EXPECT_EQ(Crc32c(s, std::strlen(s)), 0xE3069283u);
}

// RFC 3720 (iSCSI), appendix B.4.
TEST(Crc32cTest, Rfc3720Vectors) {
  std::vector<uint8_t> buf(32, 0);
  EXPECT_EQ(Crc32c(buf.data(), buf.size()), 0x8A9136AAu);
  std::fill(buf.begin(), buf.end(), 0xFF);
  EXPECT_EQ(Crc32c(buf.data(), buf.size()), 0x62A8AB43u);
  std::iota(buf.begin(), buf.end(), 0);
  EXPECT_EQ(Crc32c(buf.data(), buf.size()), 0x46DD794Eu);
  for (int i = 0; i < 32; ++i) buf[i] = static_cast<uint8_t>(31 - i);
  EXPECT_EQ(Crc32c(buf.data(), buf.size()), 0x113FDB5Cu);
}

TEST(Crc32cTest, EmptyInputIsZeroAndKeepsTheRunningValue) {
  EXPECT_EQ(Crc32c(nullptr, 0), 0u);
  EXPECT_EQ(Crc32c(nullptr, 0, 0xE3069283u), 0xE3069283u);
}

// Every length 0..300 at every start alignment 0..7, against the bit-at-a-time reference:
// covers the 8-byte loop, the byte tail and unaligned starts.
TEST(Crc32cTest, MatchesReferenceAtAllLengthsAndAlignments) {
  std::vector<uint8_t> buf(320);
  uint32_t x = 12345;
  for (auto& b : buf) b = static_cast<uint8_t>((x = x * 1103515245u + 12345u) >> 24);
  for (size_t align = 0; align < 8; ++align) {
    for (size_t len = 0; len <= 300; ++len) {
      ASSERT_EQ(Crc32c(buf.data() + align, len), ReferenceCrc32c(buf.data() + align, len))
          << "align " << align << " len " << len;
    }
  }
}

TEST(Crc32cTest, IncrementalEqualsOneShot) {
  std::string data;
  for (int i = 0; i < 1000; ++i) data += static_cast<char>(i * 7 + 3);
  const uint32_t whole = Crc32c(data.data(), data.size());
  for (size_t split : {size_t{0}, size_t{1}, size_t{7}, size_t{8}, size_t{9}, size_t{500},
                       data.size() - 1, data.size()}) {
    uint32_t c = Crc32c(data.data(), split);
    c = Crc32c(data.data() + split, data.size() - split, c);
    EXPECT_EQ(c, whole) << "split at " << split;
  }
  // Three pieces, one of them empty.
  uint32_t c = Crc32c(data.data(), 100);
  c = Crc32c(data.data() + 100, 0, c);
  c = Crc32c(data.data() + 100, data.size() - 100, c);
  EXPECT_EQ(c, whole);
}

TEST(Crc32cTest, DetectsEverySingleBitFlip) {
  std::vector<uint8_t> buf(256);
  std::iota(buf.begin(), buf.end(), 0);
  const uint32_t good = Crc32c(buf.data(), buf.size());
  for (size_t bit = 0; bit < buf.size() * 8; ++bit) {
    buf[bit / 8] ^= static_cast<uint8_t>(1u << (bit % 8));
    ASSERT_NE(Crc32c(buf.data(), buf.size()), good) << "bit " << bit;
    buf[bit / 8] ^= static_cast<uint8_t>(1u << (bit % 8));
  }
}

}  // namespace
}  // namespace pmrt
