#include "tools/server/server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <boost/intrusive/list.hpp>
#include <cerrno>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace pmrt::server {
namespace {

std::string Errno(const std::string& what) {
  return absl::StrCat(what, ": ", std::strerror(errno));
}

void WakeFd(int fd) {
  const uint64_t one = 1;
  // An eventfd write fails only when the counter would overflow, i.e. a wake is pending anyway.
  (void)!write(fd, &one, sizeof(one));
}

void DrainFd(int fd) {
  uint64_t v;
  (void)!read(fd, &v, sizeof(v));
}

constexpr char kMaxClientsReply[] = "-ERR max number of clients reached\r\n";

// "ip:port" of a socket address, "[ip]:port" for IPv6 (as Redis's CLIENT LIST writes them).
std::string AddrText(const sockaddr_storage& ss) {
  char ip[INET6_ADDRSTRLEN] = "?";
  int port = 0;
  if (ss.ss_family == AF_INET6) {
    const auto& a = reinterpret_cast<const sockaddr_in6&>(ss);
    inet_ntop(AF_INET6, &a.sin6_addr, ip, sizeof(ip));
    port = ntohs(a.sin6_port);
    return absl::StrCat("[", ip, "]:", port);
  }
  const auto& a = reinterpret_cast<const sockaddr_in&>(ss);
  inet_ntop(AF_INET, &a.sin_addr, ip, sizeof(ip));
  port = ntohs(a.sin_port);
  return absl::StrCat(ip, ":", port);
}

// The peer's and the local address of a connected socket.
std::pair<std::string, std::string> Endpoints(int fd) {
  sockaddr_storage peer{}, local{};
  socklen_t pl = sizeof(peer), ll = sizeof(local);
  std::string p =
      getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &pl) == 0 ? AddrText(peer) : "?:0";
  std::string l =
      getsockname(fd, reinterpret_cast<sockaddr*>(&local), &ll) == 0 ? AddrText(local) : "?:0";
  return {std::move(p), std::move(l)};
}

// One address of --bind, parsed: IPv4, IPv6 (brackets allowed), or "localhost".
bool ParseBindAddress(std::string text, int port, sockaddr_storage* ss, socklen_t* len) {
  if (text == "localhost") text = "127.0.0.1";
  if (text.size() > 2 && text.front() == '[' && text.back() == ']') {
    text = text.substr(1, text.size() - 2);
  }
  *ss = {};
  auto* v4 = reinterpret_cast<sockaddr_in*>(ss);
  if (inet_pton(AF_INET, text.c_str(), &v4->sin_addr) == 1) {
    v4->sin_family = AF_INET;
    v4->sin_port = htons(static_cast<uint16_t>(port));
    *len = sizeof(sockaddr_in);
    return true;
  }
  auto* v6 = reinterpret_cast<sockaddr_in6*>(ss);
  if (inet_pton(AF_INET6, text.c_str(), &v6->sin6_addr) == 1) {
    v6->sin6_family = AF_INET6;
    v6->sin6_port = htons(static_cast<uint16_t>(port));
    *len = sizeof(sockaddr_in6);
    return true;
  }
  return false;
}

}  // namespace

// One client connection, owned by one worker.
struct Server::Connection {
  int fd = -1;
  RespParser parser;
  std::string out;  // encoded replies; out[out_pos..] not yet sent
  size_t out_pos = 0;
  bool waiting_sync = false;  // a PMRT.SYNC waits for sync_epoch; later commands wait too
  uint64_t sync_epoch = 0;
  bool close_after_write = false;  // QUIT or a protocol error: close once `out` is sent
  bool closed = false;
  uint32_t events = 0;            // the epoll interest registered now
  std::vector<std::string> argv;  // the command being run (reused)
  Session session;                // registered with the executor from adoption to Close
  // The last time a request byte was read or a reply byte written (the idle timeout).
  std::chrono::steady_clock::time_point active = std::chrono::steady_clock::now();

  // In its worker's list of open connections (from adoption to Close), and while waiting_sync
  // in its list of PMRT.SYNC waiters: O(1) to unlink on close.
  boost::intrusive::list_member_hook<> open_hook;
  boost::intrusive::list_member_hook<> wait_hook;

  explicit Connection(int f, const RespLimits& limits) : fd(f), parser(limits) {}
  size_t pending() const { return out.size() - out_pos; }
};

// Serves PMRT.SYNC: advances the epoch until the highest requested one is complete, then wakes
// the workers, whose waiting connections check Manager::completed() themselves.
class Server::Syncer {
 public:
  Syncer(epoch::Manager& epochs, std::function<void()> wake_all)
      : epochs_(epochs), wake_all_(std::move(wake_all)) {}
  ~Syncer() { Stop(); }

  void Start() {
    thread_ = std::thread([this] { Loop(); });
  }
  void Stop() {
    {
      std::lock_guard<std::mutex> l(mu_);
      stopping_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
  }
  // Asks that epoch e become complete; the workers are woken once it is (or an advance failed).
  void Request(uint64_t e) {
    {
      std::lock_guard<std::mutex> l(mu_);
      wanted_ = std::max(wanted_, e);
    }
    cv_.notify_one();
  }
  // The first error of an advance made for a sync (sticky: the epoch layer's own failed mode).
  absl::Status error() const {
    std::lock_guard<std::mutex> l(mu_);
    return error_;
  }

 private:
  void Loop() {
    std::unique_lock<std::mutex> l(mu_);
    while (true) {
      cv_.wait(l, [&] { return stopping_ || wanted_ > served_; });
      if (stopping_) return;
      const uint64_t target = wanted_;
      l.unlock();
      // Manager::Sync's loop, for an epoch fixed when the command ran rather than now: an
      // advance may also be made concurrently by the background advancer (they serialize).
      absl::Status st;
      while (st.ok() && epochs_.completed() < target) st = epochs_.Advance();
      l.lock();
      if (!st.ok() && error_.ok()) error_ = st;
      served_ = target;
      l.unlock();
      wake_all_();
      l.lock();
    }
  }

  epoch::Manager& epochs_;
  std::function<void()> wake_all_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  uint64_t wanted_ = 0;  // highest epoch requested; guarded by mu_
  uint64_t served_ = 0;  // highest epoch whose request was handled; guarded by mu_
  bool stopping_ = false;
  absl::Status error_;  // guarded by mu_
  std::thread thread_;
};

// Runs the executor's active expiry cycle --hz times a second, each cycle within a quarter of
// its period (Redis's ACTIVE_EXPIRE_CYCLE_SLOW_TIME_PERC).
class Server::Expirer {
 public:
  Expirer(Executor& executor, int hz)
      : executor_(executor), period_(std::chrono::milliseconds(1000 / hz)) {}
  ~Expirer() { Stop(); }

  void Start() {
    thread_ = std::thread([this] { Loop(); });
  }
  void Stop() {
    {
      std::lock_guard<std::mutex> l(mu_);
      stopping_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
  }

 private:
  void Loop() {
    std::unique_lock<std::mutex> l(mu_);
    while (!cv_.wait_for(l, period_, [&] { return stopping_; })) {
      l.unlock();
      executor_.ActiveExpireCycle(period_ / 4);
      l.lock();
    }
  }

  Executor& executor_;
  const std::chrono::milliseconds period_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;  // guarded by mu_
  std::thread thread_;
};

// A worker thread: one epoll instance, its connections, and an eventfd for new connections,
// sync completions and Stop.
class Server::Worker {
 public:
  explicit Worker(Server& server) : server_(server), limit_(server.options_.output_limit) {}
  ~Worker() {
    // Empty when Loop has run (CloseAll); the lists do not own their connections.
    waiters_.clear();
    open_.clear_and_dispose([](Connection* c) {
      close(c->fd);
      delete c;
    });
    if (epfd_ >= 0) close(epfd_);
    if (wake_fd_ >= 0) close(wake_fd_);
  }

  absl::Status Init() {
    epfd_ = epoll_create1(EPOLL_CLOEXEC);
    if (epfd_ < 0) return absl::InternalError(Errno("pmrt serve: epoll_create1"));
    wake_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (wake_fd_ < 0) return absl::InternalError(Errno("pmrt serve: eventfd"));
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.ptr = nullptr;  // null marks the wake descriptor
    if (epoll_ctl(epfd_, EPOLL_CTL_ADD, wake_fd_, &ev) != 0)
      return absl::InternalError(Errno("pmrt serve: epoll_ctl(eventfd)"));
    return absl::OkStatus();
  }
  void Start() {
    thread_ = std::thread([this] { Loop(); });
  }
  void Stop() {
    stopping_.store(true, std::memory_order_release);  // pairs with the acquire in Loop
    Wake();
    if (thread_.joinable()) thread_.join();
  }
  // Hands a connected socket to this worker (any thread).
  void Adopt(int fd) {
    {
      std::lock_guard<std::mutex> l(mu_);
      incoming_.push_back(fd);
    }
    Wake();
  }
  void Wake() { WakeFd(wake_fd_); }

 private:
  void Loop();
  void AdoptIncoming();
  void OnEvent(Connection& c, uint32_t ev);
  bool CanRun(const Connection& c) const {
    return !c.closed && !c.waiting_sync && !c.close_after_write && c.pending() <= limit_;
  }
  bool ReadInput(Connection& c);
  // Runs the connection's buffered commands while it can run; true when it stopped because
  // the parser needs more input.
  bool Drive(Connection& c);
  bool Flush(Connection& c);
  void Progress(Connection& c);
  void UpdateInterest(Connection& c);
  void Close(Connection& c);
  void CheckSyncWaiters();
  void CloseIdle();
  void CloseAll();

  Server& server_;
  const size_t limit_;
  int epfd_ = -1;
  int wake_fd_ = -1;
  std::atomic<bool> stopping_{false};
  std::thread thread_;
  std::mutex mu_;
  std::vector<int> incoming_;  // guarded by mu_
  // Everything below is touched by the worker thread only.
  // The open connections, owned by the worker (Close moves one to closed_; CloseAll deletes).
  boost::intrusive::list<
      Connection, boost::intrusive::member_hook<Connection, boost::intrusive::list_member_hook<>,
                                                &Connection::open_hook>>
      open_;
  // The connections in PMRT.SYNC, in arrival order.
  boost::intrusive::list<
      Connection, boost::intrusive::member_hook<Connection, boost::intrusive::list_member_hook<>,
                                                &Connection::wait_hook>>
      waiters_;
  std::vector<std::unique_ptr<Connection>> closed_;  // freed after the event batch
  std::chrono::steady_clock::time_point last_idle_check_ = std::chrono::steady_clock::now();
  char read_buf_[64 << 10];
};

void Server::Worker::Loop() {
  constexpr int kMaxEvents = 256;
  epoll_event events[kMaxEvents];
  // The loop wakes at least once a second to look for idle connections (the timeout is a
  // runtime setting: CONFIG SET timeout).
  constexpr int wait_ms = 1000;
  while (!stopping_.load(std::memory_order_acquire)) {
    int n = epoll_wait(epfd_, events, kMaxEvents, wait_ms);
    if (n < 0) {
      if (errno == EINTR) continue;
      std::fprintf(stderr, "%s\n", Errno("pmrt serve: epoll_wait").c_str());
      break;
    }
    for (int i = 0; i < n; ++i) {
      auto* c = static_cast<Connection*>(events[i].data.ptr);
      if (c == nullptr) {
        DrainFd(wake_fd_);
        AdoptIncoming();
      } else if (!c->closed) {
        OnEvent(*c, events[i].events);
      }
    }
    CheckSyncWaiters();
    CloseIdle();
    closed_.clear();
  }
  CloseAll();
}

void Server::Worker::CloseIdle() {
  const int timeout_s =
      server_.executor_->settings().idle_timeout_s.load(std::memory_order_relaxed);
  const auto now = std::chrono::steady_clock::now();
  if (timeout_s <= 0 || now - last_idle_check_ < std::chrono::seconds(1)) return;
  last_idle_check_ = now;
  const auto limit = std::chrono::seconds(timeout_s);
  std::vector<Connection*> idle;
  for (Connection& c : open_) {
    if (!c.closed && !c.waiting_sync && now - c.active > limit) idle.push_back(&c);
  }
  for (Connection* c : idle) {
    server_.counters_.idle_closed.fetch_add(1, std::memory_order_relaxed);
    Close(*c);
  }
}

void Server::Worker::AdoptIncoming() {
  std::vector<int> fds;
  {
    std::lock_guard<std::mutex> l(mu_);
    fds.swap(incoming_);
  }
  for (int fd : fds) {
    auto conn = std::make_unique<Connection>(fd, server_.options_.limits);
    auto [peer, local] = Endpoints(fd);
    server_.executor_->Register(conn->session, std::move(peer), std::move(local), fd);
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.ptr = conn.get();
    if (epoll_ctl(epfd_, EPOLL_CTL_ADD, fd, &ev) != 0) {
      std::fprintf(stderr, "%s\n", Errno("pmrt serve: epoll_ctl(add)").c_str());
      server_.executor_->Unregister(conn->session);
      close(fd);
      server_.counters_.connected_clients.fetch_sub(1, std::memory_order_relaxed);
      continue;
    }
    conn->events = EPOLLIN;
    open_.push_back(*conn.release());
  }
}

void Server::Worker::OnEvent(Connection& c, uint32_t ev) {
  if (ev & EPOLLERR) return Close(c);
  // A hang-up while we are not reading (sync wait, full output): nobody will read the replies.
  if ((ev & EPOLLHUP) && !(c.events & EPOLLIN)) return Close(c);
  if ((ev & EPOLLOUT) && !Flush(c)) return;
  if ((ev & (EPOLLIN | EPOLLHUP)) && !ReadInput(c)) return;
  Progress(c);
}

bool Server::Worker::ReadInput(Connection& c) {
  // At most 16 reads per event, so that one busy client cannot starve the others (epoll is
  // level-triggered: what is left is reported again). Commands run after each read, which
  // keeps the parser's buffer to about one read plus one partial command.
  for (int i = 0; i < 16 && CanRun(c); ++i) {
    ssize_t r = read(c.fd, read_buf_, sizeof(read_buf_));
    if (r > 0) {
      c.active = std::chrono::steady_clock::now();
      // Relaxed: CLIENT LIST's idle= of another connection reads it as a statistic.
      c.session.last_active_ns.store(
          std::chrono::duration_cast<std::chrono::nanoseconds>(c.active.time_since_epoch()).count(),
          std::memory_order_relaxed);
      c.parser.Feed(read_buf_, static_cast<size_t>(r));
      Drive(c);
      if (static_cast<size_t>(r) < sizeof(read_buf_)) break;
      continue;
    }
    if (r == 0) {
      // The client closed its side (possibly mid-command): a partial command is dropped,
      // nothing of it ran. Replies already encoded get one non-blocking attempt (a client
      // that half-closed may still read them), then the connection closes.
      if (c.pending() > 0) {
        (void)!send(c.fd, c.out.data() + c.out_pos, c.pending(), MSG_NOSIGNAL | MSG_DONTWAIT);
      }
      Close(c);
      return false;
    }
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) break;
    Close(c);
    return false;
  }
  return true;
}

bool Server::Worker::Drive(Connection& c) {
  if (c.out_pos > (64 << 10) && c.out_pos * 2 > c.out.size()) {
    c.out.erase(0, c.out_pos);
    c.out_pos = 0;
  }
  ServerCounters& counters = server_.counters_;
  const LiveSettings& settings = server_.executor_->settings();
  while (CanRun(c)) {
    c.parser.set_unauthenticated(!c.session.authenticated &&
                                 settings.auth_required.load(std::memory_order_relaxed));
    RespParser::Result r = c.parser.Next(&c.argv);
    if (r == RespParser::kIncomplete) return true;
    if (r == RespParser::kError) {
      // Redis's behaviour: the error, then the connection closes (its framing is lost).
      AppendError(c.out, c.parser.error());
      c.close_after_write = true;
      counters.protocol_errors.fetch_add(1, std::memory_order_relaxed);
      break;
    }
    counters.commands_processed.fetch_add(1, std::memory_order_relaxed);
    uint64_t epoch = 0;
    switch (server_.executor_->Execute(c.argv, c.session, &c.out, &epoch)) {
      case Executor::After::kNone:
        break;
      case Executor::After::kClose:
        c.close_after_write = true;
        break;
      case Executor::After::kSync:
        c.waiting_sync = true;
        c.sync_epoch = epoch;
        waiters_.push_back(c);
        server_.syncer_->Request(epoch);
        break;
    }
  }
  return false;
}

bool Server::Worker::Flush(Connection& c) {
  while (c.pending() > 0) {
    ssize_t w = send(c.fd, c.out.data() + c.out_pos, c.pending(), MSG_NOSIGNAL);
    if (w > 0) {
      c.out_pos += static_cast<size_t>(w);
      c.active = std::chrono::steady_clock::now();
      continue;
    }
    if (w < 0 && errno == EINTR) continue;
    if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
    Close(c);  // EPIPE, ECONNRESET: the client is gone
    return false;
  }
  if (c.pending() == 0) {
    if (c.out.capacity() > (4u << 20)) {
      std::string().swap(c.out);  // give back the memory of one large reply
    } else {
      c.out.clear();
    }
    c.out_pos = 0;
    if (c.close_after_write) {
      Close(c);
      return false;
    }
  }
  return true;
}

void Server::Worker::Progress(Connection& c) {
  // Draining output may unblock the connection, and running may produce output again: go on
  // until it waits for input, for the client to read, or for a sync. Every command buffered is
  // run here or after a later event (EPOLLOUT, a sync's wake): input already read never waits
  // for more input to arrive.
  while (!c.closed) {
    const bool needs_input = Drive(c);
    if (!Flush(c)) return;
    if (needs_input || !CanRun(c) || c.pending() > 0) break;
  }
  if (!c.closed) UpdateInterest(c);
}

void Server::Worker::UpdateInterest(Connection& c) {
  uint32_t want = 0;
  if (CanRun(c)) want |= EPOLLIN;
  if (c.pending() > 0) want |= EPOLLOUT;
  if (want == c.events) return;
  epoll_event ev{};
  ev.events = want;
  ev.data.ptr = &c;
  if (epoll_ctl(epfd_, EPOLL_CTL_MOD, c.fd, &ev) != 0) {
    std::fprintf(stderr, "%s\n", Errno("pmrt serve: epoll_ctl(mod)").c_str());
    Close(c);
    return;
  }
  c.events = want;
}

void Server::Worker::Close(Connection& c) {
  if (c.closed) return;
  c.closed = true;
  epoll_ctl(epfd_, EPOLL_CTL_DEL, c.fd, nullptr);
  close(c.fd);
  c.fd = -1;
  if (c.waiting_sync) waiters_.erase(waiters_.iterator_to(c));
  server_.executor_->Unregister(c.session);
  server_.counters_.connected_clients.fetch_sub(1, std::memory_order_relaxed);
  // Freed after the event batch: a later event of this batch may still name it.
  open_.erase(open_.iterator_to(c));
  closed_.emplace_back(&c);
}

void Server::Worker::CheckSyncWaiters() {
  if (waiters_.empty()) return;
  const uint64_t completed = server_.store_.epochs().completed();
  std::vector<Connection*> ready;
  for (Connection& c : waiters_) {
    if (c.sync_epoch <= completed) ready.push_back(&c);
  }
  absl::Status error;
  if (ready.size() < waiters_.size()) {
    error = server_.syncer_->error();
    if (!error.ok()) {  // no sync can succeed any more: answer them all
      ready.clear();
      for (Connection& c : waiters_) ready.push_back(&c);
    }
  }
  for (Connection* c : ready) {
    waiters_.erase(waiters_.iterator_to(*c));
    c->waiting_sync = false;
    if (c->sync_epoch <= completed) {
      // Every epoch up to sync_epoch is durably complete: the writes acknowledged before the
      // PMRT.SYNC ran are durable (see Executor::Sync).
      AppendSimple(c->out, "OK");
      server_.counters_.syncs.fetch_add(1, std::memory_order_relaxed);
    } else {
      AppendError(c->out, absl::StrCat("ERR PMRT.SYNC failed, writes may not be durable: ",
                                       error.ToString()));
    }
    Progress(*c);
  }
}

void Server::Worker::CloseAll() {
  waiters_.clear();
  open_.clear_and_dispose([this](Connection* c) {
    if (c->pending() > 0) {
      // Best effort, without waiting: a reply that does not fit the socket buffer is dropped.
      (void)!send(c->fd, c->out.data() + c->out_pos, c->pending(), MSG_NOSIGNAL | MSG_DONTWAIT);
    }
    close(c->fd);
    server_.executor_->Unregister(c->session);
    server_.counters_.connected_clients.fetch_sub(1, std::memory_order_relaxed);
    delete c;
  });
  std::lock_guard<std::mutex> l(mu_);
  for (int fd : incoming_) {
    close(fd);
    server_.counters_.connected_clients.fetch_sub(1, std::memory_order_relaxed);
  }
  incoming_.clear();
}

Server::Server(Store& store, ServerOptions options) : store_(store), options_(std::move(options)) {}

absl::StatusOr<std::unique_ptr<Server>> Server::Create(Store& store, ServerOptions options) {
  if (options.threads <= 0) options.threads = std::max(1u, std::thread::hardware_concurrency());
  if (options.port < 0 || options.port > 65535)
    return absl::InvalidArgumentError(
        absl::StrCat("pmrt serve: port ", options.port, " is not in 0..65535"));
  if (options.max_clients <= 0)
    return absl::InvalidArgumentError("pmrt serve: --max-clients must be positive");
  // --bind: one or more addresses, separated by blanks or commas.
  std::vector<std::string> binds;
  for (absl::string_view part :
       absl::StrSplit(options.bind, absl::ByAnyChar(" ,\t"), absl::SkipEmpty())) {
    binds.emplace_back(part);
  }
  if (binds.empty()) return absl::InvalidArgumentError("pmrt serve: --bind names no address");
  for (const std::string& b : binds) {
    sockaddr_storage ss;
    socklen_t len;
    if (!ParseBindAddress(b, 0, &ss, &len))
      return absl::InvalidArgumentError(
          absl::StrCat("pmrt serve: --bind ", b, " is not an IPv4 or IPv6 address"));
  }
  options.bind = absl::StrJoin(binds, " ");

  std::unique_ptr<Server> s(new Server(store, std::move(options)));
  // Port 0: the first address gets a free port, and every other one is bound to the same; if
  // that port is taken on another address, all are closed and a new free port is tried.
  const bool any_port = s->options_.port == 0;
  int port = s->options_.port;
  for (int attempt = 0;; ++attempt) {
    bool taken = false;
    for (size_t i = 0; i < binds.size() && !taken; ++i) {
      const std::string& b = binds[i];
      sockaddr_storage addr;
      socklen_t len;
      ParseBindAddress(b, port, &addr, &len);
      const std::string where = absl::StrCat(b, ":", port);
      const int fd = socket(addr.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
      if (fd < 0) return absl::UnavailableError(Errno(absl::StrCat("pmrt serve: socket for ", b)));
      s->listen_fds_.push_back(fd);
      int one = 1;
      setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
      // An IPv6 socket takes IPv6 only, so that "0.0.0.0 ::" binds both families.
      if (addr.ss_family == AF_INET6) setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one));
      if (bind(fd, reinterpret_cast<sockaddr*>(&addr), len) != 0) {
        if (any_port && i > 0 && errno == EADDRINUSE && attempt < 16) {
          taken = true;
          break;
        }
        return absl::UnavailableError(Errno(absl::StrCat("pmrt serve: cannot bind ", where)));
      }
      if (listen(fd, 4096) != 0)
        return absl::UnavailableError(Errno(absl::StrCat("pmrt serve: cannot listen on ", where)));
      if (getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0)
        return absl::InternalError(Errno("pmrt serve: getsockname"));
      port = addr.ss_family == AF_INET6 ? ntohs(reinterpret_cast<sockaddr_in6&>(addr).sin6_port)
                                        : ntohs(reinterpret_cast<sockaddr_in&>(addr).sin_port);
    }
    if (!taken) break;
    for (int fd : s->listen_fds_) close(fd);
    s->listen_fds_.clear();
    port = 0;
  }
  s->port_ = port;
  s->options_.port = s->port_;
  s->stop_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (s->stop_fd_ < 0) return absl::InternalError(Errno("pmrt serve: eventfd"));
  s->reserve_fd_ = open("/dev/null", O_RDONLY | O_CLOEXEC);
  s->executor_ = std::make_unique<Executor>(store, s->options_, s->counters_);
  return s;
}

absl::Status Server::Start() {
  if (started_) return absl::FailedPreconditionError("pmrt serve: already started");
  syncer_ = std::make_unique<Syncer>(store_.epochs(), [this] {
    for (auto& w : workers_) w->Wake();
  });
  for (int i = 0; i < options_.threads; ++i) {
    auto w = std::make_unique<Worker>(*this);
    if (auto st = w->Init(); !st.ok()) return st;
    workers_.push_back(std::move(w));
  }
  counters_.started = std::chrono::steady_clock::now();
  syncer_->Start();
  if (options_.hz > 0) {
    expirer_ = std::make_unique<Expirer>(*executor_, options_.hz);
    expirer_->Start();
  }
  for (auto& w : workers_) w->Start();
  acceptor_ = std::thread([this] { AcceptLoop(); });
  started_ = true;
  return absl::OkStatus();
}

void Server::AcceptLoop() {
  int ep = epoll_create1(EPOLL_CLOEXEC);
  if (ep < 0) {
    std::fprintf(stderr, "%s\n", Errno("pmrt serve: epoll_create1").c_str());
    return;
  }
  epoll_event ev{};
  ev.events = EPOLLIN;
  for (int fd : listen_fds_) {
    ev.data.fd = fd;
    epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev);
  }
  ev.data.fd = stop_fd_;
  epoll_ctl(ep, EPOLL_CTL_ADD, stop_fd_, &ev);
  bool stopping = false;
  while (!stopping) {
    epoll_event events[16];
    int n = epoll_wait(ep, events, 16, -1);
    if (n < 0 && errno != EINTR) {
      std::fprintf(stderr, "%s\n", Errno("pmrt serve: epoll_wait").c_str());
      break;
    }
    for (int i = 0; i < n; ++i) {
      if (events[i].data.fd == stop_fd_) {
        stopping = true;
      } else {
        Accept(events[i].data.fd);
      }
    }
  }
  close(ep);
}

void Server::Accept(int listen_fd) {
  // Accepts every pending connection (level-triggered: a backlog left over is reported again).
  for (int i = 0; i < 1024; ++i) {
    int fd = accept4(listen_fd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if ((errno == EMFILE || errno == ENFILE) && reserve_fd_ >= 0) {
        // Out of descriptors: give up the spare one to accept and refuse this client, instead
        // of leaving it in the backlog, where it would wake this loop forever.
        close(reserve_fd_);
        fd = accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC);
        if (fd >= 0) {
          // Counted before the reply: a client that sees the close also sees the count.
          counters_.rejected_connections.fetch_add(1, std::memory_order_relaxed);
          (void)!send(fd, kMaxClientsReply, sizeof(kMaxClientsReply) - 1,
                      MSG_NOSIGNAL | MSG_DONTWAIT);
          close(fd);
        }
        reserve_fd_ = open("/dev/null", O_RDONLY | O_CLOEXEC);
        continue;
      }
      if (errno != EAGAIN && errno != EWOULDBLOCK)
        std::fprintf(stderr, "%s\n", Errno("pmrt serve: accept").c_str());
      return;
    }
    counters_.connections_received.fetch_add(1, std::memory_order_relaxed);
    if (counters_.connected_clients.load(std::memory_order_relaxed) >=
        static_cast<uint64_t>(executor_->settings().max_clients.load(std::memory_order_relaxed))) {
      // Counted before the reply: a client that sees the close also sees the count.
      counters_.rejected_connections.fetch_add(1, std::memory_order_relaxed);
      (void)!send(fd, kMaxClientsReply, sizeof(kMaxClientsReply) - 1, MSG_NOSIGNAL | MSG_DONTWAIT);
      close(fd);
      continue;
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    counters_.connected_clients.fetch_add(1, std::memory_order_relaxed);
    workers_[next_worker_]->Adopt(fd);
    next_worker_ = (next_worker_ + 1) % workers_.size();
  }
}

void Server::Stop() {
  if (started_) {
    WakeFd(stop_fd_);
    if (acceptor_.joinable()) acceptor_.join();
    for (auto& w : workers_) w->Stop();
    syncer_->Stop();
    if (expirer_ != nullptr) expirer_->Stop();
    started_ = false;
  }
  for (int* fd : {&stop_fd_, &reserve_fd_}) {
    if (*fd >= 0) close(*fd);
    *fd = -1;
  }
  for (int fd : listen_fds_) close(fd);
  listen_fds_.clear();
}

Server::~Server() {
  Stop();
  workers_.clear();  // before the syncer: its wake callback names them
  syncer_.reset();
}

ServerStats Server::stats() const { return counters_.Snapshot(); }

}  // namespace pmrt::server
