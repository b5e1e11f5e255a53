// Process-kill loop over the toy redo log on a real pool file (msync backend): the child commits
// transactions until SIGKILL; the parent reopens the file through Pool::Open, recovers and checks
// that the store holds exactly the acknowledged transactions (plus possibly the one in flight).
// Every few iterations the recovery itself is killed and done again.
#include <cstdlib>

#include "epoch/pool.h"
#include "gtest/gtest.h"
#include "testing/kill_harness.h"
#include "tests/util/test_util.h"
#include "tools/toy_redo_log.h"

namespace pmrt {
namespace {

using toy::Model;
using toy::ToyStore;

// Rebuilds the states a child's run may have left: start from `base`, then the child's
// deterministic transaction stream; `acked` committed, one more possibly in flight.
Model ModelOf(const toy::State& base, uint64_t stream_seed, uint64_t acked, uint64_t started) {
  Model m;
  m.states = {base};
  uint64_t rng = stream_seed;
  for (uint64_t t = 0; t < started; ++t) {
    m.Begin(toy::RandomTx(rng));
    if (t < acked) m.End();
  }
  return m;
}

TEST(KillTest, ToyRedoLogSurvivesSigkill) {
  testing::TempDir dir;
  const std::string path = dir.File("toy.pool");
  {
    auto pool = Pool::Create(path, Pool::kMinPoolSize, "toy");
    ASSERT_OK(pool);
  }
  const char* env = std::getenv("PMRT_KILLS");
  KillLoopOptions o;
  o.kills = env ? std::atoi(env) : 200;
  o.max_delay_us = 3000;
  PoolOptions po;
  po.backend = BackendKind::kMsync;
  toy::State current{};  // the store's state before each child runs
  uint64_t total_acked = 0;
  auto st = RunKillLoop(
      o,
      [&](int iteration, KillProgress& progress) {
        auto pool = Pool::Open(path, "toy", po);
        if (!pool.ok()) _exit(4);
        ToyStore store((*pool)->region_base(PoolRegion::kHeap), (*pool)->persister());
        store.Recover();
        progress.ready.store(1);
        uint64_t rng = 1000 + static_cast<uint64_t>(iteration);
        for (;;) {
          auto tx = toy::RandomTx(rng);
          progress.started.fetch_add(1);
          uint64_t seq = store.Commit(tx);
          progress.acked.fetch_add(1);  // the commit returned: durable from here on
          store.Apply(seq);
        }
      },
      [&](int iteration, const KillProgress& progress) -> absl::Status {
        auto pool = Pool::Open(path, "toy", po);
        if (!pool.ok()) return pool.status();
        if ((*pool)->was_clean_shutdown()) return absl::InternalError("a kill looked clean");
        ToyStore store((*pool)->region_base(PoolRegion::kHeap), (*pool)->persister());
        store.Recover();
        Model m = ModelOf(current, 1000 + static_cast<uint64_t>(iteration), progress.acked.load(),
                          progress.started.load());
        if (auto check = m.Check(store.Read()); !check.ok()) return check;
        current = store.Read();
        total_acked += progress.acked.load();
        return absl::OkStatus();
      });
  EXPECT_OK(st);
  std::printf("%d kills, %lu transactions acknowledged in total\n", o.kills, total_acked);
  EXPECT_GT(total_acked, 0u);
}

}  // namespace
}  // namespace pmrt
