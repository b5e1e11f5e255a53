// The server's commands under the crash simulator, on the code path `pmrt serve` runs: an
// Executor (tools/server/commands.h) over a Store attached to a simulated pool runs a seeded
// sequence of string, expiry and multi-key commands (SET with and without deadlines, EXPIRE,
// PERSIST, GETEX, SETEX, keys left past their deadline, DEL, APPEND; MSET, multi-key DEL,
// RENAME, COPY, MSETNX and EXEC, each one transaction), with epoch boundaries between them.
//
// Oracle, at every crash image, after the store's recovery: both trees and the heap pass their
// checks; every deadline belongs to a key that has a value; and the keys as a client reads them
// (value and deadline, a key past its deadline absent) equal the state at the last completed
// boundary or committed transaction, or the state after the operation the crash interrupted
// when that was a boundary or a transaction's commit. A single-key command between boundaries
// is never durable alone, and never half applied (value without deadline or the reverse).
//
// Transactions run right after a boundary, so that the rolled-back state a crash leaves is one
// a client saw; what a crash does to a transaction that follows epoch-scoped writes of its keys
// in the same epoch is RuntimeCrashTest's (TransactionRemoveOutlastsARolledBackEpochScopedRemove).
#include <chrono>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "epoch/pool.h"
#include "gtest/gtest.h"
#include "testing/sim.h"
#include "tests/util/crash_suite.h"
#include "tests/util/test_util.h"
#include "tools/server/commands.h"
#include "tools/server/store.h"

namespace pmrt::server {
namespace {

using pmrt::testing::EnvOr;

constexpr size_t kPoolSize = 16 << 20;
constexpr int64_t kFar = 4102444800000;  // a deadline in 2100 (unix ms)

StoreOptions SimStoreOptions() {
  StoreOptions o;
  o.epochs.interval = std::chrono::milliseconds(0);  // boundaries only where the test asks
  o.txn.background = false;
  o.txn.block_size = 4096;
  o.txn.log_budget = 64 << 10;
  o.txn.log_limit = 2 << 20;
  o.txn.cold_after_epochs = 0;
  o.txn.adaptive_cold = false;
  return o;
}

// The keys as the pool holds them: values and deadlines (8 bytes, as stored).
struct Physical {
  std::map<std::string, std::string> values, deadlines;
};

Physical ReadPhysical(const Store& s) {
  Physical p;
  s.db().tree().scan("", ~size_t{0}, [&](std::string_view k, std::string_view v) {
    p.values.emplace(k, v);
    return true;
  });
  s.expires().tree().scan("", ~size_t{0}, [&](std::string_view k, std::string_view v) {
    p.deadlines.emplace(k, v);
    return true;
  });
  return p;
}

int64_t DeadlineOf(const std::string& v) {
  int64_t ms = 0;
  if (v.size() == sizeof(ms)) std::memcpy(&ms, v.data(), sizeof(ms));
  return ms;
}

// The keys as a client reads them at `now_ms`: key -> value and deadline (-1: none); a key past
// its deadline is absent.
using Logical = std::map<std::string, std::pair<std::string, int64_t>>;

Logical ToLogical(const Physical& p, int64_t now_ms) {
  Logical l;
  for (const auto& [k, v] : p.values) {
    auto d = p.deadlines.find(k);
    const int64_t deadline = d == p.deadlines.end() ? -1 : DeadlineOf(d->second);
    if (deadline >= 0 && now_ms > deadline) continue;
    l.emplace(k, std::make_pair(v, deadline));
  }
  return l;
}

std::string Describe(const Logical& l) {
  std::string s = "{";
  for (const auto& [k, vd] : l) absl::StrAppend(&s, " ", k, "=", vd.first, "@", vd.second);
  return s + " }";
}

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

enum class Phase { kEpoch, kTxn, kBoundary };

struct Recovered {
  size_t op;
  Phase phase;
  Physical state;
  std::string id;  // the image's replay id
};

struct Outcome : pmrt::testing::CrashOutcome {
  uint64_t checked = 0, transactions = 0, boundaries = 0;
  std::vector<std::string> mismatches;
};

// One seeded run of `ops` operations.
Outcome RunWorkload(uint64_t seed, int ops, uint64_t max_images) {
  Outcome out;
  Sim::Options options;
  options.seed = seed;
  options.max_images_per_point = pmrt::testing::kMainImagesPerPoint;
  options.max_images = max_images;
  auto sim_or = Sim::Create(kPoolSize, options);
  EXPECT_TRUE(sim_or.ok()) << sim_or.status();
  if (!sim_or.ok()) return out;
  Sim& sim = **sim_or;
  sim.SetCrashPoints(Sim::CrashPoints::kNone);
  auto pool = Pool::CreateInMemory(sim.working(), kPoolSize, kRuntimeLayout,
                                   pmrt::testing::SimPoolOptions(sim), "sim-pool");
  EXPECT_TRUE(pool.ok()) << pool.status();
  if (!pool.ok()) return out;

  size_t op = 0;
  Phase phase = Phase::kEpoch;
  std::vector<Recovered> pending;  // images of the running operation, checked after it
  sim.SetHandler([&](CrashImage& img) -> absl::Status {
    auto image = Pool::OpenInMemory(img.base(), kPoolSize, kRuntimeLayout,
                                    pmrt::testing::EadrPoolOptions(), "crash-image");
    if (!image.ok()) return image.status();
    auto store = Store::Attach(std::move(*image), SimStoreOptions());
    if (!store.ok()) return store.status();
    for (Index* index : {&(*store)->db(), &(*store)->expires()}) {
      if (absl::Status st = index->tree().CheckInvariants(); !st.ok()) return st;
    }
    if (absl::Status st = (*store)->heap().Check(); !st.ok()) return st;
    Physical got = ReadPhysical(**store);
    for (const auto& [k, d] : got.deadlines) {
      if (!got.values.contains(k)) {
        return absl::DataLossError(absl::StrCat("key ", k, " has a deadline and no value"));
      }
    }
    pending.push_back({op, phase, std::move(got), img.id().ToString()});
    return absl::OkStatus();
  });

  auto store_or = Store::Attach(std::move(*pool), SimStoreOptions());
  EXPECT_TRUE(store_or.ok()) << store_or.status();
  if (!store_or.ok()) return out;
  Store& store = **store_or;
  ServerOptions server_options;
  ServerCounters counters;
  auto exec = std::make_unique<Executor>(store, server_options, counters);
  Session session;
  exec->Register(session, "sim", "sim", -1);
  auto call = [&](std::vector<std::string> argv) {
    std::string reply;
    uint64_t sync_epoch = 0;
    (void)exec->Execute(argv, session, &reply, &sync_epoch);
    return reply;
  };

  Physical durable = ReadPhysical(store);
  auto finish_op = [&](Phase done) {
    const Physical now_state = ReadPhysical(store);
    const int64_t now = NowMs();
    const Logical before = ToLogical(durable, now), after = ToLogical(now_state, now);
    for (const Recovered& r : pending) {
      ++out.checked;
      const Logical got = ToLogical(r.state, now);
      if (got == before || (r.phase != Phase::kEpoch && got == after)) continue;
      if (out.mismatches.size() < 5) {
        out.mismatches.push_back(absl::StrCat("image ", r.id, " in operation ", r.op, ": ",
                                              Describe(got), "; durable ", Describe(before),
                                              "; after ", Describe(after)));
      }
    }
    pending.clear();
    if (done != Phase::kEpoch) durable = now_state;
    ++op;
  };
  auto boundary = [&] {
    phase = Phase::kBoundary;
    EXPECT_TRUE(store.epochs().Advance().ok());
    ++out.boundaries;
    finish_op(Phase::kBoundary);
  };

  std::mt19937_64 rng(seed);
  auto key = [&] { return absl::StrCat("k", rng() % 5); };
  const auto start = std::chrono::steady_clock::now();
  sim.SetCrashPoints(options.crash_points);
  for (int i = 0; i < ops; ++i) {
    const std::string k = key(), v = absl::StrCat("v", i);
    const std::string far = std::to_string(kFar + i);
    const int kind = static_cast<int>(rng() % 19);
    if (kind >= 12 && kind < 18) {
      boundary();  // a transaction starts an epoch (see the header)
      phase = Phase::kTxn;
      std::string k2 = key();
      if (k2 == k) k2 += "x";
      switch (kind) {
        case 12:
          call({"MSET", k, v, k2, v});
          break;
        case 13:
          call({"DEL", k, k2});
          break;
        case 14:
          call({"RENAME", k, k2});
          break;
        case 15:
          call({"COPY", k, k2, "REPLACE"});
          break;
        case 16:
          call({"MULTI"});
          call({"SET", k, v});
          call({"PEXPIREAT", k2, far});
          call({"APPEND", k2, "+"});
          call({"EXEC"});
          break;
        default:
          call({"MSETNX", k, v, k2, v});
          break;
      }
      ++out.transactions;
      finish_op(Phase::kTxn);
      continue;
    }
    if (kind == 18) {
      boundary();
      continue;
    }
    phase = Phase::kEpoch;
    switch (kind) {
      case 0:
        call({"SET", k, v});
        break;
      case 1:
        call({"SET", k, v, "PXAT", far});
        break;
      case 2:
        call({"SET", k, v, "KEEPTTL"});
        break;
      case 3:
        call({"PEXPIREAT", k, far});
        break;
      case 4:
        call({"PEXPIREAT", k, "1"});  // in the past: removes the key
        break;
      case 5:
        call({"PERSIST", k});
        break;
      case 6:
        call({"DEL", k});
        break;
      case 7:
        call({"APPEND", k, "+"});
        break;
      case 8:
        call({"GETEX", k, "PXAT", far});
        break;
      case 9:
        call({"SETEX", k, "1000", v});
        break;
      case 10:
        // A key left past its deadline: the next write of it removes it first.
        call({"SET", k, v, "PX", "1"});
        std::this_thread::sleep_for(std::chrono::milliseconds(3));
        break;
      default:
        call({"GETEX", k, "PERSIST"});
        break;
    }
    finish_op(Phase::kEpoch);
  }
  boundary();
  pmrt::testing::FinishRun(sim, start, &out);
  exec->Unregister(session);
  exec.reset();
  EXPECT_TRUE(store.Close().ok());
  return out;
}

TEST(ServerSimCrashTest, ValuesAndDeadlinesRecoverTogether) {
  const uint64_t images = EnvOr("PMRT_SERVER_SIM_IMAGES", 6000);
  const uint64_t first = EnvOr("PMRT_SERVER_SIM_SEED", 1);
  for (uint64_t seed = first; seed < first + 2; ++seed) {
    const Outcome r = RunWorkload(seed, 120, images / 2);
    ASSERT_TRUE(r.failures.empty()) << r.failures[0].ToString();
    EXPECT_TRUE(r.mismatches.empty()) << ::testing::PrintToString(r.mismatches);
    std::printf(
        "seed %lu: %lu crash points, %lu images (%lu checked), %lu transactions, "
        "%lu boundaries, %.2f s\n",
        seed, r.stats.crash_points, r.stats.images, r.checked, r.transactions, r.boundaries,
        r.seconds);
    EXPECT_EQ(r.checked, r.stats.images);
    EXPECT_GT(r.stats.crash_points, 30u);
    EXPECT_GT(r.transactions, 10u);
  }
}

}  // namespace
}  // namespace pmrt::server
