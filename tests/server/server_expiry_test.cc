// Key expiry in the server (tools/server/expiry_commands.cc): Redis's replies and errors of every
// expiry command and option, which writes keep, move or clear a key's deadline, a key past its
// deadline absent to every read and removed before any write, the active cycle removing keys
// nobody reads, deadlines across a restart, and WATCH/EXEC with expiry. The crash simulator's
// side is server_expiry_crash_test.cc.
#include <chrono>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/server/resp_client.h"
#include "tests/server/server_fixture.h"
#include "tests/util/test_util.h"

namespace pmrt::server {
namespace {

using testing::Client;
using ::testing::HasSubstr;
using ::testing::Not;

constexpr char kNotInteger[] = "-ERR value is not an integer or out of range";

class ExpiryTest : public testing::ServerFixture {
 protected:
  void TearDown() override { StopServer(); }

  // The integer reply of argv (INT64_MIN when the reply is not one).
  static int64_t Int(Client& c, const std::vector<std::string>& argv) {
    const std::string r = Call(c, argv);
    int64_t v;
    if (r.empty() || r[0] != ':' || !absl::SimpleAtoi(r.substr(1), &v)) {
      ADD_FAILURE() << absl::StrCat(argv[0], ": ", r);
      return INT64_MIN;
    }
    return v;
  }
  static int64_t NowMs() {
    return std::chrono::duration_cast<std::chrono::milliseconds>(
               std::chrono::system_clock::now().time_since_epoch())
        .count();
  }
  // Waits until a deadline `ms` milliseconds from now has certainly passed.
  static void Pass(int ms) { std::this_thread::sleep_for(std::chrono::milliseconds(ms + 20)); }
};

TEST_F(ExpiryTest, ExpireFamilyRepliesAsRedis) {
  StartServer({});
  Client c = Connect();
  EXPECT_EQ(Call(c, {"EXPIRE", "missing", "10"}), ":0");
  EXPECT_EQ(Call(c, {"SET", "k", "v"}), "+OK");
  EXPECT_EQ(Call(c, {"TTL", "k"}), ":-1");
  EXPECT_EQ(Call(c, {"PTTL", "k"}), ":-1");
  EXPECT_EQ(Call(c, {"EXPIRETIME", "k"}), ":-1");
  EXPECT_EQ(Call(c, {"TTL", "missing"}), ":-2");
  EXPECT_EQ(Call(c, {"PEXPIRETIME", "missing"}), ":-2");
  // NX, XX, GT, LT: no deadline counts as an infinite one.
  EXPECT_EQ(Call(c, {"EXPIRE", "k", "100", "XX"}), ":0");
  EXPECT_EQ(Call(c, {"EXPIRE", "k", "100", "GT"}), ":0");
  EXPECT_EQ(Call(c, {"EXPIRE", "k", "100", "lt"}), ":1");
  EXPECT_EQ(Call(c, {"EXPIRE", "k", "200", "NX"}), ":0");
  EXPECT_EQ(Call(c, {"EXPIRE", "k", "50", "GT"}), ":0");
  EXPECT_EQ(Call(c, {"EXPIRE", "k", "200", "GT"}), ":1");
  EXPECT_EQ(Call(c, {"EXPIRE", "k", "300", "LT"}), ":0");
  EXPECT_EQ(Call(c, {"EXPIRE", "k", "150", "XX", "LT"}), ":1");
  EXPECT_EQ(Call(c, {"TTL", "k"}), ":150");
  const int64_t pttl = Int(c, {"PTTL", "k"});
  EXPECT_GT(pttl, 149000);
  EXPECT_LE(pttl, 150000);
  const int64_t at = Int(c, {"PEXPIRETIME", "k"});
  EXPECT_NEAR(static_cast<double>(at), static_cast<double>(NowMs() + 150000), 2000.0);
  EXPECT_EQ(Int(c, {"EXPIRETIME", "k"}), (at + 500) / 1000);
  // Absolute forms, and the unit of each command.
  EXPECT_EQ(Call(c, {"EXPIREAT", "k", "4102444800"}), ":1");
  EXPECT_EQ(Call(c, {"PEXPIRETIME", "k"}), ":4102444800000");
  EXPECT_EQ(Call(c, {"PEXPIREAT", "k", "4102444800123"}), ":1");
  EXPECT_EQ(Call(c, {"EXPIRETIME", "k"}), ":4102444800");
  // The largest deadline there is: every reply without overflow.
  EXPECT_EQ(Call(c, {"PEXPIREAT", "k", "9223372036854775807"}), ":1");
  EXPECT_EQ(Call(c, {"EXPIRETIME", "k"}), ":9223372036854776");
  EXPECT_GT(Int(c, {"TTL", "k"}), 9223370000000000);  // (INT64_MAX ms - now) in seconds
  EXPECT_EQ(Call(c, {"PEXPIRE", "k", "5000"}), ":1");
  EXPECT_LE(Int(c, {"PTTL", "k"}), 5000);
  // PERSIST.
  EXPECT_EQ(Call(c, {"PERSIST", "k"}), ":1");
  EXPECT_EQ(Call(c, {"PERSIST", "k"}), ":0");
  EXPECT_EQ(Call(c, {"PERSIST", "missing"}), ":0");
  EXPECT_EQ(Call(c, {"TTL", "k"}), ":-1");
  // A deadline in the past removes the key at once, and says 1.
  EXPECT_EQ(Call(c, {"EXPIRE", "k", "-1"}), ":1");
  EXPECT_EQ(Call(c, {"EXISTS", "k"}), ":0");
  EXPECT_EQ(Call(c, {"SET", "k", "v"}), "+OK");
  EXPECT_EQ(Call(c, {"PEXPIREAT", "k", "1"}), ":1");
  EXPECT_EQ(Call(c, {"GET", "k"}), "(nil)");
  // Errors: nothing written, the connection usable.
  EXPECT_EQ(Call(c, {"SET", "k", "v"}), "+OK");
  EXPECT_EQ(Call(c, {"EXPIRE", "k", "soon"}), kNotInteger);
  EXPECT_EQ(Call(c, {"EXPIRE", "k", "1.5"}), kNotInteger);
  EXPECT_EQ(Call(c, {"EXPIRE", "k", "10", "NX", "XX"}),
            "-ERR NX and XX, GT or LT options at the same time are not compatible");
  EXPECT_EQ(Call(c, {"EXPIRE", "k", "10", "GT", "LT"}),
            "-ERR GT and LT options at the same time are not compatible");
  EXPECT_EQ(Call(c, {"EXPIRE", "k", "10", "sometimes"}), "-ERR Unsupported option sometimes");
  EXPECT_EQ(Call(c, {"EXPIRE", "k", "9223372036854775807"}),
            "-ERR invalid expire time in 'expire' command");
  EXPECT_EQ(Call(c, {"PEXPIRE", "k", "9223372036854775807"}),
            "-ERR invalid expire time in 'pexpire' command");
  EXPECT_EQ(Call(c, {"EXPIREAT", "k", "-9223372036854775808"}),
            "-ERR invalid expire time in 'expireat' command");
  EXPECT_THAT(Call(c, {"EXPIRE", "k"}), HasSubstr("wrong number of arguments for 'expire'"));
  EXPECT_THAT(Call(c, {"TTL"}), HasSubstr("wrong number of arguments for 'ttl'"));
  EXPECT_EQ(Call(c, {"TTL", "k"}), ":-1");
  EXPECT_EQ(Call(c, {"GET", "k"}), "\"v\"");
  EXPECT_EQ(Call(c, {"TOUCH", "k", "missing", "k"}), ":2");
}

TEST_F(ExpiryTest, SetOptionsSetExAndGetExReplyAsRedis) {
  StartServer({});
  Client c = Connect();
  EXPECT_EQ(Call(c, {"SET", "k", "v", "EX", "100"}), "+OK");
  EXPECT_EQ(Call(c, {"TTL", "k"}), ":100");
  EXPECT_EQ(Call(c, {"SET", "k", "v", "px", "50000"}), "+OK");
  EXPECT_EQ(Call(c, {"TTL", "k"}), ":50");
  EXPECT_EQ(Call(c, {"SET", "k", "v", "EXAT", "4102444800"}), "+OK");
  EXPECT_EQ(Call(c, {"PEXPIRETIME", "k"}), ":4102444800000");
  EXPECT_EQ(Call(c, {"SET", "k", "v", "PXAT", "4102444800001"}), "+OK");
  EXPECT_EQ(Call(c, {"PEXPIRETIME", "k"}), ":4102444800001");
  EXPECT_EQ(Call(c, {"SET", "k", "w", "KEEPTTL"}), "+OK");
  EXPECT_EQ(Call(c, {"PEXPIRETIME", "k"}), ":4102444800001");
  EXPECT_EQ(Call(c, {"SET", "k", "x", "XX", "GET", "EX", "10"}), "\"w\"");
  EXPECT_EQ(Call(c, {"TTL", "k"}), ":10");
  EXPECT_EQ(Call(c, {"SET", "k", "y", "NX", "EX", "20"}), "(nil)");
  EXPECT_EQ(Call(c, {"TTL", "k"}), ":10");  // NX refused the write: the deadline stays
  EXPECT_EQ(Call(c, {"SET", "k", "z", "EX", "5", "EX", "30"}), "+OK");  // the last one counts
  EXPECT_EQ(Call(c, {"TTL", "k"}), ":30");
  EXPECT_EQ(Call(c, {"SET", "k", "v"}), "+OK");
  EXPECT_EQ(Call(c, {"TTL", "k"}), ":-1");
  // A deadline already past: the key is gone, the reply as for a write.
  EXPECT_EQ(Call(c, {"SET", "k", "v", "PXAT", "1"}), "+OK");
  EXPECT_EQ(Call(c, {"EXISTS", "k"}), ":0");
  // Errors: nothing written.
  EXPECT_EQ(Call(c, {"SET", "e", "v", "EX", "0"}), "-ERR invalid expire time in 'set' command");
  EXPECT_EQ(Call(c, {"SET", "e", "v", "PX", "-5"}), "-ERR invalid expire time in 'set' command");
  EXPECT_EQ(Call(c, {"SET", "e", "v", "EX", "9223372036854776"}),
            "-ERR invalid expire time in 'set' command");
  EXPECT_EQ(Call(c, {"SET", "e", "v", "PX", "9223372036854775807"}),
            "-ERR invalid expire time in 'set' command");
  EXPECT_EQ(Call(c, {"SET", "e", "v", "EX", "ten"}), kNotInteger);
  for (const std::vector<std::string>& bad :
       std::vector<std::vector<std::string>>{{"SET", "e", "v", "EX"},
                                             {"SET", "e", "v", "EX", "10", "PX", "100"},
                                             {"SET", "e", "v", "KEEPTTL", "EX", "10"},
                                             {"SET", "e", "v", "EX", "10", "KEEPTTL"},
                                             {"SET", "e", "v", "PXAT", "10", "EXAT", "10"}}) {
    EXPECT_EQ(Call(c, bad), "-ERR syntax error") << bad.size();
  }
  EXPECT_EQ(Call(c, {"EXISTS", "e"}), ":0");
  // SETEX, PSETEX.
  EXPECT_EQ(Call(c, {"SETEX", "s", "100", "v"}), "+OK");
  EXPECT_EQ(Call(c, {"TTL", "s"}), ":100");
  EXPECT_EQ(Call(c, {"PSETEX", "s", "20000", "w"}), "+OK");
  EXPECT_EQ(Call(c, {"TTL", "s"}), ":20");
  EXPECT_EQ(Call(c, {"GET", "s"}), "\"w\"");
  EXPECT_EQ(Call(c, {"SETEX", "s", "0", "v"}), "-ERR invalid expire time in 'setex' command");
  EXPECT_EQ(Call(c, {"PSETEX", "s", "-1", "v"}), "-ERR invalid expire time in 'psetex' command");
  EXPECT_EQ(Call(c, {"SETEX", "s", "x", "v"}), kNotInteger);
  EXPECT_EQ(Call(c, {"GET", "s"}), "\"w\"");
  // GETEX.
  EXPECT_EQ(Call(c, {"GETEX", "missing", "EX", "10"}), "(nil)");
  EXPECT_EQ(Call(c, {"EXISTS", "missing"}), ":0");
  EXPECT_EQ(Call(c, {"GETEX", "s"}), "\"w\"");
  EXPECT_EQ(Call(c, {"TTL", "s"}), ":20");
  EXPECT_EQ(Call(c, {"GETEX", "s", "EX", "100"}), "\"w\"");
  EXPECT_EQ(Call(c, {"TTL", "s"}), ":100");
  EXPECT_EQ(Call(c, {"GETEX", "s", "PERSIST"}), "\"w\"");
  EXPECT_EQ(Call(c, {"TTL", "s"}), ":-1");
  EXPECT_EQ(Call(c, {"GETEX", "s", "EX", "10", "PERSIST"}), "-ERR syntax error");
  EXPECT_EQ(Call(c, {"GETEX", "s", "PERSIST", "PX", "10"}), "-ERR syntax error");
  EXPECT_EQ(Call(c, {"GETEX", "s", "EX", "0"}), "-ERR invalid expire time in 'getex' command");
  EXPECT_EQ(Call(c, {"GETEX", "s", "PXAT", "1"}), "\"w\"");  // past: read, then removed
  EXPECT_EQ(Call(c, {"EXISTS", "s"}), ":0");
}

// Which writes keep a key's deadline (as Redis: the ones that change the value in place), which
// replace it, and that RENAME moves it and COPY copies it.
TEST_F(ExpiryTest, WritesKeepMoveOrClearTheDeadlineAsRedis) {
  StartServer({});
  Client c = Connect();
  auto with_deadline = [&](const std::string& key, const std::string& value) {
    EXPECT_EQ(Call(c, {"SET", key, value, "EX", "1000"}), "+OK");
  };
  auto ttl = [&](const std::string& key) { return Int(c, {"TTL", key}); };
  with_deadline("n", "1");
  EXPECT_EQ(Call(c, {"INCR", "n"}), ":2");
  EXPECT_EQ(Call(c, {"INCRBY", "n", "5"}), ":7");
  EXPECT_EQ(Call(c, {"DECR", "n"}), ":6");
  EXPECT_EQ(Call(c, {"INCRBYFLOAT", "n", "0.5"}), "\"6.5\"");
  EXPECT_EQ(Call(c, {"APPEND", "n", "x"}), ":4");
  EXPECT_EQ(Call(c, {"SETRANGE", "n", "0", "7"}), ":4");
  EXPECT_EQ(ttl("n"), 1000);
  EXPECT_EQ(Call(c, {"GETSET", "n", "new"}), "\"7.5x\"");
  EXPECT_EQ(ttl("n"), -1);
  with_deadline("m", "1");
  EXPECT_EQ(Call(c, {"MSET", "m", "2", "other", "3"}), "+OK");
  EXPECT_EQ(ttl("m"), -1);
  with_deadline("d", "1");
  EXPECT_EQ(Call(c, {"DEL", "d"}), ":1");
  EXPECT_EQ(Call(c, {"SET", "d", "again"}), "+OK");
  EXPECT_EQ(ttl("d"), -1);  // the deadline went with the key
  with_deadline("g", "1");
  EXPECT_EQ(Call(c, {"GETDEL", "g"}), "\"1\"");
  EXPECT_EQ(Call(c, {"SETNX", "g", "2"}), ":1");
  EXPECT_EQ(ttl("g"), -1);
  // RENAME moves the deadline, replacing the target's; COPY copies it.
  with_deadline("src", "v");
  EXPECT_EQ(Call(c, {"SET", "dst", "old", "EX", "5"}), "+OK");
  EXPECT_EQ(Call(c, {"RENAME", "src", "dst"}), "+OK");
  EXPECT_EQ(ttl("dst"), 1000);
  EXPECT_EQ(ttl("src"), -2);
  EXPECT_EQ(Call(c, {"COPY", "dst", "cp"}), ":1");
  EXPECT_EQ(ttl("cp"), 1000);
  EXPECT_EQ(ttl("dst"), 1000);
  EXPECT_EQ(Call(c, {"SET", "plain", "v"}), "+OK");
  EXPECT_EQ(Call(c, {"COPY", "plain", "cp", "REPLACE"}), ":1");
  EXPECT_EQ(ttl("cp"), -1);  // the target's deadline is replaced by none
  EXPECT_EQ(Call(c, {"RENAMENX", "cp", "fresh"}), ":1");
  EXPECT_EQ(ttl("fresh"), -1);
  // Inside EXEC, one transaction.
  EXPECT_EQ(Call(c, {"MULTI"}), "+OK");
  EXPECT_EQ(Call(c, {"SET", "t", "v"}), "+QUEUED");
  EXPECT_EQ(Call(c, {"EXPIRE", "t", "100"}), "+QUEUED");
  EXPECT_EQ(Call(c, {"INCR", "t2"}), "+QUEUED");
  EXPECT_EQ(Call(c, {"PEXPIRE", "t2", "200000"}), "+QUEUED");
  EXPECT_EQ(Call(c, {"TTL", "t"}), "+QUEUED");
  EXPECT_EQ(Call(c, {"EXEC"}), "[+OK, :1, :1, :1, :100]");
  EXPECT_EQ(ttl("t2"), 200);
  // FLUSHALL takes the deadlines too.
  EXPECT_EQ(Call(c, {"FLUSHALL"}), "+OK");
  auto info = c.Call({"INFO", "keyspace"});
  ASSERT_TRUE(info);
  EXPECT_THAT(info->str, HasSubstr("db0:keys=0,expires=0"));
}

// With no active cycle (--hz 0), a key past its deadline is still in the tree, yet every read
// finds it absent, and every write removes it first.
TEST_F(ExpiryTest, AKeyPastItsDeadlineIsAbsentToEveryCommand) {
  ServerOptions opt;
  opt.hz = 0;
  StartServer(opt);
  Client c = Connect();
  EXPECT_EQ(Call(c, {"SET", "live", "v"}), "+OK");
  for (const char* k : {"a", "b", "c", "n", "s", "w"}) {
    EXPECT_EQ(Call(c, {"SET", k, "1", "PX", "100"}), "+OK");
  }
  EXPECT_EQ(Call(c, {"WATCH", "w"}), "+OK");
  Pass(100);
  EXPECT_EQ(Call(c, {"DBSIZE"}), ":7");  // as Redis: counted until removed
  EXPECT_EQ(Call(c, {"GET", "a"}), "(nil)");
  EXPECT_EQ(Call(c, {"MGET", "a", "live"}), "[(nil), \"v\"]");
  EXPECT_EQ(Call(c, {"EXISTS", "a", "b", "live"}), ":1");
  EXPECT_EQ(Call(c, {"TYPE", "a"}), "+none");
  EXPECT_EQ(Call(c, {"STRLEN", "a"}), ":0");
  EXPECT_EQ(Call(c, {"GETRANGE", "a", "0", "-1"}), "\"\"");
  EXPECT_EQ(Call(c, {"TTL", "a"}), ":-2");
  EXPECT_EQ(Call(c, {"PERSIST", "a"}), ":0");
  EXPECT_EQ(Call(c, {"EXPIRE", "a", "100"}), ":0");
  EXPECT_EQ(Call(c, {"KEYS", "*"}), "[\"live\"]");
  EXPECT_EQ(Call(c, {"SCAN", "0", "COUNT", "100"}), "[\"0\", [\"live\"]]");
  EXPECT_EQ(Call(c, {"PMRT.RANGE", "", ""}), "[\"live\", \"v\"]");
  EXPECT_EQ(Call(c, {"RANDOMKEY"}), "\"live\"");
  EXPECT_EQ(Call(c, {"RENAME", "b", "x"}), "-ERR no such key");
  EXPECT_EQ(Call(c, {"COPY", "b", "x"}), ":0");
  // Writes find nothing, and what they write has no deadline.
  EXPECT_EQ(Call(c, {"SETNX", "a", "2"}), ":1");
  EXPECT_EQ(Call(c, {"TTL", "a"}), ":-1");
  EXPECT_EQ(Call(c, {"INCR", "n"}), ":1");
  EXPECT_EQ(Call(c, {"TTL", "n"}), ":-1");
  EXPECT_EQ(Call(c, {"APPEND", "s", "xy"}), ":2");
  EXPECT_EQ(Call(c, {"TTL", "s"}), ":-1");
  EXPECT_EQ(Call(c, {"MSETNX", "c", "3", "d", "4"}), ":1");
  // The watched key expired after WATCH: EXEC fails, as in Redis.
  EXPECT_EQ(Call(c, {"MULTI"}), "+OK");
  EXPECT_EQ(Call(c, {"SET", "x", "1"}), "+QUEUED");
  EXPECT_EQ(Call(c, {"EXEC"}), "(nil array)");
  // Watched when already past its deadline: not a change.
  EXPECT_EQ(Call(c, {"SET", "w2", "1", "PX", "1"}), "+OK");
  Pass(1);
  EXPECT_EQ(Call(c, {"WATCH", "w2"}), "+OK");
  EXPECT_EQ(Call(c, {"MULTI"}), "+OK");
  EXPECT_EQ(Call(c, {"SET", "x", "1"}), "+QUEUED");
  EXPECT_EQ(Call(c, {"EXEC"}), "[+OK]");
  auto info = c.Call({"INFO"});
  ASSERT_TRUE(info);
  // a, b (by RENAME and COPY, which write), n, s, c, w, w2.
  EXPECT_THAT(info->str, HasSubstr("expired_keys:7"));
  EXPECT_THAT(info->str, HasSubstr("db0:keys=7,expires=0"));
}

TEST_F(ExpiryTest, TheActiveCycleRemovesKeysNobodyReads) {
  StartServer({});  // hz 10
  Client c = Connect();
  constexpr int kKeys = 500;
  std::vector<std::string> mset = {"MSET"};
  for (int i = 0; i < 100; ++i) {
    mset.push_back(absl::StrCat("keep", i));
    mset.push_back("v");
  }
  EXPECT_EQ(Call(c, mset), "+OK");
  for (int i = 0; i < kKeys; ++i) {
    ASSERT_EQ(Call(c, {"SET", absl::StrCat("tmp", i), "v", "PX", "50"}), "+OK");
  }
  for (int i = 0; i < 20; ++i) {
    ASSERT_EQ(Call(c, {"SET", absl::StrCat("later", i), "v", "EX", "1000"}), "+OK");
  }
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (Call(c, {"DBSIZE"}) != ":120" && std::chrono::steady_clock::now() < give_up) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_EQ(Call(c, {"DBSIZE"}), ":120");
  auto info = c.Call({"INFO"});
  ASSERT_TRUE(info);
  EXPECT_THAT(info->str, HasSubstr(absl::StrCat("expired_keys:", kKeys)));
  EXPECT_THAT(info->str, HasSubstr("db0:keys=120,expires=20"));
  EXPECT_EQ(Call(c, {"TTL", "later7"}), ":1000");
}

TEST_F(ExpiryTest, DeadlinesSurviveARestart) {
  ServerOptions opt;
  opt.hz = 0;
  StartServer(opt);
  {
    Client c = Connect();
    EXPECT_EQ(Call(c, {"SET", "long", "v", "EX", "1000"}), "+OK");
    EXPECT_EQ(Call(c, {"SET", "short", "v", "PX", "300"}), "+OK");
    EXPECT_EQ(Call(c, {"SET", "plain", "v"}), "+OK");
  }
  StopServer();
  Pass(300);
  StartServer(opt);
  Client c = Connect();
  EXPECT_EQ(Call(c, {"GET", "short"}), "(nil)");
  EXPECT_EQ(Call(c, {"TTL", "short"}), ":-2");
  const int64_t left = Int(c, {"PTTL", "long"});
  EXPECT_GT(left, 990000);  // the time left, not the time given again
  EXPECT_LE(left, 1000000);
  EXPECT_EQ(Call(c, {"TTL", "plain"}), ":-1");
  EXPECT_EQ(Call(c, {"GET", "long"}), "\"v\"");
  EXPECT_THAT(Call(c, {"KEYS", "*"}), Not(HasSubstr("short")));
}

}  // namespace
}  // namespace pmrt::server
