// Protocol fuzzing (seeded, bounded): random command streams, encoded as multibulk or inline,
// then mutated (flipped, inserted, deleted, duplicated bytes, rewritten lengths, truncation),
// go (1) to the parser in random pieces, which must never crash, overread (ASan) or return a
// command beyond its limits, and must agree with a one-piece parse; and (2) to a live server
// over sockets, which must answer or close each connection and afterwards still answer PING
// on a fresh connection with every key it acknowledged before the fuzzing intact, and pass
// the tree's and heap's checks.
//
// PMRT_SERVER_FUZZ_CASES scales both (default: 100000 parser streams, 1/20 of that live).
#include <cstdlib>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/server/resp_client.h"
#include "tests/util/test_util.h"
#include "tools/server/commands.h"
#include "tools/server/resp.h"
#include "tools/server/server.h"
#include "tools/server/store.h"

namespace pmrt::server {
namespace {

using Rng = std::mt19937_64;

int Cases() {
  const char* e = std::getenv("PMRT_SERVER_FUZZ_CASES");
  int n = e != nullptr ? std::atoi(e) : 0;
  return n > 0 ? n : 100000;
}

size_t Uniform(Rng& rng, size_t n) { return std::uniform_int_distribution<size_t>(0, n - 1)(rng); }

std::string RandomBytes(Rng& rng, size_t n, bool printable) {
  std::string s(n, 'x');
  for (char& c : s)
    c = printable ? static_cast<char>('a' + Uniform(rng, 26))
                  : static_cast<char>(Uniform(rng, 256));
  return s;
}

std::vector<std::string> RandomCommand(Rng& rng) {
  auto key = [&] { return absl::StrCat("f:", Uniform(rng, 40)); };
  auto value = [&] {
    return RandomBytes(rng, Uniform(rng, 8) == 0 ? Uniform(rng, 5000) : Uniform(rng, 40),
                       Uniform(rng, 2) == 0);
  };
  // An expiry argument: a short or long time, zero, negative, huge, or not a number.
  auto when = [&]() -> std::string {
    switch (Uniform(rng, 6)) {
      case 0:
        return absl::StrCat(1 + Uniform(rng, 3));
      case 1:
        return absl::StrCat(1000 + Uniform(rng, 100000));
      case 2:
        return "0";
      case 3:
        return absl::StrCat("-", Uniform(rng, 100));
      case 4:
        return "9223372036854775807";
      default:
        return RandomBytes(rng, 3, true);
    }
  };
  static constexpr const char* kExpiry[] = {"EX", "PX", "EXAT", "PXAT", "KEEPTTL", "PERSIST"};
  static constexpr const char* kFlags[] = {"NX", "XX", "GT", "LT", "bogus"};
  auto field = [&] { return absl::StrCat("f", Uniform(rng, 6)); };
  switch (Uniform(rng, 49)) {
    // Hashes: every command, on hash keys and (the keys are shared) string keys.
    case 43:
      return {Uniform(rng, 2) ? "HSET" : "HMSET", key(), field(), value(), field(), value()};
    case 44:
      return {Uniform(rng, 2) ? "HDEL" : "HMGET", key(), field(), field()};
    case 45: {
      static constexpr const char* kReads[] = {"HGETALL", "HKEYS", "HVALS", "HLEN", "HRANDFIELD"};
      return {kReads[Uniform(rng, 5)], key()};
    }
    case 46:
      return {Uniform(rng, 2) ? "HINCRBY" : "HINCRBYFLOAT", key(), field(), when()};
    case 47:
      return {Uniform(rng, 2) ? "HGET" : (Uniform(rng, 2) ? "HSTRLEN" : "HSETNX"), key(), field(),
              value()};
    case 48:
      return {"HSCAN", key(), Uniform(rng, 4) ? "0" : when(), "COUNT", when()};
    // Expiry: every command and option, good and bad arguments.
    case 37:
      return {"SET", key(), value(), kExpiry[Uniform(rng, 5)], when()};
    case 38:
      return {Uniform(rng, 2) ? "EXPIRE" : "PEXPIRE", key(), when(), kFlags[Uniform(rng, 5)]};
    case 39:
      return {Uniform(rng, 2) ? "EXPIREAT" : "PEXPIREAT", key(), when()};
    case 40: {
      static constexpr const char* kReads[] = {"TTL",         "PTTL",    "EXPIRETIME",
                                               "PEXPIRETIME", "PERSIST", "TOUCH"};
      return {kReads[Uniform(rng, 6)], key()};
    }
    case 41:
      return {Uniform(rng, 2) ? "SETEX" : "PSETEX", key(), when(), value()};
    case 42:
      return {"GETEX", key(), kExpiry[Uniform(rng, 6)], when()};
    case 0:
      return {"SET", key(), value()};
    case 1:
      return {"GET", key()};
    case 2:
      return {"DEL", key(), key()};
    case 3:
      return {"MSET", key(), value(), key(), value()};
    case 4:
      return {"MGET", key(), key(), key()};
    case 5:
      return {"EXISTS", key()};
    case 6:
      return {"PING"};
    case 7:
      return {"ECHO", value()};
    case 8:
      return {"SCAN", "0", "COUNT", absl::StrCat(1 + Uniform(rng, 20)), "MATCH", "f:*"};
    case 9:
      return {"PMRT.RANGE", "f:", "f;", "LIMIT", absl::StrCat(1 + Uniform(rng, 50))};
    case 10:
      return {"DBSIZE"};
    case 11:
      return {"INFO", Uniform(rng, 2) ? "keyspace" : "epoch"};
    case 12:
      return {"CONFIG", "GET", "*"};
    case 13:
      return {"SETNX", key(), value()};
    case 14:
      return {"PMRT.SYNC"};
    case 15:
      return {Uniform(rng, 2) ? "QUIT" : "SELECT", "0"};
    case 16:
      return {"COMMAND", "DOCS"};
    case 17:
      return {"KEYS", Uniform(rng, 2) ? "f:1*" : "f:[0-3]?"};
    case 18:
      return {"TYPE", key()};
    case 19:
      return {"RANDOMKEY"};
    case 20:
      return {Uniform(rng, 2) ? "RENAME" : "RENAMENX", key(), key()};
    case 21:
      return {"COPY", key(), key(), Uniform(rng, 2) ? "REPLACE" : "DB", "0"};
    case 22:
      return {"HELLO", Uniform(rng, 2) ? "2" : "3", "SETNAME", RandomBytes(rng, 5, true)};
    case 23:
      return {"AUTH", value()};  // no password is set: an error
    case 24:
      return {"CLIENT", Uniform(rng, 2) ? "LIST" : "INFO"};
    case 25:
      return {"CLIENT", "SETNAME", value()};
    case 26:
      return {"CLIENT", Uniform(rng, 2) ? "ID" : "GETNAME"};
    case 27:
      return {"TIME"};
    case 28:
      return {"CONFIG", "SET", "pmrt-verify-reads", Uniform(rng, 2) ? "yes" : value()};
    case 29:
      return {"INFO", Uniform(rng, 2) ? "persistence" : "memory", "clients"};
    // Transactions: MULTI and EXEC unpaired, nested, with queued commands of every kind between
    // them (the other cases), WATCH of keys other commands write.
    case 30:
    case 31:
      return {"MULTI"};
    case 32:
    case 33:
      return {Uniform(rng, 4) == 0 ? "DISCARD" : "EXEC"};
    case 34:
      return {"WATCH", key(), key()};
    case 35:
      if (Uniform(rng, 2) == 0) return {"UNWATCH"};
      return {"MSETNX", key(), value(), key(), value()};
    default:
      return {RandomBytes(rng, 1 + Uniform(rng, 10), true), value()};
  }
}

std::string EncodeInline(const std::vector<std::string>& argv) {
  std::string s;
  for (const std::string& a : argv) {
    s += s.empty() ? "\"" : " \"";
    for (char c : a) {
      if (c == '"' || c == '\\') {
        s += '\\';
        s += c;
      } else if (static_cast<unsigned char>(c) < 0x20 || static_cast<unsigned char>(c) >= 0x7f) {
        static const char kHex[] = "0123456789abcdef";
        s += "\\x";
        s += kHex[(c >> 4) & 15];
        s += kHex[c & 15];
      } else {
        s += c;
      }
    }
    s += '"';
  }
  return s + "\r\n";
}

std::string RandomStream(Rng& rng) {
  std::string s;
  const size_t n = 1 + Uniform(rng, 12);
  for (size_t i = 0; i < n; ++i) {
    auto argv = RandomCommand(rng);
    size_t bytes = 0;
    for (const std::string& a : argv) bytes += a.size();
    // Inline only while the escaped line stays under the inline limit (4 bytes per byte).
    s += bytes < 900 && Uniform(rng, 4) == 0 ? EncodeInline(argv) : testing::Encode(argv);
  }
  return s;
}

void Mutate(Rng& rng, std::string& s) {
  const size_t n = 1 + Uniform(rng, 4);
  for (size_t i = 0; i < n && !s.empty(); ++i) {
    const size_t at = Uniform(rng, s.size());
    switch (Uniform(rng, 7)) {
      case 0:
        s[at] = static_cast<char>(s[at] ^ (1 << Uniform(rng, 8)));
        break;
      case 1:
        s.insert(at, 1, static_cast<char>(Uniform(rng, 256)));
        break;
      case 2:
        s.erase(at, 1 + Uniform(rng, 16));
        break;
      case 3:
        s.insert(at, s.substr(at, 1 + Uniform(rng, 64)));
        break;
      case 4: {  // rewrite the next length field
        size_t h = s.find_first_of("*$", at);
        if (h == std::string::npos) break;
        static const char* kLengths[] = {
            "-1", "-2", "0", "99999999999",          "1048577", "1000000",
            "7",  "",   "x", "18446744073709551616", "+3"};
        size_t end = s.find("\r\n", h);
        if (end == std::string::npos) end = s.size();
        s.replace(h + 1, end - h - 1, kLengths[Uniform(rng, std::size(kLengths))]);
        break;
      }
      case 5:
        s.resize(at);
        break;
      default:
        s.insert(at, Uniform(rng, 2) ? "\r\n" : "\n");
        break;
    }
  }
}

TEST(ServerFuzz, Parser) {
  Rng rng(20261130);
  RespLimits limits;
  limits.max_bulk = 1 << 20;
  limits.max_args = 1000;
  limits.max_inline = 4096;
  const int cases = Cases();
  std::vector<std::string> argv;
  for (int c = 0; c < cases; ++c) {
    std::string stream = RandomStream(rng);
    const bool mutated = Uniform(rng, 4) != 0;
    if (mutated) Mutate(rng, stream);
    // The reference: one piece. Exact copies of the stream into separate heap blocks make
    // ASan catch any read past what was fed.
    std::vector<std::vector<std::string>> whole;
    RespParser::Result whole_end;
    {
      RespParser p(limits);
      p.Feed(stream);
      while ((whole_end = p.Next(&argv)) == RespParser::kCommand) whole.push_back(argv);
    }
    RespParser p(limits);
    std::vector<std::vector<std::string>> pieces;
    RespParser::Result r = RespParser::kIncomplete;
    for (size_t at = 0; at < stream.size() && r != RespParser::kError;) {
      const size_t len = 1 + Uniform(rng, std::min<size_t>(stream.size() - at, 64));
      auto piece = std::make_unique<char[]>(len);
      std::copy(stream.data() + at, stream.data() + at + len, piece.get());
      p.Feed(piece.get(), len);
      at += len;
      while ((r = p.Next(&argv)) == RespParser::kCommand) {
        ASSERT_FALSE(argv.empty());
        ASSERT_LE(argv.size(), limits.max_args);
        for (const std::string& a : argv) ASSERT_LE(a.size(), limits.max_bulk);
        pieces.push_back(argv);
      }
    }
    if (r == RespParser::kError) {
      ASSERT_EQ(p.Next(&argv), RespParser::kError);
      ASSERT_TRUE(p.failed());
    }
    // The split never changes what is parsed (the error, if any, comes at the same command).
    ASSERT_EQ(pieces, whole) << "case " << c;
    ASSERT_EQ(r == RespParser::kError, whole_end == RespParser::kError) << "case " << c;
    if (!mutated) {
      ASSERT_EQ(r, RespParser::kIncomplete) << p.error();
    }
  }
}

TEST(ServerFuzz, LiveServer) {
  pmrt::testing::TempDir dir;
  auto kv = server::Store::Open(dir.File("kv.pool"), testing::CreatePoolOf(128 << 20));
  ASSERT_THAT(kv, pmrt::testing::IsOk());
  ServerOptions opt;
  opt.port = 0;
  opt.threads = 2;
  opt.limits.max_bulk = 1 << 20;
  opt.limits.max_args = 1000;
  opt.limits.max_inline = 4096;
  auto server = Server::Create(**kv, opt);
  ASSERT_THAT(server, pmrt::testing::IsOk());
  ASSERT_THAT((*server)->Start(), pmrt::testing::IsOk());
  const int port = (*server)->port();

  // Acknowledged keys the fuzzing never names (its keys are "f:N").
  {
    testing::Client c(port);
    for (int i = 0; i < 100; ++i) {
      auto r = c.Call({"SET", absl::StrCat("fixed:", i), absl::StrCat("value-", i)});
      ASSERT_TRUE(r && r->IsOk());
    }
  }
  Rng rng(7);
  const int cases = std::max(20, Cases() / 20);
  for (int c = 0; c < cases; ++c) {
    std::string stream = RandomStream(rng);
    if (Uniform(rng, 4) != 0) Mutate(rng, stream);
    testing::Client client(port);
    ASSERT_TRUE(client.connected()) << "case " << c;
    const bool abandon = Uniform(rng, 8) == 0;  // disconnect without reading anything
    for (size_t at = 0; at < stream.size();) {
      const size_t len = 1 + Uniform(rng, std::min<size_t>(stream.size() - at, 512));
      if (!client.Send(std::string_view(stream).substr(at, len))) break;  // QUIT, error close
      at += len;
    }
    if (abandon) continue;
    client.ShutdownWrite();
    ASSERT_TRUE(client.WaitClosed()) << "case " << c << ": the server did not close";
  }

  testing::Client fresh(port);
  auto pong = fresh.Call({"PING"});
  ASSERT_TRUE(pong);
  EXPECT_EQ(pong->ToString(), "+PONG");
  for (int i = 0; i < 100; ++i) {
    auto r = fresh.Call({"GET", absl::StrCat("fixed:", i)});
    ASSERT_TRUE(r);
    EXPECT_EQ(r->str, absl::StrCat("value-", i));
  }
  (*server)->Stop();
  // Every deadline belongs to a key (expiry_commands.cc, invariant 1); each hash's header
  // counts its fields, no key is both types, no field is outside a hash (hash_commands.cc,
  // invariant 1).
  (*kv)->expires().tree().scan("", ~size_t{0}, [&](std::string_view k, std::string_view) {
    EXPECT_TRUE((*kv)->tree().get(k).has_value() || (*kv)->hashes().tree().get(k).has_value())
        << "a deadline without its key: " << k;
    return true;
  });
  size_t fields = 0;
  (*kv)->hashes().tree().scan("", ~size_t{0}, [&](std::string_view k, std::string_view count) {
    EXPECT_FALSE((*kv)->tree().get(k).has_value()) << k << " is a string and a hash";
    const std::string prefix = HashFieldPrefix(k);
    size_t n = 0;
    (*kv)->fields().tree().scan(prefix, ~size_t{0}, [&](std::string_view f, std::string_view) {
      if (!f.starts_with(prefix)) return false;
      ++n;
      return true;
    });
    EXPECT_EQ(DecodeInt64(count).value_or(-1), static_cast<int64_t>(n)) << "hash " << k;
    fields += n;
    return true;
  });
  EXPECT_EQ(fields, (*kv)->fields().tree().size());
  for (Index* index : {&(*kv)->expires(), &(*kv)->hashes(), &(*kv)->fields()}) {
    EXPECT_THAT(index->tree().CheckInvariants(), pmrt::testing::IsOk());
  }
  EXPECT_THAT((*kv)->tree().CheckInvariants(), pmrt::testing::IsOk());
  EXPECT_THAT((*kv)->heap().Check(), pmrt::testing::IsOk());
  EXPECT_THAT((*kv)->Close(), pmrt::testing::IsOk());
}

}  // namespace
}  // namespace pmrt::server
