#include "tests/server/resp_client.h"

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

namespace pmrt::server::testing {

ServerProcess::ServerProcess(const std::string& binary, const std::string& pool,
                             const std::vector<std::string>& extra) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return;
  std::vector<std::string> args = {binary, "serve", pool, "--port", "0"};
  args.insert(args.end(), extra.begin(), extra.end());
  pid_ = fork();
  if (pid_ == 0) {
    dup2(fds[1], STDOUT_FILENO);
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    execv(binary.c_str(), argv.data());
    _exit(127);
  }
  close(fds[1]);
  out_fd_ = fds[0];
  if (pid_ < 0) return;
  // Reads the listening line: "pmrt serve: listening on 127.0.0.1:PORT, ...".
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (output_.find('\n') == std::string::npos && std::chrono::steady_clock::now() < deadline) {
    pollfd p{out_fd_, POLLIN, 0};
    if (poll(&p, 1, 1000) <= 0) continue;
    char tmp[4096];
    ssize_t n = read(out_fd_, tmp, sizeof(tmp));
    if (n <= 0) break;
    output_.append(tmp, static_cast<size_t>(n));
  }
  const std::string marker = "listening on ";
  size_t at = output_.find(marker);
  if (at == std::string::npos) return;
  size_t colon = output_.find(':', at + marker.size());
  size_t comma = output_.find(',', colon);
  if (colon == std::string::npos || comma == std::string::npos) return;
  int port;
  if (absl::SimpleAtoi(output_.substr(colon + 1, comma - colon - 1), &port)) port_ = port;
}

ServerProcess::~ServerProcess() {
  Kill();
  if (out_fd_ >= 0) close(out_fd_);
}

void ServerProcess::Kill() {
  if (pid_ <= 0) return;
  kill(pid_, SIGKILL);
  int status;
  waitpid(pid_, &status, 0);
  pid_ = -1;
}

int ServerProcess::Terminate() {
  if (pid_ <= 0) return -1;
  kill(pid_, SIGTERM);
  int status;
  waitpid(pid_, &status, 0);
  pid_ = -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

uint64_t RaiseFileLimit() {
  rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) != 0) return 0;
  if (rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
  }
  return rl.rlim_cur;
}

}  // namespace pmrt::server::testing
