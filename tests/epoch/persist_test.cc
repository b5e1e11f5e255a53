#include "epoch/persist.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "testing/sim.h"
#include "tests/util/test_util.h"

namespace pmrt {
namespace {

using ::pmrt::testing::StatusIs;

constexpr size_t kMapSize = 1 << 20;

// A 1 MiB file in a fresh temporary directory (tmpfs when available), mapped shared.
class MappedFile {
 public:
  MappedFile() {
    const std::string path = dir_.File("persist.bin");
    fd_ = open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd_ < 0 || ftruncate(fd_, kMapSize) != 0) return;
    void* p = mmap(nullptr, kMapSize, PROT_READ | PROT_WRITE, MAP_SHARED, fd_, 0);
    if (p != MAP_FAILED) base_ = static_cast<uint8_t*>(p);
  }
  ~MappedFile() {
    if (base_ != nullptr) munmap(base_, kMapSize);
    if (fd_ >= 0) close(fd_);
  }
  uint8_t* base() const { return base_; }
  int fd() const { return fd_; }

 private:
  testing::TempDir dir_;
  int fd_ = -1;
  uint8_t* base_ = nullptr;
};

constexpr Site kFlushSite{"test.persist.flush"};
constexpr Site kFenceSite{"test.persist.fence"};
constexpr Site kBatchSite{"test.persist.batch"};

TEST(PersistTest, BackendNamesRoundTrip) {
  for (BackendKind kind :
       {BackendKind::kPmem, BackendKind::kEadr, BackendKind::kMsync, BackendKind::kSim}) {
    auto parsed = ParseBackend(BackendName(kind));
    ASSERT_OK(parsed);
    EXPECT_EQ(*parsed, kind);
  }
  EXPECT_EQ(BackendName(BackendKind::kPmem), "pmem");
  EXPECT_EQ(BackendName(BackendKind::kEadr), "eadr");
  EXPECT_EQ(BackendName(BackendKind::kMsync), "msync");
  EXPECT_EQ(BackendName(BackendKind::kSim), "sim");
}

TEST(PersistTest, ParseBackendRejectsUnknownNamesNamingThem) {
  EXPECT_THAT(ParseBackend("dax"), StatusIs(absl::StatusCode::kInvalidArgument, "'dax'"));
  EXPECT_THAT(ParseBackend("PMEM"), StatusIs(absl::StatusCode::kInvalidArgument, "'PMEM'"));
  EXPECT_THAT(ParseBackend(""), StatusIs(absl::StatusCode::kInvalidArgument, "''"));
  EXPECT_THAT(ParseBackend("pmem "), StatusIs(absl::StatusCode::kInvalidArgument, "'pmem '"));
}

TEST(PersistTest, RecordWritesNamesRoundTripAndBadOnesAreNamed) {
  for (RecordWrites w : {RecordWrites::kStream, RecordWrites::kFlush}) {
    auto parsed = ParseRecordWrites(RecordWritesName(w));
    ASSERT_OK(parsed);
    EXPECT_EQ(*parsed, w);
  }
  EXPECT_EQ(RecordWritesName(RecordWrites::kStream), "stream");
  EXPECT_EQ(RecordWritesName(RecordWrites::kFlush), "flush");
  EXPECT_THAT(ParseRecordWrites("clwb"), StatusIs(absl::StatusCode::kInvalidArgument, "'clwb'"));
  EXPECT_THAT(ParseRecordWrites(""), StatusIs(absl::StatusCode::kInvalidArgument, "''"));
  // The default is the processor's: by its vendor, the same on every call; a Persister takes
  // it unless told.
  EXPECT_EQ(RecordWritesForVendor("AuthenticAMD"), RecordWrites::kStream);
  EXPECT_EQ(RecordWritesForVendor("HygonGenuine"), RecordWrites::kStream);
  EXPECT_EQ(RecordWritesForVendor("GenuineIntel"), RecordWrites::kFlush);
  EXPECT_EQ(RecordWritesForVendor("CentaurHauls"), RecordWrites::kFlush);
  EXPECT_EQ(DefaultRecordWrites(), DefaultRecordWrites());
  EXPECT_EQ(Persister(BackendKind::kPmem, nullptr).record_writes(), DefaultRecordWrites());
#if defined(__x86_64__)
  // The register order of the vendor string, checked against /proc/cpuinfo where it exists.
  std::ifstream cpuinfo("/proc/cpuinfo");
  for (std::string line; std::getline(cpuinfo, line);) {
    if (line.rfind("vendor_id", 0) == 0) {
      const std::string vendor = line.substr(line.find(':') + 2);
      EXPECT_EQ(DefaultRecordWrites(), RecordWritesForVendor(vendor)) << vendor;
      break;
    }
  }
#else
  EXPECT_EQ(DefaultRecordWrites(), RecordWrites::kFlush);  // no non-temporal path here
#endif
}

TEST(PersistTest, FlushesInlineOnlyOnPmemWhereTheProcessorHasClwb) {
  // Only kPmem flushes with an inline clwb, and there exactly where InlineClwb says.
  EXPECT_EQ(Persister(BackendKind::kPmem, nullptr).FlushesInline(), epoch_internal::InlineClwb());
  for (const BackendKind k : {BackendKind::kEadr, BackendKind::kMsync, BackendKind::kSim}) {
    EXPECT_FALSE(Persister(k, nullptr).FlushesInline()) << BackendName(k);
  }
#if defined(__x86_64__)
  // InlineClwb is the processor's clwb flag (checked against /proc/cpuinfo where it exists),
  // unless libpmem's PMEM_NO_CLWB=1 or PMEM_NO_FLUSH=1 turns it off.
  bool off = false;
  for (const char* var : {"PMEM_NO_CLWB", "PMEM_NO_FLUSH"}) {
    const char* v = std::getenv(var);
    off |= v != nullptr && std::string(v) == "1";
  }
  std::ifstream cpuinfo("/proc/cpuinfo");
  for (std::string line; std::getline(cpuinfo, line);) {
    if (line.rfind("flags", 0) == 0) {
      const bool clwb = (line + " ").find(" clwb ") != std::string::npos;
      EXPECT_EQ(epoch_internal::InlineClwb(), clwb && !off) << line;
      break;
    }
  }
#else
  EXPECT_FALSE(epoch_internal::InlineClwb());
#endif
}

TEST(PersistTest, InlineClwbWritesBackWhatItIsGivenAndCountsNothing) {
  Persister p(BackendKind::kPmem, nullptr);
  if (!p.FlushesInline()) GTEST_SKIP() << "no clwb here (or PMEM_NO_CLWB / PMEM_NO_FLUSH)";
  alignas(64) static uint8_t buf[256];
  const PersistCounts before = CountersSnapshot(BackendKind::kPmem);
  for (size_t off : {0, 1, 63, 64, 100}) {
    for (size_t len : {0, 1, 8, 48, 64, 65, 130}) {
      if (off + len > sizeof(buf)) continue;
      std::memset(buf + off, static_cast<int>(off + len), len);
      if (len != 0) PmemOps::Clwb(p, kFlushSite, buf + off, len);  // every line, none past it
      for (size_t i = 0; i < len; ++i) ASSERT_EQ(buf[off + i], static_cast<uint8_t>(off + len));
    }
  }
  const PersistCounts d = CountersSnapshot(BackendKind::kPmem) - before;
  EXPECT_EQ(d.flushes, 0u);  // counted by the caller (CountStream)
  p.CountStream(buf + 40, 48);
  const PersistCounts e = CountersSnapshot(BackendKind::kPmem) - before;
  EXPECT_EQ(e.flushes, 1u);
  EXPECT_EQ(e.bytes_flushed, 48u);
  EXPECT_EQ(e.lines_flushed, 2u);  // [40, 88) crosses a line
  EXPECT_EQ(e.fences, 0u);         // a fence is counted where it is issued
  p.Fence(kFenceSite);
  EXPECT_EQ((CountersSnapshot(BackendKind::kPmem) - before).fences, 1u);
  // PmemOps counts the same way: the fence only when it is issued.
  epoch_internal::ThreadCounters& c = epoch_internal::LocalCounters();
  PmemOps::CountFlush(p, c, buf, 64);
  EXPECT_EQ((CountersSnapshot(BackendKind::kPmem) - before).fences, 1u);
  PmemOps::Fence(p, kFenceSite, c);
  const PersistCounts f = CountersSnapshot(BackendKind::kPmem) - before;
  EXPECT_EQ(f.flushes, 2u);
  EXPECT_EQ(f.fences, 2u);
}

TEST(PersistTest, ASimThatModelsPmemAnswersAsPmem) {
  Sim::Options o;
  o.pmem = true;
  auto sim = Sim::Create(1 << 16, o);
  ASSERT_OK(sim);
  for (const RecordWrites w : {RecordWrites::kStream, RecordWrites::kFlush}) {
    Persister p(BackendKind::kSim, sim->get(), w);
    EXPECT_TRUE(p.FlushesInline());
#if defined(__x86_64__)
    EXPECT_EQ(p.StreamsRecords(48), w == RecordWrites::kStream);
    EXPECT_TRUE(p.StreamsRecords(kStreamAlwaysFrom));
#endif
  }
  auto plain = Sim::Create(1 << 16, Sim::Options{});
  ASSERT_OK(plain);
  EXPECT_FALSE(Persister(BackendKind::kSim, plain->get()).FlushesInline());
  EXPECT_FALSE(Persister(BackendKind::kSim, plain->get()).StreamsRecords(kStreamAlwaysFrom));
}

TEST(PersistTest, SiteIdsAreStableNonzeroAndDistinct) {
  // FNV-1a 32 of the name, so an id given on a command line means the same site in every build.
  static_assert(Site("a").id == 0xE40C292Cu);
  static_assert(Site("pool.create.header").id == Site("pool.create.header").id);
  EXPECT_EQ(Site("").id, 2166136261u);  // the FNV offset basis: empty name, nothing hashed
  EXPECT_NE(Site("txn.commit.record").id, Site("txn.commit.fence").id);
  EXPECT_NE(kFlushSite.id, 0u);
  EXPECT_NE(kFenceSite.id, 0u);
  // A name built at run time gets the same id as the constexpr one.
  std::string name = "test.persist.";
  name += "flush";
  EXPECT_EQ(Site(name.c_str()).id, kFlushSite.id);
  EXPECT_STREQ(kFlushSite.name, "test.persist.flush");
}

// Flushes of various shapes on `p`, with the counts of `kind` checked after each.
void ExpectCounts(const Persister& p, uint8_t* base) {
  const BackendKind kind = p.kind();
  PersistCounts before = CountersSnapshot(kind);
  auto delta = [&] { return CountersSnapshot(kind) - before; };

  std::memset(base, 1, 100);
  p.Flush(kFlushSite, base, 100);  // lines 0 and 1
  EXPECT_EQ(delta().flushes, 1u);
  EXPECT_EQ(delta().lines_flushed, 2u);
  EXPECT_EQ(delta().bytes_flushed, 100u);
  EXPECT_EQ(delta().fences, 0u);

  p.Flush(kFlushSite, base + 60, 8);  // straddles lines 0 and 1
  EXPECT_EQ(delta().lines_flushed, 4u);
  p.Flush(kFlushSite, base + 64, 64);  // exactly line 1
  EXPECT_EQ(delta().lines_flushed, 5u);
  p.Flush(kFlushSite, base + 4096 * 3, 0);  // empty: a call, no lines
  EXPECT_EQ(delta().flushes, 4u);
  EXPECT_EQ(delta().lines_flushed, 5u);
  EXPECT_EQ(delta().bytes_flushed, 100u + 8 + 64);

  p.Fence(kFenceSite);
  EXPECT_EQ(delta().fences, 1u);

  std::memset(base + 8192, 2, 4096);
  const Range ranges[] = {{base + 8192, 4096}, {base + 20000, 10}, {base, 1}};
  p.FlushBatch(kBatchSite, ranges);
  EXPECT_EQ(delta().batch_flushes, 1u);
  EXPECT_EQ(delta().flushes, 4u + 3);
  EXPECT_EQ(delta().lines_flushed, 5u + 64 + 1 + 1);
  EXPECT_EQ(delta().fences, 2u);  // the batch ends with one fence

  p.Persist(kFlushSite, kFenceSite, base + 128, 64);
  EXPECT_EQ(delta().flushes, 8u);
  EXPECT_EQ(delta().fences, 3u);
}

TEST(PersistTest, EadrCountsFlushesLinesAndFences) {
  MappedFile f;
  ASSERT_NE(f.base(), nullptr);
  const PersistCounts other_before = CountersSnapshot(BackendKind::kMsync);
  ExpectCounts(Persister(BackendKind::kEadr, nullptr), f.base());
  const PersistCounts other_after = CountersSnapshot(BackendKind::kMsync);
  EXPECT_EQ(other_after.flushes, other_before.flushes);
  EXPECT_EQ(other_after.fences, other_before.fences);
}

TEST(PersistTest, MsyncCountsFlushesLinesAndFencesOnAFileMapping) {
  MappedFile f;
  ASSERT_NE(f.base(), nullptr);
  const PersistCounts other_before = CountersSnapshot(BackendKind::kEadr);
  ExpectCounts(Persister(BackendKind::kMsync, nullptr), f.base());
  const PersistCounts other_after = CountersSnapshot(BackendKind::kEadr);
  EXPECT_EQ(other_after.flushes, other_before.flushes);
  // The data written through the mapping is in the file.
  uint8_t byte = 0;
  ASSERT_EQ(pread(f.fd(), &byte, 1, 8192 + 17), 1);
  EXPECT_EQ(byte, 2);
}

TEST(PersistTest, MsyncFenceWithNothingRecordedIsHarmless) {
  const Persister p(BackendKind::kMsync, nullptr);
  const PersistCounts before = CountersSnapshot(BackendKind::kMsync);
  p.Fence(kFenceSite);
  p.Fence(kFenceSite);
  EXPECT_EQ((CountersSnapshot(BackendKind::kMsync) - before).fences, 2u);
}

// n bytes that differ from their neighbours and from zero (a copy's source).
std::vector<uint8_t> Pattern(size_t n) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(i * 7 + 1);
  return v;
}

// CopyFlush copies on every backend and counts as a flush of the destination; on kPmem it
// takes the non-temporal path for aligned ranges (with RecordWrites::kStream, or from
// kStreamAlwaysFrom bytes) and memcpy + flush otherwise: the same bytes and counts either way.
TEST(PersistTest, CopyFlushCopiesAndCountsOnEveryBackend) {
  MappedFile f;
  ASSERT_NE(f.base(), nullptr);
  const std::vector<uint8_t> src = Pattern(kStreamAlwaysFrom + 8);
  for (BackendKind kind : {BackendKind::kPmem, BackendKind::kEadr, BackendKind::kMsync}) {
    for (RecordWrites w : {RecordWrites::kStream, RecordWrites::kFlush}) {
      const std::string what =
          absl::StrCat(std::string(BackendName(kind)), " ", std::string(RecordWritesName(w)));
      const Persister p(kind, nullptr, w);
      EXPECT_EQ(p.record_writes(), w);
      const PersistCounts before = CountersSnapshot(kind);
      // Aligned (the log's case), starting mid-line; unaligned start and length; aligned and
      // long enough to stream in either mode.
      uint8_t* a = f.base() + 4096 + 24;
      uint8_t* b = f.base() + 8192 + 3;
      uint8_t* c = f.base() + 12288 + 8;
      p.CopyFlush(kFlushSite, a, src.data(), 296);
      p.CopyFlush(kFlushSite, b, src.data(), 45);
      p.CopyFlush(kFlushSite, c, src.data(), kStreamAlwaysFrom + 8);
      p.Fence(kFenceSite);
      EXPECT_EQ(std::memcmp(a, src.data(), 296), 0) << what;
      EXPECT_EQ(std::memcmp(b, src.data(), 45), 0) << what;
      EXPECT_EQ(std::memcmp(c, src.data(), kStreamAlwaysFrom + 8), 0) << what;
      const PersistCounts d = CountersSnapshot(kind) - before;
      EXPECT_EQ(d.flushes, 3u) << what;
      EXPECT_EQ(d.bytes_flushed, 296u + 45 + kStreamAlwaysFrom + 8) << what;
      // bytes 24..319: lines 0-4; 3..47: line 0; 8..527: lines 0-8
      EXPECT_EQ(d.lines_flushed, 5u + 1 + 9) << what;
      EXPECT_EQ(d.fences, 1u) << what;
      std::memset(a, 0, 296);
      std::memset(b, 0, 45);
      std::memset(c, 0, kStreamAlwaysFrom + 8);
    }
  }
  // A disabled site still copies (the bytes are in place; only the write-back is missing).
  mutation::Disable(kFlushSite);
  const Persister p(BackendKind::kPmem, nullptr);
  const PersistCounts before = CountersSnapshot(BackendKind::kPmem);
  p.CopyFlush(kFlushSite, f.base(), src.data(), 64);
  mutation::EnableAll();
  EXPECT_EQ(std::memcmp(f.base(), src.data(), 64), 0);
  EXPECT_EQ((CountersSnapshot(BackendKind::kPmem) - before).flushes, 0u);
}

// The non-temporal path mixes 8- and 16-byte stores by the destination's alignment: every
// 8-byte aligned start (mod 16) and length copies exactly its bytes and nothing around them.
TEST(PersistTest, CopyFlushNonTemporalCopiesEveryAlignmentAndLengthExactly) {
  MappedFile f;
  ASSERT_NE(f.base(), nullptr);
  const std::vector<uint8_t> src = Pattern(256);
  const Persister p(BackendKind::kPmem, nullptr, RecordWrites::kStream);  // whatever the CPU
  for (size_t start : {0, 8, 16, 24}) {
    for (size_t len = 8; len <= 136; len += 8) {
      uint8_t* region = f.base() + 4096;
      std::memset(region, 0xEE, 512);
      p.CopyFlush(kFlushSite, region + 64 + start, src.data() + start, len);
      p.Fence(kFenceSite);
      ASSERT_EQ(std::memcmp(region + 64 + start, src.data() + start, len), 0)
          << "start " << start << " len " << len;
      for (size_t i = 0; i < 512; ++i) {
        if (i >= 64 + start && i < 64 + start + len) continue;
        ASSERT_EQ(region[i], 0xEE) << "byte " << i << " start " << start << " len " << len;
      }
    }
  }
}

TEST(PersistTest, DisabledSiteIsANoOp) {
  MappedFile f;
  ASSERT_NE(f.base(), nullptr);
  const Persister p(BackendKind::kEadr, nullptr);
  const PersistCounts before = CountersSnapshot(BackendKind::kEadr);

  mutation::Disable(kFlushSite);
  EXPECT_TRUE(mutation::IsDisabled(kFlushSite));
  EXPECT_FALSE(mutation::IsDisabled(kFenceSite));
  EXPECT_TRUE(mutation::Swapped(kFlushSite));
  p.Flush(kFlushSite, f.base(), 64);
  EXPECT_EQ((CountersSnapshot(BackendKind::kEadr) - before).flushes, 0u);
  p.Flush(Site("test.persist.other"), f.base(), 64);  // other sites still work
  EXPECT_EQ((CountersSnapshot(BackendKind::kEadr) - before).flushes, 1u);
  p.Fence(kFenceSite);
  EXPECT_EQ((CountersSnapshot(BackendKind::kEadr) - before).fences, 1u);

  mutation::Disable(kFenceSite.id);
  p.Fence(kFenceSite);
  EXPECT_EQ((CountersSnapshot(BackendKind::kEadr) - before).fences, 1u);
  p.Flush(kFlushSite, f.base(), 64);  // only one site is disabled at a time
  EXPECT_EQ((CountersSnapshot(BackendKind::kEadr) - before).flushes, 2u);

  mutation::Disable(kBatchSite);
  const Range r[] = {{f.base(), 64}};
  p.FlushBatch(kBatchSite, r);  // the whole batch, fence included
  PersistCounts d = CountersSnapshot(BackendKind::kEadr) - before;
  EXPECT_EQ(d.batch_flushes, 0u);
  EXPECT_EQ(d.flushes, 2u);
  EXPECT_EQ(d.fences, 1u);

  mutation::EnableAll();
  EXPECT_FALSE(mutation::IsDisabled(kBatchSite));
  p.FlushBatch(kBatchSite, r);
  d = CountersSnapshot(BackendKind::kEadr) - before;
  EXPECT_EQ(d.batch_flushes, 1u);
  EXPECT_EQ(d.fences, 2u);
}

TEST(PersistTest, CountsOfExitedThreadsAreKept) {
  MappedFile f;
  ASSERT_NE(f.base(), nullptr);
  const Persister p(BackendKind::kEadr, nullptr);
  const PersistCounts before = CountersSnapshot(BackendKind::kEadr);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&p, &f, t] {
      for (int i = 0; i < 1000; ++i) p.Flush(kFlushSite, f.base() + t * 4096, 128);
      p.Fence(kFenceSite);
    });
  }
  for (auto& t : threads) t.join();
  const PersistCounts d = CountersSnapshot(BackendKind::kEadr) - before;
  EXPECT_EQ(d.flushes, 4000u);
  EXPECT_EQ(d.lines_flushed, 8000u);
  EXPECT_EQ(d.fences, 4u);
  EXPECT_GE(CountersSnapshotAll().flushes, d.flushes);
}

}  // namespace
}  // namespace pmrt
