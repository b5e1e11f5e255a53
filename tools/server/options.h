// The server's options and counters, shared by the network layer (server.h) and the command
// executor (commands.h).
#ifndef PMRT_TOOLS_SERVER_OPTIONS_H_
#define PMRT_TOOLS_SERVER_OPTIONS_H_

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>

#include "tools/server/resp.h"

namespace pmrt::server {

struct ServerOptions {
  // The addresses to listen on, IPv4 or IPv6, separated by blanks or commas (as Redis's `bind`);
  // "localhost" is 127.0.0.1. The port is the same on each.
  std::string bind = "127.0.0.1";
  int port = 7379;                // 0: an ephemeral port (see Server::port())
  int threads = 0;                // workers; 0: one per core
  int max_clients = 10000;        // connections beyond this get an error and are closed
  RespLimits limits;              // protocol limits (bulk size, array length, inline size)
  size_t max_key = 64 << 10;      // bytes in a key
  size_t output_limit = 1 << 20;  // pending reply bytes that pause reading a connection
  size_t max_range = 1000000;     // elements of one PMRT.RANGE, keys of one SCAN COUNT
  // Bytes of one reply of several elements (MGET, PMRT.RANGE, SCAN); a larger one is replaced
  // by an error (the connection stays). Never below limits.max_bulk plus its framing, so that
  // any value one SET stored can be read back by GET or a one-key MGET.
  size_t max_reply = 512 << 20;
  int epoch_ms = 64;  // the store's epoch interval (reported by INFO and CONFIG)
  // Seconds a connection may stay idle (no request byte read, no reply byte written) before the
  // server closes it, as Redis's `timeout`; 0 (the default, as Redis's): never. A connection
  // waiting in PMRT.SYNC is not idle. Checked about once a second.
  int idle_timeout_s = 0;
  // Active expiry cycles a second (Executor::ActiveExpireCycle), each of at most a quarter of
  // its period, as Redis's `hz`; 0: a key past its deadline is removed only when accessed.
  int hz = 10;
  // Compare every value read (GET, MGET, PMRT.RANGE) with its checksum and reply with an error
  // instead of bytes that differ from what was written (a damaged pool). Off by default: a
  // read then costs one CRC32C over its key and value.
  bool verify_reads = false;
  // Clients must AUTH with this password (user "default") before any other command, as with
  // Redis's `requirepass`; empty: no authentication. CONFIG SET requirepass changes it.
  std::string requirepass;
  std::string config_file;  // the --config file read at start, if any (INFO's config_file)
};

// A snapshot of ServerCounters.
struct ServerStats {
  uint64_t connections_received = 0;
  uint64_t rejected_connections = 0;  // over max_clients
  uint64_t connected_clients = 0;
  uint64_t commands_processed = 0;
  uint64_t protocol_errors = 0;
  uint64_t syncs = 0;        // PMRT.SYNC replies sent
  uint64_t idle_closed = 0;  // connections closed by the idle timeout
};

// Live counters, updated by the acceptor and the workers with relaxed increments: each is an
// independent statistic, read only for reporting (no other memory is published through them).
struct ServerCounters {
  std::atomic<uint64_t> connections_received{0};
  std::atomic<uint64_t> rejected_connections{0};
  std::atomic<uint64_t> connected_clients{0};
  std::atomic<uint64_t> commands_processed{0};
  std::atomic<uint64_t> protocol_errors{0};
  std::atomic<uint64_t> syncs{0};
  std::atomic<uint64_t> idle_closed{0};
  std::chrono::steady_clock::time_point started = std::chrono::steady_clock::now();

  ServerStats Snapshot() const {
    auto r = [](const std::atomic<uint64_t>& a) { return a.load(std::memory_order_relaxed); };
    return {r(connections_received), r(rejected_connections), r(connected_clients),
            r(commands_processed),   r(protocol_errors),      r(syncs),
            r(idle_closed)};
  }
};

}  // namespace pmrt::server

#endif  // PMRT_TOOLS_SERVER_OPTIONS_H_
