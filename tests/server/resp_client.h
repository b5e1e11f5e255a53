// The server tests' harness: the RESP client (tools/server/resp_client.h) under this namespace,
// and `pmrt serve` spawned as a child process.
#ifndef PMRT_TESTS_SERVER_RESP_CLIENT_H_
#define PMRT_TESTS_SERVER_RESP_CLIENT_H_

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tools/server/resp_client.h"
#include "tools/server/store.h"

namespace pmrt::server::testing {

using pmrt::server::Client;
using pmrt::server::Encode;
using pmrt::server::Reply;

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
