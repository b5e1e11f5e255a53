// The pmrt key-value server: RESP2 and RESP3 (the Redis protocol) over TCP, IPv4 and IPv6, on a
// Store (a runtime pool's durable Masstree "db0", with transactions).
//
//   auto store = pmrt::server::Store::Open(path, {.create_size = 1 << 30});
//   auto server = pmrt::server::Server::Create(**store, {.port = 0});  // 0: an ephemeral port
//   (*server)->Start();
//   ... (*server)->port() ...
//   (*server)->Stop();                      // closes every connection; then close the store
//
// Threading: one acceptor thread hands each accepted connection to one of `threads` workers
// (round robin). A worker owns its connections outright: it alone reads, parses, executes and
// writes them, with one epoll instance and non-blocking sockets, so thousands of idle
// connections cost a few kilobytes each and no thread. Commands run directly on the concurrent
// tree from the worker thread (each tree operation takes its own epoch guard). A syncer thread
// serves PMRT.SYNC: it advances the epoch until the one a waiting connection needs is complete,
// then wakes the workers; the waiting connection's later commands stay queued in order.
//
// Durability (docs/server.md): a write's reply is sent after the tree operation returned, so the
// write happened in an epoch that is current or older when the reply leaves; it is durable once
// that epoch completes (the background advancer completes one every `--epoch-ms`, 64 ms by
// default). PMRT.SYNC replies +OK only once every epoch up to the one current when it ran is
// complete: every write acknowledged to any client before PMRT.SYNC was received is durable.
//
// Bounded memory per connection: a partial command (at most one bulk of limits.max_bulk bytes
// and its header lines), and pending output of at most output_limit bytes plus one reply: a
// connection whose output is above the limit is neither read nor executed until the client
// drains it, so a slow client slows only itself.
//
// Thread safety: Start and Stop from one controlling thread; port(), stats() from any.
#ifndef PMRT_TOOLS_SERVER_SERVER_H_
#define PMRT_TOOLS_SERVER_SERVER_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "tools/server/commands.h"
#include "tools/server/options.h"
#include "tools/server/store.h"

namespace pmrt::server {

class Server {
 public:
  // Binds and listens on every address of options.bind (no thread yet). Errors:
  // kInvalidArgument (bad address or options), kUnavailable (an address is in use or cannot be
  // bound), naming the address.
  static absl::StatusOr<std::unique_ptr<Server>> Create(Store& store, ServerOptions options);
  ~Server();  // Stop()
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Starts the acceptor, the workers and the syncer. Errors: kInternal (epoll, eventfd).
  absl::Status Start();
  // Stops accepting, closes every connection (a last non-blocking attempt to send pending
  // replies), joins the threads. Idempotent. The store stays open: close it afterwards.
  void Stop();

  int port() const { return port_; }
  const ServerOptions& options() const { return options_; }
  ServerStats stats() const;

  // Implementation types (server.cc).
  struct Connection;
  class Worker;
  class Syncer;
  class Expirer;

 private:
  Server(Store& store, ServerOptions options);
  void AcceptLoop();
  void Accept(int listen_fd);

  Store& store_;
  ServerOptions options_;
  std::vector<int> listen_fds_;  // one per --bind address
  int stop_fd_ = -1;             // eventfd that wakes the acceptor at Stop
  int reserve_fd_ = -1;  // a spare descriptor, given up to refuse a client when none are left
  int port_ = 0;
  bool started_ = false;
  ServerCounters counters_;
  std::unique_ptr<Executor> executor_;
  std::unique_ptr<Syncer> syncer_;
  std::unique_ptr<Expirer> expirer_;  // null with --hz 0
  std::vector<std::unique_ptr<Worker>> workers_;
  size_t next_worker_ = 0;
  std::thread acceptor_;
};

}  // namespace pmrt::server

#endif  // PMRT_TOOLS_SERVER_SERVER_H_
