// Unit tests of txn/: the API (begin/commit/abort, Run, Scope, nesting, misuse), abort
// restoring memory and allocations, hot/cold transitions (fences per commit), log block
// chaining and reuse through reclamation, allocation inside transactions across a crash, the
// commit-order rule across threads, a thread exiting inside a transaction, and a second engine's
// transaction nested in the default engine's. "Crash" here copies the whole pool while it is open
// (every store kept, as after a process kill); flush placement is txn_crash_test's job.
#include "txn/txn.h"

#if defined(__x86_64__)
#include <cpuid.h>
#endif

#include <algorithm>
#include <array>
#include <condition_variable>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <future>
#include <map>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/crc32c.h"
#include "base/status_macros.h"
#include "epoch/persist.h"
#include "gtest/gtest.h"
#include "tests/txn/txn_runtime.h"
#include "tests/util/test_util.h"
#include "txn/internal/engine_impl.h"
#include "txn/internal/log_store.h"

namespace pmrt::txn {
namespace {

using ::pmrt::testing::StatusIs;
using testing::Buffer;
using testing::OpenMemory;
using testing::RecordShape;
using testing::Runtime;
using testing::ShapeOf;
using testing::ThreadLogRecords;

constexpr size_t kPoolSize = 16 << 20;
constexpr int kWords = 500;

struct Root {
  uint64_t words[kWords];
  uint64_t obj;  // pool offset of a transactionally allocated object
};

struct Obj {
  uint64_t a, b, c;
};

PoolOptions Eadr() {
  PoolOptions po;
  po.backend = BackendKind::kEadr;
  return po;
}

Options Quiet(size_t block = 4096) {
  Options o;
  o.background = false;
  o.block_size = block;
  o.log_budget = 1 << 20;
  return o;
}

// The heap's live blocks other than the engine's own (its directory and log blocks).
std::set<uint64_t> UserBlocks(Runtime& rt) {
  std::set<uint64_t> s;
  (void)rt.heap->Walk([&](const alloc::BlockInfo& b) { s.insert(b.offset); });
  for (uint64_t off : rt.engine->OwnedBlocks()) s.erase(off);
  return s;
}

class TxnTest : public ::testing::Test {
 protected:
  void Open(const Options& o = Quiet()) {
    auto r = OpenMemory(buf_.data(), kPoolSize, Eadr(), o, /*create=*/true);
    ASSERT_OK(r);
    rt_ = std::move(*r);
    auto root = rt_.pool->root<Root>();
    ASSERT_OK(root);
    root_ = *root;
  }
  // Copies the open pool (a crash keeping every store), closes the original, and recovers the
  // copy in place of it.
  void CrashAndRecover(const Options& o = Quiet()) {
    Buffer image(kPoolSize);
    image.CopyFrom(buf_.data());
    rt_.Reset();
    buf_.CopyFrom(image.data());
    auto r = OpenMemory(buf_.data(), kPoolSize, Eadr(), o, /*create=*/false);
    ASSERT_OK(r);
    rt_ = std::move(*r);
    root_ = *rt_.pool->root<Root>();
  }
  // The same over a pool of other options (po: its backend and record writes), the crash also
  // losing the in-place stores of the array's first `lost_words` words (scribbled over in the
  // image): only the records can bring their values back.
  void CrashAndRecoverWith(const PoolOptions& po, size_t lost_words = 0) {
    Buffer image(kPoolSize);
    image.CopyFrom(buf_.data());
    rt_.Reset();
    buf_.CopyFrom(image.data());
    std::memset(root_->words, 0xAB, sizeof(uint64_t) * lost_words);  // (root_ is in buf_)
    auto r = OpenMemory(buf_.data(), kPoolSize, po, Quiet(), /*create=*/false);
    ASSERT_OK(r);
    rt_ = std::move(*r);
    root_ = *rt_.pool->root<Root>();
  }
  Engine& engine() { return *rt_.engine; }
  // Closes the engine (its write-back, the log retired), then the rest, and opens the pool
  // again: a clean shutdown.
  void CloseCleanlyAndReopen() {
    rt_.engine.reset();
    EXPECT_FALSE(rt_.pool->txn_engine_open());
    rt_.Reset();
    auto r = OpenMemory(buf_.data(), kPoolSize, Eadr(), Quiet(), /*create=*/false);
    ASSERT_OK(r);
    rt_ = std::move(*r);
    root_ = *rt_.pool->root<Root>();
  }
  // Word 5 is written, the epoch advances `advances` times, and a transaction touches the word
  // (in place, no snapshot: it is hot) and is still open while the reclaimer runs: the word's
  // record must stay, so a crash before the commit recovers the value from before it.
  void ExpectTouchedWordStaysHotThroughACycle(const Options& o, int advances) {
    Open(o);
    ASSERT_OK(txn::Run([&] { return write(&root_->words[5], uint64_t{1}); }));
    for (int i = 0; i < advances; ++i) ASSERT_OK(rt_.epochs->Advance());
    ASSERT_OK(begin());
    ASSERT_OK(write(&root_->words[5], uint64_t{2}));
    std::thread reclaimer([&] { ASSERT_OK(engine().Reclaim(/*advance=*/false)); });
    reclaimer.join();
    EXPECT_GT(engine().stats().cycles, 0u);
    Buffer image(kPoolSize);
    image.CopyFrom(buf_.data());
    ASSERT_OK(commit());
    EXPECT_EQ(engine().stats().words_cold, 0u);
    rt_.Reset();
    buf_.CopyFrom(image.data());
    auto r = OpenMemory(buf_.data(), kPoolSize, Eadr(), o, false);
    ASSERT_OK(r);
    rt_ = std::move(*r);
    EXPECT_EQ((*rt_.pool->root<Root>())->words[5], 1u);  // undone from the kept record
  }

  Buffer buf_{kPoolSize};
  Runtime rt_;
  Root* root_ = nullptr;
};

// The record checksum's fast path (whole words, crc field masked) equals the on-media
// definition: CRC32C of the record with its crc field taken as zero.
TEST(TxnRecordCrc, FastPathMatchesTheDefinition) {
  std::vector<uint64_t> buf(64);
  uint64_t x = 0x9E3779B97F4A7C15ull;
  for (uint16_t words = 4; words <= 64; ++words) {
    for (uint64_t& v : buf) v = (x = x * 6364136223846793005ull + 1442695040888963407ull);
    auto* h = reinterpret_cast<pmrt::txn_internal::RecordHeader*>(buf.data());
    h->words = words;
    EXPECT_EQ(pmrt::txn_internal::RecordCrc(h), pmrt::txn_internal::RecordCrcReference(h)) << words;
  }
}

TEST_F(TxnTest, CommitIsDurableAndAbortRestores) {
  Open();
  ASSERT_OK(begin());
  for (int i = 0; i < 10; ++i) ASSERT_OK(write(&root_->words[i], uint64_t(100 + i)));
  ASSERT_OK(commit());
  ASSERT_OK(begin());
  for (int i = 0; i < 10; ++i) ASSERT_OK(write(&root_->words[i], uint64_t(900 + i)));
  ASSERT_OK(add(&root_->words[20], 16));
  root_->words[20] = 7;
  root_->words[21] = 8;
  ASSERT_OK(abort());
  for (int i = 0; i < 10; ++i) EXPECT_EQ(root_->words[i], uint64_t(100 + i));
  EXPECT_EQ(root_->words[20], 0u);
  EXPECT_EQ(root_->words[21], 0u);
  CrashAndRecover();
  for (int i = 0; i < 10; ++i) EXPECT_EQ(root_->words[i], uint64_t(100 + i));
  EXPECT_EQ(root_->words[20], 0u);
}

// txn::prefetch is a hint: inside or outside a transaction, in the pool or not (even past its
// end, or after the engine has closed), it changes no value and no transaction's outcome.
TEST_F(TxnTest, PrefetchIsOnlyAHint) {
  Open();
  ASSERT_EQ(Engine::Default(), &engine());
  EXPECT_EQ(txn_internal::g_prefetch_base.load(), reinterpret_cast<uintptr_t>(rt_.pool->base()));
  EXPECT_EQ(txn_internal::g_prefetch_size.load(), rt_.pool->size());
  uint64_t local = 3;
  prefetch(&root_->words[7]);  // outside a transaction
  prefetch(&local);
  ASSERT_OK(begin());
  ASSERT_OK(write(&root_->words[7], uint64_t{70}));
  prefetch(&root_->words[8], 3 * 64);                       // a range of lines
  prefetch(rt_.pool->base() + rt_.pool->size() - 8, 4096);  // running past the pool's end
  prefetch(nullptr);
  prefetch(&local, 8);
  ASSERT_OK(commit());
  EXPECT_EQ(root_->words[7], 70u);
  EXPECT_EQ(root_->words[8], 0u);
  EXPECT_EQ(local, 3u);
  ASSERT_OK(begin());
  ASSERT_OK(write(&root_->words[8], uint64_t{80}));
  prefetch(&root_->words[7]);
  ASSERT_OK(abort());
  EXPECT_EQ(root_->words[8], 0u);
  CrashAndRecover();
  EXPECT_EQ(root_->words[7], 70u);
  EXPECT_EQ(root_->words[8], 0u);
  uint8_t* const base = rt_.pool->base();
  rt_.Reset();  // the default engine closes: data only from now on
  EXPECT_EQ(Engine::Default(), nullptr);
  EXPECT_EQ(txn_internal::g_prefetch_size.load(), 0u);
  prefetch(base);
  prefetch(&local);
}

// PrefetchForWrite (add()'s slot prefetch, the small commit's log line ahead of its record) is a
// hint on any address, with PREFETCHW and without: commits that run up to and across log block
// ends (where the log prefetch points past the block) give the values written.
TEST_F(TxnTest, PrefetchForWriteIsOnlyAHint) {
#if defined(__x86_64__)
  unsigned a = 0, b = 0, c = 0, d = 0;
  const bool has = __get_cpuid(0x80000001u, &a, &b, &c, &d) != 0 && (c & (1u << 8)) != 0;
  EXPECT_EQ(txn_internal::g_prefetchw, has);
#endif
  const bool detected = txn_internal::g_prefetchw;
  Open();
  uint64_t local = 5;
  std::vector<uint64_t> want(128, 0);
  for (const bool with : {detected, false}) {
    SCOPED_TRACE(with ? "PREFETCHW" : "plain prefetch");
    txn_internal::g_prefetchw = with;  // (no other thread calls PrefetchForWrite in this test)
    txn_internal::PrefetchForWrite(nullptr);
    txn_internal::PrefetchForWrite(&local);
    txn_internal::PrefetchForWrite(rt_.pool->base() + rt_.pool->size() + 4096);
    EXPECT_EQ(local, 5u);
    engine().SealLogsForTesting();  // the next records start a new block
    // One-word and two-word commits, more than a 32 KiB block holds.
    for (uint64_t n = 0; n < 1500; ++n) {
      ASSERT_OK(begin());
      ASSERT_OK(write(&root_->words[n % 64], n));
      want[n % 64] = n;
      if (n % 3 == 0) {
        ASSERT_OK(write(&root_->words[64 + n % 64], n + 1));
        want[64 + n % 64] = n + 1;
      }
      ASSERT_OK(commit());
    }
    for (size_t w = 0; w < want.size(); ++w) EXPECT_EQ(root_->words[w], want[w]) << w;
  }
  txn_internal::g_prefetchw = detected;
  CrashAndRecover();
  for (size_t w = 0; w < want.size(); ++w) EXPECT_EQ(root_->words[w], want[w]) << w;
}

// A word declared many times in one transaction (the write list keeps duplicates and is
// compacted past kCompactWritesAt): abort restores the value from before the transaction, a
// commit records the last value once.

// Small commits compute the checksum alongside the entries where the processor has the crc32
// instruction, predicting a record without duplicates or runs; the portable path and the
// mispredicted cases compute it after. Every variant must recover.
TEST_F(TxnTest, SmallCommitChecksumsRecoverOnEveryPath) {
  const bool saved = txn_internal::g_crc_in_commit_loop;
  for (const bool in_loop : {saved, false}) {
    txn_internal::g_crc_in_commit_loop = in_loop;
    Open();
    ASSERT_OK(txn::Run([&]() -> absl::Status {  // distinct, no runs: the prediction holds
      for (int i = 0; i < 8; ++i) RETURN_IF_ERROR(write(&root_->words[3 * i], uint64_t(10 + i)));
      return absl::OkStatus();
    }));
    ASSERT_OK(txn::Run([&]() -> absl::Status {  // a duplicate
      RETURN_IF_ERROR(write(&root_->words[40], uint64_t{1}));
      RETURN_IF_ERROR(write(&root_->words[50], uint64_t{2}));
      return write(&root_->words[40], uint64_t{3});
    }));
    ASSERT_OK(txn::Run([&]() -> absl::Status {  // a run
      RETURN_IF_ERROR(write(&root_->words[60], uint64_t{4}));
      return write(&root_->words[61], uint64_t{5});
    }));
    CrashAndRecover();
    for (int i = 0; i < 8; ++i) EXPECT_EQ(root_->words[3 * i], uint64_t(10 + i)) << in_loop;
    EXPECT_EQ(root_->words[40], 3u);
    EXPECT_EQ(root_->words[50], 2u);
    EXPECT_EQ(root_->words[60], 4u);
    EXPECT_EQ(root_->words[61], 5u);
    rt_.Reset();
  }
  txn_internal::g_crc_in_commit_loop = saved;
}
TEST_F(TxnTest, RepeatedDeclarationsAbortAndCommit) {
  Open();
  ASSERT_OK(begin());
  for (int i = 0; i < 4; ++i) ASSERT_OK(write(&root_->words[i], uint64_t(10 + i)));
  ASSERT_OK(commit());
  for (const int repeats : {3, 1000}) {
    ASSERT_OK(begin());
    for (int r = 0; r < repeats; ++r) {
      for (int i = 0; i < 4; ++i) ASSERT_OK(write(&root_->words[i], uint64_t(1000 * r + i)));
      ASSERT_OK(write(&root_->words[30], uint64_t(r + 1)));  // cold before this transaction
    }
    ASSERT_OK(abort());
    for (int i = 0; i < 4; ++i) EXPECT_EQ(root_->words[i], uint64_t(10 + i)) << repeats;
    EXPECT_EQ(root_->words[30], 0u) << repeats;
  }
  const uint64_t bytes_before = engine().stats().record_bytes;
  ASSERT_OK(begin());
  for (int r = 0; r < 1000; ++r)
    for (int i = 0; i < 4; ++i) ASSERT_OK(write(&root_->words[i], uint64_t(5000 + r + i)));
  ASSERT_OK(commit());
  // One record: header, one entry head for the run of 4 words, 4 values.
  EXPECT_EQ(engine().stats().record_bytes - bytes_before, 32u + 8u + 4 * 8u);
  // A small transaction (deduplicated in declaration order, no sort): descending words and a
  // repeat. Four single-word entries.
  const uint64_t bytes_mid = engine().stats().record_bytes;
  ASSERT_OK(begin());
  for (int i = 3; i >= 0; --i) ASSERT_OK(write(&root_->words[10 + i], uint64_t(70 + i)));
  ASSERT_OK(write(&root_->words[12], uint64_t(99)));
  ASSERT_OK(commit());
  EXPECT_EQ(engine().stats().record_bytes - bytes_mid, 32u + 4 * 16u);
  CrashAndRecover();
  for (int i = 0; i < 4; ++i) EXPECT_EQ(root_->words[i], uint64_t(5999 + i));
  EXPECT_EQ(root_->words[10], 70u);
  EXPECT_EQ(root_->words[11], 71u);
  EXPECT_EQ(root_->words[12], 99u);
  EXPECT_EQ(root_->words[13], 73u);
  EXPECT_EQ(root_->words[30], 0u);
}

// A small commit (no allocation or free, at most kSmallCommitWrites declarations) builds its
// record in one pass in declaration order; a larger one sorts. Both record each word once with
// its last value, and recovery replays either.
TEST_F(TxnTest, SmallAndGeneralCommitsRecordEachWordOnceWithItsLastValue) {
  Open();
  // Every word hot first, so that no snapshot interleaves.
  ASSERT_OK(begin());
  for (int i = 0; i < 64; ++i) ASSERT_OK(write(&root_->words[i], uint64_t{1}));
  ASSERT_OK(commit());
  const std::vector<int> order = {5, 6, 5, 7, 8, 20, 19, 21, 21};
  auto declare = [&](uint64_t base) -> absl::Status {
    for (size_t j = 0; j < order.size(); ++j) {
      RETURN_IF_ERROR(write(&root_->words[order[j]], base + j));
    }
    for (int w = 40; w < 60; ++w) RETURN_IF_ERROR(write(&root_->words[w], base + 100 + w));
    return absl::OkStatus();
  };
  // 29 declarations: the small path. Runs in declaration order: {5,6,7,8} (the repeat of 5
  // inside the run is dropped), {20}, {19}, {21}, {40..59}: 5 heads and 27 values.
  uint64_t before = engine().stats().record_bytes;
  ASSERT_OK(begin());
  ASSERT_OK(declare(1000));
  ASSERT_OK(commit());
  EXPECT_EQ(engine().stats().record_bytes - before, 32u + 8 * (5 + 27));
  // The same plus 40 repeats of word 50 (69 declarations): the general path sorts, so 19, 20
  // and 21 form one run: 3 heads and 27 values.
  before = engine().stats().record_bytes;
  ASSERT_OK(begin());
  ASSERT_OK(declare(2000));
  for (int r = 0; r < 40; ++r) ASSERT_OK(write(&root_->words[50], uint64_t(3000 + r)));
  ASSERT_OK(commit());
  EXPECT_EQ(engine().stats().record_bytes - before, 32u + 8 * (3 + 27));
  // Exactly kSmallCommitWrites declarations of consecutive words: one run of 64.
  before = engine().stats().record_bytes;
  ASSERT_OK(begin());
  for (int i = 0; i < 64; ++i) ASSERT_OK(write(&root_->words[100 + i], uint64_t(4000 + i)));
  ASSERT_OK(commit());
  EXPECT_EQ(engine().stats().record_bytes - before, 32u + 8 * (1 + 64));
  CrashAndRecover();
  EXPECT_EQ(root_->words[5], 2002u);  // the second declaration of 5 (j = 2) is its last
  EXPECT_EQ(root_->words[6], 2001u);
  EXPECT_EQ(root_->words[7], 2003u);
  EXPECT_EQ(root_->words[8], 2004u);
  EXPECT_EQ(root_->words[20], 2005u);
  EXPECT_EQ(root_->words[19], 2006u);
  EXPECT_EQ(root_->words[21], 2008u);
  for (int w = 40; w < 60; ++w) {
    EXPECT_EQ(root_->words[w], w == 50 ? 3039u : uint64_t(2100 + w)) << w;
  }
  for (int i = 0; i < 64; ++i) EXPECT_EQ(root_->words[100 + i], uint64_t(4000 + i)) << i;
}

// The small commit writes its record straight into the log: on the pmem backend (x86-64:
// Persister::Streams) with non-temporal stores where the pool's RecordWrites is kStream or the
// record may reach kStreamAlwaysFrom bytes, else (and on other backends) with plain stores and
// a flush. Records of every shape (1 to kSmallCommitWrites declarations, repeats, runs, both
// alignments of the log position) and both ways of writing them hold the transactions' values
// on their own: after a crash that lost every in-place store of the array (scribbled over in
// the image), recovery's replay restores each word's last committed value. One fence per
// commit.
TEST_F(TxnTest, SmallCommitRecordsAloneRecoverTheValues) {
  struct Config {
    BackendKind backend;
    RecordWrites writes;
  };
  for (const Config c : {Config{BackendKind::kPmem, RecordWrites::kStream},
                         Config{BackendKind::kPmem, RecordWrites::kFlush},
                         Config{BackendKind::kEadr, RecordWrites::kStream}}) {
    SCOPED_TRACE(absl::StrCat(std::string(BackendName(c.backend)), " ",
                              std::string(RecordWritesName(c.writes))));
    const BackendKind backend = c.backend;
    PoolOptions po;
    po.backend = backend;
    po.record_writes = c.writes;
    auto r = OpenMemory(buf_.data(), kPoolSize, po, Quiet(), /*create=*/true);
    ASSERT_OK(r);
    rt_ = std::move(*r);
    root_ = *rt_.pool->root<Root>();
    EXPECT_EQ(rt_.pool->persister().record_writes(), c.writes);
#if defined(__x86_64__)
    const bool pmem = backend == BackendKind::kPmem && txn_internal::g_crc_in_commit_loop;
    EXPECT_EQ(rt_.pool->persister().Streams(txn_internal::kCommitFlush, 48),
              pmem && c.writes == RecordWrites::kStream);
    EXPECT_EQ(rt_.pool->persister().Streams(txn_internal::kCommitFlush, kStreamAlwaysFrom), pmem);
#endif
    constexpr int kSpan = 200;                  // words 0..199
    ASSERT_OK(txn::Run([&]() -> absl::Status {  // every word hot: no snapshot below
      for (int i = 0; i < kSpan; ++i) RETURN_IF_ERROR(write(&root_->words[i], uint64_t{1}));
      return absl::OkStatus();
    }));
    std::vector<uint64_t> expect(kSpan, 1);
    uint64_t x = 12345;
    auto next = [&] { return x = x * 6364136223846793005ull + 1442695040888963407ull; };
    const uint64_t fences0 = CountersSnapshot(backend).fences;
    constexpr int kTxns = 400;
    for (int n = 0; n < kTxns; ++n) {
      const int k =
          1 + static_cast<int>(next() >> 33) % static_cast<int>(txn_internal::kSmallCommitWrites);
      ASSERT_OK(begin());
      for (int j = 0; j < k; ++j) {
        const uint64_t shape = next() >> 60;
        // Mostly random words, some repeats of a small range, some runs of consecutive words.
        const int w = shape < 8    ? static_cast<int>((next() >> 33) % kSpan)
                      : shape < 12 ? static_cast<int>((next() >> 33) % 8)
                                   : (j * 3 + n) % (kSpan - 64) + j % 16;
        const uint64_t v = next();
        ASSERT_OK(write(&root_->words[w], v));
        expect[static_cast<size_t>(w)] = v;
      }
      ASSERT_OK(commit());
    }
    EXPECT_EQ(CountersSnapshot(backend).fences - fences0, uint64_t{kTxns});
    ASSERT_NO_FATAL_FAILURE(CrashAndRecoverWith(po, kSpan));  // the in-place stores lost
    for (int i = 0; i < kSpan; ++i) ASSERT_EQ(root_->words[i], expect[static_cast<size_t>(i)]) << i;
    EXPECT_GE(engine().stats().recovered_records, uint64_t{kTxns} + 1);  // (and snapshots)
    rt_.Reset();
  }
}

// The commit of one declaration (on pmem: written with no call where the tail block has room,
// else by the general small commit) gives the same records: thousands of them, across log blocks
// (where the tail block is full the general path takes a new one), recover the values alone.
TEST_F(TxnTest, OneWordCommitsAcrossBlocksRecoverTheValues) {
  for (const RecordWrites writes : {RecordWrites::kFlush, RecordWrites::kStream}) {
    SCOPED_TRACE(std::string(RecordWritesName(writes)));
    PoolOptions po;
    po.backend = BackendKind::kPmem;
    po.record_writes = writes;
    auto r = OpenMemory(buf_.data(), kPoolSize, po, Quiet(), /*create=*/true);
    ASSERT_OK(r);
    rt_ = std::move(*r);
    root_ = *rt_.pool->root<Root>();
    constexpr int kSpan = 64;
    ASSERT_OK(txn::Run([&]() -> absl::Status {  // every word hot: no snapshot below
      for (int i = 0; i < kSpan; ++i) RETURN_IF_ERROR(write(&root_->words[i], uint64_t{1}));
      return absl::OkStatus();
    }));
    std::vector<uint64_t> expect(kSpan, 1);
    const PersistCounts c0 = CountersSnapshot(BackendKind::kPmem);
    const txn::Stats s0 = engine().stats();
    constexpr int kTxns = 3000;  // 48-byte records: several blocks
    for (int n = 0; n < kTxns; ++n) {
      const int w = (n * 7) % kSpan;
      const uint64_t v = 1000 + static_cast<uint64_t>(n);
      ASSERT_OK(begin());
      ASSERT_OK(write(&root_->words[w], v));
      ASSERT_OK(commit());
      expect[static_cast<size_t>(w)] = v;
    }
    const PersistCounts d = CountersSnapshot(BackendKind::kPmem) - c0;
    const txn::Stats s1 = engine().stats();
    EXPECT_EQ(s1.commits - s0.commits, uint64_t{kTxns});
    EXPECT_EQ(s1.record_bytes - s0.record_bytes, uint64_t{kTxns} * 48);
    // One fence per commit and one flush of its record, whichever path wrote it (the new
    // blocks' headers and links add flushes and fences of their own, not counted here).
    EXPECT_GE(d.fences, uint64_t{kTxns});
    EXPECT_GE(d.flushes, uint64_t{kTxns});
    EXPECT_GE(d.bytes_flushed, uint64_t{kTxns} * 48);
    EXPECT_LT(d.fences, uint64_t{kTxns} + 100);
    ASSERT_NO_FATAL_FAILURE(CrashAndRecoverWith(po, kSpan));  // the in-place stores lost
    for (int i = 0; i < kSpan; ++i) ASSERT_EQ(root_->words[i], expect[static_cast<size_t>(i)]) << i;
    rt_.Reset();
  }
}

// Records of one declaration end at a cache line (docs/txn.md, "Line-ending records"): padded
// with pad words where records are stored and flushed (the pmem backend's one-word commit with
// its inline clwb, the general small commit elsewhere), not where they are streamed; no other
// record is padded. The padded records alone recover the values, across log blocks, and count
// 48 bytes each in record_bytes (padding left out).
TEST_F(TxnTest, OneWordRecordsEndAtACacheLine) {
  struct Config {
    BackendKind backend;
    RecordWrites writes;
    bool padded;
  };
#if defined(__x86_64__)
  const bool streams = txn_internal::g_crc_in_commit_loop;  // pmem + kStream streams them
#else
  const bool streams = false;
#endif
  for (const Config c : {Config{BackendKind::kPmem, RecordWrites::kFlush, true},
                         Config{BackendKind::kEadr, RecordWrites::kFlush, true},
                         Config{BackendKind::kPmem, RecordWrites::kStream, !streams}}) {
    SCOPED_TRACE(absl::StrCat(std::string(BackendName(c.backend)), " ",
                              std::string(RecordWritesName(c.writes))));
    PoolOptions po;
    po.backend = c.backend;
    po.record_writes = c.writes;
    auto r = OpenMemory(buf_.data(), kPoolSize, po, Quiet(), /*create=*/true);
    ASSERT_OK(r);
    rt_ = std::move(*r);
    root_ = *rt_.pool->root<Root>();
    constexpr int kSpan = 64;
    ASSERT_OK(txn::Run([&]() -> absl::Status {  // every word hot: no snapshot below
      for (int i = 0; i < kSpan; ++i) RETURN_IF_ERROR(write(&root_->words[i], uint64_t{1}));
      return absl::OkStatus();
    }));
    std::vector<uint64_t> expect(kSpan, 1);
    const txn::Stats s0 = engine().stats();
    uint64_t ones = 0, twos = 0;
    for (int n = 0; n < 2000; ++n) {  // 4 KiB blocks: dozens of them
      const int w = (n * 7) % kSpan;
      ASSERT_OK(begin());
      ASSERT_OK(write(&root_->words[w], uint64_t(100 + n)));
      expect[static_cast<size_t>(w)] = uint64_t(100 + n);
      if (n % 5 == 0) {  // a two-word record now and then (not consecutive words: two entries)
        const int w2 = (w + 3) % kSpan;
        ASSERT_OK(write(&root_->words[w2], uint64_t(200 + n)));
        expect[static_cast<size_t>(w2)] = uint64_t(200 + n);
        ++twos;
      } else {
        ++ones;
      }
      ASSERT_OK(commit());
      if (n == 1000) engine().SealLogsForTesting();  // the next record starts a new block
    }
    EXPECT_EQ(engine().stats().record_bytes - s0.record_bytes, ones * 48 + twos * 64);
    uint64_t one_records = 0, padded = 0;
    for (const txn_internal::RecordHeader* h : ThreadLogRecords(*rt_.pool)) {
      const RecordShape shape = ShapeOf(h);
      const auto end = reinterpret_cast<uintptr_t>(h) + size_t{h->words} * 8;
      if (!shape.one_word()) {
        EXPECT_EQ(shape.pad_words, 0u) << "only commit records of one declaration are padded";
        continue;
      }
      ++one_records;
      padded += shape.pad_words != 0 ? 1 : 0;
      if (c.padded) {
        EXPECT_EQ(end % 64, 0u) << "a one-word record that does not end its line";
        EXPECT_LT(shape.pad_words, 8u);
      } else {
        EXPECT_EQ(shape.pad_words, 0u);
      }
    }
    EXPECT_EQ(one_records, ones);
    if (c.padded) {
      EXPECT_GT(padded, ones / 2);
    } else {
      EXPECT_EQ(padded, 0u);
    }
    ASSERT_NO_FATAL_FAILURE(CrashAndRecoverWith(po, kSpan));  // the in-place stores lost
    for (int i = 0; i < kSpan; ++i) ASSERT_EQ(root_->words[i], expect[static_cast<size_t>(i)]) << i;
    rt_.Reset();
  }
}

// A directory of version 1 (made before pad words existed) keeps version-1 records, so that a
// build that knows only version 1 can still read it; a version this build does not know is
// refused with the directory's place in the error, and loses nothing: the directory is left as
// it was, and the next open with a version it knows recovers every value.
TEST_F(TxnTest, DirectoryVersionDecidesThePadding) {
  PoolOptions po;
  po.backend = BackendKind::kPmem;
  po.record_writes = RecordWrites::kFlush;
  auto r = OpenMemory(buf_.data(), kPoolSize, po, Quiet(), /*create=*/true);
  ASSERT_OK(r);
  rt_ = std::move(*r);
  root_ = *rt_.pool->root<Root>();
  constexpr int kSpan = 16;
  ASSERT_OK(txn::Run([&]() -> absl::Status {
    for (int i = 0; i < kSpan; ++i) RETURN_IF_ERROR(write(&root_->words[i], uint64_t{1}));
    return absl::OkStatus();
  }));
  const uint64_t dir_off = rt_.pool->state().txn_directory.value.load();
  auto* dir = static_cast<txn_internal::DirectoryHeader*>(rt_.pool->at(dir_off));
  EXPECT_EQ(dir->version, txn_internal::kDirectoryVersion);
  rt_.Reset();  // a clean close; buf_ keeps the pool
  auto set_version = [&](uint32_t v) {
    dir->version = v;
    dir->crc = Crc32c(dir, offsetof(txn_internal::DirectoryHeader, crc));
  };
  for (const uint32_t bad : {txn_internal::kDirectoryVersion + 1, 0u}) {
    set_version(bad);
    const txn_internal::DirectoryHeader before = *dir;
    r = OpenMemory(buf_.data(), kPoolSize, po, Quiet(), /*create=*/false);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition) << r.status();
    EXPECT_NE(r.status().message().find(
                  absl::StrCat("transaction directory at offset ", dir_off, ": version ", bad)),
              std::string::npos)
        << r.status();
    EXPECT_EQ(std::memcmp(&before, dir, sizeof(before)), 0) << "the refusal changed the header";
    for (int i = 0; i < kSpan; ++i) EXPECT_EQ(root_->words[i], 1u) << i;
  }
  set_version(1);
  r = OpenMemory(buf_.data(), kPoolSize, po, Quiet(), /*create=*/false);
  ASSERT_OK(r);
  rt_ = std::move(*r);
  root_ = *rt_.pool->root<Root>();
  std::vector<uint64_t> expect(kSpan, 1);
  for (int n = 0; n < 500; ++n) {
    const int w = (n * 5) % kSpan;
    ASSERT_OK(begin());
    ASSERT_OK(write(&root_->words[w], uint64_t(300 + n)));
    ASSERT_OK(commit());
    expect[static_cast<size_t>(w)] = uint64_t(300 + n);
  }
  uint64_t one_records = 0;
  for (const txn_internal::RecordHeader* h : ThreadLogRecords(*rt_.pool)) {
    const RecordShape shape = ShapeOf(h);
    EXPECT_EQ(shape.pad_words, 0u) << "a pad word in a version-1 directory";
    one_records += shape.one_word() ? 1 : 0;
  }
  EXPECT_EQ(one_records, 500u);
  EXPECT_EQ(dir->version, 1u);
  CrashAndRecoverWith(po);
  for (int i = 0; i < kSpan; ++i) EXPECT_EQ(root_->words[i], expect[static_cast<size_t>(i)]) << i;
}

// The format: a zero entry head is a pad word (no entry; anywhere among the entries), and the
// checksum covers it; a data entry of zero words with any other head is invalid.
TEST(TxnFormatTest, PadWordsAreNoEntries) {
  using txn_internal::RecordHeader;
  alignas(64) static uint8_t block[4096];
  constexpr uint64_t kGen = 77;
  auto* h = reinterpret_cast<RecordHeader*>(block + txn_internal::kBlockPayload);
  auto* w = reinterpret_cast<uint64_t*>(h + 1);
  auto seal = [&](uint16_t words) {
    h->words = words;
    h->kind = static_cast<uint16_t>(txn_internal::RecordKind::kCommit);
    h->stamp = 1;
    h->epoch = 1;
    h->gen = kGen;
    h->crc = txn_internal::RecordCrc(h);
  };
  auto entries = [&] {
    std::vector<std::pair<uint64_t, uint64_t>> got;  // (head, first value)
    txn_internal::ForEachEntry(h, [&](uint64_t head, const uint64_t* v) {
      got.emplace_back(head, v != nullptr ? v[0] : 0);
    });
    return got;
  };
  const uint64_t e5 = txn_internal::MakeEntryHead(txn_internal::EntryType::kData, 1, 5);
  const uint64_t e9 = txn_internal::MakeEntryHead(txn_internal::EntryType::kData, 1, 9);
  // {e5, 42}, pad, {e9, 43}, pad, pad: 4 + 7 words.
  const uint64_t words[] = {e5, 42, txn_internal::kPadWord, e9, 43, 0, 0};
  std::memcpy(w, words, sizeof(words));
  seal(4 + 7);
  ASSERT_NE(txn_internal::ValidRecord(block, sizeof(block), kGen, txn_internal::kBlockPayload),
            nullptr);
  EXPECT_EQ(entries(), (std::vector<std::pair<uint64_t, uint64_t>>{{e5, 42}, {e9, 43}}));
  w[6] = 1;  // a pad word changed after the checksum
  EXPECT_EQ(txn_internal::ValidRecord(block, sizeof(block), kGen, txn_internal::kBlockPayload),
            nullptr);
  w[6] = 0;
  w[2] = txn_internal::MakeEntryHead(txn_internal::EntryType::kData, 0, 7);  // zero words, not 0
  seal(4 + 7);
  EXPECT_EQ(txn_internal::ValidRecord(block, sizeof(block), kGen, txn_internal::kBlockPayload),
            nullptr);
  EXPECT_EQ(txn_internal::LinePad(64, 48), 16u);
  EXPECT_EQ(txn_internal::LinePad(64 + 16, 48), 0u);
  EXPECT_EQ(txn_internal::LinePad(64 + 40, 48), 40u);
  EXPECT_EQ(txn_internal::LinePad(64 + 48, 48), 32u);
}

TEST_F(TxnTest, UncommittedInPlaceWritesAreUndoneByRecovery) {
  Open();
  ASSERT_OK(txn::Run([&] { return write(&root_->words[1], uint64_t{11}); }));  // word 1 hot
  ASSERT_OK(begin());
  ASSERT_OK(write(&root_->words[1], uint64_t{12}));  // hot: no snapshot, in place
  ASSERT_OK(write(&root_->words[2], uint64_t{22}));  // cold: snapshot first
  // Crash with the transaction open and every in-place store on media.
  Buffer image(kPoolSize);
  image.CopyFrom(buf_.data());
  ASSERT_OK(abort());
  rt_.Reset();
  buf_.CopyFrom(image.data());
  auto r = OpenMemory(buf_.data(), kPoolSize, Eadr(), Quiet(), false);
  ASSERT_OK(r);
  rt_ = std::move(*r);
  root_ = *rt_.pool->root<Root>();
  EXPECT_EQ(root_->words[1], 11u);
  EXPECT_EQ(root_->words[2], 0u);
}

// A run that opens a crashed pool with the epoch layer but not the transaction engine does not
// undo an uncommitted transaction's in-place writes (that is the engine's recovery), so it must
// not mark the pool cleanly shut down: the next run's engine must still see the crash. (Before
// Pool::AcknowledgeRecovery, such a Close hid the crash and the uncommitted write stayed.)
TEST_F(TxnTest, AnOpenWithoutTheEngineDoesNotHideTheCrash) {
  Open();
  ASSERT_OK(txn::Run([&] { return write(&root_->words[1], uint64_t{11}); }));  // committed
  ASSERT_OK(begin());
  ASSERT_OK(write(&root_->words[1], uint64_t{12}));  // uncommitted, in place
  ASSERT_OK(write(&root_->words[2], uint64_t{22}));
  Buffer image(kPoolSize);
  image.CopyFrom(buf_.data());  // crash with the transaction open
  ASSERT_OK(abort());
  rt_.Reset();
  buf_.CopyFrom(image.data());
  {
    auto pool = Pool::OpenInMemory(buf_.data(), kPoolSize, "txn-test", Eadr(), "mem");
    ASSERT_OK(pool);
    EXPECT_FALSE((*pool)->was_clean_shutdown());
    alloc::test_runtime::HeapRuntime layers;
    ASSERT_OK(alloc::test_runtime::OpenHeapLayers(std::move(*pool), layers));
    EXPECT_EQ((*layers.pool->root<Root>())->words[2], 22u);  // not the epoch layer's to undo
    EXPECT_FALSE(layers.pool->recovery_acknowledged());
    layers.heap.reset();
    layers.epochs.reset();
    ASSERT_OK(layers.pool->Close());
  }
  auto r = OpenMemory(buf_.data(), kPoolSize, Eadr(), Quiet(), /*create=*/false);
  ASSERT_OK(r);
  rt_ = std::move(*r);
  EXPECT_FALSE(rt_.pool->was_clean_shutdown()) << "the epoch-only run hid the crash";
  root_ = *rt_.pool->root<Root>();
  EXPECT_EQ(root_->words[1], 11u);
  EXPECT_EQ(root_->words[2], 0u);
  EXPECT_TRUE(rt_.pool->recovery_acknowledged());
}

TEST_F(TxnTest, FlatNesting) {
  Open();
  ASSERT_OK(begin());
  ASSERT_OK(write(&root_->words[0], uint64_t{1}));
  ASSERT_OK(begin());
  ASSERT_OK(write(&root_->words[1], uint64_t{2}));
  ASSERT_OK(commit());  // inner: nothing yet
  EXPECT_TRUE(in_transaction());
  ASSERT_OK(commit());
  EXPECT_FALSE(in_transaction());
  EXPECT_EQ(engine().stats().commits, 1u);

  ASSERT_OK(begin());
  ASSERT_OK(write(&root_->words[0], uint64_t{5}));
  ASSERT_OK(begin());
  ASSERT_OK(write(&root_->words[1], uint64_t{6}));
  ASSERT_OK(abort());  // inner abort: the whole transaction, memory restored at once
  EXPECT_EQ(root_->words[0], 1u);
  EXPECT_EQ(root_->words[1], 2u);
  EXPECT_THAT(write(&root_->words[2], uint64_t{7}),
              StatusIs(absl::StatusCode::kAborted, "aborted"));
  EXPECT_EQ(root_->words[2], 0u);
  EXPECT_THAT(commit(), StatusIs(absl::StatusCode::kAborted, "aborted"));
  EXPECT_FALSE(in_transaction());
  EXPECT_EQ(engine().stats().commits, 1u);
}

uint64_t Fences() { return CountersSnapshot(BackendKind::kEadr).fences; }

// txn::add's inline path (an aligned word with a live record, on the default engine) refuses
// what the general path refuses, keeps old values for abort, and hands over to the general path
// when the write list is full, after an allocation and for anything unaligned.
TEST_F(TxnTest, InlineAddOfHotWordsMatchesTheGeneralPath) {
  Open();
  constexpr int kHot = 100;
  ASSERT_OK(txn::Run([&]() -> absl::Status {
    for (int i = 0; i < kHot; ++i) {
      if (absl::Status st = write(&root_->words[i], uint64_t(i)); !st.ok()) return st;
    }
    return write(&root_->obj, uint64_t{0});
  }));
  // A new epoch: the next declarations move each word's touch epoch (the CAS of the inline
  // path) and register the word dirty when the transaction ends.
  ASSERT_OK(rt_.epochs->Advance());
  const uint64_t fences = Fences();
  auto expect_original = [&](const char* when) {
    for (int i = 0; i < kHot; ++i) ASSERT_EQ(root_->words[i], uint64_t(i)) << when << " " << i;
  };
  // Inner abort: everything restored, later declarations refused and not stored.
  ASSERT_OK(begin());
  for (int i = 0; i < kHot; ++i) ASSERT_OK(write(&root_->words[i], uint64_t(1000 + i)));
  auto* bytes = reinterpret_cast<uint8_t*>(&root_->words[kHot - 2]);
  ASSERT_OK(add(bytes + 4, 8));  // unaligned: the general path, two words
  std::memset(bytes + 4, 0xAB, 8);
  ASSERT_OK(begin());
  ASSERT_OK(abort());
  expect_original("after the inner abort");
  EXPECT_THAT(write(&root_->words[5], uint64_t{7}),
              StatusIs(absl::StatusCode::kAborted, "aborted"));
  EXPECT_EQ(root_->words[5], 5u);
  EXPECT_THAT(commit(), StatusIs(absl::StatusCode::kAborted, "aborted"));
  // A doomed transaction: hot words are refused with the doom.
  uint64_t local = 0;
  ASSERT_OK(begin());
  ASSERT_OK(write(&root_->words[0], uint64_t{77}));
  EXPECT_THAT(add(&local, 8), StatusIs(absl::StatusCode::kInvalidArgument, "not inside the pool"));
  EXPECT_THAT(write(&root_->words[1], uint64_t{78}),
              StatusIs(absl::StatusCode::kInvalidArgument, "not inside the pool"));
  EXPECT_EQ(root_->words[1], 1u);
  EXPECT_THAT(commit(), StatusIs(absl::StatusCode::kInvalidArgument, "not inside the pool"));
  expect_original("after the doomed transaction");
  // Many declarations (the list grows and is compacted on the general path): abort restores
  // the values from before the transaction.
  ASSERT_OK(begin());
  for (int r = 0; r < 20; ++r)
    for (int i = 0; i < kHot; ++i) ASSERT_OK(write(&root_->words[i], uint64_t(r * 1000 + i)));
  ASSERT_OK(abort());
  expect_original("after the long abort");
  // Hot words, then an allocation (the inline path stops), then more words: all committed.
  ASSERT_OK(begin());
  for (int r = 0; r < 3; ++r)
    for (int i = 0; i < kHot; ++i) ASSERT_OK(write(&root_->words[i], uint64_t(r * 1000 + i)));
  Obj* o = alloc::pnew<Obj>(Obj{1, 2, 3});
  ASSERT_NE(o, nullptr);
  ASSERT_OK(write(&root_->obj, rt_.pool->offset_of(o)));
  ASSERT_OK(write(&root_->words[0], uint64_t{4242}));
  ASSERT_OK(commit());
  // No snapshot: every word was hot (one fence per commit, none for the aborted ones).
  EXPECT_EQ(Fences() - fences, 1u);
  CrashAndRecover();
  EXPECT_EQ(root_->words[0], 4242u);
  for (int i = 1; i < kHot; ++i) EXPECT_EQ(root_->words[i], uint64_t(2000 + i)) << i;
  auto* r = static_cast<Obj*>(rt_.pool->at(root_->obj));
  ASSERT_NE(r, nullptr);
  EXPECT_EQ(r->c, 3u);
}

// The engine marks itself open on the pool from Open until its close has written back every
// word its log holds (Pool::Close leaves a pool unclean while it is set).
TEST_F(TxnTest, ThePoolIsMarkedCleanOnlyAfterTheEnginesWriteBack) {
  Open();
  EXPECT_TRUE(rt_.pool->txn_engine_open());
  ASSERT_OK(txn::Run([&] { return write(&root_->words[0], uint64_t{5}); }));
  ASSERT_NO_FATAL_FAILURE(CloseCleanlyAndReopen());
  EXPECT_EQ(root_->words[0], 5u);
  EXPECT_TRUE(rt_.pool->was_clean_shutdown());
}

// A clean close retires the log (one descriptor: K empty, horizon the completed epoch), empties
// the heads and gives every log block back to the heap: the next open reads no record, owns no
// block, and the words and the heap are as the transactions left them. The log then grows again.
TEST_F(TxnTest, ACleanCloseRetiresTheLogAndGivesItsBlocksBack) {
  Open();
  const uint64_t free_before = rt_.heap->Stats().free_bytes;
  std::array<uint64_t, 64> want{};
  for (uint64_t i = 0; i < 3000; ++i) {
    ASSERT_OK(txn::Run([&] {
      if (auto st = write(&root_->words[i % 64], i); !st.ok()) return st;
      return write(&root_->words[(i * 7) % 64], i + 1);
    }));
    want[i % 64] = i;
    want[(i * 7) % 64] = i + 1;
  }
  ASSERT_GT(engine().stats().log_bytes_owned, 0u);
  ASSERT_NO_FATAL_FAILURE(CloseCleanlyAndReopen());
  EXPECT_TRUE(rt_.pool->was_clean_shutdown());
  const Stats s = engine().stats();
  EXPECT_EQ(s.records_read_at_open, 0u);
  EXPECT_EQ(s.log_bytes_owned, 0u);
  EXPECT_EQ(rt_.heap->Stats().free_bytes, free_before) << "the log's blocks are the heap's again";
  for (size_t w = 0; w < want.size(); ++w) EXPECT_EQ(root_->words[w], want[w]) << w;
  EXPECT_OK(rt_.heap->Check());
  // Transactions after the reopen take blocks again, and a crash replays them.
  ASSERT_OK(txn::Run([&] { return write(&root_->words[3], uint64_t{77}); }));
  EXPECT_GT(engine().stats().log_bytes_owned, 0u);
  CrashAndRecover();
  EXPECT_EQ(root_->words[3], 77u);
  EXPECT_GT(engine().stats().records_read_at_open, 0u);
  EXPECT_OK(rt_.heap->Check());
}

// Two returns of log blocks in one epoch touch the same table lines; a crash in that epoch must
// restore the lines as they were before the first (one undo snapshot per line per epoch), so
// every block the heap gets back (the frees rolled back) is in the table again: no leak.
TEST_F(TxnTest, TwoBlockReturnsInOneEpochRollBackTogether) {
  Open();
  for (uint64_t i = 0; i < 4000; ++i) {
    ASSERT_OK(txn::Run([&] { return write(&root_->words[i % kWords], i); }));
  }
  ASSERT_OK(engine().Reclaim());
  ASSERT_OK(rt_.epochs->Advance());
  ASSERT_OK(engine().Reclaim());
  const uint64_t owned = engine().OwnedBlocks().size();
  ASSERT_GT(engine().GiveBackLogBlocksForTesting(4), 0u);
  ASSERT_GT(engine().GiveBackLogBlocksForTesting(0), 0u);
  ASSERT_LT(engine().OwnedBlocks().size(), owned);
  CrashAndRecover();  // the epoch of both returns fails
  EXPECT_EQ(engine().OwnedBlocks().size(), owned) << "the returns were not rolled back together";
  EXPECT_TRUE(UserBlocks(rt_).empty()) << "a log block is live in the heap and in no table";
  EXPECT_OK(rt_.heap->Check());
  for (uint64_t w = 0; w < kWords; ++w)
    EXPECT_EQ(root_->words[w], uint64_t{4000 - kWords} + w) << w;
}

TEST_F(TxnTest, MisuseErrors) {
  Open();
  EXPECT_THAT(commit(), StatusIs(absl::StatusCode::kFailedPrecondition, "no transaction"));
  EXPECT_THAT(abort(), StatusIs(absl::StatusCode::kFailedPrecondition, "no transaction"));
  EXPECT_THAT(add(&root_->words[0], 8),
              StatusIs(absl::StatusCode::kFailedPrecondition, "no transaction"));
  EXPECT_THAT(write(&root_->words[0], uint64_t{1}),
              StatusIs(absl::StatusCode::kFailedPrecondition, "no transaction"));
  EXPECT_EQ(root_->words[0], 0u);  // not stored
  // Outside the pool.
  uint64_t local = 0;
  ASSERT_OK(begin());
  EXPECT_THAT(add(&local, 8), StatusIs(absl::StatusCode::kInvalidArgument, "not inside the pool"));
  EXPECT_THAT(commit(), StatusIs(absl::StatusCode::kInvalidArgument, "not inside the pool"));
  // A transaction begun on one thread is not the other thread's.
  ASSERT_OK(begin());
  std::thread other([&] {
    EXPECT_THAT(commit(), StatusIs(absl::StatusCode::kFailedPrecondition, "belongs to the thread"));
    EXPECT_FALSE(in_transaction());
  });
  other.join();
  ASSERT_OK(abort());
  // Scope is bound to its thread.
  {
    Scope s;
    ASSERT_OK(s.begin_status());
    ASSERT_OK(write(&root_->words[3], uint64_t{3}));
    std::thread t2([&] {
      EXPECT_THAT(s.Commit(), StatusIs(absl::StatusCode::kFailedPrecondition, "other than"));
    });
    t2.join();
  }  // destructor aborts
  EXPECT_EQ(root_->words[3], 0u);
  EXPECT_FALSE(in_transaction());
  {
    Scope s;
    ASSERT_OK(write(&root_->words[3], uint64_t{4}));
    ASSERT_OK(s.Commit());
    EXPECT_THAT(s.Commit(), StatusIs(absl::StatusCode::kFailedPrecondition, "not open"));
  }
  EXPECT_EQ(root_->words[3], 4u);
  // Run: an error aborts and is returned.
  absl::Status st = txn::Run([&]() -> absl::Status {
    if (absl::Status s = write(&root_->words[3], uint64_t{9}); !s.ok()) return s;
    return absl::CancelledError("user says no");
  });
  EXPECT_THAT(st, StatusIs(absl::StatusCode::kCancelled, "user says no"));
  EXPECT_EQ(root_->words[3], 4u);
  // Reclaim inside a transaction would wait for it.
  ASSERT_OK(begin());
  EXPECT_THAT(engine().Reclaim(), StatusIs(absl::StatusCode::kFailedPrecondition, "inside"));
  ASSERT_OK(commit());
}

// A thread that exits inside a transaction gets what its crash would give: the transaction is
// aborted (words restored, allocation undone) and its epoch guard released, so later epoch
// boundaries are not held back and the next thread to take its state begins afresh.
TEST_F(TxnTest, AThreadThatExitsInsideATransactionAbortsIt) {
  Open();
  auto live = [&] { return UserBlocks(rt_); };
  ASSERT_OK(txn::Run([&] { return write(&root_->words[0], uint64_t{1}); }));  // hot
  const auto blocks = live();
  std::thread([&] {
    ASSERT_OK(begin());
    ASSERT_OK(begin());                                  // nested: every level goes
    ASSERT_OK(write(&root_->words[0], uint64_t{2}));     // hot (txn::add's inline path)
    ASSERT_OK(write(&root_->words[1], uint64_t{3}));     // cold (snapshot)
    ASSERT_NE(alloc::pnew<Obj>(Obj{4, 5, 6}), nullptr);  // undone
  }).join();
  EXPECT_EQ(root_->words[0], 1u);
  EXPECT_EQ(root_->words[1], 0u);
  EXPECT_EQ(live(), blocks);
  EXPECT_EQ(engine().stats().aborts, 1u);
  // The exited thread's guard is released: an epoch advance (which waits for every guard of an
  // older epoch) completes.
  auto advanced = std::async(std::launch::async, [&] { return rt_.epochs->Advance(); });
  if (advanced.wait_for(std::chrono::seconds(20)) != std::future_status::ready) {
    std::fprintf(stderr, "the epoch advance waits for the exited thread's guard\n");
    std::abort();  // it would wait forever
  }
  ASSERT_OK(advanced.get());
  // The next thread takes the exited thread's state (no other thread has one) and begins afresh.
  std::thread([&] {
    EXPECT_FALSE(in_transaction());
    ASSERT_OK(txn::Run([&] { return write(&root_->words[0], uint64_t{7}); }));
  }).join();
  CrashAndRecover();
  EXPECT_EQ(root_->words[0], 7u);
  EXPECT_EQ(root_->words[1], 0u);
  EXPECT_EQ(live(), blocks);
}

// A second engine (another pool) is used through its member functions, also inside a
// transaction of the default engine on the same thread: each transaction keeps its own words,
// log, commit and abort; an allocation belongs to the innermost one; the outer one resumes when
// the inner one ends.
TEST_F(TxnTest, ASecondEnginesTransactionNestsInsideTheDefaultEngines) {
  Open();  // the default engine: opened first
  Buffer buf2(kPoolSize);
  auto r2 = OpenMemory(buf2.data(), kPoolSize, Eadr(), Quiet(), /*create=*/true);
  ASSERT_OK(r2);
  Runtime rt2 = std::move(*r2);
  Engine& e2 = *rt2.engine;
  ASSERT_NE(&e2, Engine::Default());
  Root* root2 = *rt2.pool->root<Root>();
  auto live = [](Runtime& rt) { return UserBlocks(rt); };
  const auto blocks = live(rt_);

  ASSERT_OK(begin());
  ASSERT_OK(write(&root_->words[0], uint64_t{1}));
  ASSERT_OK(e2.Begin());
  ASSERT_OK(e2.Add(&root2->words[0], 8));
  root2->words[0] = 2;
  Obj* inner = alloc::pnew<Obj>(Obj{7, 8, 9});  // the second pool's heap
  ASSERT_NE(inner, nullptr);
  EXPECT_TRUE(rt2.pool->contains(inner, sizeof(Obj)));
  ASSERT_OK(e2.Add(&root2->obj, 8));
  root2->obj = rt2.pool->offset_of(inner);
  ASSERT_OK(e2.Commit());
  // The outer transaction again: its declarations and allocations.
  ASSERT_OK(write(&root_->words[1], uint64_t{3}));
  Obj* outer = alloc::pnew<Obj>(Obj{1, 1, 1});
  ASSERT_NE(outer, nullptr);
  EXPECT_TRUE(rt_.pool->contains(outer, sizeof(Obj)));
  ASSERT_OK(abort());  // the outer one aborts; the inner one stays committed
  EXPECT_EQ(root_->words[0], 0u);
  EXPECT_EQ(root_->words[1], 0u);
  EXPECT_EQ(live(rt_), blocks);  // its allocation undone
  EXPECT_EQ(root2->words[0], 2u);
  EXPECT_TRUE(live(rt2).count(rt2.pool->offset_of(inner)));

  // An inner abort restores only the inner transaction's words.
  ASSERT_OK(begin());
  ASSERT_OK(write(&root_->words[2], uint64_t{4}));
  ASSERT_OK(e2.Begin());
  ASSERT_OK(e2.Add(&root2->words[1], 8));
  root2->words[1] = 5;
  ASSERT_OK(e2.Abort());
  EXPECT_EQ(root2->words[1], 0u);
  ASSERT_OK(commit());
  EXPECT_EQ(root_->words[2], 4u);
  EXPECT_FALSE(in_transaction());

  // Durable as committed, in both pools (a crash keeping every store, then recovery).
  Buffer image2(kPoolSize);
  image2.CopyFrom(buf2.data());
  rt2.Reset();
  buf2.CopyFrom(image2.data());
  auto back = OpenMemory(buf2.data(), kPoolSize, Eadr(), Quiet(), /*create=*/false);
  ASSERT_OK(back);
  Root* r = *back->pool->root<Root>();
  EXPECT_EQ(r->words[0], 2u);
  EXPECT_EQ(r->words[1], 0u);
  auto* o = static_cast<Obj*>(back->pool->at(r->obj));
  ASSERT_NE(o, nullptr);
  EXPECT_EQ(o->c, 9u);
  back->Reset();
  CrashAndRecover();
  EXPECT_EQ(root_->words[0], 0u);
  EXPECT_EQ(root_->words[2], 4u);
}

TEST_F(TxnTest, TransactionOpenTooLongFails) {
  Options o = Quiet();
  o.background = true;  // the watchdog runs on the background thread
  o.max_open = std::chrono::milliseconds(20);
  Open(o);
  // words[1] hot: its declaration below takes txn::add's inline path, which the watchdog
  // closes when the transaction expires.
  ASSERT_OK(txn::Run([&] { return write(&root_->words[1], uint64_t{0}); }));
  ASSERT_OK(begin());
  ASSERT_OK(write(&root_->words[0], uint64_t{1}));
  std::this_thread::sleep_for(std::chrono::milliseconds(120));
  EXPECT_THAT(write(&root_->words[1], uint64_t{2}),
              StatusIs(absl::StatusCode::kDeadlineExceeded, "open longer"));
  EXPECT_THAT(commit(), StatusIs(absl::StatusCode::kDeadlineExceeded, "open longer"));
  EXPECT_EQ(root_->words[0], 0u);  // aborted
  EXPECT_EQ(root_->words[1], 0u);
  ASSERT_OK(
      txn::Run([&] { return write(&root_->words[0], uint64_t{3}); }));  // the next one is fine
  EXPECT_EQ(root_->words[0], 3u);
}

TEST_F(TxnTest, ColdThenHotThenColdAgain) {
  Options o = Quiet();
  o.cold_after_epochs = 0;
  o.adaptive_cold = false;
  Open(o);
  // Cold: a snapshot (one fence) before the first write, then the commit's fence.
  uint64_t f0 = Fences();
  ASSERT_OK(txn::Run([&] { return write(&root_->words[5], uint64_t{1}); }));
  EXPECT_EQ(Fences() - f0, 2u);
  EXPECT_EQ(engine().stats().snapshots, 1u);
  // Hot: the previous record is the undo record; one fence, at commit.
  f0 = Fences();
  for (int i = 0; i < 10; ++i)
    ASSERT_OK(txn::Run([&] { return write(&root_->words[5], uint64_t(2 + i)); }));
  EXPECT_EQ(Fences() - f0, 10u);
  EXPECT_EQ(engine().stats().snapshots, 1u);
  // Several words in one call: one snapshot record and one fence for all the cold ones.
  f0 = Fences();
  ASSERT_OK(begin());
  ASSERT_OK(add(&root_->words[100], 8 * 40));
  ASSERT_OK(commit());
  EXPECT_EQ(Fences() - f0, 2u);
  // The word's data is durable after a boundary and it is left untouched: reclamation drops its
  // record, so it is cold again.
  ASSERT_OK(rt_.epochs->Advance());
  ASSERT_OK(engine().Reclaim());
  EXPECT_GE(engine().stats().words_cold, 1u);
  f0 = Fences();
  ASSERT_OK(txn::Run([&] { return write(&root_->words[5], uint64_t{99}); }));
  EXPECT_EQ(Fences() - f0, 2u);
  // A read-only transaction writes nothing and does not fence.
  f0 = Fences();
  ASSERT_OK(begin());
  ASSERT_OK(commit());
  EXPECT_EQ(Fences() - f0, 0u);
  CrashAndRecover(o);
  EXPECT_EQ(root_->words[5], 99u);
}

TEST_F(TxnTest, HotWordStaysHotWhileTouched) {
  Options o = Quiet();
  o.cold_after_epochs = 0;
  o.adaptive_cold = false;
  ExpectTouchedWordStaysHotThroughACycle(o, /*advances=*/1);
}

// The touch slack: a declaration skips the CAS of a word touched at most min(8,
// cold_after_epochs) epochs before its transaction's epoch, so the reclaimer must leave words
// touched that recently hot (its cold age is never below the slack) while the transaction is
// open. (With the txn.mutant.touch_slack mutant the word goes cold here and the crash keeps the
// uncommitted value.)
TEST_F(TxnTest, AWordTouchedWithinTheTouchSlackStaysHotWhileTouched) {
  Options o = Quiet();
  o.cold_after_epochs = 2;  // touch slack 2
  o.adaptive_cold = false;
  // Two epochs later: within the slack, declared without moving the touch epoch.
  ExpectTouchedWordStaysHotThroughACycle(o, /*advances=*/2);
}

// Fast lines (docs/txn.md, "Fast lines"): a line whose 8 words the reclaimer saw hot is marked,
// and txn::add declares its words without reading (or CASing) their index slots. A word of it
// that an open transaction declared so, with a touch epoch older than the cold age, must stay
// hot through a cycle that runs meanwhile: the cycle unmarks the line and keeps the word's
// record until the epoch of the unmarking has completed. (With the txn.mutant.fast_line_grace
// mutant the word goes cold at once, its line is flushed with the uncommitted value and the
// crash keeps it.) Afterwards the words may go cold, and the line is fast again once all are hot.
TEST_F(TxnTest, AWordOfAFastLineStaysHotWhileDeclaredAndGoesColdAfterTheUnmarkingsEpoch) {
  Options o = Quiet();
  o.cold_after_epochs = 2;  // cold age and touch slack 2
  o.adaptive_cold = false;
  o.log_budget = 1024;  // always over: every cycle is a full one (the cold rule applies)
  o.log_limit = 1 << 20;
  Open(o);
  // The whole 8-word line around words[8], inside words[1..15].
  auto* line =
      reinterpret_cast<uint64_t*>(reinterpret_cast<uintptr_t>(&root_->words[8]) & ~uintptr_t{63});
  ASSERT_GE(line, &root_->words[1]);
  ASSERT_OK(txn::Run([&]() -> absl::Status {
    for (int i = 0; i < 8; ++i) RETURN_IF_ERROR(write(&line[i], uint64_t{1}));
    return absl::OkStatus();
  }));
  EXPECT_FALSE(engine().IsFastLine(line));
  ASSERT_OK(rt_.epochs->Advance());
  ASSERT_OK(engine().Reclaim());  // touched within the cold age: kept, and the line marked
  EXPECT_TRUE(engine().IsFastLine(line));
  EXPECT_GE(engine().stats().lines_marked, 1u);
  for (int i = 0; i < 3; ++i) ASSERT_OK(rt_.epochs->Advance());
  // Declared on the fast path (no CAS: the slot keeps its old touch epoch), then a cycle.
  ASSERT_OK(begin());
  ASSERT_OK(write(&line[3], uint64_t{2}));
  const uint64_t cold0 = engine().stats().words_cold;
  std::thread reclaimer([&] { ASSERT_OK(engine().Reclaim(/*advance=*/false)); });
  reclaimer.join();
  EXPECT_EQ(engine().stats().words_cold, cold0);  // the whole line waits for the epoch
  EXPECT_FALSE(engine().IsFastLine(line));
  EXPECT_GE(engine().stats().lines_unmarked, 1u);
  Buffer image(kPoolSize);
  image.CopyFrom(buf_.data());
  ASSERT_OK(commit());
  // Once the unmarking's epoch has completed (and the commit's touch epoch is older than the
  // cold age too), the words go cold.
  for (int i = 0; i < 4; ++i) ASSERT_OK(rt_.epochs->Advance());
  ASSERT_OK(engine().Reclaim());
  EXPECT_EQ(engine().stats().words_cold, cold0 + 8);
  EXPECT_FALSE(engine().IsFastLine(line));
  // Written again: each snapshotted (cold), then hot; a cycle that sees the line all hot marks
  // it again.
  const uint64_t snaps = engine().stats().snapshots;
  ASSERT_OK(txn::Run([&]() -> absl::Status {
    for (int i = 0; i < 8; ++i) RETURN_IF_ERROR(write(&line[i], uint64_t{3}));
    return absl::OkStatus();
  }));
  EXPECT_EQ(engine().stats().snapshots, snaps + 8);
  ASSERT_OK(rt_.epochs->Advance());
  ASSERT_OK(engine().Reclaim());
  EXPECT_TRUE(engine().IsFastLine(line));
  // The crash image taken while the transaction was open: undone from the kept record.
  rt_.Reset();
  buf_.CopyFrom(image.data());
  auto r = OpenMemory(buf_.data(), kPoolSize, Eadr(), o, false);
  ASSERT_OK(r);
  rt_ = std::move(*r);
  ASSERT_EQ(*rt_.pool->root<Root>(), root_);
  for (int i = 0; i < 8; ++i) EXPECT_EQ(line[i], 1u) << i;  // (the same mapping)
}

// A free unmarks the fast lines of the words it makes cold (WordIndex::kFreed), while another
// thread's open transaction may hold a word of the same line declared on the fast path: the
// reclaimer takes the free's unmarking for its own and makes no word of the line cold before its
// grace period. With the txn.mutant.fast_line_freed mutant the other word goes cold at once,
// and the crash keeps the open transaction's uncommitted value (its negative control, below).
class FreedLineTest : public TxnTest {
 protected:
  // The scenario: `committed` is the held word's committed value, `recovered` what a crash
  // leaves of it while the other transaction is open.
  void Run(bool mutant, uint64_t& committed, uint64_t& recovered) {
    Options o = Quiet();
    o.cold_after_epochs = 2;
    o.adaptive_cold = false;
    o.log_budget = 1024;  // every cycle is a full one
    o.log_limit = 1 << 20;
    Open(o);
    struct Pair {
      uint64_t a, b;
    };
    // Sixteen 16-byte blocks, written whole by their commit (hot); find a line of four of them.
    std::vector<Pair*> ps;
    ASSERT_OK(txn::Run([&]() -> absl::Status {
      for (uint64_t i = 0; i < 16; ++i) ps.push_back(alloc::pnew<Pair>(Pair{i, i}));
      return absl::OkStatus();
    }));
    std::map<uintptr_t, std::vector<Pair*>> by_line;
    for (Pair* q : ps) {
      ASSERT_NE(q, nullptr);
      by_line[reinterpret_cast<uintptr_t>(q) / 64].push_back(q);
    }
    Pair* freed = nullptr;
    Pair* held = nullptr;
    for (auto& [line, qs] : by_line) {
      if (qs.size() == 4) {
        freed = qs[0];
        held = qs[1];
        break;
      }
    }
    ASSERT_NE(held, nullptr) << "no line of four blocks";
    ASSERT_OK(rt_.epochs->Advance());
    ASSERT_OK(engine().Reclaim());
    ASSERT_TRUE(engine().IsFastLine(held));
    for (int i = 0; i < 3; ++i) ASSERT_OK(rt_.epochs->Advance());
    committed = held->a;
    ASSERT_OK(begin());
    ASSERT_OK(write(&held->a, uint64_t{99}));  // the fast path: no CAS
    if (mutant) mutation::Disable(txn_internal::kFreedMutant);
    std::thread other([&] {
      ASSERT_OK(begin());
      ASSERT_OK(alloc::pdelete(freed));
      ASSERT_OK(commit());
      EXPECT_FALSE(engine().IsFastLine(held));
      ASSERT_OK(engine().Reclaim(/*advance=*/false));
    });
    other.join();
    mutation::EnableAll();
    Buffer image(kPoolSize);
    image.CopyFrom(buf_.data());
    ASSERT_OK(commit());
    rt_.Reset();
    buf_.CopyFrom(image.data());
    auto r = OpenMemory(buf_.data(), kPoolSize, Eadr(), o, false);
    ASSERT_OK(r);
    rt_ = std::move(*r);
    recovered = held->a;  // (the same mapping)
  }
};

TEST_F(FreedLineTest, AFreeUnmarksTheLineWithAGracePeriodForTheOtherWordsOfIt) {
  uint64_t committed = 0, recovered = 0;
  ASSERT_NO_FATAL_FAILURE(Run(/*mutant=*/false, committed, recovered));
  EXPECT_EQ(recovered, committed);  // undone from the kept record
}

TEST_F(FreedLineTest, MutationGateKillsTheFreedLineMutant) {
  uint64_t committed = 0, recovered = 0;
  ASSERT_NO_FATAL_FAILURE(Run(/*mutant=*/true, committed, recovered));
  EXPECT_EQ(recovered, 99u) << "txn.mutant.fast_line_freed survived: the word was not made cold";
}

// Off: no line is ever marked, and every declaration reads its slot.
TEST_F(TxnTest, FastLinesOff) {
  Options o = Quiet();
  o.fast_lines = false;
  Open(o);
  ASSERT_OK(txn::Run([&]() -> absl::Status {
    for (int i = 0; i < 64; ++i) RETURN_IF_ERROR(write(&root_->words[i], uint64_t{1}));
    return absl::OkStatus();
  }));
  ASSERT_OK(engine().Reclaim());
  EXPECT_EQ(engine().stats().lines_marked, 0u);
  EXPECT_FALSE(engine().IsFastLine(&root_->words[8]));
}

// The adaptive cold age halves while the compacted log is over half the budget, but never
// below the touch slack (the previous test's invariant).
TEST_F(TxnTest, TheAdaptiveColdAgeStopsAtTheTouchSlack) {
  Options o = Quiet();
  o.log_budget = 8 << 10;  // every word's entry in K: ~8 KiB, over half of it
  o.log_limit = 1 << 20;
  ASSERT_EQ(o.cold_after_epochs, 64u);
  ASSERT_TRUE(o.adaptive_cold);
  Open(o);
  uint64_t min_age = engine().stats().cold_age;
  for (int round = 0; round < 8; ++round) {
    for (int i = 0; i < kWords; ++i) {  // every word, in an order that forms no runs in K
      const int w = (i * 263) % kWords;
      ASSERT_OK(txn::Run([&] { return write(&root_->words[w], uint64_t(round)); }));
    }
    ASSERT_OK(engine().Reclaim());
    min_age = std::min(min_age, engine().stats().cold_age);
  }
  EXPECT_GT(engine().stats().full_cycles, 3u);
  EXPECT_EQ(min_age, txn_internal::kMaxTouchSlack);
}

// A reclamation cycle holds no epoch guard while it folds (only while it takes a block): an
// epoch boundary that falls in a cycle completes at once. Before, the boundary waited for the
// whole fold, and every transaction's begin waited for the boundary. The hook runs in the
// middle of the fold, on the reclaimer's thread; the advance runs on another thread (with the
// guard held through the fold it could not complete before the hook returned: it would time
// out). Then the cycle finishes and the words recover, including those written meanwhile.
TEST_F(TxnTest, AnEpochBoundaryDoesNotWaitForAReclamationCycle) {
  Options o = Quiet(4096);
  o.cold_after_epochs = 0;  // the fold also makes words cold (CAS, flush) without a guard
  o.adaptive_cold = false;
  Open(o);
  for (int round = 0; round < 3; ++round) {
    for (int i = 0; i < kWords; ++i) {
      ASSERT_OK(txn::Run([&] { return write(&root_->words[i], uint64_t(round * 1000 + i)); }));
    }
  }
  ASSERT_OK(rt_.epochs->Advance());
  const uint64_t completed = rt_.epochs->completed();
  int calls = 0;
  bool advanced_in_fold = false;
  std::thread advancer;
  std::future<absl::Status> advanced;
  engine().SetFoldHookForTesting([&] {
    if (calls++ > 0) return;
    std::packaged_task<absl::Status()> advance([&] { return rt_.epochs->Advance(); });
    advanced = advance.get_future();
    advancer = std::thread(std::move(advance));
    // Liveness, not speed: a boundary blocked by the fold cannot finish before this returns.
    advanced_in_fold = advanced.wait_for(std::chrono::seconds(20)) == std::future_status::ready;
  });
  std::thread reclaimer([&] { EXPECT_OK(engine().Reclaim(/*advance=*/false)); });
  reclaimer.join();
  engine().SetFoldHookForTesting(nullptr);
  ASSERT_TRUE(advancer.joinable());
  advancer.join();
  EXPECT_OK(advanced.get());
  EXPECT_GE(calls, 1);
  EXPECT_TRUE(advanced_in_fold) << "the boundary waited for the cycle";
  EXPECT_GE(rt_.epochs->completed(), completed + 1);
  EXPECT_GT(engine().stats().words_cold, 0u);
  // Transactions after the cycle, then a crash: every word has its last value.
  for (int i = 0; i < kWords; i += 7) {
    ASSERT_OK(txn::Run([&] { return write(&root_->words[i], uint64_t(5000 + i)); }));
  }
  CrashAndRecover(o);
  for (int i = 0; i < kWords; ++i) {
    ASSERT_EQ(root_->words[i], uint64_t(i % 7 == 0 ? 5000 + i : 2000 + i)) << i;
  }
}

TEST_F(TxnTest, LogBlocksChainAndAreReused) {
  Options o = Quiet(4096);
  o.cold_after_epochs = 0;
  o.adaptive_cold = false;
  Open(o);
  uint64_t model[kWords] = {};
  uint64_t rng = 12345;
  auto next = [&] {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
  };
  uint64_t owned_after_first = 0;
  for (int round = 0; round < 6; ++round) {
    for (int t = 0; t < 400; ++t) {
      ASSERT_OK(begin());
      for (int k = 0; k < 8; ++k) {
        const int i = static_cast<int>(next() % 64);  // a small hot set
        const uint64_t v = next();
        ASSERT_OK(write(&root_->words[i], v));
        model[i] = v;
      }
      ASSERT_OK(commit());
    }
    const Stats before = engine().stats();
    EXPECT_GT(before.log_bytes, 4u * 4096) << "records chained over several blocks";
    ASSERT_OK(rt_.epochs->Advance());
    ASSERT_OK(engine().Reclaim());
    const Stats after = engine().stats();
    EXPECT_LT(after.log_bytes, before.log_bytes);
    if (round == 0) owned_after_first = after.log_bytes_owned;
    // Freed blocks are reused: the layer's footprint does not grow round after round.
    if (round > 0) {
      EXPECT_LE(after.log_bytes_owned, owned_after_first + 2 * 4096);
    }
    CrashAndRecover(o);
    for (int i = 0; i < kWords; ++i) ASSERT_EQ(root_->words[i], model[i]) << "round " << round;
  }
}

TEST_F(TxnTest, AllocationsFollowTheTransaction) {
  Open();
  std::set<uint64_t> live_before;
  auto live = [&] {
    std::set<uint64_t> s;
    (void)rt_.heap->Walk([&](const alloc::BlockInfo& b) { s.insert(b.offset); });
    return s;
  };
  // Aborted: the block is free again.
  const auto base = live();
  ASSERT_OK(begin());
  Obj* o1 = alloc::pnew<Obj>(Obj{1, 2, 3});
  ASSERT_NE(o1, nullptr);
  ASSERT_OK(abort());
  EXPECT_EQ(live(), base);
  // Committed: contents recorded (no add() needed), durable across a crash.
  ASSERT_OK(begin());
  Obj* o2 = alloc::pnew<Obj>(Obj{4, 5, 6});
  ASSERT_NE(o2, nullptr);
  o2->c = 7;
  ASSERT_OK(write(&root_->obj, rt_.pool->offset_of(o2)));
  ASSERT_OK(commit());
  const uint64_t off = rt_.pool->offset_of(o2);
  CrashAndRecover();
  EXPECT_TRUE(live().count(off));
  auto* r2 = static_cast<Obj*>(rt_.pool->at(root_->obj));
  ASSERT_NE(r2, nullptr);
  EXPECT_EQ(r2->a, 4u);
  EXPECT_EQ(r2->c, 7u);
  // pdelete, aborted: still live. Committed: freed, also after a crash.
  ASSERT_OK(begin());
  ASSERT_OK(alloc::pdelete(r2));
  ASSERT_OK(abort());
  EXPECT_TRUE(live().count(off));
  ASSERT_OK(begin());
  ASSERT_OK(alloc::pdelete(static_cast<Obj*>(rt_.pool->at(root_->obj))));
  ASSERT_OK(write(&root_->obj, uint64_t{0}));
  ASSERT_OK(commit());
  CrashAndRecover();
  EXPECT_FALSE(live().count(off));
  // pnew then pdelete in one transaction: nothing remains.
  const auto before = live();
  ASSERT_OK(begin());
  Obj* o3 = alloc::pnew<Obj>();
  ASSERT_NE(o3, nullptr);
  ASSERT_OK(alloc::pdelete(o3));
  ASSERT_OK(commit());
  EXPECT_EQ(live(), before);
  // Too large for one record: refused inside a transaction.
  ASSERT_OK(begin());
  struct Big {
    char bytes[8000];
  };
  EXPECT_EQ(alloc::pnew<Big>(), nullptr);
  EXPECT_THAT(commit(), StatusIs(absl::StatusCode::kInvalidArgument, "exceeds"));
}

// A block freed in a transaction whose words have entries in the compacted log, the free folded
// by an incremental cycle (which does not rewrite the compacted log): the cycle carries the
// tombstone into its segment, or recovery replays the old entries into the block's next life.
// Here the block is reused outside transactions after the free.
TEST_F(TxnTest, AFreedBlocksOldEntriesAreNotReplayedIntoItsNextLife) {
  Open();
  ASSERT_OK(begin());
  Obj* o = alloc::pnew<Obj>(Obj{11, 12, 13});
  ASSERT_NE(o, nullptr);
  ASSERT_OK(write(&root_->obj, rt_.pool->offset_of(o)));
  ASSERT_OK(commit());
  const uint64_t off = rt_.pool->offset_of(o);
  ASSERT_OK(rt_.epochs->Sync());  // o's transaction's epoch completes, so the cycle folds it
  ASSERT_OK(engine().Reclaim());  // the first cycle is full: o's words are in the compacted log
  ASSERT_GE(engine().stats().words_kept, 4u);
  ASSERT_OK(begin());
  ASSERT_OK(alloc::pdelete(o));
  ASSERT_OK(write(&root_->obj, uint64_t{0}));
  ASSERT_OK(commit());
  const uint64_t full_before = engine().stats().full_cycles;
  ASSERT_OK(rt_.epochs->Sync());
  ASSERT_OK(engine().Reclaim());  // folds the free
  ASSERT_EQ(engine().stats().full_cycles, full_before) << "the case needs an incremental cycle";
  // The block's next life, outside transactions (epoch-scoped, made durable).
  {
    epoch::Guard g(*rt_.epochs);
    auto* next = static_cast<Obj*>(rt_.pool->at(off));
    *next = Obj{21, 22, 23};
    rt_.epochs->RecordDirty(next, sizeof(Obj));
  }
  ASSERT_OK(rt_.epochs->Sync());
  CrashAndRecover();
  const auto* after = static_cast<const Obj*>(rt_.pool->at(off));
  EXPECT_EQ(after->a, 21u);
  EXPECT_EQ(after->b, 22u);
  EXPECT_EQ(after->c, 23u);
}

TEST_F(TxnTest, TooLargeTransactionAbortsAtCommit) {
  Open(Quiet(4096));
  ASSERT_OK(begin());
  ASSERT_OK(add(&root_->words[0], sizeof(root_->words)));
  for (int i = 0; i < kWords; ++i) root_->words[i] = i + 1;
  EXPECT_THAT(commit(), StatusIs(absl::StatusCode::kResourceExhausted, "does not fit"));
  for (int i = 0; i < kWords; ++i) ASSERT_EQ(root_->words[i], 0u);
}

// A small commit (several declarations) that finds no room in the log: txn::commit returns its
// status (from CommitFast, which made the attempt, through CommitGeneral), the transaction is
// rolled back and over, and once the log has room the next one commits.
TEST_F(TxnTest, ASmallCommitOutOfLogSpaceReportsItThroughCommit) {
  Options o = Quiet(4096);
  o.log_budget = 16 << 10;
  o.log_limit = 32 << 10;  // 8 blocks, no background reclaimer
  Open(o);
  ASSERT_OK(txn::Run([&] {  // the words' snapshots: hot from here on
    for (int w = 0; w < 4; ++w) RETURN_IF_ERROR(write(&root_->words[w], uint64_t{0}));
    return absl::OkStatus();
  }));
  absl::Status failed;
  uint64_t committed = 0;
  for (uint64_t v = 1; v < 10000 && failed.ok(); ++v) {
    ASSERT_OK(begin());
    for (int w = 0; w < 4; ++w) ASSERT_OK(write(&root_->words[w], v));
    failed = commit();
    if (failed.ok()) committed = v;
  }
  EXPECT_EQ(failed.code(), absl::StatusCode::kResourceExhausted) << failed;
  EXPECT_FALSE(in_transaction());
  for (int w = 0; w < 4; ++w) EXPECT_EQ(root_->words[w], committed) << w;  // rolled back
  EXPECT_EQ(commit().code(), absl::StatusCode::kFailedPrecondition);       // nothing left over
  // (Two cycles: the first folds the full logs into K, the second frees what K superseded.)
  ASSERT_OK(engine().Reclaim());
  ASSERT_OK(engine().Reclaim());
  EXPECT_LT(engine().stats().log_bytes, o.log_limit);
  ASSERT_OK(txn::Run([&] {
    for (int w = 0; w < 4; ++w) RETURN_IF_ERROR(write(&root_->words[w], committed + 1));
    return absl::OkStatus();
  }));
  CrashAndRecover(o);
  for (int w = 0; w < 4; ++w) EXPECT_EQ(root_->words[w], committed + 1) << w;
}

// Two threads commit to the same words in turn (the turn is the lock); after a crash the words
// hold the last committed values, whichever thread's log recovery walks first.
TEST_F(TxnTest, CommitOrderAcrossThreads) {
  Open();
  for (int last_writer = 0; last_writer < 2; ++last_writer) {
    std::mutex mu;
    std::condition_variable cv;
    int turn = 0;
    const int rounds = 101 + last_writer;  // ends on thread (rounds - 1) % 2
    auto worker = [&](int me) {
      for (int r = me; r < rounds; r += 2) {
        std::unique_lock<std::mutex> l(mu);
        cv.wait(l, [&] { return turn == r; });
        ASSERT_OK(txn::Run([&]() -> absl::Status {
          for (int i = 0; i < 4; ++i) {
            if (auto st = write(&root_->words[200 + i], uint64_t(r * 10 + i)); !st.ok()) return st;
          }
          return absl::OkStatus();
        }));
        ++turn;
        cv.notify_all();
      }
    };
    std::thread a(worker, 0), b(worker, 1);
    a.join();
    b.join();
    CrashAndRecover();
    for (int i = 0; i < 4; ++i) EXPECT_EQ(root_->words[200 + i], uint64_t((rounds - 1) * 10 + i));
  }
}

TEST_F(TxnTest, RecoveryIsIdempotent) {
  Open();
  for (int i = 0; i < 50; ++i)
    ASSERT_OK(txn::Run([&] { return write(&root_->words[i % 7], uint64_t(i)); }));
  ASSERT_OK(begin());
  ASSERT_OK(write(&root_->words[1], uint64_t{777}));
  Buffer image(kPoolSize);
  image.CopyFrom(buf_.data());
  ASSERT_OK(abort());
  rt_.Reset();
  for (int twice = 0; twice < 3; ++twice) {
    buf_.CopyFrom(image.data());
    auto r = OpenMemory(buf_.data(), kPoolSize, Eadr(), Quiet(), false);
    ASSERT_OK(r);
    rt_ = std::move(*r);
    root_ = *rt_.pool->root<Root>();
    for (int w = 0; w < 7; ++w) {
      int last = -1;
      for (int i = 0; i < 50; ++i)
        if (i % 7 == w) last = i;
      EXPECT_EQ(root_->words[w], uint64_t(last));
    }
    // Recover the recovered image again (a crash right after recovery).
    image.CopyFrom(buf_.data());
    rt_.Reset();
  }
}

// The reclaimer keeps no index slot of the words it folds into the compacted log K: each K word
// keeps its record's key, which the reclaimer remembers alongside K (k_keys_). A failed cycle
// (here an incremental one, after writing its segment) must leave those keys as K's records
// are, the next (full) cycle must read K with them, and recovery must rebuild them: every
// word keeps its last value through all of it and through the crashes after.
TEST_F(TxnTest, AFailedCycleLosesNothingAndTheNextFoldsEverything) {
  Open();
  auto write_range = [&](int from, int to, uint64_t base) {
    for (int i = from; i < to; i += 8) {
      ASSERT_OK(txn::Run([&]() -> absl::Status {
        for (int w = i; w < std::min(to, i + 8); ++w)
          RETURN_IF_ERROR(write(&root_->words[w], base + uint64_t(w)));
        return absl::OkStatus();
      }));
    }
    ASSERT_OK(rt_.epochs->Sync());  // the transactions' epoch completes: the next cycle folds them
  };
  std::vector<uint64_t> want(64);
  auto expect_all = [&](const char* when) {
    for (int w = 0; w < 64; ++w) ASSERT_EQ(root_->words[w], want[w]) << when << ", word " << w;
  };
  write_range(0, 64, 1000);
  for (int w = 0; w < 64; ++w) want[w] = 1000 + uint64_t(w);
  ASSERT_OK(engine().Reclaim());  // the first cycle is full: every word into K
  const uint64_t full0 = engine().stats().full_cycles;
  ASSERT_GE(engine().stats().words_kept, 64u);

  write_range(0, 32, 2000);
  for (int w = 0; w < 32; ++w) want[w] = 2000 + uint64_t(w);
  engine().FailNextReclaimForTesting();
  EXPECT_THAT(engine().Reclaim(), StatusIs(absl::StatusCode::kAborted, "on request"));
  EXPECT_EQ(engine().stats().full_cycles, full0);

  write_range(32, 48, 3000);
  for (int w = 32; w < 48; ++w) want[w] = 3000 + uint64_t(w);
  ASSERT_OK(engine().Reclaim());  // full (after a failed cycle): reads K with its keys
  EXPECT_EQ(engine().stats().full_cycles, full0 + 1);
  write_range(0, 1, 4000);
  want[0] = 4000;
  ASSERT_OK(engine().Reclaim());  // incremental: a segment of one word
  EXPECT_EQ(engine().stats().full_cycles, full0 + 1);
  expect_all("before the first crash");

  CrashAndRecover();
  expect_all("after the first recovery");
  write_range(48, 56, 5000);
  for (int w = 48; w < 56; ++w) want[w] = 5000 + uint64_t(w);
  ASSERT_OK(engine().Reclaim());  // the first cycle after an open is full: the rebuilt keys
  ASSERT_OK(engine().Reclaim(/*advance=*/true));
  CrashAndRecover();
  expect_all("after the second recovery");
}

TEST_F(TxnTest, BackgroundReclaimerKeepsTheLogWithinBudget) {
  Options o;
  o.block_size = 4096;
  o.log_budget = 256 << 10;
  Open(o);
  uint64_t rng = 99;
  uint64_t peak = 0;
  for (int i = 0; i < 20000; ++i) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    ASSERT_OK(txn::Run([&] { return write(&root_->words[rng % 128], rng); }));
    if (i % 64 == 0) (void)rt_.epochs->Advance();
    peak = std::max(peak, engine().stats().log_bytes);
  }
  const Stats s = engine().stats();
  std::printf("log: peak %lu, now %lu, budget %zu, cycles %lu, kept %lu dropped %lu cold %lu\n",
              peak, s.log_bytes, o.log_budget, s.cycles, s.words_kept, s.words_dropped,
              s.words_cold);
  EXPECT_GT(s.cycles, 0u);
  EXPECT_LE(s.log_bytes_owned, 2 * o.log_budget);
}

TEST_F(TxnTest, ABudgetTheBlockLimitCannotHoldIsCapped) {
  // 1 MiB of thread logs (256 blocks of 4 KiB) cannot hold a 4 MiB budget: its trigger (2 MiB)
  // would never be reached, begin() would not wait in time, and records would fail at the
  // limit. The budget in effect is 4/7 of the limit.
  Options o;
  o.block_size = 4096;
  o.log_budget = 4 << 20;
  o.log_limit = 1 << 20;
  Open(o);
  EXPECT_EQ(engine().stats().log_budget, uint64_t{256} * 4 / 7 * 4096);
  uint64_t rng = 7;
  for (int i = 0; i < 20000; ++i) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    ASSERT_OK(txn::Run([&]() -> absl::Status {  // 4 words: ~2 MiB of records in all
      for (uint64_t k = 0; k < 4; ++k) RETURN_IF_ERROR(write(&root_->words[(rng + k) % 128], rng));
      return absl::OkStatus();
    })) << "at "
        << i;
    if (i % 64 == 0) (void)rt_.epochs->Advance();
  }
  const Stats s = engine().stats();
  EXPECT_GT(s.cycles, 0u);
  EXPECT_LE(s.log_bytes_peak, o.log_limit);
}

// An automatic budget (Options::log_budget 0) over a hot set of `words` words of a heap array:
// `rounds` rounds of `per_round` one-word transactions on random words of it, each round ending
// with an epoch advance and a cycle. Checks the array against a model afterwards.
class AutoBudgetTest : public TxnTest {
 protected:
  static Options Auto() {
    Options o = Quiet();
    o.log_budget = 0;
    o.cold_after_epochs = 4;  // words not written go cold within a few cycles
    o.max_cold_after_epochs = 8;
    return o;
  }
  void SetUp() override {
    Open(Auto());
    arr_ = static_cast<uint64_t*>(rt_.heap->Allocate(kArrayWords * 8, 64));
    ASSERT_NE(arr_, nullptr);
    std::memset(arr_, 0, kArrayWords * 8);
    model_.assign(kArrayWords, 0);
    base_ = engine().stats().log_budget;
  }
  void Rounds(uint64_t words, int rounds, int per_round) {
    for (int r = 0; r < rounds; ++r) {
      for (int i = 0; i < per_round; ++i) {
        rng_ ^= rng_ << 13;
        rng_ ^= rng_ >> 7;
        rng_ ^= rng_ << 17;
        const uint64_t w = rng_ % words;
        ASSERT_OK(txn::Run([&] { return write(&arr_[w], rng_); }));
        model_[w] = rng_;
      }
      ASSERT_OK(rt_.epochs->Advance());
      ASSERT_OK(engine().Reclaim());
    }
  }
  void ExpectModel() {
    for (uint64_t w = 0; w < kArrayWords; ++w) ASSERT_EQ(arr_[w], model_[w]) << "word " << w;
  }
  static constexpr uint64_t kArrayWords = 32768;
  uint64_t* arr_ = nullptr;
  std::vector<uint64_t> model_;
  uint64_t rng_ = 12345;
  uint64_t base_ = 0;
};

TEST_F(AutoBudgetTest, FollowsTheHotSetUpAndBackDown) {
  // The pool-sized start: 1/16 of a 16 MiB pool's heap, at least 1 MiB.
  EXPECT_EQ(base_, uint64_t{1} << 20);
  // 32,768 hot words: a compacted log of ~512 KiB, over 1/8 of 1, 2 and 4 MiB. The heap's
  // ~15 MiB of free chunks allow growths of 1 and 2 MiB (4 x the growth), not one of 4 MiB.
  Rounds(kArrayWords, 60, 4000);
  Stats s = engine().stats();
  EXPECT_EQ(s.log_budget, uint64_t{4} << 20) << "compacted log " << s.compact_bytes;
  EXPECT_EQ(s.budget_changes, 2u);
  ExpectModel();
  // Then 16 hot words: the others go cold, the compacted log shrinks under 1/32 of the budget,
  // and the budget halves back to its start.
  Rounds(16, 400, 20);
  s = engine().stats();
  EXPECT_EQ(s.log_budget, base_) << "compacted log " << s.compact_bytes;
  EXPECT_EQ(s.budget_changes, 4u);
  ExpectModel();
}

TEST_F(AutoBudgetTest, LeavesAFullHeapToTheProgram) {
  Rounds(kArrayWords, 60, 4000);
  ASSERT_EQ(engine().stats().log_budget, uint64_t{4} << 20);
  // The program takes the heap's free chunks but 2 MiB: fewer than the budget, which halves at
  // the next full cycle and then again, back to its start (and never grows while so).
  std::vector<void*> taken;
  while (rt_.heap->FreeChunkBytes() > (uint64_t{2} << 20)) {
    void* p = rt_.heap->Allocate(uint64_t{1} << 20, 64);
    if (p == nullptr) break;
    taken.push_back(p);
  }
  ASSERT_LE(rt_.heap->FreeChunkBytes(), uint64_t{2} << 20);
  Rounds(kArrayWords, 100, 1000);
  const Stats s = engine().stats();
  EXPECT_EQ(s.log_budget, base_);
  ExpectModel();
  for (void* p : taken) ASSERT_OK(rt_.heap->Free(p));
}

}  // namespace
}  // namespace pmrt::txn
