// MULTI, EXEC, DISCARD, WATCH and UNWATCH, and the atomic runner every multi-key write uses
// (Executor::Atomically and its fallback). docs/server.md, "Transactions", has the contract.
//
// EXEC holds the stripes of every key its queued commands name, and of every key the connection
// watches, for its whole run (taken before its transaction begins: KeyLocks invariant 2). With
// them held no other write touches those keys, so a watched key found untouched stays so until
// the end, and the commands run as one pmrt transaction: committed (durable) before the reply,
// or aborted with nothing changed.
//
// A transaction's index operations must fit in one log record (docs/durability.md); a larger
// one (big values) runs instead under one epoch guard, each write's previous state kept in
// memory: a failure undoes them in the same guard, so the epoch holds all of it or none, and the
// reply waits for that epoch to complete (Sync). Either way a write that finds no room inside
// the transaction's guard (a heap that needs a boundary to reuse frees) is retried after an
// epoch advance, twice at most.
#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "tools/server/commands.h"
#include "tools/server/resp.h"

namespace pmrt::server {
namespace {

using After = Executor::After;

// The most commands one MULTI queues (their arguments are bounded by MaxReply() bytes); past
// either bound the command is refused and EXEC discards the transaction.
constexpr size_t kMaxQueued = 1 << 20;

// The states of the keys the running atomic write changed, oldest first (RecordUndo).
thread_local std::vector<KeyState>* t_undo = nullptr;

size_t ArgBytes(const std::vector<std::string>& argv) {
  size_t n = 0;
  for (const std::string& s : argv) n += s.size();
  return n;
}

}  // namespace

Index& Executor::IndexOf(Space space) const {
  switch (space) {
    case Space::kDeadline:
      return store_.expires();
    case Space::kHash:
      return store_.hashes();
    case Space::kField:
      return store_.fields();
    case Space::kValue:
      break;
  }
  return store_.db();
}

void Executor::RecordUndo(std::string_view key, Space space) {
  if (t_undo == nullptr) return;
  UndoEntry e{std::string(key), std::nullopt, space};
  std::string v;
  if (IndexOf(space).tree().get(key, &v)) e.value = std::move(v);
  t_undo->push_back(std::move(e));
}

void Executor::DropLastUndo() {
  if (t_undo != nullptr && !t_undo->empty()) t_undo->pop_back();
}

namespace {

// The first entry of each key of each index: its state before the command's first write of it.
// Restoring these (in any order) undoes every write.
std::vector<KeyState> FirstPerKey(std::vector<KeyState> undo) {
  absl::flat_hash_set<std::pair<std::string, Space>> seen;
  std::vector<KeyState> out;
  for (KeyState& e : undo)
    if (seen.insert({e.key, e.space}).second) out.push_back(std::move(e));
  return out;
}

}  // namespace

std::vector<KeyState> Executor::Restore(std::vector<KeyState> entries) {
  std::vector<UndoEntry> left;
  for (UndoEntry& e : entries) {
    ds::DurableMasstree& tree = IndexOf(e.space).tree();
    std::string v;
    const bool has = tree.get(e.key, &v);
    if (has == e.value.has_value() && (!has || v == *e.value)) continue;  // as it was
    const bool done = e.value.has_value() ? tree.put(e.key, *e.value) != ds::PutResult::kNoMemory
                                          : tree.remove(e.key) || !tree.get(e.key, &v);
    if (e.space == Space::kDeadline) NoteDeadlineWrite();  // a raw tree write: epoch-scoped
    if (!done) left.push_back(std::move(e));
  }
  return left;
}

absl::Status Executor::RestoreAfterGuard(std::vector<UndoEntry> entries) {
  // Outside every guard a write can wait for room (a boundary that makes frees reusable).
  const std::vector<UndoEntry> left = Restore(std::move(entries));
  if (left.empty()) return absl::OkStatus();
  return absl::DataLossError(
      absl::StrCat("the store had no room to undo the writes of a failed command on ", left.size(),
                   " key(s), among them '", left[0].key, "': they hold the command's values"));
}

absl::Status Executor::Atomically(const std::function<absl::Status()>& fn,
                                  const std::function<void()>& reset) {
  constexpr int kAttempts = 3;
  absl::Status st;
  for (int attempt = 0; attempt < kAttempts; ++attempt) {
    if (attempt > 0) reset();
    txn::Engine& engine = store_.engine();
    std::vector<UndoEntry> undo;
    st = engine.Begin();
    if (st.ok()) {
      WriteError() = absl::OkStatus();
      t_undo = &undo;
      st = fn();
      t_undo = nullptr;
      if (st.ok()) {
        st = engine.Commit();  // a failed commit aborts
      } else {
        (void)engine.Abort();
      }
    }
    if (!st.ok() && !undo.empty()) {
      // The abort undid the index operations in its guard; one that found no room there is
      // put right here (kept states, compared with the tree).
      if (absl::Status u = RestoreAfterGuard(FirstPerKey(std::move(undo))); !u.ok()) return u;
    }
    if (st.code() == absl::StatusCode::kInvalidArgument) {
      // The operations do not fit in one log record: one epoch instead.
      reset();
      return EpochAtomically(fn, reset);
    }
    // No room inside the transaction's guard may be room after a boundary (frees reused).
    if (st.code() != absl::StatusCode::kResourceExhausted) return st;
    if (!store_.epochs().Advance().ok()) return st;  // the failed mode: no room will come
  }
  return st;
}

absl::Status Executor::EpochAtomically(const std::function<absl::Status()>& fn,
                                       const std::function<void()>& reset, bool durable) {
  constexpr int kAttempts = 3;
  absl::Status st;
  for (int attempt = 0; attempt < kAttempts; ++attempt) {
    if (attempt > 0) reset();
    std::vector<UndoEntry> undo, left;
    {
      epoch::Guard guard(store_.epochs());
      t_undo = &undo;
      WriteError() = absl::OkStatus();
      st = fn();
      t_undo = nullptr;
      // Undone in the same guard: the epoch holds none of the writes. What finds no room here
      // is undone after the guard, where it can wait; until that epoch completes a crash could
      // keep part of the writes (docs/server.md, "Transactions"), and the reply is an error.
      if (!st.ok()) left = Restore(FirstPerKey(std::move(undo)));
    }
    if (!left.empty()) {
      if (absl::Status u = RestoreAfterGuard(std::move(left)); !u.ok()) return u;
    }
    if (st.ok()) {
      if (!durable) return st;
      if (absl::Status sync = store_.epochs().Sync(); !sync.ok()) {
        return absl::UnavailableError(
            absl::StrCat("applied, but not made durable: ", sync.message()));
      }
      return st;
    }
    if (st.code() != absl::StatusCode::kResourceExhausted) return st;
    if (!store_.epochs().Advance().ok()) return st;
  }
  return st;
}

bool Executor::WriteAtomically(Call& call, std::string& out,
                               const std::function<absl::Status()>& fn) {
  const size_t mark = out.size();
  absl::Status st;
  if (call.in_exec) {
    st = fn();  // a level of EXEC's transaction: EXEC retries and falls back as a whole
  } else {
    AtomicWrite announce(*this);
    st = Atomically(fn, [&] { out.resize(mark); });
  }
  if (st.ok()) return true;
  out.resize(mark);
  if (st.code() == absl::StatusCode::kResourceExhausted) {
    AppendError(out, absl::StrCat("OOM pool ", store_.pool().path(), " (", store_.pool().size(),
                                  " bytes) has no room for this write: ", st.message(),
                                  "; nothing was changed"));
  } else if (st.code() == absl::StatusCode::kUnavailable ||
             st.code() == absl::StatusCode::kDataLoss) {
    AppendError(out, absl::StrCat("ERR ", st.message()));  // says what was changed
  } else {
    AppendError(out, absl::StrCat("ERR ", st.message(), "; nothing was changed"));
  }
  return false;
}

void Executor::Queue(std::vector<std::string>& argv, const Spec& spec, Session& session,
                     std::string& out) {
  if (spec.not_in_multi != nullptr) {
    session.multi_refused = true;
    AppendError(out, absl::StrCat("ERR ", spec.not_in_multi));
    return;
  }
  const size_t bytes = ArgBytes(argv);
  if (session.queued.size() >= kMaxQueued || session.queued_bytes + bytes > MaxReply()) {
    session.multi_refused = true;
    AppendError(out,
                absl::StrCat("ERR MULTI queue is full (", session.queued.size(), " commands, ",
                             session.queued_bytes, " bytes); the transaction will be discarded"));
    return;
  }
  session.queued_bytes += bytes;
  session.queued.push_back(std::move(argv));
  AppendSimple(out, "QUEUED");
}

void Executor::EndMulti(Session& session) {
  session.in_multi = false;
  session.multi_refused = false;
  session.queued.clear();
  session.queued_bytes = 0;
}

After Executor::Multi(Args&, std::string& out, Call& call) {
  if (call.session.in_multi) {
    AppendError(out, "ERR MULTI calls can not be nested");
    return After::kNone;
  }
  call.session.in_multi = true;
  AppendSimple(out, "OK");
  return After::kNone;
}

After Executor::Discard(Args&, std::string& out, Call& call) {
  if (!call.session.in_multi) {
    AppendError(out, "ERR DISCARD without MULTI");
    return After::kNone;
  }
  EndMulti(call.session);
  UnwatchAll(call.session);
  AppendSimple(out, "OK");
  return After::kNone;
}

After Executor::Exec(Args&, std::string& out, Call& call) {
  Session& session = call.session;
  if (!session.in_multi) {
    AppendError(out, "ERR EXEC without MULTI");
    return After::kNone;
  }
  std::vector<Args> queued = std::move(session.queued);
  const bool refused = session.multi_refused;
  EndMulti(session);
  if (refused) {
    UnwatchAll(session);
    AppendError(out, "EXECABORT Transaction discarded because of previous errors.");
    return After::kNone;
  }
  // The commands' specs (each was found when queued), their keys and the watched ones.
  std::vector<const Spec*> specs;
  std::vector<std::string_view> keys;
  bool writes = false;
  for (const Args& q : queued) {
    const Spec& spec = commands_.at(absl::AsciiStrToLower(q[0]));
    specs.push_back(&spec);
    writes = writes || Writes(spec.access);
    const auto [first, step] = KeyPositions(spec.access, q.size());
    for (size_t i = first; i < q.size(); i += step) keys.push_back(q[i]);
  }
  for (const std::string& k : session.watched) keys.push_back(k);
  KeyLocks::Held held = locks_.LockKeys(keys);
  // Keys past their deadline are removed before anything is read: a watched one so removed
  // fails the EXEC, as in Redis (it changed since WATCH).
  for (std::string_view k : keys) {
    std::string error;
    if (ExpireIfNeeded(k, error) == Expiry::kFailed) {
      UnwatchAll(session);
      AppendError(out,
                  absl::StrCat("EXECABORT Transaction discarded: ", std::string(k.substr(0, 128)),
                               " is past its deadline and could not be removed; no command "
                               "of it was applied"));
      return After::kNone;
    }
  }
  // A watched key written since WATCH: the writer marked this session before it released the
  // key's stripe, which this EXEC holds now, so no later write can be missed.
  const bool touched = session.watch_touched.load(std::memory_order_relaxed);
  UnwatchAll(session);
  if (touched) {
    if (call.proto() >= 3) {
      out += "_\r\n";
    } else {
      out += "*-1\r\n";
    }
    return After::kNone;
  }
  if (writes) {
    WatchPoolFile();
    if (store_.pool().failed()) {
      AppendError(out,
                  absl::StrCat("EXECABORT writes refused: ", store_.pool().health().message()));
      return After::kNone;
    }
  }
  if (queued.empty()) {
    AppendArrayHeader(out, 0);
    return After::kNone;
  }
  std::string replies;
  Call inner{session, call.sync_epoch};
  inner.in_exec = true;
  auto run = [&]() -> absl::Status {
    for (size_t i = 0; i < queued.size(); ++i) {
      Args args = queued[i];  // a copy: a handler may move from it, and a retry runs it again
      WriteError() = absl::OkStatus();
      (void)(this->*specs[i]->fn)(args, replies, inner);
      if (!WriteError().ok()) return WriteError();
    }
    return absl::OkStatus();
  };
  absl::Status st;
  if (writes) {
    AtomicWrite announce(*this);
    st = Atomically(run, [&] { replies.clear(); });
  } else {
    st = run();  // reads only: the stripes make them one snapshot of their keys
  }
  if (!st.ok()) {
    const bool applied =
        st.code() == absl::StatusCode::kUnavailable || st.code() == absl::StatusCode::kDataLoss;
    AppendError(out, absl::StrCat("EXECABORT Transaction discarded: ", st.message(),
                                  applied ? "" : "; no command of it was applied"));
    return After::kNone;
  }
  AppendArrayHeader(out, queued.size());
  out += replies;
  return After::kNone;
}

After Executor::Watch(Args& a, std::string& out, Call& call) {
  Session& session = call.session;
  // Under the keys' stripes: a write of a key either finished before the registration (the
  // watcher reads its result) or starts after it and sees it (Touch runs under the stripe).
  KeyLocks::Held held = locks_.Lock(a, 1, 1);
  // A key already past its deadline is removed now, so that its removal does not count as a
  // change at EXEC (it was gone when watched, as in Redis).
  for (size_t i = 1; i < a.size(); ++i) {
    std::string ignored;
    (void)ExpireIfNeeded(a[i], ignored);
  }
  std::lock_guard<std::mutex> l(watch_mu_);
  for (size_t i = 1; i < a.size(); ++i) {
    std::vector<Session*>& by = watched_[a[i]];
    if (std::find(by.begin(), by.end(), &session) != by.end()) continue;  // watched already
    by.push_back(&session);
    session.watched.push_back(a[i]);
    watchers_.fetch_add(1, std::memory_order_relaxed);
  }
  AppendSimple(out, "OK");
  return After::kNone;
}

After Executor::Unwatch(Args&, std::string& out, Call& call) {
  UnwatchAll(call.session);
  AppendSimple(out, "OK");
  return After::kNone;
}

void Executor::UnwatchAll(Session& session) {
  if (!session.watched.empty()) {
    std::lock_guard<std::mutex> l(watch_mu_);
    for (const std::string& k : session.watched) {
      auto it = watched_.find(k);
      if (it == watched_.end()) continue;
      std::vector<Session*>& v = it->second;
      for (size_t i = 0; i < v.size(); ++i) {
        if (v[i] != &session) continue;
        v[i] = v.back();
        v.pop_back();
        watchers_.fetch_sub(1, std::memory_order_relaxed);
        break;
      }
      if (v.empty()) watched_.erase(it);
    }
    session.watched.clear();
  }
  session.watch_touched.store(false, std::memory_order_relaxed);
}

}  // namespace pmrt::server
