// tools/bytes_format.h and tools/json_writer.h.
#include "tools/bytes_format.h"

#include <string>

#include "gtest/gtest.h"
#include "tools/json_writer.h"

namespace pmrt::tools {
namespace {

TEST(BytesFormatTest, EscapeRoundTripsEveryByte) {
  std::string all;
  for (int b = 0; b < 256; ++b) all.push_back(static_cast<char>(b));
  const std::string escaped = EscapeBytes(all);
  for (const char c : escaped) {
    EXPECT_TRUE(c >= 0x20 && c < 0x7f) << "escaped text is printable ASCII";
  }
  EXPECT_EQ(UnescapeBytes(escaped), all);
  EXPECT_EQ(EscapeBytes(std::string("a\tb\\\x01\xff", 6)), "a\\tb\\\\\\x01\\xff");
}

TEST(BytesFormatTest, UnescapeRejectsMalformed) {
  EXPECT_EQ(UnescapeBytes("\\"), std::nullopt);
  EXPECT_EQ(UnescapeBytes("\\x4"), std::nullopt);
  EXPECT_EQ(UnescapeBytes("\\xzz"), std::nullopt);
  EXPECT_EQ(UnescapeBytes("\\q"), std::nullopt);
  EXPECT_EQ(UnescapeBytes("\\x41\\n"), "A\n");
}

TEST(BytesFormatTest, HexAndJson) {
  EXPECT_EQ(HexBytes(std::string("\x00\xab", 2)), "00ab");
  EXPECT_EQ(JsonString(std::string("a\"\\\n\x01\xff", 6)), "\"a\\\"\\\\\\n\\u0001\\u00ff\"");
}

TEST(JsonWriterTest, CommasAndNesting) {
  JsonWriter j;
  j.BeginObject().Key("a").Uint(1).Key("b").BeginArray().Str("x").Int(-2).Bool(true).Null();
  j.EndArray().Key("c").BeginObject().EndObject().Key("d").Double(0.5).EndObject();
  EXPECT_EQ(j.str(), R"({"a":1,"b":["x",-2,true,null],"c":{},"d":0.5})");
}

}  // namespace
}  // namespace pmrt::tools
