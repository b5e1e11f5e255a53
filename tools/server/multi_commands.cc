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

// Queued commands and their argument bytes per connection (beyond them MULTI's queue refuses:
// the transaction is then discarded at EXEC).
constexpr size_t kMaxQueued = 1 << 20;

// The previous state of each key written under EpochAtomically's guard, oldest first.
struct UndoEntry {
  std::string key;
  std::optional<std::string> value;  // nullopt: the key was absent
};
thread_local std::vector<UndoEntry>* t_undo = nullptr;

size_t ArgBytes(const std::vector<std::string>& argv) {
  size_t n = 0;
  for (const std::string& s : argv) n += s.size();
  return n;
}

}  // namespace

void Executor::RecordUndo(std::string_view key) {
  if (t_undo == nullptr) return;
  UndoEntry e{std::string(key), std::nullopt};
  std::string v;
  if (store_.tree().get(key, &v)) e.value = std::move(v);
  t_undo->push_back(std::move(e));
}

absl::Status Executor::Atomically(const std::function<absl::Status()>& fn,
                                  const std::function<void()>& reset) {
  constexpr int kAttempts = 3;
  absl::Status st;
  for (int attempt = 0; attempt < kAttempts; ++attempt) {
    if (attempt > 0) reset();
    txn::Engine& engine = store_.engine();
    st = engine.Begin();
    if (st.ok()) {
      WriteError() = absl::OkStatus();
      st = fn();
      if (st.ok()) {
        st = engine.Commit();
      } else {
        (void)engine.Abort();  // every index operation undone
      }
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
                                       const std::function<void()>& reset) {
  constexpr int kAttempts = 3;
  absl::Status st;
  for (int attempt = 0; attempt < kAttempts; ++attempt) {
    if (attempt > 0) reset();
    std::vector<UndoEntry> undo;
    std::vector<UndoEntry> undo_later;
    {
      epoch::Guard guard(store_.epochs());
      t_undo = &undo;
      WriteError() = absl::OkStatus();
      st = fn();
      t_undo = nullptr;
      if (!st.ok()) {
        // Undone newest first in the same guard: the epoch holds none of the writes. An undo
        // that finds no room itself is retried after the guard.
        for (auto it = undo.rbegin(); it != undo.rend(); ++it) {
          const bool undone = it->value.has_value()
                                  ? store_.tree().put(it->key, *it->value) !=
                                        ds::PutResult::kNoMemory
                                  : store_.tree().remove(it->key) || !store_.tree().read(
                                        it->key, [](std::string_view) {});
          if (!undone) undo_later.push_back(std::move(*it));
        }
      }
    }
    // Outside the guard an undo can wait for room. Until its epoch completes a crash could keep
    // part of the writes (docs/server.md, "Durability"); the reply is an error.
    for (UndoEntry& e : undo_later) {
      if (e.value.has_value()) {
        (void)store_.db().put(e.key, *e.value);
      } else {
        (void)store_.db().remove(e.key);
      }
    }
    if (st.ok()) return store_.epochs().Sync();  // durable when the reply is sent
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
  } else {
    AppendError(out, absl::StrCat("ERR ", st.message(), "; nothing was changed"));
  }
  return false;
}

void Executor::Queue(std::vector<std::string>& argv, const std::string& lower, const Spec& spec,
                     Session& session, std::string& out) {
  if (spec.not_in_multi != nullptr) {
    session.multi_refused = true;
    AppendError(out, absl::StrCat("ERR ", spec.not_in_multi));
    return;
  }
  const size_t bytes = ArgBytes(argv);
  if (session.queued.size() >= kMaxQueued || session.queued_bytes + bytes > MaxReply()) {
    session.multi_refused = true;
    AppendError(out, absl::StrCat("ERR MULTI queue is full (", session.queued.size(),
                                  " commands, ", session.queued_bytes,
                                  " bytes); the transaction will be discarded"));
    return;
  }
  (void)lower;
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
      AppendError(out, absl::StrCat("EXECABORT writes refused: ",
                                    store_.pool().health().message()));
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
    AppendError(out, absl::StrCat("EXECABORT Transaction discarded: ", st.message(),
                                  "; no command of it was applied"));
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
  std::lock_guard<std::mutex> l(watch_mu_);
  for (size_t i = 1; i < a.size(); ++i) {
    bool already = false;
    for (const std::string& w : session.watched) already = already || w == a[i];
    if (already) continue;
    watched_[a[i]].push_back(&session);
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
