// An in-process `pmrt serve` (tools/server/server.h) on a fresh pool in a temporary directory,
// for the server's gtest suites: start it, connect clients, call commands, stop it with the
// tree's invariants and the heap checked before the pool closes.
#ifndef PMRT_TESTS_SERVER_SERVER_FIXTURE_H_
#define PMRT_TESTS_SERVER_SERVER_FIXTURE_H_

#include <cstddef>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/server/resp_client.h"
#include "tests/util/test_util.h"
#include "tools/server/server.h"
#include "tools/server/store.h"

namespace pmrt::server::testing {

class ServerFixture : public ::testing::Test {
 protected:
  // A pool of `pool_bytes` at dir_/kv.pool (created, or the one a previous run left), served
  // on a free port by two workers.
  void StartServer(ServerOptions opt = {}, size_t pool_bytes = 128 << 20) {
    auto kv = server::Store::Open(dir_.File("kv.pool"), CreatePoolOf(pool_bytes));
    ASSERT_THAT(kv, pmrt::testing::IsOk());
    kv_ = std::move(*kv);
    opt.port = 0;
    opt.threads = 2;
    auto s = Server::Create(*kv_, opt);
    ASSERT_THAT(s, pmrt::testing::IsOk());
    server_ = std::move(*s);
    ASSERT_THAT(server_->Start(), pmrt::testing::IsOk());
  }
  void StopServer() {
    if (server_) server_->Stop();
    server_.reset();
    if (kv_) {
      EXPECT_THAT(kv_->tree().CheckInvariants(), pmrt::testing::IsOk());
      EXPECT_THAT(kv_->heap().Check(), pmrt::testing::IsOk());
      EXPECT_THAT(kv_->Close(), pmrt::testing::IsOk());
    }
    kv_.reset();
  }
  Client Connect() {
    Client c(server_->port());
    EXPECT_TRUE(c.connected());
    return c;
  }
  // The reply's rendering (Reply::ToString), or "(no reply)".
  static std::string Call(Client& c, const std::vector<std::string>& argv) {
    auto r = c.Call(argv);
    return r ? r->ToString() : "(no reply)";
  }

  pmrt::testing::TempDir dir_;
  std::unique_ptr<server::Store> kv_;
  std::unique_ptr<Server> server_;
};

}  // namespace pmrt::server::testing

#endif  // PMRT_TESTS_SERVER_SERVER_FIXTURE_H_
