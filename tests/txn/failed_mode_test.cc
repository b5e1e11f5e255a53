// The failed mode (docs/durability.md): an msync that fails, injected in the seam at a chosen
// call, puts the pool in a sticky failed state. Advance, Sync and commit return an error naming
// the pool and the cause, later commits are refused (rolled back), reads keep working, the
// pool is not marked clean at close, and the next open recovers the last durable state.
#include <atomic>
#include <cerrno>
#include <cstring>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "alloc/allocator.h"
#include "ds/durable_masstree.h"
#include "epoch/persist.h"
#include "gtest/gtest.h"
#include "tests/txn/txn_runtime.h"
#include "tests/util/test_util.h"
#include "txn/txn.h"

namespace pmrt::txn {
namespace {

constexpr size_t kPoolSize = 8 << 20;

// Epoch-scoped fields, undo-logged in the external log before their first change in an epoch.
struct Logged {
  uint64_t synced;    // written and synced before the failure
  uint64_t unsynced;  // written in the epoch that fails
  std::atomic<uint64_t> mark;
};
struct Root {
  Logged e;
  uint64_t txn_word;  // written by transactions
};

PoolOptions Msync() {
  PoolOptions po;
  po.backend = BackendKind::kMsync;
  return po;
}

absl::StatusOr<testing::Runtime> OpenFile(const std::string& path, bool create) {
  auto pool = create ? Pool::Create(path, kPoolSize, "failed-mode", Msync())
                     : Pool::Open(path, "failed-mode", Msync());
  if (!pool.ok()) return pool.status();
  return testing::Attach(std::move(*pool), Options{});
}

// A transaction that sets root->txn_word to v.
absl::Status SetWord(Root* root, uint64_t v) {
  if (auto st = begin(); !st.ok()) return st;
  if (auto st = add(&root->txn_word, 8); !st.ok()) {
    (void)abort();
    return st;
  }
  root->txn_word = v;
  return commit();
}

// The error names the pool's file, says it is the failed mode, and gives the cause.
void ExpectNamesPoolAndCause(const absl::Status& st, const std::string& path) {
  EXPECT_EQ(st.code(), absl::StatusCode::kDataLoss) << st;
  EXPECT_NE(st.message().find(path), std::string::npos) << st;
  EXPECT_NE(st.message().find("failed mode"), std::string::npos) << st;
  EXPECT_NE(st.message().find("msync of"), std::string::npos) << st;
  EXPECT_NE(st.message().find(std::strerror(EIO)), std::string::npos) << st;
}

TEST(FailedModeTest, AnMsyncErrorIsStickyRefusesWritesKeepsReadsAndReopenRecovers) {
  pmrt::testing::TempDir dir;
  const std::string path = dir.File("failed.pool");
  {
    auto rt = OpenFile(path, /*create=*/true);
    ASSERT_OK(rt);
    Root* root = *rt->pool->root<Root>();
    ASSERT_OK(SetWord(root, 1));
    {
      epoch::Guard g(*rt->epochs);
      ASSERT_OK(rt->epochs->log().Snapshot(&root->e, sizeof(Logged), &root->e.mark));
      root->e.synced = 11;
    }
    ASSERT_OK(rt->epochs->Sync());
    ASSERT_TRUE(rt->pool->health().ok());

    {
      epoch::Guard g(*rt->epochs);
      ASSERT_OK(rt->epochs->log().Snapshot(&root->e, sizeof(Logged), &root->e.mark));
      root->e.unsynced = 22;
    }
    // The next msync (the boundary's) fails, once: the mode stays failed all the same.
    epoch_internal::InjectMsyncFailures(1, 1, EIO);
    const uint64_t completed = rt->epochs->completed();
    const absl::Status first = rt->epochs->Sync();
    ExpectNamesPoolAndCause(first, path);
    EXPECT_TRUE(rt->pool->failed());
    EXPECT_EQ(rt->epochs->completed(), completed) << "the failed epoch was reported complete";
    // Sticky: later advances fail too, though msync works again.
    ExpectNamesPoolAndCause(rt->epochs->Advance(), path);
    ExpectNamesPoolAndCause(rt->epochs->Sync(), path);
    EXPECT_EQ(rt->epochs->completed(), completed);
    // A commit is refused and rolled back; reads keep working.
    ExpectNamesPoolAndCause(SetWord(root, 2), path);
    EXPECT_EQ(root->txn_word, 1u);
    EXPECT_EQ(root->e.synced, 11u);
    EXPECT_EQ(root->e.unsynced, 22u);
    // An undo snapshot is refused (the object must not change), and nothing is modified.
    {
      epoch::Guard g(*rt->epochs);
      const uint64_t mark = root->e.mark.load();
      ExpectNamesPoolAndCause(rt->epochs->log().Snapshot(&root->e, sizeof(Logged), &root->e.mark),
                              path);
      EXPECT_EQ(root->e.mark.load(), mark);
    }
    // Guards still enter and leave (no hang): the clock keeps turning, volatile only.
    { epoch::Guard g(*rt->epochs); }
    // Closing reports the mode and leaves the pool marked as crashed.
    rt->engine.reset();
    rt->heap.reset();
    rt->epochs.reset();
    ExpectNamesPoolAndCause(rt->pool->Close(), path);
  }
  // The next open recovers the last durable state: the failed epoch's write is rolled back.
  auto rt = OpenFile(path, /*create=*/false);
  ASSERT_OK(rt);
  EXPECT_FALSE(rt->pool->was_clean_shutdown());
  EXPECT_TRUE(rt->pool->health().ok());
  Root* root = *rt->pool->root<Root>();
  EXPECT_EQ(root->e.synced, 11u);
  EXPECT_EQ(root->e.unsynced, 0u) << "the failed epoch's write survived";
  EXPECT_EQ(root->txn_word, 1u);
  ASSERT_OK(SetWord(root, 3));
  EXPECT_OK(rt->epochs->Sync());
}

// A commit whose own fence fails: the transaction took effect, but commit reports that its
// durability is unknown (the failed mode), and so does every commit after it.
TEST(FailedModeTest, ACommitWhoseFenceFailsSaysSo) {
  pmrt::testing::TempDir dir;
  const std::string path = dir.File("commit.pool");
  auto rt = OpenFile(path, /*create=*/true);
  ASSERT_OK(rt);
  Root* root = *rt->pool->root<Root>();
  ASSERT_OK(SetWord(root, 1));
  epoch_internal::InjectMsyncFailures(1, 1, EIO);
  ExpectNamesPoolAndCause(SetWord(root, 5), path);
  EXPECT_EQ(root->txn_word, 5u);  // in effect, durability unknown
  ExpectNamesPoolAndCause(SetWord(root, 6), path);
  EXPECT_EQ(root->txn_word, 5u);  // refused and rolled back
  ExpectNamesPoolAndCause(rt->epochs->Sync(), path);
}

// The same through the general commit (a transaction that allocates): its fence failed, the
// transaction took effect and commit says so; the next one is refused and rolled back.
TEST(FailedModeTest, AGeneralCommitWhoseFenceFailsSaysSo) {
  pmrt::testing::TempDir dir;
  const std::string path = dir.File("general.pool");
  auto rt = OpenFile(path, /*create=*/true);
  ASSERT_OK(rt);
  Root* root = *rt->pool->root<Root>();
  auto allocating = [&](uint64_t v) -> absl::Status {
    if (auto st = begin(); !st.ok()) return st;
    uint64_t* p = alloc::pnew<uint64_t>(v);
    if (p == nullptr) {
      (void)abort();
      return absl::ResourceExhaustedError("pnew");
    }
    if (auto st = write(&root->txn_word, v); !st.ok()) {
      (void)abort();
      return st;
    }
    return commit();
  };
  ASSERT_OK(allocating(1));
  epoch_internal::InjectMsyncFailures(1, 1, EIO);
  ExpectNamesPoolAndCause(allocating(7), path);
  EXPECT_EQ(root->txn_word, 7u);  // in effect, durability unknown
  ExpectNamesPoolAndCause(allocating(8), path);
  EXPECT_EQ(root->txn_word, 7u);  // refused and rolled back
}

// A durable Masstree on a pool in its failed mode: writes that need the undo log (splits of
// leaves older than the epoch) are refused with kNoMemory rather than abort the process, reads
// keep working, and the next open has exactly the keys of the last durable epoch.
TEST(FailedModeTest, ADurableTreeRefusesWritesThatNeedTheUndoLog) {
  pmrt::testing::TempDir dir;
  const std::string path = dir.File("tree.pool");
  uint64_t where = 0;
  std::map<std::string, std::string> synced;
  {
    auto rt = OpenFile(path, /*create=*/true);
    ASSERT_OK(rt);
    auto tree = ds::DurableMasstree::Create(*rt->pool, *rt->epochs, *rt->heap);
    ASSERT_OK(tree);
    where = (*tree)->descriptor();
    for (int i = 0; i < 3000; ++i) {
      const std::string k = absl::StrCat("key", i * 7919 % 3001);
      ASSERT_EQ((*tree)->put(k, "v"), ds::PutResult::kInserted);
      synced[k] = "v";
    }
    ASSERT_OK(rt->epochs->Sync());
    epoch_internal::InjectMsyncFailures(1, 1, EIO);
    ExpectNamesPoolAndCause(rt->epochs->Sync(), path);
    int refused = 0, written = 0;
    for (int i = 0; i < 3000 && refused == 0; ++i) {
      const ds::PutResult r = (*tree)->put(absl::StrCat("new", i), "w");
      (r == ds::PutResult::kNoMemory ? refused : written) += 1;
    }
    EXPECT_EQ(refused, 1) << "no write was refused (" << written << " written)";
    for (const auto& [k, v] : synced) ASSERT_EQ((*tree)->get(k), v) << k;
    tree->reset();
  }
  auto rt = OpenFile(path, /*create=*/false);
  ASSERT_OK(rt);
  auto tree = ds::DurableMasstree::Open(*rt->pool, *rt->epochs, *rt->heap, where);
  ASSERT_OK(tree);
  std::map<std::string, std::string> got;
  (*tree)->scan("", SIZE_MAX, [&](std::string_view k, std::string_view v) {
    got.emplace(std::string(k), std::string(v));
    return true;
  });
  EXPECT_EQ(got, synced);
  ASSERT_OK((*tree)->CheckInvariants());
}

constexpr int kWords = 512;  // the root region holds 4 KiB
struct Words {
  uint64_t w[kWords];
};

// Runs transactions of 8 words each (their values in `expect`) until one is refused; returns
// the refusal.
absl::Status WriteUntilRefused(Words* words, std::vector<uint64_t>& expect, int* committed) {
  for (uint64_t n = 1; n < 10'000'000; ++n) {
    if (absl::Status st = begin(); !st.ok()) return st;
    const int first = static_cast<int>((n * 8) % kWords);
    for (int i = 0; i < 8; ++i) {
      if (absl::Status st = add(&words->w[first + i], 8); !st.ok()) {
        (void)abort();
        return st;
      }
      words->w[first + i] = n;
    }
    if (absl::Status st = commit(); !st.ok()) return st;
    for (int i = 0; i < 8; ++i) expect[first + i] = n;
    ++*committed;
  }
  return absl::OkStatus();
}

// A log of 4 KiB blocks and a 256 KiB budget: it fills after a few hundred transactions.
Options SmallLog() {
  Options to;
  to.block_size = 4096;
  to.log_budget = 256 << 10;
  return to;
}

// After the failed mode: sticky, reads keep working, the close reports it, and the next open
// replays every committed transaction.
void ExpectFailedThenRecovered(testing::Runtime rt, const std::string& path,
                               const std::vector<uint64_t>& expect) {
  Words* words = *rt.pool->root<Words>();
  EXPECT_TRUE(rt.pool->failed());
  EXPECT_EQ(SetWord(reinterpret_cast<Root*>(words), 7).code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(rt.epochs->Sync().code(), absl::StatusCode::kDataLoss);
  { epoch::Guard g(*rt.epochs); }  // guards never wait
  for (int i = 0; i < kWords; ++i) ASSERT_EQ(words->w[i], expect[i]) << i;
  rt.engine.reset();
  rt.heap.reset();
  rt.epochs.reset();
  EXPECT_EQ(rt.pool->Close().code(), absl::StatusCode::kDataLoss);
  rt.pool.reset();

  auto again = OpenFile(path, /*create=*/false);
  ASSERT_OK(again);
  EXPECT_FALSE(again->pool->was_clean_shutdown());
  words = *again->pool->root<Words>();
  for (int i = 0; i < kWords; ++i) ASSERT_EQ(words->w[i], expect[i]) << i;
  EXPECT_OK(SetWord(reinterpret_cast<Root*>(words), 9));
}

// An epoch that cannot complete: another thread holds a guard, so the boundary the reclaimer
// starts waits; after ManagerOptions::max_guard_wait the pool enters its failed mode, naming
// the epoch, and the epoch reopens (the writers that waited for it go on, and are refused).
TEST(FailedModeTest, AnEpochThatCannotCompleteEntersTheFailedMode) {
  pmrt::testing::TempDir dir;
  const std::string path = dir.File("epoch.pool");
  std::vector<uint64_t> expect(kWords, 0);
  auto pool = Pool::Create(path, kPoolSize, "failed-mode", Msync());
  ASSERT_OK(pool);
  Options to = SmallLog();
  epoch::ManagerOptions eo = testing::ManualEpochs();
  eo.max_guard_wait = std::chrono::milliseconds(200);
  auto rt = testing::Attach(std::move(*pool), to, eo);
  ASSERT_OK(rt);
  std::atomic<bool> release{false};
  std::atomic<bool> holding{false};
  std::thread holder([&] {
    epoch::Guard g(*rt->epochs);
    holding.store(true);
    while (!release.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  });
  while (!holding.load()) std::this_thread::yield();
  int committed = 0;
  const absl::Status refused = WriteUntilRefused(*rt->pool->root<Words>(), expect, &committed);
  EXPECT_GT(committed, 100);
  EXPECT_EQ(refused.code(), absl::StatusCode::kDataLoss) << refused;
  EXPECT_NE(refused.message().find(path), std::string::npos) << refused;
  EXPECT_NE(refused.message().find("cannot complete"), std::string::npos) << refused;
  EXPECT_FALSE(in_transaction());
  release.store(true);
  holder.join();
  ExpectFailedThenRecovered(std::move(*rt), path, expect);
}

// A log that cannot drain: every reclamation cycle fails (injected), so the log reaches its
// stall size and stays there; once a begin() has waited Options::max_log_wait for room, the
// pool enters its failed mode, naming the reclaimer's error.
TEST(FailedModeTest, ALogThatCannotDrainEntersTheFailedMode) {
  pmrt::testing::TempDir dir;
  const std::string path = dir.File("drain.pool");
  std::vector<uint64_t> expect(kWords, 0);
  auto pool = Pool::Create(path, kPoolSize, "failed-mode", Msync());
  ASSERT_OK(pool);
  Options to = SmallLog();
  to.max_log_wait = std::chrono::milliseconds(300);
  auto rt = testing::Attach(std::move(*pool), to);
  ASSERT_OK(rt);
  txn_internal::InjectReclaimFailures(~uint64_t{0});
  int committed = 0;
  const absl::Status refused = WriteUntilRefused(*rt->pool->root<Words>(), expect, &committed);
  txn_internal::InjectReclaimFailures(0);
  EXPECT_GT(committed, 100);
  EXPECT_EQ(refused.code(), absl::StatusCode::kDataLoss) << refused;
  EXPECT_NE(refused.message().find(path), std::string::npos) << refused;
  EXPECT_NE(refused.message().find("cannot drain"), std::string::npos) << refused;
  EXPECT_NE(refused.message().find("injected failure"), std::string::npos) << refused;
  EXPECT_FALSE(in_transaction());
  ExpectFailedThenRecovered(std::move(*rt), path, expect);
}

// Without a pool to put in the failed mode (a bare persister), an msync error cannot be
// reported to anyone: the process stops with the error rather than go on as if durable.
TEST(FailedModeDeathTest, ABarePersistersMsyncErrorAborts) {
  alignas(4096) static uint8_t page[4096];
  EXPECT_DEATH(
      {
        Persister p(BackendKind::kMsync, nullptr);
        epoch_internal::InjectMsyncFailures(1, 1, EIO);
        p.Persist(Site("test.flush"), Site("test.fence"), page, 64);
      },
      "msync of 4096 bytes failed");
}

}  // namespace
}  // namespace pmrt::txn
