// The lazy replay of a restart (runtime/internal/replay_journal.h): after a crash, the index
// operations of committed transactions are journaled, not applied, before Open returns. Reads
// answer from the journal, a write to a journaled key applies its entry first, and a later
// crash never lets an old entry overwrite a newer durable value.
//
// Crash images here are copies of an in-memory pool on the eADR backend taken while its runtime
// is open: under eADR the caches are in the persistence domain, so any copy taken between two
// operations is a state a crash can leave. (The crash simulator covers every fence of the same
// code: tests/runtime/runtime_crash_test.cc.)
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "epoch/pool.h"
#include "gtest/gtest.h"
#include "runtime/runtime.h"
#include "tests/util/crash_suite.h"
#include "tests/util/test_util.h"
#include "tools/pool_view.h"
#include "txn/txn.h"

namespace pmrt {
namespace {

constexpr size_t kSize = 16 << 20;
constexpr char kLayout[] = "pmrt-runtime";
constexpr int kKeys = 20;

std::string Key(int i) { return absl::StrCat("k", i); }

struct Image {
  Image() : bytes(static_cast<uint8_t*>(std::aligned_alloc(4096, kSize))) {}
  explicit Image(const Image& from) : Image() { std::memcpy(bytes.get(), from.bytes.get(), kSize); }
  Image(Image&&) = default;
  struct Free {
    void operator()(uint8_t* p) const { std::free(p); }
  };
  std::unique_ptr<uint8_t, Free> bytes;
};

RuntimeOptions Manual(bool background = false) {
  RuntimeOptions o;
  o.epochs.interval = std::chrono::milliseconds(0);
  o.txn.background = false;
  o.background_replay = background;
  return o;
}

std::unique_ptr<Runtime> OpenImage(Image& img, const std::string& name, bool background = false) {
  auto pool =
      Pool::OpenInMemory(img.bytes.get(), kSize, kLayout, pmrt::testing::EadrPoolOptions(), name);
  EXPECT_OK(pool);
  if (!pool.ok()) return nullptr;
  auto rt = Runtime::Attach(std::move(*pool), Manual(background));
  EXPECT_OK(rt);
  return rt.ok() ? std::move(*rt) : nullptr;
}

uint64_t JournalOf(Runtime& rt) {
  return static_cast<RuntimeHeader*>(rt.pool().region_base(PoolRegion::kRoot))->journal;
}

std::map<std::string, std::string> Scan(Index& index) {
  std::map<std::string, std::string> out;
  index.scan("", ~size_t{0}, [&](std::string_view k, std::string_view v) {
    out.emplace(std::string(k), std::string(v));
    return true;
  });
  return out;
}

// A pool whose every key k<i> holds "base" durably, then committed transactions that put
// "t1-<i>" on each and remove the last key, in epochs that never completed: returns its image.
Image CrashedAfterCommits() {
  Image live;
  auto pool = Pool::CreateInMemory(live.bytes.get(), kSize, kLayout,
                                   pmrt::testing::EadrPoolOptions(), "live");
  EXPECT_OK(pool);
  auto rt = Runtime::Attach(std::move(*pool), Manual());
  EXPECT_OK(rt);
  Index* index = *(*rt)->index("i");
  for (int i = 0; i < kKeys; ++i) EXPECT_OK(index->put(Key(i), "base"));
  EXPECT_OK((*rt)->sync());
  for (int i = 0; i < kKeys - 1; ++i) {
    EXPECT_OK(txn::Run([&] { return index->put(Key(i), absl::StrCat("t1-", i)).status(); }));
  }
  EXPECT_OK(txn::Run([&] { return index->remove(Key(kKeys - 1)).status(); }));
  Image crashed(live);
  return crashed;
}

TEST(LazyReplayTest, ReadsAnswerFromTheJournalAndWritesApplyTheirEntryFirst) {
  Image img = CrashedAfterCommits();
  auto rt = OpenImage(img, "image-1");
  ASSERT_NE(rt, nullptr);
  EXPECT_EQ(rt->stats().replayed_index_ops, uint64_t{kKeys});
  EXPECT_EQ(rt->stats().pending_index_ops, uint64_t{kKeys});
  EXPECT_NE(JournalOf(*rt), 0u);
  Index* index = *rt->find_index("i");
  // The tree itself still holds the rolled-back state; get() answers from the journal.
  EXPECT_EQ(index->tree().get(Key(0)), "base");
  for (int i = 0; i < kKeys - 1; ++i) EXPECT_EQ(index->get(Key(i)), absl::StrCat("t1-", i));
  EXPECT_EQ(index->get(Key(kKeys - 1)), std::nullopt);
  std::string v;
  EXPECT_TRUE(index->get(Key(3), &v));
  EXPECT_EQ(v, "t1-3");
  EXPECT_EQ(rt->stats().pending_index_ops, uint64_t{kKeys}) << "reads apply nothing";
  // A write applies the key's entry first: an insert_if_absent sees the replayed value.
  auto inserted = index->insert_if_absent(Key(4), "never");
  ASSERT_OK(inserted);
  EXPECT_EQ(*inserted, ds::InsertResult::kExists);
  EXPECT_EQ(index->tree().get(Key(4)), "t1-4");
  auto removed = index->remove(Key(kKeys - 1));
  ASSERT_OK(removed);
  EXPECT_FALSE(*removed) << "the journal's remove was applied before this one";
  EXPECT_EQ(rt->stats().pending_index_ops, uint64_t{kKeys - 2});
  // scan() applies the rest.
  auto all = Scan(*index);
  EXPECT_EQ(all.size(), size_t{kKeys - 1});
  for (int i = 0; i < kKeys - 1; ++i) EXPECT_EQ(all[Key(i)], absl::StrCat("t1-", i));
  EXPECT_EQ(rt->stats().pending_index_ops, 0u);
  EXPECT_NE(JournalOf(*rt), 0u) << "freed at the next sync, not under the reader";
  ASSERT_OK(rt->sync());
  EXPECT_EQ(JournalOf(*rt), 0u);
  ASSERT_OK(index->tree().CheckInvariants());
}

// The case a lazy replay must never get wrong: a key's entry applied, then a newer value made
// durable, then a crash with other entries still pending. The next recovery must keep the newer
// value (the entry's mark is durable with it), keep the entries not applied, and add the
// transactions committed since.
TEST(LazyReplayTest, ACrashDuringTheReplayKeepsNewerValuesAndPendingEntries) {
  Image first = CrashedAfterCommits();
  auto rt = OpenImage(first, "image-1");
  ASSERT_NE(rt, nullptr);
  Index* index = *rt->find_index("i");
  ASSERT_OK(index->put(Key(0), "new0"));                                     // epoch scope
  ASSERT_OK(txn::Run([&] { return index->put(Key(1), "new1").status(); }));  // in a txn
  ASSERT_OK(index->remove(Key(2)));                                          // epoch scope
  ASSERT_OK(rt->sync());
  ASSERT_OK(txn::Run([&] { return index->put(Key(3), "new3").status(); }));  // epoch not done
  ASSERT_OK(index->put(Key(5), "lost"));  // epoch scope, never durable
  EXPECT_EQ(rt->stats().pending_index_ops, uint64_t{kKeys - 5});
  Image second(first);
  rt.reset();

  for (int round = 0; round < 2; ++round) {
    // Round 1 opens the same image again after round 0's open: a crash right after a recovery
    // that wrote its own journal.
    Image copy(second);
    auto again = OpenImage(round == 0 ? second : copy, absl::StrCat("image-2-", round));
    ASSERT_NE(again, nullptr);
    Index* idx = *again->find_index("i");
    EXPECT_EQ(idx->get(Key(0)), "new0");
    EXPECT_EQ(idx->get(Key(1)), "new1");
    EXPECT_EQ(idx->get(Key(2)), std::nullopt);
    EXPECT_EQ(idx->get(Key(3)), "new3");
    EXPECT_EQ(idx->get(Key(5)), "t1-5");
    for (int i = 4; i < kKeys - 1; ++i) EXPECT_EQ(idx->get(Key(i)), absl::StrCat("t1-", i)) << i;
    EXPECT_EQ(idx->get(Key(kKeys - 1)), std::nullopt);
    auto all = Scan(*idx);
    EXPECT_EQ(all.size(), size_t{kKeys - 2});
    EXPECT_EQ(all["k0"], "new0");
    EXPECT_EQ(all["k3"], "new3");
    EXPECT_EQ(all.count("k2"), 0u);
    ASSERT_OK(idx->tree().CheckInvariants());
    ASSERT_OK(again->sync());
    EXPECT_EQ(JournalOf(*again), 0u);
  }
}

TEST(LazyReplayTest, TheBackgroundThreadAppliesEverything) {
  Image img = CrashedAfterCommits();
  auto rt = OpenImage(img, "image-1", /*background=*/true);
  ASSERT_NE(rt, nullptr);
  Index* index = *rt->find_index("i");
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (rt->pending_index_ops() != 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  EXPECT_EQ(rt->pending_index_ops(), 0u);
  for (int i = 0; i < kKeys - 1; ++i) {
    EXPECT_EQ(index->tree().get(Key(i)), absl::StrCat("t1-", i));
  }
  EXPECT_EQ(index->tree().get(Key(kKeys - 1)), std::nullopt);
  ASSERT_OK(rt->sync());  // (the journal is freed by the thread or here, whichever comes first)
  EXPECT_EQ(JournalOf(*rt), 0u);
}

// Writers racing the background thread for the same entries: every write lands after its key's
// entry, whichever thread applies it.
TEST(LazyReplayTest, WritesRacingTheBackgroundThreadWin) {
  for (int round = 0; round < 20; ++round) {
    Image img = CrashedAfterCommits();
    auto rt = OpenImage(img, absl::StrCat("image-", round), /*background=*/true);
    ASSERT_NE(rt, nullptr);
    Index* index = *rt->find_index("i");
    for (int i = kKeys - 1; i >= 0; --i) {
      if (i % 2 == 0) {
        ASSERT_OK(index->put(Key(i), absl::StrCat("w-", i)));
      } else {
        ASSERT_OK(txn::Run([&] { return index->remove(Key(i)).status(); }));
      }
    }
    ASSERT_OK(rt->finish_replay());
    EXPECT_EQ(rt->pending_index_ops(), 0u);
    for (int i = 0; i < kKeys; ++i) {
      EXPECT_EQ(index->tree().get(Key(i)),
                i % 2 == 0 ? std::optional<std::string>(absl::StrCat("w-", i)) : std::nullopt)
          << "round " << round << " key " << i;
    }
  }
}

TEST(LazyReplayTest, ACloseLeavesPendingEntriesForTheNextOpen) {
  Image img = CrashedAfterCommits();
  {
    auto rt = OpenImage(img, "image-1");
    ASSERT_NE(rt, nullptr);
    ASSERT_OK((*rt->find_index("i"))->put(Key(0), "new0"));
    ASSERT_OK(rt->Close());
  }
  auto rt = OpenImage(img, "image-1-reopened");
  ASSERT_NE(rt, nullptr);
  EXPECT_EQ(rt->stats().pending_index_ops, uint64_t{kKeys - 1});
  Index* index = *rt->find_index("i");
  EXPECT_EQ(index->get(Key(0)), "new0");
  EXPECT_EQ(index->get(Key(6)), "t1-6");
  ASSERT_OK(rt->finish_replay());
  EXPECT_EQ(index->tree().get(Key(6)), "t1-6");
  ASSERT_OK(rt->Close());
  auto closed = OpenImage(img, "image-1-closed");
  ASSERT_NE(closed, nullptr);
  EXPECT_EQ(JournalOf(*closed), 0u) << "a close after the last entry frees the journal";
}

// The inspection tools open a runtime pool's layers themselves (ReplayIndexOps): on a pool
// whose journal still holds entries, with newer values made durable since and a transaction
// committed after, they show the same state as a Runtime; a writable view (`pmrt grow`) applies
// the entries with their marks, so a Runtime opening the pool afterwards agrees.
TEST(LazyReplayTest, ToolsSeeThePendingJournalAsTheRuntimeDoes) {
  Image first = CrashedAfterCommits();
  auto rt = OpenImage(first, "image-1");
  ASSERT_NE(rt, nullptr);
  Index* index = *rt->find_index("i");
  ASSERT_OK(index->put(Key(0), "new0"));
  ASSERT_OK(rt->sync());
  ASSERT_OK(txn::Run([&] { return index->put(Key(3), "new3").status(); }));
  Image crashed(first);
  rt.reset();
  pmrt::testing::TempDir dir;
  const std::string path = dir.File("journaled.pool");
  {
    FILE* f = std::fopen(path.c_str(), "wb");
    ASSERT_NE(f, nullptr);
    ASSERT_EQ(std::fwrite(crashed.bytes.get(), 1, kSize, f), kSize);
    std::fclose(f);
  }
  auto expect_state = [&](ds::DurableMasstree& tree) {
    EXPECT_EQ(tree.get(Key(0)), "new0");
    EXPECT_EQ(tree.get(Key(3)), "new3");
    for (int i = 4; i < kKeys - 1; ++i) EXPECT_EQ(tree.get(Key(i)), absl::StrCat("t1-", i)) << i;
    EXPECT_EQ(tree.get(Key(kKeys - 1)), std::nullopt);
  };
  for (bool writable : {false, true}) {
    auto view = tools::PoolView::Open(path, kLayout, "i", writable);
    ASSERT_OK(view);
    ASSERT_NE((*view)->tree(), nullptr);
    expect_state(*(*view)->tree());
  }
  auto reopened = Runtime::Open(path, {});
  ASSERT_OK(reopened);
  expect_state((*(*reopened)->find_index("i"))->tree());
  EXPECT_EQ((*reopened)->pending_index_ops(), 0u) << "the writable view applied and marked them";
}

// An application finds no room under its guard (the heap filled by the caller, inside its own
// guard): there the write reports kResourceExhausted and the entry stays pending; once the
// filler is freed, finish_replay's first try still finds no room (frees come back after the
// boundaries), gives the entry back, runs the boundaries outside any guard and applies it.
TEST(LazyReplayTest, NoRoomUnderTheGuardWaitsForTheBoundaryOrReports) {
  Image img = CrashedAfterCommits();
  auto rt = OpenImage(img, "image-1");
  ASSERT_NE(rt, nullptr);
  Index* index = *rt->find_index("i");
  std::vector<void*> filler;
  {
    epoch::Guard g(rt->epochs());
    for (size_t size : {size_t{64} << 10, size_t{4} << 10, size_t{256}, size_t{16}}) {
      while (void* p = rt->heap().Allocate(size)) filler.push_back(p);
    }
    auto refused = index->put(Key(0), "inside");
    EXPECT_EQ(refused.status().code(), absl::StatusCode::kResourceExhausted) << refused.status();
  }
  EXPECT_EQ(rt->pending_index_ops(), uint64_t{kKeys});
  for (void* p : filler) ASSERT_OK(rt->heap().Free(p));
  const uint64_t advances = rt->epochs().stats().advances;
  ASSERT_OK(rt->finish_replay());
  EXPECT_GT(rt->epochs().stats().advances, advances) << "the boundaries ran for room";
  EXPECT_EQ(rt->pending_index_ops(), 0u);
  for (int i = 0; i < kKeys - 1; ++i) EXPECT_EQ(index->get(Key(i)), absl::StrCat("t1-", i));
  ASSERT_OK(index->tree().CheckInvariants());
}

TEST(LazyReplayTest, ADamagedJournalIsRefusedNamingIt) {
  Image img = CrashedAfterCommits();
  uint64_t journal;
  {
    auto rt = OpenImage(img, "image-1");
    ASSERT_NE(rt, nullptr);
    journal = JournalOf(*rt);
    ASSERT_NE(journal, 0u);
    ASSERT_OK(rt->sync());  // the journal is durable; nothing applied
    Image damaged(img);
    // The first entry's key (after the 64-byte header, the marks and the entry's 16-byte head).
    damaged.bytes.get()[journal + 64 + 8 * kKeys + 16] ^= 0x5a;
    auto pool = Pool::OpenInMemory(damaged.bytes.get(), kSize, kLayout,
                                   pmrt::testing::EadrPoolOptions(), "damaged");
    ASSERT_OK(pool);
    auto refused = Runtime::Attach(std::move(*pool), Manual());
    ASSERT_FALSE(refused.ok());
    EXPECT_EQ(refused.status().code(), absl::StatusCode::kDataLoss);
    EXPECT_NE(
        refused.status().message().find(absl::StrCat("index replay journal at offset ", journal)),
        std::string_view::npos)
        << refused.status();
  }
}

}  // namespace
}  // namespace pmrt
