// Key expiry for the Executor (commands.h): EXPIRE, PEXPIRE, EXPIREAT, PEXPIREAT (with NX, XX,
// GT, LT), TTL, PTTL, EXPIRETIME, PEXPIRETIME, PERSIST, SETEX, PSETEX, GETEX, the deadline
// primitives every command uses, and the active expiry cycle. docs/server.md, "Expiry", has the
// contract.
//
// A deadline lives in index db0.expires (store.h), beside the value in db0. Invariants:
//   1. Every key of db0.expires is a key of db0. A write that changes both runs in one epoch
//      guard (RunWrite's RunInEpoch, ExpireIfNeeded, FLUSHALL) or one transaction (EXEC, MSET,
//      RENAME, COPY, multi-key DEL), so a crash keeps both changes or neither. One exception:
//      a crash replays a committed transaction's operations over the state at the start of the
//      failed epoch, so a transaction's EXPIRE of a key whose epoch-scoped SET was rolled back
//      leaves a deadline without a value. Such an orphan reads as no key, and ExpireIfNeeded
//      removes it before any write of the key (or the active cycle at its deadline). The other
//      direction cannot happen: inside a transaction a deadline's removal is always logged
//      (ClearDeadline), so a value the transaction wrote never gets back a rolled-back one.
//   2. Writers order their stores for readers, which take no lock and read the deadline first,
//      then the value: a deadline is written before its value (SET ... EX), a value is removed
//      before its deadline (DEL, expiry), and a value replaced before its deadline is removed
//      (SET). So a reader never pairs a live deadline's absence with a value it should not see.
//   3. A key is gone once the clock is past its deadline, whether or not it is removed yet:
//      reads treat it as absent (ReadValue, Present), writes remove it first under its stripe
//      (RunWrite, EXEC, WATCH), and the active cycle removes it without any access.
#include <chrono>
#include <cstdint>
#include <cstring>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "tools/server/commands.h"
#include "tools/server/resp.h"

namespace pmrt::server {
namespace {

using After = Executor::After;

void InvalidExpire(std::string_view command, std::string& out) {
  AppendError(out, absl::StrCat("ERR invalid expire time in '", std::string(command), "' command"));
}

int64_t UnixMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// The running command's time snapshot (CommandClock); 0: none.
thread_local int64_t t_command_ms = 0;

}  // namespace

CommandClock::CommandClock() : saved_(t_command_ms) { t_command_ms = UnixMs(); }

CommandClock::~CommandClock() { t_command_ms = saved_; }

int64_t CommandClock::NowMs() { return t_command_ms != 0 ? t_command_ms : UnixMs(); }

std::string EncodeInt64(int64_t v) {
  std::string s(sizeof(v), '\0');
  std::memcpy(s.data(), &v, sizeof(v));  // host order (x86: little-endian)
  return s;
}

std::optional<int64_t> DecodeInt64(std::string_view s) {
  if (s.size() != sizeof(int64_t)) return std::nullopt;
  int64_t v;
  std::memcpy(&v, s.data(), sizeof(v));
  return v;
}

bool TakeExpiryOption(std::string_view opt, const std::vector<std::string>& a, size_t* i,
                      bool allowed, ExpiryOption* e) {
  if (opt != "EX" && opt != "PX" && opt != "EXAT" && opt != "PXAT") return false;
  if (!allowed || (!e->name.empty() && e->name != opt) || *i + 1 >= a.size()) return false;
  e->name = std::string(opt);
  e->arg = a[++*i];
  return true;
}

bool ExpiryDeadline(const ExpiryOption& e, std::string_view command, int64_t* deadline_ms,
                    std::string& out) {
  return ParseExpiry(e.arg, e.name == "EX" || e.name == "EXAT",
                     /*relative=*/e.name == "EX" || e.name == "PX", command, deadline_ms, out);
}

bool ParseExpiry(std::string_view arg, bool seconds, bool relative, std::string_view command,
                 int64_t* deadline_ms, std::string& out) {
  int64_t v;
  if (!ParseI64(arg, &v)) {
    AppendError(out, kNotInteger);
    return false;
  }
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  if (v <= 0 || (seconds && v > kMax / 1000)) {
    InvalidExpire(command, out);
    return false;
  }
  if (seconds) v *= 1000;
  if (relative) {
    const int64_t now = CommandClock::NowMs();
    if (v > kMax - now) {
      InvalidExpire(command, out);
      return false;
    }
    v += now;
  }
  *deadline_ms = v;
  return true;
}

std::optional<int64_t> Executor::Deadline(std::string_view key) const {
  std::optional<int64_t> d;
  store_.expires().tree().read(key, [&](std::string_view v) { d = DecodeInt64(v); });
  return d;
}

void Executor::NoteDeadlineWrite() {
  // The epoch the write ran in, or a later one (read after it): never too small.
  const uint64_t e = store_.epochs().current();
  uint64_t seen = deadline_epoch_.load(std::memory_order_relaxed);
  while (seen < e && !deadline_epoch_.compare_exchange_weak(seen, e, std::memory_order_release,
                                                            std::memory_order_relaxed)) {
  }
}

bool Executor::DeadlineWritesPending() const {
  return deadline_epoch_.load(std::memory_order_acquire) > store_.epochs().completed();
}

bool Executor::Expired(std::string_view key) const {
  const std::optional<int64_t> d = Deadline(key);
  return d.has_value() && NowMs() > *d;  // as Redis: gone once the clock is past the deadline
}

Executor::Expiry Executor::ExpireIfNeeded(std::string_view key, std::string& out) {
  const std::optional<int64_t> d = Deadline(key);
  if (!d.has_value()) return Expiry::kNone;
  // A deadline without its value (a transaction's EXPIRE replayed after a crash over a state
  // whose epoch-scoped SET of the key was rolled back) goes now too: a new value of the key
  // must not inherit it.
  const bool hash = HashLength(key).has_value();
  const bool orphan = !hash && !store_.tree().read(key, [](std::string_view) {});
  if (!orphan && NowMs() <= *d) return Expiry::kLive;
  std::string ignored;
  absl::Status st;
  if (hash) {
    // A hash goes as one transaction, as every change of one (RunInTransaction).
    AtomicWrite announce(*this);
    st = Atomically([&] { return Remove(key, ignored).status(); }, [] {});
  } else {
    st = EpochAtomically([&] { return Remove(key, ignored).status(); }, [] {},
                         /*durable=*/false);
  }
  if (!st.ok()) {
    AppendError(out,
                absl::StrCat("ERR key ", std::string(key.substr(0, 128)),
                             " is past its deadline and could not be removed: ", st.message()));
    return Expiry::kFailed;
  }
  if (!orphan) expired_keys_.fetch_add(1, std::memory_order_relaxed);
  return Expiry::kNone;
}

bool Executor::SetDeadline(std::string_view key, int64_t deadline_ms, std::string& out) {
  RecordUndo(key, Space::kDeadline);
  absl::StatusOr<ds::PutResult> r = store_.expires().put(key, EncodeInt64(deadline_ms));
  if (r.ok()) {
    if (!store_.engine().InTransaction()) NoteDeadlineWrite();
    Touch(key);
    return true;
  }
  DropLastUndo();
  if (r.status().code() == absl::StatusCode::kResourceExhausted) {
    AppendError(out, absl::StrCat("OOM pool ", store_.pool().path(),
                                  " has no room for the key's deadline; the key is unchanged"));
  } else {
    AppendError(out, absl::StrCat("ERR ", r.status().message()));
  }
  WriteError() = r.status();
  return false;
}

absl::StatusOr<bool> Executor::ClearDeadline(std::string_view key, std::string& out) {
  // Inside a transaction the removal is logged even when there is no deadline (Index::remove):
  // its replay after a crash then clears a deadline that an epoch-scoped write of the failed
  // epoch had removed and the rollback brought back (when such a write may be pending).
  // Outside one, no deadline costs one lookup.
  const bool in_txn = store_.engine().InTransaction();
  if ((!in_txn || !DeadlineWritesPending()) && !Deadline(key).has_value()) return false;
  RecordUndo(key, Space::kDeadline);
  absl::StatusOr<bool> r = store_.expires().remove(key);
  if (r.ok()) {
    if (!in_txn) NoteDeadlineWrite();
    if (*r) Touch(key);
    return r;
  }
  DropLastUndo();
  if (r.status().code() == absl::StatusCode::kResourceExhausted) {
    AppendError(out, absl::StrCat("OOM pool ", store_.pool().path(),
                                  " has no room to log the removal of the key's deadline; the key "
                                  "is unchanged"));
  } else {
    AppendError(out, absl::StrCat("ERR ", r.status().message()));
  }
  WriteError() = r.status();
  return r;
}

void Executor::ActiveExpireCycle(std::chrono::milliseconds budget) {
  std::lock_guard<std::mutex> l(sweep_mu_);
  if (store_.pool().failed()) return;  // writes are refused: nothing could be removed
  constexpr size_t kBatch = 20;        // Redis's ACTIVE_EXPIRE_CYCLE_KEYS_PER_LOOP
  const auto end = std::chrono::steady_clock::now() + budget;
  for (;;) {
    // A batch of deadlines, copied under one tree scan; the keys are then locked and removed
    // one at a time outside it (KeyLocks invariant 2).
    const CommandClock clock;  // one time for the batch's decisions
    std::vector<std::pair<std::string, int64_t>> batch;
    store_.expires().tree().scan(sweep_from_, kBatch, [&](std::string_view k, std::string_view v) {
      batch.emplace_back(std::string(k), DecodeInt64(v).value_or(0));
      return true;
    });
    const bool at_end = batch.size() < kBatch;
    if (at_end) {
      sweep_from_.clear();  // the next cycle starts over
    } else {
      sweep_from_ = batch.back().first;
      sweep_from_.push_back('\0');  // the smallest key after the last one
    }
    const int64_t now = NowMs();
    size_t expired = 0;
    for (const auto& [key, deadline] : batch) {
      if (now <= deadline) continue;
      KeyLocks::Held held = locks_.LockOne(key);
      std::string ignored;
      if (ExpireIfNeeded(key, ignored) == Expiry::kNone) ++expired;
    }
    // As Redis: go on while the batches are more than 10% stale, within the budget.
    if (at_end || expired * 10 <= batch.size() || std::chrono::steady_clock::now() >= end) return;
  }
}

After Executor::Expire(Args& a, std::string& out, Call&) {
  const std::string name = absl::AsciiStrToLower(a[0]);
  const bool seconds = name == "expire" || name == "expireat";
  const bool absolute = name.ends_with("at");
  bool nx = false, xx = false, gt = false, lt = false;
  for (size_t i = 3; i < a.size(); ++i) {
    const std::string opt = absl::AsciiStrToLower(a[i]);
    if (opt == "nx") {
      nx = true;
    } else if (opt == "xx") {
      xx = true;
    } else if (opt == "gt") {
      gt = true;
    } else if (opt == "lt") {
      lt = true;
    } else {
      AppendError(out, absl::StrCat("ERR Unsupported option ", a[i].substr(0, 128)));
      return After::kNone;
    }
  }
  if (nx && (xx || gt || lt)) {
    AppendError(out, "ERR NX and XX, GT or LT options at the same time are not compatible");
    return After::kNone;
  }
  if (gt && lt) {
    AppendError(out, "ERR GT and LT options at the same time are not compatible");
    return After::kNone;
  }
  int64_t when;
  if (!ParseI64(a[2], &when)) {
    AppendError(out, kNotInteger);
    return After::kNone;
  }
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  constexpr int64_t kMin = std::numeric_limits<int64_t>::min();
  if (seconds && (when > kMax / 1000 || when < kMin / 1000)) {
    InvalidExpire(name, out);
    return After::kNone;
  }
  if (seconds) when *= 1000;
  const int64_t base = absolute ? 0 : NowMs();
  if (when > kMax - base) {
    InvalidExpire(name, out);
    return After::kNone;
  }
  when += base;
  if (!Present(a[1])) {
    AppendInteger(out, 0);
    return After::kNone;
  }
  // No deadline counts as an infinite one (GT never raises it, LT always lowers it).
  const std::optional<int64_t> current = Deadline(a[1]);
  if ((nx && current.has_value()) || (xx && !current.has_value()) ||
      (gt && (!current.has_value() || when <= *current)) ||
      (lt && current.has_value() && when >= *current)) {
    AppendInteger(out, 0);
    return After::kNone;
  }
  // A deadline already past removes the key now (as Redis's checkAlreadyExpired).
  const bool done = when <= NowMs() ? Remove(a[1], out).ok() : SetDeadline(a[1], when, out);
  if (done) AppendInteger(out, 1);
  return After::kNone;
}

After Executor::TimeToLive(Args& a, std::string& out, Call&) {
  const std::string name = absl::AsciiStrToLower(a[0]);
  const bool ms = name[0] == 'p';
  const bool absolute = name.ends_with("time");
  // The deadline, whether the key is there, and the deadline again, until both reads of the
  // deadline agree: the pair then is one a writer's order allows (invariant 2), the state
  // before a write or after it.
  std::optional<int64_t> deadline;
  bool present = false;
  for (;;) {
    deadline = Deadline(a[1]);
    present = a[1].size() <= options_.max_key &&
              (store_.tree().read(a[1], [](std::string_view) {}) || HashLength(a[1]).has_value());
    if (Deadline(a[1]) == deadline) break;
  }
  if (!present || (deadline.has_value() && NowMs() > *deadline)) {
    AppendInteger(out, -2);
  } else if (!deadline.has_value()) {
    AppendInteger(out, -1);
  } else {
    const int64_t left = std::max<int64_t>(absolute ? *deadline : *deadline - NowMs(), 0);
    // Seconds rounded to the nearest, without overflow at a deadline of INT64_MAX ms.
    AppendInteger(out, ms ? left : left / 1000 + (left % 1000 >= 500 ? 1 : 0));
  }
  return After::kNone;
}

After Executor::Persist(Args& a, std::string& out, Call&) {
  if (!Present(a[1])) {
    AppendInteger(out, 0);
    return After::kNone;
  }
  const absl::StatusOr<bool> removed = ClearDeadline(a[1], out);
  if (removed.ok()) AppendInteger(out, *removed ? 1 : 0);
  return After::kNone;
}

After Executor::SetEx(Args& a, std::string& out, Call&) {
  const std::string name = absl::AsciiStrToLower(a[0]);
  int64_t deadline;
  if (!ParseExpiry(a[2], /*seconds=*/name == "setex", /*relative=*/true, name, &deadline, out) ||
      !KeyOk(a[1], out)) {
    return After::kNone;
  }
  if (SetDeadline(a[1], deadline, out) && Put(a[1], a[3], out, Ttl::kKeep)) {
    AppendSimple(out, "OK");
  }
  return After::kNone;
}

After Executor::GetEx(Args& a, std::string& out, Call& call) {
  ExpiryOption expiry;
  bool persist = false;
  for (size_t i = 2; i < a.size(); ++i) {
    const std::string opt = absl::AsciiStrToUpper(a[i]);
    if (TakeExpiryOption(opt, a, &i, !persist, &expiry)) continue;
    if (opt == "PERSIST" && expiry.name.empty()) {
      persist = true;
    } else {
      AppendError(out, "ERR syntax error");
      return After::kNone;
    }
  }
  int64_t deadline = 0;
  if (!expiry.name.empty() && !ExpiryDeadline(expiry, "getex", &deadline, out)) {
    return After::kNone;
  }
  if (!KeyOk(a[1], out)) return After::kNone;
  std::string value;
  const Read found = ReadValue(a[1], &value, out);
  if (found == Read::kFound) {
    bool done = true;
    if (!expiry.name.empty()) {
      done = deadline <= NowMs() ? Remove(a[1], out).ok() : SetDeadline(a[1], deadline, out);
    } else if (persist) {
      done = ClearDeadline(a[1], out).ok();
    }
    if (!done) return After::kNone;
  }
  AppendReadReply(found, value, out, call.proto());
  return After::kNone;
}

}  // namespace pmrt::server
