#include "tools/server/commands.h"

#include <sys/stat.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "tools/server/resp.h"
#include "tools/server/sliced_scan.h"

namespace pmrt::server {
namespace {

using After = Executor::After;

// A strict unsigned decimal (Redis cursors and counts): 1 to 19 digits, nothing else.
bool ParseU64(std::string_view s, uint64_t* out) {
  if (s.empty() || s.size() > 19) return false;
  uint64_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
    v = v * 10 + static_cast<uint64_t>(c - '0');
  }
  *out = v;
  return true;
}

int64_t SteadyNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// Commands a connection may send before it has authenticated (requirepass): as in Redis.
bool AllowedBeforeAuth(std::string_view name) {
  return name == "auth" || name == "hello" || name == "quit";
}

// Why FLUSHALL and the connection commands are refused inside MULTI (Executor::Spec).
constexpr char kFlushInMulti[] =
    "FLUSHALL inside MULTI is not supported (it runs alone, holding every key's lock)";
constexpr char kConnectionInMulti[] = "this command is not allowed inside MULTI";

char Fold(char c, bool nocase) { return nocase ? absl::ascii_tolower(c) : c; }

// Matches the class starting at pattern[*pi] == '[' against c; sets *pi past the class. An
// unterminated class runs to the end of the pattern, as in Redis.
bool MatchClass(std::string_view p, size_t* pi, char c, bool nocase) {
  size_t i = *pi + 1;
  bool negate = i < p.size() && p[i] == '^';
  if (negate) ++i;
  bool match = false;
  c = Fold(c, nocase);
  while (i < p.size() && p[i] != ']') {
    if (p[i] == '\\' && i + 1 < p.size()) {
      match |= Fold(p[i + 1], nocase) == c;
      i += 2;
    } else if (i + 2 < p.size() && p[i + 1] == '-' && p[i + 2] != ']') {
      unsigned char lo = Fold(p[i], nocase), hi = Fold(p[i + 2], nocase);
      if (lo > hi) std::swap(lo, hi);
      const unsigned char uc = static_cast<unsigned char>(c);
      match |= uc >= lo && uc <= hi;
      i += 3;
    } else {
      match |= Fold(p[i], nocase) == c;
      ++i;
    }
  }
  *pi = i < p.size() ? i + 1 : i;
  return match != negate;
}

std::string Lower(std::string_view s) {
  std::string r(s);
  for (char& c : r) c = absl::ascii_tolower(c);
  return r;
}

void WrongArity(std::string& out, std::string_view name) {
  AppendError(out, absl::StrCat("ERR wrong number of arguments for '", Lower(name), "' command"));
}

}  // namespace

bool GlobMatch(std::string_view p, std::string_view s, bool nocase) {
  // Greedy matching with backtracking to the last '*' only: a later '*' can match everything an
  // earlier one could, so earlier choices never need revisiting (linear in |p| * |s|).
  size_t pi = 0, si = 0;
  size_t star = std::string_view::npos, star_s = 0;
  while (si < s.size()) {
    if (pi < p.size()) {
      const char c = p[pi];
      if (c == '*') {
        star = pi++;
        star_s = si;
        continue;
      }
      if (c == '?') {
        ++pi;
        ++si;
        continue;
      }
      if (c == '[') {
        size_t next = pi;
        if (MatchClass(p, &next, s[si], nocase)) {
          pi = next;
          ++si;
          continue;
        }
      } else {
        const bool escaped = c == '\\' && pi + 1 < p.size();
        const char lit = escaped ? p[pi + 1] : c;
        if (Fold(lit, nocase) == Fold(s[si], nocase)) {
          pi += escaped ? 2 : 1;
          ++si;
          continue;
        }
      }
    }
    if (star == std::string_view::npos) return false;
    pi = star + 1;
    si = ++star_s;
  }
  while (pi < p.size() && p[pi] == '*') ++pi;
  return pi == p.size();
}

Executor::Executor(Store& store, const ServerOptions& options, const ServerCounters& counters)
    : store_(store), options_(options), counters_(counters) {
  // Cursors start at a per-run value so that a cursor kept across a restart is most likely
  // unknown (an error) rather than the handle of some other position.
  next_cursor_ =
      (static_cast<uint64_t>(std::chrono::system_clock::now().time_since_epoch().count()) &
       0xffffffffull)
          << 16 |
      1;
  using enum Access;
  commands_ = {
      {"ping", {&Executor::Ping, -1}},
      {"echo", {&Executor::Echo, 2}},
      {"set", {&Executor::Set, -3, kWriteKey, nullptr, Deadlines::kIfOption}},
      {"setnx", {&Executor::SetNx, 3, kWriteKey}},
      {"getset", {&Executor::GetSet, 3, kWriteKey}},
      {"getdel", {&Executor::GetDel, 2, kWriteKey}},
      {"incr", {&Executor::Incr, 2, kWriteKey}},
      {"decr", {&Executor::Decr, 2, kWriteKey}},
      {"incrby", {&Executor::IncrBy, 3, kWriteKey}},
      {"decrby", {&Executor::DecrBy, 3, kWriteKey}},
      {"incrbyfloat", {&Executor::IncrByFloat, 3, kWriteKey}},
      {"append", {&Executor::Append, 3, kWriteKey}},
      {"setrange", {&Executor::SetRange, 4, kWriteKey}},
      {"strlen", {&Executor::StrLen, 2, kReadKey}},
      {"getrange", {&Executor::GetRange, 4, kReadKey}},
      {"substr", {&Executor::GetRange, 4, kReadKey}},
      {"setex", {&Executor::SetEx, 4, kWriteKey, nullptr, Deadlines::kYes}},
      {"psetex", {&Executor::SetEx, 4, kWriteKey, nullptr, Deadlines::kYes}},
      {"getex", {&Executor::GetEx, -2, kWriteKey, nullptr, Deadlines::kIfOption}},
      {"expire", {&Executor::Expire, -3, kWriteKey, nullptr, Deadlines::kYes}},
      {"pexpire", {&Executor::Expire, -3, kWriteKey, nullptr, Deadlines::kYes}},
      {"expireat", {&Executor::Expire, -3, kWriteKey, nullptr, Deadlines::kYes}},
      {"pexpireat", {&Executor::Expire, -3, kWriteKey, nullptr, Deadlines::kYes}},
      {"persist", {&Executor::Persist, 2, kWriteKey}},
      {"ttl", {&Executor::TimeToLive, 2, kReadKey}},
      {"pttl", {&Executor::TimeToLive, 2, kReadKey}},
      {"expiretime", {&Executor::TimeToLive, 2, kReadKey}},
      {"pexpiretime", {&Executor::TimeToLive, 2, kReadKey}},
      {"touch", {&Executor::Exists, -2, kReadKeys}},
      {"hset", {&Executor::HSet, -4, kWriteKey, nullptr, Deadlines::kNo, /*hash=*/true}},
      {"hmset", {&Executor::HSet, -4, kWriteKey, nullptr, Deadlines::kNo, /*hash=*/true}},
      {"hsetnx", {&Executor::HSetNx, 4, kWriteKey, nullptr, Deadlines::kNo, /*hash=*/true}},
      {"hdel", {&Executor::HDel, -3, kWriteKey, nullptr, Deadlines::kNo, /*hash=*/true}},
      {"hincrby", {&Executor::HIncrBy, 4, kWriteKey, nullptr, Deadlines::kNo, /*hash=*/true}},
      {"hincrbyfloat",
       {&Executor::HIncrByFloat, 4, kWriteKey, nullptr, Deadlines::kNo, /*hash=*/true}},
      {"hget", {&Executor::HGet, 3, kReadKey}},
      {"hmget", {&Executor::HMGet, -3, kReadKey}},
      {"hlen", {&Executor::HLen, 2, kReadKey}},
      {"hexists", {&Executor::HExists, 3, kReadKey}},
      {"hstrlen", {&Executor::HStrLen, 3, kReadKey}},
      {"hgetall", {&Executor::HGetAll, 2, kReadKey}},
      {"hkeys", {&Executor::HGetAll, 2, kReadKey}},
      {"hvals", {&Executor::HGetAll, 2, kReadKey}},
      {"hscan", {&Executor::HScan, -3, kReadKey}},
      {"hrandfield", {&Executor::HRandField, -2, kReadKey}},
      {"get", {&Executor::Get, 2, kReadKey}},
      {"del", {&Executor::Del, -2, kWriteKeys}},
      {"unlink", {&Executor::Del, -2, kWriteKeys}},
      {"exists", {&Executor::Exists, -2, kReadKeys}},
      {"mset", {&Executor::MSet, -3, kWritePairs}},
      {"msetnx", {&Executor::MSetNx, -3, kWritePairs}},
      {"mget", {&Executor::MGet, -2, kReadKeys}},
      {"dbsize", {&Executor::DbSize, 1}},
      {"scan", {&Executor::Scan, -2}},
      {"pmrt.range", {&Executor::Range, -3}},
      {"config", {&Executor::Config, -2}},
      {"info", {&Executor::Info, -1}},
      {"command", {&Executor::Command, -1}},
      {"pmrt.sync", {&Executor::Sync, 1, kRead, "EXEC is durable when it replies"}},
      {"quit", {&Executor::Quit, -1}},
      {"select", {&Executor::Select, 2}},
      {"flushall", {&Executor::FlushAll, -1, kWriteEach, kFlushInMulti}},
      {"flushdb", {&Executor::FlushAll, -1, kWriteEach, kFlushInMulti}},
      {"hello", {&Executor::Hello, -1, kRead, kConnectionInMulti}},
      {"auth", {&Executor::Auth, -2, kRead, kConnectionInMulti}},
      {"client", {&Executor::Client, -2}},
      {"time", {&Executor::Time, 1}},
      {"keys", {&Executor::Keys, 2}},
      {"type", {&Executor::Type, 2, kReadKey}},
      {"randomkey", {&Executor::RandomKey, 1}},
      {"rename", {&Executor::Rename, 3, kWriteTwo}},
      {"renamenx", {&Executor::RenameNx, 3, kWriteTwo}},
      {"copy", {&Executor::Copy, -3, kWriteTwo}},
      {"multi", {&Executor::Multi, 1}},
      {"exec", {&Executor::Exec, 1}},
      {"discard", {&Executor::Discard, 1}},
      {"watch", {&Executor::Watch, -2, kRead, "WATCH inside MULTI is not allowed"}},
      {"unwatch", {&Executor::Unwatch, 1}},
  };
  settings_.max_clients.store(options_.max_clients, std::memory_order_relaxed);
  settings_.idle_timeout_s.store(options_.idle_timeout_s, std::memory_order_relaxed);
  settings_.verify_reads.store(options_.verify_reads, std::memory_order_relaxed);
  settings_.set_requirepass(options_.requirepass);
  start_unix_ms_ = std::chrono::duration_cast<std::chrono::milliseconds>(
                       std::chrono::system_clock::now().time_since_epoch())
                       .count();
  struct stat st;
  if (!store_.pool().path().empty() && stat(store_.pool().path().c_str(), &st) == 0) {
    pool_dev_ = st.st_dev;
    pool_ino_ = st.st_ino;
    watch_file_ = true;
  }
}

void Executor::WatchPoolFile() {
  if (!watch_file_ || store_.pool().failed()) return;
  const int64_t now = std::chrono::duration_cast<std::chrono::nanoseconds>(
                          std::chrono::steady_clock::now().time_since_epoch())
                          .count();
  int64_t last = last_file_check_ns_.load(std::memory_order_relaxed);
  if (now - last < 1000000000 ||
      !last_file_check_ns_.compare_exchange_strong(last, now, std::memory_order_relaxed)) {
    return;
  }
  struct stat st;
  const std::string& path = store_.pool().path();
  if (stat(path.c_str(), &st) == 0 && st.st_dev == pool_dev_ && st.st_ino == pool_ino_) return;
  // The served file is no longer at its path: whatever is written now would be lost with the
  // server, or a new pool there would be mistaken for this one. Writes stop here.
  store_.pool().health_state().Fail(
      absl::StrCat("the pool file was removed or replaced while served (", path,
                   " no longer names the file this server opened)"));
  std::fprintf(stderr, "pmrt serve: %s: the pool file was removed or replaced; writes refused\n",
               path.c_str());
}

After Executor::Execute(std::vector<std::string>& argv, Session& session, std::string* out,
                        uint64_t* sync_epoch) {
  const CommandClock clock;
  const std::string& name = argv[0];
  const std::string lower = name.size() <= 32 ? Lower(name) : std::string();
  auto it = name.size() <= 32 ? commands_.find(lower) : commands_.end();
  if (it == commands_.end()) {
    AppendError(*out, absl::StrCat("ERR unknown command ", Quote(name)));
    session.multi_refused = session.multi_refused || session.in_multi;  // EXEC discards it
    return After::kNone;
  }
  // Relaxed: CLIENT LIST of another connection reads it as an independent statistic. The name
  // is a key of commands_, which never changes after construction.
  session.last_command.store(it->first.c_str(), std::memory_order_relaxed);
  const int n = static_cast<int>(std::min<size_t>(argv.size(), 1 << 30));
  const int arity = it->second.arity;
  if ((arity > 0 && n != arity) || (arity < 0 && n < -arity)) {
    WrongArity(*out, name);
    session.multi_refused = session.multi_refused || session.in_multi;
    return After::kNone;
  }
  // As in Redis, an unknown command or a wrong count is reported before authentication is.
  if (!session.authenticated && settings_.auth_required.load(std::memory_order_relaxed) &&
      !AllowedBeforeAuth(lower)) {
    AppendError(*out, "NOAUTH Authentication required.");
    return After::kNone;
  }
  if (session.in_multi && lower != "exec" && lower != "discard" && lower != "multi" &&
      lower != "quit") {
    Queue(argv, it->second, session, *out);
    return After::kNone;
  }
  Call call{session, sync_epoch};
  if (it->second.access == Access::kRead) return (this->*it->second.fn)(argv, *out, call);
  if (!Writes(it->second.access)) return RunRead(it->second, argv, *out, call);
  WatchPoolFile();
  if (store_.pool().failed()) {
    // Nothing written now could become durable: refused, as Redis refuses writes it cannot
    // persist (MISCONF).
    AppendError(*out, absl::StrCat("ERR writes refused: ", store_.pool().health().message()));
    return After::kNone;
  }
  return RunWrite(it->second, argv, *out, call);
}

std::pair<size_t, size_t> Executor::KeyPositions(Access access, size_t argc) {
  switch (access) {
    case Access::kReadKey:
    case Access::kWriteKey:
      return {1, argc};  // argv[1] only
    case Access::kReadKeys:
    case Access::kWriteKeys:
      return {1, 1};
    case Access::kWritePairs:
      return {1, 2};
    case Access::kWriteTwo:
      return {1, 1};  // argv[1], argv[2] and, for COPY, its options (harmless extra stripes)
    case Access::kRead:
    case Access::kWriteEach:
      break;
  }
  return {argc, 1};  // none
}

void Executor::VisitKeys(
    std::string from, const std::function<bool(std::string_view key, KeyType type)>& visit) const {
  // Two ordered walks merged: a slice of each in memory at a time (copied under one scan each),
  // so no guard is held while `visit` runs. A key in both (a string and a hash: never, but a
  // concurrent SET over a hash could show it in either) is visited once, as its string.
  struct Walk {
    const ds::DurableMasstree& tree;
    KeyType type;
    std::vector<std::string> slice;
    size_t at = 0;
    bool done = false;
    std::string next;  // where the next slice starts
    const std::string* Peek() {
      if (at == slice.size() && !done) {
        slice.clear();
        at = 0;
        tree.scan(next, kSliceKeys, [&](std::string_view k, std::string_view) {
          slice.emplace_back(k);
          return true;
        });
        done = slice.size() < kSliceKeys;
        if (!slice.empty()) {
          next = slice.back();
          next.push_back('\0');
        }
      }
      return at < slice.size() ? &slice[at] : nullptr;
    }
  };
  Walk strings{store_.tree(), KeyType::kString, {}, 0, false, from};
  Walk hashes{store_.hashes().tree(), KeyType::kHash, {}, 0, false, std::move(from)};
  for (;;) {
    const std::string* s = strings.Peek();
    const std::string* h = hashes.Peek();
    if (s == nullptr && h == nullptr) return;
    Walk& w = h == nullptr || (s != nullptr && *s <= *h) ? strings : hashes;
    if (&w == &strings && h != nullptr && *s == *h) ++hashes.at;
    const std::string key = std::move(w.slice[w.at++]);
    if (!visit(key, w.type)) return;
  }
}

namespace {

// Whether argv (SET, GETEX) names an expiry option: the command then writes a deadline.
bool NamesExpiryOption(const std::vector<std::string>& a) {
  for (size_t i = 2; i < a.size(); ++i) {
    if (a[i].size() < 2 || a[i].size() > 4) continue;
    const std::string o = Lower(a[i]);
    if (o == "ex" || o == "px" || o == "exat" || o == "pxat") return true;
  }
  return false;
}

}  // namespace

After Executor::RunWrite(const Spec& spec, Args& a, std::string& out, Call& call) {
  // The stripes are taken here, outside every epoch guard (KeyLocks invariant 2), and the
  // handler's reads and writes of its keys all run under them. A key whose deadline has passed
  // is removed first, so that no write finds it (SETNX, APPEND) or keeps its deadline.
  switch (spec.access) {
    case Access::kWriteTwo: {
      // RENAME, COPY: one transaction, which moves the deadline with the value.
      KeyLocks::Held held = locks_.LockTwo(a[1], a[2]);
      for (size_t i : {1, 2}) {
        if (ExpireIfNeeded(a[i], out) == Expiry::kFailed) return After::kNone;
      }
      return (this->*spec.fn)(a, out, call);
    }
    case Access::kWriteEach:
      return (this->*spec.fn)(a, out, call);
    default:
      break;
  }
  const auto [first, step] = KeyPositions(spec.access, a.size());
  KeyLocks::Held held = locks_.Lock(a, first, step);
  bool deadline = false;
  for (size_t i = first; i < a.size(); i += step) {
    switch (ExpireIfNeeded(a[i], out)) {
      case Expiry::kFailed:
        return After::kNone;
      case Expiry::kLive:
        deadline = true;
        break;
      case Expiry::kNone:
        break;
    }
  }
  // A command of one key writes it epoch-scoped (the others run as one transaction each): when
  // it may change both the value and the deadline, both go in one guard.
  const bool one_key =
      spec.access == Access::kWriteKey || (spec.access == Access::kWriteKeys && a.size() == 2);
  if (one_key && (spec.hash || HashLength(a[first]).has_value())) {
    return RunInTransaction(spec, a, out, call);
  }
  const bool writes_deadline = spec.deadlines == Deadlines::kYes ||
                               (spec.deadlines == Deadlines::kIfOption && NamesExpiryOption(a));
  if (one_key && (deadline || writes_deadline)) return RunInEpoch(spec, a, out, call);
  return (this->*spec.fn)(a, out, call);
}

After Executor::RunInTransaction(const Spec& spec, Args& a, std::string& out, Call& call) {
  const size_t mark = out.size();
  const Args original = a;  // a handler may move from its arguments; a retry needs them
  After after = After::kNone;
  bool first = true;
  (void)WriteAtomically(call, out, [&] {
    if (!first) {
      out.resize(mark);
      a = original;
    }
    first = false;
    after = (this->*spec.fn)(a, out, call);
    return WriteError();
  });
  return after;
}

After Executor::RunInEpoch(const Spec& spec, Args& a, std::string& out, Call& call) {
  const size_t mark = out.size();
  const Args original = a;  // a handler may move from its arguments; a retry needs them
  After after = After::kNone;
  const absl::Status st = EpochAtomically(
      [&] {
        after = (this->*spec.fn)(a, out, call);
        return WriteError();
      },
      [&] {
        out.resize(mark);
        a = original;
      },
      /*durable=*/false);
  if (st.code() == absl::StatusCode::kDataLoss) {
    out.resize(mark);  // the undo failed: the error says which keys hold what
    AppendError(out, absl::StrCat("ERR ", st.message()));
  }
  // Otherwise a failed write has put its own error in the reply.
  return st.ok() ? after : After::kNone;
}

After Executor::RunRead(const Spec& spec, Args& a, std::string& out, Call& call) {
  // A sequence lock over the multi-key writes: `finished` before `started` (acquire), so equal
  // counts mean every write that had started has finished and its stores are visible. The
  // read then ran before any later one started if `started` is unchanged after it (the
  // acquire fence orders the read's loads before that check; AtomicWrite's release fence
  // orders its increment before its stores). Otherwise the read runs again under its stripes,
  // which a multi-key write holds for its whole run.
  const size_t mark = out.size();
  const uint64_t finished = atomic_finished_.load(std::memory_order_acquire);
  const uint64_t started = atomic_started_.load(std::memory_order_acquire);
  if (started == finished) {
    const After r = (this->*spec.fn)(a, out, call);
    std::atomic_thread_fence(std::memory_order_acquire);
    if (atomic_started_.load(std::memory_order_relaxed) == started) return r;
    out.resize(mark);
  }
  const auto [first, step] = KeyPositions(spec.access, a.size());
  KeyLocks::Held held = locks_.Lock(a, first, step);
  return (this->*spec.fn)(a, out, call);
}

Executor::AtomicWrite::AtomicWrite(Executor& e) : e_(e) {
  e_.atomic_started_.fetch_add(1, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_release);
}

Executor::AtomicWrite::~AtomicWrite() {
  e_.atomic_finished_.fetch_add(1, std::memory_order_release);
}

void Executor::Register(Session& session, std::string addr, std::string laddr, int fd) {
  session.id = next_client_id_.fetch_add(1, std::memory_order_relaxed);
  session.addr = std::move(addr);
  session.laddr = std::move(laddr);
  session.fd = fd;
  session.created_ns = SteadyNs();
  session.last_active_ns.store(session.created_ns, std::memory_order_relaxed);
  session.authenticated = !settings_.auth_required.load(std::memory_order_relaxed);
  std::lock_guard<std::mutex> l(clients_mu_);
  clients_.emplace(session.id, &session);
}

void Executor::Unregister(Session& session) {
  UnwatchAll(session);
  std::lock_guard<std::mutex> l(clients_mu_);
  clients_.erase(session.id);
}

bool Executor::KeyOk(std::string_view key, std::string& out) const {
  if (key.size() <= options_.max_key) return true;
  AppendError(out, absl::StrCat("ERR key too long: ", key.size(), " bytes (the limit is ",
                                options_.max_key, ")"));
  return false;
}

void Executor::Oom(size_t value_bytes, std::string& out) {
  AppendError(out, absl::StrCat("OOM pool ", store_.pool().path(), " (", store_.pool().size(),
                                " bytes) has no room for a value of ", value_bytes,
                                " bytes; the key is unchanged"));
}

namespace {

// The reply for a write the index refused: -OOM for no room, the error otherwise.
void AppendWriteError(const absl::Status& st, std::string& out, const std::function<void()>& oom) {
  if (st.code() == absl::StatusCode::kResourceExhausted) {
    oom();
  } else {
    AppendError(out, absl::StrCat("ERR ", st.message()));
  }
}

}  // namespace

absl::Status& Executor::WriteError() {
  thread_local absl::Status error;
  return error;
}

bool Executor::Put(std::string_view key, std::string_view value, std::string& out, Ttl ttl) {
  // A string replaces a hash of the same name (SET, MSET; RunWrite made this a transaction).
  if (HashLength(key).has_value() && !HashRemoveAll(key, out)) return false;
  RecordUndo(key);
  absl::StatusOr<ds::PutResult> r = store_.db().put(key, value);
  if (r.ok()) {
    Touch(key);
    // The value first, then the deadline's removal: a reader (which reads the deadline first)
    // sees the old value with its deadline, the new one with it, or the new one alone.
    if (ttl == Ttl::kClear) return ClearDeadline(key, out).ok();
    return LogDeadlineInTransaction(key, out);
  }
  DropLastUndo();
  AppendWriteError(r.status(), out, [&] { Oom(value.size(), out); });
  WriteError() = r.status();
  return false;
}

int Executor::Insert(std::string_view key, std::string_view value, std::string& out) {
  if (HashLength(key).has_value()) return 0;  // the key exists, holding a hash
  RecordUndo(key);
  absl::StatusOr<ds::InsertResult> r = store_.db().insert_if_absent(key, value);
  if (r.ok()) {
    if (*r == ds::InsertResult::kExists) return 0;
    Touch(key);
    return LogDeadlineInTransaction(key, out) ? 1 : -1;
  }
  DropLastUndo();
  AppendWriteError(r.status(), out, [&] { Oom(value.size(), out); });
  WriteError() = r.status();
  return -1;
}

bool Executor::LogDeadlineInTransaction(std::string_view key, std::string& out) {
  // A crash replays the transaction over the state at the start of the failed epoch, where an
  // epoch-scoped write of this epoch (the removal of a key past its deadline, say) is undone: the
  // deadline is logged as it stands here, so that the replay leaves it with the value. Needless
  // when no such write is in an epoch not yet complete.
  if (!store_.engine().InTransaction() || !DeadlineWritesPending()) return true;
  const std::optional<int64_t> deadline = Deadline(key);
  return deadline.has_value() ? SetDeadline(key, *deadline, out) : ClearDeadline(key, out).ok();
}

absl::StatusOr<bool> Executor::Remove(std::string_view key, std::string& out) {
  if (HashLength(key).has_value()) {
    if (!HashRemoveAll(key, out)) return WriteError();
    if (absl::StatusOr<bool> d = ClearDeadline(key, out); !d.ok()) return d.status();
    Touch(key);
    return true;
  }
  RecordUndo(key);
  absl::StatusOr<bool> r = store_.db().remove(key);
  if (r.ok()) {
    if (*r) Touch(key);
    // The value first, then its deadline: a reader that finds the deadline gone finds the
    // value gone too.
    if (absl::StatusOr<bool> d = ClearDeadline(key, out); !d.ok()) return d.status();
    return r;
  }
  DropLastUndo();
  AppendWriteError(r.status(), out, [&] {
    AppendError(out, absl::StrCat("OOM pool ", store_.pool().path(),
                                  " has no room to log the removal; the key is unchanged"));
  });
  WriteError() = r.status();
  return r;
}

void Executor::Touch(std::string_view key) {
  if (watchers_.load(std::memory_order_relaxed) == 0) return;
  std::lock_guard<std::mutex> l(watch_mu_);
  auto it = watched_.find(absl::string_view(key.data(), key.size()));
  if (it == watched_.end()) return;
  for (Session* s : it->second) s->watch_touched.store(true, std::memory_order_relaxed);
}

After Executor::Ping(Args& a, std::string& out, Call&) {
  if (a.size() > 2) {
    WrongArity(out, a[0]);
  } else if (a.size() == 2) {
    AppendBulk(out, a[1]);
  } else {
    AppendSimple(out, "PONG");
  }
  return After::kNone;
}

After Executor::Echo(Args& a, std::string& out, Call&) {
  AppendBulk(out, a[1]);
  return After::kNone;
}

After Executor::Get(Args& a, std::string& out, Call& call) {
  if (!KeyOk(a[1], out)) return After::kNone;
  std::string value;
  AppendRead(a[1], value, out, call.proto());
  return After::kNone;
}

Executor::Read Executor::ReadValue(std::string_view key, std::string* value, std::string& out,
                                   bool wrongtype) const {
  if (Expired(key)) return Read::kAbsent;  // the deadline first (Put, Remove: their order)
  // A key holding a hash is looked up only when no string is found.
  auto absent = [&] {
    if (!wrongtype || !HashLength(key).has_value()) return Read::kAbsent;
    AppendError(out, kWrongType);
    return Read::kFailed;
  };
  if (!settings_.verify_reads.load(std::memory_order_relaxed))
    return store_.tree().get(key, value) ? Read::kFound : absent();
  const absl::StatusOr<bool> found = store_.tree().get_verified(key, value);
  if (found.ok()) return *found ? Read::kFound : absent();
  AppendError(out, absl::StrCat("ERR ", CorruptValue(key).message()));
  return Read::kFailed;
}

void Executor::AppendRead(std::string_view key, std::string& value, std::string& out,
                          int proto) const {
  const Read found = ReadValue(key, &value, out);  // (before `value` is viewed)
  AppendReadReply(found, value, out, proto);
}

void Executor::AppendReadReply(Read found, std::string_view value, std::string& out, int proto) {
  switch (found) {
    case Read::kFound:
      AppendBulk(out, value);
      break;
    case Read::kAbsent:
      AppendNull(out, proto);
      break;
    case Read::kFailed:
      break;
  }
}

After Executor::Del(Args& a, std::string& out, Call& call) {
  int64_t removed = 0;
  auto remove_all = [&]() -> absl::Status {
    removed = 0;  // a retry starts over
    for (size_t i = 1; i < a.size(); ++i) {
      if (a[i].size() > options_.max_key) continue;  // never stored: nothing to remove
      absl::StatusOr<bool> r = Remove(a[i], out);
      if (!r.ok()) return r.status();
      removed += *r ? 1 : 0;
    }
    return absl::OkStatus();
  };
  // One key: an epoch-scoped removal. Several: one transaction, all or none of them.
  if (a.size() == 2 ? !remove_all().ok() : !WriteAtomically(call, out, remove_all)) {
    return After::kNone;
  }
  AppendInteger(out, removed);
  return After::kNone;
}

bool Executor::Present(std::string_view key) const { return TypeOf(key) != KeyType::kNone; }

After Executor::Exists(Args& a, std::string& out, Call&) {
  int64_t found = 0;
  for (size_t i = 1; i < a.size(); ++i) found += Present(a[i]) ? 1 : 0;
  AppendInteger(out, found);
  return After::kNone;
}

After Executor::MSet(Args& a, std::string& out, Call& call) {
  if (a.size() % 2 != 1) {
    WrongArity(out, a[0]);
    return After::kNone;
  }
  // Validate every key first, so that a too-long key rejects the whole command.
  for (size_t i = 1; i < a.size(); i += 2) {
    if (!KeyOk(a[i], out)) return After::kNone;
  }
  if (PutPairs(a, out, call)) AppendSimple(out, "OK");
  return After::kNone;
}

bool Executor::PutPairs(Args& a, std::string& out, Call& call) {
  return WriteAtomically(call, out, [&]() -> absl::Status {
    for (size_t i = 1; i < a.size(); i += 2) {
      if (!Put(a[i], a[i + 1], out)) return WriteError();
    }
    return absl::OkStatus();
  });
}

After Executor::MSetNx(Args& a, std::string& out, Call& call) {
  if (a.size() % 2 != 1) {
    WrongArity(out, a[0]);
    return After::kNone;
  }
  for (size_t i = 1; i < a.size(); i += 2) {
    if (!KeyOk(a[i], out)) return After::kNone;
  }
  // Under the stripes of every key: none present now means none appears before the puts.
  for (size_t i = 1; i < a.size(); i += 2) {
    if (Present(a[i])) {
      AppendInteger(out, 0);
      return After::kNone;
    }
  }
  if (!PutPairs(a, out, call)) return After::kNone;
  AppendInteger(out, 1);
  return After::kNone;
}

After Executor::MGet(Args& a, std::string& out, Call& call) {
  const size_t start = out.size();
  AppendArrayHeader(out, a.size() - 1);
  std::string value;
  for (size_t i = 1; i < a.size(); ++i) {
    if (a[i].size() <= options_.max_key) {
      // A hash is a null element, as in Redis; a value that fails its checksum an error.
      const Read found = ReadValue(a[i], &value, out, /*wrongtype=*/false);  // before the view
      AppendReadReply(found, value, out, call.proto());
    } else {
      AppendNull(out, call.proto());
    }
    if (out.size() - start > MaxReply()) {
      out.resize(start);
      ReplyTooLarge(out, "MGET", i);
      return After::kNone;
    }
  }
  return After::kNone;
}

size_t Executor::MaxReply() const {
  return std::max(options_.max_reply, options_.limits.max_bulk + 64);
}

void Executor::ReplyTooLarge(std::string& out, std::string_view command, size_t elements) {
  AppendError(out, absl::StrCat("ERR reply too large: ", std::string(command), " passed the ",
                                MaxReply(), "-byte reply limit (--max-reply) after ", elements,
                                " elements; ask for fewer"));
}

After Executor::DbSize(Args&, std::string& out, Call&) {
  // As Redis's: a key past its deadline counts until it is removed (accessed, or by the active
  // expiry cycle).
  AppendInteger(out, static_cast<int64_t>(store_.tree().size() + store_.hashes().tree().size()));
  return After::kNone;
}

uint64_t Executor::SaveCursor(std::string next_key) {
  std::lock_guard<std::mutex> l(cursor_mu_);
  uint64_t id = next_cursor_++;
  if (id == 0) id = next_cursor_++;  // 0 means "start" and "done"
  cursors_.emplace(id, std::move(next_key));
  cursor_order_.push_back(id);
  if (cursor_order_.size() > kMaxCursors) {
    cursors_.erase(cursor_order_.front());
    cursor_order_.pop_front();
  }
  return id;
}

std::optional<std::string> Executor::LoadCursor(uint64_t cursor) {
  std::lock_guard<std::mutex> l(cursor_mu_);
  auto it = cursors_.find(cursor);
  if (it == cursors_.end()) return std::nullopt;
  return it->second;
}

bool Executor::ScanStart(std::string_view arg, std::string* from, std::string& out) {
  uint64_t cursor;
  if (!ParseU64(arg, &cursor)) {
    AppendError(out, "ERR invalid cursor");
    return false;
  }
  from->clear();
  if (cursor == 0) return true;
  std::optional<std::string> at = LoadCursor(cursor);
  if (!at.has_value()) {
    AppendError(out, absl::StrCat("ERR invalid cursor: ", cursor, " is not one of the last ",
                                  kMaxCursors, " cursors this server run returned"));
    return false;
  }
  *from = std::move(*at);
  return true;
}

void Executor::AppendScanReply(bool more, std::string next, const std::vector<std::string>& items,
                               std::string& out) {
  const uint64_t next_cursor = more ? SaveCursor(std::move(next)) : 0;
  AppendArrayHeader(out, 2);
  AppendBulk(out, std::to_string(next_cursor));
  AppendArrayHeader(out, items.size());
  for (const std::string& s : items) AppendBulk(out, s);
}

After Executor::Scan(Args& a, std::string& out, Call&) {
  std::string from;
  if (!ScanStart(a[1], &from, out)) return After::kNone;
  std::optional<std::string> match;
  uint64_t count = 10;
  std::optional<KeyType> type;  // TYPE: only keys of this type (another name: none)
  bool no_type = false;
  for (size_t i = 2; i < a.size(); i += 2) {
    const std::string opt = Lower(a[i]);
    if (i + 1 >= a.size()) {
      AppendError(out, "ERR syntax error");
      return After::kNone;
    }
    if (opt == "match") {
      match = a[i + 1];
    } else if (opt == "count") {
      if (!ParseU64(a[i + 1], &count) || count == 0 || count > options_.max_range) {
        AppendError(out, absl::StrCat("ERR COUNT must be between 1 and ", options_.max_range));
        return After::kNone;
      }
    } else if (opt == "type") {
      const std::string t = Lower(a[i + 1]);
      if (t == "string") {
        type = KeyType::kString;
      } else if (t == "hash") {
        type = KeyType::kHash;
      } else {
        no_type = true;  // a type pmrt has no keys of (Redis's list, set, ...)
      }
    } else {
      AppendError(out, "ERR syntax error");
      return After::kNone;
    }
  }
  // COUNT keys are examined (as in Redis, MATCH filters after); one more is looked at to
  // learn where the next call starts.
  std::vector<std::string> keys;
  std::string next;
  bool more = false;
  uint64_t seen = 0;
  size_t key_bytes = 0;
  bool too_large = false;
  VisitKeys(std::move(from), [&](std::string_view k, KeyType t) {
    if (seen == count) {
      next.assign(k);
      more = true;
      return false;
    }
    ++seen;
    if (!no_type && (!type || *type == t) && (!match || GlobMatch(*match, k)) && !Expired(k)) {
      keys.emplace_back(k);
      key_bytes += k.size() + 16;
      if (key_bytes > MaxReply()) {
        too_large = true;
        return false;
      }
    }
    return true;
  });
  if (too_large) {
    ReplyTooLarge(out, "SCAN", keys.size());
    return After::kNone;
  }
  AppendScanReply(more, std::move(next), keys, out);
  return After::kNone;
}

After Executor::Range(Args& a, std::string& out, Call&) {
  uint64_t limit = 1000;
  if (a.size() == 5 && Lower(a[3]) == "limit") {
    if (!ParseU64(a[4], &limit) || limit == 0 || limit > options_.max_range) {
      AppendError(out, absl::StrCat("ERR LIMIT must be between 1 and ", options_.max_range));
      return After::kNone;
    }
  } else if (a.size() != 3) {
    AppendError(out, "ERR syntax error: PMRT.RANGE start end [LIMIT n]");
    return After::kNone;
  }
  // The pairs are encoded into a side buffer first: the array header needs their count.
  std::string body;
  uint64_t pairs = 0;
  bool too_large = false;
  auto emit = [&](std::string_view k, std::string_view v) {
    if (Expired(k)) return true;
    AppendBulk(body, k);
    AppendBulk(body, v);
    if (body.size() > MaxReply()) {
      too_large = true;
      return false;
    }
    return ++pairs < limit;
  };
  // An empty end: no bound.
  if (absl::Status st = SlicedScan(store_.tree(), std::string(a[1]), a[2], /*values=*/true,
                                   settings_.verify_reads.load(std::memory_order_relaxed), emit);
      !st.ok()) {
    AppendError(out, absl::StrCat("ERR ", st.message()));
    return After::kNone;
  }
  if (too_large) {
    ReplyTooLarge(out, "PMRT.RANGE", 2 * pairs);
    return After::kNone;
  }
  AppendArrayHeader(out, 2 * pairs);
  out.append(body);
  return After::kNone;
}

std::vector<std::pair<std::string, std::string>> Executor::ConfigValues() const {
  return {
      {"save", ""},  // no snapshots: the pool is the database
      {"appendonly", "no"},
      {"databases", "1"},
      {"port", std::to_string(options_.port)},
      {"bind", options_.bind},
      {"requirepass", settings_.requirepass()},
      {"maxclients", std::to_string(settings_.max_clients.load(std::memory_order_relaxed))},
      {"timeout", std::to_string(settings_.idle_timeout_s.load(std::memory_order_relaxed))},
      {"hz", std::to_string(options_.hz)},
      {"pmrt-verify-reads", settings_.verify_reads.load(std::memory_order_relaxed) ? "yes" : "no"},
      {"proto-max-bulk-len", std::to_string(options_.limits.max_bulk)},
      {"pmrt-max-key-len", std::to_string(options_.max_key)},
      {"pmrt-max-reply", std::to_string(options_.max_reply)},
      {"pmrt-epoch-ms", std::to_string(options_.epoch_ms)},
      {"pmrt-threads", std::to_string(options_.threads)},
      {"pmrt-pool", store_.pool().path()},
  };
}

After Executor::Config(Args& a, std::string& out, Call& call) {
  const std::string sub = Lower(a[1]);
  if (sub == "set") return ConfigSet(a, out, call);
  if (sub != "get") {
    AppendError(out, absl::StrCat("ERR CONFIG ", Quote(a[1]),
                                  " is not supported by pmrt (only CONFIG GET and CONFIG SET)"));
    return After::kNone;
  }
  if (a.size() < 3) {
    WrongArity(out, "config|get");
    return After::kNone;
  }
  std::vector<std::pair<std::string, std::string>> hits;
  for (const auto& kv : ConfigValues()) {
    for (size_t i = 2; i < a.size(); ++i) {
      if (GlobMatch(a[i], kv.first, /*nocase=*/true)) {
        hits.push_back(kv);
        break;
      }
    }
  }
  AppendMapHeader(out, hits.size(), call.proto());
  for (const auto& [name, value] : hits) {
    AppendBulk(out, name);
    AppendBulk(out, value);
  }
  return After::kNone;
}

After Executor::ConfigSet(Args& a, std::string& out, Call&) {
  if (a.size() < 4 || a.size() % 2 != 0) {
    WrongArity(out, "config|set");
    return After::kNone;
  }
  auto failed = [&](const std::string& name, const std::string& why) {
    AppendError(out, absl::StrCat("ERR CONFIG SET failed (possibly related to argument '", name,
                                  "') - ", why));
    return After::kNone;
  };
  const auto known = ConfigValues();
  // Every pair is checked before any is applied: a bad one changes nothing (as in Redis).
  std::optional<int> timeout, max_clients;
  std::optional<bool> verify;
  std::optional<std::string> password;
  std::vector<std::string> seen;
  for (size_t i = 2; i < a.size(); i += 2) {
    const std::string name = Lower(a[i]);
    const std::string& v = a[i + 1];
    if (std::find(seen.begin(), seen.end(), name) != seen.end()) {
      return failed(name, "duplicate parameter");
    }
    seen.push_back(name);
    int64_t n = 0;
    const bool is_int = absl::SimpleAtoi(v, &n);
    if (name == "timeout") {
      if (!is_int || n < 0 || n > (1 << 30)) {
        return failed(name, "argument couldn't be parsed into an integer");
      }
      timeout = static_cast<int>(n);
    } else if (name == "maxclients") {
      if (!is_int || n < 1 || n > (1 << 24)) {
        return failed(name, "argument must be between 1 and 16777216 inclusive");
      }
      max_clients = static_cast<int>(n);
    } else if (name == "pmrt-verify-reads") {
      const std::string b = Lower(v);
      if (b != "yes" && b != "no") return failed(name, "argument must be 'yes' or 'no'");
      verify = b == "yes";
    } else if (name == "requirepass") {
      password = v;
    } else if (std::any_of(known.begin(), known.end(),
                           [&](const auto& kv) { return kv.first == name; })) {
      return failed(name, "can't set immutable config");
    } else {
      AppendError(out, absl::StrCat("ERR Unknown option or number of arguments for CONFIG SET - ",
                                    Quote(a[i])));
      return After::kNone;
    }
  }
  if (timeout) settings_.idle_timeout_s.store(*timeout, std::memory_order_relaxed);
  if (max_clients) settings_.max_clients.store(*max_clients, std::memory_order_relaxed);
  if (verify) settings_.verify_reads.store(*verify, std::memory_order_relaxed);
  // A new password applies to connections made (or AUTH sent) from now on; connections that
  // have authenticated stay so, as in Redis.
  if (password) settings_.set_requirepass(std::move(*password));
  AppendSimple(out, "OK");
  return After::kNone;
}

namespace {

// Redis's bytesToHuman: "512B", "1.50K", "2.00M", "3.25G".
std::string HumanBytes(uint64_t n) {
  const double d = static_cast<double>(n);
  char buf[32];
  if (n < 1024) return absl::StrCat(n, "B");
  if (n < (1ull << 20)) {
    std::snprintf(buf, sizeof(buf), "%.2fK", d / 1024);
  } else if (n < (1ull << 30)) {
    std::snprintf(buf, sizeof(buf), "%.2fM", d / (1 << 20));
  } else {
    std::snprintf(buf, sizeof(buf), "%.2fG", d / (1ull << 30));
  }
  return buf;
}

// The resident set of this process in bytes (/proc/self/statm), 0 when unknown.
uint64_t ResidentBytes() {
  FILE* f = std::fopen("/proc/self/statm", "r");
  if (f == nullptr) return 0;
  unsigned long long size = 0, resident = 0;
  const int got = std::fscanf(f, "%llu %llu", &size, &resident);
  std::fclose(f);
  return got == 2 ? resident * static_cast<uint64_t>(sysconf(_SC_PAGESIZE)) : 0;
}

std::string OsName() {
  utsname u;
  if (uname(&u) != 0) return "unknown";
  return absl::StrCat(u.sysname, " ", u.release, " ", u.machine);
}

}  // namespace

std::string Executor::InfoText(const std::vector<std::string>& sections) const {
  auto wanted = [&](std::string_view name) {
    if (sections.empty()) return true;
    for (const std::string& s : sections) {
      if (s == "all" || s == "default" || s == "everything" || s == name) return true;
    }
    return false;
  };
  std::string s;
  auto add = [&](const std::string& name, auto&& body) {
    if (!wanted(Lower(name))) return;
    absl::StrAppend(&s, s.empty() ? "" : "\r\n", "# ", name, "\r\n", body());
  };
  const ServerStats st = counters_.Snapshot();
  const auto uptime = std::chrono::duration_cast<std::chrono::seconds>(
      std::chrono::steady_clock::now() - counters_.started);
  add("Server", [&] {
    return absl::StrCat("redis_version:", kRedisVersion, "\r\n", "redis_mode:standalone\r\n",
                        "os:", OsName(), "\r\n", "arch_bits:", sizeof(void*) * 8, "\r\n",
                        "process_id:", getpid(), "\r\n", "tcp_port:", options_.port, "\r\n",
                        "uptime_in_seconds:", uptime.count(), "\r\n",
                        "uptime_in_days:", uptime.count() / 86400, "\r\n",
                        "config_file:", options_.config_file, "\r\n", "pmrt_version:", PMRT_VERSION,
                        "\r\n", "pmrt_server:1\r\n", "pmrt_threads:", options_.threads, "\r\n");
  });
  add("Clients", [&] {
    return absl::StrCat("connected_clients:", st.connected_clients, "\r\n",
                        "maxclients:", settings_.max_clients.load(std::memory_order_relaxed),
                        "\r\n", "blocked_clients:0\r\n", "pmrt_auth_required:",
                        settings_.auth_required.load(std::memory_order_relaxed) ? 1 : 0, "\r\n");
  });
  add("Memory", [&] {
    const alloc::HeapStats hs = store_.heap().Stats();
    const uint64_t rss = ResidentBytes();
    return absl::StrCat(
        "used_memory:", hs.used_bytes, "\r\n", "used_memory_human:", HumanBytes(hs.used_bytes),
        "\r\n", "used_memory_rss:", rss, "\r\n", "used_memory_rss_human:", HumanBytes(rss), "\r\n",
        "maxmemory:0\r\n", "maxmemory_human:0B\r\n", "maxmemory_policy:noeviction\r\n",
        "mem_allocator:pmrt\r\n", "pmrt_pool_size:", store_.pool().size(), "\r\n",
        "pmrt_heap_free_bytes:", hs.free_bytes, "\r\n");
  });
  add("Persistence", [&] {
    // What the open before this server run found and did (the recovery of a crash).
    const auto open_us =
        std::chrono::duration_cast<std::chrono::microseconds>(store_.open_time()).count();
    const RuntimeStats rs = store_.runtime().stats();
    const bool clean = store_.pool().was_clean_shutdown();
    std::string rolled_back = "none";
    if (!clean) {
      // The last range recorded before this execution: the epochs the crash interrupted.
      for (const auto& [lo, hi] : store_.epochs().failed_ranges()) {
        if (hi < store_.epochs().execution_first()) rolled_back = absl::StrCat(lo, "-", hi);
      }
    }
    const epoch::ManagerStats es = store_.epochs().stats();
    return absl::StrCat(
        "loading:0\r\n", "async_loading:0\r\n", "rdb_changes_since_last_save:0\r\n",
        "rdb_bgsave_in_progress:0\r\n", "rdb_last_bgsave_status:ok\r\n", "aof_enabled:0\r\n",
        "aof_rewrite_in_progress:0\r\n", "pmrt_durability:epochs\r\n",
        "pmrt_epoch_interval_ms:", options_.epoch_ms, "\r\n",
        "pmrt_epoch_completed:", store_.epochs().completed(), "\r\n",
        "pmrt_last_open_unix_ms:", start_unix_ms_, "\r\n", "pmrt_last_open_clean:", clean ? 1 : 0,
        "\r\n", "pmrt_last_open_time_us:", open_us, "\r\n",
        "pmrt_last_recovery_rolled_back_epochs:", rolled_back, "\r\n",
        "pmrt_last_recovery_log_entries_replayed:", es.log_entries_replayed, "\r\n",
        "pmrt_last_recovery_index_ops_replayed:", rs.replayed_index_ops, "\r\n",
        "pmrt_failed_epoch_ranges:", store_.epochs().failed_ranges().size(), "\r\n");
  });
  add("Stats", [&] {
    return absl::StrCat("total_connections_received:", st.connections_received, "\r\n",
                        "rejected_connections:", st.rejected_connections, "\r\n",
                        "total_commands_processed:", st.commands_processed, "\r\n",
                        "protocol_errors:", st.protocol_errors, "\r\n",
                        "expired_keys:", expired_keys(), "\r\n", "pmrt_syncs:", st.syncs, "\r\n",
                        "pmrt_idle_closed:", st.idle_closed, "\r\n");
  });
  add("Replication", [&] { return std::string("role:master\r\nconnected_slaves:0\r\n"); });
  Pool& pool = store_.pool();
  add("Pool", [&] {
    return absl::StrCat("pool_path:", pool.path(), "\r\n", "pool_size:", pool.size(), "\r\n",
                        "pool_grow_by:", pool.grow_by(), "\r\n", "pool_growths:", pool.growths(),
                        "\r\n", "pool_max_size:", pool.max_size(), "\r\n");
  });
  add("Epoch", [&] {
    epoch::Manager& epochs = store_.epochs();
    const epoch::ManagerStats es = epochs.stats();
    return absl::StrCat(
        "epoch_current:", epochs.current(), "\r\n", "epoch_completed:", epochs.completed(), "\r\n",
        "epoch_interval_ms:", options_.epoch_ms, "\r\n", "epoch_advances:", es.advances, "\r\n",
        "epoch_lines_flushed:", es.lines_flushed, "\r\n",
        "epoch_boundary_time_us:", es.boundary_time.count() / 1000, "\r\n",
        "epoch_log_entries:", es.log_entries, "\r\n");
  });
  add("Heap", [&] {
    const alloc::HeapStats hs = store_.heap().Stats();
    return absl::StrCat("heap_bytes:", hs.heap_bytes, "\r\n", "heap_used_bytes:", hs.used_bytes,
                        "\r\n", "heap_free_bytes:", hs.free_bytes, "\r\n",
                        "heap_largest_free_extent:", hs.largest_free_extent, "\r\n",
                        "heap_free_in_small_chunks:", hs.free_in_small_chunks, "\r\n",
                        "heap_chunks_returned:", hs.chunks_returned, "\r\n",
                        "heap_live_blocks:", hs.live_blocks, "\r\n");
  });
  add("Keyspace", [&] {
    return absl::StrCat("db0:keys=", store_.tree().size() + store_.hashes().tree().size(),
                        ",expires=", store_.expires().tree().size(), ",avg_ttl=0\r\n");
  });
  return s;
}

After Executor::Info(Args& a, std::string& out, Call& call) {
  std::vector<std::string> sections;
  for (size_t i = 1; i < a.size(); ++i) sections.push_back(Lower(a[i]));
  AppendVerbatim(out, InfoText(sections), call.proto());
  return After::kNone;
}

After Executor::Command(Args& a, std::string& out, Call& call) {
  // redis-cli asks for COMMAND DOCS at startup to offer hints; an empty answer means "none".
  if (a.size() > 1 && Lower(a[1]) == "count") {
    AppendInteger(out, static_cast<int64_t>(commands_.size()));
  } else if (a.size() > 1 && Lower(a[1]) == "docs") {
    AppendMapHeader(out, 0, call.proto());  // a map in RESP3, as Redis's
  } else {
    AppendArrayHeader(out, 0);
  }
  return After::kNone;
}

After Executor::Sync(Args&, std::string&, Call& call) {
  // Every write acknowledged before this point (to this client or any other) returned from the
  // tree before now, so it ran in an epoch <= current(): once that epoch is complete, all of
  // them are durable.
  *call.sync_epoch = store_.epochs().current();
  return After::kSync;
}

After Executor::Quit(Args&, std::string& out, Call&) {
  AppendSimple(out, "OK");
  return After::kClose;
}

After Executor::Select(Args& a, std::string& out, Call&) {
  if (a[1] == "0") {
    AppendSimple(out, "OK");
  } else {
    AppendError(out, "ERR DB index is out of range (pmrt has one database, 0)");
  }
  return After::kNone;
}

After Executor::FlushAll(Args& a, std::string& out, Call&) {
  if (a.size() > 2 || (a.size() == 2 && Lower(a[1]) != "sync" && Lower(a[1]) != "async")) {
    AppendError(out, "ERR syntax error");
    return After::kNone;
  }
  // Every stripe held: no write runs meanwhile, and readers, told a multi-key write runs, wait
  // for the stripes of their keys. Every watcher is marked (a superset of Redis's: it marks the
  // watchers of keys that existed).
  KeyLocks::Held held = locks_.LockAll();
  AtomicWrite announce(*this);
  if (watchers_.load(std::memory_order_relaxed) != 0) {
    std::lock_guard<std::mutex> l(watch_mu_);
    for (auto& [key, sessions] : watched_) {
      for (Session* w : sessions) w->watch_touched.store(true, std::memory_order_relaxed);
    }
  }
  if (absl::Status st = store_.FlushAll(); !st.ok()) {
    AppendError(out, absl::StrCat("ERR FLUSHALL failed: ", st.message(),
                                  "; the pool's mark makes the next open finish it"));
    return After::kNone;
  }
  AppendSimple(out, "OK");
  return After::kNone;
}

}  // namespace pmrt::server
