#include "tools/server/resp.h"

#include <charconv>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"

namespace pmrt::server {
namespace {

// A strict decimal integer: an optional '-', then 1 to 18 digits (no '+', no blanks). Lengths
// above 10^18 are far past every limit, so refusing them loses nothing and rules out overflow.
bool ParseLength(std::string_view s, int64_t* out) {
  bool neg = !s.empty() && s[0] == '-';
  if (neg) s.remove_prefix(1);
  if (s.empty() || s.size() > 18) return false;
  int64_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
    v = v * 10 + (c - '0');
  }
  *out = neg ? -v : v;
  return true;
}

bool IsHex(char c) {
  return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return c - 'A' + 10;
}

bool IsBlank(char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t' || c == '\0'; }

char Unescape(char c) {
  switch (c) {
    case 'n':
      return '\n';
    case 'r':
      return '\r';
    case 't':
      return '\t';
    case 'b':
      return '\b';
    case 'a':
      return '\a';
    default:
      return c;
  }
}

// One argument starting at s[*p] (not a blank); advances *p past it. False on unbalanced quotes
// or a closing quote followed by something other than a blank.
bool SplitOne(std::string_view s, size_t* p, std::string* arg) {
  enum { kPlain, kDouble, kSingle } mode = kPlain;
  size_t i = *p;
  while (true) {
    if (i == s.size()) {
      if (mode != kPlain) return false;
      break;
    }
    char c = s[i];
    if (mode == kDouble) {
      if (c == '\\' && i + 3 < s.size() && s[i + 1] == 'x' && IsHex(s[i + 2]) && IsHex(s[i + 3])) {
        arg->push_back(static_cast<char>(HexValue(s[i + 2]) * 16 + HexValue(s[i + 3])));
        i += 4;
      } else if (c == '\\' && i + 1 < s.size()) {
        arg->push_back(Unescape(s[i + 1]));
        i += 2;
      } else if (c == '"') {
        if (i + 1 < s.size() && !IsBlank(s[i + 1])) return false;
        ++i;
        break;
      } else {
        arg->push_back(c);
        ++i;
      }
    } else if (mode == kSingle) {
      if (c == '\\' && i + 1 < s.size() && s[i + 1] == '\'') {
        arg->push_back('\'');
        i += 2;
      } else if (c == '\'') {
        if (i + 1 < s.size() && !IsBlank(s[i + 1])) return false;
        ++i;
        break;
      } else {
        arg->push_back(c);
        ++i;
      }
    } else if (IsBlank(c)) {
      break;
    } else if (c == '"') {
      mode = kDouble;
      ++i;
    } else if (c == '\'') {
      mode = kSingle;
      ++i;
    } else {
      arg->push_back(c);
      ++i;
    }
  }
  *p = i;
  return true;
}

}  // namespace

bool SplitInline(std::string_view line, std::vector<std::string>* argv) {
  argv->clear();
  size_t p = 0;
  while (true) {
    while (p < line.size() && IsBlank(line[p])) ++p;
    if (p == line.size()) return true;
    std::string arg;
    if (!SplitOne(line, &p, &arg)) {
      argv->clear();
      return false;
    }
    argv->push_back(std::move(arg));
  }
}

void RespParser::Feed(const char* data, size_t n) {
  if (failed() || n == 0) return;
  Compact();
  buf_.append(data, n);
}

RespParser::Result RespParser::Fail(std::string_view what) {
  error_ = "ERR Protocol error: ";
  error_.append(what);
  // Drop the input: nothing after a framing error can be trusted, and a failed parser must not
  // keep holding a large buffer while its connection drains its last reply.
  std::string().swap(buf_);
  pos_ = 0;
  args_.clear();
  return kError;
}

void RespParser::Compact() {
  // Erasing the consumed prefix costs a move of the unconsumed part; doing it only when the
  // prefix is at least half the buffer keeps the cost amortized O(1) per byte.
  if (pos_ == 0) return;
  if (pos_ == buf_.size()) {
    buf_.clear();
    pos_ = 0;
  } else if (pos_ >= 4096 && pos_ * 2 >= buf_.size()) {
    buf_.erase(0, pos_);
    pos_ = 0;
  }
}

bool RespParser::Line(std::string_view* line, size_t* next) {
  const size_t avail = buf_.size() - pos_;
  const size_t window = std::min(avail, limits_.max_inline + 2);
  const void* nl = std::memchr(buf_.data() + pos_, '\n', window);
  if (nl == nullptr) {
    if (avail > limits_.max_inline + 1) Fail("too big header line");
    return false;
  }
  size_t at = static_cast<const char*>(nl) - buf_.data();
  if (at == pos_ || buf_[at - 1] != '\r') {
    Fail("expected CRLF at the end of a header line");
    return false;
  }
  *line = std::string_view(buf_.data() + pos_, at - 1 - pos_);
  *next = at + 1;
  return true;
}

RespParser::Result RespParser::ParseInline(std::vector<std::string>* argv) {
  const size_t avail = buf_.size() - pos_;
  const size_t window = std::min(avail, limits_.max_inline + 1);
  const void* nl = std::memchr(buf_.data() + pos_, '\n', window);
  if (nl == nullptr) {
    if (avail > limits_.max_inline) return Fail("too big inline request");
    return kIncomplete;
  }
  size_t at = static_cast<const char*>(nl) - buf_.data();
  size_t end = (at > pos_ && buf_[at - 1] == '\r') ? at - 1 : at;
  std::string_view line(buf_.data() + pos_, end - pos_);
  if (!SplitInline(line, argv)) return Fail("unbalanced quotes in request");
  pos_ = at + 1;
  return argv->empty() ? kIncomplete : kCommand;  // kIncomplete here means "skip, go on"
}

RespParser::Result RespParser::Next(std::vector<std::string>* argv) {
  if (failed()) return kError;
  while (true) {
    switch (state_) {
      case State::kIdle: {
        if (pos_ == buf_.size()) {
          Compact();
          return kIncomplete;
        }
        if (buf_[pos_] != '*') {
          const size_t before = pos_;
          Result r = ParseInline(argv);
          if (r == kIncomplete && pos_ != before) continue;  // an empty line, skipped
          return r;
        }
        std::string_view line;
        size_t next;
        if (!Line(&line, &next)) return failed() ? kError : kIncomplete;
        int64_t n;
        if (!ParseLength(line.substr(1), &n) || n > static_cast<int64_t>(limits_.max_args))
          return Fail("invalid multibulk length");
        if (unauthenticated_ && n > static_cast<int64_t>(kUnauthenticatedArgs))
          return Fail("unauthenticated multibulk length");
        pos_ = next;
        if (n <= 0) continue;  // "*0" and "*-1": nothing to run
        args_expected_ = static_cast<uint64_t>(n);
        args_.clear();
        state_ = State::kArgHeader;
        break;
      }
      case State::kArgHeader: {
        if (pos_ == buf_.size()) return kIncomplete;
        if (buf_[pos_] != '$') {
          const char c = buf_[pos_];
          return Fail(c >= 0x20 && c < 0x7f
                          ? absl::StrCat("expected '$', got '", std::string(1, c), "'")
                          : absl::StrCat("expected '$', got byte ", static_cast<unsigned char>(c)));
        }
        std::string_view line;
        size_t next;
        if (!Line(&line, &next)) return failed() ? kError : kIncomplete;
        int64_t n;
        if (!ParseLength(line.substr(1), &n) || n < 0 ||
            static_cast<uint64_t>(n) > limits_.max_bulk)
          return Fail("invalid bulk length");
        if (unauthenticated_ && static_cast<uint64_t>(n) > kUnauthenticatedBulk)
          return Fail("unauthenticated bulk length");
        pos_ = next;
        bulk_len_ = static_cast<uint64_t>(n);
        state_ = State::kArgPayload;
        break;
      }
      case State::kArgPayload: {
        if (buf_.size() - pos_ < bulk_len_ + 2) {
          Compact();
          return kIncomplete;
        }
        const size_t end = pos_ + bulk_len_;
        if (buf_[end] != '\r' || buf_[end + 1] != '\n')
          return Fail("expected CRLF after a bulk string");
        args_.emplace_back(buf_.data() + pos_, bulk_len_);
        pos_ = end + 2;
        if (args_.size() == args_expected_) {
          argv->swap(args_);
          args_.clear();
          state_ = State::kIdle;
          return kCommand;
        }
        state_ = State::kArgHeader;
        break;
      }
    }
  }
}

void AppendSimple(std::string& out, std::string_view s) {
  out.push_back('+');
  out.append(s);
  out.append("\r\n");
}

void AppendError(std::string& out, std::string_view msg) {
  out.push_back('-');
  for (char c : msg) out.push_back(c == '\r' || c == '\n' ? ' ' : c);
  out.append("\r\n");
}

void AppendInteger(std::string& out, int64_t v) {
  char buf[24];
  auto r = std::to_chars(buf, buf + sizeof(buf), v);
  out.push_back(':');
  out.append(buf, r.ptr);
  out.append("\r\n");
}

void AppendBulk(std::string& out, std::string_view s) {
  char buf[24];
  auto r = std::to_chars(buf, buf + sizeof(buf), s.size());
  out.push_back('$');
  out.append(buf, r.ptr);
  out.append("\r\n");
  out.append(s);
  out.append("\r\n");
}

void AppendNullBulk(std::string& out) { out.append("$-1\r\n"); }

void AppendArrayHeader(std::string& out, size_t n) {
  char buf[24];
  auto r = std::to_chars(buf, buf + sizeof(buf), n);
  out.push_back('*');
  out.append(buf, r.ptr);
  out.append("\r\n");
}

namespace {

void AppendHeader(std::string& out, char type, size_t n) {
  char buf[24];
  auto r = std::to_chars(buf, buf + sizeof(buf), n);
  out.push_back(type);
  out.append(buf, r.ptr);
  out.append("\r\n");
}

}  // namespace

void AppendNull(std::string& out, int proto) {
  if (proto == 3) {
    out.append("_\r\n");
  } else {
    AppendNullBulk(out);
  }
}

void AppendMapHeader(std::string& out, size_t pairs, int proto) {
  if (proto == 3) {
    AppendHeader(out, '%', pairs);
  } else {
    AppendArrayHeader(out, 2 * pairs);
  }
}

void AppendVerbatim(std::string& out, std::string_view text, int proto) {
  if (proto != 3) return AppendBulk(out, text);
  AppendHeader(out, '=', text.size() + 4);
  out.append("txt:");
  out.append(text);
  out.append("\r\n");
}

}  // namespace pmrt::server
