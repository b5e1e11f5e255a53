// A small blocking RESP2 (and RESP3) client for the server tests: connect, send raw bytes or
// commands, read replies (with a generous timeout that only guards against a hung test, never
// measures speed), and spawn `pmrt serve` as a child process.
#ifndef PMRT_TESTS_SERVER_RESP_CLIENT_H_
#define PMRT_TESTS_SERVER_RESP_CLIENT_H_

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tools/server/store.h"

namespace pmrt::server::testing {

struct Reply {
  char type = 0;      // '+', '-', ':', '$', '*'; RESP3 '_' (null), '%' (map), '=' (verbatim)
  bool null = false;  // $-1, *-1 or _
  // A map's elements are its keys and values, alternating; a verbatim string's str is its
  // text without the "txt:" format.
  std::string str;  // simple string, error, bulk
  int64_t integer = 0;
  std::vector<Reply> elements;

  bool IsOk() const { return type == '+' && str == "OK"; }
  bool IsError() const { return type == '-'; }
  // A readable rendering for failure messages: "+OK", "-ERR ...", "(nil)", "[a, b]"; RESP3
  // "(null)", "{k: v}", "=\"text\"".
  std::string ToString() const;
};

// The RESP2 encoding of a command (an array of bulk strings).
std::string Encode(const std::vector<std::string>& argv);

class Client {
 public:
  // Connects to ip:port (IPv4 or IPv6); fd() < 0 on failure.
  explicit Client(int port, const std::string& ip = "127.0.0.1");
  ~Client();
  Client(Client&& o) noexcept;
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  int fd() const { return fd_; }
  bool connected() const { return fd_ >= 0; }
  // Sends all bytes; false when the connection broke.
  bool Send(std::string_view bytes);
  // The next reply; nullopt on EOF, error, malformed data or after timeout_ms.
  std::optional<Reply> Read(int timeout_ms = 60000);
  // Send(Encode(argv)) then Read().
  std::optional<Reply> Call(const std::vector<std::string>& argv);
  // True when the server closed the connection (EOF or reset) within timeout_ms, after
  // discarding any bytes still in flight.
  bool WaitClosed(int timeout_ms = 60000);
  void ShutdownWrite();
  void Close();

 private:
  bool Fill(int timeout_ms);  // reads more bytes into buf_
  std::optional<Reply> Parse(size_t* pos, int depth);

  int fd_ = -1;
  std::string buf_;
  size_t pos_ = 0;
};

// A `pmrt serve` child process whose stdout is read until its listening line.
class ServerProcess {
 public:
  // Starts `binary serve pool --port 0 extra...`; port() is 0 if it did not come up (its
  // output is in startup_output()).
  ServerProcess(const std::string& binary, const std::string& pool,
                const std::vector<std::string>& extra);
  ~ServerProcess();  // SIGKILL if still running
  int port() const { return port_; }
  pid_t pid() const { return pid_; }
  const std::string& startup_output() const { return output_; }
  void Kill();  // SIGKILL and reap
  // SIGTERM and reap; the exit status (-1 if it did not exit normally).
  int Terminate();

 private:
  pid_t pid_ = -1;
  int out_fd_ = -1;
  int port_ = 0;
  std::string output_;
};

// Raises the soft descriptor limit to the hard one; returns the new soft limit.
uint64_t RaiseFileLimit();

// Options that create a key-value pool of `bytes` at its first open (the pools under test).
inline server::StoreOptions CreatePoolOf(size_t bytes) {
  server::StoreOptions o;
  o.create_size = bytes;
  return o;
}

}  // namespace pmrt::server::testing

#endif  // PMRT_TESTS_SERVER_RESP_CLIENT_H_
