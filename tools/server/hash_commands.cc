// Hashes for the Executor (commands.h): HSET, HMSET, HSETNX, HGET, HMGET, HDEL, HLEN, HEXISTS,
// HSTRLEN, HGETALL, HKEYS, HVALS, HINCRBY, HINCRBYFLOAT, HSCAN, HRANDFIELD, and the primitives
// the other commands use on a key that holds a hash (DEL, SET over it, RENAME, COPY, expiry).
// docs/server.md, "Hashes", has the contract.
//
// A hash is a header in db0.hashes (key -> its field count) and one entry per field in
// db0.fields (HashFieldKey(key, field) -> value; store.h). Invariants:
//   1. A key holds a string (db0) or a hash (db0.hashes), never both, and a hash has at least
//      one field: its header counts exactly its fields.
//   2. Every change of a hash (a field, its header, the hash's removal) runs inside a transaction
//      (RunWrite's RunInTransaction for a hash command or any write of a key holding a hash,
//      EXEC, the multi-key writes, ExpireIfNeeded and FLUSHALL for a hash): a crash keeps all of
//      a command or none, readers see none half done (AtomicWrite), and no epoch-scoped change
//      of a hash exists for a crash to roll back under a later transaction's replay. A new
//      hash logs the removal of the string of its name and its key's deadline as they stand
//      (Index::remove logs an absent key too), so that the replay never revives either beside
//      it.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "tools/server/commands.h"
#include "tools/server/resp.h"
#include "tools/server/sliced_scan.h"

namespace pmrt::server {
namespace {

using After = Executor::After;

// The first key past every field key of the hash whose prefix is `prefix` (which ends in 0x01).
std::string PrefixEnd(std::string prefix) {
  prefix.back() = '\x02';
  return prefix;
}

}  // namespace

void Executor::WriteFailed(const absl::Status& st, std::string& out) {
  if (st.code() == absl::StatusCode::kResourceExhausted) {
    AppendError(out, absl::StrCat("OOM pool ", store_.pool().path(), " (", store_.pool().size(),
                                  " bytes) has no room for this write of a hash; nothing was "
                                  "changed"));
  } else {
    AppendError(out, absl::StrCat("ERR ", st.message()));
  }
  WriteError() = st;
}

std::optional<int64_t> Executor::HashLength(std::string_view key) const {
  std::optional<int64_t> n;
  store_.hashes().tree().read(key, [&](std::string_view v) { n = DecodeInt64(v); });
  return n;
}

std::optional<std::string> Executor::HashGet(std::string_view key, std::string_view field) const {
  return store_.fields().tree().get(HashFieldKey(key, field));
}

std::vector<std::pair<std::string, std::string>> Executor::HashFields(std::string_view key) const {
  std::vector<std::pair<std::string, std::string>> fields;
  std::string prefix = HashFieldPrefix(key);
  const std::string end = PrefixEnd(prefix);
  const size_t skip = prefix.size();
  (void)SlicedScan(store_.fields().tree(), std::move(prefix), end, /*values=*/true,
                   /*verify=*/false, [&](std::string_view k, std::string_view v) {
                     fields.emplace_back(std::string(k.substr(skip)), std::string(v));
                     return true;
                   });
  return fields;
}

Executor::KeyType Executor::TypeOf(std::string_view key) const {
  if (key.size() > options_.max_key || Expired(key)) return KeyType::kNone;
  if (store_.tree().read(key, [](std::string_view) {})) return KeyType::kString;
  return HashLength(key).has_value() ? KeyType::kHash : KeyType::kNone;
}

bool Executor::NotAString(std::string_view key, std::string& out) const {
  if (TypeOf(key) != KeyType::kString) return true;
  AppendError(out, kWrongType);
  return false;
}

bool Executor::FieldOk(std::string_view field, std::string& out) const {
  if (field.size() <= options_.max_key) return true;
  AppendError(out, absl::StrCat("ERR hash field too long: ", field.size(), " bytes (the limit is ",
                                options_.max_key, ")"));
  return false;
}

int Executor::HashSet(std::string_view key, std::string_view field, std::string_view value,
                      std::string& out) {
  const std::optional<int64_t> n = HashLength(key);
  const std::string fk = HashFieldKey(key, field);
  RecordUndo(fk, Space::kField);
  absl::StatusOr<ds::PutResult> r = store_.fields().put(fk, value);
  if (!r.ok()) {
    DropLastUndo();
    WriteFailed(r.status(), out);
    return -1;
  }
  const bool added = *r == ds::PutResult::kInserted;
  if (added || !n.has_value()) {
    RecordUndo(key, Space::kHash);
    if (absl::StatusOr<ds::PutResult> h =
            store_.hashes().put(key, EncodeInt64(n.value_or(0) + (added ? 1 : 0)));
        !h.ok()) {
      DropLastUndo();
      WriteFailed(h.status(), out);
      return -1;
    }
  }
  if (!n.has_value()) {
    // A new hash: no string of its name (invariant 1), and its deadline as it stands, both
    // logged (invariant 2).
    RecordUndo(key);
    if (absl::StatusOr<bool> s = store_.db().remove(key); !s.ok()) {
      DropLastUndo();
      WriteFailed(s.status(), out);
      return -1;
    }
    if (!LogDeadlineInTransaction(key, out)) return -1;
  }
  Touch(key);
  return added ? 1 : 0;
}

int Executor::HashDelete(std::string_view key, std::string_view field, std::string& out) {
  const std::optional<int64_t> n = HashLength(key);
  if (!n.has_value()) return 0;
  const std::string fk = HashFieldKey(key, field);
  RecordUndo(fk, Space::kField);
  absl::StatusOr<bool> r = store_.fields().remove(fk);
  if (!r.ok() || !*r) {
    DropLastUndo();
    if (!r.ok()) WriteFailed(r.status(), out);
    return r.ok() ? 0 : -1;
  }
  RecordUndo(key, Space::kHash);
  if (*n <= 1) {
    // The last field: the hash is gone, and its deadline with it.
    if (absl::StatusOr<bool> h = store_.hashes().remove(key); !h.ok()) {
      DropLastUndo();
      WriteFailed(h.status(), out);
      return -1;
    }
    if (!ClearDeadline(key, out).ok()) return -1;
  } else if (absl::StatusOr<ds::PutResult> h = store_.hashes().put(key, EncodeInt64(*n - 1));
             !h.ok()) {
    DropLastUndo();
    WriteFailed(h.status(), out);
    return -1;
  }
  Touch(key);
  return 1;
}

bool Executor::HashRemoveAll(std::string_view key, std::string& out) {
  for (const auto& [field, value] : HashFields(key)) {
    const std::string fk = HashFieldKey(key, field);
    RecordUndo(fk, Space::kField);
    if (absl::StatusOr<bool> r = store_.fields().remove(fk); !r.ok()) {
      DropLastUndo();
      WriteFailed(r.status(), out);
      return false;
    }
  }
  RecordUndo(key, Space::kHash);
  if (absl::StatusOr<bool> h = store_.hashes().remove(key); !h.ok()) {
    DropLastUndo();
    WriteFailed(h.status(), out);
    return false;
  }
  Touch(key);
  return true;
}

After Executor::HSet(Args& a, std::string& out, Call&) {
  if (a.size() % 2 != 0) {
    AppendError(out, absl::StrCat("ERR wrong number of arguments for '",
                                  absl::AsciiStrToLower(a[0]), "' command"));
    return After::kNone;
  }
  if (!KeyOk(a[1], out) || !NotAString(a[1], out)) return After::kNone;
  for (size_t i = 2; i < a.size(); i += 2) {
    if (!FieldOk(a[i], out)) return After::kNone;
  }
  int64_t added = 0;
  for (size_t i = 2; i < a.size(); i += 2) {
    const int r = HashSet(a[1], a[i], a[i + 1], out);
    if (r < 0) return After::kNone;
    added += r;
  }
  if (absl::AsciiStrToLower(a[0]) == "hmset") {
    AppendSimple(out, "OK");
  } else {
    AppendInteger(out, added);
  }
  return After::kNone;
}

After Executor::HSetNx(Args& a, std::string& out, Call&) {
  if (!KeyOk(a[1], out) || !NotAString(a[1], out) || !FieldOk(a[2], out)) return After::kNone;
  if (HashGet(a[1], a[2]).has_value()) {
    AppendInteger(out, 0);
  } else if (HashSet(a[1], a[2], a[3], out) >= 0) {
    AppendInteger(out, 1);
  }
  return After::kNone;
}

After Executor::HGet(Args& a, std::string& out, Call& call) {
  if (!NotAString(a[1], out)) return After::kNone;
  const std::optional<std::string> v =
      Expired(a[1]) ? std::nullopt : HashGet(a[1], a[2]);  // the deadline first
  if (v.has_value()) {
    AppendBulk(out, *v);
  } else {
    AppendNull(out, call.proto());
  }
  return After::kNone;
}

After Executor::HMGet(Args& a, std::string& out, Call& call) {
  if (!NotAString(a[1], out)) return After::kNone;
  const bool gone = Expired(a[1]);
  const size_t start = out.size();
  AppendArrayHeader(out, a.size() - 2);
  for (size_t i = 2; i < a.size(); ++i) {
    const std::optional<std::string> v = gone ? std::nullopt : HashGet(a[1], a[i]);
    if (v.has_value()) {
      AppendBulk(out, *v);
    } else {
      AppendNull(out, call.proto());
    }
    if (out.size() - start > MaxReply()) {
      out.resize(start);
      ReplyTooLarge(out, "HMGET", i - 1);
      return After::kNone;
    }
  }
  return After::kNone;
}

After Executor::HDel(Args& a, std::string& out, Call&) {
  if (!NotAString(a[1], out)) return After::kNone;
  int64_t removed = 0;
  for (size_t i = 2; i < a.size(); ++i) {
    const int r = HashDelete(a[1], a[i], out);
    if (r < 0) return After::kNone;
    removed += r;
  }
  AppendInteger(out, removed);
  return After::kNone;
}

After Executor::HLen(Args& a, std::string& out, Call&) {
  if (!NotAString(a[1], out)) return After::kNone;
  AppendInteger(out, Expired(a[1]) ? 0 : HashLength(a[1]).value_or(0));
  return After::kNone;
}

After Executor::HExists(Args& a, std::string& out, Call&) {
  if (!NotAString(a[1], out)) return After::kNone;
  AppendInteger(out, !Expired(a[1]) && HashGet(a[1], a[2]).has_value() ? 1 : 0);
  return After::kNone;
}

After Executor::HStrLen(Args& a, std::string& out, Call&) {
  if (!NotAString(a[1], out)) return After::kNone;
  const std::optional<std::string> v = Expired(a[1]) ? std::nullopt : HashGet(a[1], a[2]);
  AppendInteger(out, v.has_value() ? static_cast<int64_t>(v->size()) : 0);
  return After::kNone;
}

After Executor::HGetAll(Args& a, std::string& out, Call& call) {
  if (!NotAString(a[1], out)) return After::kNone;
  const std::string name = absl::AsciiStrToLower(a[0]);
  const bool keys = name != "hvals", values = name != "hkeys";
  std::vector<std::pair<std::string, std::string>> fields;
  if (!Expired(a[1])) fields = HashFields(a[1]);
  size_t bytes = 0;
  for (const auto& [f, v] : fields)
    bytes += (keys ? f.size() + 16 : 0) + (values ? v.size() + 16 : 0);
  if (bytes > MaxReply()) {
    ReplyTooLarge(out, absl::AsciiStrToUpper(name), 0);
    return After::kNone;
  }
  if (keys && values) {
    AppendMapHeader(out, fields.size(), call.proto());
  } else {
    AppendArrayHeader(out, fields.size());
  }
  for (const auto& [f, v] : fields) {
    if (keys) AppendBulk(out, f);
    if (values) AppendBulk(out, v);
  }
  return After::kNone;
}

After Executor::HIncrBy(Args& a, std::string& out, Call&) {
  int64_t delta;
  if (!ParseI64(a[3], &delta)) {
    AppendError(out, kNotInteger);
    return After::kNone;
  }
  if (!KeyOk(a[1], out) || !NotAString(a[1], out) || !FieldOk(a[2], out)) return After::kNone;
  int64_t value = 0;
  if (const std::optional<std::string> old = HashGet(a[1], a[2]);
      old.has_value() && !ParseI64(*old, &value)) {
    AppendError(out, "ERR hash value is not an integer");
    return After::kNone;
  }
  int64_t sum;
  if (__builtin_add_overflow(value, delta, &sum)) {
    AppendError(out, "ERR increment or decrement would overflow");
    return After::kNone;
  }
  if (HashSet(a[1], a[2], std::to_string(sum), out) >= 0) AppendInteger(out, sum);
  return After::kNone;
}

After Executor::HIncrByFloat(Args& a, std::string& out, Call&) {
  long double delta;  // checked first, as Redis does (before the key's type)
  if (!ParseLongDouble(a[3], &delta)) {
    AppendError(out, "ERR value is not a valid float");
    return After::kNone;
  }
  if (!KeyOk(a[1], out) || !NotAString(a[1], out) || !FieldOk(a[2], out)) return After::kNone;
  std::string result;
  if (AddFloat(HashGet(a[1], a[2]), a[3], "ERR hash value is not a float", &result, out) &&
      HashSet(a[1], a[2], result, out) >= 0) {
    AppendBulk(out, result);
  }
  return After::kNone;
}

After Executor::HScan(Args& a, std::string& out, Call&) {
  // HSCAN key cursor [MATCH pattern] [COUNT n] [NOVALUES]: a cursor is a handle to the field
  // the next call starts at, as SCAN's to a key.
  std::string from;
  if (!ScanStart(a[2], &from, out)) return After::kNone;
  std::optional<std::string> match;
  uint64_t count = 10;
  bool novalues = false;
  for (size_t i = 3; i < a.size(); ++i) {
    const std::string opt = absl::AsciiStrToLower(a[i]);
    if (opt == "novalues") {
      novalues = true;
    } else if (opt == "match" && i + 1 < a.size()) {
      match = a[++i];
    } else if (opt == "count" && i + 1 < a.size()) {
      if (!absl::SimpleAtoi(a[++i], &count) || count == 0 || count > options_.max_range) {
        AppendError(out, absl::StrCat("ERR COUNT must be between 1 and ", options_.max_range));
        return After::kNone;
      }
    } else {
      AppendError(out, "ERR syntax error");
      return After::kNone;
    }
  }
  if (!NotAString(a[1], out)) return After::kNone;
  std::vector<std::string> items;
  std::string next;
  bool more = false, too_large = false;
  size_t bytes = 0;
  if (!Expired(a[1])) {
    const std::string prefix = HashFieldPrefix(a[1]);
    uint64_t seen = 0;
    (void)SlicedScan(store_.fields().tree(), prefix + from, PrefixEnd(prefix), /*values=*/true,
                     /*verify=*/false, [&](std::string_view k, std::string_view v) {
                       const std::string_view field = k.substr(prefix.size());
                       if (seen == count) {
                         next.assign(field);
                         more = true;
                         return false;
                       }
                       ++seen;
                       if (match && !GlobMatch(*match, field)) return true;
                       items.emplace_back(field);
                       if (!novalues) items.emplace_back(v);
                       bytes += field.size() + v.size() + 32;
                       too_large = bytes > MaxReply();
                       return !too_large;
                     });
  }
  if (too_large) {
    ReplyTooLarge(out, "HSCAN", items.size());
    return After::kNone;
  }
  AppendScanReply(more, std::move(next), items, out);
  return After::kNone;
}

After Executor::HRandField(Args& a, std::string& out, Call& call) {
  // HRANDFIELD key [count [WITHVALUES]]: reads the whole hash (time proportional to it).
  std::optional<int64_t> count;
  bool withvalues = false;
  if (a.size() >= 3) {
    int64_t c;
    if (!ParseI64(a[2], &c)) {
      AppendError(out, kNotInteger);
      return After::kNone;
    }
    count = c;
  }
  if (a.size() == 4 && absl::AsciiStrToLower(a[3]) == "withvalues") {
    withvalues = true;
  } else if (a.size() >= 4) {
    AppendError(out, "ERR syntax error");
    return After::kNone;
  }
  constexpr int64_t kMaxCount = std::numeric_limits<int64_t>::max() / 2;
  if (count.has_value() && (*count < -kMaxCount || *count > kMaxCount)) {
    AppendError(out, "ERR value is out of range");
    return After::kNone;
  }
  if (!NotAString(a[1], out)) return After::kNone;
  std::vector<std::pair<std::string, std::string>> fields;
  if (!Expired(a[1])) fields = HashFields(a[1]);
  thread_local std::mt19937_64 rng{std::random_device{}()};
  if (!count.has_value()) {
    if (fields.empty()) {
      AppendNull(out, call.proto());
    } else {
      AppendBulk(out,
                 fields[std::uniform_int_distribution<size_t>(0, fields.size() - 1)(rng)].first);
    }
    return After::kNone;
  }
  // A positive count: that many distinct fields at most; a negative one: |count| fields, each
  // drawn independently (repeats allowed), as in Redis.
  std::vector<size_t> picks;
  if (*count >= 0) {
    picks.resize(fields.size());
    for (size_t i = 0; i < picks.size(); ++i) picks[i] = i;
    std::shuffle(picks.begin(), picks.end(), rng);
    picks.resize(std::min<size_t>(picks.size(), static_cast<size_t>(*count)));
    size_t bytes = 0;
    for (size_t i : picks) {
      bytes += fields[i].first.size() + (withvalues ? fields[i].second.size() : 0) + 32;
    }
    if (bytes > MaxReply()) {
      ReplyTooLarge(out, "HRANDFIELD", 0);
      return After::kNone;
    }
  } else if (!fields.empty()) {
    const uint64_t n = static_cast<uint64_t>(-*count);
    size_t bytes = 0;
    for (uint64_t i = 0; i < n; ++i) {
      const size_t at = std::uniform_int_distribution<size_t>(0, fields.size() - 1)(rng);
      bytes += fields[at].first.size() + (withvalues ? fields[at].second.size() : 0) + 32;
      if (bytes > MaxReply()) {
        ReplyTooLarge(out, "HRANDFIELD", picks.size());
        return After::kNone;
      }
      picks.push_back(at);
    }
  }
  if (withvalues && call.proto() >= 3) {
    AppendArrayHeader(out, picks.size());
    for (size_t i : picks) {
      AppendArrayHeader(out, 2);
      AppendBulk(out, fields[i].first);
      AppendBulk(out, fields[i].second);
    }
  } else {
    AppendArrayHeader(out, picks.size() * (withvalues ? 2 : 1));
    for (size_t i : picks) {
      AppendBulk(out, fields[i].first);
      if (withvalues) AppendBulk(out, fields[i].second);
    }
  }
  return After::kNone;
}

}  // namespace pmrt::server
