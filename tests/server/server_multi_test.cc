// MULTI, EXEC, DISCARD, WATCH and UNWATCH, and the multi-key writes that run as one pmrt
// transaction (MSET, MSETNX, DEL, RENAME), in-process over real sockets (docs/server.md,
// "Transactions"): Redis's replies and errors, a refused command discarding the transaction,
// WATCH against writes of other connections and of its own, a transaction too large for one log
// record, and readers that never see a multi-key write half done. Atomicity and durability
// across SIGKILL are in server_crash_test.cc.
#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/server/resp_client.h"
#include "tests/server/server_fixture.h"

namespace pmrt::server {
namespace {

using testing::Client;
using ::testing::Not;
using ::testing::StartsWith;

class MultiTest : public testing::ServerFixture {
 protected:
  void SetUp() override { StartServer({}, 64 << 20); }
  void TearDown() override { StopServer(); }
};

TEST_F(MultiTest, ExecRunsTheQueuedCommandsInOrder) {
  Client c = Connect();
  EXPECT_EQ(Call(c, {"SET", "n", "41"}), "+OK");
  EXPECT_EQ(Call(c, {"MULTI"}), "+OK");
  EXPECT_EQ(Call(c, {"INCR", "n"}), "+QUEUED");
  EXPECT_EQ(Call(c, {"SET", "a", "x"}), "+QUEUED");
  EXPECT_EQ(Call(c, {"APPEND", "a", "y"}), "+QUEUED");
  EXPECT_EQ(Call(c, {"GET", "a"}), "+QUEUED");
  EXPECT_EQ(Call(c, {"DEL", "n", "missing"}), "+QUEUED");
  EXPECT_EQ(Call(c, {"MGET", "a", "n"}), "+QUEUED");
  EXPECT_EQ(Call(c, {"EXEC"}), "[:42, +OK, :2, \"xy\", :1, [\"xy\", (nil)]]");
  EXPECT_EQ(Call(c, {"GET", "a"}), "\"xy\"");
  EXPECT_EQ(Call(c, {"EXISTS", "n"}), ":0");
  // An empty transaction, and one of reads only.
  EXPECT_EQ(Call(c, {"MULTI"}), "+OK");
  EXPECT_EQ(Call(c, {"EXEC"}), "[]");
  EXPECT_EQ(Call(c, {"MULTI"}), "+OK");
  EXPECT_EQ(Call(c, {"GET", "a"}), "+QUEUED");
  EXPECT_EQ(Call(c, {"PING"}), "+QUEUED");
  EXPECT_EQ(Call(c, {"EXEC"}), "[\"xy\", +PONG]");
}

TEST_F(MultiTest, ErrorsAsRedisGivesThem) {
  Client c = Connect();
  EXPECT_EQ(Call(c, {"EXEC"}), "-ERR EXEC without MULTI");
  EXPECT_EQ(Call(c, {"DISCARD"}), "-ERR DISCARD without MULTI");
  EXPECT_EQ(Call(c, {"MULTI"}), "+OK");
  EXPECT_EQ(Call(c, {"MULTI"}), "-ERR MULTI calls can not be nested");
  EXPECT_EQ(Call(c, {"SET", "k", "v"}), "+QUEUED");
  EXPECT_EQ(Call(c, {"EXEC"}), "[+OK]");  // a nested MULTI does not discard the transaction

  // A command refused while queueing (unknown, wrong count, not allowed in MULTI) discards the
  // transaction at EXEC; nothing of it runs.
  for (std::vector<std::string> bad : std::vector<std::vector<std::string>>{
           {"NOSUCHCOMMAND", "x"}, {"GET"}, {"WATCH", "k"}, {"PMRT.SYNC"}, {"FLUSHALL"}}) {
    EXPECT_EQ(Call(c, {"MULTI"}), "+OK");
    EXPECT_EQ(Call(c, {"SET", "k", "changed"}), "+QUEUED");
    EXPECT_THAT(Call(c, bad), StartsWith("-ERR")) << bad[0];
    EXPECT_EQ(Call(c, {"EXEC"}), "-EXECABORT Transaction discarded because of previous errors.")
        << bad[0];
    EXPECT_EQ(Call(c, {"GET", "k"}), "\"v\"") << bad[0];
  }
  // A command that fails when it runs (not an integer) fails alone, as in Redis.
  EXPECT_EQ(Call(c, {"MULTI"}), "+OK");
  EXPECT_EQ(Call(c, {"SET", "k", "w"}), "+QUEUED");
  EXPECT_EQ(Call(c, {"INCR", "k"}), "+QUEUED");
  EXPECT_EQ(Call(c, {"SET", "j", "1"}), "+QUEUED");
  EXPECT_EQ(Call(c, {"EXEC"}), "[+OK, -ERR value is not an integer or out of range, +OK]");
  EXPECT_EQ(Call(c, {"MGET", "k", "j"}), "[\"w\", \"1\"]");
  // DISCARD drops the queue.
  EXPECT_EQ(Call(c, {"MULTI"}), "+OK");
  EXPECT_EQ(Call(c, {"SET", "k", "discarded"}), "+QUEUED");
  EXPECT_EQ(Call(c, {"DISCARD"}), "+OK");
  EXPECT_EQ(Call(c, {"GET", "k"}), "\"w\"");
  EXPECT_EQ(Call(c, {"EXEC"}), "-ERR EXEC without MULTI");
}

TEST_F(MultiTest, WatchAbortsExecAfterAWriteOfTheKey) {
  Client c = Connect();
  Client other = Connect();
  EXPECT_EQ(Call(c, {"SET", "balance", "10"}), "+OK");
  // Another connection writes the watched key: EXEC replies with a null array, runs nothing.
  EXPECT_EQ(Call(c, {"WATCH", "balance"}), "+OK");
  EXPECT_EQ(Call(other, {"INCRBY", "balance", "5"}), ":15");
  EXPECT_EQ(Call(c, {"MULTI"}), "+OK");
  EXPECT_EQ(Call(c, {"SET", "balance", "0"}), "+QUEUED");
  EXPECT_EQ(Call(c, {"EXEC"}), "(nil array)");
  EXPECT_EQ(Call(c, {"GET", "balance"}), "\"15\"");
  // EXEC unwatched: the same transaction now runs.
  EXPECT_EQ(Call(c, {"MULTI"}), "+OK");
  EXPECT_EQ(Call(c, {"SET", "balance", "0"}), "+QUEUED");
  EXPECT_EQ(Call(c, {"EXEC"}), "[+OK]");
  // Untouched watched keys (and a write of another key) let it run.
  EXPECT_EQ(Call(c, {"WATCH", "balance", "never-written"}), "+OK");
  EXPECT_EQ(Call(other, {"SET", "unrelated", "1"}), "+OK");
  EXPECT_EQ(Call(c, {"MULTI"}), "+OK");
  EXPECT_EQ(Call(c, {"INCR", "balance"}), "+QUEUED");
  EXPECT_EQ(Call(c, {"EXEC"}), "[:1]");
  // A key created after WATCH counts as written; so does a DEL, and the watcher's own write.
  for (std::vector<std::string> write : std::vector<std::vector<std::string>>{
           {"SET", "fresh", "1"}, {"DEL", "fresh"}, {"MSET", "x", "1", "fresh", "2"}}) {
    EXPECT_EQ(Call(c, {"WATCH", "fresh"}), "+OK");
    EXPECT_THAT(Call(other, write), Not(StartsWith("-"))) << write[0];
    EXPECT_EQ(Call(c, {"MULTI"}), "+OK");
    EXPECT_EQ(Call(c, {"GET", "fresh"}), "+QUEUED");
    EXPECT_EQ(Call(c, {"EXEC"}), "(nil array)") << write[0];
  }
  EXPECT_EQ(Call(c, {"WATCH", "mine"}), "+OK");
  EXPECT_EQ(Call(c, {"SET", "mine", "1"}), "+OK");
  EXPECT_EQ(Call(c, {"MULTI"}), "+OK");
  EXPECT_EQ(Call(c, {"EXEC"}), "(nil array)");
  // UNWATCH and DISCARD forget the watched keys.
  EXPECT_EQ(Call(c, {"WATCH", "balance"}), "+OK");
  EXPECT_EQ(Call(c, {"UNWATCH"}), "+OK");
  EXPECT_EQ(Call(other, {"SET", "balance", "7"}), "+OK");
  EXPECT_EQ(Call(c, {"MULTI"}), "+OK");
  EXPECT_EQ(Call(c, {"GET", "balance"}), "+QUEUED");
  EXPECT_EQ(Call(c, {"EXEC"}), "[\"7\"]");
  EXPECT_EQ(Call(c, {"WATCH", "balance"}), "+OK");
  EXPECT_EQ(Call(c, {"MULTI"}), "+OK");
  EXPECT_EQ(Call(c, {"DISCARD"}), "+OK");
  EXPECT_EQ(Call(other, {"SET", "balance", "8"}), "+OK");
  EXPECT_EQ(Call(c, {"MULTI"}), "+OK");
  EXPECT_EQ(Call(c, {"EXEC"}), "[]");
  // A connection that closes while watching leaves nothing behind for later writers.
  {
    Client gone = Connect();
    EXPECT_EQ(Call(gone, {"WATCH", "balance"}), "+OK");
  }
  EXPECT_EQ(Call(other, {"SET", "balance", "9"}), "+OK");
}

TEST_F(MultiTest, ExecReplyIsNullUnderResp3WhenAWatchedKeyChanged) {
  Client c = Connect();
  Client other = Connect();
  EXPECT_THAT(Call(c, {"HELLO", "3"}), StartsWith("{"));
  EXPECT_EQ(Call(c, {"WATCH", "k"}), "+OK");
  EXPECT_EQ(Call(other, {"SET", "k", "1"}), "+OK");
  EXPECT_EQ(Call(c, {"MULTI"}), "+OK");
  EXPECT_EQ(Call(c, {"GET", "k"}), "+QUEUED");
  EXPECT_EQ(Call(c, {"EXEC"}), "(null)");
}

// Values whose operations exceed one log record (32 KiB): EXEC, MSET and RENAME run under one
// epoch guard instead, and reply once that epoch is durable.
TEST_F(MultiTest, TransactionsLargerThanALogRecord) {
  Client c = Connect();
  const std::string big(100 << 10, 'b');
  const std::string other(60 << 10, 'o');
  EXPECT_EQ(Call(c, {"MULTI"}), "+OK");
  EXPECT_EQ(Call(c, {"SET", "big", big}), "+QUEUED");
  EXPECT_EQ(Call(c, {"SET", "other", other}), "+QUEUED");
  EXPECT_EQ(Call(c, {"STRLEN", "big"}), "+QUEUED");
  EXPECT_EQ(Call(c, {"EXEC"}), "[+OK, +OK, :102400]");
  EXPECT_EQ(Call(c, {"GET", "other"}), "\"" + other + "\"");
  EXPECT_EQ(Call(c, {"MSET", "m1", big, "m2", other}), "+OK");
  EXPECT_EQ(Call(c, {"STRLEN", "m2"}), ":61440");
  EXPECT_EQ(Call(c, {"RENAME", "m1", "m3"}), "+OK");
  EXPECT_EQ(Call(c, {"MGET", "m1", "m3"}), "[(nil), \"" + big + "\"]");
  EXPECT_EQ(Call(c, {"MSETNX", "m3", "x", "m4", "y"}), ":0");
  EXPECT_EQ(Call(c, {"MSETNX", "m4", "x", "m5", big}), ":1");
  EXPECT_EQ(Call(c, {"STRLEN", "m5"}), ":102400");
  // Many small keys past one record: MSET, then a DEL that counts each key once (the record
  // overflows part-way, the transaction is aborted and the epoch runs it from the start).
  std::vector<std::string> mset = {"MSET"}, del = {"DEL"};
  for (int i = 0; i < 1000; ++i) {
    const std::string key = absl::StrCat("many:key-with-a-longer-name-", i);
    mset.push_back(key);
    mset.push_back("value");
    del.push_back(key);
  }
  del.push_back("many:missing");
  EXPECT_EQ(Call(c, mset), "+OK");
  EXPECT_EQ(Call(c, {"EXISTS", "many:key-with-a-longer-name-999"}), ":1");
  EXPECT_EQ(Call(c, del), ":1000");
  EXPECT_EQ(Call(c, {"EXISTS", "many:key-with-a-longer-name-0"}), ":0");
}

TEST_F(MultiTest, MSetNxWritesAllOrNothing) {
  Client c = Connect();
  EXPECT_EQ(Call(c, {"MSETNX", "a", "1", "b", "2"}), ":1");
  EXPECT_EQ(Call(c, {"MSETNX", "b", "3", "c", "4"}), ":0");
  EXPECT_EQ(Call(c, {"MGET", "a", "b", "c"}), "[\"1\", \"2\", (nil)]");
  EXPECT_EQ(Call(c, {"MSETNX", "a"}), "-ERR wrong number of arguments for 'msetnx' command");
  EXPECT_EQ(Call(c, {"MSETNX", "a", "1", "b"}),
            "-ERR wrong number of arguments for 'msetnx' command");
}

// One connection runs transactions that set two keys to the same new value; readers of both
// keys (MGET, EXISTS, a transaction of reads) must never see them differ.
TEST_F(MultiTest, ReadersNeverSeeATransactionHalfDone) {
  std::atomic<bool> stop{false};
  std::atomic<int> torn{0}, reads{0};
  std::thread writer([&] {
    Client w = Connect();
    for (int i = 0; i < 3000 && !stop.load(); ++i) {
      const std::string v = std::to_string(i);
      if (i % 3 == 0) {
        Call(w, {"MSET", "x", v, "y", v});
      } else if (i % 3 == 1) {
        Call(w, {"MULTI"});
        Call(w, {"SET", "x", v});
        Call(w, {"SET", "y", v});
        Call(w, {"EXEC"});
      } else {
        Call(w, {"DEL", "x", "y"});
      }
    }
    stop.store(true);
  });
  std::thread reader([&] {
    Client r = Connect();
    while (!stop.load()) {
      auto got = r.Call({"MGET", "x", "y"});
      ASSERT_TRUE(got.has_value());
      ASSERT_EQ(got->elements.size(), 2u);
      const testing::Reply& x = got->elements[0];
      const testing::Reply& y = got->elements[1];
      if (x.null != y.null || x.str != y.str) torn.fetch_add(1);
      auto n = r.Call({"EXISTS", "x", "y"});
      ASSERT_TRUE(n.has_value());
      if (n->integer == 1) torn.fetch_add(1);
      reads.fetch_add(1);
    }
  });
  writer.join();
  reader.join();
  EXPECT_EQ(torn.load(), 0);
  EXPECT_GT(reads.load(), 10);
}

}  // namespace
}  // namespace pmrt::server
