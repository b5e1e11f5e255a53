// The keyspace commands of the Executor (commands.h): KEYS, TYPE, RANDOMKEY, RENAME, RENAMENX
// and COPY, with Redis 7's replies and error strings. Every value is a string.
//
// RENAME, RENAMENX and COPY run under the stripes of both keys (Access::kWriteTwo), so no other
// write interleaves; their writes are one pmrt transaction (MoveValue, Executor::
// WriteAtomically): a crash keeps both changes or neither, and both are durable at the reply.
#include <random>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "tools/server/commands.h"
#include "tools/server/resp.h"

namespace pmrt::server {
namespace {

using After = Executor::After;

constexpr char kNoSuchKey[] = "ERR no such key";

// The literal prefix of a glob pattern: the bytes before its first special character. Every
// key the pattern matches starts with it.
std::string_view LiteralPrefix(std::string_view pattern) {
  const size_t n = pattern.find_first_of("*?[\\");
  return pattern.substr(0, n == std::string_view::npos ? pattern.size() : n);
}

}  // namespace

After Executor::Keys(Args& a, std::string& out, Call&) {
  const std::string& pattern = a[1];
  const std::string_view prefix = LiteralPrefix(pattern);
  std::vector<std::string> keys;
  size_t bytes = 0;
  bool too_large = false;
  // Keys (strings and hashes) are visited in order from the prefix, a slice per guard, and the
  // walk ends at the first key past it.
  VisitKeys(std::string(prefix), [&](std::string_view k, KeyType) {
    if (!k.starts_with(prefix)) return false;
    if (!GlobMatch(pattern, k) || Expired(k)) return true;
    bytes += k.size() + 16;
    too_large = bytes > MaxReply();
    if (!too_large) keys.emplace_back(k);
    return !too_large;
  });
  if (too_large) {
    ReplyTooLarge(out, "KEYS", keys.size());
    return After::kNone;
  }
  AppendArrayHeader(out, keys.size());
  for (const std::string& k : keys) AppendBulk(out, k);
  return After::kNone;
}

After Executor::Type(Args& a, std::string& out, Call&) {
  switch (TypeOf(a[1])) {
    case KeyType::kString:
      AppendSimple(out, "string");
      break;
    case KeyType::kHash:
      AppendSimple(out, "hash");
      break;
    case KeyType::kNone:
      AppendSimple(out, "none");
      break;
  }
  return After::kNone;
}

After Executor::RandomKey(Args&, std::string& out, Call& call) {
  // A key past its deadline is drawn again, as in Redis, a bounded number of times: a store
  // whose keys are nearly all expired and not yet removed answers nil.
  // Strings or hashes, in proportion to their counts.
  thread_local std::mt19937_64 rng{std::random_device{}()};
  const size_t strings = store_.tree().size(), hashes = store_.hashes().tree().size();
  std::string key;
  for (int tries = 0; tries < 16; ++tries) {
    const bool hash = std::uniform_int_distribution<size_t>(
                          1, std::max<size_t>(strings + hashes, 1))(rng) > strings;
    if (!RandomPick(hash ? store_.hashes().tree() : store_.tree(), &key)) continue;
    if (Expired(key)) continue;
    AppendBulk(out, key);
    return After::kNone;
  }
  AppendNull(out, call.proto());
  return After::kNone;
}

bool Executor::RandomPick(const ds::DurableMasstree& tree, std::string* picked) {
  // A random descent of the key space, byte by byte: at a prefix p that some keys share, a byte
  // is drawn uniformly between the smallest and the largest byte that follows p in a key, and
  // the descent goes on along the first key at or after p + that byte. Bytes every key shares
  // (`user:`) cost one probe each and no choice; a key that is itself a prefix of others is
  // chosen with the probability of one more branch. Every key can come back; the choice is
  // uniform per byte, not per key. At most kMaxDepth bytes, each a few O(log n) probes.
  thread_local std::mt19937_64 rng{std::random_device{}()};
  constexpr size_t kMaxDepth = 256;
  auto first_at = [&tree](std::string_view from, std::string* key) {
    bool found = false;
    tree.scan(from, 1, [&](std::string_view k, std::string_view) {
      key->assign(k);
      found = true;
      return false;
    });
    return found;
  };
  std::string prefix, key, probe;
  if (!first_at("", &key)) return false;
  auto extends = [&](std::string_view k) {
    return k.size() > prefix.size() && k.substr(0, prefix.size()) == prefix;
  };
  while (prefix.size() < kMaxDepth) {
    // `key`: the first key at or after `prefix`, which starts with it.
    const bool terminal = key == prefix;
    std::string first_ext;
    if (terminal) {
      if (!first_at(prefix + '\0', &first_ext) || !extends(first_ext)) break;  // a leaf: done
    } else {
      first_ext = key;
    }
    const int lo = static_cast<unsigned char>(first_ext[prefix.size()]);
    int hi = lo;  // the largest byte after `prefix` in a key: binary search over (lo, 255]
    probe = prefix;
    probe.push_back(static_cast<char>(lo + 1));
    const bool one_byte = lo == 255 || !first_at(probe, &key) || !extends(key);
    for (int step = 128; step > 0 && !one_byte; step /= 2) {
      if (hi + step > 255) continue;
      probe = prefix;
      probe.push_back(static_cast<char>(hi + step));
      if (first_at(probe, &key) && extends(key)) hi += step;
    }
    // A key equal to the prefix counts as one more branch.
    const int pick = std::uniform_int_distribution<int>(lo, hi + (terminal ? 1 : 0))(rng);
    if (pick > hi) {
      key = prefix;
      break;
    }
    probe = prefix;
    probe.push_back(static_cast<char>(pick));
    if (!first_at(probe, &key) || !extends(key)) break;  // a concurrent remove: take what is there
    prefix.push_back(key[prefix.size()]);
  }
  if (prefix.size() == kMaxDepth || !first_at(prefix, &key)) first_at("", &key);
  *picked = std::move(key);
  return true;
}

Executor::Move Executor::MoveValue(std::string_view src, std::string_view dst, bool remove_src,
                                   bool replace, std::string& out, Call& call) {
  // The caller holds both keys' stripes: what is read here stays so until the writes.
  std::string value;
  std::vector<std::pair<std::string, std::string>> fields;
  const KeyType type = TypeOf(src);
  if (type == KeyType::kNone) return Move::kNoSource;
  if (type == KeyType::kHash) {
    fields = HashFields(src);
  } else if (ReadValue(src, &value, out) == Read::kFailed) {
    return Move::kFailed;
  }
  if (!replace && Present(dst)) return Move::kTargetExists;
  const std::optional<int64_t> deadline = Deadline(src);  // moved or copied with the value
  const bool done = WriteAtomically(call, out, [&]() -> absl::Status {
    if (type == KeyType::kHash) {
      // Whatever dst held goes (its deadline too), then the fields, then src's deadline.
      if (absl::StatusOr<bool> r = Remove(dst, out); !r.ok()) return r.status();
      for (const auto& [f, v] : fields) {
        if (HashSet(dst, f, v, out) < 0) return WriteError();
      }
      if (deadline.has_value() && !SetDeadline(dst, *deadline, out)) return WriteError();
    } else {
      if (deadline.has_value() && !SetDeadline(dst, *deadline, out)) return WriteError();
      if (!Put(dst, value, out, deadline.has_value() ? Ttl::kKeep : Ttl::kClear)) {
        return WriteError();
      }
    }
    if (remove_src) {
      if (absl::StatusOr<bool> r = Remove(src, out); !r.ok()) return r.status();
    }
    return absl::OkStatus();
  });
  return done ? Move::kDone : Move::kFailed;
}

After Executor::Rename(Args& a, std::string& out, Call& call) {
  if (!Present(a[1])) {
    AppendError(out, kNoSuchKey);
    return After::kNone;
  }
  if (a[1] == a[2]) {  // as Redis: renaming a key to itself succeeds and changes nothing
    AppendSimple(out, "OK");
    return After::kNone;
  }
  if (!KeyOk(a[2], out)) return After::kNone;
  switch (MoveValue(a[1], a[2], /*remove_src=*/true, /*replace=*/true, out, call)) {
    case Move::kDone:
      AppendSimple(out, "OK");
      break;
    case Move::kNoSource:
      AppendError(out, kNoSuchKey);
      break;
    case Move::kTargetExists:  // not with replace
    case Move::kFailed:
      break;
  }
  return After::kNone;
}

After Executor::RenameNx(Args& a, std::string& out, Call& call) {
  if (!Present(a[1])) {
    AppendError(out, kNoSuchKey);
    return After::kNone;
  }
  if (a[1] == a[2]) {  // the target exists: it is the source
    AppendInteger(out, 0);
    return After::kNone;
  }
  if (!KeyOk(a[2], out)) return After::kNone;
  switch (MoveValue(a[1], a[2], /*remove_src=*/true, /*replace=*/false, out, call)) {
    case Move::kDone:
      AppendInteger(out, 1);
      break;
    case Move::kTargetExists:
      AppendInteger(out, 0);
      break;
    case Move::kNoSource:
      AppendError(out, kNoSuchKey);
      break;
    case Move::kFailed:
      break;
  }
  return After::kNone;
}

After Executor::Copy(Args& a, std::string& out, Call& call) {
  // COPY source destination [DB destination-db] [REPLACE]
  bool replace = false;
  for (size_t i = 3; i < a.size(); ++i) {
    const std::string opt = absl::AsciiStrToLower(a[i]);
    if (opt == "replace") {
      replace = true;
    } else if (opt == "db" && i + 1 < a.size()) {
      int64_t db;
      if (!absl::SimpleAtoi(a[++i], &db)) {
        AppendError(out, "ERR value is not an integer or out of range");
        return After::kNone;
      }
      if (db != 0) {
        AppendError(out, "ERR DB index is out of range");
        return After::kNone;
      }
    } else {
      AppendError(out, "ERR syntax error");
      return After::kNone;
    }
  }
  if (a[1] == a[2]) {
    AppendError(out, "ERR source and destination objects are the same");
    return After::kNone;
  }
  if (a[1].size() > options_.max_key) {  // cannot exist
    AppendInteger(out, 0);
    return After::kNone;
  }
  if (!KeyOk(a[2], out)) return After::kNone;
  switch (MoveValue(a[1], a[2], /*remove_src=*/false, replace, out, call)) {
    case Move::kDone:
      AppendInteger(out, 1);
      break;
    case Move::kNoSource:
    case Move::kTargetExists:
      AppendInteger(out, 0);
      break;
    case Move::kFailed:
      break;
  }
  return After::kNone;
}

}  // namespace pmrt::server
