// pmrt-server-txbench: MULTI/EXEC transactions against a Redis-protocol server (pmrt serve or
// redis-server), the load redis-benchmark has no test for. C connections, each on its own
// thread, pipeline P transactions at a time; each transaction is
//
//   MULTI; SET tx:<r1> <value>; INCR ctr:<r2>; EXEC        (r1, r2 random in [0, KEYSPACE))
//
// and every EXEC reply is checked (an array of +OK and an integer). Prints one line, and with
// --json FILE appends {"bench":"server","test":"MULTI","system":...,"pipeline":P,"rps":...}
// where rps counts transactions (EXECs) per second, and the process CPU of the client.
//
//   pmrt-server-txbench --port P [--clients 50] [--transactions 100000] [--pipeline 16]
//                       [--keyspace 100000] [--value-bytes 3] [--system NAME] [--json FILE]
#include <sys/resource.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "tools/server/resp_client.h"

namespace {

using pmrt::server::Client;
using pmrt::server::Encode;

struct Flags {
  int port = 0;
  int clients = 50;
  int64_t transactions = 100000;
  int pipeline = 16;
  int64_t keyspace = 100000;
  size_t value_bytes = 3;
  std::string system = "server";
  std::string json;
};

int Usage() {
  std::fprintf(stderr,
               "usage: pmrt-server-txbench --port P [--clients C] [--transactions N] "
               "[--pipeline P] [--keyspace K] [--value-bytes B] [--system NAME] [--json FILE]\n");
  return 2;
}

bool Parse(int argc, char** argv, Flags* f) {
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string name = argv[i];
    const char* v = argv[i + 1];
    bool ok = true;
    int64_t n = 0;
    if (name == "--system") {
      f->system = v;
      continue;
    }
    if (name == "--json") {
      f->json = v;
      continue;
    }
    ok = absl::SimpleAtoi(v, &n) && n > 0;
    if (!ok) return false;
    if (name == "--port") {
      f->port = static_cast<int>(n);
    } else if (name == "--clients") {
      f->clients = static_cast<int>(n);
    } else if (name == "--transactions") {
      f->transactions = n;
    } else if (name == "--pipeline") {
      f->pipeline = static_cast<int>(n);
    } else if (name == "--keyspace") {
      f->keyspace = n;
    } else if (name == "--value-bytes") {
      f->value_bytes = static_cast<size_t>(n);
    } else {
      return false;
    }
  }
  return argc % 2 == 1 && f->port > 0;
}

double CpuSeconds() {
  rusage u;
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

}  // namespace

int main(int argc, char** argv) {
  Flags f;
  if (!Parse(argc, argv, &f)) return Usage();
  const std::string value(f.value_bytes, 'x');
  std::atomic<int64_t> done{0};
  std::atomic<bool> failed{false};
  std::vector<std::thread> threads;
  const int64_t per_client = f.transactions / f.clients;
  const double cpu0 = CpuSeconds();
  const auto start = std::chrono::steady_clock::now();
  for (int c = 0; c < f.clients; ++c) {
    threads.emplace_back([&, c] {
      Client client(f.port);
      if (!client.connected()) {
        std::fprintf(stderr, "pmrt-server-txbench: cannot connect to port %d\n", f.port);
        failed = true;
        return;
      }
      std::mt19937_64 rng(1000 + c);
      for (int64_t sent = 0; sent < per_client && !failed.load(std::memory_order_relaxed);) {
        const int64_t batch = std::min<int64_t>(f.pipeline, per_client - sent);
        std::string req;
        for (int64_t i = 0; i < batch; ++i) {
          req += Encode({"MULTI"});
          req += Encode({"SET", absl::StrCat("tx:", rng() % f.keyspace), value});
          req += Encode({"INCR", absl::StrCat("ctr:", rng() % f.keyspace)});
          req += Encode({"EXEC"});
        }
        if (!client.Send(req)) {
          failed = true;
          return;
        }
        for (int64_t i = 0; i < batch * 4; ++i) {
          auto r = client.Read();
          const bool exec = i % 4 == 3;
          if (!r || r->IsError() || (exec && (r->type != '*' || r->elements.size() != 2))) {
            std::fprintf(stderr, "pmrt-server-txbench: unexpected reply %s\n",
                         r ? r->ToString().c_str() : "(none)");
            failed = true;
            return;
          }
        }
        sent += batch;
        done.fetch_add(batch, std::memory_order_relaxed);
      }
    });
  }
  for (std::thread& t : threads) t.join();
  const double secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const double cpu = CpuSeconds() - cpu0;
  if (failed) return 1;
  const double rps = static_cast<double>(done.load()) / secs;
  std::printf(
      "%s MULTI/EXEC: %.0f transactions/s (%ld in %.2f s, %d clients, pipeline %d; "
      "client CPU %.2f s)\n",
      f.system.c_str(), rps, static_cast<long>(done.load()), secs, f.clients, f.pipeline, cpu);
  if (!f.json.empty()) {
    FILE* out = std::fopen(f.json.c_str(), "a");
    if (out == nullptr) {
      std::perror(f.json.c_str());
      return 1;
    }
    std::fprintf(out,
                 "{\"bench\":\"server\",\"system\":\"%s\",\"test\":\"MULTI\",\"pipeline\":%d,"
                 "\"rps\":%.0f,\"client_cpu_s\":%.3f}\n",
                 f.system.c_str(), f.pipeline, rps, cpu);
    std::fclose(out);
  }
  return 0;
}
