// `pmrt info` and `pmrt dump` on key-value pools, run as the built binary.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "alloc/allocator.h"
#include "epoch/epoch.h"
#include "epoch/epoch_layout.h"
#include "epoch/pool.h"
#include "epoch/pool_layout.h"
#include "gtest/gtest.h"
#include "runtime/runtime.h"
#include "tests/tools/tool_test_util.h"
#include "tests/util/test_util.h"
#include "tools/kv_store.h"
#include "txn/txn.h"

namespace pmrt::testing {
namespace {

using ::testing::HasSubstr;

std::vector<std::pair<std::string, std::string>> Numbered(int n) {
  std::vector<std::pair<std::string, std::string>> kv;
  for (int i = 0; i < n; ++i) {
    kv.emplace_back(absl::StrCat("key", 1000 + i), absl::StrCat("value-", i));
  }
  return kv;
}

TEST(InspectTest, InfoTextShowsEverySection) {
  TempDir dir;
  const std::string pool = dir.File("kv.pool");
  PutKv(pool, Numbered(300));
  const ToolResult r = RunTool({"info", pool});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.err, "");
  for (const char* want :
       {"format          1.1", "layout          pmrt", "last shutdown   clean", "region heap",
        "epochs          current", "failed epochs   0 ranges", "recovery        none needed",
        "external log", "heap            ", "heap classes", "tree            300 keys; height"}) {
    EXPECT_THAT(r.out, HasSubstr(want));
  }
  EXPECT_THAT(r.out, HasSubstr(pool));
}

TEST(InspectTest, InfoJsonParsesBack) {
  TempDir dir;
  const std::string pool = dir.File("kv.pool");
  PutKv(pool, Numbered(300));
  const ToolResult r = RunTool({"info", pool, "--json"});
  ASSERT_EQ(r.status, 0) << r.err;
  ASSERT_EQ(Lines(r.out).size(), 1u) << "one JSON object on one line";
  const auto j = ParseJson(r.out);
  ASSERT_TRUE(j.has_value()) << r.out;
  EXPECT_EQ(j->at("path"), pool);
  EXPECT_EQ(j->at("layout"), "pmrt");
  EXPECT_EQ(j->at("format.major"), "1");
  EXPECT_EQ(j->at("clean_shutdown"), "true");
  EXPECT_EQ(j->at("size"), std::to_string(16 << 20));
  EXPECT_EQ(j->at("regions.3.name"), "heap");
  EXPECT_EQ(j->at("tree.keys"), "300");
  EXPECT_EQ(j->at("tree.layers"), "1");
  EXPECT_EQ(j->at("tree.check_error"), "null");
  EXPECT_EQ(j->at("epochs.failed"), "[]");
  EXPECT_FALSE(j->contains("epochs.failed.0.0")) << "no failed ranges: the pool was closed";
  EXPECT_EQ(j->at("log.blocks_free"), j->at("log.blocks_total"));
  // 300 values, the border nodes, the interiors and the tree descriptor: all the heap holds.
  const uint64_t nodes = std::stoull(j->at("tree.leaves")) + std::stoull(j->at("tree.interiors"));
  EXPECT_EQ(std::stoull(j->at("heap.live_blocks")), 300 + nodes + 1);
  EXPECT_GT(std::stoull(j->at("heap.used_bytes")), 0u);
}

TEST(InspectTest, InfoOnAFreshPoolInitializesNothing) {
  TempDir dir;
  const std::string pool = dir.File("fresh.pool");
  ASSERT_EQ(RunTool({"create", pool, "--size", "8M"}).status, 0);
  const ToolResult r = RunTool({"info", pool, "--json"});
  ASSERT_EQ(r.status, 0) << r.err;
  const auto j = ParseJson(r.out);
  ASSERT_TRUE(j.has_value()) << r.out;
  EXPECT_EQ(j->at("epochs"), "null");
  EXPECT_EQ(j->at("heap"), "null");
  EXPECT_EQ(j->at("tree"), "null");
  // Still nothing after a second look: info formats no layer and creates no tree.
  EXPECT_EQ(ParseJson(RunTool({"info", pool, "--json"}).out)->at("heap"), "null");
  const ToolResult d = RunTool({"dump", pool});
  EXPECT_EQ(d.status, 0);
  EXPECT_EQ(d.out, "");
  EXPECT_THAT(d.err, HasSubstr("no key-value tree yet"));
}

TEST(InspectTest, DumpListsKeysInOrderWithLimitAndFrom) {
  TempDir dir;
  const std::string pool = dir.File("kv.pool");
  auto kv = Numbered(250);
  std::swap(kv[0], kv[200]);  // inserted out of order; dumped in order
  PutKv(pool, kv);

  ToolResult r = RunTool({"dump", pool});
  ASSERT_EQ(r.status, 0) << r.err;
  std::vector<std::string> lines = Lines(r.out);
  ASSERT_EQ(lines.size(), 100u) << "default --limit 100";
  for (int i = 0; i < 100; ++i) {
    EXPECT_EQ(lines[i], absl::StrCat("key", 1000 + i, "\tvalue-", i));
  }
  EXPECT_THAT(r.err, HasSubstr("100 keys shown, more follow: --from 'key1100'"));

  r = RunTool({"dump", pool, "--limit", "0"});
  ASSERT_EQ(r.status, 0);
  EXPECT_EQ(Lines(r.out).size(), 250u);
  EXPECT_EQ(r.err, "");

  r = RunTool({"dump", pool, "--from", "key1240", "--limit", "3"});
  ASSERT_EQ(r.status, 0);
  EXPECT_EQ(r.out, "key1240\tvalue-240\nkey1241\tvalue-241\nkey1242\tvalue-242\n");
}

TEST(InspectTest, DumpEscapesBinaryKeysInEveryFormat) {
  TempDir dir;
  const std::string pool = dir.File("kv.pool");
  const std::string bin_key("\x00\x01z\xff", 4);
  const std::string long_key = std::string(20, 'L') + "\n\\";  // past one slice: a layer
  PutKv(pool, {{bin_key, std::string("v\t\x80", 3)}, {long_key, "x"}, {"plain", ""}});

  ToolResult r = RunTool({"dump", pool});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out,
            "\\x00\\x01z\\xff\tv\\t\\x80\n" + std::string(20, 'L') + "\\n\\\\\tx\nplain\t\n");

  r = RunTool({"dump", pool, "--hex", "--limit", "1"});
  ASSERT_EQ(r.status, 0);
  EXPECT_EQ(r.out, "00017aff\t760980\n");

  r = RunTool({"dump", pool, "--json"});
  ASSERT_EQ(r.status, 0);
  const std::vector<std::string> lines = Lines(r.out);
  ASSERT_EQ(lines.size(), 3u);
  const auto first = ParseJson(lines[0]);
  ASSERT_TRUE(first.has_value()) << lines[0];
  EXPECT_EQ(first->at("key"), bin_key);
  EXPECT_EQ(first->at("value"), std::string("v\t\x80", 3));
  EXPECT_EQ(ParseJson(lines[1])->at("key"), long_key);

  // --from takes the escaped form the dump prints.
  r = RunTool({"dump", pool, "--from", "\\x00\\x01z\\xff", "--limit", "1", "--hex"});
  ASSERT_EQ(r.status, 0);
  EXPECT_EQ(r.out, "00017aff\t760980\n");
}

// A pool of another layout that uses the heap and transactions: info and check open every
// layer it holds (the transaction engine replays at open) and skip the tree.
TEST(InspectTest, OtherLayoutWithTransactions) {
  TempDir dir;
  const std::string pool_path = dir.File("tx.pool");
  struct TxRoot {
    uint64_t counter;
  };
  {
    auto pool = Pool::Create(pool_path, 16 << 20, "txapp");
    ASSERT_OK(pool);
    auto epochs = epoch::Manager::Open(**pool, {.interval = std::chrono::milliseconds(0)});
    ASSERT_OK(epochs);
    auto heap = alloc::Heap::Open(**pool, **epochs);
    ASSERT_OK(heap);
    auto engine = txn::Engine::Open(**pool, **epochs, **heap);
    ASSERT_OK(engine);
    auto root = (*pool)->root<TxRoot>();
    ASSERT_OK(root);
    for (uint64_t i = 1; i <= 10; ++i) {
      ASSERT_OK(txn::Run([&]() { return txn::write(&(*root)->counter, i); }));
    }
  }
  ToolResult r = RunTool({"info", pool_path, "--layout", "txapp", "--json"});
  ASSERT_EQ(r.status, 0) << r.err;
  const auto j = ParseJson(r.out);
  ASSERT_TRUE(j.has_value()) << r.out;
  EXPECT_NE(j->at("txn_directory"), "null");
  EXPECT_EQ(j->at("tree"), "null");
  EXPECT_NE(j->at("heap"), "null");
  r = RunTool({"info", pool_path, "--layout", "txapp"});
  EXPECT_THAT(r.out, HasSubstr("transactions    directory at offset"));
  r = RunTool({"check", pool_path, "--layout", "txapp"});
  EXPECT_EQ(r.status, 0) << r.out << r.err;
  EXPECT_THAT(r.out, HasSubstr("skipped  tree, reachability: not a key-value pool"));
}

TEST(InspectTest, UsageErrorsExitTwo) {
  for (const std::vector<std::string>& args :
       std::vector<std::vector<std::string>>{{"info"},
                                             {"check"},
                                             {"dump"},
                                             {"info", "/nonexistent.pool", "--bogus"},
                                             {"dump", "/x.pool", "--limit", "many"},
                                             {"dump", "/x.pool", "--hex", "--json"},
                                             {"dump", "/x.pool", "--from", "\\q"},
                                             {"check", "/x.pool", "--json"},
                                             {"grow", "/x.pool"},
                                             {"grow", "/x.pool", "lots"},
                                             {"grow", "/x.pool", "+1M", "--json"},
                                             {"nosuchcommand"}}) {
    const ToolResult r = RunTool(args);
    EXPECT_EQ(r.status, 2) << args[0] << " " << (args.size() > 1 ? args.back() : "");
    EXPECT_THAT(r.err, HasSubstr("usage"));
  }
}

// pmrt grow: by an amount or to a size, the keys intact and the pool healthy; info then says
// the pool grew; a growth that is too small or shrinks is refused (exit 1) and changes nothing.
TEST(InspectTest, GrowGrowsThePoolInPlace) {
  TempDir dir;
  const std::string pool = dir.File("kv.pool");
  PutKv(pool, Numbered(300));
  ToolResult r = RunTool({"grow", pool, "+1M"});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr(" -> "));
  r = RunTool({"grow", pool, "80M"});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("-> 83886080 bytes"));
  r = RunTool({"grow", pool, "+4K"});
  EXPECT_EQ(r.status, 1);
  EXPECT_THAT(r.err, HasSubstr("at least"));
  EXPECT_THAT(r.err, HasSubstr(pool));
  r = RunTool({"grow", pool, "1M"});
  EXPECT_EQ(r.status, 1);
  r = RunTool({"info", pool});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("size            83886080 bytes (80.0 MiB), grown from"));
  EXPECT_THAT(r.out, HasSubstr("3 segments"));
  r = RunTool({"check", pool});
  EXPECT_EQ(r.status, 0) << r.out << r.err;
  r = RunTool({"dump", pool, "--limit", "1000"});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 300);
}

// A pmrt::Runtime pool: info lists its indexes, dump and check work on a named index, and a
// pool whose process was killed after committing transactions with index operations (epochs
// never completed) opens with those operations replayed.
TEST(InspectTest, RuntimePoolsShowTheirIndexesAfterAKill) {
  TempDir dir;
  const std::string pool = dir.File("rt.pool");
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    RuntimeOptions o;
    o.create_size = 32 << 20;
    o.epochs.interval = std::chrono::milliseconds(0);  // epochs advance only when told
    auto rt = Runtime::Open(pool, o);
    if (!rt.ok()) _exit(2);
    if (!(*rt)->index("other").ok()) _exit(3);
    Index* idx = *(*rt)->index("users");
    (*rt)->epochs().Advance().IgnoreError();
    // No epoch completes from here on: the puts below survive only through their records.
    for (int i = 0; i < 50; ++i) {
      if (!txn::Run([&] { return idx->put(absl::StrCat("user", 100 + i), "x").status(); }).ok()) {
        _exit(4);
      }
    }
    raise(SIGKILL);
  }
  int status;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFSIGNALED(status));
  // The tools recover the pool in memory (a private mapping): each shows the recovered pool and
  // leaves the file byte-identical, still to be recovered by the next writing open.
  const std::optional<std::string> crashed = ReadFile(pool);
  ToolResult r = RunTool({"info", pool, "--layout", "pmrt-runtime", "--index", "users"});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("CRASH (recovered in memory by this view)"));
  EXPECT_THAT(r.out, HasSubstr("indexes         2: other (0 keys), users (50 keys)"));
  EXPECT_THAT(r.out, HasSubstr("tree            50 keys"));
  r = RunTool({"dump", pool, "--layout", "pmrt-runtime", "--index", "users", "--limit", "2"});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out, "user100\tx\nuser101\tx\n");
  r = RunTool({"check", pool, "--layout", "pmrt-runtime"});
  EXPECT_EQ(r.status, 0) << r.out << r.err;
  EXPECT_THAT(r.out, HasSubstr("index 'users': 50 keys"));
  r = RunTool({"dump", pool, "--layout", "pmrt-runtime"});
  EXPECT_EQ(r.status, 2) << "two indexes: dump needs --index";
  r = RunTool({"info", pool, "--layout", "pmrt-runtime", "--index", "nope"});
  EXPECT_EQ(r.status, 3);
  EXPECT_THAT(r.err, HasSubstr("no index named 'nope'"));
  EXPECT_EQ(ReadFile(pool), crashed) << "a tool wrote the pool";
  {
    auto rt = Runtime::Open(pool, RuntimeOptions{});
    ASSERT_TRUE(rt.ok()) << rt.status();
    EXPECT_FALSE((*rt)->pool().was_clean_shutdown()) << "the tools hid the crash";
    EXPECT_EQ((*(*rt)->find_index("users"))->size(), 50u);
  }
  r = RunTool({"info", pool, "--layout", "pmrt-runtime", "--index", "users"});
  EXPECT_THAT(r.out, HasSubstr("last shutdown   clean"));
}

// The failed-epoch set's way out. A server's pool has recorded 3,999 crashes, the most an
// ordinary open may record, when it is killed once more with an acknowledged but not yet
// durable write: every tool is refused with a message naming `pmrt repair`, and leaves the file
// as it was. `pmrt repair` recovers the pool (the unsynced write rolled back), settles every
// record that names a failed epoch and empties the set; the pool then opens, shows the durable
// value, checks healthy and records its next crash again.
TEST(InspectTest, RepairRollsUpAFullFailedEpochSet) {
  TempDir dir;
  const std::string path = dir.File("kv.pool");
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    tools::KvStoreOptions o;
    o.create_size = 16 << 20;
    o.epochs.interval = std::chrono::milliseconds(0);
    auto kv = tools::KvStore::Open(path, o);
    if (!kv.ok()) _exit(1);
    (*kv)->tree().put("k", "v1");
    (*kv)->tree().put("other", "kept");
    for (int i = 0; i < 8100; ++i) {  // empty epochs, recorded failed below
      if (!(*kv)->epochs().Advance().ok()) _exit(2);
    }
    (*kv)->tree().put("k", "v2");
    if (!(*kv)->epochs().Sync().ok()) _exit(3);
    (*kv)->tree().put("k", "v3-unsynced");
    _exit(0);  // a crash: nothing closed
  }
  int status;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  // 3,999 ranges of the empty epochs, as if recorded by earlier crashes, written into the file
  // (an open and close would mark the pool cleanly shut down).
  {
    std::optional<std::string> image = ReadFile(path);
    ASSERT_TRUE(image.has_value());
    PoolHeader h;
    std::memcpy(&h, image->data(), sizeof(h));
    using epoch::EpochAreaLayout;
    auto word = [&](size_t at) {
      uint64_t v;
      std::memcpy(&v, image->data() + h.epoch.offset + at, 8);
      return v;
    };
    ASSERT_GT(word(offsetof(EpochAreaLayout, completed)), 8100u);
    ASSERT_EQ(word(offsetof(EpochAreaLayout, failed_count)), 0u);
    std::vector<uint64_t> ranges;
    for (uint64_t i = 0; i + 1 < epoch::kMaxFailedRanges; ++i) {
      ranges.push_back(100 + 2 * i);
      ranges.push_back(100 + 2 * i);
    }
    WriteFileAt(path, h.epoch.offset + offsetof(EpochAreaLayout, failed),
                std::string(reinterpret_cast<const char*>(ranges.data()), 8 * ranges.size()));
    const uint64_t count = epoch::kMaxFailedRanges - 1;
    WriteFileAt(path, h.epoch.offset + offsetof(EpochAreaLayout, failed_count),
                std::string(reinterpret_cast<const char*>(&count), 8));
  }
  const std::optional<std::string> before = ReadFile(path);
  for (const char* cmd : {"info", "check", "dump"}) {
    const ToolResult r = RunTool({cmd, path});
    EXPECT_NE(r.status, 0) << cmd;
    EXPECT_THAT(r.err, HasSubstr("the failed-epoch set is full (3999 crashes recorded)")) << cmd;
    EXPECT_THAT(r.err, HasSubstr("pmrt repair " + path)) << cmd;
    const std::optional<std::string> after = ReadFile(path);
    ASSERT_TRUE(after.has_value() && before.has_value());
    ASSERT_EQ(after->size(), before->size());
    size_t first_diff = 0;
    while (first_diff < after->size() && (*after)[first_diff] == (*before)[first_diff]) {
      ++first_diff;
    }
    EXPECT_EQ(first_diff, after->size()) << cmd << " changed the pool at byte " << first_diff;
  }
  const ToolResult repair = RunTool({"repair", path});
  ASSERT_EQ(repair.status, 0) << repair.out << repair.err;
  EXPECT_THAT(repair.out, HasSubstr(": 4000 failed-epoch ranges cleared"));
  const ToolResult dump = RunTool({"dump", path});
  EXPECT_EQ(dump.status, 0) << dump.err;
  EXPECT_EQ(dump.out, "k\tv2\nother\tkept\n");
  const ToolResult check = RunTool({"check", path});
  EXPECT_EQ(check.status, 0) << check.out;
  EXPECT_THAT(check.out, HasSubstr("0 failed range(s)"));
  const ToolResult again = RunTool({"repair", path});
  EXPECT_EQ(again.status, 0) << again.err;
  EXPECT_THAT(again.out, HasSubstr(": 0 failed-epoch ranges cleared"));
}

}  // namespace
}  // namespace pmrt::testing
