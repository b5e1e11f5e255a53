#include "tools/server/serve_main.h"

#include <signal.h>
#include <sys/resource.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "tools/bytes_format.h"
#include "tools/server/resp.h"
#include "tools/server/server.h"
#include "tools/server/store.h"

namespace pmrt::tools {
namespace {

constexpr char kUsage[] =
    "usage: pmrt serve POOL [--port P] [--bind ADDR] [--create-size BYTES] [--grow-by BYTES]\n"
    "                       [--epoch-ms N] [--threads N] [--max-clients N] [--max-bulk BYTES] "
    "[--max-key BYTES]\n"
    "                       [--max-reply BYTES] [--timeout SECONDS] [--hz N] [--verify-reads]\n"
    "                       [--requirepass PASSWORD] [--config FILE]\n"
    "\n"
    "Serves index db0 of the runtime pool POOL over RESP2 and RESP3 (the Redis protocol;\n"
    "redis-cli, redis-benchmark and redis-py work) until SIGINT or SIGTERM, then closes the\n"
    "pool cleanly.\n"
    "\n"
    "  --port P            TCP port (default 7379; 0 picks a free one, printed at start)\n"
    "  --bind ADDRS        IPv4 or IPv6 addresses to listen on, separated by blanks or commas\n"
    "                      (default 127.0.0.1, loopback only)\n"
    "  --create-size BYTES create POOL with this size if it does not exist (K, M, G suffixes)\n"
    "  --grow-by BYTES     when the pool is full, grow it by this much (its file grows; default\n"
    "                      0: a full pool refuses writes with an OOM error)\n"
    "  --epoch-ms N        epoch interval in milliseconds (default 64)\n"
    "  --threads N         worker threads (default: one per core)\n"
    "  --max-clients N     connections served at once (default 10000); more get an error\n"
    "  --max-bulk BYTES    largest bulk string in a request (default 512M)\n"
    "  --max-key BYTES     largest key (default 64K)\n"
    "  --max-reply BYTES   largest reply of MGET, PMRT.RANGE, SCAN (default 512M; never below\n"
    "                      the largest bulk string)\n"
    "  --timeout SECONDS   close a connection idle this long (default 0: never, as Redis)\n"
    "  --hz N              active expiry cycles a second (default 10, as Redis's hz; 0: keys\n"
    "                      past their deadline are removed only when accessed)\n"
    "  --verify-reads      compare every value read with its checksum; a damaged value is\n"
    "                      an error reply, never served\n"
    "  --requirepass PASSWORD  clients must AUTH with it before any other command\n"
    "  --config FILE       read settings from FILE first, Redis-style \"name value\" lines\n"
    "                      (port, bind, requirepass, maxclients, timeout, hz, proto-max-bulk-len,\n"
    "                      pmrt-verify-reads, pmrt-max-key-len, pmrt-max-reply, pmrt-epoch-ms,\n"
    "                      pmrt-threads, pmrt-create-size, pmrt-grow-by); flags override it\n"
    "\n"
    "Commands: the string commands, EXPIRE TTL PERSIST and the like, KEYS TYPE RANDOMKEY\n"
    "RENAME COPY, MULTI EXEC WATCH, HELLO AUTH CLIENT TIME, CONFIG GET/SET, INFO, PMRT.SYNC,\n"
    "PMRT.RANGE... (docs/server.md).\n"
    "\n"
    "Durability: a reply to a write means the write will be durable by the next epoch\n"
    "boundary (every --epoch-ms, 64 ms by default): a crash loses at most the writes of the\n"
    "last epoch or two, and never leaves a write half done. PMRT.SYNC replies +OK once every\n"
    "write acknowledged before it (to any client) is durable.\n";

// A usage error: the synopsis only (--help prints everything).
int Usage() {
  const std::string_view usage(kUsage);
  std::fprintf(stderr, "%.*s(pmrt serve --help for more)\n",
               static_cast<int>(usage.find("\n\n") + 1), usage.data());
  return 2;
}

bool ParseSize(const std::string& text, uint64_t* out) {
  const std::optional<uint64_t> v = ParseByteCount(text);
  if (v) *out = *v;
  return v.has_value();
}

bool ParseInt(const std::string& text, int lo, int hi, int* out) {
  int v;
  if (!absl::SimpleAtoi(text, &v) || v < lo || v > hi) return false;
  *out = v;
  return true;
}

// Parses the flags into *opt and *kv_opt; false (after a message) on a usage error.
bool ParseFlags(const std::vector<std::string>& args, server::ServerOptions* opt,
                server::StoreOptions* kv_opt) {
  for (size_t i = 1; i < args.size(); i += 2) {
    const std::string& name = args[i];
    if (name == "--verify-reads") {  // the one flag without a value
      opt->verify_reads = true;
      --i;
      continue;
    }
    if (i + 1 >= args.size()) {
      std::fprintf(stderr, "pmrt serve: %s needs a value\n", name.c_str());
      return false;
    }
    const std::string& v = args[i + 1];
    uint64_t size = 0;
    bool ok = true;
    if (name == "--port") {
      ok = ParseInt(v, 0, 65535, &opt->port);
    } else if (name == "--bind") {
      opt->bind = v;
    } else if (name == "--create-size") {
      ok = ParseSize(v, &size);
      kv_opt->create_size = size;
    } else if (name == "--grow-by") {
      ok = ParseSize(v, &size);
      kv_opt->pool.grow_by = size;
    } else if (name == "--epoch-ms") {
      ok = ParseInt(v, 1, 60000, &opt->epoch_ms);
    } else if (name == "--threads") {
      ok = ParseInt(v, 1, 1024, &opt->threads);
    } else if (name == "--max-clients") {
      ok = ParseInt(v, 1, 1 << 24, &opt->max_clients);
    } else if (name == "--max-bulk") {
      ok = ParseSize(v, &size) && size > 0 && size <= (1ull << 32);
      opt->limits.max_bulk = size;
    } else if (name == "--max-reply") {
      ok = ParseSize(v, &size) && size > 0;
      opt->max_reply = size;
    } else if (name == "--timeout") {
      ok = ParseInt(v, 0, 1 << 30, &opt->idle_timeout_s);
    } else if (name == "--hz") {
      ok = ParseInt(v, 0, 500, &opt->hz);
    } else if (name == "--requirepass") {
      opt->requirepass = v;
    } else if (name == "--max-key") {
      ok = ParseSize(v, &size) && size > 0 && size <= (1ull << 30);
      opt->max_key = size;
    } else {
      std::fprintf(stderr, "pmrt serve: unknown flag %s\n", name.c_str());
      return false;
    }
    if (!ok) {
      std::fprintf(stderr, "pmrt serve: bad value for %s: '%s'\n", name.c_str(), v.c_str());
      return false;
    }
  }
  kv_opt->epochs.interval = std::chrono::milliseconds(opt->epoch_ms);
  return true;
}

// The --config file's settings, by their Redis-style names, and the flag each one stands for.
constexpr std::pair<const char*, const char*> kConfigNames[] = {
    {"port", "--port"},
    {"bind", "--bind"},
    {"requirepass", "--requirepass"},
    {"maxclients", "--max-clients"},
    {"timeout", "--timeout"},
    {"hz", "--hz"},
    {"proto-max-bulk-len", "--max-bulk"},
    {"pmrt-verify-reads", "--verify-reads"},
    {"pmrt-max-key-len", "--max-key"},
    {"pmrt-max-reply", "--max-reply"},
    {"pmrt-epoch-ms", "--epoch-ms"},
    {"pmrt-threads", "--threads"},
    {"pmrt-create-size", "--create-size"},
    {"pmrt-grow-by", "--grow-by"},
};

// Reads a Redis-style config file: "name value" per line, blank lines and '#' comments skipped,
// values quoted as in Redis ("a b", 'c'); `bind` takes several values. Appends the flags the
// lines stand for to *flags; false (after a message naming the line) on an error.
bool ReadConfigFile(const std::string& path, std::vector<std::string>* flags) {
  std::ifstream in(path);
  if (!in) {
    std::fprintf(stderr, "pmrt serve: cannot read --config %s: %s\n", path.c_str(),
                 std::strerror(errno));
    return false;
  }
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    const size_t first = line.find_first_not_of(" \t");
    if (first == std::string::npos || line[first] == '#') continue;
    std::vector<std::string> words;
    auto bad = [&](const std::string& why) {
      std::fprintf(stderr, "pmrt serve: %s:%d: %s\n", path.c_str(), n, why.c_str());
      return false;
    };
    if (!server::SplitInline(line, &words)) return bad("unbalanced quotes");
    const std::string name = absl::AsciiStrToLower(words[0]);
    const char* flag = nullptr;
    for (const auto& [setting, f] : kConfigNames) {
      if (name == setting) flag = f;
    }
    if (flag == nullptr) return bad(absl::StrCat("unknown setting '", words[0], "'"));
    if (words.size() < 2 || (words.size() > 2 && name != "bind")) {
      return bad(absl::StrCat("'", name, "' takes ", name == "bind" ? "addresses" : "one value"));
    }
    if (name == "pmrt-verify-reads") {
      const std::string v = absl::AsciiStrToLower(words[1]);
      if (v != "yes" && v != "no") return bad("pmrt-verify-reads takes yes or no");
      if (v == "yes") flags->push_back(flag);
      continue;
    }
    flags->push_back(flag);
    flags->push_back(absl::StrJoin(words.begin() + 1, words.end(), " "));
  }
  return true;
}

// Lets the process hold as many descriptors as the hard limit allows (each client is one).
void RaiseFileLimit(int max_clients) {
  rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) != 0) return;
  if (rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
  }
  if (rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < static_cast<rlim_t>(max_clients) + 64) {
    std::fprintf(stderr,
                 "pmrt serve: warning: the descriptor limit (%llu) is below --max-clients (%d); "
                 "clients past it are refused\n",
                 static_cast<unsigned long long>(rl.rlim_cur), max_clients);
  }
}

}  // namespace

int ServeMain(const std::vector<std::string>& args) {
  for (const std::string& a : args) {
    if (a == "--help" || a == "-h") {
      std::fputs(kUsage, stdout);
      return 0;
    }
  }
  if (args.empty() || args[0].rfind("--", 0) == 0) return Usage();
  server::ServerOptions opt;
  server::StoreOptions kv_opt;
  // The --config file's settings come first, so that every flag given overrides them.
  std::vector<std::string> flags = {args[0]};
  for (size_t i = 1; i + 1 < args.size(); ++i) {
    if (args[i] != "--config") continue;
    opt.config_file = args[i + 1];
    if (!ReadConfigFile(opt.config_file, &flags)) return 2;
  }
  for (size_t i = 1; i < args.size(); ++i) {
    if (args[i] == "--config" && i + 1 < args.size()) {
      ++i;
    } else {
      flags.push_back(args[i]);
    }
  }
  if (!ParseFlags(flags, &opt, &kv_opt)) return Usage();
  const std::string& path = args[0];

  // SIGINT and SIGTERM are taken with sigwait below: block them before any thread starts (the
  // store's epoch advancer, the server's threads), so that every thread inherits the mask and
  // only sigwait sees them. A client that goes away mid-reply must not kill the process.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  signal(SIGPIPE, SIG_IGN);
  RaiseFileLimit(opt.max_clients);

  // The tree's structure is checked before the first client (every link followed lies in the
  // pool, no node is reached twice; value bytes are compared when read, with --verify-reads):
  // a damaged pool is refused here, naming the offset, instead of crashing or hanging a worker
  // later. The check also counts the keys. The open is tried first on a private mapping, so a
  // pool refused here is left byte-identical.
  kv_opt.check_tree = true;
  kv_opt.trial_open = true;
  auto kv = server::Store::Open(path, kv_opt);
  if (!kv.ok()) {
    std::fprintf(stderr, "pmrt serve: %s, not served\n", kv.status().ToString().c_str());
    return 1;
  }
  auto server = server::Server::Create(**kv, opt);
  if (!server.ok()) {
    std::fprintf(stderr, "%s\n", server.status().ToString().c_str());
    return 1;
  }
  if (auto st = (*server)->Start(); !st.ok()) {
    std::fprintf(stderr, "%s\n", st.ToString().c_str());
    return 1;
  }
  const server::ServerOptions& o = (*server)->options();
  // "listening on ADDR:PORT, ADDR:PORT, pool ..." (IPv6 addresses in brackets).
  std::string where;
  bool loopback = true;
  for (absl::string_view b : absl::StrSplit(o.bind, ' ', absl::SkipEmpty())) {
    std::string addr(b);
    if (addr.size() > 2 && addr.front() == '[' && addr.back() == ']')
      addr = addr.substr(1, addr.size() - 2);  // "[::1]" as written: bracketed once below
    const bool v6 = addr.find(':') != std::string::npos;
    absl::StrAppend(&where, v6 ? "[" : "", addr, v6 ? "]" : "", ":", (*server)->port(), ", ");
    // Only 127.0.0.0/8 and ::1 are loopback.
    loopback = loopback && (addr.rfind("127.", 0) == 0 || addr == "localhost" || addr == "::1");
  }
  std::printf("pmrt serve: listening on %spool %s (%zu keys, %d threads, epoch %d ms)\n",
              where.c_str(), path.c_str(), (*kv)->tree().size(), o.threads, o.epoch_ms);
  if (!loopback && o.requirepass.empty()) {
    std::fprintf(stderr,
                 "pmrt serve: warning: listening on %s with no authentication: anyone who can "
                 "reach this address can read, overwrite and FLUSHALL the store\n",
                 o.bind.c_str());
  }
  std::fflush(stdout);

  int sig = 0;
  sigwait(&stop_signals, &sig);
  (*server)->Stop();
  server->reset();
  const size_t keys = (*kv)->tree().size();
  if (auto st = (*kv)->Close(); !st.ok()) {
    std::fprintf(stderr, "pmrt serve: closing %s: %s\n", path.c_str(), st.ToString().c_str());
    return 1;
  }
  std::printf("pmrt serve: %s, pool %s closed cleanly (%zu keys)\n", strsignal(sig), path.c_str(),
              keys);
  return 0;
}

}  // namespace pmrt::tools
