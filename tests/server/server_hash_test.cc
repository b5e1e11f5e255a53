// Hashes in the server (tools/server/hash_commands.cc): Redis's replies and errors of every hash
// command, WRONGTYPE both ways, the keyspace commands on hash keys (TYPE, EXISTS, DEL, KEYS,
// SCAN, RANDOMKEY, DBSIZE, RENAME, COPY, SET over a hash), expiry of a hash, hashes inside
// MULTI/EXEC, RESP3's maps, a hash across a restart, and readers never seeing an HSET of several
// fields half done. The crash simulator's side is server_sim_crash_test.cc.
#include <atomic>
#include <chrono>
#include <set>
#include <string>
#include <thread>
#include <vector>

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
using ::testing::StartsWith;

constexpr char kWrongType[] = "-WRONGTYPE Operation against a key holding the wrong kind of value";
constexpr char kNotInteger[] = "-ERR value is not an integer or out of range";

class HashTest : public testing::ServerFixture {
 protected:
  void SetUp() override { StartServer({}); }
  void TearDown() override { StopServer(); }
};

TEST_F(HashTest, EveryCommandRepliesAsRedis) {
  Client c = Connect();
  EXPECT_EQ(Call(c, {"HSET", "h", "a", "1", "b", "2"}), ":2");
  EXPECT_EQ(Call(c, {"HSET", "h", "a", "10", "c", "3"}), ":1");  // a replaced, c new
  EXPECT_EQ(Call(c, {"HGET", "h", "a"}), "\"10\"");
  EXPECT_EQ(Call(c, {"HGET", "h", "zz"}), "(nil)");
  EXPECT_EQ(Call(c, {"HGET", "missing", "a"}), "(nil)");
  EXPECT_EQ(Call(c, {"HMGET", "h", "a", "zz", "c"}), "[\"10\", (nil), \"3\"]");
  EXPECT_EQ(Call(c, {"HMGET", "missing", "a"}), "[(nil)]");
  EXPECT_EQ(Call(c, {"HLEN", "h"}), ":3");
  EXPECT_EQ(Call(c, {"HLEN", "missing"}), ":0");
  EXPECT_EQ(Call(c, {"HEXISTS", "h", "b"}), ":1");
  EXPECT_EQ(Call(c, {"HEXISTS", "h", "zz"}), ":0");
  EXPECT_EQ(Call(c, {"HSTRLEN", "h", "a"}), ":2");
  EXPECT_EQ(Call(c, {"HSTRLEN", "h", "zz"}), ":0");
  EXPECT_EQ(Call(c, {"HGETALL", "h"}), "[\"a\", \"10\", \"b\", \"2\", \"c\", \"3\"]");
  EXPECT_EQ(Call(c, {"HKEYS", "h"}), "[\"a\", \"b\", \"c\"]");
  EXPECT_EQ(Call(c, {"HVALS", "h"}), "[\"10\", \"2\", \"3\"]");
  EXPECT_EQ(Call(c, {"HGETALL", "missing"}), "[]");
  EXPECT_EQ(Call(c, {"HSETNX", "h", "a", "x"}), ":0");
  EXPECT_EQ(Call(c, {"HSETNX", "h", "d", "4"}), ":1");
  EXPECT_EQ(Call(c, {"HMSET", "h", "e", "5"}), "+OK");
  EXPECT_EQ(Call(c, {"HINCRBY", "h", "a", "5"}), ":15");
  EXPECT_EQ(Call(c, {"HINCRBY", "h", "n", "-3"}), ":-3");
  EXPECT_EQ(Call(c, {"HINCRBYFLOAT", "h", "f", "10.5"}), "\"10.5\"");
  EXPECT_EQ(Call(c, {"HINCRBYFLOAT", "h", "f", "0.1"}), "\"10.6\"");
  EXPECT_EQ(Call(c, {"HDEL", "h", "a", "zz", "b"}), ":2");
  EXPECT_EQ(Call(c, {"HLEN", "h"}), ":5");
  // Binary fields and values, a field with a zero byte, an empty field.
  const std::string odd("x\0y", 3);
  EXPECT_EQ(Call(c, {"HSET", "bin", odd, "v", "", "empty"}), ":2");
  EXPECT_EQ(Call(c, {"HGET", "bin", odd}), "\"v\"");
  EXPECT_EQ(Call(c, {"HGET", "bin", ""}), "\"empty\"");
  EXPECT_EQ(Call(c, {"HGET", "bin", "x"}), "(nil)");
  // A key that is a prefix of another hash's key does not see its fields.
  EXPECT_EQ(Call(c, {"HSET", std::string("bin\0", 4), "k", "v"}), ":1");
  EXPECT_EQ(Call(c, {"HLEN", "bin"}), ":2");
  EXPECT_EQ(Call(c, {"HKEYS", "bin"}), "[\"\", \"" + odd + "\"]");
  // The last field removed: the hash is gone.
  EXPECT_EQ(Call(c, {"HSET", "one", "f", "v"}), ":1");
  EXPECT_EQ(Call(c, {"HDEL", "one", "f"}), ":1");
  EXPECT_EQ(Call(c, {"EXISTS", "one"}), ":0");
  EXPECT_EQ(Call(c, {"TYPE", "one"}), "+none");
  // Errors.
  EXPECT_EQ(Call(c, {"HSET", "h", "a"}), "-ERR wrong number of arguments for 'hset' command");
  EXPECT_EQ(Call(c, {"HSET", "h", "a", "1", "b"}),
            "-ERR wrong number of arguments for 'hset' command");
  EXPECT_EQ(Call(c, {"HMSET", "h", "a", "1", "b"}),
            "-ERR wrong number of arguments for 'hmset' command");
  EXPECT_EQ(Call(c, {"HINCRBY", "h", "a", "x"}), kNotInteger);
  EXPECT_EQ(Call(c, {"HSET", "h", "w", "word"}), ":1");
  EXPECT_EQ(Call(c, {"HINCRBY", "h", "w", "1"}), "-ERR hash value is not an integer");
  EXPECT_EQ(Call(c, {"HINCRBYFLOAT", "h", "w", "1"}), "-ERR hash value is not a float");
  EXPECT_EQ(Call(c, {"HINCRBYFLOAT", "h", "a", "x"}), "-ERR value is not a valid float");
  EXPECT_EQ(Call(c, {"HSET", "h", "big", "9223372036854775807"}), ":1");
  EXPECT_EQ(Call(c, {"HINCRBY", "h", "big", "1"}), "-ERR increment or decrement would overflow");
  EXPECT_EQ(Call(c, {"HINCRBYFLOAT", "h", "f", "inf"}),
            "-ERR increment would produce NaN or Infinity");
  EXPECT_THAT(Call(c, {"HGET", "h"}), HasSubstr("wrong number of arguments for 'hget'"));
  EXPECT_EQ(Call(c, {"HGET", "h", "f"}), "\"10.6\"");  // nothing changed by the errors
}

TEST_F(HashTest, WrongTypeBothWays) {
  Client c = Connect();
  EXPECT_EQ(Call(c, {"SET", "s", "v"}), "+OK");
  EXPECT_EQ(Call(c, {"HSET", "h", "f", "1"}), ":1");
  for (const std::vector<std::string>& argv :
       std::vector<std::vector<std::string>>{{"HSET", "s", "f", "v"},
                                             {"HSETNX", "s", "f", "v"},
                                             {"HGET", "s", "f"},
                                             {"HMGET", "s", "f"},
                                             {"HDEL", "s", "f"},
                                             {"HLEN", "s"},
                                             {"HEXISTS", "s", "f"},
                                             {"HSTRLEN", "s", "f"},
                                             {"HGETALL", "s"},
                                             {"HKEYS", "s"},
                                             {"HINCRBY", "s", "f", "1"},
                                             {"HINCRBYFLOAT", "s", "f", "1"},
                                             {"HSCAN", "s", "0"},
                                             {"HRANDFIELD", "s"},
                                             {"GET", "h"},
                                             {"GETSET", "h", "v"},
                                             {"GETDEL", "h"},
                                             {"GETEX", "h"},
                                             {"INCR", "h"},
                                             {"INCRBYFLOAT", "h", "1"},
                                             {"APPEND", "h", "x"},
                                             {"STRLEN", "h"},
                                             {"GETRANGE", "h", "0", "1"},
                                             {"SETRANGE", "h", "0", "x"},
                                             {"SET", "h", "v", "GET"}}) {
    EXPECT_EQ(Call(c, argv), kWrongType) << argv[0];
  }
  EXPECT_EQ(Call(c, {"GET", "s"}), "\"v\"");
  EXPECT_EQ(Call(c, {"HGETALL", "h"}), "[\"f\", \"1\"]");
  EXPECT_EQ(Call(c, {"MGET", "s", "h"}), "[\"v\", (nil)]");  // MGET: nil, as Redis
  // What works on any type.
  EXPECT_EQ(Call(c, {"TYPE", "h"}), "+hash");
  EXPECT_EQ(Call(c, {"EXISTS", "h", "s"}), ":2");
  EXPECT_EQ(Call(c, {"SETNX", "h", "v"}), ":0");
  EXPECT_EQ(Call(c, {"MSETNX", "h", "v", "new", "v"}), ":0");
  EXPECT_EQ(Call(c, {"DBSIZE"}), ":2");
  EXPECT_EQ(Call(c, {"KEYS", "*"}), "[\"h\", \"s\"]");
  EXPECT_EQ(Call(c, {"SCAN", "0", "TYPE", "hash"}), "[\"0\", [\"h\"]]");
  EXPECT_EQ(Call(c, {"SCAN", "0", "TYPE", "string"}), "[\"0\", [\"s\"]]");
  EXPECT_EQ(Call(c, {"SCAN", "0", "TYPE", "list"}), "[\"0\", []]");
  // SET with NX or XX finds a hash there (WRONGTYPE is only for GET), as in Redis.
  EXPECT_EQ(Call(c, {"SET", "h", "v", "NX"}), "(nil)");
  EXPECT_EQ(Call(c, {"TYPE", "h"}), "+hash");
  // SET replaces a hash (and its fields are gone with it).
  EXPECT_EQ(Call(c, {"SET", "h", "now a string"}), "+OK");
  EXPECT_EQ(Call(c, {"TYPE", "h"}), "+string");
  EXPECT_EQ(Call(c, {"HSET", "h2", "f", "1"}), ":1");
  EXPECT_EQ(Call(c, {"MSET", "h2", "x"}), "+OK");
  EXPECT_EQ(Call(c, {"GET", "h2"}), "\"x\"");
  EXPECT_EQ(Call(c, {"HSET", "h3", "f", "1"}), ":1");
  EXPECT_EQ(Call(c, {"DEL", "h3", "s"}), ":2");
  EXPECT_EQ(Call(c, {"HSET", "h3", "g", "2"}), ":1");
  EXPECT_EQ(Call(c, {"HGETALL", "h3"}), "[\"g\", \"2\"]");  // no field of the old hash
  auto info = c.Call({"INFO", "keyspace"});
  ASSERT_TRUE(info);
  EXPECT_THAT(info->str, HasSubstr("db0:keys=3,"));
}

TEST_F(HashTest, RenameCopyExpiryAndExecMoveWholeHashes) {
  Client c = Connect();
  EXPECT_EQ(Call(c, {"HSET", "src", "a", "1", "b", "2"}), ":2");
  EXPECT_EQ(Call(c, {"EXPIRE", "src", "1000"}), ":1");
  EXPECT_EQ(Call(c, {"SET", "dst", "string"}), "+OK");
  EXPECT_EQ(Call(c, {"RENAME", "src", "dst"}), "+OK");
  EXPECT_EQ(Call(c, {"TYPE", "dst"}), "+hash");
  EXPECT_EQ(Call(c, {"HGETALL", "dst"}), "[\"a\", \"1\", \"b\", \"2\"]");
  EXPECT_EQ(Call(c, {"TTL", "dst"}), ":1000");
  EXPECT_EQ(Call(c, {"EXISTS", "src"}), ":0");
  EXPECT_EQ(Call(c, {"HSET", "other", "z", "9"}), ":1");
  EXPECT_EQ(Call(c, {"COPY", "dst", "other"}), ":0");
  EXPECT_EQ(Call(c, {"COPY", "dst", "other", "REPLACE"}), ":1");
  EXPECT_EQ(Call(c, {"HGETALL", "other"}), "[\"a\", \"1\", \"b\", \"2\"]");  // z is gone
  EXPECT_EQ(Call(c, {"TTL", "other"}), ":1000");
  EXPECT_EQ(Call(c, {"PERSIST", "other"}), ":1");
  EXPECT_EQ(Call(c, {"TTL", "other"}), ":-1");
  // Expiry: a hash past its deadline is absent, and a new HSET starts an empty hash.
  EXPECT_EQ(Call(c, {"PEXPIRE", "dst", "1"}), ":1");
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(Call(c, {"HGET", "dst", "a"}), "(nil)");
  EXPECT_EQ(Call(c, {"HLEN", "dst"}), ":0");
  EXPECT_EQ(Call(c, {"TYPE", "dst"}), "+none");
  EXPECT_EQ(Call(c, {"HSET", "dst", "c", "3"}), ":1");
  EXPECT_EQ(Call(c, {"HGETALL", "dst"}), "[\"c\", \"3\"]");
  EXPECT_EQ(Call(c, {"TTL", "dst"}), ":-1");
  EXPECT_EQ(Call(c, {"EXPIRE", "dst", "-1"}), ":1");  // a past time removes the whole hash
  EXPECT_EQ(Call(c, {"EXISTS", "dst"}), ":0");
  // Inside MULTI/EXEC: one transaction with the rest.
  EXPECT_EQ(Call(c, {"MULTI"}), "+OK");
  EXPECT_EQ(Call(c, {"HSET", "t", "a", "1"}), "+QUEUED");
  EXPECT_EQ(Call(c, {"HINCRBY", "t", "a", "2"}), "+QUEUED");
  EXPECT_EQ(Call(c, {"SET", "t2", "x"}), "+QUEUED");
  EXPECT_EQ(Call(c, {"HGET", "t2", "a"}), "+QUEUED");
  EXPECT_EQ(Call(c, {"HGETALL", "t"}), "+QUEUED");
  EXPECT_EQ(Call(c, {"EXEC"}), "[:1, :3, +OK, " + std::string(kWrongType) + ", [\"a\", \"3\"]]");
  // RESP3: HGETALL is a map, HRANDFIELD ... WITHVALUES pairs.
  EXPECT_THAT(Call(c, {"HELLO", "3"}), StartsWith("{"));
  EXPECT_EQ(Call(c, {"HGETALL", "t"}), "{\"a\": \"3\"}");
  EXPECT_EQ(Call(c, {"HRANDFIELD", "t", "1", "WITHVALUES"}), "[[\"a\", \"3\"]]");
  EXPECT_EQ(Call(c, {"HRANDFIELD", "missing"}), "(null)");
}

TEST_F(HashTest, ScanAndRandomFieldWalkEveryField) {
  Client c = Connect();
  std::vector<std::string> hset = {"HSET", "big"};
  for (int i = 0; i < 300; ++i) {
    hset.push_back(absl::StrCat("f", 1000 + i));
    hset.push_back(absl::StrCat(i));
  }
  EXPECT_EQ(Call(c, hset), ":300");
  EXPECT_EQ(Call(c, {"HLEN", "big"}), ":300");
  std::set<std::string> seen;
  std::string cursor = "0";
  int calls = 0;
  do {
    auto r = c.Call({"HSCAN", "big", cursor, "COUNT", "37"});
    ASSERT_TRUE(r && r->elements.size() == 2);
    cursor = r->elements[0].str;
    const auto& items = r->elements[1].elements;
    ASSERT_EQ(items.size() % 2, 0u);
    for (size_t i = 0; i < items.size(); i += 2) EXPECT_TRUE(seen.insert(items[i].str).second);
    ++calls;
  } while (cursor != "0" && calls < 100);
  EXPECT_EQ(seen.size(), 300u);
  EXPECT_EQ(calls, 9);  // 300 fields, 37 a call
  EXPECT_EQ(Call(c, {"HSCAN", "big", "0", "MATCH", "f100?", "COUNT", "1000"}),
            "[\"0\", [\"f1000\", \"0\", \"f1001\", \"1\", \"f1002\", \"2\", \"f1003\", \"3\", "
            "\"f1004\", \"4\", \"f1005\", \"5\", \"f1006\", \"6\", \"f1007\", \"7\", \"f1008\", "
            "\"8\", \"f1009\", \"9\"]]");
  EXPECT_EQ(Call(c, {"HSCAN", "big", "0", "MATCH", "f1000", "COUNT", "1000", "NOVALUES"}),
            "[\"0\", [\"f1000\"]]");
  EXPECT_EQ(Call(c, {"HSCAN", "big", "0", "COUNT", "0"}),
            "-ERR COUNT must be between 1 and 1000000");
  EXPECT_EQ(Call(c, {"HSCAN", "big", "x"}), "-ERR invalid cursor");
  auto distinct = c.Call({"HRANDFIELD", "big", "50"});
  ASSERT_TRUE(distinct);
  std::set<std::string> picked;
  for (const auto& e : distinct->elements) picked.insert(e.str);
  EXPECT_EQ(picked.size(), 50u);
  auto repeats = c.Call({"HRANDFIELD", "big", "-500", "WITHVALUES"});
  ASSERT_TRUE(repeats);
  EXPECT_EQ(repeats->elements.size(), 1000u);
  EXPECT_EQ(Call(c, {"HRANDFIELD", "big", "0"}), "[]");
  EXPECT_EQ(Call(c, {"HRANDFIELD", "big", "1", "bogus"}), "-ERR syntax error");
  EXPECT_EQ(Call(c, {"HRANDFIELD", "big", "x"}), kNotInteger);
  EXPECT_EQ(Call(c, {"DEL", "big"}), ":1");
  EXPECT_EQ(Call(c, {"HLEN", "big"}), ":0");
  EXPECT_EQ(Call(c, {"HSCAN", "big", "0"}), "[\"0\", []]");
}

TEST_F(HashTest, AHashSurvivesARestart) {
  {
    Client c = Connect();
    EXPECT_EQ(Call(c, {"HSET", "h", "a", "1", "b", "2"}), ":2");
    EXPECT_EQ(Call(c, {"HSET", "gone", "a", "1"}), ":1");
    EXPECT_EQ(Call(c, {"DEL", "gone"}), ":1");
  }
  StopServer();  // checks both trees and the heap
  StartServer({});
  Client c = Connect();
  EXPECT_EQ(Call(c, {"HGETALL", "h"}), "[\"a\", \"1\", \"b\", \"2\"]");
  EXPECT_EQ(Call(c, {"EXISTS", "gone"}), ":0");
  EXPECT_EQ(Call(c, {"DBSIZE"}), ":1");
}

// Readers of a hash never see an HSET of two fields half done (each hash write is one
// transaction announced to the readers).
TEST_F(HashTest, ReadersNeverSeeAnHSetHalfDone) {
  std::atomic<bool> stop{false};
  std::atomic<int> torn{0};
  std::thread reader([&] {
    Client r = Connect();
    while (!stop.load()) {
      auto got = r.Call({"HMGET", "pair", "x", "y"});
      if (!got || got->elements.size() != 2) continue;
      if (got->elements[0].str != got->elements[1].str) torn.fetch_add(1);
    }
  });
  Client w = Connect();
  for (int i = 0; i < 2000; ++i) {
    const std::string v = absl::StrCat(i);
    ASSERT_EQ(Call(w, {"HSET", "pair", "x", v, "y", v}), i == 0 ? ":2" : ":0");
  }
  stop.store(true);
  reader.join();
  EXPECT_EQ(torn.load(), 0);
}

}  // namespace
}  // namespace pmrt::server
