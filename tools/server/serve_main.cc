#include "tools/server/serve_main.h"

#include <signal.h>
#include <sys/resource.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <string_view>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "tools/bytes_format.h"
#include "tools/kv_store.h"
#include "tools/server/server.h"

namespace pmrt::tools {
namespace {

constexpr char kUsage[] =
    "usage: pmrt serve POOL [--port P] [--bind ADDR] [--create-size BYTES] [--grow-by BYTES]\n"
    "                       [--epoch-ms N] [--threads N] [--max-clients N] [--max-bulk BYTES] "
    "[--max-key BYTES]\n"
    "                       [--max-reply BYTES] [--timeout SECONDS] [--verify-reads]\n"
    "\n"
    "Serves the key-value tree of POOL over RESP2 (the Redis protocol; redis-cli and\n"
    "redis-benchmark work) until SIGINT or SIGTERM, then closes the pool cleanly.\n"
    "\n"
    "  --port P            TCP port (default 7379; 0 picks a free one, printed at start)\n"
    "  --bind ADDR         IPv4 address to listen on (default 127.0.0.1, loopback only)\n"
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
    "  --verify-reads      compare every value read with its checksum; a damaged value is\n"
    "                      an error reply, never served\n"
    "\n"
    "Commands: PING ECHO SET [NX] SETNX GET DEL UNLINK EXISTS MSET MGET DBSIZE SCAN PMRT.RANGE\n"
    "CONFIG GET, INFO, COMMAND, PMRT.SYNC, SELECT 0, FLUSHALL, FLUSHDB, QUIT (docs/server.md).\n"
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
                KvStoreOptions* kv_opt) {
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
  KvStoreOptions kv_opt;
  if (!ParseFlags(args, &opt, &kv_opt)) return Usage();
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
  auto kv = KvStore::Open(path, kv_opt);
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
  std::printf("pmrt serve: listening on %s:%d, pool %s (%zu keys, %d threads, epoch %d ms)\n",
              o.bind.c_str(), (*server)->port(), path.c_str(), (*kv)->tree().size(), o.threads,
              o.epoch_ms);
  // Only 127.0.0.0/8 is loopback for an IPv4 bind.
  if (o.bind.rfind("127.", 0) != 0) {
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
