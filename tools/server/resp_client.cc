#include "tools/server/resp_client.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace pmrt::server {

std::string Reply::ToString() const {
  switch (type) {
    case '+':
      return "+" + str;
    case '-':
      return "-" + str;
    case ':':
      return absl::StrCat(":", integer);
    case '$':
      return null ? "(nil)" : "\"" + str + "\"";
    case '*': {
      if (null) return "(nil array)";
      std::vector<std::string> parts;
      for (const Reply& e : elements) parts.push_back(e.ToString());
      return "[" + absl::StrJoin(parts, ", ") + "]";
    }
    case '_':
      return "(null)";
    case '=':
      return "=\"" + str + "\"";
    case '%': {
      std::vector<std::string> parts;
      for (size_t i = 0; i + 1 < elements.size(); i += 2) {
        parts.push_back(elements[i].ToString() + ": " + elements[i + 1].ToString());
      }
      return "{" + absl::StrJoin(parts, ", ") + "}";
    }
    default:
      return "(no reply)";
  }
}

std::string Encode(const std::vector<std::string>& argv) {
  std::string s = absl::StrCat("*", argv.size(), "\r\n");
  for (const std::string& a : argv) absl::StrAppend(&s, "$", a.size(), "\r\n", a, "\r\n");
  return s;
}

Client::Client(int port, const std::string& ip) {
  sockaddr_storage ss{};
  socklen_t len = 0;
  auto* v4 = reinterpret_cast<sockaddr_in*>(&ss);
  auto* v6 = reinterpret_cast<sockaddr_in6*>(&ss);
  if (inet_pton(AF_INET, ip.c_str(), &v4->sin_addr) == 1) {
    v4->sin_family = AF_INET;
    v4->sin_port = htons(static_cast<uint16_t>(port));
    len = sizeof(*v4);
  } else if (inet_pton(AF_INET6, ip.c_str(), &v6->sin6_addr) == 1) {
    v6->sin6_family = AF_INET6;
    v6->sin6_port = htons(static_cast<uint16_t>(port));
    len = sizeof(*v6);
  } else {
    return;
  }
  fd_ = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd_ < 0) return;
  if (connect(fd_, reinterpret_cast<sockaddr*>(&ss), len) != 0) {
    close(fd_);
    fd_ = -1;
    return;
  }
  int one = 1;
  setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

Client::Client(Client&& o) noexcept : fd_(o.fd_), buf_(std::move(o.buf_)), pos_(o.pos_) {
  o.fd_ = -1;
}

Client::~Client() { Close(); }

void Client::Close() {
  if (fd_ >= 0) close(fd_);
  fd_ = -1;
}

void Client::ShutdownWrite() {
  if (fd_ >= 0) shutdown(fd_, SHUT_WR);
}

bool Client::Send(std::string_view bytes) {
  while (!bytes.empty()) {
    ssize_t w = send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    bytes.remove_prefix(static_cast<size_t>(w));
  }
  return true;
}

bool Client::Fill(int timeout_ms) {
  if (fd_ < 0) return false;
  pollfd p{fd_, POLLIN, 0};
  int r;
  do {
    r = poll(&p, 1, timeout_ms);
  } while (r < 0 && errno == EINTR);
  if (r <= 0) return false;
  char tmp[64 << 10];
  ssize_t n;
  do {
    n = recv(fd_, tmp, sizeof(tmp), 0);
  } while (n < 0 && errno == EINTR);
  if (n <= 0) return false;
  if (pos_ > 0 && pos_ == buf_.size()) {
    buf_.clear();
    pos_ = 0;
  }
  buf_.append(tmp, static_cast<size_t>(n));
  return true;
}

namespace {
constexpr int kIncomplete = -1;
}

// Parses one reply at *pos; nullopt with *pos == kIncomplete-marker handled by the caller.
std::optional<Reply> Client::Parse(size_t* pos, int depth) {
  if (depth > 8) return std::nullopt;
  size_t eol = buf_.find("\r\n", *pos);
  if (eol == std::string::npos) {
    *pos = static_cast<size_t>(kIncomplete);
    return std::nullopt;
  }
  Reply r;
  r.type = buf_[*pos];
  std::string line = buf_.substr(*pos + 1, eol - *pos - 1);
  *pos = eol + 2;
  switch (r.type) {
    case '+':
    case '-':
      r.str = line;
      return r;
    case ':':
      if (!absl::SimpleAtoi(line, &r.integer)) return std::nullopt;
      return r;
    case '_':
      r.null = true;
      return r;
    case '$':
    case '=': {
      int64_t n;
      if (!absl::SimpleAtoi(line, &n)) return std::nullopt;
      if (n < 0) {
        r.null = true;
        return r;
      }
      if (buf_.size() - *pos < static_cast<size_t>(n) + 2) {
        *pos = static_cast<size_t>(kIncomplete);
        return std::nullopt;
      }
      r.str = buf_.substr(*pos, static_cast<size_t>(n));
      *pos += static_cast<size_t>(n) + 2;
      if (r.type == '=') {  // a verbatim string: "txt:" and the text
        if (r.str.size() < 4 || r.str[3] != ':') return std::nullopt;
        r.str.erase(0, 4);
      }
      return r;
    }
    case '*':
    case '%': {
      int64_t n;
      if (!absl::SimpleAtoi(line, &n)) return std::nullopt;
      if (n < 0) {
        r.null = true;
        return r;
      }
      if (r.type == '%') n *= 2;  // a map: its keys and values, alternating
      for (int64_t i = 0; i < n; ++i) {
        auto e = Parse(pos, depth + 1);
        if (!e) return std::nullopt;
        r.elements.push_back(std::move(*e));
      }
      return r;
    }
    default:
      return std::nullopt;
  }
}

std::optional<Reply> Client::Read(int timeout_ms) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  // An incomplete reply is parsed again only once the bytes have doubled, or no byte has come
  // for 5 ms: a large reply (millions of elements) then costs linear time, not quadratic.
  size_t failed_at = 0;  // bytes the last parse found incomplete
  while (true) {
    const size_t avail = buf_.size() - pos_;
    if (avail > 0 && (failed_at == 0 || avail >= 2 * failed_at || !Fill(5))) {
      if (buf_.size() - pos_ > failed_at) {
        size_t pos = pos_;
        auto r = Parse(&pos, 0);
        if (r) {
          pos_ = pos;
          return r;
        }
        if (pos != static_cast<size_t>(kIncomplete)) return std::nullopt;  // malformed
        failed_at = buf_.size() - pos_;
        continue;
      }
    } else if (avail > 0) {
      continue;  // Fill(5) brought more bytes
    }
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0 || !Fill(static_cast<int>(left.count()))) return std::nullopt;
  }
}

std::optional<Reply> Client::Call(const std::vector<std::string>& argv) {
  if (!Send(Encode(argv))) return std::nullopt;
  return Read();
}

bool Client::WaitClosed(int timeout_ms) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (true) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return false;
    pollfd p{fd_, POLLIN, 0};
    if (poll(&p, 1, static_cast<int>(left.count())) <= 0) continue;
    char tmp[64 << 10];
    ssize_t n = recv(fd_, tmp, sizeof(tmp), 0);
    if (n == 0 || (n < 0 && errno != EINTR && errno != EAGAIN)) return true;
  }
}

}  // namespace pmrt::server
