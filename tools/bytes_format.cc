#include "tools/bytes_format.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"

namespace pmrt::tools {
namespace {

int HexDigit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

}  // namespace

std::string EscapeBytes(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  for (const char c : bytes) {
    const auto u = static_cast<unsigned char>(c);
    switch (c) {
      case '\\':
        out += "\\\\";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      default:
        if (u >= 0x20 && u < 0x7f) {
          out.push_back(c);
        } else {
          absl::StrAppendFormat(&out, "\\x%02x", u);
        }
    }
  }
  return out;
}

std::optional<std::string> UnescapeBytes(std::string_view text) {
  std::string out;
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] != '\\') {
      out.push_back(text[i]);
      continue;
    }
    if (++i == text.size()) return std::nullopt;
    switch (text[i]) {
      case '\\':
        out.push_back('\\');
        break;
      case 't':
        out.push_back('\t');
        break;
      case 'n':
        out.push_back('\n');
        break;
      case 'r':
        out.push_back('\r');
        break;
      case 'x': {
        if (text.size() - i < 3) return std::nullopt;  // \x needs two more characters
        const int hi = HexDigit(text[i + 1]), lo = HexDigit(text[i + 2]);
        if (hi < 0 || lo < 0) return std::nullopt;
        out.push_back(static_cast<char>(hi * 16 + lo));
        i += 2;
        break;
      }
      default:
        return std::nullopt;
    }
  }
  return out;
}

std::string HexBytes(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (const char c : bytes) absl::StrAppendFormat(&out, "%02x", static_cast<unsigned char>(c));
  return out;
}

std::string JsonString(std::string_view bytes) {
  std::string out = "\"";
  for (const char c : bytes) {
    const auto u = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\') {
      out.push_back('\\');
      out.push_back(c);
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c == '\r') {
      out += "\\r";
    } else if (u < 0x20 || u >= 0x7f) {
      absl::StrAppendFormat(&out, "\\u%04x", u);
    } else {
      out.push_back(c);
    }
  }
  out.push_back('"');
  return out;
}

std::optional<uint64_t> ParseByteCount(std::string_view text) {
  uint64_t mult = 1;
  if (!text.empty()) {
    switch (text.back()) {
      case 'k':
      case 'K':
        mult = uint64_t{1} << 10;
        break;
      case 'm':
      case 'M':
        mult = uint64_t{1} << 20;
        break;
      case 'g':
      case 'G':
        mult = uint64_t{1} << 30;
        break;
    }
    if (mult != 1) text.remove_suffix(1);
  }
  uint64_t v;
  if (!absl::SimpleAtoi(absl::string_view(text.data(), text.size()), &v) || v > ~uint64_t{0} / mult)
    return std::nullopt;
  return v * mult;
}

}  // namespace pmrt::tools
