// Transactions under SIGKILL, on a real pool file: a forked child opens the pool (the real open
// and recovery path: Pool::Open, epoch::Manager::Open with a 2 ms background advancer,
// Heap::Open, txn::Engine::Open with the background reclaimer and a small log budget), reads the
// transaction count the recovered pool holds and continues a deterministic stream of
// transactions from there: transaction j writes 1-4 words of a 64-word array, the count, and
// every third one replaces an object in one of four slots (pdelete the old one, pnew a new one,
// both inside the transaction). The child publishes the numbers of the transactions it began and
// whose commit returned; the parent kills it at a random moment (sometimes during its recovery),
// copies the pool file and recovers the copy, and checks:
//   * the count c is at least every acknowledged transaction and at most the last begun one
//     (the state after the last transaction whose commit returned, or that plus the one in
//     flight);
//   * the words and the objects equal the stream's state after exactly c transactions;
//   * the heap holds exactly those objects and the engine's blocks (no leak, nothing lost).
// The original file, still crashed, is what the next child recovers.
//
// A kill keeps every store in the page cache, flushed or not (eadr, or msync every fifth kill):
// this proves the open/recovery path and program-order atomicity, not flush placement (that is
// txn_crash_test's job). PMRT_KILLS sets the number of kills (default 500).
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <fstream>
#include <optional>
#include <set>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "testing/kill_harness.h"
#include "tests/txn/txn_runtime.h"
#include "tests/util/test_util.h"
#include "txn/txn.h"

namespace pmrt::txn {
namespace {

constexpr size_t kPoolSize = 8 << 20;
constexpr char kLayout[] = "txn-kill";
constexpr int kW = 64;
constexpr int kO = 4;

struct Obj {
  uint64_t v[6];
};
struct Root {
  uint64_t count;  // transactions committed
  uint64_t words[kW];
  uint64_t objs[kO];
};

uint64_t Mix(uint64_t x) { return SplitMix64(x); }

// The stream: what transaction j (1-based) does.
struct Step {
  int n;
  int word[4];
  uint64_t value[4];
  int slot;  // -1: no object replaced
  uint64_t obj_value;
};
Step StepOf(uint64_t j) {
  Step s{};
  const uint64_t h = Mix(j);
  s.n = 1 + static_cast<int>(h % 4);
  for (int k = 0; k < s.n; ++k) {
    s.word[k] = static_cast<int>(Mix(j * 8 + k) % kW);
    s.value[k] = Mix(j * 8 + k + 4) | 1;
  }
  s.slot = j % 3 == 0 ? static_cast<int>((j / 3) % kO) : -1;
  s.obj_value = Mix(j ^ 0x5A5A);
  return s;
}

// The model state after c transactions (objects by content; their offsets are the pool's).
struct State {
  uint64_t count = 0;
  std::array<uint64_t, kW> words{};
  std::array<uint64_t, kO> obj{};  // the object's first value (0 = empty slot)
  bool operator==(const State&) const = default;
};
void Apply(State& s, uint64_t j) {
  const Step st = StepOf(j);
  for (int k = 0; k < st.n; ++k) s.words[st.word[k]] = st.value[k];
  if (st.slot >= 0) s.obj[st.slot] = st.obj_value;
  s.count = j;
}

absl::Status RunOne(Pool& pool, Root* root, uint64_t j) {
  const Step st = StepOf(j);
  return Run([&]() -> absl::Status {
    for (int k = 0; k < st.n; ++k) {
      if (absl::Status s = write(&root->words[st.word[k]], st.value[k]); !s.ok()) return s;
    }
    if (st.slot >= 0) {
      if (root->objs[st.slot] != 0) {
        if (absl::Status s = alloc::pdelete(static_cast<Obj*>(pool.at(root->objs[st.slot])));
            !s.ok()) {
          return s;
        }
      }
      Obj* o = alloc::pnew<Obj>();
      if (o == nullptr) return absl::ResourceExhaustedError("pnew");
      for (int i = 0; i < 6; ++i) o->v[i] = st.obj_value + i;
      if (absl::Status s = write(&root->objs[st.slot], pool.offset_of(o)); !s.ok()) return s;
    }
    return write(&root->count, j);
  });
}

Options KillOptions() {
  Options o;
  o.block_size = 4096;
  o.log_budget = 256 << 10;
  return o;
}

absl::StatusOr<testing::Runtime> OpenFile(const std::string& path, BackendKind backend,
                                          std::chrono::milliseconds interval,
                                          std::optional<RecordWrites> writes = std::nullopt) {
  PoolOptions po;
  po.backend = backend;
  po.record_writes = writes;
  auto pool = Pool::Open(path, kLayout, po);
  if (!pool.ok()) return pool.status();
  epoch::ManagerOptions eo;
  eo.interval = interval;
  return testing::Attach(std::move(*pool), KillOptions(), eo);
}

// Checks a recovered runtime against the model after its count.
absl::Status Check(testing::Runtime& r, uint64_t min_count, uint64_t max_count, State& model,
                   uint64_t* count_out) {
  auto root_or = r.pool->root<Root>();
  if (!root_or.ok()) return root_or.status();
  Root* root = *root_or;
  const uint64_t c = root->count;
  if (c < min_count || c > max_count) {
    return absl::DataLossError(absl::StrCat("recovered ", c, " transactions; acknowledged ",
                                            min_count, ", begun at most ", max_count));
  }
  if (c < model.count) return absl::DataLossError("the count went backwards");
  while (model.count < c) Apply(model, model.count + 1);
  State got;
  got.count = c;
  for (int i = 0; i < kW; ++i) got.words[i] = root->words[i];
  std::set<uint64_t> want_blocks;
  for (uint64_t b : r.engine->OwnedBlocks()) want_blocks.insert(b);
  for (int k = 0; k < kO; ++k) {
    if (root->objs[k] == 0) continue;
    want_blocks.insert(root->objs[k]);
    got.obj[k] = static_cast<const Obj*>(r.pool->at(root->objs[k]))->v[0];
  }
  if (!(got == model)) {
    for (int i = 0; i < kW; ++i)
      if (got.words[i] != model.words[i])
        return absl::DataLossError(absl::StrCat("after ", c, " transactions word ", i, " = ",
                                                got.words[i], ", expected ", model.words[i]));
    return absl::DataLossError(absl::StrCat("after ", c, " transactions an object differs"));
  }
  std::set<uint64_t> live;
  (void)r.heap->Walk([&](const alloc::BlockInfo& b) { live.insert(b.offset); });
  if (live != want_blocks) {
    return absl::DataLossError(absl::StrCat("heap: ", live.size(), " live blocks, expected ",
                                            want_blocks.size(), " (a leak or a lost block)"));
  }
  if (count_out != nullptr) *count_out = c;
  return r.heap->Check();
}

void CopyFile(const std::string& from, const std::string& to) {
  std::ifstream in(from, std::ios::binary);
  std::ofstream out(to, std::ios::binary | std::ios::trunc);
  out << in.rdbuf();
}

struct KillTally {
  uint64_t checked = 0, max_count = 0;
  int in_recovery = 0;
};

// `kills` children running transactions until SIGKILLed; each kill's file is recovered from a
// copy and checked. `planted` (a negative control): the child reports each transaction
// committed before its commit runs, as an engine that lost a committed record would look; the
// check must catch it.
absl::Status RunKills(int kills, bool planted, KillTally& tally) {
  pmrt::testing::TempDir dir;
  const std::string path = dir.File("txn.pool");
  const std::string copy = dir.File("verify.pool");
  {
    PoolOptions po;
    po.backend = BackendKind::kEadr;
    auto pool = Pool::Create(path, kPoolSize, kLayout, po);
    if (!pool.ok()) return pool.status();
    auto r = testing::Attach(std::move(*pool), KillOptions());
    if (!r.ok()) return r.status();
    if (auto root = r->pool->root<Root>(); !root.ok()) return root.status();
  }
  KillLoopOptions ko;
  ko.kills = kills;
  ko.seed = 7;
  ko.max_delay_us = 4000;
  ko.wait_ready = false;  // some kills land in the child's recovery
  ko.ready_every = 2;     // and half of them in its transactions, however long it takes to start
  State model;
  uint64_t acked = 0, begun = 0;
  uint64_t& checked = tally.checked;
  uint64_t& max_count = tally.max_count;
  int& in_recovery = tally.in_recovery;
  return RunKillLoop(
      ko,
      [&](int iteration, KillProgress& progress) {
        // The children rotate over the backends: eADR, pmem with records streamed, pmem with
        // records written back with clwb (the one-word commit padded to its line), msync.
        static constexpr BackendKind kBackends[] = {BackendKind::kEadr, BackendKind::kPmem,
                                                    BackendKind::kPmem, BackendKind::kEadr,
                                                    BackendKind::kMsync};
        const BackendKind backend = kBackends[iteration % 5];
        const std::optional<RecordWrites> writes =
            iteration % 5 == 1   ? std::optional(RecordWrites::kStream)
            : iteration % 5 == 2 ? std::optional(RecordWrites::kFlush)
                                 : std::nullopt;
        auto r = OpenFile(path, backend, std::chrono::milliseconds(2), writes);
        if (!r.ok()) {
          std::fprintf(stderr, "child: %s\n", r.status().ToString().c_str());
          _exit(4);
        }
        Root* root = *r->pool->root<Root>();
        uint64_t j = root->count;
        progress.user[2].store(j);
        progress.ready.store(1);
        for (;;) {
          ++j;
          progress.user[1].store(j);               // begun
          if (planted) progress.user[0].store(j);  // acknowledged before its commit
          absl::Status s = RunOne(*r->pool, root, j);
          if (!s.ok()) {
            std::fprintf(stderr, "child: transaction %lu: %s\n", j, s.ToString().c_str());
            _exit(5);
          }
          progress.user[0].store(j);  // its commit returned
        }
      },
      [&](int, const KillProgress& progress) -> absl::Status {
        if (progress.ready.load() == 0) ++in_recovery;
        acked = std::max<uint64_t>(acked, progress.user[0].load());
        begun = std::max<uint64_t>(begun, progress.user[1].load());
        CopyFile(path, copy);
        auto r = OpenFile(copy, BackendKind::kEadr, std::chrono::milliseconds(0));
        if (!r.ok()) return r.status();
        uint64_t c = 0;
        // Every acknowledged transaction is there; at most the one begun after it is too.
        if (absl::Status s = Check(*r, acked, std::max(begun, acked), model, &c); !s.ok()) return s;
        max_count = std::max(max_count, c);
        ++checked;
        r->Reset();
        unlink(copy.c_str());
        return absl::OkStatus();
      });
}

TEST(TxnKillTest, RecoveredStateIsACommittedPrefix) {
  const char* env = std::getenv("PMRT_KILLS");
  const int kills = env != nullptr ? std::atoi(env) : 500;
  KillTally t;
  const auto start = std::chrono::steady_clock::now();
  ASSERT_OK(RunKills(kills, /*planted=*/false, t));
  const double secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf(
      "txn kills: %d (%d during recovery; children on eADR, pmem streamed, pmem clwb, msync), "
      "%lu transactions committed, %.1f s\n",
      kills, t.in_recovery, t.max_count, secs);
  EXPECT_EQ(t.checked, static_cast<uint64_t>(kills));
  EXPECT_GT(t.max_count, static_cast<uint64_t>(kills));
}

// Its negative control: transactions acknowledged before their commit are caught as lost.
TEST(TxnKillNegativeControl, AcknowledgedButUncommittedTransactionsAreCaught) {
  KillTally t;
  EXPECT_THAT(RunKills(20, /*planted=*/true, t),
              pmrt::testing::StatusIs(absl::StatusCode::kDataLoss, "acknowledged"));
}

}  // namespace
}  // namespace pmrt::txn
