// The server in-process (tools/server/server.h) over real sockets: each command's exact reply,
// pipelining, PMRT.SYNC, and bad input: oversized and negative lengths, garbage, a client that
// disconnects mid-command, a slow reader, thousands of idle connections, --max-clients. After
// each bad client the server must still serve a fresh connection and have lost nothing.
#include "tools/server/server.h"

#include <sys/socket.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "epoch/persist.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/server/resp_client.h"
#include "tests/server/server_fixture.h"
#include "tests/util/test_util.h"
#include "tools/server/commands.h"
#include "tools/server/store.h"

namespace pmrt::server {
namespace {

using testing::Client;
using ::testing::HasSubstr;
using testing::Reply;
using ::testing::StartsWith;

class ServerTest : public testing::ServerFixture {
 protected:
  void SetUp() override { StartServer({}); }
  void TearDown() override { StopServer(); }

  // A fresh connection answers PING and the sentinel key is intact.
  void ExpectHealthy() {
    Client c = Connect();
    EXPECT_EQ(Call(c, {"PING"}), "+PONG");
    EXPECT_EQ(Call(c, {"GET", "sentinel"}), "\"kept\"");
  }
};

TEST_F(ServerTest, EveryCommand) {
  Client c = Connect();
  EXPECT_EQ(Call(c, {"PING"}), "+PONG");
  EXPECT_EQ(Call(c, {"ping", "hi"}), "\"hi\"");
  EXPECT_EQ(Call(c, {"ECHO", std::string("a\0b", 3)}), "\"" + std::string("a\0b", 3) + "\"");
  EXPECT_EQ(Call(c, {"SET", "k1", "v1"}), "+OK");
  EXPECT_EQ(Call(c, {"GET", "k1"}), "\"v1\"");
  EXPECT_EQ(Call(c, {"GET", "nope"}), "(nil)");
  EXPECT_EQ(Call(c, {"SET", "k1", "v2", "NX"}), "(nil)");
  EXPECT_EQ(Call(c, {"SET", "k2", "v2", "nx"}), "+OK");
  EXPECT_EQ(Call(c, {"SETNX", "k2", "x"}), ":0");
  EXPECT_EQ(Call(c, {"SETNX", "k3", "v3"}), ":1");
  EXPECT_EQ(Call(c, {"SET", "k1", "v", "bogus"}), "-ERR syntax error");
  EXPECT_EQ(Call(c, {"MSET", "a", "1", "b", "2"}), "+OK");
  EXPECT_THAT(Call(c, {"MSET", "a", "1", "b"}), HasSubstr("wrong number of arguments"));
  EXPECT_EQ(Call(c, {"MGET", "a", "zz", "b"}), "[\"1\", (nil), \"2\"]");
  EXPECT_EQ(Call(c, {"EXISTS", "a", "a", "zz"}), ":2");
  EXPECT_EQ(Call(c, {"DBSIZE"}), ":5");
  EXPECT_EQ(Call(c, {"DEL", "a", "zz", "b"}), ":2");
  EXPECT_EQ(Call(c, {"UNLINK", "a"}), ":0");
  EXPECT_EQ(Call(c, {"DBSIZE"}), ":3");
  EXPECT_EQ(Call(c, {"PMRT.RANGE", "k1", "k3"}), "[\"k1\", \"v1\", \"k2\", \"v2\"]");
  EXPECT_EQ(Call(c, {"PMRT.RANGE", "k2", ""}), "[\"k2\", \"v2\", \"k3\", \"v3\"]");
  EXPECT_EQ(Call(c, {"PMRT.RANGE", "", "", "LIMIT", "1"}), "[\"k1\", \"v1\"]");
  EXPECT_THAT(Call(c, {"PMRT.RANGE", "", "", "LIMIT", "0"}), HasSubstr("LIMIT must be"));
  EXPECT_THAT(Call(c, {"PMRT.RANGE", "a", "b", "c"}), HasSubstr("syntax error"));
  EXPECT_EQ(Call(c, {"CONFIG", "GET", "save"}), "[\"save\", \"\"]");
  EXPECT_EQ(Call(c, {"CONFIG", "GET", "appendonly"}), "[\"appendonly\", \"no\"]");
  EXPECT_EQ(Call(c, {"CONFIG", "GET", "nothing-like-this"}), "[]");
  EXPECT_THAT(Call(c, {"CONFIG", "SET", "save", ""}), StartsWith("-ERR"));
  auto info = c.Call({"INFO"});
  ASSERT_TRUE(info);
  for (const char* field :
       {"# Pool", "pool_path:", "epoch_current:", "epoch_completed:", "epoch_advances:",
        "heap_used_bytes:", "heap_free_bytes:", "db0:keys=3", "connected_clients:1"}) {
    EXPECT_THAT(info->str, HasSubstr(field));
  }
  info = c.Call({"INFO", "keyspace"});
  ASSERT_TRUE(info);
  EXPECT_THAT(info->str, StartsWith("# Keyspace"));
  EXPECT_THAT(info->str, ::testing::Not(HasSubstr("# Pool")));
  EXPECT_EQ(Call(c, {"COMMAND", "DOCS"}), "[]");
  EXPECT_EQ(Call(c, {"SELECT", "0"}), "+OK");
  EXPECT_THAT(Call(c, {"SELECT", "1"}), StartsWith("-ERR DB index"));
  EXPECT_EQ(Call(c, {"PMRT.SYNC"}), "+OK");
  EXPECT_EQ(Call(c, {"NOSUCH", "x"}), "-ERR unknown command 'NOSUCH'");
  EXPECT_THAT(Call(c, {"GET"}), "-ERR wrong number of arguments for 'get' command");
  EXPECT_THAT(Call(c, {"SET", std::string(70000, 'k'), "v"}), HasSubstr("key too long"));
  EXPECT_EQ(Call(c, {"FLUSHALL"}), "+OK");
  EXPECT_EQ(Call(c, {"DBSIZE"}), ":0");
  EXPECT_EQ(Call(c, {"QUIT"}), "+OK");
  EXPECT_TRUE(c.WaitClosed());
}

constexpr char kNotInteger[] = "-ERR value is not an integer or out of range";
constexpr char kNotFloat[] = "-ERR value is not a valid float";

TEST_F(ServerTest, IncrDecrCountFromZeroAndRefuseNonIntegers) {
  Client c = Connect();
  EXPECT_EQ(Call(c, {"INCR", "n"}), ":1");
  EXPECT_EQ(Call(c, {"incr", "n"}), ":2");
  EXPECT_EQ(Call(c, {"INCRBY", "n", "10"}), ":12");
  EXPECT_EQ(Call(c, {"DECR", "n"}), ":11");
  EXPECT_EQ(Call(c, {"DECRBY", "n", "20"}), ":-9");
  EXPECT_EQ(Call(c, {"GET", "n"}), "\"-9\"");
  EXPECT_EQ(Call(c, {"DECR", "fresh"}), ":-1");
  EXPECT_EQ(Call(c, {"DECRBY", "fresh2", "-5"}), ":5");
  EXPECT_EQ(Call(c, {"SET", "zero", "0"}), "+OK");
  EXPECT_EQ(Call(c, {"INCRBY", "zero", "0"}), ":0");
  // Redis's strict form, for an argument and for a stored value alike.
  for (const char* bad : {"", "abc", " 1", "1 ", "+1", "01", "-0", "-", "1.0", "1e3", "0x10",
                          "9223372036854775808", "-9223372036854775809", "99999999999999999999"}) {
    EXPECT_EQ(Call(c, {"INCRBY", "n", bad}), kNotInteger) << "'" << bad << "'";
    EXPECT_EQ(Call(c, {"DECRBY", "n", bad}), kNotInteger) << "'" << bad << "'";
    EXPECT_EQ(Call(c, {"SET", "bad", bad}), "+OK");
    EXPECT_EQ(Call(c, {"INCR", "bad"}), kNotInteger) << "'" << bad << "'";
    EXPECT_EQ(Call(c, {"DECR", "bad"}), kNotInteger) << "'" << bad << "'";
    EXPECT_EQ(Call(c, {"GET", "bad"}), "\"" + std::string(bad) + "\"");
  }
  EXPECT_EQ(Call(c, {"GET", "n"}), "\"-9\"");
  EXPECT_EQ(Call(c, {"INCRBY", "n", "-9223372036854775799"}), ":-9223372036854775808");
  EXPECT_EQ(Call(c, {"INCR"}), "-ERR wrong number of arguments for 'incr' command");
  EXPECT_EQ(Call(c, {"INCRBY", "n"}), "-ERR wrong number of arguments for 'incrby' command");
  EXPECT_THAT(Call(c, {"INCR", std::string(70000, 'k')}), HasSubstr("key too long"));
}

TEST_F(ServerTest, IncrDecrOverflowEdges) {
  Client c = Connect();
  constexpr char kOverflow[] = "-ERR increment or decrement would overflow";
  EXPECT_EQ(Call(c, {"SET", "max", "9223372036854775807"}), "+OK");
  EXPECT_EQ(Call(c, {"INCRBY", "max", "1"}), kOverflow);
  EXPECT_EQ(Call(c, {"INCR", "max"}), kOverflow);
  EXPECT_EQ(Call(c, {"DECRBY", "max", "-1"}), kOverflow);
  EXPECT_EQ(Call(c, {"GET", "max"}), "\"9223372036854775807\"");  // unchanged
  EXPECT_EQ(Call(c, {"INCRBY", "max", "0"}), ":9223372036854775807");
  EXPECT_EQ(Call(c, {"DECRBY", "max", "9223372036854775807"}), ":0");
  EXPECT_EQ(Call(c, {"SET", "min", "-9223372036854775808"}), "+OK");
  EXPECT_EQ(Call(c, {"DECR", "min"}), kOverflow);
  EXPECT_EQ(Call(c, {"INCRBY", "min", "-1"}), kOverflow);
  EXPECT_EQ(Call(c, {"INCRBY", "min", "9223372036854775807"}), ":-1");
  EXPECT_EQ(Call(c, {"INCRBY", "min", "-9223372036854775807"}), ":-9223372036854775808");
  // Negating INT64_MIN is itself out of range: Redis 7's own error, whatever the key holds.
  EXPECT_EQ(Call(c, {"DECRBY", "min", "-9223372036854775808"}), "-ERR decrement would overflow");
  EXPECT_EQ(Call(c, {"DECRBY", "none", "-9223372036854775808"}), "-ERR decrement would overflow");
  EXPECT_EQ(Call(c, {"EXISTS", "none"}), ":0");
  EXPECT_EQ(Call(c, {"INCRBY", "none", "-9223372036854775808"}), ":-9223372036854775808");
}

TEST_F(ServerTest, IncrByFloatFormatsAsRedis) {
  Client c = Connect();
  EXPECT_EQ(Call(c, {"SET", "f", "10.50"}), "+OK");
  EXPECT_EQ(Call(c, {"INCRBYFLOAT", "f", "0.1"}), "\"10.6\"");
  EXPECT_EQ(Call(c, {"INCRBYFLOAT", "f", "-5"}), "\"5.6\"");
  EXPECT_EQ(Call(c, {"GET", "f"}), "\"5.6\"");
  EXPECT_EQ(Call(c, {"SET", "e", "5.0e3"}), "+OK");
  EXPECT_EQ(Call(c, {"INCRBYFLOAT", "e", "2.0e2"}), "\"5200\"");
  EXPECT_EQ(Call(c, {"INCRBYFLOAT", "new", "3"}), "\"3\"");
  EXPECT_EQ(Call(c, {"INCRBYFLOAT", "new", "-3"}), "\"0\"");
  EXPECT_EQ(Call(c, {"INCRBYFLOAT", "new", "-0.5"}), "\"-0.5\"");
  EXPECT_EQ(Call(c, {"INCRBYFLOAT", "new", "0x10"}), "\"15.5\"");  // strtold's hex form
  EXPECT_EQ(Call(c, {"SET", "i", "7"}), "+OK");
  EXPECT_EQ(Call(c, {"INCRBYFLOAT", "i", "1e2"}), "\"107\"");
  EXPECT_EQ(Call(c, {"INCR", "i"}), ":108");
  EXPECT_EQ(Call(c, {"INCR", "f"}), kNotInteger);
  for (const char* bad : {"", "abc", " 1", "1 ", "1.5x", "nan", "1e5000"}) {
    EXPECT_EQ(Call(c, {"INCRBYFLOAT", "f", bad}), kNotFloat) << "'" << bad << "'";
    EXPECT_EQ(Call(c, {"SET", "bad", bad}), "+OK");
    EXPECT_EQ(Call(c, {"INCRBYFLOAT", "bad", "1"}), kNotFloat) << "'" << bad << "'";
  }
  EXPECT_EQ(Call(c, {"INCRBYFLOAT", "f", "inf"}), "-ERR increment would produce NaN or Infinity");
  EXPECT_EQ(Call(c, {"SET", "inf", "inf"}), "+OK");
  EXPECT_EQ(Call(c, {"INCRBYFLOAT", "inf", "-inf"}),
            "-ERR increment would produce NaN or Infinity");
  EXPECT_EQ(Call(c, {"GET", "f"}), "\"5.6\"");
}

TEST_F(ServerTest, AppendStrlenGetRange) {
  Client c = Connect();
  EXPECT_EQ(Call(c, {"APPEND", "a", "Hello"}), ":5");
  EXPECT_EQ(Call(c, {"APPEND", "a", " World"}), ":11");
  EXPECT_EQ(Call(c, {"APPEND", "a", ""}), ":11");
  EXPECT_EQ(Call(c, {"GET", "a"}), "\"Hello World\"");
  EXPECT_EQ(Call(c, {"STRLEN", "a"}), ":11");
  EXPECT_EQ(Call(c, {"STRLEN", "missing"}), ":0");
  EXPECT_EQ(Call(c, {"APPEND", "empty", ""}), ":0");
  EXPECT_EQ(Call(c, {"EXISTS", "empty"}), ":1");  // as in Redis: an empty string is a value
  EXPECT_EQ(Call(c, {"STRLEN", "empty"}), ":0");
  EXPECT_EQ(Call(c, {"SET", "s", "This is a string"}), "+OK");
  const std::vector<std::tuple<const char*, const char*, const char*>> cases = {
      {"0", "3", "This"},
      {"-3", "-1", "ing"},
      {"0", "-1", "This is a string"},
      {"10", "100", "string"},
      {"5", "3", ""},
      {"-1", "-5", ""},
      {"-100", "2", "Thi"},
      {"-100", "-100", "T"},
      {"100", "200", ""},
      {"15", "15", "g"},
      {"16", "16", ""},
      {"0", "0", "T"},
      {"3", "-14", ""},
      {"-16", "-16", "T"},
      {"0", "-100", "T"},
      {"-9223372036854775808", "9223372036854775807", "This is a string"},
  };
  for (const auto& [start, end, want] : cases) {
    EXPECT_EQ(Call(c, {"GETRANGE", "s", start, end}), absl::StrCat("\"", want, "\""))
        << start << " " << end;
  }
  EXPECT_EQ(Call(c, {"SUBSTR", "s", "0", "3"}), "\"This\"");
  EXPECT_EQ(Call(c, {"GETRANGE", "missing", "0", "-1"}), "\"\"");
  EXPECT_EQ(Call(c, {"GETRANGE", "empty", "0", "-1"}), "\"\"");
  EXPECT_EQ(Call(c, {"GETRANGE", "empty", "-1", "-5"}), "\"\"");
  EXPECT_EQ(Call(c, {"GETRANGE", "s", "x", "1"}), kNotInteger);
  EXPECT_EQ(Call(c, {"GETRANGE", "s", "0", "1.5"}), kNotInteger);
  EXPECT_EQ(Call(c, {"GETRANGE", "s", "0"}),
            "-ERR wrong number of arguments for 'getrange' command");
}

TEST_F(ServerTest, SetRangePadsWithZerosAndChecksItsLimits) {
  Client c = Connect();
  EXPECT_EQ(Call(c, {"SET", "k", "Hello World"}), "+OK");
  EXPECT_EQ(Call(c, {"SETRANGE", "k", "6", "Redis"}), ":11");
  EXPECT_EQ(Call(c, {"GET", "k"}), "\"Hello Redis\"");
  EXPECT_EQ(Call(c, {"SETRANGE", "k", "9", "xyz"}), ":12");
  EXPECT_EQ(Call(c, {"GET", "k"}), "\"Hello Redxyz\"");
  EXPECT_EQ(Call(c, {"SETRANGE", "k", "14", "!"}), ":15");
  EXPECT_EQ(Call(c, {"GET", "k"}), "\"Hello Redxyz" + std::string(2, '\0') + "!\"");
  EXPECT_EQ(Call(c, {"SETRANGE", "pad", "5", "x"}), ":6");
  EXPECT_EQ(Call(c, {"GET", "pad"}), "\"" + std::string(5, '\0') + "x\"");
  // An empty value changes nothing: a missing key stays missing, an existing one keeps its length.
  EXPECT_EQ(Call(c, {"SETRANGE", "nothing", "3", ""}), ":0");
  EXPECT_EQ(Call(c, {"SETRANGE", "nothing", "600000000", ""}), ":0");
  EXPECT_EQ(Call(c, {"EXISTS", "nothing"}), ":0");
  EXPECT_EQ(Call(c, {"SETRANGE", "k", "100", ""}), ":15");
  EXPECT_EQ(Call(c, {"SETRANGE", "k", "-1", "x"}), "-ERR offset is out of range");
  EXPECT_EQ(Call(c, {"SETRANGE", "k", "-1", ""}), "-ERR offset is out of range");
  EXPECT_EQ(Call(c, {"SETRANGE", "k", "x", "x"}), kNotInteger);
  // Past proto-max-bulk-len (512 MiB by default), as Redis 7 replies; nothing is written.
  constexpr char kTooLong[] = "-ERR string exceeds maximum allowed size (proto-max-bulk-len)";
  EXPECT_EQ(Call(c, {"SETRANGE", "k", "536870912", "x"}), kTooLong);
  EXPECT_EQ(Call(c, {"SETRANGE", "k", "536870911", "xy"}), kTooLong);
  EXPECT_EQ(Call(c, {"SETRANGE", "new", "536870911", "xy"}), kTooLong);
  EXPECT_EQ(Call(c, {"SETRANGE", "k", "9223372036854775807", "x"}), kTooLong);
  EXPECT_EQ(Call(c, {"EXISTS", "new"}), ":0");
  EXPECT_EQ(Call(c, {"STRLEN", "k"}), ":15");
}

TEST(ServerLimits, AppendAndSetRangeStopAtTheBulkLimit) {
  pmrt::testing::TempDir dir;
  auto kv = server::Store::Open(dir.File("kv.pool"), testing::CreatePoolOf(32 << 20));
  ASSERT_THAT(kv, pmrt::testing::IsOk());
  ServerOptions opt;
  opt.port = 0;
  opt.threads = 1;
  opt.limits.max_bulk = 1024;
  auto server = Server::Create(**kv, opt);
  ASSERT_THAT(server, pmrt::testing::IsOk());
  ASSERT_THAT((*server)->Start(), pmrt::testing::IsOk());
  Client c((*server)->port());
  constexpr char kTooLong[] = "-ERR string exceeds maximum allowed size (proto-max-bulk-len)";
  auto call = [&](const std::vector<std::string>& argv) {
    auto r = c.Call(argv);
    return r ? r->ToString() : "(no reply)";
  };
  EXPECT_EQ(call({"SET", "k", std::string(1000, 'a')}), "+OK");
  EXPECT_EQ(call({"APPEND", "k", std::string(25, 'b')}), kTooLong);
  EXPECT_EQ(call({"APPEND", "k", std::string(24, 'b')}), ":1024");
  EXPECT_EQ(call({"APPEND", "k", "c"}), kTooLong);
  EXPECT_EQ(call({"SETRANGE", "k", "1024", "c"}), kTooLong);
  EXPECT_EQ(call({"SETRANGE", "k", "1023", "c"}), ":1024");
  EXPECT_EQ(call({"SETRANGE", "new", "1000", std::string(25, 'x')}), kTooLong);
  EXPECT_EQ(call({"SETRANGE", "new", "1000", std::string(24, 'x')}), ":1024");
  EXPECT_EQ(call({"STRLEN", "k"}), ":1024");
  (*server)->Stop();
  EXPECT_THAT((*kv)->tree().CheckInvariants(), pmrt::testing::IsOk());
  EXPECT_THAT((*kv)->Close(), pmrt::testing::IsOk());
}

TEST_F(ServerTest, GetSetAndGetDel) {
  Client c = Connect();
  EXPECT_EQ(Call(c, {"GETSET", "k", "v1"}), "(nil)");
  EXPECT_EQ(Call(c, {"GET", "k"}), "\"v1\"");
  EXPECT_EQ(Call(c, {"GETSET", "k", "v2"}), "\"v1\"");
  EXPECT_EQ(Call(c, {"GET", "k"}), "\"v2\"");
  EXPECT_EQ(Call(c, {"GETDEL", "k"}), "\"v2\"");
  EXPECT_EQ(Call(c, {"GETDEL", "k"}), "(nil)");
  EXPECT_EQ(Call(c, {"EXISTS", "k"}), ":0");
  EXPECT_EQ(Call(c, {"GETDEL", "never"}), "(nil)");
  EXPECT_EQ(Call(c, {"GETSET", "k"}), "-ERR wrong number of arguments for 'getset' command");
}

TEST_F(ServerTest, SetNxXxGetCombinations) {
  Client c = Connect();
  EXPECT_EQ(Call(c, {"SET", "k", "v1", "XX"}), "(nil)");
  EXPECT_EQ(Call(c, {"EXISTS", "k"}), ":0");
  EXPECT_EQ(Call(c, {"SET", "k", "v1", "NX"}), "+OK");
  EXPECT_EQ(Call(c, {"SET", "k", "v2", "NX"}), "(nil)");
  EXPECT_EQ(Call(c, {"SET", "k", "v2", "xx"}), "+OK");
  EXPECT_EQ(Call(c, {"GET", "k"}), "\"v2\"");
  EXPECT_EQ(Call(c, {"SET", "k", "v3", "GET"}), "\"v2\"");
  EXPECT_EQ(Call(c, {"SET", "g", "v", "get"}), "(nil)");
  EXPECT_EQ(Call(c, {"GET", "g"}), "\"v\"");
  // With GET the reply is the old value whether NX/XX let the write happen or not.
  EXPECT_EQ(Call(c, {"SET", "k", "v4", "NX", "GET"}), "\"v3\"");
  EXPECT_EQ(Call(c, {"GET", "k"}), "\"v3\"");
  EXPECT_EQ(Call(c, {"SET", "k", "v5", "GET", "XX"}), "\"v3\"");
  EXPECT_EQ(Call(c, {"GET", "k"}), "\"v5\"");
  EXPECT_EQ(Call(c, {"SET", "p", "v", "NX", "GET"}), "(nil)");
  EXPECT_EQ(Call(c, {"GET", "p"}), "\"v\"");
  EXPECT_EQ(Call(c, {"SET", "q", "v", "XX", "GET"}), "(nil)");
  EXPECT_EQ(Call(c, {"EXISTS", "q"}), ":0");
  EXPECT_EQ(Call(c, {"SET", "k", "v6", "NX", "NX"}), "(nil)");
  EXPECT_EQ(Call(c, {"SET", "k", "v", "NX", "XX"}), "-ERR syntax error");
  EXPECT_EQ(Call(c, {"SET", "k", "v", "XX", "NX"}), "-ERR syntax error");
  EXPECT_EQ(Call(c, {"SET", "k", "v", "XX", "GET", "NX"}), "-ERR syntax error");
  EXPECT_EQ(Call(c, {"SET", "k", "v", "bogus"}), "-ERR syntax error");
  EXPECT_EQ(Call(c, {"GET", "k"}), "\"v5\"");
}

// Read-modify-write commands are atomic against every other write of their key: concurrent
// INCRs lose no increment, a GETSET draining the counter takes each increment exactly once, and
// concurrent APPENDs lose no byte.
TEST(ServerConcurrency, IncrAppendAndGetSetLoseNothing) {
  pmrt::testing::TempDir dir;
  auto kv = server::Store::Open(dir.File("kv.pool"), testing::CreatePoolOf(64 << 20));
  ASSERT_THAT(kv, pmrt::testing::IsOk());
  ServerOptions opt;
  opt.port = 0;
  opt.threads = 4;
  auto server = Server::Create(**kv, opt);
  ASSERT_THAT(server, pmrt::testing::IsOk());
  ASSERT_THAT((*server)->Start(), pmrt::testing::IsOk());
  const int port = (*server)->port();
  constexpr int kThreads = 8, kOps = 2000;
  std::atomic<int> errors{0};
  std::atomic<int64_t> drained{0};
  std::atomic<bool> incrs_done{false};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      Client c(port);
      const std::string key = t % 2 == 0 ? "counter" : "drained";
      for (int i = 0; i < kOps; ++i) {
        auto r = c.Call({"INCR", key});
        if (!r || r->type != ':') ++errors;
      }
    });
  }
  threads.emplace_back([&] {  // APPENDs of one byte to another key, two clients
    Client c(port), d(port);
    for (int i = 0; i < kOps; ++i) {
      auto r1 = c.Call({"APPEND", "log", "a"});
      auto r2 = d.Call({"APPEND", "log", "b"});
      if (!r1 || !r2 || r1->type != ':' || r2->type != ':') ++errors;
    }
  });
  std::thread drainer([&] {  // takes the "drained" counter's value, leaving 0, until INCRs end
    Client c(port);
    for (bool last = false; !last;) {
      last = incrs_done.load();
      auto r = c.Call({"GETSET", "drained", "0"});
      int64_t v = 0;
      if (!r || (!r->null && !absl::SimpleAtoi(r->str, &v))) ++errors;
      drained += v;
    }
  });
  for (std::thread& th : threads) th.join();
  incrs_done = true;
  drainer.join();
  Client c(port);
  auto counter = c.Call({"GET", "counter"});
  ASSERT_TRUE(counter);
  EXPECT_EQ(counter->str, std::to_string(kThreads / 2 * kOps));
  auto rest = c.Call({"GET", "drained"});
  ASSERT_TRUE(rest);
  EXPECT_EQ(drained.load() + std::stoll(rest->str), kThreads / 2 * kOps);
  auto log = c.Call({"STRLEN", "log"});
  ASSERT_TRUE(log);
  EXPECT_EQ(log->integer, 2 * kOps);
  EXPECT_EQ(errors.load(), 0);
  (*server)->Stop();
  EXPECT_THAT((*kv)->tree().CheckInvariants(), pmrt::testing::IsOk());
  EXPECT_THAT((*kv)->Close(), pmrt::testing::IsOk());
}

TEST_F(ServerTest, ScanVisitsEveryKeyOnceInOrder) {
  Client c = Connect();
  std::string batch;
  for (int i = 0; i < 1000; ++i)
    batch += testing::Encode({"SET", absl::StrCat("key:", 10000 + i), "v"});
  ASSERT_TRUE(c.Send(batch));
  for (int i = 0; i < 1000; ++i) ASSERT_TRUE(c.Read());
  std::vector<std::string> seen;
  std::string cursor = "0";
  do {
    auto r = c.Call({"SCAN", cursor, "COUNT", "37"});
    ASSERT_TRUE(r && r->type == '*' && r->elements.size() == 2) << (r ? r->ToString() : "");
    cursor = r->elements[0].str;
    for (const Reply& k : r->elements[1].elements) seen.push_back(k.str);
  } while (cursor != "0");
  ASSERT_EQ(seen.size(), 1000u);
  for (int i = 0; i < 1000; ++i) EXPECT_EQ(seen[i], absl::StrCat("key:", 10000 + i));
  // MATCH filters the examined keys.
  auto r = c.Call({"SCAN", "0", "MATCH", "key:1000?", "COUNT", "1000"});
  ASSERT_TRUE(r);
  EXPECT_EQ(r->elements[1].elements.size(), 10u);
  EXPECT_THAT(Call(c, {"SCAN", "12345"}), StartsWith("-ERR invalid cursor"));
  EXPECT_THAT(Call(c, {"SCAN", "abc"}), StartsWith("-ERR invalid cursor"));
}

// A key-value pool of `pool_bytes` in `dir` and a server on it with `opt` (port 0), started.
struct Served {
  std::unique_ptr<server::Store> kv;
  std::unique_ptr<Server> server;
};
Served Serve(const pmrt::testing::TempDir& dir, server::StoreOptions ko, ServerOptions opt) {
  Served s;
  auto kv = server::Store::Open(dir.File("served.pool"), ko);
  EXPECT_THAT(kv, pmrt::testing::IsOk());
  if (!kv.ok()) return s;
  s.kv = std::move(*kv);
  opt.port = 0;
  auto server = Server::Create(*s.kv, opt);
  EXPECT_THAT(server, pmrt::testing::IsOk());
  if (!server.ok()) return s;
  s.server = std::move(*server);
  EXPECT_THAT(s.server->Start(), pmrt::testing::IsOk());
  return s;
}

// Reply amplification: a short request whose reply would pass --max-reply (MGET of one large
// value many times, a range over large values) gets an error, the connection stays usable, and
// the value itself still reads back.
TEST(ServerLimits, RepliesPastTheLimitAreRefused) {
  pmrt::testing::TempDir dir;
  ServerOptions opt;
  opt.threads = 1;
  opt.limits.max_bulk = 1 << 20;
  opt.max_reply = 2 << 20;
  Served s = Serve(dir, testing::CreatePoolOf(64 << 20), opt);
  ASSERT_NE(s.server, nullptr);
  Client c(s.server->port());
  const std::string big(700 << 10, 'v');
  for (int i = 0; i < 4; ++i) {
    auto r = c.Call({"SET", absl::StrCat("big", i), big});
    ASSERT_TRUE(r && r->ToString() == "+OK");
  }
  std::vector<std::string> mget = {"MGET"};
  for (int i = 0; i < 100; ++i) mget.push_back("big0");
  auto r = c.Call(mget);
  ASSERT_TRUE(r);
  EXPECT_TRUE(r->IsError());
  EXPECT_THAT(r->str, StartsWith("ERR reply too large: MGET"));
  r = c.Call({"PMRT.RANGE", "big", ""});
  ASSERT_TRUE(r);
  EXPECT_THAT(r->str, StartsWith("ERR reply too large: PMRT.RANGE"));
  // Under the limit, and a value as large as a bulk string may be, both still work.
  r = c.Call({"MGET", "big0", "big1"});
  ASSERT_TRUE(r && r->type == '*' && r->elements.size() == 2u);
  EXPECT_EQ(r->elements[1].str, big);
  const std::string largest(1 << 20, 'w');
  ASSERT_EQ(c.Call({"SET", "largest", largest})->ToString(), "+OK");
  r = c.Call({"GET", "largest"});
  ASSERT_TRUE(r);
  EXPECT_EQ(r->str, largest);
  s.server->Stop();
  EXPECT_THAT(s.kv->Close(), pmrt::testing::IsOk());
}

// A full pool: the first refused SET names the pool and its size, reads keep working, and a DEL
// makes room for a SET of the same size at once (the write waits for the freed value's grace
// period outside its guard instead of failing).
TEST(ServerLimits, AFullPoolRefusesWritesKeepsReadsAndADelMakesRoom) {
  pmrt::testing::TempDir dir;
  ServerOptions opt;
  opt.threads = 1;
  Served s = Serve(dir, testing::CreatePoolOf(16 << 20), opt);
  ASSERT_NE(s.server, nullptr);
  Client c(s.server->port());
  const std::string value(256 << 10, 'v');
  int stored = 0;
  std::string refused;
  for (; stored < 200; ++stored) {
    auto r = c.Call({"SET", absl::StrCat("k", stored), value});
    ASSERT_TRUE(r);
    if (r->IsError()) {
      refused = r->str;
      break;
    }
    ASSERT_EQ(r->ToString(), "+OK");
  }
  ASSERT_GT(stored, 20);
  ASSERT_LT(stored, 200) << "a 16 MiB pool took 200 values of 256 KiB";
  EXPECT_THAT(refused, StartsWith("OOM pool " + dir.File("served.pool") + " (16777216 bytes)"));
  EXPECT_EQ(c.Call({"GET", "k0"})->str, value);
  for (int round = 0; round < 5; ++round) {
    const std::string gone = absl::StrCat("k", round), fresh = absl::StrCat("new", round);
    ASSERT_EQ(c.Call({"DEL", gone})->ToString(), ":1");
    ASSERT_EQ(c.Call({"SET", fresh, value})->ToString(), "+OK") << "round " << round;
    EXPECT_EQ(c.Call({"GET", fresh})->str, value);
  }
  EXPECT_EQ(c.Call({"GET", absl::StrCat("k", stored - 1)})->str, value);
  s.server->Stop();
  EXPECT_THAT(s.kv->heap().Check(), pmrt::testing::IsOk());
  EXPECT_THAT(s.kv->Close(), pmrt::testing::IsOk());
}

// --verify-reads: a value whose bytes changed on media is an error reply in GET, in its MGET
// element and in PMRT.RANGE, never served; the other keys read as written.
TEST(ServerLimits, VerifiedReadsRefuseADamagedValue) {
  pmrt::testing::TempDir dir;
  const std::string path = dir.File("served.pool");
  {
    auto kv = server::Store::Open(path, testing::CreatePoolOf(16 << 20));
    ASSERT_THAT(kv, pmrt::testing::IsOk());
    ASSERT_NE((*kv)->tree().put("a", "apple-as-written"), ds::PutResult::kNoMemory);
    ASSERT_NE((*kv)->tree().put("b", "banana-as-written"), ds::PutResult::kNoMemory);
    ASSERT_THAT((*kv)->Close(), pmrt::testing::IsOk());
  }
  const std::optional<std::string> image = pmrt::testing::ReadFile(path);
  ASSERT_TRUE(image.has_value());
  const size_t at = image->find("banana-as-written");
  ASSERT_NE(at, std::string::npos);
  ASSERT_EQ(image->find("banana-as-written", at + 1), std::string::npos);
  pmrt::testing::WriteFileAt(path, at, "B");

  ServerOptions opt;
  opt.threads = 1;
  opt.verify_reads = true;
  Served s = Serve(dir, {}, opt);
  ASSERT_NE(s.server, nullptr);
  Client c(s.server->port());
  EXPECT_EQ(c.Call({"GET", "a"})->str, "apple-as-written");
  auto r = c.Call({"GET", "b"});
  ASSERT_TRUE(r);
  EXPECT_TRUE(r->IsError());
  EXPECT_THAT(r->str, StartsWith("ERR the value of key 'b' fails its checksum"));
  r = c.Call({"MGET", "a", "b", "missing"});
  ASSERT_TRUE(r && r->type == '*' && r->elements.size() == 3u);
  EXPECT_EQ(r->elements[0].str, "apple-as-written");
  EXPECT_TRUE(r->elements[1].IsError());
  EXPECT_EQ(r->elements[2].ToString(), "(nil)");
  r = c.Call({"PMRT.RANGE", "", ""});
  ASSERT_TRUE(r);
  EXPECT_THAT(r->str, StartsWith("ERR the value of key 'b' fails its checksum"));
  EXPECT_EQ(c.Call({"CONFIG", "GET", "pmrt-verify-reads"})->ToString(),
            "[\"pmrt-verify-reads\", \"yes\"]");
  // Rewriting the key replaces the damaged object.
  EXPECT_EQ(c.Call({"SET", "b", "banana-again"})->ToString(), "+OK");
  EXPECT_EQ(c.Call({"GET", "b"})->str, "banana-again");
  s.server->Stop();
  EXPECT_THAT(s.kv->tree().CheckInvariants(), pmrt::testing::IsOk());
  EXPECT_THAT(s.kv->Close(), pmrt::testing::IsOk());
}

// Long reads work in slices and leave the epoch guard between them: while a SCAN whose MATCH
// costs |pattern| x |key| per key, and a PMRT.RANGE over a million keys, run, epochs keep
// completing and another client's writes keep being acknowledged. Counted, not timed: with a
// guard held for the whole request no epoch would complete while it ran.
TEST(ServerSlices, LongReadsLetEpochsAdvanceAndWritesGoOn) {
  pmrt::testing::TempDir dir;
  server::StoreOptions ko = testing::CreatePoolOf(512 << 20);
  ko.epochs.interval = std::chrono::milliseconds(2);
  ServerOptions opt;
  opt.threads = 2;
  Served s = Serve(dir, ko, opt);
  ASSERT_NE(s.server, nullptr);
  server::Store* kv = s.kv.get();
  Server* server = s.server.get();
  // 20 keys of 8 KiB of 'a' (a pattern "*aaa...ab" of 8 KiB tries every start: 8K x 8K steps
  // per key), and a million short keys after them.
  constexpr int kRangeKeys = 1'000'000;
  for (int i = 0; i < 20; ++i) {
    std::string k(8 << 10, 'a');
    k.back() = static_cast<char>('a' + i % 2);
    k += absl::StrCat(i);
    ASSERT_EQ(kv->tree().put(k, "v"), ds::PutResult::kInserted);
  }
  for (int i = 0; i < kRangeKeys; ++i) {
    kv->tree().put(absl::StrCat("r:", 10'000'000 + i), "12345678");
  }
  const std::string pattern = "*" + std::string(8 << 10, 'a') + "b";
  const std::vector<std::vector<std::string>> reads = {
      {"SCAN", "0", "MATCH", pattern, "COUNT", "20"},
      {"PMRT.RANGE", "r:", "", "LIMIT", std::to_string(kRangeKeys)},
  };
  for (const auto& read : reads) {
    std::atomic<bool> reading{true};
    std::atomic<uint64_t> acked{0};
    std::thread writer([&] {
      Client w(server->port());
      for (uint64_t n = 0; reading.load(); ++n) {
        auto r = w.Call({"SET", absl::StrCat("w:", n % 100), "x"});
        ASSERT_TRUE(r && r->ToString() == "+OK");
        if (reading.load()) acked.fetch_add(1);
      }
    });
    Client c(server->port());
    const uint64_t before = kv->epochs().completed();
    auto r = c.Call(read);
    const uint64_t after = kv->epochs().completed();
    reading.store(false);
    writer.join();
    ASSERT_TRUE(r && r->type == '*') << read[0] << ": " << (r ? r->ToString() : "(no reply)");
    if (read[0] == "SCAN") {
      EXPECT_EQ(r->elements[1].elements.size(), 0u);  // no key ends with b after the a's
    } else {
      EXPECT_EQ(r->elements.size(), 2u * kRangeKeys);
    }
    EXPECT_GE(after - before, 5u) << read[0] << ": the epoch stood still while it ran";
    EXPECT_GE(acked.load(), 5u) << read[0] << ": writes waited for it";
  }
  server->Stop();
  EXPECT_THAT(kv->Close(), pmrt::testing::IsOk());
}

TEST_F(ServerTest, PipelinedAndInline) {
  Client c = Connect();
  std::string batch;
  for (int i = 0; i < 5000; ++i) {
    batch += testing::Encode({"SET", absl::StrCat("p", i), absl::StrCat("v", i)});
    batch += testing::Encode({"GET", absl::StrCat("p", i)});
  }
  ASSERT_TRUE(c.Send(batch));
  for (int i = 0; i < 5000; ++i) {
    auto set = c.Read();
    auto get = c.Read();
    ASSERT_TRUE(set && get);
    EXPECT_TRUE(set->IsOk());
    EXPECT_EQ(get->str, absl::StrCat("v", i));
  }
  ASSERT_TRUE(c.Send("SET inl \"a b\"\r\nGET inl\nPING\r\n"));
  EXPECT_EQ(c.Read()->ToString(), "+OK");
  EXPECT_EQ(c.Read()->ToString(), "\"a b\"");
  EXPECT_EQ(c.Read()->ToString(), "+PONG");
}

TEST_F(ServerTest, SyncMakesEarlierWritesDurable) {
  Client a = Connect();
  Client b = Connect();
  EXPECT_EQ(Call(a, {"SET", "x", "1"}), "+OK");
  const uint64_t before = kv_->epochs().current();
  // b's sync covers a's acknowledged write.
  EXPECT_EQ(Call(b, {"PMRT.SYNC"}), "+OK");
  EXPECT_GE(kv_->epochs().completed(), before);
  // Commands pipelined after a sync wait for it and keep their order.
  ASSERT_TRUE(b.Send(testing::Encode({"SET", "y", "2"}) + testing::Encode({"PMRT.SYNC"}) +
                     testing::Encode({"GET", "y"})));
  EXPECT_EQ(b.Read()->ToString(), "+OK");
  EXPECT_EQ(b.Read()->ToString(), "+OK");
  EXPECT_EQ(b.Read()->ToString(), "\"2\"");
  EXPECT_EQ(server_->stats().syncs, 2u);
}

// The failed mode (an msync error, injected in the seam): PMRT.SYNC replies with the error,
// naming the pool and the cause, every later PMRT.SYNC too, and reads keep working.
TEST_F(ServerTest, SyncReportsTheFailedMode) {
  if (kv_->pool().persister().kind() != BackendKind::kMsync) {
    GTEST_SKIP() << "the pool is not on the msync backend";
  }
  Client c = Connect();
  EXPECT_EQ(Call(c, {"SET", "x", "1"}), "+OK");
  EXPECT_EQ(Call(c, {"PMRT.SYNC"}), "+OK");
  epoch_internal::InjectMsyncFailures(1, 1, EIO);
  EXPECT_EQ(Call(c, {"SET", "y", "2"}), "+OK");
  for (int i = 0; i < 2; ++i) {
    const std::string r = Call(c, {"PMRT.SYNC"});
    EXPECT_THAT(r, StartsWith("-ERR PMRT.SYNC failed, writes may not be durable: DATA_LOSS: "));
    EXPECT_THAT(r, HasSubstr("kv.pool: the pool is in its failed mode (msync of "));
  }
  EXPECT_EQ(Call(c, {"GET", "x"}), "\"1\"");
  EXPECT_EQ(Call(c, {"GET", "y"}), "\"2\"");
  // Nothing written now could become durable: writes are refused.
  EXPECT_THAT(Call(c, {"SET", "z", "3"}), StartsWith("-ERR writes refused: "));
  EXPECT_THAT(Call(c, {"SET", "z", "3"}), HasSubstr("kv.pool: the pool is in its failed mode"));
  EXPECT_THAT(Call(c, {"DEL", "x"}), StartsWith("-ERR writes refused: "));
  for (const std::vector<std::string>& write :
       std::vector<std::vector<std::string>>{{"INCR", "x"},
                                             {"APPEND", "x", "a"},
                                             {"SETRANGE", "x", "0", "a"},
                                             {"GETSET", "x", "a"},
                                             {"GETDEL", "x"},
                                             {"SET", "x", "a", "GET"}}) {
    EXPECT_THAT(Call(c, write), StartsWith("-ERR writes refused: ")) << write[0];
  }
  EXPECT_EQ(Call(c, {"GET", "x"}), "\"1\"");
  server_->Stop();
  server_.reset();
  EXPECT_FALSE(kv_->Close().ok());  // the failed mode, reported again; the pool stays crashed
  kv_.reset();
}

TEST_F(ServerTest, ProtocolErrorsCloseOnlyThatConnection) {
  Client setter = Connect();
  ASSERT_EQ(Call(setter, {"SET", "sentinel", "kept"}), "+OK");
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"*2\r\n$3\r\nGET\r\n$999999999999\r\n", "invalid bulk length"},
      {"*2\r\n$3\r\nGET\r\n$-7\r\n", "invalid bulk length"},
      {"*99999999\r\n", "invalid multibulk length"},
      {"*-99999999999999999999\r\n", "invalid multibulk length"},
      {"*1\r\n+PING\r\n", "expected '$'"},
      {"*1\r\n$4\r\nPINGxx", "expected CRLF"},
      {"SET \"unbalanced\r\n", "unbalanced quotes"},
      {std::string(70 << 10, 'g'), "too big inline request"},
  };
  for (const auto& [input, error] : cases) {
    Client c = Connect();
    ASSERT_TRUE(c.Send(input));
    auto r = c.Read();
    ASSERT_TRUE(r) << input.substr(0, 40);
    EXPECT_TRUE(r->IsError());
    EXPECT_THAT(r->str, StartsWith("ERR Protocol error: " + error));
    EXPECT_TRUE(c.WaitClosed());
    // The other connection is unaffected.
    EXPECT_EQ(Call(setter, {"PING"}), "+PONG");
  }
  EXPECT_EQ(server_->stats().protocol_errors, cases.size());
  ExpectHealthy();
}

TEST_F(ServerTest, DisconnectMidCommandRunsNothingOfIt) {
  Client setter = Connect();
  ASSERT_EQ(Call(setter, {"SET", "sentinel", "kept"}), "+OK");
  for (size_t cut : {1, 5, 14, 20, 30, 40}) {
    Client c = Connect();
    const std::string full = testing::Encode({"SET", "half", std::string(1000, 'h')});
    ASSERT_TRUE(c.Send(full.substr(0, cut)));
    c.Close();
  }
  EXPECT_EQ(Call(setter, {"GET", "half"}), "(nil)");
  // A complete command before the cut runs; the partial one after it does not.
  {
    Client c = Connect();
    ASSERT_TRUE(c.Send(testing::Encode({"SET", "whole", "1"}) + "*3\r\n$3\r\nSET\r\n$4\r\nhalf"));
    EXPECT_EQ(c.Read()->ToString(), "+OK");
  }
  EXPECT_EQ(Call(setter, {"GET", "whole"}), "\"1\"");
  EXPECT_EQ(Call(setter, {"GET", "half"}), "(nil)");
  ExpectHealthy();
}

// --timeout: connections idle longer are closed (so idle clients cannot hold every slot of
// --max-clients for ever); one that keeps talking stays.
TEST(ServerLimits, IdleConnectionsAreClosedAfterTheTimeout) {
  pmrt::testing::TempDir dir;
  ServerOptions opt;
  opt.threads = 2;
  opt.idle_timeout_s = 1;
  Served s = Serve(dir, testing::CreatePoolOf(16 << 20), opt);
  ASSERT_NE(s.server, nullptr);
  Client idle(s.server->port()), busy(s.server->port());
  ASSERT_EQ(idle.Call({"PING"})->ToString(), "+PONG");
  auto r = busy.Call({"CONFIG", "GET", "timeout"});
  ASSERT_TRUE(r && r->elements.size() == 2u);
  EXPECT_EQ(r->elements[1].str, "1");
  // The busy client talks every 100 ms; the idle one is closed within a few seconds (the
  // check runs about once a second; the bound is generous for a loaded machine).
  bool closed = false;
  for (int i = 0; i < 300 && !closed; ++i) {
    ASSERT_EQ(busy.Call({"PING"})->ToString(), "+PONG") << "the busy client was closed";
    closed = idle.WaitClosed(100);
  }
  EXPECT_TRUE(closed) << "an idle connection stayed open past the timeout";
  EXPECT_GE(s.server->stats().idle_closed, 1u);
  EXPECT_EQ(busy.Call({"SET", "k", "v"})->ToString(), "+OK");
  s.server->Stop();
  EXPECT_THAT(s.kv->Close(), pmrt::testing::IsOk());
}

// The pool file removed while served: within about a second writes are refused (they would be
// lost with the server), reads go on, PMRT.SYNC reports it, and closing reports it again.
TEST(ServerLimits, ARemovedPoolFileStopsWrites) {
  pmrt::testing::TempDir dir;
  ServerOptions opt;
  opt.threads = 1;
  Served s = Serve(dir, testing::CreatePoolOf(16 << 20), opt);
  ASSERT_NE(s.server, nullptr);
  Client c(s.server->port());
  ASSERT_EQ(c.Call({"SET", "a", "1"})->ToString(), "+OK");
  ASSERT_EQ(std::remove(dir.File("served.pool").c_str()), 0);
  std::string refused;
  for (int i = 0; i < 100 && refused.empty(); ++i) {
    auto r = c.Call({"SET", "b", "2"});
    ASSERT_TRUE(r);
    if (r->IsError()) {
      refused = r->str;
    } else {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }
  EXPECT_THAT(refused, StartsWith("ERR writes refused: "));
  EXPECT_THAT(refused, HasSubstr("removed or replaced while served"));
  EXPECT_EQ(c.Call({"GET", "a"})->ToString(), "\"1\"");
  EXPECT_THAT(c.Call({"PMRT.SYNC"})->str, HasSubstr("removed or replaced while served"));
  s.server->Stop();
  EXPECT_FALSE(s.kv->Close().ok());
}

TEST_F(ServerTest, ThousandsOfIdleConnections) {
  // Client and server ends both live in this process: two descriptors per connection.
  const uint64_t limit = testing::RaiseFileLimit();
  const int connections = static_cast<int>(std::min<uint64_t>(2000, (limit - 256) / 2));
  if (connections < 2000) {
    std::printf("descriptor limit %llu: %d idle connections instead of 2000\n",
                static_cast<unsigned long long>(limit), connections);
  }
  Client worker = Connect();
  ASSERT_EQ(Call(worker, {"SET", "sentinel", "kept"}), "+OK");
  std::vector<Client> idle;
  for (int i = 0; i < connections; ++i) {
    idle.emplace_back(server_->port());
    ASSERT_TRUE(idle.back().connected()) << i;
    if (i % 500 == 0) {
      EXPECT_EQ(Call(worker, {"SET", absl::StrCat("w", i), "x"}), "+OK");
    }
  }
  // Every idle connection is live, and served in turn.
  for (Client& c : idle) ASSERT_TRUE(c.Send(testing::Encode({"PING"})));
  for (Client& c : idle) {
    auto r = c.Read();
    ASSERT_TRUE(r);
    EXPECT_EQ(r->ToString(), "+PONG");
  }
  EXPECT_EQ(Call(worker, {"GET", "w0"}), "\"x\"");
  EXPECT_GE(server_->stats().connected_clients, static_cast<uint64_t>(connections) + 1);
  idle.clear();
  ExpectHealthy();
}

TEST_F(ServerTest, SlowReaderDoesNotStallOthers) {
  Client setter = Connect();
  ASSERT_EQ(Call(setter, {"SET", "sentinel", "kept"}), "+OK");
  ASSERT_EQ(Call(setter, {"SET", "big", std::string(1 << 20, 'b')}), "+OK");
  // 64 MiB of replies requested, none read yet: the server stops reading this client once its
  // output passes the limit, and keeps serving the other one.
  Client slow = Connect();
  std::string batch;
  for (int i = 0; i < 64; ++i) batch += testing::Encode({"GET", "big"});
  std::thread sender([&] { slow.Send(batch); });
  for (int i = 0; i < 100; ++i) ASSERT_EQ(Call(setter, {"PING"}), "+PONG");
  for (int i = 0; i < 64; ++i) {
    auto r = slow.Read();
    ASSERT_TRUE(r);
    ASSERT_EQ(r->str.size(), 1u << 20);
  }
  sender.join();
  ExpectHealthy();
}

TEST_F(ServerTest, LargeValueRoundTrip) {
  Client c = Connect();
  const std::string v(8 << 20, 'L');
  EXPECT_EQ(Call(c, {"SET", "large", v}), "+OK");
  auto r = c.Call({"GET", "large"});
  ASSERT_TRUE(r);
  EXPECT_EQ(r->str, v);
}

TEST(ServerLimits, MaxClientsRefusesTheRest) {
  pmrt::testing::TempDir dir;
  auto kv = server::Store::Open(dir.File("kv.pool"), testing::CreatePoolOf(32 << 20));
  ASSERT_THAT(kv, pmrt::testing::IsOk());
  ServerOptions opt;
  opt.port = 0;
  opt.max_clients = 4;
  opt.threads = 1;
  auto server = Server::Create(**kv, opt);
  ASSERT_THAT(server, pmrt::testing::IsOk());
  ASSERT_THAT((*server)->Start(), pmrt::testing::IsOk());
  std::vector<Client> clients;
  for (int i = 0; i < 4; ++i) {
    clients.emplace_back((*server)->port());
    ASSERT_EQ(clients.back().Call({"PING"})->ToString(), "+PONG");
  }
  Client extra((*server)->port());
  auto r = extra.Read();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->ToString(), "-ERR max number of clients reached");
  EXPECT_TRUE(extra.WaitClosed());
  EXPECT_EQ((*server)->stats().rejected_connections, 1u);
  // A slot frees when a client leaves.
  clients.pop_back();
  bool served = false;
  for (int attempt = 0; attempt < 1000 && !served; ++attempt) {
    Client again((*server)->port());
    auto pong = again.Call({"PING"});
    served = pong && pong->ToString() == "+PONG";
    if (!served) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_TRUE(served);
  (*server)->Stop();
}

TEST(ServerLimits, BadOptions) {
  pmrt::testing::TempDir dir;
  auto kv = server::Store::Open(dir.File("kv.pool"), testing::CreatePoolOf(32 << 20));
  ASSERT_THAT(kv, pmrt::testing::IsOk());
  ServerOptions opt;
  opt.bind = "not-an-address";
  EXPECT_THAT(Server::Create(**kv, opt).status().message(), HasSubstr("not-an-address"));
  opt.bind = "127.0.0.1";
  opt.port = 0;
  auto first = Server::Create(**kv, opt);
  ASSERT_THAT(first, pmrt::testing::IsOk());
  opt.port = (*first)->port();
  auto second = Server::Create(**kv, opt);
  EXPECT_EQ(second.status().code(), absl::StatusCode::kUnavailable);
}

TEST(GlobMatch, Patterns) {
  EXPECT_TRUE(GlobMatch("*", ""));
  EXPECT_TRUE(GlobMatch("a*c", "abbbc"));
  EXPECT_FALSE(GlobMatch("a*c", "abbbd"));
  EXPECT_TRUE(GlobMatch("a?c", "abc"));
  EXPECT_TRUE(GlobMatch("[a-c]x", "bx"));
  EXPECT_TRUE(GlobMatch("[c-a]x", "bx"));
  EXPECT_FALSE(GlobMatch("[^a-c]x", "bx"));
  EXPECT_TRUE(GlobMatch("\\*", "*"));
  EXPECT_FALSE(GlobMatch("\\*", "a"));
  EXPECT_TRUE(GlobMatch("*a*b*", "xxaxxbxx"));
  EXPECT_TRUE(GlobMatch("SAVE", "save", /*nocase=*/true));
  EXPECT_FALSE(GlobMatch("[abc", "d"));
  EXPECT_TRUE(GlobMatch("[abc", "a"));
}

}  // namespace
}  // namespace pmrt::server
