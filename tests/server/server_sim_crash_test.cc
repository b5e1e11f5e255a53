// The server's commands under the crash simulator, on the code path `pmrt serve` runs: an
// Executor (tools/server/commands.h) over a Store attached to a simulated pool runs a seeded
// sequence of string, expiry, hash and multi-key commands (SET with and without deadlines,
// EXPIRE, PERSIST, GETEX, SETEX, keys left past their deadline, DEL, APPEND; HSET, HDEL,
// HINCRBY, a deadline on a hash, a string command over a hash; MSET, multi-key DEL, RENAME,
// COPY, MSETNX and EXEC, each one transaction), with epoch boundaries between them.
//
// Oracle, at every crash image, after the store's recovery: the four trees and the heap pass
// their checks; no key is both a string and a hash, each hash's header counts exactly its
// fields, no field lies outside a hash, every deadline belongs to a key; and the keys as a
// client reads them (value or fields, and deadline; a key past its deadline absent) equal the
// state at the last completed boundary or committed transaction, or the state after the
// operation the crash interrupted when that was a boundary or a transaction's commit. A
// single-key command between boundaries is never durable alone, and never half applied (value
// without deadline or the reverse, part of an HSET).
//
// Transactions run between two boundaries, so that the rolled-back state a crash leaves is one
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

// The keys as the pool holds them: string values, deadlines (8 bytes, as stored), hash headers
// (field counts) and hash fields (by their index key), each index as it is.
struct Physical {
  std::map<std::string, std::string> values, deadlines, hashes, fields;
};

std::map<std::string, std::string> ReadIndex(const Index& index) {
  std::map<std::string, std::string> m;
  index.tree().scan("", ~size_t{0}, [&](std::string_view k, std::string_view v) {
    m.emplace(k, v);
    return true;
  });
  return m;
}

Physical ReadPhysical(const Store& s) {
  return {ReadIndex(s.db()), ReadIndex(s.expires()), ReadIndex(s.hashes()), ReadIndex(s.fields())};
}

// The fields of hash `key` in `p`: "field=value;" each, in order.
std::string FieldsOf(const Physical& p, const std::string& key) {
  const std::string prefix = HashFieldPrefix(key);
  std::string out;
  for (auto it = p.fields.lower_bound(prefix);
       it != p.fields.end() && it->first.starts_with(prefix); ++it) {
    absl::StrAppend(&out, it->first.substr(prefix.size()), "=", it->second, ";");
  }
  return out;
}

// The structure every image must have: no key both a string and a hash, each hash header
// counting exactly its fields, no field outside a hash, no deadline without its key.
absl::Status CheckStructure(const Physical& p) {
  size_t fields = 0;
  for (const auto& [k, count] : p.hashes) {
    if (p.values.contains(k))
      return absl::DataLossError(absl::StrCat(k, " is a string and a hash"));
    int64_t n = 0;
    if (count.size() == sizeof(n)) std::memcpy(&n, count.data(), sizeof(n));
    const std::string prefix = HashFieldPrefix(k);
    int64_t found = 0;
    for (auto it = p.fields.lower_bound(prefix);
         it != p.fields.end() && it->first.starts_with(prefix); ++it) {
      ++found;
    }
    if (n != found || n == 0) {
      return absl::DataLossError(
          absl::StrCat("hash ", k, " counts ", n, " fields and has ", found));
    }
    fields += static_cast<size_t>(found);
  }
  if (fields != p.fields.size()) {
    return absl::DataLossError(absl::StrCat(p.fields.size() - fields, " field(s) outside a hash"));
  }
  for (const auto& [k, d] : p.deadlines) {
    if (!p.values.contains(k) && !p.hashes.contains(k)) {
      return absl::DataLossError(absl::StrCat("key ", k, " has a deadline and no value"));
    }
  }
  return absl::OkStatus();
}

int64_t DeadlineOf(const std::string& v) {
  int64_t ms = 0;
  if (v.size() == sizeof(ms)) std::memcpy(&ms, v.data(), sizeof(ms));
  return ms;
}

// The keys as a client reads them at `now_ms`: key -> value ("s:" and the string, or "h:" and
// the fields) and deadline (-1: none); a key past its deadline is absent.
using Logical = std::map<std::string, std::pair<std::string, int64_t>>;

Logical ToLogical(const Physical& p, int64_t now_ms) {
  Logical l;
  auto add = [&](const std::string& k, std::string value) {
    auto d = p.deadlines.find(k);
    const int64_t deadline = d == p.deadlines.end() ? -1 : DeadlineOf(d->second);
    if (deadline >= 0 && now_ms > deadline) return;
    l.emplace(k, std::make_pair(std::move(value), deadline));
  };
  for (const auto& [k, v] : p.values) add(k, "s:" + v);
  for (const auto& [k, n] : p.hashes) add(k, "h:" + FieldsOf(p, k));
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

// The single-key commands, epoch-scoped on a string key (kind 0 to 11).
std::vector<std::string> EpochCommand(int kind, const std::string& k, const std::string& v,
                                      const std::string& far) {
  switch (kind) {
    case 0:
      return {"SET", k, v};
    case 1:
      return {"SET", k, v, "PXAT", far};
    case 2:
      return {"SET", k, v, "KEEPTTL"};
    case 3:
      return {"PEXPIREAT", k, far};
    case 4:
      return {"PEXPIREAT", k, "1"};  // in the past: removes the key
    case 5:
      return {"PERSIST", k};
    case 6:
      return {"DEL", k};
    case 7:
      return {"APPEND", k, "+"};
    case 8:
      return {"GETEX", k, "PXAT", far};
    case 9:
      return {"SETEX", k, "1000", v};
    case 10:
      return {"SET", k, v, "PX", "1"};
    default:
      return {"GETEX", k, "PERSIST"};
  }
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

// The server without its sockets: a simulator, a store on its pool and an Executor with one
// session. Crash points are off until the test turns them on; the image handler is the test's.
class SimServer {
 public:
  static std::unique_ptr<SimServer> Create(const Sim::Options& options) {
    auto s = std::unique_ptr<SimServer>(new SimServer());
    auto sim = Sim::Create(kPoolSize, options);
    EXPECT_TRUE(sim.ok()) << sim.status();
    if (!sim.ok()) return nullptr;
    s->sim_ = std::move(*sim);
    s->sim_->SetCrashPoints(Sim::CrashPoints::kNone);
    auto pool = Pool::CreateInMemory(s->sim_->working(), kPoolSize, kRuntimeLayout,
                                     pmrt::testing::SimPoolOptions(*s->sim_), "sim-pool");
    EXPECT_TRUE(pool.ok()) << pool.status();
    if (!pool.ok()) return nullptr;
    auto store = Store::Attach(std::move(*pool), SimStoreOptions());
    EXPECT_TRUE(store.ok()) << store.status();
    if (!store.ok()) return nullptr;
    s->store_ = std::move(*store);
    s->exec_ = std::make_unique<Executor>(*s->store_, s->options_, s->counters_);
    s->exec_->Register(s->session_, "sim", "sim", -1);
    return s;
  }
  ~SimServer() {
    if (exec_ == nullptr) return;
    sim_->SetCrashPoints(Sim::CrashPoints::kNone);
    exec_->Unregister(session_);
    exec_.reset();
    EXPECT_TRUE(store_->Close().ok());
  }
  Sim& sim() { return *sim_; }
  Store& store() { return *store_; }
  // The reply of argv, as the wire carries it.
  std::string Call(std::vector<std::string> argv) {
    std::string reply;
    uint64_t sync_epoch = 0;
    (void)exec_->Execute(argv, session_, &reply, &sync_epoch);
    return reply;
  }

 private:
  SimServer() = default;
  std::unique_ptr<Sim> sim_;
  std::unique_ptr<Store> store_;
  ServerOptions options_;
  ServerCounters counters_;
  std::unique_ptr<Executor> exec_;
  Session session_;
};

// The store a crash image recovers to (Store::Attach: the runtime's recovery, then the store's).
absl::StatusOr<std::unique_ptr<Store>> OpenImage(CrashImage& img) {
  auto image = Pool::OpenInMemory(img.base(), kPoolSize, kRuntimeLayout,
                                  pmrt::testing::EadrPoolOptions(), "crash-image");
  if (!image.ok()) return image.status();
  return Store::Attach(std::move(*image), SimStoreOptions());
}

// One seeded run of `ops` operations.
Outcome RunWorkload(uint64_t seed, int ops, uint64_t max_images) {
  Outcome out;
  Sim::Options options;
  options.seed = seed;
  options.max_images_per_point = pmrt::testing::kMainImagesPerPoint;
  options.max_images = max_images;
  std::unique_ptr<SimServer> server = SimServer::Create(options);
  if (server == nullptr) return out;
  Sim& sim = server->sim();
  Store& store = server->store();
  auto call = [&](std::vector<std::string> argv) { return server->Call(std::move(argv)); };

  size_t op = 0;
  Phase phase = Phase::kEpoch;
  std::vector<Recovered> pending;  // images of the running operation, checked after it
  sim.SetHandler([&](CrashImage& img) -> absl::Status {
    auto recovered = OpenImage(img);
    if (!recovered.ok()) return recovered.status();
    Store& r = **recovered;
    for (Index* index : {&r.db(), &r.expires(), &r.hashes(), &r.fields()}) {
      if (absl::Status st = index->tree().CheckInvariants(); !st.ok()) return st;
    }
    if (absl::Status st = r.heap().Check(); !st.ok()) return st;
    Physical got = ReadPhysical(r);
    if (absl::Status st = CheckStructure(got); !st.ok()) return st;
    pending.push_back({op, phase, std::move(got), img.id().ToString()});
    return absl::OkStatus();
  });

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
    int kind = static_cast<int>(rng() % 25);
    // A write of a key that holds a hash is a transaction (hash_commands.cc, invariant 2).
    const bool hash_key = ReadPhysical(store).hashes.contains(k);
    if (hash_key && kind < 12 && kind != 7 && kind != 8 && kind != 11) kind += 100;
    if (kind >= 12 && kind != 18) {
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
        case 17:
          call({"MSETNX", k, v, k2, v});
          break;
        case 19:
        case 20:
          call({"HSET", k, "f", v, absl::StrCat("g", i % 3), v});
          break;
        case 21:
          call({"HDEL", k, "f", "g0"});
          break;
        case 22:
          call({"HINCRBY", k, "n", "1"});
          break;
        case 23:
          call({"MULTI"});
          call({"HSET", k, "f", v});
          call({"HSET", k2, "g1", v});
          call({"PEXPIREAT", k2, far});
          call({"EXEC"});
          break;
        case 24:
          // A deadline on a hash (on a string, the HSET fails and the deadline would be
          // epoch-scoped: not this kind's).
          if (call({"HSET", k, "f", v})[0] == ':') {
            finish_op(Phase::kTxn);  // two transactions: each its own operation
            ++out.transactions;
            call({"PEXPIREAT", k, far});
          }
          break;
        default:
          // An epoch-scoped command of a key that holds a hash: a transaction.
          kind -= 100;
          call(EpochCommand(kind, k, v, far));
          break;
      }
      ++out.transactions;
      finish_op(Phase::kTxn);
      boundary();  // nothing epoch-scoped after it in its epoch (see the header)
      continue;
    }
    if (kind == 18) {
      boundary();
      continue;
    }
    phase = Phase::kEpoch;
    call(EpochCommand(kind, k, v, far));
    if (kind == 10) {
      // A key left past its deadline: the next write of it removes it first.
      std::this_thread::sleep_for(std::chrono::milliseconds(3));
    }
    finish_op(Phase::kEpoch);
  }
  boundary();
  pmrt::testing::FinishRun(sim, start, &out);
  return out;
}

TEST(ServerSimCrashTest, KeysRecoverWholeWithTheirDeadlines) {
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

// FLUSHALL of a store larger than one epoch's share of the flush (its removals cross an epoch
// boundary): every image recovers the whole store or an empty one, never a part (the durable
// mark; a recovery that finds it finishes the flush). Two images at every crash point of the
// flush: without the mark, the images after the boundary in the middle hold a part.
TEST(ServerSimCrashTest, FlushAllKeepsEveryKeyOrNone) {
  Sim::Options options;
  options.seed = EnvOr("PMRT_SERVER_SIM_SEED", 1);
  options.max_images_per_point = EnvOr("PMRT_SERVER_SIM_FLUSH_PER_POINT", 2);
  options.max_images = EnvOr("PMRT_SERVER_SIM_FLUSH_IMAGES", 1400);
  std::unique_ptr<SimServer> server = SimServer::Create(options);
  ASSERT_NE(server, nullptr);
  Sim& sim = server->sim();
  Store& store = server->store();
  auto call = [&](std::vector<std::string> argv) { return server->Call(std::move(argv)); };
  Logical full;
  uint64_t whole = 0, empty = 0;
  std::vector<std::string> wrong;
  sim.SetHandler([&](CrashImage& img) -> absl::Status {
    auto recovered = OpenImage(img);
    if (!recovered.ok()) return recovered.status();
    const Physical got = ReadPhysical(**recovered);
    if (absl::Status st = CheckStructure(got); !st.ok()) return st;
    const Logical l = ToLogical(got, NowMs());
    if (l == full) {
      ++whole;
    } else if (l.empty() && got.deadlines.empty()) {
      ++empty;
    } else {
      return absl::DataLossError(
          absl::StrCat("a part of the store: ", l.size(), " of ", full.size(), " keys"));
    }
    return absl::OkStatus();
  });
  // About 4,700 index entries: strings, strings with deadlines, hashes of three fields.
  for (int i = 0; i < 3000; ++i) ASSERT_EQ(call({"SET", absl::StrCat("s", i), "v"}), "+OK\r\n");
  for (int i = 0; i < 500; ++i) {
    ASSERT_EQ(call({"SET", absl::StrCat("d", i), "v", "PXAT", std::to_string(kFar)}), "+OK\r\n");
  }
  for (int i = 0; i < 300; ++i) {
    ASSERT_EQ(call({"HSET", absl::StrCat("h", i), "a", "1", "b", "2", "c", "3"}), ":3\r\n");
  }
  ASSERT_TRUE(store.epochs().Sync().ok());
  full = ToLogical(ReadPhysical(store), NowMs());
  ASSERT_EQ(full.size(), 3800u);
  const auto start = std::chrono::steady_clock::now();
  sim.SetCrashPoints(options.crash_points);
  EXPECT_EQ(call({"FLUSHALL"}), "+OK\r\n");
  pmrt::testing::CrashOutcome out;
  pmrt::testing::FinishRun(sim, start, &out);
  ASSERT_TRUE(out.failures.empty()) << out.failures[0].ToString();
  std::printf("FLUSHALL: %lu crash points, %lu images (%lu whole, %lu empty), %.2f s\n",
              out.stats.crash_points, out.stats.images, whole, empty, out.seconds);
  EXPECT_GT(whole, 0u);
  EXPECT_GT(empty, 0u);
  EXPECT_EQ(ReadPhysical(store).values.size(), 0u);
}

}  // namespace
}  // namespace pmrt::server
