// A program that uses every public layer of an installed pmrt: a pool, the epoch manager, the
// heap (pnew / pdelete), transactions (word writes, allocation and free), the durable Masstree,
// and the transient Masstree. Each run reopens the pool (the first creates it), checks what the
// previous run left, and changes it: `consumer POOL RUNS`.
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "alloc/allocator.h"
#include "ds/durable_masstree.h"
#include "ds/masstree.h"
#include "epoch/epoch.h"
#include "epoch/pool.h"
#include "epoch/pptr.h"
#include "txn/txn.h"

namespace {

constexpr char kLayout[] = "consumer";
constexpr size_t kPoolSize = 16 << 20;

struct Counter {
  uint64_t value;
};

struct Root {
  std::atomic<uint64_t> logged_epoch;  // the external log's mark for the fields above `counter`
  uint64_t tree;                       // the durable Masstree's descriptor (epoch-logged)
  pmrt::pptr<Counter> counter;         // written by transactions only
};

// The layers in open order; Close destroys them in reverse.
struct Runtime {
  std::unique_ptr<pmrt::Pool> pool;
  std::unique_ptr<pmrt::epoch::Manager> epochs;
  std::unique_ptr<pmrt::alloc::Heap> heap;
  std::unique_ptr<pmrt::txn::Engine> engine;
  std::unique_ptr<pmrt::ds::DurableMasstree> tree;
  Root* root = nullptr;

  absl::Status Close() {
    tree.reset();
    engine.reset();
    heap.reset();
    epochs.reset();
    return pool->Close();
  }
};

// Opens (or creates) the pool and every layer on it, creating the tree in a new pool.
absl::Status Open(const std::string& path, bool create, Runtime& r) {
  auto pool =
      create ? pmrt::Pool::Create(path, kPoolSize, kLayout) : pmrt::Pool::Open(path, kLayout);
  if (!pool.ok()) return pool.status();
  r.pool = std::move(*pool);
  auto epochs = pmrt::epoch::Manager::Open(*r.pool);
  if (!epochs.ok()) return epochs.status();
  r.epochs = std::move(*epochs);
  auto heap = pmrt::alloc::Heap::Open(*r.pool, *r.epochs);
  if (!heap.ok()) return heap.status();
  r.heap = std::move(*heap);
  auto engine = pmrt::txn::Engine::Open(*r.pool, *r.epochs, *r.heap);
  if (!engine.ok()) return engine.status();
  r.engine = std::move(*engine);
  auto root = r.pool->root<Root>();
  if (!root.ok()) return root.status();
  r.root = *root;
  if (!create) {
    auto tree = pmrt::ds::DurableMasstree::Open(*r.pool, *r.epochs, *r.heap, r.root->tree);
    if (!tree.ok()) return tree.status();
    r.tree = std::move(*tree);
    return absl::OkStatus();
  }
  // The tree and the root's reference to it in one epoch: a crash keeps both or neither.
  pmrt::epoch::Guard g(*r.epochs);
  auto tree = pmrt::ds::DurableMasstree::Create(*r.pool, *r.epochs, *r.heap);
  if (!tree.ok()) return tree.status();
  if (auto st = r.epochs->log().Snapshot(r.root, offsetof(Root, counter), &r.root->logged_epoch);
      !st.ok()) {
    return st;
  }
  r.root->tree = (*tree)->descriptor();
  r.tree = std::move(*tree);
  return absl::OkStatus();
}

// Run `run` (from 0): checks the state run - 1 left, then moves it on by one.
absl::Status Step(const std::string& path, int run) {
  Runtime r;
  if (auto st = Open(path, run == 0, r); !st.ok()) return st;
  const std::string want = std::to_string(run - 1);
  const auto count = static_cast<uint64_t>(run);
  Counter* c = r.root->counter.get(*r.pool);
  if (run > 0 && (r.tree->get("run") != want || c == nullptr || c->value != count)) {
    return absl::DataLossError("the previous run's tree or counter is not there");
  }
  // Transactions: a word write to the counter, then a new block replacing it (pnew and pdelete
  // inside a transaction follow its outcome). The counter ends at run + 1.
  absl::Status st = pmrt::txn::Run([&]() -> absl::Status {
    if (c == nullptr) return absl::OkStatus();
    return pmrt::txn::write(&c->value, c->value + 1);
  });
  if (!st.ok()) return st;
  st = pmrt::txn::Run([&]() -> absl::Status {
    Counter* next = pmrt::alloc::pnew<Counter>(Counter{c == nullptr ? 1 : c->value});
    if (next == nullptr) return absl::ResourceExhaustedError("pnew in a transaction");
    if (absl::Status s = pmrt::txn::write(&r.root->counter, pmrt::pptr<Counter>(*r.pool, next));
        !s.ok()) {
      return s;
    }
    return pmrt::alloc::pdelete(c);
  });
  if (!st.ok()) return st;
  if (r.root->counter.get(*r.pool)->value != count + 1) return absl::InternalError("counter");
  // The heap outside transactions, and the durable tree.
  uint64_t* scratch = pmrt::alloc::pnew<uint64_t>(uint64_t{42});
  if (scratch == nullptr) return absl::ResourceExhaustedError("pnew");
  if (st = pmrt::alloc::pdelete(scratch); !st.ok()) return st;
  r.tree->put("run", std::to_string(run));
  if (st = r.epochs->Sync(); !st.ok()) return st;
  // The transient tree.
  pmrt::ds::Masstree transient;
  transient.put("run", std::to_string(run));
  if (transient.get("run") != std::to_string(run)) return absl::InternalError("transient tree");
  return r.Close();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) return std::fputs("usage: consumer POOL RUNS\n", stderr), 2;
  const int runs = std::atoi(argv[2]);
  for (int run = 0; run < runs; ++run) {
    if (absl::Status st = Step(argv[1], run); !st.ok()) {
      std::fprintf(stderr, "consumer: run %d: %s\n", run, st.ToString().c_str());
      return 1;
    }
  }
  std::puts("consumer: OK");
  return 0;
}
