// Byte strings (keys and values of a pool) as text an operator can read and type back, and as
// JSON. Used by `pmrt dump` and `pmrt check` (docs/tool.md, "Escaping").
//
//   EscapeBytes("a\tb\x01")   == "a\\tb\\x01"     printable ASCII as is; \\ \t \n \r; else \xHH
//   UnescapeBytes("a\\x01")   == "a\x01"          the inverse (for --from KEY)
//   HexBytes("AB")            == "4142"
//   JsonString("a\"\xff")     == "\"a\\\"\\u00ff\""  each byte >= 0x80 is one \u00HH code point
//
// JsonString keeps binary data lossless and the output valid JSON (ASCII only): a reader gets
// the bytes back by taking each code point of the decoded string as one byte.
#ifndef PMRT_TOOLS_BYTES_FORMAT_H_
#define PMRT_TOOLS_BYTES_FORMAT_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace pmrt::tools {

std::string EscapeBytes(std::string_view bytes);
// nullopt for a malformed escape (a lone backslash, \x without two hex digits, \q).
std::optional<std::string> UnescapeBytes(std::string_view text);
std::string HexBytes(std::string_view bytes);
std::string JsonString(std::string_view bytes);

// A byte count as an operator types it: "4096", "64K", "512M", "1G" (binary multiples, either
// case). nullopt for anything else or a count past 2^64.
std::optional<uint64_t> ParseByteCount(std::string_view text);

}  // namespace pmrt::tools

#endif  // PMRT_TOOLS_BYTES_FORMAT_H_
