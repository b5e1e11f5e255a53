// The string and counter commands of the Executor (commands.h): SET and its options, SETNX,
// GETSET, GETDEL, INCR/DECR/INCRBY/DECRBY/INCRBYFLOAT, APPEND, STRLEN, GETRANGE, SETRANGE, with
// Redis 7's replies and error strings. Each write here runs under the stripe of its key
// (Executor::RunWrite), so its read of the old value and its write of the new one are one step
// to every other writer of that key. A value is never edited in place: the tree replaces it, so
// APPEND and SETRANGE write the whole new value (time proportional to its length).
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "tools/server/commands.h"
#include "tools/server/resp.h"

namespace pmrt::server {
namespace {

using After = Executor::After;

constexpr char kNotFloat[] = "ERR value is not a valid float";

}  // namespace

bool ParseLongDouble(std::string_view s, long double* out) {
  constexpr size_t kMaxChars = 5 * 1024;  // Redis's MAX_LONG_DOUBLE_CHARS
  if (s.empty() || s.size() >= kMaxChars || absl::ascii_isspace(s[0])) return false;
  const std::string buf(s);  // NUL-terminated for strtold
  char* end;
  errno = 0;
  const long double v = std::strtold(buf.c_str(), &end);
  if (end != buf.data() + buf.size() || std::isnan(v)) return false;
  if (errno == ERANGE && (std::isinf(v) || std::fpclassify(v) == FP_ZERO)) return false;
  *out = v;
  return true;
}

std::string FormatLongDouble(long double v) {
  char buf[5 * 1024];  // the largest finite long double has 4933 integer digits
  const int n = std::snprintf(buf, sizeof(buf), "%.17Lf", v);
  std::string s(buf, static_cast<size_t>(std::max(n, 0)));
  if (s.find('.') != std::string::npos) {
    while (s.back() == '0') s.pop_back();
    if (s.back() == '.') s.pop_back();
  }
  if (s == "-0") s = "0";
  return s;
}

bool ParseI64(std::string_view s, int64_t* out) {
  if (s == "0") {
    *out = 0;
    return true;
  }
  const bool negative = !s.empty() && s[0] == '-';
  if (negative) s.remove_prefix(1);
  if (s.empty() || s.size() > 19 || s[0] < '1' || s[0] > '9') return false;
  uint64_t v = 0;  // 19 digits cannot overflow 64 bits
  for (char c : s) {
    if (c < '0' || c > '9') return false;
    v = v * 10 + static_cast<uint64_t>(c - '0');
  }
  constexpr uint64_t kMax = std::numeric_limits<int64_t>::max();
  if (v > kMax + (negative ? 1 : 0)) return false;
  // Two's complement conversion (defined in C++20): 2^63 negated is INT64_MIN.
  *out = negative ? static_cast<int64_t>(0 - v) : static_cast<int64_t>(v);
  return true;
}

bool AddFloat(const std::optional<std::string>& old, std::string_view delta,
              const char* old_not_float, std::string* result, std::string& out) {
  long double d, value = 0;
  if (!ParseLongDouble(delta, &d)) {
    AppendError(out, kNotFloat);
    return false;
  }
  if (old.has_value() && !ParseLongDouble(*old, &value)) {
    AppendError(out, old_not_float);
    return false;
  }
  value += d;
  if (std::isnan(value) || std::isinf(value)) {
    AppendError(out, "ERR increment would produce NaN or Infinity");
    return false;
  }
  *result = FormatLongDouble(value);
  return true;
}

bool Executor::LengthOk(uint64_t base, uint64_t added, std::string& out) const {
  const uint64_t max = options_.limits.max_bulk;
  if (added <= max && base <= max - added) return true;
  AppendError(out, "ERR string exceeds maximum allowed size (proto-max-bulk-len)");
  return false;
}

After Executor::Set(Args& a, std::string& out, Call& call) {
  // Redis's parse: NX excludes XX; the expiry options exclude each other and KEEPTTL (one may
  // repeat: the last counts), and each needs its argument.
  bool nx = false, xx = false, get = false, keepttl = false;
  ExpiryOption expiry;
  for (size_t i = 3; i < a.size(); ++i) {
    const std::string opt = absl::AsciiStrToUpper(a[i]);
    if (TakeExpiryOption(opt, a, &i, !keepttl, &expiry)) continue;
    if (opt == "NX" && !xx) {
      nx = true;
    } else if (opt == "XX" && !nx) {
      xx = true;
    } else if (opt == "GET") {
      get = true;
    } else if (opt == "KEEPTTL" && expiry.name.empty()) {
      keepttl = true;
    } else {
      AppendError(out, "ERR syntax error");
      return After::kNone;
    }
  }
  int64_t deadline = 0;
  if (!expiry.name.empty() && !ExpiryDeadline(expiry, "set", &deadline, out)) {
    return After::kNone;
  }
  if (!KeyOk(a[1], out)) return After::kNone;
  // The write itself: with an expiry, the deadline before the value (a reader reads the
  // deadline first), or the key removed when the deadline has passed already (as Redis).
  auto write = [&]() -> bool {
    if (expiry.name.empty()) return Put(a[1], a[2], out, keepttl ? Ttl::kKeep : Ttl::kClear);
    if (deadline <= NowMs()) return Remove(a[1], out).ok();
    return SetDeadline(a[1], deadline, out) && Put(a[1], a[2], out, Ttl::kKeep);
  };
  if (!nx && !xx && !get) {
    if (write()) AppendSimple(out, "OK");
    return After::kNone;
  }
  std::string old;
  // As Redis: a key holding a hash is WRONGTYPE only for GET; NX and XX find it there.
  const Read read = ReadValue(a[1], &old, out, /*wrongtype=*/get);
  if (read == Read::kFailed) return After::kNone;
  const bool found = read == Read::kFound || TypeOf(a[1]) == KeyType::kHash;
  // As in Redis: with GET the reply is the old value (or nil) whether or not NX/XX let the
  // write happen; without it, a write NX/XX prevents is a nil reply.
  const bool writes = !(nx && found) && !(xx && !found);
  if (writes && !write()) return After::kNone;
  if (!get) {
    if (writes) {
      AppendSimple(out, "OK");
    } else {
      AppendNull(out, call.proto());
    }
  } else if (found) {
    AppendBulk(out, old);
  } else {
    AppendNull(out, call.proto());
  }
  return After::kNone;
}

After Executor::SetNx(Args& a, std::string& out, Call&) {
  if (!KeyOk(a[1], out)) return After::kNone;
  const int inserted = Insert(a[1], a[2], out);
  if (inserted >= 0) AppendInteger(out, inserted);
  return After::kNone;
}

After Executor::GetSet(Args& a, std::string& out, Call& call) {
  if (!KeyOk(a[1], out)) return After::kNone;
  std::string old;
  const Read read = ReadValue(a[1], &old, out);
  if (read == Read::kFailed || !Put(a[1], a[2], out)) return After::kNone;
  if (read == Read::kFound) {
    AppendBulk(out, old);
  } else {
    AppendNull(out, call.proto());
  }
  return After::kNone;
}

After Executor::GetDel(Args& a, std::string& out, Call& call) {
  if (!KeyOk(a[1], out)) return After::kNone;
  std::string old;
  const Read found = ReadValue(a[1], &old, out);
  if (found == Read::kFound && !Remove(a[1], out).ok()) return After::kNone;
  AppendReadReply(found, old, out, call.proto());
  return After::kNone;
}

void Executor::AddToInteger(std::string_view key, int64_t delta, std::string& out) {
  if (!KeyOk(key, out)) return;
  std::string old;
  int64_t value = 0;  // a missing key counts from 0
  switch (ReadValue(key, &old, out)) {
    case Read::kFound:
      if (!ParseI64(old, &value)) {
        AppendError(out, kNotInteger);
        return;
      }
      break;
    case Read::kAbsent:
      break;
    case Read::kFailed:
      return;
  }
  int64_t sum;
  if (__builtin_add_overflow(value, delta, &sum)) {
    AppendError(out, "ERR increment or decrement would overflow");
    return;
  }
  if (Put(key, std::to_string(sum), out, Ttl::kKeep)) AppendInteger(out, sum);
}

After Executor::Incr(Args& a, std::string& out, Call&) {
  AddToInteger(a[1], 1, out);
  return After::kNone;
}

After Executor::Decr(Args& a, std::string& out, Call&) {
  AddToInteger(a[1], -1, out);
  return After::kNone;
}

After Executor::IncrBy(Args& a, std::string& out, Call&) {
  int64_t delta;
  if (!ParseI64(a[2], &delta)) {
    AppendError(out, kNotInteger);
  } else {
    AddToInteger(a[1], delta, out);
  }
  return After::kNone;
}

After Executor::DecrBy(Args& a, std::string& out, Call&) {
  int64_t delta;
  if (!ParseI64(a[2], &delta)) {
    AppendError(out, kNotInteger);
  } else if (delta == std::numeric_limits<int64_t>::min()) {
    AppendError(out, "ERR decrement would overflow");  // Redis 7: -delta does not exist
  } else {
    AddToInteger(a[1], -delta, out);
  }
  return After::kNone;
}

After Executor::IncrByFloat(Args& a, std::string& out, Call&) {
  if (!KeyOk(a[1], out)) return After::kNone;
  std::string old, result;
  const Read read = ReadValue(a[1], &old, out);
  if (read == Read::kFailed) return After::kNone;
  const std::optional<std::string> current =
      read == Read::kFound ? std::optional<std::string>(std::move(old)) : std::nullopt;
  if (AddFloat(current, a[2], kNotFloat, &result, out) && Put(a[1], result, out, Ttl::kKeep)) {
    AppendBulk(out, result);
  }
  return After::kNone;
}

After Executor::Append(Args& a, std::string& out, Call&) {
  if (!KeyOk(a[1], out)) return After::kNone;
  std::string value;
  switch (ReadValue(a[1], &value, out)) {
    case Read::kFound:
      if (!LengthOk(value.size(), a[2].size(), out)) return After::kNone;
      value.append(a[2]);
      break;
    case Read::kAbsent:
      value = std::move(a[2]);
      break;
    case Read::kFailed:
      return After::kNone;
  }
  if (Put(a[1], value, out, Ttl::kKeep)) AppendInteger(out, static_cast<int64_t>(value.size()));
  return After::kNone;
}

After Executor::StrLen(Args& a, std::string& out, Call&) {
  std::string value;
  if (a[1].size() > options_.max_key) {
    AppendInteger(out, 0);  // cannot be in the tree
    return After::kNone;
  }
  const Read read = ReadValue(a[1], &value, out);
  if (read != Read::kFailed) AppendInteger(out, static_cast<int64_t>(value.size()));
  return After::kNone;
}

After Executor::GetRange(Args& a, std::string& out, Call&) {
  int64_t start, end;
  if (!ParseI64(a[2], &start) || !ParseI64(a[3], &end)) {
    AppendError(out, kNotInteger);
    return After::kNone;
  }
  std::string value;  // a missing key reads as the empty string
  if (a[1].size() <= options_.max_key && ReadValue(a[1], &value, out) == Read::kFailed) {
    return After::kNone;
  }
  // Redis's rules: negative indexes count from the end; both are then clamped to the string;
  // an empty range (start past end, or both negative with start > end) is the empty string.
  const int64_t len = static_cast<int64_t>(value.size());
  if (start < 0 && end < 0 && start > end) {
    AppendBulk(out, "");
    return After::kNone;
  }
  if (start < 0) start = std::max<int64_t>(len + start, 0);
  if (end < 0) end = std::max<int64_t>(len + end, 0);
  if (end >= len) end = len - 1;
  if (len == 0 || start > end) {
    AppendBulk(out, "");
  } else {
    AppendBulk(out, std::string_view(value).substr(start, end - start + 1));
  }
  return After::kNone;
}

After Executor::SetRange(Args& a, std::string& out, Call&) {
  int64_t offset;
  if (!ParseI64(a[2], &offset)) {
    AppendError(out, kNotInteger);
    return After::kNone;
  }
  if (offset < 0) {
    AppendError(out, "ERR offset is out of range");
    return After::kNone;
  }
  if (!KeyOk(a[1], out)) return After::kNone;
  std::string value;
  const Read read = ReadValue(a[1], &value, out);
  if (read == Read::kFailed) return After::kNone;
  // Writing nothing changes nothing: a missing key stays missing (reply 0).
  if (a[3].empty()) {
    AppendInteger(out, static_cast<int64_t>(value.size()));
    return After::kNone;
  }
  const uint64_t at = static_cast<uint64_t>(offset);
  if (!LengthOk(at, a[3].size(), out)) return After::kNone;
  if (value.size() < at + a[3].size()) value.resize(at + a[3].size(), '\0');  // zero padding
  value.replace(at, a[3].size(), a[3]);
  if (Put(a[1], value, out, Ttl::kKeep)) AppendInteger(out, static_cast<int64_t>(value.size()));
  return After::kNone;
}

}  // namespace pmrt::server
