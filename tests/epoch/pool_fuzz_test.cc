// Fuzzing of everything Pool::Open reads: byte flips in the header and state, flips anywhere,
// truncations and extensions, and header/state fields overwritten with boundary values (with
// the checksum recomputed, so the checks behind it are reached). For every case Open must
// either succeed (then Close succeeds) or fail without changing a byte of the file, and the
// in-memory open of the same bytes must give the same status code.
//
// PMRT_FUZZ_CASES (default 10000) and PMRT_FUZZ_SEED (default 1) override the run; a failure
// prints the case number and its mutations, and PMRT_FUZZ_SEED + the case number replay it.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cctype>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/crc32c.h"
#include "epoch/pool.h"
#include "gtest/gtest.h"
#include "tests/util/test_util.h"

namespace pmrt {
namespace {

constexpr size_t kSize = Pool::kMinPoolSize;
constexpr char kLayout[] = "fuzz";

using Rng = testing::SplitMix;

struct Field {
  const char* name;
  size_t offset;
  size_t size;
};

// Every header field, and the three state words.
const std::vector<Field>& Fields() {
  static const std::vector<Field> fields = {
      {"magic", offsetof(PoolHeader, magic), 8},
      {"major", offsetof(PoolHeader, major), 2},
      {"minor", offsetof(PoolHeader, minor), 2},
      {"header_size", offsetof(PoolHeader, header_size), 4},
      {"pool_size", offsetof(PoolHeader, pool_size), 8},
      {"create_time_ns", offsetof(PoolHeader, create_time_ns), 8},
      {"uuid", offsetof(PoolHeader, uuid), 8},
      {"layout", offsetof(PoolHeader, layout), 8},
      {"root.offset", offsetof(PoolHeader, root), 8},
      {"root.size", offsetof(PoolHeader, root) + 8, 8},
      {"epoch.offset", offsetof(PoolHeader, epoch), 8},
      {"epoch.size", offsetof(PoolHeader, epoch) + 8, 8},
      {"log.offset", offsetof(PoolHeader, log), 8},
      {"log.size", offsetof(PoolHeader, log) + 8, 8},
      {"heap.offset", offsetof(PoolHeader, heap), 8},
      {"heap.size", offsetof(PoolHeader, heap) + 8, 8},
      {"reserved", offsetof(PoolHeader, reserved), 8},
      {"checksum", offsetof(PoolHeader, checksum), 4},
      {"checksum_pad", offsetof(PoolHeader, checksum_pad), 4},
      {"state.clean_shutdown", kPoolHeaderSize + offsetof(PoolState, clean_shutdown), 8},
      {"state.open_count", kPoolHeaderSize + offsetof(PoolState, open_count), 8},
      {"state.root_type_size", kPoolHeaderSize + offsetof(PoolState, root_type_size), 8},
      {"state.grown_size", kPoolHeaderSize + offsetof(PoolState, grown_size), 8},
  };
  return fields;
}

// One test case: the file's bytes after the mutations, and what was done (for messages).
struct Case {
  std::vector<uint8_t> bytes;
  std::string what;
  bool checksum_fixed = false;
  // Some header byte changed, nothing else did, and the checksum was not recomputed: Open
  // must refuse (set by MakeCase from the bytes themselves).
  bool header_only_no_fix = false;
};

void Write(Case& c, size_t off, const void* data, size_t len) {
  if (off + len > c.bytes.size()) c.bytes.resize(off + len, 0);
  std::memcpy(c.bytes.data() + off, data, len);
}

void FlipBytes(Case& c, Rng& rng, size_t range, int max_flips) {
  if (c.bytes.empty()) return;
  int n = 1 + static_cast<int>(rng.Below(static_cast<uint64_t>(max_flips)));
  for (int i = 0; i < n; ++i) {
    const size_t off = rng.Below(std::min(range, c.bytes.size()));
    uint8_t b = c.bytes[off] ^ static_cast<uint8_t>(1 + rng.Below(255));  // a real change
    Write(c, off, &b, 1);
    absl::StrAppend(&c.what, absl::StrFormat(" flip@%d", off));
  }
}

uint64_t InterestingValue(Rng& rng, uint64_t current) {
  const uint64_t values[] = {0,
                             1,
                             2,
                             7,
                             4095,
                             4096,
                             4097,
                             8192,
                             kSize / 2,
                             kSize - 4096,
                             kSize,
                             kSize + 4096,
                             UINT64_MAX,
                             UINT64_MAX & ~uint64_t{4095},
                             uint64_t{1} << 63,
                             current + 1,
                             current - 1,
                             current + 4096,
                             current - 4096,
                             current * 2,
                             rng.Next(),
                             rng.Below(kSize / 4096 + 2) * 4096};
  return values[rng.Below(sizeof(values) / sizeof(values[0]))];
}

void FixChecksum(Case& c) {
  if (c.bytes.size() < kPoolHeaderSize) return;
  const uint32_t crc = Crc32c(c.bytes.data(), offsetof(PoolHeader, checksum));
  Write(c, offsetof(PoolHeader, checksum), &crc, 4);
  c.checksum_fixed = true;
  absl::StrAppend(&c.what, " fix-checksum");
}

void OverwriteField(Case& c, Rng& rng) {
  const Field& f = Fields()[rng.Below(Fields().size())];
  if (f.offset + f.size > c.bytes.size()) return;
  if (std::string_view(f.name) == "layout" && rng.Chance(50)) {
    // A whole new layout name: a wrong one, or one filling the field with no terminator.
    char name[kLayoutNameMax + 1] = {};
    const size_t len = rng.Below(kLayoutNameMax + 2);
    for (size_t i = 0; i < len; ++i) name[i] = static_cast<char>('a' + rng.Below(26));
    Write(c, offsetof(PoolHeader, layout), name, sizeof(name));
    absl::StrAppend(&c.what, absl::StrFormat(" layout=%d-chars", len));
    return;
  }
  uint64_t current = 0;
  std::memcpy(&current, c.bytes.data() + f.offset, f.size);
  const uint64_t v = InterestingValue(rng, current);
  Write(c, f.offset, &v, f.size);
  absl::StrAppend(&c.what, absl::StrFormat(" %s=%d", f.name, v));
}

void Truncate(Case& c, Rng& rng) {
  const uint64_t sizes[] = {
      0,    1,         100,          4095,      4096,      4097,         8191,
      8192, kSize / 2, kSize - 4096, kSize - 1, kSize + 1, kSize + 4096, rng.Below(kSize)};
  const size_t n = sizes[rng.Below(sizeof(sizes) / sizeof(sizes[0]))];
  c.bytes.resize(n, 0);
  absl::StrAppend(&c.what, absl::StrFormat(" truncate=%d", n));
}

Case MakeCase(const std::vector<uint8_t>& pristine, Rng& rng) {
  Case c{pristine, "", false, false};
  switch (rng.Below(7)) {
    case 0:
      FlipBytes(c, rng, kPoolHeaderSize, 4);
      break;  // header only, no fix: must fail
    case 1:
      FlipBytes(c, rng, kPoolHeaderSize + kPoolStateSize, 8);
      break;
    case 2:
      FlipBytes(c, rng, c.bytes.size(), 8);
      break;
    case 3:
      Truncate(c, rng);
      break;
    case 4:
      OverwriteField(c, rng);
      if (rng.Chance(80)) FixChecksum(c);
      break;
    case 5:
      OverwriteField(c, rng);
      OverwriteField(c, rng);
      FixChecksum(c);
      break;
    default:
      OverwriteField(c, rng);
      FixChecksum(c);
      FlipBytes(c, rng, c.bytes.size(), 2);
      if (rng.Chance(30)) Truncate(c, rng);
      break;
  }
  if (!c.checksum_fixed && c.bytes.size() == pristine.size()) {
    const bool header_changed = std::memcmp(c.bytes.data(), pristine.data(), kPoolHeaderSize) != 0;
    const bool rest_same =
        std::memcmp(c.bytes.data() + kPoolHeaderSize, pristine.data() + kPoolHeaderSize,
                    pristine.size() - kPoolHeaderSize) == 0;
    c.header_only_no_fix = header_changed && rest_same;
  }
  return c;
}

// Puts exactly `bytes` in the file behind `fd` (pwrite only the ranges that differ).
void SetFile(int fd, const std::vector<uint8_t>& bytes, std::vector<uint8_t>& current) {
  if (current.size() != bytes.size()) {
    ASSERT_EQ(ftruncate(fd, static_cast<off_t>(bytes.size())), 0);
    current.resize(bytes.size(), 0);
  }
  constexpr size_t kChunk = 4096;
  for (size_t off = 0; off < bytes.size(); off += kChunk) {
    const size_t len = std::min(kChunk, bytes.size() - off);
    if (std::memcmp(current.data() + off, bytes.data() + off, len) == 0) continue;
    ASSERT_EQ(pwrite(fd, bytes.data() + off, len, static_cast<off_t>(off)),
              static_cast<ssize_t>(len));
    std::memcpy(current.data() + off, bytes.data() + off, len);
  }
}

// An error message with the path and every number removed: the check that refused the case.
std::string Reason(const absl::Status& st, const std::string& path) {
  std::string m(st.message());
  for (size_t at; (at = m.find(path)) != std::string::npos;) m.erase(at, path.size());
  std::string out;
  for (size_t i = 0; i < m.size(); ++i) {
    const bool hex = m[i] == '0' && i + 1 < m.size() && m[i + 1] == 'x';
    if (hex) {
      out += '#';
      for (i += 2; i < m.size() && std::isxdigit(static_cast<unsigned char>(m[i])); ++i) {
      }
      --i;
    } else if (std::isdigit(static_cast<unsigned char>(m[i]))) {
      if (out.empty() || out.back() != '#') out += '#';
    } else if (m[i] == '\'') {
      // layout names differ per case: keep the quotes, drop the name
      size_t end = m.find('\'', i + 1);
      out += "'*'";
      i = end == std::string::npos ? m.size() : end;
    } else {
      out += m[i];
    }
  }
  return out;
}

std::vector<uint8_t> ReadAll(int fd) {
  struct stat st;
  if (fstat(fd, &st) != 0) return {};
  std::vector<uint8_t> out(static_cast<size_t>(st.st_size));
  size_t got = 0;
  while (got < out.size()) {
    ssize_t n = pread(fd, out.data() + got, out.size() - got, static_cast<off_t>(got));
    if (n <= 0) break;
    got += static_cast<size_t>(n);
  }
  out.resize(got);
  return out;
}

TEST(PoolFuzzTest, OpenNeverCrashesAndNeverWritesABadPool) {
  const uint64_t cases = testing::EnvOr("PMRT_FUZZ_CASES", 10000);
  const uint64_t seed = testing::EnvOr("PMRT_FUZZ_SEED", 1);
  testing::TempDir dir;
  const std::string path = dir.File("fuzz.pool");
  {
    auto pool = Pool::Create(path, kSize, kLayout);
    ASSERT_OK(pool);
    struct Root {
      uint64_t x[4];
    };
    auto root = (*pool)->root<Root>();
    ASSERT_OK(root);
    (*root)->x[0] = 0x1234;
  }
  const int fd = open(path.c_str(), O_RDWR | O_CLOEXEC);  // not locked: Open's flock still works
  ASSERT_GE(fd, 0);
  const std::vector<uint8_t> pristine = ReadAll(fd);
  ASSERT_EQ(pristine.size(), kSize);
  std::vector<uint8_t> file_now = pristine;  // what the file holds, as far as we wrote it
  void* mem = std::aligned_alloc(4096, 2 * kSize);
  ASSERT_NE(mem, nullptr);

  std::map<absl::StatusCode, uint64_t> outcomes;
  std::map<std::string, uint64_t> reasons;  // error messages without the path and numbers
  uint64_t header_only_cases = 0;
  PoolOptions options;
  options.backend = BackendKind::kEadr;  // the fuzzed part is validation, not msync speed
  const auto start = std::chrono::steady_clock::now();
  for (uint64_t i = 0; i < cases; ++i) {
    Rng rng(seed * 1000003 + i);
    const Case c = MakeCase(pristine, rng);
    SCOPED_TRACE(absl::StrFormat("case %d (PMRT_FUZZ_SEED=%d):%s", i, seed, c.what));
    SetFile(fd, c.bytes, file_now);
    if (::testing::Test::HasFatalFailure()) break;

    auto pool = Pool::Open(path, kLayout, options);
    const absl::StatusCode code = pool.status().code();
    ++outcomes[code];
    if (pool.ok()) {
      const Pool& p = **pool;
      for (PoolRegion r :
           {PoolRegion::kRoot, PoolRegion::kEpoch, PoolRegion::kLog, PoolRegion::kHeap}) {
        ASSERT_TRUE(p.contains(p.region_base(r), p.region(r).size));
      }
      ASSERT_OK((*pool)->Close());
      file_now = ReadAll(fd);  // Open/Close wrote the state page
    } else {
      EXPECT_NE(pool.status().message().find(path), std::string::npos) << pool.status();
      ++reasons[Reason(pool.status(), path)];
      ASSERT_TRUE(ReadAll(fd) == c.bytes) << "failed Open changed the file: " << pool.status();
    }
    if (c.header_only_no_fix) {
      ++header_only_cases;
      EXPECT_FALSE(pool.ok()) << "a header with changed bytes and a stale checksum opened";
    }

    // The same bytes in memory: the same verdict from the shared validation.
    std::memcpy(mem, c.bytes.data(), c.bytes.size());
    auto in_mem = Pool::OpenInMemory(mem, c.bytes.size(), kLayout, options, path);
    EXPECT_EQ(in_mem.status().code(), code) << in_mem.status() << " vs " << pool.status();
    if (::testing::Test::HasFailure()) break;
  }
  const double secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::free(mem);
  close(fd);

  std::printf("%lu cases in %.2f s (seed %lu); outcomes:", cases, secs, seed);
  for (const auto& [code, n] : outcomes) {
    std::printf(" %s=%lu", absl::StatusCodeToString(code).c_str(), n);
  }
  std::printf("; %lu header-only cases\n", header_only_cases);
  for (const auto& [reason, n] : reasons) std::printf("  %6lu  %s\n", n, reason.c_str());
  // The mutations reached every kind of verdict, not just the magic or checksum checks.
  if (cases >= 1000) {
    EXPECT_GT(outcomes[absl::StatusCode::kOk], cases / 20);
    EXPECT_GT(outcomes[absl::StatusCode::kDataLoss], cases / 5);
    EXPECT_GT(outcomes[absl::StatusCode::kInvalidArgument], 0u);
    EXPECT_GT(outcomes[absl::StatusCode::kFailedPrecondition], 0u);
    EXPECT_GT(header_only_cases, cases / 20);
    // Every validation step was reached by some case.
    for (const char* check : {"empty file", "truncated", "bad magic", "newer than", "checksum at",
                              "checksum_pad", "header_size", "layout name", "pool layout is",
                              "grown_size", "region", "clean_shutdown", "root_type_size"}) {
      bool seen = false;
      for (const auto& [reason, n] : reasons) seen |= reason.find(check) != std::string::npos;
      EXPECT_TRUE(seen) << "no case reached the '" << check << "' check";
    }
  }
}

}  // namespace
}  // namespace pmrt
