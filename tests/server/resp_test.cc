// RESP2 parser and encoder (tools/server/resp.h): every request form, every split of the
// stream, every protocol error, and the encoders' exact bytes.
#include "tools/server/resp.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pmrt::server {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

using Argv = std::vector<std::string>;

// Feeds `input` in one piece and returns every complete command; *error gets the error.
std::vector<Argv> ParseAll(const std::string& input, std::string* error = nullptr,
                           RespLimits limits = {}) {
  RespParser p(limits);
  p.Feed(input);
  std::vector<Argv> cmds;
  Argv argv;
  RespParser::Result r;
  while ((r = p.Next(&argv)) == RespParser::kCommand) cmds.push_back(argv);
  if (error != nullptr) *error = r == RespParser::kError ? p.error() : "";
  return cmds;
}

TEST(RespParser, MultibulkCommands) {
  std::string err;
  auto cmds = ParseAll("*2\r\n$3\r\nGET\r\n$1\r\nk\r\n*3\r\n$3\r\nSET\r\n$0\r\n\r\n$2\r\nab", &err);
  EXPECT_EQ(err, "");
  ASSERT_EQ(cmds.size(), 1u);  // the second command is incomplete
  EXPECT_THAT(cmds[0], ElementsAre("GET", "k"));
  const std::string binary("*2\r\n$3\r\nSET\r\n$3\r\na\0b\r\n", 22);
  cmds = ParseAll(binary, &err);
  ASSERT_EQ(cmds.size(), 1u);
  EXPECT_EQ(cmds[0][1], std::string("a\0b", 3));
}

TEST(RespParser, InlineCommands) {
  std::string err;
  auto cmds =
      ParseAll("PING\r\nSET  k   \"a b\\x41\\n\"\nGET 'it\\'s'\r\n\r\n   \r\nECHO\t\"\"\r\n", &err);
  EXPECT_EQ(err, "");
  ASSERT_EQ(cmds.size(), 4u);
  EXPECT_THAT(cmds[0], ElementsAre("PING"));
  EXPECT_THAT(cmds[1], ElementsAre("SET", "k", "a bA\n"));
  EXPECT_THAT(cmds[2], ElementsAre("GET", "it's"));
  EXPECT_THAT(cmds[3], ElementsAre("ECHO", ""));
}

TEST(RespParser, EmptyArraysAreSkipped) {
  std::string err;
  auto cmds = ParseAll("*0\r\n*-1\r\n*1\r\n$4\r\nPING\r\n", &err);
  EXPECT_EQ(err, "");
  ASSERT_EQ(cmds.size(), 1u);
  EXPECT_THAT(cmds[0], ElementsAre("PING"));
}

TEST(RespParser, EverySplitPointGivesTheSameCommands) {
  const std::string stream =
      "*3\r\n$3\r\nSET\r\n$5\r\nkey:1\r\n$10\r\n0123456789\r\nPING\r\n*1\r\n$4\r\nQUIT\r\n"
      "ECHO \"x y\"\r\n*2\r\n$3\r\nGET\r\n$0\r\n\r\n";
  const std::vector<Argv> want = ParseAll(stream);
  ASSERT_EQ(want.size(), 5u);
  for (size_t a = 0; a <= stream.size(); ++a) {
    for (size_t b = a; b <= stream.size(); b += 3) {
      RespParser p;
      std::vector<Argv> got;
      Argv argv;
      for (auto piece : {stream.substr(0, a), stream.substr(a, b - a), stream.substr(b)}) {
        p.Feed(piece);
        RespParser::Result r;
        while ((r = p.Next(&argv)) == RespParser::kCommand) got.push_back(argv);
        ASSERT_EQ(r, RespParser::kIncomplete) << p.error();
      }
      ASSERT_EQ(got, want) << "split at " << a << " and " << b;
      EXPECT_EQ(p.buffered(), 0u);
    }
  }
}

TEST(RespParser, ByteByByte) {
  std::string stream;
  for (int i = 0; i < 50; ++i)
    stream += "*2\r\n$4\r\nECHO\r\n$" + std::to_string(i) + "\r\n" + std::string(i, 'x') + "\r\n";
  RespParser p;
  Argv argv;
  int n = 0;
  for (char c : stream) {
    p.Feed(&c, 1);
    while (p.Next(&argv) == RespParser::kCommand) {
      ASSERT_EQ(argv.size(), 2u);
      EXPECT_EQ(argv[1], std::string(n, 'x'));
      ++n;
    }
  }
  EXPECT_EQ(n, 50);
}

struct ErrorCase {
  std::string input;
  std::string error;
};

TEST(RespParser, ProtocolErrors) {
  RespLimits limits;
  limits.max_bulk = 100;
  limits.max_args = 10;
  limits.max_inline = 64;
  const std::vector<ErrorCase> cases = {
      {"*x\r\n", "invalid multibulk length"},
      {"*11\r\n", "invalid multibulk length"},
      {"*99999999999999999999\r\n", "invalid multibulk length"},
      {"*+1\r\n", "invalid multibulk length"},
      {"*\r\n", "invalid multibulk length"},
      {"*1\r\n$101\r\n", "invalid bulk length"},
      {"*1\r\n$-1\r\n", "invalid bulk length"},
      {"*1\r\n$-5\r\n", "invalid bulk length"},
      {"*1\r\n$1x\r\n", "invalid bulk length"},
      {"*1\r\n$\r\n", "invalid bulk length"},
      {"*1\r\n:1\r\n", "expected '$', got ':'"},
      {std::string("*1\r\n\x01", 5), "expected '$', got byte 1"},
      {"*1\r\n$3\r\nabcde\r\n", "expected CRLF after a bulk string"},
      {"*1\n", "expected CRLF at the end of a header line"},
      {"*1\r\n$3\n", "expected CRLF at the end of a header line"},
      {"*1" + std::string(100, '1'), "too big header line"},
      {std::string(100, 'a'), "too big inline request"},
      {"SET \"a\r\n", "unbalanced quotes in request"},
      {"SET 'a\r\n", "unbalanced quotes in request"},
      {"SET \"a\"b\r\n", "unbalanced quotes in request"},
  };
  for (const ErrorCase& c : cases) {
    std::string err;
    auto cmds = ParseAll(c.input, &err, limits);
    EXPECT_TRUE(cmds.empty()) << c.input;
    EXPECT_THAT(err, HasSubstr("Protocol error: " + c.error)) << "input: " << c.input;
  }
}

TEST(RespParser, UnauthenticatedConnectionsGetSmallLimits) {
  RespParser p;
  p.set_unauthenticated(true);
  p.Feed("*2\r\n$4\r\nAUTH\r\n$16384\r\n" + std::string(16384, 'p') + "\r\n");
  Argv argv;
  ASSERT_EQ(p.Next(&argv), RespParser::kCommand);  // at the limits: accepted
  EXPECT_EQ(argv[1].size(), 16384u);
  p.Feed("*1\r\n$16385\r\n");
  EXPECT_EQ(p.Next(&argv), RespParser::kError);
  EXPECT_EQ(p.error(), "ERR Protocol error: unauthenticated bulk length");

  RespParser q;
  q.set_unauthenticated(true);
  q.Feed("*11\r\n");
  EXPECT_EQ(q.Next(&argv), RespParser::kError);
  EXPECT_EQ(q.error(), "ERR Protocol error: unauthenticated multibulk length");

  RespParser r;  // once authenticated, the configured limits again
  r.set_unauthenticated(true);
  r.set_unauthenticated(false);
  r.Feed("*11\r\n" + [] {
    std::string args;
    for (int i = 0; i < 11; ++i) args += "$1\r\nx\r\n";
    return args;
  }());
  EXPECT_EQ(r.Next(&argv), RespParser::kCommand);
  EXPECT_EQ(argv.size(), 11u);
}

TEST(RespParser, StaysFailedAndDropsItsBuffer) {
  RespParser p;
  p.Feed("*1\r\n$x\r\n*1\r\n$4\r\nPING\r\n");
  Argv argv;
  EXPECT_EQ(p.Next(&argv), RespParser::kError);
  EXPECT_TRUE(p.failed());
  p.Feed("*1\r\n$4\r\nPING\r\n");
  EXPECT_EQ(p.Next(&argv), RespParser::kError);
  EXPECT_EQ(p.buffered(), 0u);
}

TEST(RespParser, DeclaredLengthsReserveNothing) {
  // A 512 MiB bulk is declared; the parser holds only what arrived.
  RespParser p;
  p.Feed("*2\r\n$3\r\nSET\r\n$536870912\r\nabc");
  Argv argv;
  EXPECT_EQ(p.Next(&argv), RespParser::kIncomplete);
  EXPECT_EQ(p.buffered(), 3u);
}

TEST(RespParser, LargeBulkInPieces) {
  const std::string value(3 << 20, 'v');
  const std::string stream =
      "*2\r\n$4\r\nECHO\r\n$" + std::to_string(value.size()) + "\r\n" + value + "\r\n";
  RespParser p;
  Argv argv;
  for (size_t at = 0; at < stream.size(); at += 4096) {
    ASSERT_EQ(p.Next(&argv), RespParser::kIncomplete);
    p.Feed(stream.substr(at, 4096));
  }
  ASSERT_EQ(p.Next(&argv), RespParser::kCommand);
  EXPECT_EQ(argv[1], value);
}

TEST(SplitInline, Cases) {
  Argv argv;
  EXPECT_TRUE(SplitInline("", &argv));
  EXPECT_TRUE(argv.empty());
  EXPECT_TRUE(SplitInline("a \"\\\"q\\\\\" '\\'' \"\\xzz\"", &argv));
  EXPECT_THAT(argv, ElementsAre("a", "\"q\\", "'", "xzz"));
  EXPECT_TRUE(SplitInline("\"\\x00\\xfF\"", &argv));
  EXPECT_EQ(argv[0], std::string("\0\xff", 2));
  EXPECT_FALSE(SplitInline("\"abc", &argv));
  EXPECT_FALSE(SplitInline("'abc", &argv));
  EXPECT_FALSE(SplitInline("'a'b", &argv));
  EXPECT_TRUE(argv.empty());
}

TEST(RespEncode, ExactBytes) {
  std::string out;
  AppendSimple(out, "OK");
  AppendError(out, "ERR bad\r\nthing");
  AppendInteger(out, -42);
  AppendBulk(out, std::string("a\0b", 3));
  AppendNullBulk(out);
  AppendArrayHeader(out, 2);
  AppendBulk(out, "");
  EXPECT_EQ(
      out,
      std::string("+OK\r\n-ERR bad  thing\r\n:-42\r\n$3\r\na\0b\r\n$-1\r\n*2\r\n$0\r\n\r\n", 52));
}

}  // namespace
}  // namespace pmrt::server
