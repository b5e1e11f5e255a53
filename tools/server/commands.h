// The server's command set: runs one parsed RESP command on a KvStore and encodes its reply.
// The network layer (server.h) owns connections and ordering; this file owns semantics. The
// command list and each command's contract are in docs/server.md.
//
//   pmrt::server::Executor exec(kv, options, counters);
//   std::string out;
//   uint64_t sync_epoch;
//   if (exec.Execute(argv, &out, &sync_epoch) == Executor::After::kSync) { ...wait... }
//
// Thread safety: Execute may run concurrently from every worker (the tree is concurrent; the
// SCAN cursor table has its own mutex). Each write command holds the KeyLocks stripes of its
// keys for its whole run (key_locks.h), so a read-modify-write (INCR, APPEND, SET ... GET) is
// atomic against every other write to its key; reads take no lock.
#ifndef PMRT_TOOLS_SERVER_COMMANDS_H_
#define PMRT_TOOLS_SERVER_COMMANDS_H_

#include <atomic>
#include <cstdint>
#include <deque>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "tools/kv_store.h"
#include "tools/server/key_locks.h"
#include "tools/server/options.h"

namespace pmrt::server {

// Redis's glob-style match (SCAN MATCH, CONFIG GET): '*' any run, '?' any byte, "[abc]",
// "[^abc]", "[a-z]" classes, '\' escapes the next byte. Bytes, not characters; `nocase`
// folds ASCII letters.
bool GlobMatch(std::string_view pattern, std::string_view s, bool nocase = false);

class Executor {
 public:
  // What the caller does after Execute.
  enum class After {
    kNone,   // the reply is in *out
    kClose,  // the reply is in *out; close the connection once it is sent (QUIT)
    kSync,   // nothing in *out yet: reply +OK once epoch *sync_epoch is complete (PMRT.SYNC)
  };

  Executor(tools::KvStore& kv, const ServerOptions& options, const ServerCounters& counters);

  // Runs argv (argv[0] is the command name, any case; argv is not empty) and appends its reply
  // (or an -ERR reply) to *out. Arguments may be moved from.
  After Execute(std::vector<std::string>& argv, std::string* out, uint64_t* sync_epoch);

 private:
  using Args = std::vector<std::string>;
  using Handler = After (Executor::*)(Args&, std::string&, uint64_t*);
  // Whether a command writes, and which of its arguments are the keys whose stripes it holds.
  // Every write is refused while the pool is in its failed mode.
  enum class Access : uint8_t {
    kRead,        // no lock
    kWriteKey,    // argv[1]
    kWriteKeys,   // argv[1], argv[2], ... (DEL)
    kWritePairs,  // argv[1], argv[3], ... (MSET)
    kWriteEach,   // the handler locks each key it writes, one at a time (FLUSHALL)
  };
  struct Spec {
    Handler fn;
    int arity;  // Redis convention: n means exactly n arguments (with the name), -n at least n
    Access access = Access::kRead;
  };
  // Runs a write command's handler under the stripes of its keys (Spec::access).
  After RunWrite(const Spec& spec, Args& a, std::string& out, uint64_t* sync_epoch);
  // Whether the pool's file is still the one opened (not removed or replaced), looked at no
  // more than once a second; a file gone puts the pool in its failed mode (writes refused).
  void WatchPoolFile();

  After Ping(Args& a, std::string& out, uint64_t*);
  After Echo(Args& a, std::string& out, uint64_t*);
  // The string and counter commands (string_commands.cc).
  After Set(Args& a, std::string& out, uint64_t*);
  After SetNx(Args& a, std::string& out, uint64_t*);
  After GetSet(Args& a, std::string& out, uint64_t*);
  After GetDel(Args& a, std::string& out, uint64_t*);
  After Incr(Args& a, std::string& out, uint64_t*);
  After Decr(Args& a, std::string& out, uint64_t*);
  After IncrBy(Args& a, std::string& out, uint64_t*);
  After DecrBy(Args& a, std::string& out, uint64_t*);
  After IncrByFloat(Args& a, std::string& out, uint64_t*);
  After Append(Args& a, std::string& out, uint64_t*);
  After StrLen(Args& a, std::string& out, uint64_t*);
  After GetRange(Args& a, std::string& out, uint64_t*);
  After SetRange(Args& a, std::string& out, uint64_t*);
  After Unsupported(Args& a, std::string& out, uint64_t*);
  // Adds `delta` to the integer under `key` (0 when absent) and replies with the sum.
  void AddToInteger(std::string_view key, int64_t delta, std::string& out);
  // False (with an -ERR reply appended) when a string of base + added bytes would be longer
  // than a bulk string may be (--max-bulk, Redis's proto-max-bulk-len).
  bool LengthOk(uint64_t base, uint64_t added, std::string& out) const;
  After Get(Args& a, std::string& out, uint64_t*);
  After Del(Args& a, std::string& out, uint64_t*);
  After Exists(Args& a, std::string& out, uint64_t*);
  After MSet(Args& a, std::string& out, uint64_t*);
  After MGet(Args& a, std::string& out, uint64_t*);
  // The reply limit in effect (ServerOptions::max_reply, never below a bulk string's), and the
  // error that replaces a reply past it.
  size_t MaxReply() const;
  void ReplyTooLarge(std::string& out, std::string_view command, size_t elements);
  After DbSize(Args& a, std::string& out, uint64_t*);
  After Scan(Args& a, std::string& out, uint64_t*);
  After Range(Args& a, std::string& out, uint64_t*);
  After Config(Args& a, std::string& out, uint64_t*);
  After Info(Args& a, std::string& out, uint64_t*);
  After Command(Args& a, std::string& out, uint64_t*);
  After Sync(Args& a, std::string& out, uint64_t*);
  After Quit(Args& a, std::string& out, uint64_t*);
  After Select(Args& a, std::string& out, uint64_t*);
  After FlushAll(Args& a, std::string& out, uint64_t*);

  // False (with an -ERR reply appended) when a key is longer than options_.max_key.
  bool KeyOk(std::string_view key, std::string& out) const;
  // What ReadValue found.
  enum class Read : uint8_t {
    kFound,   // *value holds the value
    kAbsent,  // *value untouched
    kFailed,  // --verify-reads: the value fails its checksum; an -ERR reply is appended
  };
  // Copies the value of `key` into *value, checking it first with --verify-reads.
  Read ReadValue(std::string_view key, std::string* value, std::string& out) const;
  // Appends the value of `key` as a bulk string, a null bulk when absent, or with
  // --verify-reads an error when the value fails its checksum. `value` is scratch.
  void AppendRead(std::string_view key, std::string& value, std::string& out) const;
  // The reply for what ReadValue found: `value` as a bulk string, a null bulk, or nothing more
  // (kFailed: its error is appended already).
  static void AppendReadReply(Read found, std::string_view value, std::string& out);
  // Writes `value` under `key`; false with an -OOM reply when the heap is full.
  bool Put(std::string_view key, std::string_view value, std::string& out);
  // The OOM error of a write the pool has no room for (pool path and size, value size).
  void Oom(size_t value_bytes, std::string& out);
  std::string InfoText(std::string_view section) const;
  std::vector<std::pair<std::string, std::string>> ConfigValues() const;
  // SCAN cursors: a handle to the key the next call starts at (see docs/server.md).
  uint64_t SaveCursor(std::string next_key);
  std::optional<std::string> LoadCursor(uint64_t cursor);

  tools::KvStore& kv_;
  const ServerOptions& options_;
  const ServerCounters& counters_;
  std::unordered_map<std::string, Spec> commands_;
  KeyLocks locks_;
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
