// Tests of pmrt::Pool: create/open/close, the root object, validation of every bad input with
// the file left untouched, exclusivity, crash detection, relocation, in-memory pools, backend
// choice, and (at the end) the pool's persistence order under the crash simulator with its own
// mutation gate.
#include "epoch/pool.h"

#include <fcntl.h>
#include <grp.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <new>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/crc32c.h"
#include "epoch/pptr.h"
#include "gtest/gtest.h"
#include "testing/sim.h"
#include "tests/util/test_util.h"

namespace pmrt {
namespace {

using ::pmrt::testing::ListDir;
using ::pmrt::testing::ReadFile;
using ::pmrt::testing::ScopedEnv;
using ::pmrt::testing::StatusIs;
using ::pmrt::testing::TempDir;
using ::pmrt::testing::WriteFileAt;

constexpr char kLayout[] = "pool-test";
constexpr size_t kSize = Pool::kMinPoolSize;

// Checks code, that the message names `path`, and that it contains every one of `parts`.
void ExpectError(const absl::Status& st, absl::StatusCode code, const std::string& path,
                 const std::vector<std::string>& parts = {}) {
  EXPECT_EQ(st.code(), code) << st;
  EXPECT_NE(st.message().find(path), std::string::npos) << "message does not name the path: " << st;
  for (const auto& p : parts) {
    EXPECT_NE(st.message().find(p), std::string::npos) << "missing '" << p << "' in " << st;
  }
}

PoolHeader ReadHeader(const std::string& path) {
  PoolHeader h;
  auto content = ReadFile(path);
  EXPECT_TRUE(content.has_value() && content->size() >= sizeof(h));
  std::memcpy(&h, content->data(), sizeof(h));
  return h;
}

uint64_t ReadStateWord(const std::string& path, size_t line) {
  uint64_t v = 0;
  auto content = ReadFile(path);
  std::memcpy(&v, content->data() + kPoolHeaderSize + line * 64, sizeof(v));
  return v;
}

// Writes `h` over the file's header, with a correct checksum when `fix_checksum`.
void WriteHeader(const std::string& path, PoolHeader h, bool fix_checksum = true) {
  if (fix_checksum) h.checksum = Crc32c(&h, offsetof(PoolHeader, checksum));
  WriteFileAt(path, 0, std::string(reinterpret_cast<const char*>(&h), sizeof(h)));
}

void MakePool(const std::string& path, size_t size = kSize) {
  auto pool = Pool::Create(path, size, kLayout);
  ASSERT_OK(pool);
  ASSERT_OK((*pool)->Close());
}

// ---- create / open / close ------------------------------------------------------------------

TEST(PoolTest, CreateOpenCloseRoundTrip) {
  TempDir dir;
  const std::string path = dir.File("a.pool");
  ASSERT_EQ(Pool::Default(), nullptr);
  {
    auto pool = Pool::Create(path, kSize, kLayout);
    ASSERT_OK(pool);
    Pool& p = **pool;
    EXPECT_EQ(p.path(), path);
    EXPECT_EQ(p.size(), kSize);
    EXPECT_EQ(p.layout(), kLayout);
    EXPECT_TRUE(p.was_clean_shutdown());
    EXPECT_EQ(p.open_count(), 1u);
    EXPECT_EQ(p.header().major, kFormatMajor);
    EXPECT_EQ(p.header().minor, kFormatMinor);
    EXPECT_EQ(p.header().pool_size, kSize);
    // Regions in order: root at 8 KiB, 64 KiB epoch area, 256 KiB log (1/16 of 1 MiB is less),
    // then the heap to the end.
    EXPECT_EQ(p.region(PoolRegion::kRoot).offset, 8192u);
    EXPECT_EQ(p.region(PoolRegion::kRoot).size, 4096u);
    EXPECT_EQ(p.region(PoolRegion::kEpoch).offset, 12288u);
    EXPECT_EQ(p.region(PoolRegion::kEpoch).size, 65536u);
    EXPECT_EQ(p.region(PoolRegion::kLog).offset, 12288u + 65536u);
    EXPECT_EQ(p.region(PoolRegion::kLog).size, 262144u);
    const RegionDesc heap = p.region(PoolRegion::kHeap);
    EXPECT_EQ(heap.offset, 12288u + 65536u + 262144u);
    EXPECT_EQ(heap.offset + heap.size, kSize);
    EXPECT_EQ(p.region_base(PoolRegion::kHeap), p.base() + heap.offset);
    // While open, the file says "not cleanly shut down".
    EXPECT_EQ(ReadStateWord(path, 0), 0u);
    EXPECT_EQ(ReadStateWord(path, 1), 1u);
    EXPECT_OK(p.Close());
    EXPECT_OK(p.Close());  // idempotent
  }
  EXPECT_EQ(ReadStateWord(path, 0), 1u);
  // Only the pool: no temporary file left behind.
  EXPECT_EQ(ListDir(dir.path()), std::vector<std::string>{"a.pool"});
  EXPECT_EQ(ReadFile(path)->size(), kSize);

  auto again = Pool::Open(path, kLayout);
  ASSERT_OK(again);
  EXPECT_TRUE((*again)->was_clean_shutdown());
  EXPECT_EQ((*again)->open_count(), 2u);
  EXPECT_EQ((*again)->layout(), kLayout);
  EXPECT_EQ((*again)->size(), kSize);
}

// Bounds of an address or an offset read from media: unsigned, so an offset of 2^63 or more (one
// byte of a link changed) is outside, as is one that wraps below the base.
TEST(PoolTest, ContainsRefusesCraftedOffsets) {
  TempDir dir;
  auto pool = Pool::Create(dir.File("c.pool"), kSize, kLayout);
  ASSERT_OK(pool);
  const Pool& p = **pool;
  const uint8_t* base = p.base();
  EXPECT_TRUE(p.contains(base));
  EXPECT_TRUE(p.contains(base + kSize - 8, 8));
  EXPECT_FALSE(p.contains(base + kSize - 7, 8));
  EXPECT_FALSE(p.contains(base, kSize + 1));
  for (const uint64_t off : {uint64_t{1} << 63, (uint64_t{1} << 63) + 64, ~uint64_t{0} - 63,
                             uint64_t{0x8000000000001000}, uint64_t{kSize}}) {
    const auto* addr = reinterpret_cast<const uint8_t*>(reinterpret_cast<uintptr_t>(base) + off);
    EXPECT_FALSE(p.contains(addr, 8)) << off;
    EXPECT_FALSE(p.contains_offset(off, 8)) << off;
  }
  EXPECT_TRUE(p.contains_offset(0, kSize));
  EXPECT_TRUE(p.contains_offset(kSize - 8, 8));
  EXPECT_FALSE(p.contains_offset(kSize - 7, 8));
  EXPECT_FALSE(p.contains_offset(8, ~size_t{0}));
}

TEST(PoolTest, DestructorClosesCleanly) {
  TempDir dir;
  const std::string path = dir.File("d.pool");
  { ASSERT_OK(Pool::Create(path, kSize, kLayout)); }
  EXPECT_EQ(ReadStateWord(path, 0), 1u);
  auto pool = Pool::Open(path, kLayout);  // the lock was released too
  ASSERT_OK(pool);
  EXPECT_TRUE((*pool)->was_clean_shutdown());
}

// A pool closed while a transaction engine is still open on it (SetTxnEngineOpen) stays marked
// as crashed: the engine's log may hold the only durable copy of its hot words.
TEST(PoolTest, CloseUnderAnOpenTxnEngineLeavesThePoolUnclean) {
  TempDir dir;
  const std::string path = dir.File("e.pool");
  {
    auto pool = Pool::Create(path, kSize, kLayout);
    ASSERT_OK(pool);
    (*pool)->SetTxnEngineOpen(true);
    EXPECT_TRUE((*pool)->txn_engine_open());
    ASSERT_OK((*pool)->Close());
  }
  EXPECT_EQ(ReadStateWord(path, 0), 0u);
  {
    auto pool = Pool::Open(path, kLayout);
    ASSERT_OK(pool);
    EXPECT_FALSE((*pool)->was_clean_shutdown());
    (*pool)->AcknowledgeRecovery();
    (*pool)->SetTxnEngineOpen(true);
    (*pool)->SetTxnEngineOpen(false);  // the engine closed first: a clean close again
  }
  EXPECT_EQ(ReadStateWord(path, 0), 1u);
}

TEST(PoolTest, CreateRoundsSizeUpTo4KiB) {
  TempDir dir;
  const std::string path = dir.File("r.pool");
  auto pool = Pool::Create(path, kSize + 1, kLayout);
  ASSERT_OK(pool);
  EXPECT_EQ((*pool)->size(), kSize + 4096);
  EXPECT_EQ(ReadFile(path)->size(), kSize + 4096);
}

// A sparse pool's file takes disk space as it is written; the default allocates every block.
TEST(PoolTest, SparseCreateAllocatesOnlyWhatIsWritten) {
  TempDir dir;
  auto blocks = [](const std::string& p) {
    struct stat st;
    return stat(p.c_str(), &st) == 0 ? uint64_t(st.st_blocks) * 512 : ~uint64_t{0};
  };
  PoolOptions sparse;
  sparse.sparse = true;
  const size_t size = size_t{1} << 30;
  {
    auto pool = Pool::Create(dir.File("sparse.pool"), size, kLayout, sparse);
    ASSERT_OK(pool);
    EXPECT_EQ((*pool)->size(), size);
  }
  EXPECT_LT(blocks(dir.File("sparse.pool")), size / 64);
  auto reopened = Pool::Open(dir.File("sparse.pool"), kLayout);
  ASSERT_OK(reopened);
  {
    auto full = Pool::Create(dir.File("full.pool"), 64 << 20, kLayout);
    ASSERT_OK(full);
  }
  EXPECT_GE(blocks(dir.File("full.pool")), uint64_t{64} << 20);
}

TEST(PoolTest, RegionSizesFollowOptions) {
  TempDir dir;
  PoolOptions o;
  o.root_size = 10000;       // -> 12 KiB
  o.epoch_area_size = 1;     // -> 4 KiB
  o.log_area_size = 300000;  // -> 303104
  auto pool = Pool::Create(dir.File("o.pool"), 2 * kSize, kLayout, o);
  ASSERT_OK(pool);
  EXPECT_EQ((*pool)->region(PoolRegion::kRoot).size, 12288u);
  EXPECT_EQ((*pool)->region(PoolRegion::kEpoch).size, 4096u);
  EXPECT_EQ((*pool)->region(PoolRegion::kLog).size, 303104u);
  const RegionDesc heap = (*pool)->region(PoolRegion::kHeap);
  EXPECT_EQ(heap.offset, 8192u + 12288u + 4096u + 303104u);
  EXPECT_EQ(heap.offset + heap.size, 2 * kSize);

  // The default log area is 1/16 of a large pool.
  auto big = Pool::Create(dir.File("big.pool"), 64 << 20, kLayout);
  ASSERT_OK(big);
  EXPECT_EQ((*big)->region(PoolRegion::kLog).size, (64u << 20) / 16);
}

TEST(PoolTest, CreateRejectsBadArgumentsWithoutCreatingAnything) {
  TempDir dir;
  const std::string path = dir.File("bad.pool");
  ExpectError(Pool::Create(path, kSize - 1, kLayout).status(), absl::StatusCode::kInvalidArgument,
              path, {"size too small"});
  ExpectError(Pool::Create(path, 0, kLayout).status(), absl::StatusCode::kInvalidArgument, path,
              {"size too small"});
  ExpectError(Pool::Create(path, SIZE_MAX, kLayout).status(), absl::StatusCode::kInvalidArgument,
              path, {"4 KiB"});
  ExpectError(Pool::Create(path, kSize, "").status(), absl::StatusCode::kInvalidArgument, path,
              {"layout name is empty"});
  ExpectError(Pool::Create(path, kSize, std::string(kLayoutNameMax + 1, 'x')).status(),
              absl::StatusCode::kInvalidArgument, path, {"64 bytes", "63"});
  ExpectError(Pool::Create(path, kSize, std::string("a\0b", 3)).status(),
              absl::StatusCode::kInvalidArgument, path, {"NUL"});
  PoolOptions big_log;
  big_log.log_area_size = 900 * 1024;  // leaves less than 64 KiB of heap in 1 MiB
  ExpectError(Pool::Create(path, kSize, kLayout, big_log).status(),
              absl::StatusCode::kInvalidArgument, path, {"size too small", "heap"});
  PoolOptions huge_root;
  huge_root.root_size = SIZE_MAX;
  ExpectError(Pool::Create(path, kSize, kLayout, huge_root).status(),
              absl::StatusCode::kInvalidArgument, path, {"root_size"});
  PoolOptions sim;
  sim.backend = BackendKind::kSim;
  ExpectError(Pool::Create(path, kSize, kLayout, sim).status(), absl::StatusCode::kInvalidArgument,
              path, {"in-memory"});
  EXPECT_TRUE(ListDir(dir.path()).empty());

  // The longest layout name is fine.
  auto ok = Pool::Create(path, kSize, std::string(kLayoutNameMax, 'x'));
  ASSERT_OK(ok);
  EXPECT_EQ((*ok)->layout(), std::string(kLayoutNameMax, 'x'));
}

TEST(PoolTest, CreateInMissingDirectoryIsNotFound) {
  TempDir dir;
  const std::string path = dir.File("no/such/dir/x.pool");
  ExpectError(Pool::Create(path, kSize, kLayout).status(), absl::StatusCode::kNotFound, path);
}

TEST(PoolTest, CreateOverExistingFileIsAlreadyExistsAndLeavesItAlone) {
  TempDir dir;
  const std::string path = dir.File("x.pool");
  { std::ofstream(path) << "precious data"; }
  ExpectError(Pool::Create(path, kSize, kLayout).status(), absl::StatusCode::kAlreadyExists, path);
  EXPECT_EQ(ReadFile(path), "precious data");
  EXPECT_EQ(ListDir(dir.path()), std::vector<std::string>{"x.pool"});

  // An existing pool, closed or open, is not replaced either.
  const std::string pool_path = dir.File("p.pool");
  MakePool(pool_path);
  const auto before = ReadFile(pool_path);
  ExpectError(Pool::Create(pool_path, 2 * kSize, kLayout).status(),
              absl::StatusCode::kAlreadyExists, pool_path);
  EXPECT_EQ(ReadFile(pool_path), before);
}

// Racing creators: link() lets exactly one win; the others get kAlreadyExists and clean up.
TEST(PoolTest, ConcurrentCreatorsExactlyOneWins) {
  TempDir dir;
  const std::string path = dir.File("race.pool");
  constexpr int kThreads = 8;
  std::vector<absl::Status> results(kThreads);
  std::vector<std::unique_ptr<Pool>> winners(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      auto pool = Pool::Create(path, kSize, kLayout);
      results[t] = pool.status();
      if (pool.ok()) winners[t] = std::move(*pool);
    });
  }
  for (auto& t : threads) t.join();
  int ok = 0;
  for (const auto& st : results) {
    if (st.ok()) {
      ++ok;
    } else {
      ExpectError(st, absl::StatusCode::kAlreadyExists, path);
    }
  }
  EXPECT_EQ(ok, 1);
  EXPECT_EQ(ListDir(dir.path()), std::vector<std::string>{"race.pool"});
}

// A pool larger than the whole file system fails up front with kResourceExhausted.
TEST(PoolTest, CreateWithoutSpaceIsResourceExhausted) {
  TempDir dir;
  struct statfs fs;
  ASSERT_EQ(statfs(dir.path().c_str(), &fs), 0);
  constexpr long kTmpfsMagic = 0x01021994;
  if (fs.f_type != kTmpfsMagic) {
    GTEST_SKIP() << "needs a tmpfs test directory (fallocate fails up front only there); "
                 << dir.path() << " is not";
  }
  const size_t size = static_cast<size_t>(fs.f_blocks) * fs.f_bsize * 2;
  const std::string path = dir.File("huge.pool");
  ExpectError(Pool::Create(path, size, kLayout).status(), absl::StatusCode::kResourceExhausted,
              path, {"no space"});
  EXPECT_TRUE(ListDir(dir.path()).empty());
}

// ---- the root object --------------------------------------------------------------------------

struct Root {
  uint64_t counter;
  char name[16];
};
struct OtherRoot {
  uint64_t a, b, c, d;
};
struct HugeRoot {
  char bytes[8192];
};

TEST(PoolTest, RootIsZeroAtFirstUseAndPersistsAcrossReopen) {
  TempDir dir;
  const std::string path = dir.File("root.pool");
  {
    auto pool = Pool::Create(path, kSize, kLayout);
    ASSERT_OK(pool);
    auto root = (*pool)->root<Root>();
    ASSERT_OK(root);
    EXPECT_EQ(reinterpret_cast<uint8_t*>(*root),
              (*pool)->base() + (*pool)->region(PoolRegion::kRoot).offset);
    EXPECT_EQ((*root)->counter, 0u);
    EXPECT_EQ((*root)->name[0], '\0');
    (*root)->counter = 41;
    std::strcpy((*root)->name, "hello");
    auto same = (*pool)->root<Root>();
    ASSERT_OK(same);
    EXPECT_EQ(*same, *root);
    EXPECT_EQ((*pool)->state().root_type_size.value.load(), sizeof(Root));
  }
  auto pool = Pool::Open(path, kLayout);
  ASSERT_OK(pool);
  auto root = (*pool)->root<Root>();
  ASSERT_OK(root);
  EXPECT_EQ((*root)->counter, 41u);
  EXPECT_STREQ((*root)->name, "hello");
  // The bound size is durable: another type is refused, naming both sizes.
  ExpectError((*pool)->root<OtherRoot>().status(), absl::StatusCode::kFailedPrecondition, path,
              {"24-byte", "32 bytes"});
  ExpectError((*pool)->root<HugeRoot>().status(), absl::StatusCode::kInvalidArgument, path,
              {"8192", "4096"});
}

TEST(PoolTest, RootLargerThanItsRegionIsInvalidArgument) {
  TempDir dir;
  const std::string path = dir.File("huge-root.pool");
  auto pool = Pool::Create(path, kSize, kLayout);
  ASSERT_OK(pool);
  ExpectError((*pool)->root<HugeRoot>().status(), absl::StatusCode::kInvalidArgument, path);
  // Nothing was bound by the refused call.
  EXPECT_EQ((*pool)->state().root_type_size.value.load(), 0u);
  PoolOptions o;
  o.root_size = sizeof(HugeRoot);
  auto roomy = Pool::Create(dir.File("roomy.pool"), kSize, kLayout, o);
  ASSERT_OK(roomy);
  EXPECT_OK((*roomy)->root<HugeRoot>());
}

TEST(PoolTest, RootOfAClosedPoolIsFailedPrecondition) {
  TempDir dir;
  auto pool = Pool::Create(dir.File("c.pool"), kSize, kLayout);
  ASSERT_OK(pool);
  ASSERT_OK((*pool)->Close());
  EXPECT_THAT((*pool)->root<Root>(), StatusIs(absl::StatusCode::kFailedPrecondition, "closed"));
}

// ---- Open: every bad input gets its own error and leaves the file byte-for-byte unchanged ----

struct BadFileCase {
  const char* name;
  // Makes the bad file at `path` (a valid closed pool is there when it is called).
  std::function<void(const std::string& path)> make;
  absl::StatusCode code;
  std::vector<std::string> parts;
  const char* layout = kLayout;
};

void EditHeader(const std::string& path, const std::function<void(PoolHeader&)>& edit,
                bool fix_checksum = true) {
  PoolHeader h = ReadHeader(path);
  edit(h);
  WriteHeader(path, h, fix_checksum);
}

void WriteStateWord(const std::string& path, size_t line, uint64_t v) {
  WriteFileAt(path, kPoolHeaderSize + line * 64, std::string(reinterpret_cast<char*>(&v), 8));
}

std::vector<BadFileCase> BadFileCases() {
  using C = absl::StatusCode;
  return {
      {"EmptyFile",
       [](const std::string& p) { ASSERT_EQ(truncate(p.c_str(), 0), 0); },
       C::kDataLoss,
       {"empty file, not a pmrt pool"}},
      {"ShorterThanHeader",
       [](const std::string& p) { ASSERT_EQ(truncate(p.c_str(), 100), 0); },
       C::kDataLoss,
       {"truncated", "100 bytes"}},
      {"HeaderButNoState",
       [](const std::string& p) { ASSERT_EQ(truncate(p.c_str(), 5000), 0); },
       C::kDataLoss,
       {"truncated", "5000 bytes"}},
      {"ForeignFile",
       [](const std::string& p) {
         WriteFileAt(p, 0,
                     "\x7f"
                     "ELF not a pool at all");
       },
       C::kDataLoss,
       {"not a pmrt pool (bad magic)"}},
      {"ZeroedHeader",
       [](const std::string& p) { WriteFileAt(p, 0, std::string(4096, '\0')); },
       C::kDataLoss,
       {"bad magic"}},
      {"CorruptLayoutByte",
       [](const std::string& p) {
         EditHeader(
             p, [](PoolHeader& h) { h.layout[2] ^= 1; }, false);
       },
       C::kDataLoss,
       {"checksum at offset 4088"}},
      {"CorruptChecksum",
       [](const std::string& p) {
         EditHeader(
             p, [](PoolHeader& h) { h.checksum ^= 1; }, false);
       },
       C::kDataLoss,
       {"checksum at offset 4088"}},
      {"CorruptReservedByte",
       [](const std::string& p) {
         EditHeader(
             p, [](PoolHeader& h) { h.reserved[1000] = 0x55; }, false);
       },
       C::kDataLoss,
       {"checksum"}},
      {"NonzeroChecksumPad",
       [](const std::string& p) { EditHeader(p, [](PoolHeader& h) { h.checksum_pad = 1; }); },
       C::kDataLoss,
       {"checksum_pad"}},
      {"NewerMajorVersion",
       [](const std::string& p) { EditHeader(p, [](PoolHeader& h) { h.major = 2; }); },
       C::kFailedPrecondition,
       {"2.1", "newer", "(1.1)"}},
      {"NewerMajorVersionWithOtherChecksum",
       [](const std::string& p) {
         EditHeader(
             p, [](PoolHeader& h) { h.major = 7; }, /*fix_checksum=*/false);
       },
       C::kFailedPrecondition,
       {"7.1", "newer"}},
      {"MajorVersionZero",
       [](const std::string& p) { EditHeader(p, [](PoolHeader& h) { h.major = 0; }); },
       C::kDataLoss,
       {"major version 0"}},
      {"WrongHeaderSize",
       [](const std::string& p) { EditHeader(p, [](PoolHeader& h) { h.header_size = 2048; }); },
       C::kDataLoss,
       {"header_size 2048"}},
      {"UnterminatedLayout",
       [](const std::string& p) {
         EditHeader(p, [](PoolHeader& h) { std::memset(h.layout, 'z', sizeof(h.layout)); });
       },
       C::kDataLoss,
       {"layout name"}},
      {"WrongLayout",
       [](const std::string&) {},
       C::kInvalidArgument,
       {"'pool-test'", "'other-app'"},
       "other-app"},
      {"TruncatedPool",
       [](const std::string& p) { ASSERT_EQ(truncate(p.c_str(), 512 * 1024), 0); },
       C::kDataLoss,
       {"truncated", "524288", "1048576"}},
      {"TruncatedByOnePage",
       [](const std::string& p) { ASSERT_EQ(truncate(p.c_str(), kSize - 4096), 0); },
       C::kDataLoss,
       {"truncated", "1044480", "1048576"}},
      {"GrownSizeNotPageMultiple",
       [](const std::string& p) { WriteStateWord(p, 4, kSize + 100); },
       C::kDataLoss,
       {"corrupt state", "grown_size 1048676"}},
      {"GrownSizeBelowHeaderSize",
       [](const std::string& p) { WriteStateWord(p, 4, kSize - 4096); },
       C::kDataLoss,
       {"corrupt state", "grown_size 1044480", "pool_size 1048576"}},
      {"GrownPastTheFile",
       [](const std::string& p) { WriteStateWord(p, 4, 2 * kSize); },
       C::kDataLoss,
       {"truncated", "1048576", "grown to 2097152"}},
      {"PoolSizeNotPageMultiple",
       [](const std::string& p) {
         EditHeader(p, [](PoolHeader& h) { h.pool_size = kSize + 100; });
         ASSERT_EQ(truncate(p.c_str(), kSize + 100), 0);
       },
       C::kDataLoss,
       {"pool_size 1048676"}},
      {"HeapPastEnd",
       [](const std::string& p) { EditHeader(p, [](PoolHeader& h) { h.heap.size += 4096; }); },
       C::kDataLoss,
       {"heap region", "past the end"}},
      {"HeapShortOfEnd",
       [](const std::string& p) { EditHeader(p, [](PoolHeader& h) { h.heap.size -= 4096; }); },
       C::kDataLoss,
       {"not at the end of the pool"}},
      {"RegionOffsetOverflow",
       [](const std::string& p) {
         EditHeader(p, [](PoolHeader& h) { h.log.size = UINT64_MAX & ~uint64_t{4095}; });
       },
       C::kDataLoss,
       {"log region", "past the end"}},
      {"OverlappingRegions",
       [](const std::string& p) {
         EditHeader(p, [](PoolHeader& h) { h.epoch.offset = h.root.offset; });
       },
       C::kDataLoss,
       {"epoch region", "overlaps"}},
      {"RootOverState",
       [](const std::string& p) { EditHeader(p, [](PoolHeader& h) { h.root.offset = 4096; }); },
       C::kDataLoss,
       {"root region", "overlaps"}},
      {"MisalignedRegion",
       [](const std::string& p) { EditHeader(p, [](PoolHeader& h) { h.log.offset += 64; }); },
       C::kDataLoss,
       {"log region", "aligned"}},
      {"EmptyRegion",
       [](const std::string& p) { EditHeader(p, [](PoolHeader& h) { h.root.size = 0; }); },
       C::kDataLoss,
       {"root region", "empty"}},
      {"CorruptCleanShutdownWord",
       [](const std::string& p) { WriteStateWord(p, 0, 7); },
       C::kDataLoss,
       {"clean_shutdown is 7"}},
      {"RootTypeSizeBeyondRegion",
       [](const std::string& p) { WriteStateWord(p, 2, 5000); },
       C::kDataLoss,
       {"root_type_size 5000"}},
  };
}

class OpenRejectsTest : public ::testing::TestWithParam<BadFileCase> {};

TEST_P(OpenRejectsTest, WithItsOwnErrorAndLeavesTheFileUnchanged) {
  const BadFileCase& c = GetParam();
  TempDir dir;
  const std::string path = dir.File("bad.pool");
  MakePool(path);
  c.make(path);
  const auto before = ReadFile(path);
  ASSERT_TRUE(before.has_value());
  auto pool = Pool::Open(path, c.layout);
  ASSERT_FALSE(pool.ok()) << c.name << " opened";
  ExpectError(pool.status(), c.code, path, c.parts);
  EXPECT_EQ(ReadFile(path), before) << "Open modified the file";
  EXPECT_EQ(ListDir(dir.path()), std::vector<std::string>{"bad.pool"});

  // The in-memory open runs the same checks: same code on the same bytes (size mismatches
  // included, since the memory is exactly the file's length when it is a page multiple).
  if (before->size() >= kPoolHeaderSize + kPoolStateSize && before->size() % 4096 == 0) {
    void* mem = std::aligned_alloc(4096, before->size());
    std::memcpy(mem, before->data(), before->size());
    PoolOptions po;
    auto in_mem = Pool::OpenInMemory(mem, before->size(), c.layout, po, "copy-of-" + path);
    EXPECT_THAT(in_mem, StatusIs(c.code, "copy-of-" + path));
    EXPECT_EQ(std::memcmp(mem, before->data(), before->size()), 0);
    std::free(mem);
  }
}

INSTANTIATE_TEST_SUITE_P(BadFiles, OpenRejectsTest, ::testing::ValuesIn(BadFileCases()),
                         [](const auto& tp) { return std::string(tp.param.name); });

// Format 1.0 (no growth yet) opens as it is and can grow: 1.1 only gives the state page's
// grown_size line a meaning (zero in every 1.0 pool). A grown pool's file is longer than its
// header says, which a 1.0 build refuses ("size mismatch"): the old build never misreads it.
TEST(PoolTest, AFormat10PoolOpensAndGrows) {
  TempDir dir;
  const std::string path = dir.File("old.pool");
  ASSERT_OK(Pool::Create(path, kSize, kLayout));
  EditHeader(path, [](PoolHeader& h) { h.minor = 0; });
  {
    auto pool = Pool::Open(path, kLayout);
    ASSERT_OK(pool);
    EXPECT_EQ((*pool)->header().minor, 0);
    (*pool)->SetGrowthListener(
        {[](uint64_t, uint64_t) { return absl::OkStatus(); }, [](uint64_t, uint64_t) {}});
    ASSERT_OK((*pool)->Grow(2 * kSize));
    EXPECT_EQ((*pool)->size(), 2 * kSize);
    EXPECT_EQ((*pool)->region(PoolRegion::kHeap).offset + (*pool)->region(PoolRegion::kHeap).size,
              2 * kSize);
  }
  auto pool = Pool::Open(path, kLayout);
  ASSERT_OK(pool);
  EXPECT_EQ((*pool)->size(), 2 * kSize);
  EXPECT_EQ((*pool)->header().pool_size, kSize) << "the header is never rewritten";
}

TEST(PoolTest, OpenMissingFileIsNotFound) {
  TempDir dir;
  const std::string path = dir.File("missing.pool");
  ExpectError(Pool::Open(path, kLayout).status(), absl::StatusCode::kNotFound, path);
  EXPECT_TRUE(ListDir(dir.path()).empty());  // and Open created nothing
}

TEST(PoolTest, OpenDirectoryIsRefused) {
  TempDir dir;
  ExpectError(Pool::Open(dir.path(), kLayout).status(), absl::StatusCode::kFailedPrecondition,
              dir.path(), {"is a directory"});
}

TEST(PoolTest, OpenFifoIsNotARegularFile) {
  TempDir dir;
  const std::string path = dir.File("fifo");
  ASSERT_EQ(mkfifo(path.c_str(), 0600), 0);
  ExpectError(Pool::Open(path, kLayout).status(), absl::StatusCode::kFailedPrecondition, path,
              {"not a regular file"});
}

// Runs `fn` in a child process and returns its status. With `unprivileged`, a root child first
// becomes user nobody, since root ignores file modes.
absl::Status RunInChild(bool unprivileged, const std::function<absl::Status()>& fn) {
  int fds[2];
  if (pipe(fds) != 0) return absl::InternalError("pipe");
  pid_t pid = fork();
  if (pid == 0) {
    close(fds[0]);
    if (unprivileged && geteuid() == 0 &&
        (setgroups(0, nullptr) != 0 || setresgid(65534, 65534, 65534) != 0 ||
         setresuid(65534, 65534, 65534) != 0)) {
      _exit(3);
    }
    absl::Status st = fn();
    std::string out =
        std::to_string(static_cast<int>(st.code())) + "\n" + std::string(st.message());
    if (write(fds[1], out.data(), out.size()) < 0) _exit(4);
    _exit(0);
  }
  close(fds[1]);
  std::string in;
  char buf[512];
  ssize_t n;
  while ((n = read(fds[0], buf, sizeof(buf))) > 0) in.append(buf, static_cast<size_t>(n));
  close(fds[0]);
  int wstatus = 0;
  waitpid(pid, &wstatus, 0);
  if (!WIFEXITED(wstatus) || WEXITSTATUS(wstatus) != 0) {
    return absl::InternalError("child failed to run: status " + std::to_string(wstatus));
  }
  const size_t nl = in.find('\n');
  return absl::Status(static_cast<absl::StatusCode>(std::atoi(in.substr(0, nl).c_str())),
                      in.substr(nl + 1));
}

TEST(PoolTest, OpenReadOnlyFileIsPermissionDenied) {
  TempDir dir;
  const std::string path = dir.File("ro.pool");
  MakePool(path);
  ASSERT_EQ(chmod(dir.path().c_str(), 0755), 0);  // nobody may look inside
  ASSERT_EQ(chmod(path.c_str(), 0444), 0);
  const auto before = ReadFile(path);
  absl::Status st =
      RunInChild(/*unprivileged=*/true, [&] { return Pool::Open(path, kLayout).status(); });
  ExpectError(st, absl::StatusCode::kPermissionDenied, path, {"writable"});
  EXPECT_EQ(ReadFile(path), before);
}

TEST(PoolTest, CreateInReadOnlyDirectoryIsPermissionDenied) {
  TempDir dir;
  ASSERT_EQ(chmod(dir.path().c_str(), 0555), 0);
  const std::string path = dir.File("x.pool");
  absl::Status st = RunInChild(/*unprivileged=*/true,
                               [&] { return Pool::Create(path, kSize, kLayout).status(); });
  ExpectError(st, absl::StatusCode::kPermissionDenied, path);
  ASSERT_EQ(chmod(dir.path().c_str(), 0700), 0);
  EXPECT_TRUE(ListDir(dir.path()).empty());
}

// ---- exclusivity ------------------------------------------------------------------------------

TEST(PoolTest, SecondOpenInTheSameProcessIsRefused) {
  TempDir dir;
  const std::string path = dir.File("x.pool");
  auto first = Pool::Create(path, kSize, kLayout);
  ASSERT_OK(first);
  ExpectError(Pool::Open(path, kLayout).status(), absl::StatusCode::kFailedPrecondition, path,
              {"pool is in use by another process or Pool: " + path});
  ASSERT_OK((*first)->Close());
  auto second = Pool::Open(path, kLayout);
  ASSERT_OK(second);
  ExpectError(Pool::Open(path, kLayout).status(), absl::StatusCode::kFailedPrecondition, path,
              {"in use"});
  // The refused opens wrote nothing: the count is that of the two real opens.
  EXPECT_EQ((*second)->open_count(), 2u);
}

TEST(PoolTest, OpenWhileAnotherProcessHoldsThePoolIsRefused) {
  TempDir dir;
  const std::string path = dir.File("x.pool");
  auto held = Pool::Create(path, kSize, kLayout);
  ASSERT_OK(held);
  absl::Status st =
      RunInChild(/*unprivileged=*/false, [&] { return Pool::Open(path, kLayout).status(); });
  ExpectError(st, absl::StatusCode::kFailedPrecondition, path, {"in use"});
  ASSERT_OK((*held)->Close());
  // Once released, another process may open it.
  EXPECT_OK(RunInChild(/*unprivileged=*/false, [&] { return Pool::Open(path, kLayout).status(); }));
}

// ---- crash detection --------------------------------------------------------------------------

// A child process opens the pool at `path`, sets its root's counter to 7 and exits without
// Close and without destructors, as if it had died there.
void ExitWithoutClose(const std::string& path) {
  const pid_t pid = fork();
  if (pid == 0) {
    auto pool = Pool::Open(path, kLayout);
    if (!pool.ok()) _exit(1);
    auto root = (*pool)->root<Root>();
    if (!root.ok()) _exit(2);
    (*root)->counter = 7;
    _exit(0);
  }
  int wstatus = 0;
  ASSERT_EQ(waitpid(pid, &wstatus, 0), pid);
  ASSERT_TRUE(WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == 0) << wstatus;
}

// A private mapping: everything written (the attach, the root, a plain store) stays in this
// process, even across Close; the file is byte-identical, a crashed pool stays crashed for the
// next writing open, Grow is refused, and the option applies to Pool::Open of a file only.
TEST(PoolTest, APrivateMappingNeverWritesTheFile) {
  TempDir dir;
  const std::string path = dir.File("private.pool");
  MakePool(path);
  ExitWithoutClose(path);
  const auto before = ReadFile(path);
  ASSERT_TRUE(before.has_value());
  PoolOptions po;
  po.private_mapping = true;
  {
    auto pool = Pool::Open(path, kLayout, po);
    ASSERT_OK(pool);
    Pool& p = **pool;
    EXPECT_TRUE(p.is_private());
    EXPECT_EQ(p.persister().kind(), BackendKind::kEadr);
    EXPECT_FALSE(p.was_clean_shutdown());
    auto root = p.root<Root>();
    ASSERT_OK(root);
    EXPECT_EQ((*root)->counter, 7u);  // the file's bytes
    (*root)->counter = 99;
    p.AcknowledgeRecovery(Pool::kRecoveredEpochs);
    EXPECT_EQ(p.Grow(2 * kSize).code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_EQ((*root)->counter, 99u);
    ASSERT_OK(p.Close());  // "cleanly shut down", in memory only
  }
  EXPECT_EQ(ReadFile(path), before) << "a private mapping changed the file";
  {
    auto pool = Pool::Open(path, kLayout);
    ASSERT_OK(pool);
    EXPECT_FALSE((*pool)->was_clean_shutdown()) << "the private close hid the crash";
    auto root = (*pool)->root<Root>();
    ASSERT_OK(root);
    EXPECT_EQ((*root)->counter, 7u);
  }
  EXPECT_EQ(Pool::Create(dir.File("new.pool"), kSize, kLayout, po).status().code(),
            absl::StatusCode::kInvalidArgument);
  void* mem = aligned_alloc(4096, kSize);
  EXPECT_EQ(Pool::CreateInMemory(mem, kSize, kLayout, po).status().code(),
            absl::StatusCode::kInvalidArgument);
  free(mem);
}

TEST(PoolTest, ExitWithoutCloseIsSeenAsUncleanShutdown) {
  TempDir dir;
  const std::string path = dir.File("crash.pool");
  MakePool(path);
  ExitWithoutClose(path);
  {
    auto pool = Pool::Open(path, kLayout);
    ASSERT_OK(pool);
    EXPECT_FALSE((*pool)->was_clean_shutdown());
    EXPECT_EQ((*pool)->open_count(), 3u);
    auto root = (*pool)->root<Root>();
    ASSERT_OK(root);
    EXPECT_EQ((*root)->counter, 7u);  // same page cache; recovery is the layers' business
    // Not recovered in this run: Close leaves the pool marked as crashed.
    EXPECT_FALSE((*pool)->recovery_acknowledged());
  }
  {
    auto pool = Pool::Open(path, kLayout);
    ASSERT_OK(pool);
    EXPECT_FALSE((*pool)->was_clean_shutdown()) << "a run that did not recover hid the crash";
    // Partial acknowledgement (the epoch layer only) is enough when no transaction directory
    // exists; a pool-only program acknowledges everything after its own recovery.
    (*pool)->AcknowledgeRecovery(Pool::kRecoveredEpochs);
    EXPECT_TRUE((*pool)->recovery_acknowledged());
  }
  {
    auto pool = Pool::Open(path, kLayout);
    ASSERT_OK(pool);
    EXPECT_TRUE((*pool)->was_clean_shutdown());
    // A pool with a transaction directory also needs the transaction layer's part.
    (*pool)->state().txn_directory.value.store(4096);
  }
  const pid_t pid = fork();
  if (pid == 0) {
    auto pool = Pool::Open(path, kLayout);
    _exit(pool.ok() ? 0 : 1);  // crash
  }
  int wstatus = 0;
  ASSERT_EQ(waitpid(pid, &wstatus, 0), pid);
  {
    auto pool = Pool::Open(path, kLayout);
    ASSERT_OK(pool);
    EXPECT_FALSE((*pool)->was_clean_shutdown());
    (*pool)->AcknowledgeRecovery(Pool::kRecoveredEpochs);
    EXPECT_FALSE((*pool)->recovery_acknowledged());
  }
  {
    auto pool = Pool::Open(path, kLayout);
    ASSERT_OK(pool);
    EXPECT_FALSE((*pool)->was_clean_shutdown());
    (*pool)->AcknowledgeRecovery();
  }
  auto pool = Pool::Open(path, kLayout);
  ASSERT_OK(pool);
  EXPECT_TRUE((*pool)->was_clean_shutdown());
}

// ---- relocation: pptr resolves against wherever the pool is mapped ----------------------------

struct Node {
  uint64_t key;
  pptr<Node> next;
};
struct ListRoot {
  pptr<Node> head;
  uint64_t length;
};

void BuildList(Pool& pool, int n) {
  auto root = pool.root<ListRoot>();
  ASSERT_OK(root);
  auto* nodes = static_cast<Node*>(pool.region_base(PoolRegion::kHeap));
  for (int i = n - 1; i >= 0; --i) {
    nodes[i].key = static_cast<uint64_t>(i) * i;
    nodes[i].next = i + 1 < n ? pptr<Node>(pool, &nodes[i + 1]) : pptr<Node>(nullptr);
  }
  (*root)->head = pptr<Node>(pool, &nodes[0]);
  (*root)->length = static_cast<uint64_t>(n);
}

// Walks the list, checking every node lies inside `pool` and both ways of resolving agree.
void CheckList(const Pool& pool, const ListRoot& root) {
  uint64_t count = 0;
  for (pptr<Node> p = root.head; p; ++count) {
    Node* node = p.get(pool);
    ASSERT_TRUE(pool.contains(node, sizeof(Node))) << "node " << count << " outside the pool";
    ASSERT_EQ(node, p.get(pool.base()));
    ASSERT_EQ(pool.offset_of(node), p.offset());
    ASSERT_EQ(node->key, count * count);
    p = node->next;
  }
  EXPECT_EQ(count, root.length);
}

TEST(PoolTest, PptrResolvesAtADifferentMappingAddress) {
  TempDir dir;
  const std::string path = dir.File("reloc.pool");
  uint8_t* first_base = nullptr;
  {
    auto pool = Pool::Create(path, kSize, kLayout);
    ASSERT_OK(pool);
    BuildList(**pool, 100);
    first_base = (*pool)->base();
  }
  // Occupy the old address range so the next mapping must land elsewhere.
  void* hold =
      mmap(first_base, kSize, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
  ASSERT_EQ(hold, static_cast<void*>(first_base));
  {
    auto pool = Pool::Open(path, kLayout);
    ASSERT_OK(pool);
    ASSERT_NE((*pool)->base(), first_base);
    auto root = (*pool)->root<ListRoot>();
    ASSERT_OK(root);
    CheckList(**pool, **root);
  }
  munmap(hold, kSize);
}

TEST(PoolTest, TwoCopiesOpenInMemoryAtOnceEachResolvingItsOwn) {
  TempDir dir;
  const std::string path = dir.File("copy.pool");
  {
    auto pool = Pool::Create(path, kSize, kLayout);
    ASSERT_OK(pool);
    BuildList(**pool, 50);
  }
  const auto content = ReadFile(path);
  auto* a = static_cast<uint8_t*>(std::aligned_alloc(4096, kSize));
  auto* b = static_cast<uint8_t*>(std::aligned_alloc(4096, kSize));
  std::memcpy(a, content->data(), kSize);
  std::memcpy(b, content->data(), kSize);
  {
    auto pa = Pool::OpenInMemory(a, kSize, kLayout, {}, "copy-a");
    auto pb = Pool::OpenInMemory(b, kSize, kLayout, {}, "copy-b");
    ASSERT_OK(pa);
    ASSERT_OK(pb);
    EXPECT_EQ((*pa)->persister().kind(), BackendKind::kEadr);
    auto ra = (*pa)->root<ListRoot>();
    auto rb = (*pb)->root<ListRoot>();
    ASSERT_OK(ra);
    ASSERT_OK(rb);
    CheckList(**pa, **ra);
    CheckList(**pb, **rb);
    // The same offset names a different object in each copy.
    Node* na = (*ra)->head.get(**pa);
    Node* nb = (*rb)->head.get(**pb);
    EXPECT_EQ(reinterpret_cast<uint8_t*>(na) - a, reinterpret_cast<uint8_t*>(nb) - b);
    na->next.get(**pa)->key = 999;
    EXPECT_EQ(nb->next.get(**pb)->key, 1u);
    EXPECT_FALSE((*pa)->contains(nb));
  }
  std::free(a);
  std::free(b);
}

TEST(PoolTest, AtomicPptrOperationsAndDurability) {
  TempDir dir;
  const std::string path = dir.File("atomic.pool");
  uint64_t second_off = 0;
  {
    auto pool = Pool::Create(path, kSize, kLayout);
    ASSERT_OK(pool);
    Pool& p = **pool;
    auto* heap = static_cast<uint8_t*>(p.region_base(PoolRegion::kHeap));
    auto* slot = new (heap) atomic_pptr<Node>();
    auto* n1 = new (heap + 64) Node{1, nullptr};
    auto* n2 = new (heap + 128) Node{2, nullptr};
    EXPECT_TRUE(slot->load().is_null());
    slot->store(pptr<Node>(p, n1));
    EXPECT_EQ(slot->load().get(p), n1);

    pptr<Node> expected(nullptr);  // wrong guess: fails and reports the current value
    EXPECT_FALSE(slot->compare_exchange_strong(expected, pptr<Node>(p, n2)));
    EXPECT_EQ(expected.get(p), n1);
    EXPECT_TRUE(slot->compare_exchange_strong(expected, pptr<Node>(p, n2)));
    EXPECT_EQ(slot->load().get(p), n2);

    pptr<Node> old = slot->exchange(pptr<Node>(p, n1));
    EXPECT_EQ(old.get(p), n2);
    EXPECT_EQ(slot->exchange(pptr<Node>(p, n2)).get(p), n1);
    second_off = p.offset_of(n2);
    p.persister().Persist(Site("test.atomic_pptr"), Site("test.atomic_pptr.fence"), slot, 8);
  }
  auto pool = Pool::Open(path, kLayout);
  ASSERT_OK(pool);
  auto* slot = static_cast<atomic_pptr<Node>*>((*pool)->region_base(PoolRegion::kHeap));
  EXPECT_EQ(slot->load().offset(), second_off);
  EXPECT_EQ(slot->load().get(**pool)->key, 2u);
}

TEST(PoolTest, PptrBasics) {
  pptr<int> null;
  EXPECT_TRUE(null.is_null());
  EXPECT_FALSE(static_cast<bool>(null));
  EXPECT_EQ(null.get(reinterpret_cast<void*>(4096)), nullptr);
  auto p = pptr<int>::FromOffset(8192);
  EXPECT_EQ(p.offset(), 8192u);
  EXPECT_EQ(p.get(reinterpret_cast<void*>(4096)), reinterpret_cast<int*>(4096 + 8192));
  EXPECT_TRUE(p == pptr<int>::FromOffset(8192));
  EXPECT_FALSE(p == null);
}

// ---- the default pool -------------------------------------------------------------------------

TEST(PoolTest, DefaultIsTheFirstOpenPoolAndClearedOnClose) {
  TempDir dir;
  ASSERT_EQ(Pool::Default(), nullptr);
  auto a = Pool::Create(dir.File("a.pool"), kSize, kLayout);
  ASSERT_OK(a);
  EXPECT_EQ(Pool::Default(), a->get());
  auto b = Pool::Create(dir.File("b.pool"), kSize, kLayout);
  ASSERT_OK(b);
  EXPECT_EQ(Pool::Default(), a->get());
  ASSERT_OK((*b)->Close());
  EXPECT_EQ(Pool::Default(), a->get());
  ASSERT_OK((*a)->Close());
  EXPECT_EQ(Pool::Default(), nullptr);
  // A failed open does not become the default either.
  EXPECT_FALSE(Pool::Open(dir.File("missing"), kLayout).ok());
  EXPECT_EQ(Pool::Default(), nullptr);
}

// ---- backend choice ---------------------------------------------------------------------------

TEST(PoolTest, BackendFromOptionsEnvironmentOrMapping) {
  TempDir dir;
  {
    ScopedEnv env("PMRT_BACKEND", std::nullopt);
    auto pool = Pool::Create(dir.File("default.pool"), kSize, kLayout);
    ASSERT_OK(pool);
    const char* force = std::getenv("PMEM_IS_PMEM_FORCE");
    const bool forced = force != nullptr && std::atoi(force) == 1;
    EXPECT_EQ((*pool)->persister().kind(), forced ? BackendKind::kPmem : BackendKind::kMsync);
  }
  {
    ScopedEnv env("PMRT_BACKEND", "eadr");
    auto pool = Pool::Open(dir.File("default.pool"), kLayout);
    ASSERT_OK(pool);
    EXPECT_EQ((*pool)->persister().kind(), BackendKind::kEadr);
  }
  {
    ScopedEnv env("PMRT_BACKEND", "eadr");  // options win over the environment
    PoolOptions o;
    o.backend = BackendKind::kMsync;
    auto pool = Pool::Open(dir.File("default.pool"), kLayout, o);
    ASSERT_OK(pool);
    EXPECT_EQ((*pool)->persister().kind(), BackendKind::kMsync);
  }
  {
    ScopedEnv env("PMRT_BACKEND", "pmem");
    auto pool = Pool::Open(dir.File("default.pool"), kLayout);
    ASSERT_OK(pool);
    EXPECT_EQ((*pool)->persister().kind(), BackendKind::kPmem);
  }
}

// How the pmem backend writes records: PoolOptions::record_writes, else PMRT_RECORD_WRITES, else
// the processor's default; a pool written one way opens and reads the same the other way.
TEST(PoolTest, RecordWritesFromOptionsEnvironmentOrProcessor) {
  TempDir dir;
  const std::string path = dir.File("writes.pool");
  {
    ScopedEnv env("PMRT_RECORD_WRITES", std::nullopt);
    auto pool = Pool::Create(path, kSize, kLayout);
    ASSERT_OK(pool);
    EXPECT_EQ((*pool)->persister().record_writes(), DefaultRecordWrites());
  }
  for (RecordWrites w : {RecordWrites::kStream, RecordWrites::kFlush}) {
    {
      ScopedEnv env("PMRT_RECORD_WRITES", std::string(RecordWritesName(w)));
      auto pool = Pool::Open(path, kLayout);
      ASSERT_OK(pool);
      EXPECT_EQ((*pool)->persister().record_writes(), w);
    }
    {
      // Options win over the environment.
      const RecordWrites other =
          w == RecordWrites::kStream ? RecordWrites::kFlush : RecordWrites::kStream;
      ScopedEnv env("PMRT_RECORD_WRITES", std::string(RecordWritesName(w)));
      PoolOptions o;
      o.record_writes = other;
      auto pool = Pool::Open(path, kLayout, o);
      ASSERT_OK(pool);
      EXPECT_EQ((*pool)->persister().record_writes(), other);
    }
  }
}

// With the environment variable `var` set to a bad `value`, Open of the pool at `path` fails
// with kInvalidArgument naming the path, `var` and `parts`, and leaves the file as it was;
// Create of another fails the same way and leaves no file.
void ExpectBadEnvironmentTouchesNothing(const TempDir& dir, const std::string& path,
                                        const char* var, const char* value,
                                        std::vector<std::string> parts) {
  const auto before = ReadFile(path);
  ScopedEnv env(var, value);
  parts.emplace_back(var);
  ExpectError(Pool::Open(path, kLayout).status(), absl::StatusCode::kInvalidArgument, path, parts);
  EXPECT_EQ(ReadFile(path), before);
  const std::string other = dir.File("other.pool");
  ExpectError(Pool::Create(other, kSize, kLayout).status(), absl::StatusCode::kInvalidArgument,
              other, {var});
  EXPECT_FALSE(std::filesystem::exists(other));
}

TEST(PoolTest, BadRecordWritesEnvironmentIsInvalidArgumentAndTouchesNothing) {
  TempDir dir;
  const std::string path = dir.File("env.pool");
  MakePool(path);
  ExpectBadEnvironmentTouchesNothing(dir, path, "PMRT_RECORD_WRITES", "movnt",
                                     {"'movnt'", "stream, flush"});
  {
    ScopedEnv env("PMRT_RECORD_WRITES", "movnt");
    PoolOptions o;  // an explicit choice does not read the environment
    o.record_writes = RecordWrites::kFlush;
    EXPECT_OK(Pool::Open(path, kLayout, o));
  }
  EXPECT_EQ(ListDir(dir.path()), std::vector<std::string>{"env.pool"});
}

TEST(PoolTest, BadBackendEnvironmentIsInvalidArgumentAndTouchesNothing) {
  TempDir dir;
  const std::string path = dir.File("env.pool");
  MakePool(path);
  const auto before = ReadFile(path);
  ExpectBadEnvironmentTouchesNothing(dir, path, "PMRT_BACKEND", "nvdimm", {"'nvdimm'"});
  {
    ScopedEnv sim("PMRT_BACKEND", "sim");
    ExpectError(Pool::Open(path, kLayout).status(), absl::StatusCode::kInvalidArgument, path,
                {"in-memory"});
  }
  EXPECT_EQ(ListDir(dir.path()), std::vector<std::string>{"env.pool"});
  EXPECT_EQ(ReadFile(path), before);
}

// ---- in-memory pools --------------------------------------------------------------------------

class AlignedBuffer {
 public:
  explicit AlignedBuffer(size_t size)
      : size_(size), p_(static_cast<uint8_t*>(std::aligned_alloc(4096, size))) {}
  ~AlignedBuffer() { std::free(p_); }
  uint8_t* get() const { return p_; }
  size_t size() const { return size_; }

 private:
  size_t size_;
  uint8_t* p_;
};

TEST(PoolInMemoryTest, CreateOverGarbageZeroesEverything) {
  AlignedBuffer mem(kSize);
  std::memset(mem.get(), 0xAB, kSize);
  PoolOptions o;
  auto pool = Pool::CreateInMemory(mem.get(), kSize, "mem", o, "garbage");
  ASSERT_OK(pool);
  EXPECT_EQ((*pool)->persister().kind(), BackendKind::kEadr);
  EXPECT_EQ((*pool)->path(), "garbage");
  EXPECT_EQ((*pool)->open_count(), 1u);
  EXPECT_TRUE((*pool)->was_clean_shutdown());
  for (size_t off = 8192; off < kSize; ++off) ASSERT_EQ(mem.get()[off], 0) << "offset " << off;
  auto root = (*pool)->root<Root>();
  ASSERT_OK(root);
  EXPECT_EQ((*root)->counter, 0u);
}

// PMRT_RECORD_WRITES applies to memory too (PMRT_BACKEND does not): a bad value fails the
// create and the open, naming the pool, and the memory keeps what it held.
TEST(PoolInMemoryTest, BadRecordWritesEnvironmentFailsAndTouchesNothing) {
  AlignedBuffer mem(kSize);
  std::memset(mem.get(), 0, kSize);
  ASSERT_OK(Pool::CreateInMemory(mem.get(), kSize, kLayout, {}, "mem"));
  const std::vector<uint8_t> before(mem.get(), mem.get() + kSize);
  ScopedEnv env("PMRT_RECORD_WRITES", "movnt");
  ExpectError(Pool::OpenInMemory(mem.get(), kSize, kLayout, {}, "mem").status(),
              absl::StatusCode::kInvalidArgument, "mem", {"PMRT_RECORD_WRITES", "'movnt'"});
  ExpectError(Pool::CreateInMemory(mem.get(), kSize, kLayout, {}, "mem").status(),
              absl::StatusCode::kInvalidArgument, "mem", {"PMRT_RECORD_WRITES"});
  EXPECT_TRUE(std::equal(before.begin(), before.end(), mem.get()));
  PoolOptions o;
  o.record_writes = RecordWrites::kStream;
  auto pool = Pool::OpenInMemory(mem.get(), kSize, kLayout, o, "mem");
  ASSERT_OK(pool);
  EXPECT_EQ((*pool)->persister().record_writes(), RecordWrites::kStream);
}

TEST(PoolInMemoryTest, CreateOverAnOldPoolReplacesIt) {
  AlignedBuffer mem(kSize);
  std::memset(mem.get(), 0, kSize);
  {
    auto old = Pool::CreateInMemory(mem.get(), kSize, "old", {});
    ASSERT_OK(old);
    ASSERT_OK((*old)->root<OtherRoot>());
    std::memset((*old)->region_base(PoolRegion::kHeap), 0x77, 4096);
  }
  auto pool = Pool::CreateInMemory(mem.get(), kSize, "new", {});
  ASSERT_OK(pool);
  EXPECT_EQ((*pool)->layout(), "new");
  EXPECT_EQ((*pool)->open_count(), 1u);
  EXPECT_EQ(static_cast<uint8_t*>((*pool)->region_base(PoolRegion::kHeap))[100], 0);
  EXPECT_OK((*pool)->root<Root>());  // the old binding is gone
  ASSERT_OK((*pool)->Close());
  EXPECT_THAT(Pool::OpenInMemory(mem.get(), kSize, "old", {}),
              StatusIs(absl::StatusCode::kInvalidArgument, "'new'"));
  auto again = Pool::OpenInMemory(mem.get(), kSize, "new", {});
  ASSERT_OK(again);
  EXPECT_EQ((*again)->open_count(), 2u);
}

TEST(PoolInMemoryTest, RejectsBadMemoryAndOptions) {
  AlignedBuffer mem(2 * kSize);
  std::memset(mem.get(), 0, mem.size());
  using C = absl::StatusCode;
  EXPECT_THAT(Pool::CreateInMemory(nullptr, kSize, "m", {}, "nul"),
              StatusIs(C::kInvalidArgument, "nul"));
  EXPECT_THAT(Pool::CreateInMemory(mem.get() + 64, kSize, "m", {}, "una"),
              StatusIs(C::kInvalidArgument, "aligned"));
  EXPECT_THAT(Pool::CreateInMemory(mem.get(), kSize + 100, "m", {}, "odd"),
              StatusIs(C::kInvalidArgument, "4 KiB multiple"));
  EXPECT_THAT(Pool::CreateInMemory(mem.get(), kSize - 4096, "m", {}, "small"),
              StatusIs(C::kInvalidArgument, "size too small"));
  EXPECT_THAT(Pool::CreateInMemory(mem.get(), kSize, "", {}, "nolayout"),
              StatusIs(C::kInvalidArgument, "layout"));
  PoolOptions sim_without_sim;
  sim_without_sim.backend = BackendKind::kSim;
  EXPECT_THAT(Pool::CreateInMemory(mem.get(), kSize, "m", sim_without_sim, "nosim"),
              StatusIs(C::kInvalidArgument, "PoolOptions::sim"));
  EXPECT_THAT(Pool::OpenInMemory(mem.get(), kSize, "m", sim_without_sim, "nosim"),
              StatusIs(C::kInvalidArgument, "PoolOptions::sim"));
  // Nothing above wrote a byte.
  for (size_t i = 0; i < mem.size(); ++i) ASSERT_EQ(mem.get()[i], 0) << i;

  EXPECT_THAT(Pool::OpenInMemory(mem.get(), 0, "m", {}, "zero"), StatusIs(C::kDataLoss, "empty"));
  EXPECT_THAT(Pool::OpenInMemory(mem.get(), 4096, "m", {}, "short"),
              StatusIs(C::kDataLoss, "truncated"));
  EXPECT_THAT(Pool::OpenInMemory(mem.get(), kSize, "m", {}, "zeros"),
              StatusIs(C::kDataLoss, "bad magic"));

  ASSERT_OK(Pool::CreateInMemory(mem.get(), kSize, "m", {}));
  // A bigger window than the pool is room to grow: the pool's own size is authoritative.
  {
    auto window = Pool::OpenInMemory(mem.get(), 2 * kSize, "m", {}, "window");
    ASSERT_OK(window);
    EXPECT_EQ((*window)->size(), kSize);
    EXPECT_EQ((*window)->max_size(), 2 * kSize);
  }
  EXPECT_OK(Pool::OpenInMemory(mem.get(), kSize, "m", {}));
}

TEST(PoolInMemoryTest, BackendEnvironmentDoesNotApply) {
  ScopedEnv env("PMRT_BACKEND", "nonsense");
  AlignedBuffer mem(kSize);
  std::memset(mem.get(), 0, kSize);
  auto pool = Pool::CreateInMemory(mem.get(), kSize, "m", {});
  ASSERT_OK(pool);
  EXPECT_EQ((*pool)->persister().kind(), BackendKind::kEadr);
  ASSERT_OK((*pool)->Close());
  PoolOptions o;
  o.backend = BackendKind::kMsync;
  auto msync = Pool::OpenInMemory(mem.get(), kSize, "m", o);
  ASSERT_OK(msync);
  EXPECT_EQ((*msync)->persister().kind(), BackendKind::kMsync);
}

// The offsets docs/format.md documents.
TEST(PoolLayoutTest, OffsetsMatchTheFormatDocument) {
  EXPECT_EQ(offsetof(PoolHeader, magic), 0u);
  EXPECT_EQ(offsetof(PoolHeader, major), 8u);
  EXPECT_EQ(offsetof(PoolHeader, minor), 10u);
  EXPECT_EQ(offsetof(PoolHeader, header_size), 12u);
  EXPECT_EQ(offsetof(PoolHeader, pool_size), 16u);
  EXPECT_EQ(offsetof(PoolHeader, create_time_ns), 24u);
  EXPECT_EQ(offsetof(PoolHeader, uuid), 32u);
  EXPECT_EQ(offsetof(PoolHeader, layout), 48u);
  EXPECT_EQ(offsetof(PoolHeader, root), 112u);
  EXPECT_EQ(offsetof(PoolHeader, epoch), 128u);
  EXPECT_EQ(offsetof(PoolHeader, log), 144u);
  EXPECT_EQ(offsetof(PoolHeader, heap), 160u);
  EXPECT_EQ(offsetof(PoolHeader, reserved), 176u);
  EXPECT_EQ(sizeof(PoolHeader::reserved), 3912u);
  EXPECT_EQ(offsetof(PoolHeader, checksum), 4088u);
  EXPECT_EQ(offsetof(PoolHeader, checksum_pad), 4092u);
  EXPECT_EQ(offsetof(PoolState, clean_shutdown), 0u);
  EXPECT_EQ(offsetof(PoolState, open_count), 64u);
  EXPECT_EQ(offsetof(PoolState, root_type_size), 128u);
  EXPECT_EQ(std::string(kPoolMagic, 8), "PMRTPOOL");
}

// ---- persistence order under the crash simulator ---------------------------------------------
//
// A scenario of pool operations runs on a simulated pool with every fence a crash point. Each
// step declares its fences in order and the pool-level state each one makes durable (a
// PoolView); a crash image taken at a step's k-th fence must show the state before that fence
// or after it (or, when a fence is disabled by the mutation gate, any state in between). The
// start state of a step is required to be durable by its first fence, so a step whose last
// fence is missing is caught by the next one.

// What an image shows at the pool level.
struct PoolView {
  std::string layout;  // empty: Open refuses the image with kDataLoss (no pool there)
  uint64_t clean = 0;
  uint64_t count = 0;
  uint64_t root_size = 0;
  uint32_t content = 0;  // CRC32C of everything after the state page
  uint64_t size = 0;     // the pool's size (the header's, or its grown size)
  bool operator==(const PoolView&) const = default;
  std::string ToString() const {
    if (layout.empty()) return "{no pool}";
    return absl::StrFormat("{%s clean=%d opens=%d root=%d content=%08x size=%d}", layout, clean,
                           count, root_size, content, size);
  }
};

uint32_t ContentCrc(const uint8_t* base, size_t size) {
  return Crc32c(base + kPoolHeaderSize + kPoolStateSize, size - kPoolHeaderSize - kPoolStateSize);
}

// Opens the image like recovery would (eadr: the image is private memory) and reports it.
absl::StatusOr<PoolView> Observe(uint8_t* base, size_t size) {
  const auto* h = reinterpret_cast<const PoolHeader*>(base);
  const std::string layout(h->layout, strnlen(h->layout, sizeof(h->layout)));
  const uint32_t content = ContentCrc(base, size);
  PoolOptions po;
  po.backend = BackendKind::kEadr;
  auto pool = Pool::OpenInMemory(base, size, layout.empty() ? "?" : layout, po, "crash-image");
  if (!pool.ok()) {
    if (pool.status().code() != absl::StatusCode::kDataLoss) return pool.status();
    return PoolView{};
  }
  return PoolView{layout,
                  (*pool)->was_clean_shutdown() ? 1u : 0u,
                  (*pool)->open_count() - 1,
                  (*pool)->state().root_type_size.value.load(),
                  content,
                  (*pool)->size()};
}

struct Fence {
  Site site;
  PoolView after;  // the pool-level state once this fence has returned
  // False for a flush the next fence completes: its state is a legal intermediate one at
  // that fence, and the sim sees no fence for it.
  bool fenced = true;
};

class PoolCrashScenario {
 public:
  explicit PoolCrashScenario(Sim& sim) : sim_(sim) {
    sim_.SetHandler([this](CrashImage& img) { return Check(img); });
  }

  void Step(const std::string& name, const std::vector<Fence>& fences,
            const std::function<void()>& body) {
    step_ = name;
    states_ = {current_};
    fence_state_.clear();
    for (const Fence& f : fences) {
      states_.push_back(f.after);
      if (f.fenced && !mutation::IsDisabled(f.site)) fence_state_.push_back(states_.size() - 1);
    }
    base_fence_ = sim_.stats().fences;
    body();
    EXPECT_EQ(sim_.stats().fences - base_fence_, fence_state_.size())
        << "step '" << name << "' issued another number of fences than it declares";
    current_ = states_.back();
  }

 private:
  absl::Status Check(CrashImage& img) {
    const uint64_t k = img.id().fence - base_fence_;  // 1-based within the step
    if (k == 0 || k > fence_state_.size()) {
      return absl::InternalError(absl::StrFormat("step '%s': unexpected fence %d", step_, k));
    }
    const size_t lo = k == 1 ? 0 : fence_state_[k - 2];
    const size_t hi = fence_state_[k - 1];
    auto view = Observe(static_cast<uint8_t*>(img.base()), img.size());
    if (!view.ok()) return view.status();
    std::string allowed;
    for (size_t i = lo; i <= hi; ++i) {
      if (states_[i] == *view) return absl::OkStatus();
      absl::StrAppend(&allowed, " ", states_[i].ToString());
    }
    return absl::DataLossError(absl::StrFormat("step '%s', fence %d: image shows %s; allowed:%s",
                                               step_, k, view->ToString(), allowed));
  }

  Sim& sim_;
  std::string step_;
  PoolView current_;                 // durable state at the start of the step
  std::vector<PoolView> states_;     // [0] = start, then one per declared fence
  std::vector<size_t> fence_state_;  // per fence the sim will see: index into states_
  uint64_t base_fence_ = 0;
};

struct ScenarioResult {
  std::vector<Sim::Failure> failures;
  std::map<uint32_t, std::string> sites;
  Sim::Stats stats;
};

// Create, bind the root, write, grow, close, reopen, close, then create a new pool over the old
// one. The simulator's memory is twice the pool: room to grow.
constexpr size_t kSimSize = 2 * kSize;
constexpr size_t kGrown = kSize + Pool::kMinGrowth;

ScenarioResult RunPoolScenario() {
  ScenarioResult result;
  auto sim_or = Sim::Create(kSimSize, {});
  EXPECT_OK(sim_or);
  if (!sim_or.ok()) return result;
  Sim& sim = **sim_or;
  auto* w = static_cast<uint8_t*>(sim.working());
  PoolOptions po;
  po.backend = BackendKind::kSim;
  po.sim = &sim;
  po.max_size = kSimSize;
  PoolCrashScenario sc(sim);
  const Persister persister = sim.persister();
  const Site idle("test.pool.idle");

  // The content (everything after the state page) the steps below produce, predicted.
  std::vector<uint8_t> model(kSimSize, 0);
  const uint32_t zero = ContentCrc(model.data(), kSimSize);
  model[8192] = 42;  // Root::counter, at the root region's start
  const uint32_t with_root = ContentCrc(model.data(), kSimSize);
  const size_t heap_off = 8192 + 4096 + 65536 + 262144;
  std::memset(model.data() + heap_off, 0x5A, 64);
  const uint32_t with_heap = ContentCrc(model.data(), kSimSize);
  std::memset(model.data() + kSize + 4096, 0xA5, 64);  // what a growth must zero
  const uint32_t with_junk = ContentCrc(model.data(), kSimSize);
  auto view = [](const char* layout, uint64_t clean, uint64_t count, uint64_t root,
                 uint32_t content, uint64_t size = kSize) {
    return PoolView{layout, clean, count, root, content, size};
  };
  const uint64_t kRoot = sizeof(Root);

  std::unique_ptr<Pool> pool;
  sc.Step("create",
          {{Site("pool.create.header"), view("a", 0, 0, 0, zero), /*fenced=*/false},
           {Site("pool.open.dirty.fence"), view("a", 0, 0, 0, zero)},
           {Site("pool.open.count.fence"), view("a", 0, 1, 0, zero)}},
          [&] {
            auto p = Pool::CreateInMemory(w, kSize, "a", po, "sim-pool");
            EXPECT_OK(p);
            if (p.ok()) pool = std::move(*p);
          });
  if (pool == nullptr) return result;
  Root* root = nullptr;
  sc.Step("bind root", {{Site("pool.root.bind.fence"), view("a", 0, 1, kRoot, zero)}}, [&] {
    auto r = pool->root<Root>();
    EXPECT_OK(r);
    root = r.ok() ? *r : nullptr;
  });
  if (root == nullptr) return result;
  sc.Step("write root", {{Site("test.pool.root.fence"), view("a", 0, 1, kRoot, with_root)}}, [&] {
    root->counter = 42;
    persister.Persist(Site("test.pool.root"), Site("test.pool.root.fence"), root, 8);
  });
  sc.Step("write heap", {{Site("test.pool.heap.fence"), view("a", 0, 1, kRoot, with_heap)}}, [&] {
    void* heap = pool->region_base(PoolRegion::kHeap);
    std::memset(heap, 0x5A, 64);
    persister.Persist(Site("test.pool.heap"), Site("test.pool.heap.fence"), heap, 64);
  });
  // Growth into memory that is not zero: the zeroes are durable before the new size is, and the
  // new size is durable when Grow returns (the pool's own part: a listener standing in for the
  // heap has nothing to write).
  sc.Step("dirty the tail", {{Site("test.pool.tail.fence"), view("a", 0, 1, kRoot, with_junk)}},
          [&] {
            std::memset(w + kSize + 4096, 0xA5, 64);  // one line: all or nothing
            persister.Persist(Site("test.pool.tail"), Site("test.pool.tail.fence"),
                              w + kSize + 4096, 64);
          });
  sc.Step("grow",
          {{Site("pool.grow.zero.fence"), view("a", 0, 1, kRoot, with_heap)},
           {Site("pool.grow.commit.fence"), view("a", 0, 1, kRoot, with_heap, kGrown)}},
          [&] {
            pool->SetGrowthListener(
                {[](uint64_t, uint64_t) { return absl::OkStatus(); }, [](uint64_t, uint64_t) {}});
            EXPECT_OK(pool->Grow(kGrown));
            EXPECT_EQ(pool->size(), kGrown);
          });
  sc.Step("close", {{Site("pool.close.clean.fence"), view("a", 1, 1, kRoot, with_heap, kGrown)}},
          [&] { EXPECT_OK(pool->Close()); });
  sc.Step("idle", {{idle, view("a", 1, 1, kRoot, with_heap, kGrown)}},
          [&] { persister.Fence(idle); });
  sc.Step("reopen",
          {{Site("pool.open.dirty.fence"), view("a", 0, 1, kRoot, with_heap, kGrown)},
           {Site("pool.open.count.fence"), view("a", 0, 2, kRoot, with_heap, kGrown)}},
          [&] {
            auto p = Pool::OpenInMemory(w, kSimSize, "a", po, "sim-pool");
            EXPECT_OK(p);
            if (p.ok()) pool = std::move(*p);
          });
  sc.Step("close again",
          {{Site("pool.close.clean.fence"), view("a", 1, 2, kRoot, with_heap, kGrown)}},
          [&] { EXPECT_OK(pool->Close()); });
  sc.Step("idle", {{idle, view("a", 1, 2, kRoot, with_heap, kGrown)}},
          [&] { persister.Fence(idle); });
  sc.Step("create over the old pool",
          {{Site("pool.create.invalidate.fence"), PoolView{}},
           {Site("pool.create.zero.fence"), PoolView{}},
           {Site("pool.create.header"), view("b", 0, 0, 0, zero), /*fenced=*/false},
           {Site("pool.open.dirty.fence"), view("b", 0, 0, 0, zero)},
           {Site("pool.open.count.fence"), view("b", 0, 1, 0, zero)}},
          [&] {
            auto p = Pool::CreateInMemory(w, kSize, "b", po, "sim-pool");
            EXPECT_OK(p);
            if (p.ok()) pool = std::move(*p);
          });
  sc.Step("close new pool", {{Site("pool.close.clean.fence"), view("b", 1, 1, 0, zero)}},
          [&] { EXPECT_OK(pool->Close()); });
  sc.Step("idle", {{idle, view("b", 1, 1, 0, zero)}}, [&] { persister.Fence(idle); });

  result.failures = sim.failures();
  result.sites = sim.sites_seen();
  result.stats = sim.stats();
  return result;
}

TEST(PoolSimTest, SimBackendNeedsMemoryInsideTheSimulator) {
  auto sim = Sim::Create(kSize, {});
  ASSERT_OK(sim);
  AlignedBuffer elsewhere(kSize);
  std::memset(elsewhere.get(), 0, kSize);
  PoolOptions po;
  po.backend = BackendKind::kSim;
  po.sim = sim->get();
  EXPECT_THAT(Pool::CreateInMemory(elsewhere.get(), kSize, "m", po, "elsewhere"),
              StatusIs(absl::StatusCode::kInvalidArgument, "working copy"));
  EXPECT_EQ((*sim)->stats().flushes + (*sim)->stats().fences, 0u);
  EXPECT_OK(Pool::CreateInMemory((*sim)->working(), kSize, "m", po, "inside"));
}

TEST(PoolSimTest, EveryCrashImageShowsALegalPoolState) {
  ScenarioResult r = RunPoolScenario();
  ASSERT_TRUE(r.failures.empty()) << r.failures[0].ToString();
  EXPECT_GT(r.stats.crash_points, 15u);
  std::printf("pool scenario: %lu crash points, %lu images\n", r.stats.crash_points,
              r.stats.images);
}

// Disabling any one of the pool's flush or fence sites must make the scenario fail.
TEST(PoolSimTest, MutationGateKillsEveryPoolSite) {
  ScenarioResult baseline = RunPoolScenario();
  ASSERT_TRUE(baseline.failures.empty());
  std::vector<std::string> pool_sites;
  for (const auto& [id, name] : baseline.sites) {
    if (name.rfind("pool.", 0) == 0) pool_sites.push_back(name);
  }
  std::sort(pool_sites.begin(), pool_sites.end());
  const std::vector<std::string> expected = {"pool.close.clean",
                                             "pool.close.clean.fence",
                                             "pool.create.header",
                                             "pool.create.invalidate",
                                             "pool.create.invalidate.fence",
                                             "pool.create.zero",
                                             "pool.create.zero.fence",
                                             "pool.grow.commit",
                                             "pool.grow.commit.fence",
                                             "pool.grow.zero",
                                             "pool.grow.zero.fence",
                                             "pool.open.count",
                                             "pool.open.count.fence",
                                             "pool.open.dirty",
                                             "pool.open.dirty.fence",
                                             "pool.root.bind",
                                             "pool.root.bind.fence"};
  EXPECT_EQ(pool_sites, expected) << "a pool site is new, renamed or no longer reached";
  std::vector<std::string> survivors;
  for (const std::string& name : pool_sites) {
    mutation::Disable(Site(name.c_str()));
    ScenarioResult r = RunPoolScenario();
    mutation::EnableAll();
    if (r.failures.empty()) {
      survivors.push_back(name);
    } else {
      std::printf("mutant %-30s killed: %s\n", name.c_str(), r.failures[0].message.c_str());
    }
  }
  EXPECT_TRUE(survivors.empty()) << "surviving mutants: " << ::testing::PrintToString(survivors);
}

}  // namespace
}  // namespace pmrt
