// The server's connection and keyspace commands in-process over real sockets (docs/server.md):
// HELLO and RESP3 per connection, AUTH with requirepass, CLIENT, TIME, CONFIG SET, the INFO
// sections, several --bind addresses and IPv6; KEYS, TYPE, RANDOMKEY, RENAME, RENAMENX and COPY.
// Each bad input gets Redis's exact error, leaves the connection usable and writes nothing.
#include <sys/socket.h>

#include <chrono>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/server/resp_client.h"
#include "tests/server/server_fixture.h"
#include "tests/util/test_util.h"
#include "tools/server/server.h"
#include "tools/server/store.h"

namespace pmrt::server {
namespace {

using testing::Client;
using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;

constexpr char kNoAuth[] = "-NOAUTH Authentication required.";
constexpr char kWrongPass[] = "-WRONGPASS invalid username-password pair or user is disabled.";

class ConnectionTest : public testing::ServerFixture {
 protected:
  void TearDown() override { StopServer(); }
  void Start(ServerOptions opt = {}) { StartServer(std::move(opt), 64 << 20); }
  void Stop() { StopServer(); }
};

TEST_F(ConnectionTest, HelloChoosesTheProtocolOfItsConnectionOnly) {
  Start();
  Client c = Connect();
  Client other = Connect();
  const std::string id = Call(c, {"CLIENT", "ID"}).substr(1);
  EXPECT_EQ(Call(c, {"HELLO"}),
            "[\"server\", \"redis\", \"version\", \"6.2.0\", \"proto\", :2, "
            "\"id\", :" +
                id +
                ", \"mode\", \"standalone\", \"role\", \"master\", "
                "\"modules\", []]");
  EXPECT_EQ(Call(c, {"HELLO", "3"}),
            "{\"server\": \"redis\", \"version\": \"6.2.0\", \"proto\": :3, \"id\": :" + id +
                ", \"mode\": \"standalone\", \"role\": \"master\", \"modules\": []}");
  // RESP3 where it differs: nulls, maps, verbatim text.
  EXPECT_EQ(Call(c, {"GET", "missing"}), "(null)");
  EXPECT_EQ(Call(c, {"SET", "k", "v", "NX"}), "+OK");
  EXPECT_EQ(Call(c, {"SET", "k", "v", "NX"}), "(null)");
  EXPECT_EQ(Call(c, {"MGET", "k", "missing"}), "[\"v\", (null)]");
  EXPECT_EQ(Call(c, {"GETDEL", "missing"}), "(null)");
  EXPECT_EQ(Call(c, {"CONFIG", "GET", "appendonly"}), "{\"appendonly\": \"no\"}");
  EXPECT_EQ(Call(c, {"CLIENT", "GETNAME"}), "(null)");
  EXPECT_EQ(Call(c, {"COMMAND", "DOCS"}), "{}");
  EXPECT_THAT(Call(c, {"INFO", "keyspace"}), StartsWith("=\"# Keyspace"));
  EXPECT_THAT(Call(c, {"CLIENT", "INFO"}), StartsWith("=\"id=" + id + " "));
  // The other connection still speaks RESP2.
  EXPECT_EQ(Call(other, {"GET", "missing"}), "(nil)");
  EXPECT_EQ(Call(other, {"CONFIG", "GET", "appendonly"}), "[\"appendonly\", \"no\"]");
  EXPECT_THAT(Call(other, {"INFO", "keyspace"}), StartsWith("\"# Keyspace"));
  // Bad versions and options: Redis's errors, the protocol unchanged.
  EXPECT_EQ(Call(c, {"HELLO", "4"}), "-NOPROTO unsupported protocol version");
  EXPECT_EQ(Call(c, {"HELLO", "1"}), "-NOPROTO unsupported protocol version");
  EXPECT_EQ(Call(c, {"HELLO", "x"}), "-ERR Protocol version is not an integer or out of range");
  EXPECT_EQ(Call(c, {"HELLO", "2", "SETNAME"}), "-ERR Syntax error in HELLO option 'SETNAME'");
  EXPECT_EQ(Call(c, {"HELLO", "2", "AUTH", "default"}), "-ERR Syntax error in HELLO option 'AUTH'");
  EXPECT_EQ(Call(c, {"HELLO", "2", "SETNAME", "a b"}),
            "-ERR Client names cannot contain spaces, newlines or special characters.");
  EXPECT_EQ(Call(c, {"GET", "missing"}), "(null)");
  // HELLO 2 SETNAME: back to RESP2, named.
  EXPECT_THAT(Call(c, {"HELLO", "2", "SETNAME", "conn1"}), StartsWith("[\"server\""));
  EXPECT_EQ(Call(c, {"GET", "missing"}), "(nil)");
  EXPECT_EQ(Call(c, {"CLIENT", "GETNAME"}), "\"conn1\"");
}

TEST_F(ConnectionTest, RequirePassRefusesEverythingBeforeAuth) {
  ServerOptions opt;
  opt.requirepass = "s3cret";
  Start(opt);
  Client c = Connect();
  EXPECT_EQ(Call(c, {"PING"}), kNoAuth);
  EXPECT_EQ(Call(c, {"SET", "k", "v"}), kNoAuth);
  EXPECT_EQ(Call(c, {"GET"}), "-ERR wrong number of arguments for 'get' command");
  EXPECT_EQ(Call(c, {"NOSUCHCOMMAND"}), "-ERR unknown command 'NOSUCHCOMMAND'");
  EXPECT_EQ(Call(c, {"CLIENT", "SETNAME", "x"}), kNoAuth);
  EXPECT_THAT(Call(c, {"HELLO", "3"}), StartsWith("-NOAUTH HELLO must be called with the client"));
  EXPECT_EQ(Call(c, {"AUTH", "wrong"}), kWrongPass);
  EXPECT_EQ(Call(c, {"AUTH", "alice", "s3cret"}), kWrongPass);
  EXPECT_EQ(Call(c, {"HELLO", "3", "AUTH", "default", "nope"}), kWrongPass);
  EXPECT_EQ(Call(c, {"AUTH", "a", "b", "c"}), "-ERR syntax error");
  EXPECT_EQ(Call(c, {"AUTH"}), "-ERR wrong number of arguments for 'auth' command");
  EXPECT_EQ(Call(c, {"AUTH", "s3cret"}), "+OK");
  EXPECT_EQ(Call(c, {"DBSIZE"}), ":0");  // the refused SET wrote nothing
  EXPECT_EQ(Call(c, {"AUTH", "wrong"}), kWrongPass);
  EXPECT_EQ(Call(c, {"PING"}), "+PONG");  // a failed AUTH keeps an authenticated connection so

  Client h = Connect();
  EXPECT_THAT(Call(h, {"HELLO", "3", "AUTH", "default", "s3cret", "SETNAME", "h"}),
              StartsWith("{\"server\": \"redis\""));
  EXPECT_EQ(Call(h, {"CLIENT", "GETNAME"}), "\"h\"");
  EXPECT_EQ(Call(h, {"AUTH", "default", "s3cret"}), "+OK");

  // A new password applies to new connections; this one stays authenticated.
  EXPECT_EQ(Call(c, {"CONFIG", "SET", "requirepass", "other"}), "+OK");
  EXPECT_EQ(Call(c, {"CONFIG", "GET", "requirepass"}), "[\"requirepass\", \"other\"]");
  EXPECT_EQ(Call(c, {"PING"}), "+PONG");
  Client d = Connect();
  EXPECT_EQ(Call(d, {"GET", "k"}), kNoAuth);
  EXPECT_EQ(Call(d, {"AUTH", "s3cret"}), kWrongPass);
  EXPECT_EQ(Call(d, {"AUTH", "other"}), "+OK");
  // No password: everyone is in, and AUTH says there is none.
  EXPECT_EQ(Call(c, {"CONFIG", "SET", "requirepass", ""}), "+OK");
  Client e = Connect();
  EXPECT_EQ(Call(e, {"PING"}), "+PONG");
  EXPECT_EQ(Call(e, {"AUTH", "x"}),
            "-ERR AUTH <password> called without any password configured for the default user. "
            "Are you sure your configuration is correct?");
  EXPECT_EQ(Call(e, {"AUTH", "default", "anything"}), "+OK");
  EXPECT_EQ(Call(e, {"AUTH", "bob", "anything"}), kWrongPass);
  // QUIT is allowed before AUTH.
  EXPECT_EQ(Call(c, {"CONFIG", "SET", "requirepass", "p"}), "+OK");
  Client q = Connect();
  EXPECT_EQ(Call(q, {"QUIT"}), "+OK");
  EXPECT_TRUE(q.WaitClosed());
  // Before AUTH a request may not be large (Redis's limits for an unauthenticated client): the
  // error, then the connection closes; after AUTH the configured limits apply.
  Client big = Connect();
  EXPECT_EQ(Call(big, {"SET", "k", std::string(16385, 'v')}),
            "-ERR Protocol error: unauthenticated bulk length");
  EXPECT_TRUE(big.WaitClosed());
  Client many = Connect();
  EXPECT_EQ(Call(many, {"MGET", "1", "2", "3", "4", "5", "6", "7", "8", "9", "10"}),
            "-ERR Protocol error: unauthenticated multibulk length");
  EXPECT_TRUE(many.WaitClosed());
  Client ok = Connect();
  EXPECT_EQ(Call(ok, {"AUTH", "p"}), "+OK");
  EXPECT_EQ(Call(ok, {"SET", "k", std::string(16385, 'v')}), "+OK");
  EXPECT_EQ(Call(ok, {"MGET", "1", "2", "3", "4", "5", "6", "7", "8", "9", "k"}),
            "[(nil), (nil), (nil), (nil), (nil), (nil), (nil), (nil), (nil), \"" +
                std::string(16385, 'v') + "\"]");
}

TEST_F(ConnectionTest, ClientSubcommands) {
  Start();
  Client c = Connect();
  Client other = Connect();
  const std::string id = Call(c, {"CLIENT", "ID"}).substr(1);
  const std::string other_id = Call(other, {"CLIENT", "ID"}).substr(1);
  EXPECT_NE(id, other_id);
  EXPECT_EQ(Call(c, {"CLIENT", "GETNAME"}), "(nil)");
  EXPECT_EQ(Call(c, {"CLIENT", "SETNAME", "worker-1"}), "+OK");
  EXPECT_EQ(Call(c, {"CLIENT", "GETNAME"}), "\"worker-1\"");
  EXPECT_EQ(Call(c, {"CLIENT", "SETNAME", "a b"}),
            "-ERR Client names cannot contain spaces, newlines or special characters.");
  EXPECT_EQ(Call(c, {"CLIENT", "SETNAME"}),
            "-ERR wrong number of arguments for 'client|setname' command");
  EXPECT_EQ(Call(c, {"CLIENT", "ID", "x"}),
            "-ERR wrong number of arguments for 'client|id' command");
  EXPECT_EQ(Call(c, {"CLIENT"}), "-ERR wrong number of arguments for 'client' command");
  EXPECT_EQ(Call(c, {"CLIENT", "NOPE"}), "-ERR unknown subcommand 'NOPE'. Try CLIENT HELP.");
  EXPECT_EQ(Call(c, {"CLIENT", "SETINFO", "LIB-NAME", "redis-py"}), "+OK");
  EXPECT_EQ(Call(c, {"CLIENT", "SETINFO", "lib-ver", "4.3.4"}), "+OK");
  EXPECT_EQ(Call(c, {"CLIENT", "SETINFO", "color", "red"}), "-ERR Unrecognized option 'color'");
  EXPECT_EQ(Call(c, {"CLIENT", "SETINFO", "lib-name", "a b"}),
            "-ERR lib-name cannot contain spaces, newlines or special characters.");

  auto info = c.Call({"CLIENT", "INFO"});
  ASSERT_TRUE(info);
  EXPECT_THAT(info->str, StartsWith("id=" + id + " addr=127.0.0.1:"));
  for (const char* field :
       {" laddr=127.0.0.1:", " name=worker-1 ", " db=0 ", " cmd=client ", " user=default ",
        " resp=2 ", " lib-name=redis-py ", " lib-ver=4.3.4"}) {
    EXPECT_THAT(info->str, HasSubstr(field));
  }
  EXPECT_EQ(info->str.back(), '\n');

  auto list = c.Call({"CLIENT", "LIST"});
  ASSERT_TRUE(list);
  std::vector<std::string> lines = absl::StrSplit(list->str, '\n', absl::SkipEmpty());
  ASSERT_EQ(lines.size(), 2u) << list->str;
  // In id order; the ids follow the order the workers took the connections up, not connect().
  EXPECT_THAT(lines, ::testing::UnorderedElementsAre(StartsWith("id=" + id + " "),
                                                     StartsWith("id=" + other_id + " ")));
  EXPECT_LT(std::stoull(lines[0].substr(3)), std::stoull(lines[1].substr(3)));
  EXPECT_EQ(Call(c, {"CLIENT", "LIST", "ID", other_id}).substr(0, 4 + other_id.size()),
            "\"id=" + other_id);
  EXPECT_EQ(Call(c, {"CLIENT", "LIST", "TYPE", "pubsub"}), "\"\"");
  EXPECT_THAT(Call(c, {"CLIENT", "LIST", "TYPE", "normal"}), HasSubstr("id=" + other_id));
  EXPECT_EQ(Call(c, {"CLIENT", "LIST", "TYPE", "odd"}), "-ERR Unknown client type 'odd'");
  EXPECT_EQ(Call(c, {"CLIENT", "LIST", "ID", "x"}), "-ERR Invalid client ID");
  EXPECT_EQ(Call(c, {"CLIENT", "LIST", "extra"}), "-ERR syntax error");
  other.Close();
  // A closed connection leaves the list (its worker unregisters it when it sees the close).
  bool gone = false;
  for (int i = 0; i < 500 && !gone; ++i) {
    gone = Call(c, {"CLIENT", "LIST"}).find("id=" + other_id + " ") == std::string::npos;
    if (!gone) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_TRUE(gone);

  auto time = c.Call({"TIME"});
  ASSERT_TRUE(time);
  ASSERT_EQ(time->elements.size(), 2u);
  int64_t secs, micros;
  EXPECT_TRUE(absl::SimpleAtoi(time->elements[0].str, &secs));
  EXPECT_TRUE(absl::SimpleAtoi(time->elements[1].str, &micros));
  EXPECT_GT(secs, 1700000000);
  EXPECT_TRUE(micros >= 0 && micros < 1000000);
  EXPECT_EQ(Call(c, {"TIME", "x"}), "-ERR wrong number of arguments for 'time' command");
}

TEST_F(ConnectionTest, ConfigSetChangesOnlyRuntimeSettings) {
  Start();
  Client c = Connect();
  EXPECT_EQ(Call(c, {"CONFIG", "SET", "timeout", "300", "maxclients", "50"}), "+OK");
  EXPECT_EQ(Call(c, {"CONFIG", "GET", "timeout"}), "[\"timeout\", \"300\"]");
  EXPECT_EQ(Call(c, {"CONFIG", "GET", "maxclients"}), "[\"maxclients\", \"50\"]");
  EXPECT_EQ(Call(c, {"CONFIG", "SET", "PMRT-VERIFY-READS", "yes"}), "+OK");
  EXPECT_EQ(Call(c, {"CONFIG", "GET", "pmrt-verify-reads"}), "[\"pmrt-verify-reads\", \"yes\"]");
  EXPECT_EQ(Call(c, {"SET", "k", "v"}), "+OK");
  EXPECT_EQ(Call(c, {"GET", "k"}), "\"v\"");  // read with its checksum checked
  // Bad pairs: nothing of the command applies.
  EXPECT_EQ(Call(c, {"CONFIG", "SET", "timeout", "5", "port", "1"}),
            "-ERR CONFIG SET failed (possibly related to argument 'port') - can't set immutable "
            "config");
  EXPECT_EQ(Call(c, {"CONFIG", "SET", "timeout", "-1"}),
            "-ERR CONFIG SET failed (possibly related to argument 'timeout') - argument couldn't "
            "be parsed into an integer");
  EXPECT_EQ(Call(c, {"CONFIG", "SET", "maxclients", "0"}),
            "-ERR CONFIG SET failed (possibly related to argument 'maxclients') - argument must be "
            "between 1 and 16777216 inclusive");
  EXPECT_EQ(Call(c, {"CONFIG", "SET", "pmrt-verify-reads", "maybe"}),
            "-ERR CONFIG SET failed (possibly related to argument 'pmrt-verify-reads') - argument "
            "must be 'yes' or 'no'");
  EXPECT_EQ(Call(c, {"CONFIG", "SET", "timeout", "1", "timeout", "2"}),
            "-ERR CONFIG SET failed (possibly related to argument 'timeout') - duplicate "
            "parameter");
  EXPECT_EQ(Call(c, {"CONFIG", "SET", "nosuch", "1"}),
            "-ERR Unknown option or number of arguments for CONFIG SET - 'nosuch'");
  EXPECT_EQ(Call(c, {"CONFIG", "SET", "timeout"}),
            "-ERR wrong number of arguments for 'config|set' command");
  EXPECT_EQ(Call(c, {"CONFIG", "SET", "timeout", "1", "maxclients"}),
            "-ERR wrong number of arguments for 'config|set' command");
  EXPECT_THAT(Call(c, {"CONFIG", "REWRITE"}), StartsWith("-ERR CONFIG 'REWRITE' is not supported"));
  EXPECT_EQ(Call(c, {"CONFIG", "GET", "timeout"}), "[\"timeout\", \"300\"]");
  EXPECT_EQ(Call(c, {"CONFIG", "GET", "bind"}), "[\"bind\", \"127.0.0.1\"]");
  EXPECT_EQ(Call(c, {"PING"}), "+PONG");
}

TEST_F(ConnectionTest, ConfigSetTimeoutClosesIdleConnections) {
  Start();
  Client c = Connect();
  Client idle = Connect();
  EXPECT_EQ(Call(c, {"CONFIG", "SET", "timeout", "1"}), "+OK");
  EXPECT_TRUE(idle.WaitClosed(20000));
}

TEST_F(ConnectionTest, InfoSections) {
  Start();
  Client c = Connect();
  auto info = c.Call({"INFO"});
  ASSERT_TRUE(info);
  for (const char* field :
       {"# Server\r\nredis_version:6.2.0\r\n", "redis_mode:standalone",
        "pmrt_version:", "# Clients\r\nconnected_clients:1\r\n",
        "# Memory\r\nused_memory:", "used_memory_human:", "maxmemory_policy:noeviction",
        "# Persistence\r\nloading:0\r\n", "aof_enabled:0", "pmrt_last_open_clean:1",
        "pmrt_last_open_time_us:", "pmrt_last_recovery_rolled_back_epochs:none",
        "# Stats\r\ntotal_connections_received:", "# Replication\r\nrole:master\r\n",
        "# Pool\r\npool_path:", "# Epoch\r\nepoch_current:", "# Heap\r\nheap_bytes:",
        "# Keyspace\r\ndb0:keys=0"}) {
    EXPECT_THAT(info->str, HasSubstr(field));
  }
  info = c.Call({"INFO", "Server", "clients"});
  ASSERT_TRUE(info);
  EXPECT_THAT(info->str, StartsWith("# Server\r\n"));
  EXPECT_THAT(info->str, HasSubstr("\r\n\r\n# Clients\r\n"));
  EXPECT_THAT(info->str, Not(HasSubstr("# Memory")));
  EXPECT_EQ(Call(c, {"INFO", "nosuchsection"}), "\"\"");
}

TEST_F(ConnectionTest, BindsSeveralAddressesAndIpv6) {
  ServerOptions opt;
  opt.bind = "127.0.0.1, ::1";
  auto kv = server::Store::Open(dir_.File("kv.pool"), testing::CreatePoolOf(32 << 20));
  ASSERT_THAT(kv, pmrt::testing::IsOk());
  kv_ = std::move(*kv);
  auto s = Server::Create(*kv_, opt);
  if (!s.ok() && s.status().message().find("::1") != std::string::npos) {
    GTEST_SKIP() << "no IPv6 loopback here: " << s.status();
  }
  ASSERT_THAT(s, pmrt::testing::IsOk());
  server_ = std::move(*s);
  ASSERT_THAT(server_->Start(), pmrt::testing::IsOk());
  Client v4(server_->port());
  Client v6(server_->port(), "::1");
  ASSERT_TRUE(v4.connected());
  ASSERT_TRUE(v6.connected());
  EXPECT_EQ(Call(v6, {"SET", "k", "v"}), "+OK");
  EXPECT_EQ(Call(v4, {"GET", "k"}), "\"v\"");
  EXPECT_EQ(Call(v6, {"CONFIG", "GET", "bind"}), "[\"bind\", \"127.0.0.1 ::1\"]");
  EXPECT_THAT(Call(v6, {"CLIENT", "INFO"}), HasSubstr(" laddr=[::1]:"));

  opt.bind = "127.0.0.1 nowhere";
  EXPECT_THAT(Server::Create(*kv_, opt).status().message(),
              HasSubstr("--bind nowhere is not an IPv4 or IPv6 address"));
  opt.bind = " , ";
  EXPECT_EQ(Server::Create(*kv_, opt).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(ConnectionTest, KeysTypeAndRandomKey) {
  Start();
  Client c = Connect();
  EXPECT_EQ(Call(c, {"KEYS", "*"}), "[]");
  EXPECT_EQ(Call(c, {"RANDOMKEY"}), "(nil)");
  EXPECT_EQ(Call(c, {"MSET", "user:1", "a", "user:2", "b", "user:10", "c", "item:1", "d"}), "+OK");
  EXPECT_EQ(Call(c, {"KEYS", "*"}), "[\"item:1\", \"user:1\", \"user:10\", \"user:2\"]");
  EXPECT_EQ(Call(c, {"KEYS", "user:?"}), "[\"user:1\", \"user:2\"]");
  EXPECT_EQ(Call(c, {"KEYS", "user:1*"}), "[\"user:1\", \"user:10\"]");
  EXPECT_EQ(Call(c, {"KEYS", "*:1"}), "[\"item:1\", \"user:1\"]");
  EXPECT_EQ(Call(c, {"KEYS", "[iu]*:[2-9]"}), "[\"user:2\"]");
  EXPECT_EQ(Call(c, {"KEYS", "nothing*"}), "[]");
  EXPECT_EQ(Call(c, {"KEYS"}), "-ERR wrong number of arguments for 'keys' command");
  EXPECT_EQ(Call(c, {"TYPE", "user:1"}), "+string");
  EXPECT_EQ(Call(c, {"TYPE", "nope"}), "+none");
  EXPECT_EQ(Call(c, {"TYPE", "a", "b"}), "-ERR wrong number of arguments for 'type' command");
  for (int i = 0; i < 20; ++i) {
    EXPECT_THAT(Call(c, {"RANDOMKEY"}),
                ::testing::AnyOf("\"item:1\"", "\"user:1\"", "\"user:10\"", "\"user:2\""));
  }
  EXPECT_EQ(Call(c, {"RANDOMKEY", "x"}), "-ERR wrong number of arguments for 'randomkey' command");
  // Keys that share a long prefix, some of them prefixes of others: every key has a chance of
  // its own in each draw, so the draws spread over many keys; a draw that started outside the
  // shared prefix would return the first key every time.
  std::string shared;
  for (int i = 0; i < 100; ++i)
    shared += testing::Encode({"SET", absl::StrCat("session:2026:", i), "v"});
  ASSERT_TRUE(c.Send(shared));
  for (int i = 0; i < 100; ++i) ASSERT_TRUE(c.Read());
  std::set<std::string> drawn;
  for (int i = 0; i < 200; ++i) {
    auto r = c.Call({"RANDOMKEY"});
    ASSERT_TRUE(r && r->type == '$' && !r->null);
    drawn.insert(r->str);
  }
  EXPECT_GE(drawn.size(), 20u);
  for (int i = 0; i < 100; ++i) ASSERT_TRUE(c.Call({"DEL", absl::StrCat("session:2026:", i)}));
  EXPECT_EQ(Call(c, {"EXISTS", "user:1", "user:2", "nope", "user:1"}), ":3");
  // Past one slice of the walk (256 keys): every match once, in order.
  std::string many;
  for (int i = 0; i < 700; ++i) many += testing::Encode({"SET", absl::StrCat("k", 1000 + i), "v"});
  ASSERT_TRUE(c.Send(many));
  for (int i = 0; i < 700; ++i) ASSERT_TRUE(c.Read());
  auto all = c.Call({"KEYS", "k1*"});
  ASSERT_TRUE(all);
  ASSERT_EQ(all->elements.size(), 700u) << all->ToString().substr(0, 200);
  EXPECT_EQ(all->elements[699].str, "k1699");
  EXPECT_EQ(Call(c, {"KEYS", "k16?9"}),
            "[\"k1609\", \"k1619\", \"k1629\", \"k1639\", \"k1649\", "
            "\"k1659\", \"k1669\", \"k1679\", \"k1689\", \"k1699\"]");
}

TEST_F(ConnectionTest, KeysStopsAtTheReplyLimit) {
  ServerOptions opt;
  opt.limits.max_bulk = 1000;
  opt.max_reply = 4096;
  StartServer(opt, 32 << 20);
  Client c = Connect();
  for (int i = 0; i < 300; ++i) ASSERT_TRUE(c.Call({"SET", absl::StrCat("key:", i), "v"}));
  EXPECT_THAT(c.Call({"KEYS", "*"})->ToString(),
              StartsWith("-ERR reply too large: KEYS passed the 4096-byte reply limit"));
  EXPECT_EQ(c.Call({"KEYS", "key:1?"})->elements.size(), 10u);
}

TEST_F(ConnectionTest, RenameRenameNxAndCopy) {
  Start();
  Client c = Connect();
  EXPECT_EQ(Call(c, {"MSET", "a", "1", "b", "2"}), "+OK");
  // RENAME: the value moves, a target is overwritten; errors write nothing.
  EXPECT_EQ(Call(c, {"RENAME", "missing", "x"}), "-ERR no such key");
  EXPECT_EQ(Call(c, {"RENAME", "missing", "missing"}), "-ERR no such key");
  EXPECT_EQ(Call(c, {"RENAME", "a", "a"}), "+OK");
  EXPECT_EQ(Call(c, {"RENAME", "a", "c"}), "+OK");
  EXPECT_EQ(Call(c, {"MGET", "a", "c"}), "[(nil), \"1\"]");
  EXPECT_EQ(Call(c, {"RENAME", "c", "b"}), "+OK");
  EXPECT_EQ(Call(c, {"MGET", "b", "c"}), "[\"1\", (nil)]");
  EXPECT_EQ(Call(c, {"RENAME", "b"}), "-ERR wrong number of arguments for 'rename' command");
  EXPECT_EQ(Call(c, {"RENAME", "b", "x", "y"}),
            "-ERR wrong number of arguments for 'rename' command");
  EXPECT_THAT(Call(c, {"RENAME", "b", std::string(70000, 'k')}), HasSubstr("key too long"));
  EXPECT_EQ(Call(c, {"DBSIZE"}), ":1");
  // RENAMENX: only to a free name.
  EXPECT_EQ(Call(c, {"SET", "d", "4"}), "+OK");
  EXPECT_EQ(Call(c, {"RENAMENX", "b", "d"}), ":0");
  EXPECT_EQ(Call(c, {"RENAMENX", "b", "b"}), ":0");
  EXPECT_EQ(Call(c, {"RENAMENX", "missing", "z"}), "-ERR no such key");
  EXPECT_EQ(Call(c, {"RENAMENX", "b", "e"}), ":1");
  EXPECT_EQ(Call(c, {"MGET", "b", "d", "e"}), "[(nil), \"4\", \"1\"]");
  // COPY: the source stays; REPLACE to overwrite; DB 0 only.
  EXPECT_EQ(Call(c, {"COPY", "e", "f"}), ":1");
  EXPECT_EQ(Call(c, {"COPY", "e", "d"}), ":0");
  EXPECT_EQ(Call(c, {"COPY", "missing", "g"}), ":0");
  EXPECT_EQ(Call(c, {"COPY", "e", "d", "db", "0", "REPLACE"}), ":1");
  EXPECT_EQ(Call(c, {"MGET", "d", "e", "f"}), "[\"1\", \"1\", \"1\"]");
  EXPECT_EQ(Call(c, {"COPY", "e", "e"}), "-ERR source and destination objects are the same");
  EXPECT_EQ(Call(c, {"COPY", "e", "h", "DB", "1"}), "-ERR DB index is out of range");
  EXPECT_EQ(Call(c, {"COPY", "e", "h", "DB", "x"}), "-ERR value is not an integer or out of range");
  EXPECT_EQ(Call(c, {"COPY", "e", "h", "DB"}), "-ERR syntax error");
  EXPECT_EQ(Call(c, {"COPY", "e", "h", "SIDEWAYS"}), "-ERR syntax error");
  EXPECT_EQ(Call(c, {"COPY", "e"}), "-ERR wrong number of arguments for 'copy' command");
  EXPECT_EQ(Call(c, {"DBSIZE"}), ":3");
  EXPECT_EQ(Call(c, {"PING"}), "+PONG");
  // The moves are in the store: they survive a clean restart.
  EXPECT_EQ(Call(c, {"PMRT.SYNC"}), "+OK");
  c.Close();
  Stop();
  Start();
  Client again = Connect();
  EXPECT_EQ(Call(again, {"KEYS", "*"}), "[\"d\", \"e\", \"f\"]");
}

}  // namespace
}  // namespace pmrt::server
