// The server's command set: runs one parsed RESP command on the Store and encodes its reply.
// The network layer (server.h) owns connections and ordering; this file owns semantics. The
// command list and each command's contract are in docs/server.md.
//
//   pmrt::server::Executor exec(kv, options, counters);
//   pmrt::server::Session session;              // one per connection
//   exec.Register(session, peer, local, fd);    // while the connection is open
//   std::string out;
//   uint64_t sync_epoch;
//   if (exec.Execute(argv, session, &out, &sync_epoch) == Executor::After::kSync) { ...wait... }
//   exec.Unregister(session);
//
// Thread safety: Execute may run concurrently from every worker (the tree is concurrent; the
// SCAN cursor table and the client registry have their own mutexes), each call with the session
// of its own connection. Each write command holds the KeyLocks stripes of its keys for its
// whole run (key_locks.h), so a read-modify-write (INCR, APPEND, SET ... GET, RENAME) is atomic
// against every other write to its keys. Reads take no lock while no multi-key write runs (an
// EXEC, MSET, MSETNX, a multi-key DEL, RENAME, COPY: each one pmrt transaction); while one
// does, a read takes the stripes of its keys, so it never sees such a write half done.
#ifndef PMRT_TOOLS_SERVER_COMMANDS_H_
#define PMRT_TOOLS_SERVER_COMMANDS_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "tools/server/key_locks.h"
#include "tools/server/options.h"
#include "tools/server/store.h"

namespace pmrt::server {

// Redis's glob-style match (SCAN MATCH, CONFIG GET): '*' any run, '?' any byte, "[abc]",
// "[^abc]", "[a-z]" classes, '\' escapes the next byte. Bytes, not characters; `nocase`
// folds ASCII letters.
bool GlobMatch(std::string_view pattern, std::string_view s, bool nocase = false);

// Redis's reply to an argument that must be a 64-bit integer and is not.
inline constexpr char kNotInteger[] = "ERR value is not an integer or out of range";
// Redis's reply to a command on a key of another type.
inline constexpr char kWrongType[] =
    "WRONGTYPE Operation against a key holding the wrong kind of value";

// The time every expiry decision of one command uses, as Redis's command time snapshot: taken
// when a command starts (Executor::Execute; the commands an EXEC runs share its snapshot) and
// for each batch of the active expiry cycle, so that a key found live when the command starts
// stays live to its end (a deadline passing in between would otherwise make the command find
// the key absent and then keep its deadline). Thread-local; the destructor restores the outer
// snapshot.
class CommandClock {
 public:
  CommandClock();
  ~CommandClock();
  CommandClock(const CommandClock&) = delete;
  CommandClock& operator=(const CommandClock&) = delete;
  // The calling thread's snapshot (unix milliseconds), or the clock when none is taken.
  static int64_t NowMs();

 private:
  int64_t saved_;
};

// The 8-byte form (host order) of the integers the store keeps: deadlines, field counts.
std::string EncodeInt64(int64_t v);
std::optional<int64_t> DecodeInt64(std::string_view v);

// A 64-bit signed decimal in Redis's strict form (string2ll): an optional '-', then "0" alone
// or a digit 1-9 and more digits, nothing else (no '+', blanks or leading zeros; "-0" is not
// one), within [INT64_MIN, INT64_MAX].
bool ParseI64(std::string_view s, int64_t* out);

// A long double as Redis's string2ld reads it (strtold): no leading blank, every byte used, not
// NaN, no overflow to infinity or underflow to zero. "inf" and hexadecimal forms are accepted.
bool ParseLongDouble(std::string_view s, long double* out);

// Redis's human-friendly long double (ld2string, LD_STR_HUMAN): "%.17Lf" with the trailing
// zeros of the fraction and then a trailing '.' removed, "-0" as "0". REQUIRES: v is finite.
std::string FormatLongDouble(long double v);

// The deadline (unix milliseconds) an expiry argument names, as Redis reads SET's EX/PX/EXAT/
// PXAT and SETEX's: a positive integer of seconds or milliseconds, from now when `relative`.
// False with Redis's error appended (kNotInteger; "invalid expire time in 'COMMAND' command"
// for zero, a negative number or an overflow).
bool ParseExpiry(std::string_view arg, bool seconds, bool relative, std::string_view command,
                 int64_t* deadline_ms, std::string& out);

// SET's and GETEX's expiry option: EX, PX, EXAT or PXAT, and its argument.
struct ExpiryOption {
  std::string name;  // upper case; empty: none given
  std::string_view arg;
};
// Takes the expiry option a[*i] (`opt`, upper case) when one may come here (`allowed`: no option
// that excludes it was given): the same option again replaces it (the last counts); another
// one, or one without its argument, is not taken. True when taken (*i is then at its argument).
bool TakeExpiryOption(std::string_view opt, const std::vector<std::string>& a, size_t* i,
                      bool allowed, ExpiryOption* e);
// The deadline the option names (ParseExpiry with its unit and base).
bool ExpiryDeadline(const ExpiryOption& e, std::string_view command, int64_t* deadline_ms,
                    std::string& out);

// old + delta as INCRBYFLOAT computes them (a missing old counts as 0) into *result, formatted
// as Redis formats it. False with Redis's error appended: delta no float, old no float
// (`old_not_float`), a result NaN or infinite.
bool AddFloat(const std::optional<std::string>& old, std::string_view delta,
              const char* old_not_float, std::string* result, std::string& out);

// The settings CONFIG SET changes while the server runs (the rest of ServerOptions is fixed at
// start). Read by the workers (timeout), the acceptor (maxclients) and every command
// (requirepass, pmrt-verify-reads): each atomic is an independent setting, read relaxed (no
// other memory is published through it); the password has its mutex.
struct LiveSettings {
  std::atomic<int> max_clients{0};
  std::atomic<int> idle_timeout_s{0};
  std::atomic<bool> verify_reads{false};
  std::atomic<bool> auth_required{false};  // requirepass is not empty

  std::string requirepass() const {
    std::lock_guard<std::mutex> l(mu);
    return password;
  }
  void set_requirepass(std::string p) {
    std::lock_guard<std::mutex> l(mu);
    auth_required.store(!p.empty(), std::memory_order_relaxed);
    password = std::move(p);
  }

 private:
  mutable std::mutex mu;
  std::string password;  // guarded by mu
};

// One connection's state that commands read and change (HELLO, AUTH, CLIENT): owned by the
// network layer's connection, registered with the Executor while the connection is open.
// Thread safety: every field is written by the connection's own worker only. The fields that
// other connections read (CLIENT LIST) are atomics or written under the registry's mutex
// (Executor::clients_mu_); the owner reads its own without the mutex.
struct Session {
  uint64_t id = 0;             // CLIENT ID: unique in this server run; set by Register
  std::string addr, laddr;     // "ip:port" of the peer and of the local end (Register)
  int fd = -1;                 // the socket (CLIENT LIST's fd=)
  int64_t created_ns = 0;      // steady clock at Register
  int resp = 2;                // the protocol of this connection's replies (HELLO); mutex
  bool authenticated = false;  // AUTH or HELLO ... AUTH succeeded (or no password is set)
  std::string name;            // CLIENT SETNAME; mutex
  // MULTI: the commands queued for EXEC, and whether one was refused while queueing (EXEC then
  // discards them all, as Redis's EXECABORT).
  bool in_multi = false;
  bool multi_refused = false;
  std::vector<std::vector<std::string>> queued;
  size_t queued_bytes = 0;  // argument bytes of `queued`
  // WATCH: the keys this connection watches (each registered with the Executor), and whether a
  // write touched one since (set by the writer, under the Executor's watch mutex; read by the
  // owner's EXEC while it holds the stripes of every watched key).
  std::vector<std::string> watched;
  std::atomic<bool> watch_touched{false};
  std::string lib_name, lib_ver;                  // CLIENT SETINFO; mutex
  std::atomic<const char*> last_command{"NULL"};  // a name in the command table (CLIENT LIST)
  std::atomic<int64_t> last_active_ns{0};         // steady clock at the last request read
};

// The store's indexes (store.h), as the undo of an atomic write names them.
enum class Space : uint8_t { kValue, kDeadline, kHash, kField };

// A key's state in one index before an atomic write changed it (Executor::RecordUndo; nullopt:
// absent).
struct KeyState {
  std::string key;  // the index's key (HashFieldKey for kField)
  std::optional<std::string> value;
  Space space = Space::kValue;
};

class Executor {
 public:
  // What the caller does after Execute.
  enum class After {
    kNone,   // the reply is in *out
    kClose,  // the reply is in *out; close the connection once it is sent (QUIT)
    kSync,   // nothing in *out yet: reply +OK once epoch *sync_epoch is complete (PMRT.SYNC)
  };

  Executor(Store& store, const ServerOptions& options, const ServerCounters& counters);

  // Runs argv (argv[0] is the command name, any case; argv is not empty) for the connection of
  // `session` and appends its reply (or an -ERR reply) to *out. Arguments may be moved from.
  After Execute(std::vector<std::string>& argv, Session& session, std::string* out,
                uint64_t* sync_epoch);

  // Adds an open connection to the registry (CLIENT LIST): gives it its id and addresses, and
  // its authentication state (authenticated when no password is required).
  void Register(Session& session, std::string addr, std::string laddr, int fd);
  // Removes it (and its watched keys). REQUIRES: Register(session) was called.
  void Unregister(Session& session);

  // The settings that can change at runtime (CONFIG SET), initialised from the options.
  LiveSettings& settings() { return settings_; }
  const LiveSettings& settings() const { return settings_; }

  // One cycle of the active expiry, as Redis's: walks db0.expires from where the last cycle
  // stopped, 20 deadlines at a time, removing the keys whose deadline has passed, and goes on
  // while more than one in ten of a batch had expired, for at most `budget`. Called by the
  // server's expiry thread (--hz times a second); does nothing while writes are refused.
  void ActiveExpireCycle(std::chrono::milliseconds budget);
  // Keys removed because their deadline had passed (INFO's expired_keys).
  uint64_t expired_keys() const { return expired_keys_.load(std::memory_order_relaxed); }

 private:
  using Args = std::vector<std::string>;
  // What a handler gets besides its arguments: its connection's session, and where PMRT.SYNC
  // leaves the epoch to wait for.
  struct Call {
    Session& session;
    uint64_t* sync_epoch;
    // Inside EXEC: the stripes are the EXEC's, held already, and the commands run in its
    // transaction.
    bool in_exec = false;
    int proto() const { return session.resp; }
  };
  using Handler = After (Executor::*)(Args&, std::string&, Call&);
  // Whether a command writes, and which of its arguments are the keys whose stripes it holds.
  // Every write is refused while the pool is in its failed mode.
  enum class Access : uint8_t {
    kRead,        // no key, or the whole key space (no isolation from concurrent writes)
    kReadKey,     // reads argv[1]
    kReadKeys,    // reads argv[1], argv[2], ... (MGET, EXISTS)
    kWriteKey,    // argv[1]
    kWriteKeys,   // argv[1], argv[2], ... (DEL)
    kWritePairs,  // argv[1], argv[3], ... (MSET)
    kWriteEach,   // the handler locks each key it writes, one at a time (FLUSHALL)
    kWriteTwo,    // argv[1] and argv[2] (RENAME, COPY)
  };
  enum class Deadlines : uint8_t {
    kNo,        // writes none of its own (a key's deadline may still be kept or removed)
    kYes,       // EXPIRE and the like, SETEX
    kIfOption,  // SET, GETEX: when an argument names an expiry option (EX, PX, EXAT, PXAT)
  };
  struct Spec {
    Handler fn;
    int arity;  // Redis convention: n means exactly n arguments (with the name), -n at least n
    Access access = Access::kRead;
    // Refused between MULTI and EXEC with this reason (queueing fails, EXEC then discards the
    // transaction); nullptr: queued.
    const char* not_in_multi = nullptr;
    // Whether the command writes a deadline (RunWrite then runs it in one epoch guard).
    Deadlines deadlines = Deadlines::kNo;
    // Whether it writes a hash (RunWrite then runs it as one transaction).
    bool hash = false;
  };
  static bool Writes(Access a) {
    return a != Access::kRead && a != Access::kReadKey && a != Access::kReadKeys;
  }
  // The positions in argv of the keys a command names (Spec::access): first, step.
  static std::pair<size_t, size_t> KeyPositions(Access a, size_t argc);
  // Runs a write command's handler under the stripes of its keys (Spec::access), after removing
  // those of its keys whose deadline has passed. A command of one key that has a deadline, or
  // writes one, runs in one epoch guard (RunInEpoch): its writes of the key's value and of its
  // deadline reach the pool together.
  After RunWrite(const Spec& spec, Args& a, std::string& out, Call& call);
  // The handler in one epoch guard (EpochAtomically, durable at the next boundary): on failure
  // every write of it is undone and its error is the reply.
  After RunInEpoch(const Spec& spec, Args& a, std::string& out, Call& call);
  // The handler as one transaction announced to the readers (WriteAtomically): every write of a
  // hash, and every write of a key that holds one, so that a crash keeps all of it or none and
  // no epoch-scoped change of a hash can be rolled back under a later transaction's replay.
  After RunInTransaction(const Spec& spec, Args& a, std::string& out, Call& call);
  // Runs a read of keys (kReadKey, kReadKeys) so that it never sees a multi-key write half
  // done: without a lock while none runs, else under the stripes of its keys.
  After RunRead(const Spec& spec, Args& a, std::string& out, Call& call);
  // A multi-key write (EXEC, MSET, ...) under its stripes: announced to the readers (RunRead)
  // for its whole run.
  class AtomicWrite {
   public:
    explicit AtomicWrite(Executor& e);
    ~AtomicWrite();
    AtomicWrite(const AtomicWrite&) = delete;
    AtomicWrite& operator=(const AtomicWrite&) = delete;

   private:
    Executor& e_;
  };
  // Runs fn() (which writes through Put, Insert and Remove and returns WriteError() when one
  // fails) as one pmrt transaction of the store's engine: committed (durable) when it returns
  // OK, aborted (nothing changed; an undo the abort had no room for is redone after its guard,
  // else kDataLoss) when it fails. A transaction too large for one log record runs
  // as EpochAtomically instead; a write without room is retried after an epoch advance (each
  // retry calls reset() first, which drops the replies of the failed attempt). REQUIRES: the
  // caller holds the stripes of every key fn reads or writes, and no epoch guard.
  absl::Status Atomically(const std::function<absl::Status()>& fn,
                          const std::function<void()>& reset);
  // fn() under one epoch guard, each write's previous state kept (RecordUndo): a failure undoes
  // them in the guard. With `durable`, success waits for the epoch to complete (durable on
  // return; kUnavailable when that failed: the writes are applied, not durable); without, the
  // writes are durable at the next boundary, as every single-key write.
  absl::Status EpochAtomically(const std::function<absl::Status()>& fn,
                               const std::function<void()>& reset, bool durable = true);
  using UndoEntry = KeyState;
  // Inside Atomically and EpochAtomically: keeps the current state of `key` (its value, or with
  // `deadline` its deadline) before a write of it; DropLastUndo forgets it again when the write
  // failed (changed nothing).
  void RecordUndo(std::string_view key, Space space = Space::kValue);
  // The index of `space`.
  Index& IndexOf(Space space) const;
  void DropLastUndo();
  // Writes back each entry whose key does not hold its state; returns those it had no room for.
  std::vector<UndoEntry> Restore(std::vector<UndoEntry> entries);
  // Restore outside every guard (a write can wait for room there); kDataLoss naming the keys it
  // could still not restore.
  absl::Status RestoreAfterGuard(std::vector<UndoEntry> entries);
  // A multi-key write command's body: fn() as one transaction announced to the readers
  // (AtomicWrite), or inside EXEC as part of EXEC's. True when it committed; else its error is
  // in `out` (the failed write's, or the commit's).
  bool WriteAtomically(Call& call, std::string& out, const std::function<absl::Status()>& fn);
  // MSET's and MSETNX's writes (argv[1], argv[2], ...) through WriteAtomically.
  bool PutPairs(Args& a, std::string& out, Call& call);
  // The write primitives every command uses: through the index (inside a transaction, part of
  // it), each marking the watchers of its key (WATCH). A failed write appends its reply (-OOM,
  // or the error) and leaves its status in WriteError(), where EXEC finds it (it then aborts
  // every queued command) and a multi-key write returns it from its transaction.
  // A Put replaces the key's deadline too (SET, GETSET, MSET: the key has none afterwards),
  // unless `ttl` is kKeep (INCR, APPEND, SETRANGE, SET ... KEEPTTL).
  enum class Ttl : uint8_t { kClear, kKeep };
  bool Put(std::string_view key, std::string_view value, std::string& out, Ttl ttl = Ttl::kClear);
  // 1 inserted, 0 present (unchanged), -1 failed.
  int Insert(std::string_view key, std::string_view value, std::string& out);
  // Inside a transaction: logs the key's deadline as it stands (written again, or its removal),
  // so that a crash's replay of the transaction leaves the key's value with exactly that
  // deadline. Outside one, or while no epoch-scoped deadline write is pending: nothing. Failures
  // as Put's.
  bool LogDeadlineInTransaction(std::string_view key, std::string& out);
  // An epoch-scoped write of db0.expires ran (SetDeadline, ClearDeadline, and an undo's
  // restore of one outside a transaction): deadline_epoch_ rises to the current epoch.
  void NoteDeadlineWrite();
  // Whether an epoch-scoped deadline write may be in an epoch not yet complete: a crash could
  // then roll it back beneath a transaction's replay, so a transaction logs the deadlines of the
  // keys it writes. Read under the key's stripe: the writer of that key noted its write before
  // releasing the stripe.
  bool DeadlineWritesPending() const;
  // Whether the key was there; the error when the removal failed. Its deadline goes with it.
  absl::StatusOr<bool> Remove(std::string_view key, std::string& out);
  // Hashes (hash_commands.cc): a header in db0.hashes (the field count) and the fields in
  // db0.fields. Each write of a hash runs inside a transaction (RunInTransaction, EXEC, the
  // multi-key writes).
  // The field count of hash `key`, if `key` holds a hash (its deadline not looked at).
  std::optional<int64_t> HashLength(std::string_view key) const;
  // field := value in hash `key`, created when absent (the string of the same name removed, as
  // logged, and the key's deadline logged as it stands): 1 a new field, 0 replaced, -1 failed
  // (its error appended and in WriteError()). REQUIRES: `key` holds no string; a transaction.
  int HashSet(std::string_view key, std::string_view field, std::string_view value,
              std::string& out);
  // Removes a field: 1 removed, 0 absent, -1 failed. Removing the last one removes the hash
  // and its deadline, as in Redis. REQUIRES: a transaction.
  int HashDelete(std::string_view key, std::string_view field, std::string& out);
  // Removes every field and the header. False (error appended) when a removal failed.
  bool HashRemoveAll(std::string_view key, std::string& out);
  // The fields of hash `key` with their values, in field order (none when it is not a hash).
  std::vector<std::pair<std::string, std::string>> HashFields(std::string_view key) const;
  // The value of `field` of hash `key`.
  std::optional<std::string> HashGet(std::string_view key, std::string_view field) const;
  enum class KeyType : uint8_t { kNone, kString, kHash };
  // What `key` holds, a key past its deadline holding nothing.
  KeyType TypeOf(std::string_view key) const;
  // For a hash command: false (WRONGTYPE appended) when `key` holds a string; else whether the
  // key's field names are short enough is checked by FieldOk.
  bool NotAString(std::string_view key, std::string& out) const;
  bool FieldOk(std::string_view field, std::string& out) const;
  After HSet(Args& a, std::string& out, Call&);  // HSET and HMSET
  After HSetNx(Args& a, std::string& out, Call&);
  After HGet(Args& a, std::string& out, Call&);
  After HMGet(Args& a, std::string& out, Call&);
  After HDel(Args& a, std::string& out, Call&);
  After HLen(Args& a, std::string& out, Call&);
  After HExists(Args& a, std::string& out, Call&);
  After HStrLen(Args& a, std::string& out, Call&);
  After HGetAll(Args& a, std::string& out, Call&);  // HGETALL, HKEYS, HVALS
  After HIncrBy(Args& a, std::string& out, Call&);
  After HIncrByFloat(Args& a, std::string& out, Call&);
  After HScan(Args& a, std::string& out, Call&);
  After HRandField(Args& a, std::string& out, Call&);
  // The keys of db0 and db0.hashes from `from` on, merged in order, while visit(key, type)
  // returns true (a slice of each at a time, as SlicedScan).
  void VisitKeys(std::string from,
                 const std::function<bool(std::string_view key, KeyType type)>& visit) const;
  // Key expiry (expiry_commands.cc). A deadline is a unix time in milliseconds; a key is gone
  // once the clock is past it: every read treats it as absent, every write removes it first
  // (RunWrite, EXEC), and the active cycle removes it without any access. The clock is the
  // command's snapshot (CommandClock).
  static int64_t NowMs() { return CommandClock::NowMs(); }
  // The deadline of `key`, if it has one.
  std::optional<int64_t> Deadline(std::string_view key) const;
  // Whether `key` has a deadline the clock is past (it reads as absent).
  bool Expired(std::string_view key) const;
  // What ExpireIfNeeded found.
  enum class Expiry : uint8_t {
    kNone,    // no deadline (any there was has passed, and the key is removed now)
    kLive,    // a deadline not reached yet
    kFailed,  // the key's deadline has passed and its removal failed: an error is appended
  };
  // Removes `key`, value and deadline in one epoch guard, when its deadline has passed.
  // REQUIRES: the caller holds the key's stripe and no epoch guard.
  Expiry ExpireIfNeeded(std::string_view key, std::string& out);
  // Writes the key's deadline, or removes it (true when it had one). Failures as Put's.
  bool SetDeadline(std::string_view key, int64_t deadline_ms, std::string& out);
  absl::StatusOr<bool> ClearDeadline(std::string_view key, std::string& out);
  // The calling thread's last write failure; EXEC resets it to OK before each command.
  static absl::Status& WriteError();
  // A failed write of a hash: its reply (-OOM for no room, else the error) appended and its
  // status left in WriteError().
  void WriteFailed(const absl::Status& st, std::string& out);
  // Marks every connection that watches `key` (a write changed it).
  void Touch(std::string_view key);
  // Whether the pool's file is still the one opened (not removed or replaced), looked at no
  // more than once a second; a file gone puts the pool in its failed mode (writes refused).
  void WatchPoolFile();

  After Ping(Args& a, std::string& out, Call&);
  After Echo(Args& a, std::string& out, Call&);
  // The string and counter commands (string_commands.cc).
  After Set(Args& a, std::string& out, Call&);
  After SetNx(Args& a, std::string& out, Call&);
  After GetSet(Args& a, std::string& out, Call&);
  After GetDel(Args& a, std::string& out, Call&);
  After Incr(Args& a, std::string& out, Call&);
  After Decr(Args& a, std::string& out, Call&);
  After IncrBy(Args& a, std::string& out, Call&);
  After DecrBy(Args& a, std::string& out, Call&);
  After IncrByFloat(Args& a, std::string& out, Call&);
  After Append(Args& a, std::string& out, Call&);
  After StrLen(Args& a, std::string& out, Call&);
  After GetRange(Args& a, std::string& out, Call&);
  After SetRange(Args& a, std::string& out, Call&);
  After SetEx(Args& a, std::string& out, Call&);  // SETEX and PSETEX
  After GetEx(Args& a, std::string& out, Call&);
  // EXPIRE, PEXPIRE, EXPIREAT, PEXPIREAT (the name says which).
  After Expire(Args& a, std::string& out, Call&);
  // TTL, PTTL, EXPIRETIME, PEXPIRETIME.
  After TimeToLive(Args& a, std::string& out, Call&);
  After Persist(Args& a, std::string& out, Call&);
  // Adds `delta` to the integer under `key` (0 when absent) and replies with the sum.
  void AddToInteger(std::string_view key, int64_t delta, std::string& out);
  // False (with an -ERR reply appended) when a string of base + added bytes would be longer
  // than a bulk string may be (--max-bulk, Redis's proto-max-bulk-len).
  bool LengthOk(uint64_t base, uint64_t added, std::string& out) const;
  After Get(Args& a, std::string& out, Call&);
  After Del(Args& a, std::string& out, Call&);
  After Exists(Args& a, std::string& out, Call&);
  After MSet(Args& a, std::string& out, Call&);
  After MGet(Args& a, std::string& out, Call&);
  // The reply limit in effect (ServerOptions::max_reply, never below a bulk string's), and the
  // error that replaces a reply past it.
  size_t MaxReply() const;
  void ReplyTooLarge(std::string& out, std::string_view command, size_t elements);
  After DbSize(Args& a, std::string& out, Call&);
  After Scan(Args& a, std::string& out, Call&);
  After Range(Args& a, std::string& out, Call&);
  After Config(Args& a, std::string& out, Call&);
  After Info(Args& a, std::string& out, Call&);
  After Command(Args& a, std::string& out, Call&);
  After Sync(Args& a, std::string& out, Call&);
  After Quit(Args& a, std::string& out, Call&);
  After Select(Args& a, std::string& out, Call&);
  After FlushAll(Args& a, std::string& out, Call&);
  After MSetNx(Args& a, std::string& out, Call&);
  // MULTI, EXEC, DISCARD, WATCH, UNWATCH (multi_commands.cc).
  After Multi(Args& a, std::string& out, Call&);
  After Exec(Args& a, std::string& out, Call&);
  After Discard(Args& a, std::string& out, Call&);
  After Watch(Args& a, std::string& out, Call&);
  After Unwatch(Args& a, std::string& out, Call&);
  // Queues argv for EXEC (or refuses it, marking the transaction); the reply is +QUEUED.
  void Queue(std::vector<std::string>& argv, const Spec& spec, Session& session, std::string& out);
  // Drops the connection's watched keys from the registry.
  void UnwatchAll(Session& session);
  // Leaves MULTI: the queue dropped.
  static void EndMulti(Session& session);
  // The connection commands (connection_commands.cc).
  After Hello(Args& a, std::string& out, Call&);
  After Auth(Args& a, std::string& out, Call&);
  After Client(Args& a, std::string& out, Call&);
  After ClientList(Args& a, std::string& out, Call&);
  After Time(Args& a, std::string& out, Call&);
  // Checks `user` and `pass` against requirepass; true when they match (the session is then
  // authenticated), else false with the error appended.
  bool Authenticate(std::string_view user, std::string_view pass, Call& call, std::string& out);
  // CLIENT LIST's line for one session (without its line end). REQUIRES: clients_mu_ held.
  std::string ClientLine(const Session& s, int64_t now_ns) const;
  // The keyspace commands (keyspace_commands.cc).
  After Keys(Args& a, std::string& out, Call&);
  After Type(Args& a, std::string& out, Call&);
  After RandomKey(Args& a, std::string& out, Call&);
  // A key of `tree` drawn at random (RandomKey's descent); false when the tree is empty.
  bool RandomPick(const ds::DurableMasstree& tree, std::string* key);
  After Rename(Args& a, std::string& out, Call&);
  After RenameNx(Args& a, std::string& out, Call&);
  After Copy(Args& a, std::string& out, Call&);
  // What MoveValue did.
  enum class Move : uint8_t { kDone, kNoSource, kTargetExists, kFailed };
  // Writes the value of `src` under `dst` and, with `remove_src`, removes `src`: one
  // transaction (WriteAtomically), so that a crash keeps both changes or neither. With `replace`
  // false an existing `dst` is left alone (kTargetExists). kFailed: an error is appended (no
  // room, damaged value) and nothing changed. REQUIRES: the caller holds the stripes of both
  // keys; src != dst.
  Move MoveValue(std::string_view src, std::string_view dst, bool remove_src, bool replace,
                 std::string& out, Call& call);
  After ConfigSet(Args& a, std::string& out, Call&);

  // Whether `key` is present (a key longer than --max-key never is), without copying its value.
  bool Present(std::string_view key) const;
  // False (with an -ERR reply appended) when a key is longer than options_.max_key.
  bool KeyOk(std::string_view key, std::string& out) const;
  // What ReadValue found.
  enum class Read : uint8_t {
    kFound,   // *value holds the value
    kAbsent,  // *value untouched
    kFailed,  // --verify-reads: the value fails its checksum; an -ERR reply is appended
  };
  // Copies the value of `key` into *value, checking it first with --verify-reads.
  // A key holding a hash is WRONGTYPE (an error appended, kFailed), or with `wrongtype` false
  // absent (MGET).
  Read ReadValue(std::string_view key, std::string* value, std::string& out,
                 bool wrongtype = true) const;
  // Appends the value of `key` as a bulk string, a null bulk when absent, or with
  // --verify-reads an error when the value fails its checksum. `value` is scratch.
  void AppendRead(std::string_view key, std::string& value, std::string& out, int proto) const;
  // The reply for what ReadValue found: `value` as a bulk string, a null bulk, or nothing more
  // (kFailed: its error is appended already).
  static void AppendReadReply(Read found, std::string_view value, std::string& out, int proto);
  // The OOM error of a write the pool has no room for (pool path and size, value size).
  void Oom(size_t value_bytes, std::string& out);
  // The INFO text of the named sections (lower case; empty: the default ones).
  std::string InfoText(const std::vector<std::string>& sections) const;
  // The redis_version INFO and HELLO report (docs/server.md, "Compatibility").
  static constexpr char kRedisVersion[] = "6.2.0";
  std::vector<std::pair<std::string, std::string>> ConfigValues() const;
  // SCAN cursors: a handle to the key the next call starts at (see docs/server.md).
  uint64_t SaveCursor(std::string next_key);
  std::optional<std::string> LoadCursor(uint64_t cursor);
  // SCAN's and HSCAN's cursor argument: 0 (start: *from empty) or one SaveCursor returned
  // (*from: where it left off). False with Redis's error (or the unknown cursor's) appended.
  bool ScanStart(std::string_view arg, std::string* from, std::string& out);
  // [next cursor (0 when done), [items...]].
  void AppendScanReply(bool more, std::string next, const std::vector<std::string>& items,
                       std::string& out);

  Store& store_;
  const ServerOptions& options_;
  const ServerCounters& counters_;
  std::unordered_map<std::string, Spec> commands_;
  KeyLocks locks_;
  // Multi-key writes started and finished (AtomicWrite): a read that finds them equal before it
  // and `started` unchanged after it saw none half done (a sequence lock; RunRead).
  std::atomic<uint64_t> atomic_started_{0};
  std::atomic<uint64_t> atomic_finished_{0};
  // WATCH: key -> the sessions watching it. `watchers_` counts the registrations, so that a
  // write with nobody watching pays one relaxed load.
  std::atomic<uint64_t> watchers_{0};
  std::mutex watch_mu_;
  absl::flat_hash_map<std::string, std::vector<Session*>> watched_;  // guarded by watch_mu_
  LiveSettings settings_;
  // When this Executor was made (the server's start): INFO's recovery fields name the open
  // that preceded it.
  int64_t start_unix_ms_ = 0;

  std::atomic<uint64_t> expired_keys_{0};
  std::atomic<uint64_t> deadline_epoch_{0};  // NoteDeadlineWrite
  std::mutex sweep_mu_;                      // one active expiry cycle at a time
  std::string sweep_from_;                   // where the next cycle starts; guarded by sweep_mu_

  std::atomic<uint64_t> next_client_id_{1};
  mutable std::mutex clients_mu_;
  std::map<uint64_t, Session*> clients_;  // by id; guarded by clients_mu_
  // The pool file's identity at start (st_dev, st_ino), and the last look (steady-clock ns).
  uint64_t pool_dev_ = 0, pool_ino_ = 0;
  bool watch_file_ = false;
  std::atomic<int64_t> last_file_check_ns_{0};

  static constexpr size_t kMaxCursors = 1024;
  std::mutex cursor_mu_;
  uint64_t next_cursor_;                               // guarded by cursor_mu_
  std::unordered_map<uint64_t, std::string> cursors_;  // guarded by cursor_mu_
  std::deque<uint64_t> cursor_order_;                  // oldest first; guarded by cursor_mu_
};

}  // namespace pmrt::server

#endif  // PMRT_TOOLS_SERVER_COMMANDS_H_
