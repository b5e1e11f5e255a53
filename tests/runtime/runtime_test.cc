// pmrt::Runtime: opening and reopening, the typed root, named indexes (created durable, listed,
// dropped), and index operations inside transactions: an abort undoes them, a commit makes
// them durable with the transaction's words and allocations (a child process SIGKILLed right
// after its commits, its epochs never completed, reopens with every committed transaction's
// index operations present), and a crashed runtime pool refuses an engine that cannot replay
// them.
#include "runtime/runtime.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "alloc/allocator.h"
#include "epoch/pool_layout.h"
#include "gtest/gtest.h"
#include "tests/txn/txn_runtime.h"
#include "tests/util/test_util.h"
#include "txn/txn.h"

namespace pmrt {
namespace {

struct Account {
  uint64_t balance;
  uint64_t id;
};

struct Root {
  uint64_t bank;  // offset of the first account (the bank's own)
  uint64_t users;
};

RuntimeOptions Create(size_t size = 64 << 20) {
  RuntimeOptions o;
  o.create_size = size;
  return o;
}

class RuntimeTest : public ::testing::Test {
 protected:
  std::unique_ptr<Runtime> OpenRt(RuntimeOptions o = Create()) {
    auto rt = Runtime::Open(path_, o);
    EXPECT_OK(rt);
    return rt.ok() ? std::move(*rt) : nullptr;
  }

  pmrt::testing::TempDir dir_;
  std::string path_ = dir_.File("rt.pool");
};

TEST_F(RuntimeTest, OpensReopensAndKeepsRootAndIndexes) {
  {
    auto rt = OpenRt();
    ASSERT_NE(rt, nullptr);
    auto root = rt->root<Root>();
    ASSERT_OK(root);
    EXPECT_EQ((*root)->users, 0u);
    ASSERT_OK(txn::Run([&] { return txn::write(&(*root)->users, uint64_t{3}); }));
    auto users = rt->index("users");
    ASSERT_OK(users);
    ASSERT_OK((*users)->put("alice", "1"));
    auto orders = rt->index("orders");
    ASSERT_OK(orders);
    EXPECT_EQ(*rt->index("users"), *users) << "a second index() returns the same index";
    EXPECT_EQ(rt->indexes(), (std::vector<std::string>{"orders", "users"}));
    struct Other {
      uint64_t words[5];
    };
    EXPECT_EQ(rt->root<Other>().status().code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_EQ(rt->stats().indexes, 2u);
    ASSERT_OK(rt->Close());
  }
  auto rt = OpenRt(RuntimeOptions{});
  ASSERT_NE(rt, nullptr);
  EXPECT_EQ((*rt->root<Root>())->users, 3u);
  EXPECT_EQ(rt->indexes(), (std::vector<std::string>{"orders", "users"}));
  auto users = rt->find_index("users");
  ASSERT_OK(users);
  EXPECT_EQ((*users)->get("alice"), "1");
  EXPECT_EQ(rt->find_index("nope").status().code(), absl::StatusCode::kNotFound);
  ASSERT_OK(rt->drop_index("orders"));
  EXPECT_EQ(rt->indexes(), (std::vector<std::string>{"users"}));
  ASSERT_OK(rt->sync());
  EXPECT_OK(rt->heap().Check());
}

TEST_F(RuntimeTest, AnAbortedTransactionLeavesNoIndexChangeAndNoBlock) {
  auto rt = OpenRt();
  ASSERT_NE(rt, nullptr);
  Index* users = *rt->index("users");
  ASSERT_OK(users->put("bob", "old"));
  const uint64_t live = rt->heap().Stats().live_blocks;
  // Creates an object, names it in the index, replaces and removes other keys, then aborts.
  absl::Status st = txn::Run([&]() -> absl::Status {
    Account* a = alloc::pnew<Account>(Account{100, 7});
    if (a == nullptr) return absl::ResourceExhaustedError("pnew");
    auto r = users->put("carol", users->Ref(a));
    if (!r.ok()) return r.status();
    EXPECT_EQ(users->get("carol"), users->Ref(a)) << "the transaction reads its own write";
    if (auto p = users->put("bob", "new"); !p.ok()) return p.status();
    if (auto p = users->insert_if_absent("dave", "d"); !p.ok()) return p.status();
    return absl::AbortedError("the caller gives up");
  });
  EXPECT_EQ(st.code(), absl::StatusCode::kAborted);
  EXPECT_FALSE(users->get("carol").has_value()) << "the aborted insert stayed";
  EXPECT_FALSE(users->get("dave").has_value());
  EXPECT_EQ(users->get("bob"), "old");
  ASSERT_OK(txn::Run([&]() -> absl::Status {
              auto r = users->remove("bob");
              if (!r.ok()) return r.status();
              EXPECT_TRUE(*r);
              return absl::AbortedError("again");
            }).code() == absl::StatusCode::kAborted
                ? absl::OkStatus()
                : absl::InternalError("not aborted"));
  EXPECT_EQ(users->get("bob"), "old") << "the aborted remove stayed";
  ASSERT_OK(rt->sync());
  EXPECT_EQ(rt->heap().Stats().live_blocks, live) << "the aborted allocation leaked";
  EXPECT_OK(rt->heap().Check());
}

// The transaction log is sized to the pool: a 32 MiB pool takes transactions until its data,
// not its log, fills it (values overwritten 4 times over in transactions, ~8 MiB live), and the
// log holds under a quarter of the heap (a fixed 32 MiB budget let it take over half).
TEST_F(RuntimeTest, ASmallPoolTakesTransactionsUntilItsDataFillsIt) {
  auto rt = OpenRt(Create(32 << 20));
  ASSERT_NE(rt, nullptr);
  EXPECT_EQ(rt->engine().stats().log_budget,
            std::clamp<uint64_t>(rt->heap().capacity() / 16, txn::kAutoLogBudgetMin,
                                 txn::kAutoLogBudgetMax));
  Index* kv = *rt->index("kv");
  const std::string value(8 << 10, 'x');
  for (int i = 0; i < 4000; ++i) {
    ASSERT_OK(txn::Run([&]() -> absl::Status {
      auto r = kv->put(absl::StrCat("key", i % 1000), value);
      return r.ok() ? absl::OkStatus() : r.status();
    })) << "transaction "
        << i;
  }
  ASSERT_OK(rt->sync());
  EXPECT_LT(rt->engine().stats().log_bytes_owned, rt->heap().capacity() / 4);
  EXPECT_OK(rt->heap().Check());
}

// An idle engine gives its log back: after a burst of transactions, once none has run for a
// while, the background reclaimer's idle cycles turn every word cold and return the blocks to
// the heap (waited for, up to a generous deadline: the machine may be busy).
TEST_F(RuntimeTest, AnIdleEngineGivesItsLogBack) {
  auto rt = OpenRt(Create(64 << 20));
  ASSERT_NE(rt, nullptr);
  Root* root = *rt->root<Root>();
  auto* words = static_cast<uint64_t*>(rt->heap().AllocateZeroed(1 << 16, 8));
  ASSERT_NE(words, nullptr);
  uint64_t rng = 7;
  for (int i = 0; i < 20000; ++i) {
    ASSERT_OK(txn::Run([&]() -> absl::Status {
      for (int k = 0; k < 4; ++k) {
        rng = rng * 6364136223846793005ull + 1442695040888963407ull;
        if (auto st = txn::write(&words[(rng >> 20) % (1 << 16)], rng); !st.ok()) return st;
      }
      return txn::write(&root->users, uint64_t(i));
    }));
  }
  const uint64_t busy = rt->engine().stats().log_bytes_owned;
  ASSERT_GT(busy, 256u << 10);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  uint64_t owned = busy;
  // The log blocks and the compacted log are given back by separate cycles: wait for both.
  while (std::chrono::steady_clock::now() < deadline) {
    owned = rt->engine().stats().log_bytes_owned;
    if (owned <= 64 << 10 && rt->engine().stats().compact_bytes == 0) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_LE(owned, 64u << 10) << "owned " << busy << " bytes after the burst";
  EXPECT_EQ(rt->engine().stats().compact_bytes, 0u);
  EXPECT_EQ((*rt->root<Root>())->users, 19999u);
  ASSERT_OK(rt->sync());
  EXPECT_OK(rt->heap().Check());
  // And it serves transactions again.
  ASSERT_OK(txn::Run([&] { return txn::write(&root->users, uint64_t{1}); }));
}

TEST_F(RuntimeTest, IndexCreationInsideATransactionIsRefused) {
  auto rt = OpenRt();
  ASSERT_NE(rt, nullptr);
  ASSERT_OK(rt->index("exists"));
  ASSERT_OK(txn::begin());
  EXPECT_OK(rt->index("exists"));
  EXPECT_EQ(rt->index("new").status().code(), absl::StatusCode::kFailedPrecondition);
  ASSERT_OK(txn::commit());
  EXPECT_OK(rt->index("new"));
}

// The scenario: a transaction creates a user (pnew + index put) and a second one moves
// 50 to it; the process is SIGKILLed after both committed, while their epoch is still running
// (epochs never advance in the child). The reopened pool has the user in the index and the 50
// in its account: the money is conserved.
// A crashed runtime pool whose catalog descriptor is damaged: the catalog is opened after the
// epoch manager's recovery has written the pool. With trial_open (the default) the whole open
// runs on a private mapping first, so the refusal leaves the file byte-identical; without it
// (the control) the same refusal comes after the recovery's writes.
TEST_F(RuntimeTest, ATrialOpenLeavesARefusedPoolByteIdentical) {
  {
    auto rt = OpenRt();
    ASSERT_NE(rt, nullptr);
    ASSERT_OK(rt->index("users"));
    ASSERT_OK(rt->Close());
  }
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    RuntimeOptions o;
    o.epochs.interval = std::chrono::milliseconds(0);  // no epoch completes after the open
    auto rt = Runtime::Open(path_, o);
    if (!rt.ok()) _exit(2);
    Index* users = *(*rt)->find_index("users");
    for (int i = 0; i < 20; ++i) {
      if (!txn::Run([&] { return users->put(absl::StrCat("user", i), "x").status(); }).ok()) {
        _exit(3);
      }
    }
    raise(SIGKILL);
  }
  int status;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFSIGNALED(status));
  // The catalog descriptor's magic, one bit changed.
  const std::optional<std::string> image = pmrt::testing::ReadFile(path_);
  ASSERT_TRUE(image.has_value());
  PoolHeader h;
  std::memcpy(&h, image->data(), sizeof(h));
  uint64_t magic, catalog;  // RuntimeHeader's words 1 and 2
  std::memcpy(&magic, image->data() + h.root.offset + offsetof(RuntimeHeader, magic), 8);
  std::memcpy(&catalog, image->data() + h.root.offset + offsetof(RuntimeHeader, catalog), 8);
  ASSERT_EQ(magic, RuntimeHeader::kMagic);
  pmrt::testing::WriteFileAt(path_, catalog, std::string(1, (*image)[catalog] ^ 0x01));
  const std::optional<std::string> damaged = pmrt::testing::ReadFile(path_);

  auto refused = Runtime::Open(path_, RuntimeOptions{});
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kDataLoss) << refused.status();
  EXPECT_NE(refused.status().message().find("no Masstree descriptor"), std::string::npos)
      << refused.status();
  EXPECT_EQ(pmrt::testing::ReadFile(path_), damaged) << "the trial open wrote the pool";

  RuntimeOptions no_trial;
  no_trial.trial_open = false;
  auto control = Runtime::Open(path_, no_trial);
  EXPECT_EQ(control.status().code(), absl::StatusCode::kDataLoss) << control.status();
  EXPECT_NE(pmrt::testing::ReadFile(path_), damaged) << "the control shows nothing";
}

TEST_F(RuntimeTest, CommittedTransactionsSurviveAKillWithTheirIndexOperations) {
  {
    auto rt = OpenRt();
    ASSERT_NE(rt, nullptr);
    ASSERT_OK(rt->index("users"));
    Root* root = *rt->root<Root>();
    ASSERT_OK(txn::Run([&]() -> absl::Status {
      Account* bank = alloc::pnew<Account>(Account{2000, 0});
      if (bank == nullptr) return absl::ResourceExhaustedError("pnew");
      return txn::write(&root->bank, rt->pool().offset_of(bank));
    }));
    ASSERT_OK(rt->Close());
  }
  int ready[2];
  ASSERT_EQ(pipe(ready), 0);
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    RuntimeOptions o;
    o.epochs.interval = std::chrono::milliseconds(0);  // no epoch completes after the open
    auto rt = Runtime::Open(path_, o);
    if (!rt.ok()) _exit(2);
    Root* root = *(*rt)->root<Root>();
    Index* users = *(*rt)->find_index("users");
    auto* bank = static_cast<Account*>((*rt)->pool().at(root->bank));
    for (uint64_t i = 1; i <= 20; ++i) {
      Account* a = nullptr;
      absl::Status st = txn::Run([&]() -> absl::Status {
        a = alloc::pnew<Account>(Account{0, i});
        if (a == nullptr) return absl::ResourceExhaustedError("pnew");
        return users->put(absl::StrCat("user", i), users->Ref(a)).status();
      });
      if (!st.ok()) _exit(3);
      st = txn::Run([&]() -> absl::Status {
        if (auto s = txn::write(&bank->balance, bank->balance - 50); !s.ok()) return s;
        return txn::write(&a->balance, a->balance + 50);
      });
      if (!st.ok()) _exit(4);
    }
    // And one more index change inside a transaction: a remove.
    if (!txn::Run([&] { return users->remove("user1").status(); }).ok()) _exit(5);
    (void)!write(ready[1], "x", 1);
    pause();
    _exit(0);
  }
  close(ready[1]);
  char c;
  ASSERT_EQ(read(ready[0], &c, 1), 1) << "the child failed";
  close(ready[0]);
  kill(pid, SIGKILL);
  int status;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFSIGNALED(status));

  // A bare engine cannot replay the index operations: refused, the pool left for the runtime.
  {
    auto pool = Pool::Open(path_, "pmrt-runtime");
    ASSERT_OK(pool);
    auto bare = txn::testing::Attach(std::move(*pool), txn::Options{});
    EXPECT_EQ(bare.status().code(), absl::StatusCode::kFailedPrecondition) << bare.status();
    EXPECT_NE(bare.status().message().find("Runtime"), std::string::npos) << bare.status();
  }
  auto rt = OpenRt(RuntimeOptions{});
  ASSERT_NE(rt, nullptr);
  Root* root = *rt->root<Root>();
  Index* users = *rt->find_index("users");
  uint64_t total = static_cast<Account*>(rt->pool().at(root->bank))->balance;
  EXPECT_EQ(total, 2000u - 20 * 50);
  EXPECT_FALSE(users->get("user1").has_value()) << "the committed remove was lost";
  EXPECT_EQ(users->size(), 19u);
  for (uint64_t i = 2; i <= 20; ++i) {
    auto v = users->get(absl::StrCat("user", i));
    ASSERT_TRUE(v.has_value()) << "user" << i << " is gone from the index";
    Account* a = users->Deref<Account>(*v);
    ASSERT_NE(a, nullptr);
    EXPECT_EQ(a->id, i);
    EXPECT_EQ(a->balance, 50u);
    total += a->balance;
  }
  EXPECT_EQ(total + 50, 2000u) << "money was created or lost (user1's 50 is unreachable)";
  EXPECT_OK(rt->heap().Check());
  EXPECT_OK(users->tree().CheckInvariants());
}

}  // namespace
}  // namespace pmrt
