// A small blocking RESP2 (and RESP3) client: connect, send raw bytes or commands, read replies
// (with a timeout that guards against a hung peer). Used by the server's tests and by
// bench/server_txbench.cc; not by the server.
//
//   pmrt::server::Client c(port);
//   auto r = c.Call({"SET", "k", "v"});       // r->IsOk()
//   c.Send(Encode({"MULTI"}) + Encode({"EXEC"}));
//   auto a = c.Read(), b = c.Read();
#ifndef PMRT_TOOLS_SERVER_RESP_CLIENT_H_
#define PMRT_TOOLS_SERVER_RESP_CLIENT_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace pmrt::server {

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

}  // namespace pmrt::server

#endif  // PMRT_TOOLS_SERVER_RESP_CLIENT_H_
