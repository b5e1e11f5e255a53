// CRC32C (Castagnoli), the checksum of every checksummed pmrt on-media structure.
// Uses the SSE4.2 crc32 instruction when the CPU has it, a table otherwise; both give the
// same result (tests/base/crc32c_test.cc checks the standard test vectors).
#ifndef PMRT_BASE_CRC32C_H_
#define PMRT_BASE_CRC32C_H_

#include <cstddef>
#include <cstdint>

namespace pmrt {

// Extends `crc` (0 for a fresh checksum) over [data, data + len).
uint32_t Crc32c(const void* data, size_t len, uint32_t crc = 0);

}  // namespace pmrt

#endif  // PMRT_BASE_CRC32C_H_
