// Index updates in transactions: a YCSB-A-like mix (50% reads, 50% updates, Zipfian 0.99 or
// uniform over a preloaded key set) where each update is one transaction that writes the key's
// value in an index and one counter word. Systems, each durable as stated:
//
//   pmrt-tx     pmrt::Runtime: txn::Run { index->put(key, value); txn::write(&counter[t], +1) }
//               durable when Run returns (the index operation is logged in the commit record)
//   pmrt-epoch  the same put outside a transaction, the counter by a one-word transaction:
//               the put durable at the next epoch boundary (not like for like with the others;
//               shown for the cost of the transaction)
//   pmrt-word   only the one-word transaction (the floor of pmrt-tx)
//   pmdk        libpmemobj: a persistent open-addressing hash map (8-byte keys and values) in a
//               pmemobj pool, each update pmemobj_tx_begin; tx_add_range(value), value = v;
//               tx_add_range(counter), counter += 1; pmemobj_tx_end: durable when it returns
//   pmdk-btree  the same transaction on a persistent B+-tree (ordered, like pmrt's index; 64-slot
//               nodes, leaves 3/4 full after a bulk load)
//
// Every system: the same keys (8-byte scrambled), the same loop and generator, T threads with
// their own counter words, updates of one key serialized by a striped lock (both designs update
// in place and need it), reads without locks, pools on /dev/shm with PMEM_IS_PMEM_FORCE=1
// (clwb + sfence). A hash map is the faster index; pmrt's is ordered (Masstree), as the B+-tree.
//
//   pmrt-index-txbench --system pmrt-tx|pmrt-epoch|pmrt-word|pmdk|pmdk-btree [--keys N]
//                      [--seconds S] [--threads T] [--dist zipf|uniform] [--dir DIR]
//                      [--json FILE]
//   pmrt-index-txbench --restart [--keys N] [--dir DIR] [--json FILE] [--keep FILE]
//                      [--reopen FILE] [--log-budget BYTES]
//
// --restart: a child loads N keys through a Runtime, then runs transactional index updates with
// an epoch boundary every 64 ms (the default interval) and is SIGKILLed 60 ms after one, so that
// recovery rolls back ~60 ms of work and replays each committed transaction's index operation;
// the parent reopens the pool with Runtime::Open and times it to the first get. --keep FILE
// copies the crashed pool to FILE first; --reopen FILE skips the child and opens a copy of FILE
// (profiling one open again and again).
//
// Printed: ops/s (wall and per process-CPU-second x threads, background threads included),
// fences per update (pmrt: every fence of the process).
#include <libpmemobj.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "epoch/persist.h"
#include "runtime/runtime.h"
#include "tools/workload_gen.h"

namespace {

struct Args {
  std::string system = "pmrt-tx";
  uint64_t keys = 1000000;
  double seconds = 3;
  int threads = 2;
  std::string dist = "zipf";
  std::string dir = "/dev/shm";
  std::string json;
  bool restart = false;
  std::string keep;       // --keep FILE: a copy of the crashed pool, before it is opened
  std::string reopen;     // --reopen FILE: no child; the restart opens a copy of FILE
  size_t log_budget = 0;  // --log-budget BYTES: the child's txn::Options::log_budget (0: auto)
};

[[noreturn]] void Die(const std::string& what) {
  std::fprintf(stderr, "pmrt-index-txbench: %s\n", what.c_str());
  std::exit(1);
}

double ProcessCpuSeconds() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<double>(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
         static_cast<double>(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

uint64_t KeyOf(uint64_t item) { return pmrt::bench::Scramble(item) | 1; }  // never 0 (empty)

constexpr int kStripes = 4096;
struct Stripes {
  std::mutex mu[kStripes];
  std::mutex& For(uint64_t key) { return mu[key % kStripes]; }
};

class System {
 public:
  virtual ~System() = default;
  virtual void Load(uint64_t keys) = 0;
  virtual bool Update(int t, uint64_t key, uint64_t value) = 0;
  virtual bool Read(uint64_t key, uint64_t* value) = 0;
  virtual bool CountsFences() const { return true; }
};

// ---- pmrt ----------------------------------------------------------------------------------

struct PmrtRoot {
  uint64_t counter[64 * 7];  // thread t's counter at [t * 8]: a line each (56 threads)
};

class PmrtSystem : public System {
 public:
  PmrtSystem(const Args& a, bool tx, bool put) : tx_(tx), put_(put) {
    path_ = a.dir + "/pmrt-index-txbench.pool";
    ::unlink(path_.c_str());
    pmrt::RuntimeOptions o;
    o.create_size = size_t{4} << 30;
    auto rt = pmrt::Runtime::Open(path_, o);
    if (!rt.ok()) Die(rt.status().ToString());
    rt_ = std::move(*rt);
    root_ = *rt_->root<PmrtRoot>();
    auto index = rt_->index("ycsb");
    if (!index.ok()) Die(index.status().ToString());
    index_ = *index;
  }
  ~PmrtSystem() override {
    (void)rt_->Close();
    ::unlink(path_.c_str());
  }
  void Load(uint64_t keys) override {
    for (uint64_t i = 0; i < keys; ++i) {
      const uint64_t k = KeyOf(i);
      if (!index_
               ->put(pmrt::ds::U64Key(k).view(),
                     std::string_view(reinterpret_cast<const char*>(&k), 8))
               .ok()) {
        Die("load");
      }
    }
    if (!rt_->sync().ok()) Die("sync");
  }
  bool Update(int t, uint64_t key, uint64_t value) override {
    const std::string_view v(reinterpret_cast<const char*>(&value), 8);
    uint64_t* counter = &root_->counter[t * 8];
    std::lock_guard<std::mutex> l(stripes_.For(key));
    if (!put_) {
      return pmrt::txn::Run([&] { return pmrt::txn::write(counter, *counter + 1); }).ok();
    }
    if (!tx_) {
      if (!index_->put(pmrt::ds::U64Key(key).view(), v).ok()) return false;
      return pmrt::txn::Run([&] { return pmrt::txn::write(counter, *counter + 1); }).ok();
    }
    return pmrt::txn::Run([&]() -> absl::Status {
             if (auto r = index_->put(pmrt::ds::U64Key(key).view(), v); !r.ok()) return r.status();
             return pmrt::txn::write(counter, *counter + 1);
           })
        .ok();
  }
  bool Read(uint64_t key, uint64_t* value) override {
    std::string v;
    if (!index_->get(pmrt::ds::U64Key(key).view(), &v) || v.size() != 8) return false;
    std::memcpy(value, v.data(), 8);
    return true;
  }

 private:
  bool tx_, put_;
  std::string path_;
  std::unique_ptr<pmrt::Runtime> rt_;
  PmrtRoot* root_ = nullptr;
  pmrt::Index* index_ = nullptr;
  Stripes stripes_;
};

// ---- PMDK ----------------------------------------------------------------------------------

// A pmemobj pool whose root object holds the threads' counter words (a line each), then
// `index_bytes` for the index; and the update both PMDK systems run: value = v and the thread's
// counter += 1 in one transaction, durable when it returns.
class PmdkBase : public System {
 public:
  PmdkBase(const Args& a, const std::string& name, size_t index_bytes) {
    path_ = a.dir + "/" + name + "-index-txbench.pool";
    ::unlink(path_.c_str());
    const size_t bytes = 64 * 64 * 8 + index_bytes;
    pop_ = pmemobj_create(path_.c_str(), "pmrt-index-txbench", bytes + (size_t{256} << 20), 0600);
    if (pop_ == nullptr) Die(path_ + ": pmemobj_create: " + pmemobj_errormsg());
    PMEMoid root = pmemobj_root(pop_, bytes);
    if (OID_IS_NULL(root)) Die(std::string("pmemobj_root: ") + pmemobj_errormsg());
    counters_ = static_cast<uint64_t*>(pmemobj_direct(root));
  }
  ~PmdkBase() override {
    pmemobj_close(pop_);
    ::unlink(path_.c_str());
  }
  bool CountsFences() const override { return false; }

 protected:
  void* index_area() const { return counters_ + 64 * 8; }
  bool TxUpdate(int t, uint64_t key, uint64_t* slot, uint64_t value) {
    uint64_t* counter = &counters_[t * 8];
    std::lock_guard<std::mutex> l(stripes_.For(key));
    if (pmemobj_tx_begin(pop_, nullptr, TX_PARAM_NONE) != 0) return false;
    if (pmemobj_tx_add_range_direct(slot, 8) != 0 || pmemobj_tx_add_range_direct(counter, 8) != 0) {
      pmemobj_tx_abort(EINVAL);
      pmemobj_tx_end();
      return false;
    }
    *slot = value;
    *counter += 1;
    pmemobj_tx_commit();
    return pmemobj_tx_end() == 0;
  }

  PMEMobjpool* pop_ = nullptr;

 private:
  std::string path_;
  uint64_t* counters_ = nullptr;
  Stripes stripes_;
};

struct PmdkSlot {
  uint64_t key;
  uint64_t value;
};

class PmdkSystem : public PmdkBase {
 public:
  explicit PmdkSystem(const Args& a)
      : PmdkBase(a, "pmdk", SlotsFor(a.keys) * sizeof(PmdkSlot)), slots_n_(SlotsFor(a.keys)) {
    slots_ = static_cast<PmdkSlot*>(index_area());
  }
  void Load(uint64_t keys) override {
    for (uint64_t i = 0; i < keys; ++i) {
      const uint64_t k = KeyOf(i);
      PmdkSlot* s = Find(k, /*insert=*/true);
      s->key = k;
      s->value = k;
    }
    pmemobj_persist(pop_, slots_, slots_n_ * sizeof(PmdkSlot));
  }
  bool Update(int t, uint64_t key, uint64_t value) override {
    PmdkSlot* s = Find(key, false);
    return s != nullptr && TxUpdate(t, key, &s->value, value);
  }
  bool Read(uint64_t key, uint64_t* value) override {
    PmdkSlot* s = Find(key, false);
    if (s == nullptr) return false;
    *value = __atomic_load_n(&s->value, __ATOMIC_RELAXED);
    return true;
  }

 private:
  static uint64_t SlotsFor(uint64_t keys) {
    uint64_t n = 1;
    while (n < 2 * keys) n <<= 1;
    return n;
  }
  PmdkSlot* Find(uint64_t key, bool insert) {
    for (uint64_t i = pmrt::bench::Scramble(key) & (slots_n_ - 1);; i = (i + 1) & (slots_n_ - 1)) {
      PmdkSlot* s = &slots_[i];
      if (s->key == key) return s;
      if (s->key == 0) return insert ? s : nullptr;
    }
  }

  uint64_t slots_n_;
  PmdkSlot* slots_ = nullptr;
};

// PMDK with an ordered index: a B+-tree of 8-byte keys and values in a pmemobj pool, each node
// a 64-slot array (keys, then values or child offsets from the pool's start), leaves filled to
// 3/4 by a bulk load (sorted keys, persisted once, as the hash map's load). The mix changes no
// structure (updates replace values of loaded keys), so reads take no lock, as with the hash
// map, and an update is the same transaction: tx_add_range(value), tx_add_range(counter).
class PmdkBtreeSystem : public PmdkBase {
 public:
  static constexpr int kFan = 64;
  struct Node {
    uint32_t n;
    uint32_t leaf;
    uint64_t keys[kFan];  // inner: the smallest key under each child
    uint64_t vals[kFan];  // leaf: values; inner: child offsets in the pool
  };

  // Every inner level is at most half the one below.
  explicit PmdkBtreeSystem(const Args& a)
      : PmdkBase(a, "pmdk-btree", MaxNodes(a.keys) * sizeof(Node)), max_nodes_(MaxNodes(a.keys)) {
    nodes_ = static_cast<Node*>(index_area());
  }
  void Load(uint64_t keys) override {
    std::vector<uint64_t> sorted(keys);
    for (uint64_t i = 0; i < keys; ++i) sorted[i] = KeyOf(i);
    std::sort(sorted.begin(), sorted.end());
    std::vector<uint64_t> level;  // node indexes of the level being built
    for (uint64_t i = 0; i < keys; i += kLeafFill) {
      Node* n = NewNode(/*leaf=*/true);
      for (uint64_t j = i; j < std::min(keys, i + kLeafFill); ++j) {
        n->keys[n->n] = sorted[j];
        n->vals[n->n++] = sorted[j];
      }
      level.push_back(static_cast<uint64_t>(n - nodes_));
    }
    while (level.size() > 1) {
      std::vector<uint64_t> up;
      for (size_t i = 0; i < level.size(); i += kLeafFill) {
        Node* n = NewNode(/*leaf=*/false);
        for (size_t j = i; j < std::min(level.size(), i + kLeafFill); ++j) {
          Node* child = &nodes_[level[j]];
          n->keys[n->n] = child->keys[0];
          n->vals[n->n++] =
              static_cast<uint64_t>(reinterpret_cast<char*>(child) - reinterpret_cast<char*>(pop_));
        }
        up.push_back(static_cast<uint64_t>(n - nodes_));
      }
      level = std::move(up);
    }
    root_ = &nodes_[level[0]];
    pmemobj_persist(pop_, nodes_, used_ * sizeof(Node));
  }
  bool Update(int t, uint64_t key, uint64_t value) override {
    uint64_t* slot = Find(key);
    return slot != nullptr && TxUpdate(t, key, slot, value);
  }
  bool Read(uint64_t key, uint64_t* value) override {
    uint64_t* slot = Find(key);
    if (slot == nullptr) return false;
    *value = __atomic_load_n(slot, __ATOMIC_RELAXED);
    return true;
  }

 private:
  static constexpr uint64_t kLeafFill = kFan * 3 / 4;
  static uint64_t MaxNodes(uint64_t keys) { return (keys + kLeafFill - 1) / kLeafFill * 2 + 16; }

  Node* NewNode(bool leaf) {
    if (used_ == max_nodes_) Die("pmdk-btree: node area full");
    Node* n = &nodes_[used_++];
    n->n = 0;
    n->leaf = leaf ? 1 : 0;
    return n;
  }
  // The value slot of `key`, or null.
  uint64_t* Find(uint64_t key) {
    Node* n = root_;
    while (n->leaf == 0) {
      // The last child whose smallest key is <= key (the first child when none is).
      const uint64_t* k = std::upper_bound(n->keys, n->keys + n->n, key);
      const int i = k == n->keys ? 0 : static_cast<int>(k - n->keys) - 1;
      n = reinterpret_cast<Node*>(reinterpret_cast<char*>(pop_) + n->vals[i]);
    }
    const uint64_t* k = std::lower_bound(n->keys, n->keys + n->n, key);
    if (k == n->keys + n->n || *k != key) return nullptr;
    return &n->vals[k - n->keys];
  }

  uint64_t max_nodes_, used_ = 0;
  Node* nodes_ = nullptr;
  Node* root_ = nullptr;
};

// ---- runs ----------------------------------------------------------------------------------

void AppendJson(const std::string& file, const std::string& line) {
  if (file.empty()) return;
  FILE* f = std::fopen(file.c_str(), "a");
  if (f == nullptr) Die(file + ": cannot append");
  std::fprintf(f, "%s\n", line.c_str());
  std::fclose(f);
}

void RunMix(const Args& a) {
  std::unique_ptr<System> sys;
  if (a.system == "pmdk") {
    sys = std::make_unique<PmdkSystem>(a);
  } else if (a.system == "pmdk-btree") {
    sys = std::make_unique<PmdkBtreeSystem>(a);
  } else if (a.system == "pmrt-tx") {
    sys = std::make_unique<PmrtSystem>(a, /*tx=*/true, /*put=*/true);
  } else if (a.system == "pmrt-epoch") {
    sys = std::make_unique<PmrtSystem>(a, /*tx=*/false, /*put=*/true);
  } else if (a.system == "pmrt-word") {
    sys = std::make_unique<PmrtSystem>(a, /*tx=*/true, /*put=*/false);
  } else {
    Die("--system must be pmrt-tx, pmrt-epoch, pmrt-word, pmdk or pmdk-btree");
  }
  sys->Load(a.keys);
  const pmrt::bench::ScrambledZipfian zipf(a.keys, 0.99);
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> updates{0}, reads{0}, failures{0};
  auto worker = [&](int t, double seconds, bool count) {
    pmrt::bench::XorShift64 rng(0x9e3779b97f4a7c15ull * (t + 1) + 1);
    uint64_t u = 0, r = 0, f = 0;
    const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
    while (!stop.load(std::memory_order_relaxed)) {
      for (int i = 0; i < 64; ++i) {
        const uint64_t item = a.dist == "zipf" ? zipf.Next(rng) : rng.Next() % a.keys;
        const uint64_t key = KeyOf(item);
        if (rng.Next() & 1) {
          f += sys->Update(t, key, rng.Next()) ? 0 : 1;
          ++u;
        } else {
          uint64_t v;
          f += sys->Read(key, &v) ? 0 : 1;
          ++r;
        }
      }
      if (std::chrono::steady_clock::now() >= end) break;
    }
    if (count) {
      updates += u;
      reads += r;
      failures += f;
    }
  };
  // Warm-up (every system the same), then the timed run.
  {
    std::vector<std::thread> ts;
    for (int t = 0; t < a.threads; ++t) ts.emplace_back(worker, t, 0.5, false);
    for (auto& th : ts) th.join();
  }
  const pmrt::PersistCounts c0 = pmrt::CountersSnapshotAll();
  const double cpu0 = ProcessCpuSeconds();
  const auto t0 = std::chrono::steady_clock::now();
  {
    std::vector<std::thread> ts;
    for (int t = 0; t < a.threads; ++t) ts.emplace_back(worker, t, a.seconds, true);
    for (auto& th : ts) th.join();
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const double cpu = ProcessCpuSeconds() - cpu0;
  const pmrt::PersistCounts dc = pmrt::CountersSnapshotAll() - c0;
  const double ops = static_cast<double>(updates + reads);
  std::string fences = "null";
  if (sys->CountsFences() && updates > 0) {
    fences = std::to_string(static_cast<double>(dc.fences) / static_cast<double>(updates.load()));
  }
  std::printf(
      "%-10s %-7s keys=%lu T=%d: %9.0f ops/s wall, %9.0f per process-cpu-s x T (%lu updates, %lu "
      "reads, %lu failures); fences/update %s\n",
      a.system.c_str(), a.dist.c_str(), a.keys, a.threads, ops / secs,
      cpu > 0 ? ops / cpu * a.threads : 0, updates.load(), reads.load(), failures.load(),
      fences.c_str());
  char buf[512];
  std::snprintf(buf, sizeof(buf),
                "{\"bench\": \"index-txbench\", \"system\": \"%s\", \"dist\": \"%s\", \"keys\": "
                "%lu, \"threads\": %d, \"seconds\": %.3f, \"updates\": %lu, \"reads\": %lu, "
                "\"failures\": %lu, \"ops_per_sec\": %.0f, \"ops_per_cpu_sec\": %.0f, "
                "\"process_cpu_seconds\": %.3f, \"fences_per_update\": %s}",
                a.system.c_str(), a.dist.c_str(), a.keys, a.threads, secs, updates.load(),
                reads.load(), failures.load(), ops / secs, cpu > 0 ? ops / cpu * a.threads : 0, cpu,
                fences.c_str());
  AppendJson(a.json, buf);
  if (failures.load() != 0) Die("operations failed");
}

void KillAChildMidRun(const Args& a, const std::string& path) {
  int ready[2];
  if (pipe(ready) != 0) Die("pipe");
  const pid_t pid = fork();
  if (pid < 0) Die("fork");
  if (pid == 0) {
    pmrt::RuntimeOptions o;
    o.create_size = size_t{2} << 30;
    o.epochs.interval = std::chrono::milliseconds(0);  // boundaries by the loop below
    o.txn.log_budget = a.log_budget;
    auto rt = pmrt::Runtime::Open(path, o);
    if (!rt.ok()) _exit(2);
    pmrt::Index* index = *(*rt)->index("ycsb");
    for (uint64_t i = 0; i < a.keys; ++i) {
      const uint64_t k = KeyOf(i);
      (void)index->put(pmrt::ds::U64Key(k).view(),
                       std::string_view(reinterpret_cast<const char*>(&k), 8));
    }
    if (!(*rt)->sync().ok()) _exit(3);
    (void)!write(ready[1], "x", 1);
    // Transactions until killed, with a boundary every 64 ms (the default epoch), each one
    // reported: the parent kills 60 ms after one, so that recovery rolls back an epoch of 60 ms
    // of transactions and replays every one of them (the worst case of the default interval).
    pmrt::bench::XorShift64 rng(7);
    for (;;) {
      const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(64);
      while (std::chrono::steady_clock::now() < until) {
        for (int i = 0; i < 64; ++i) {
          const uint64_t k = KeyOf(rng.Next() % a.keys), v = rng.Next();
          (void)pmrt::txn::Run([&] {
            return index
                ->put(pmrt::ds::U64Key(k).view(),
                      std::string_view(reinterpret_cast<const char*>(&v), 8))
                .status();
          });
        }
      }
      if (!(*rt)->sync().ok()) _exit(4);
      (void)!write(ready[1], "s", 1);
    }
  }
  close(ready[1]);
  char c;
  if (read(ready[0], &c, 1) != 1) Die("the child failed to load");
  for (int i = 0; i < 3; ++i) {
    if (read(ready[0], &c, 1) != 1) Die("the child failed");
  }
  usleep(60 * 1000);
  kill(pid, SIGKILL);
  int status;
  waitpid(pid, &status, 0);
}

void RunRestart(const Args& a) {
  const std::string path = a.dir + "/pmrt-index-restart.pool";
  ::unlink(path.c_str());
  if (a.reopen.empty()) {
    KillAChildMidRun(a, path);
  } else {
    std::filesystem::copy_file(a.reopen, path);
  }
  if (!a.keep.empty()) {
    std::filesystem::copy_file(path, a.keep, std::filesystem::copy_options::overwrite_existing);
  }
  const auto t0 = std::chrono::steady_clock::now();
  pmrt::RuntimeOptions o;
  o.txn.log_budget = a.log_budget;  // as the child's (the replay's work is the child's log)
  auto rt = pmrt::Runtime::Open(path, o);
  if (!rt.ok()) Die(rt.status().ToString());
  const double open_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  pmrt::Index* index = *(*rt)->find_index("ycsb");
  const uint64_t k = KeyOf(1);
  const bool found = index->get(pmrt::ds::U64Key(k).view()).has_value();
  const double first_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  const uint64_t pending = (*rt)->pending_index_ops();
  const pmrt::RuntimeStats s = (*rt)->stats();
  std::printf(
      "restart keys=%lu: open %.2f ms, first get %.2f ms (%s); %lu undo-log entries and %lu "
      "index operations of committed transactions to replay (journaled in %.2f ms)\n",
      a.keys, open_ms, first_ms, found ? "found" : "MISSING",
      static_cast<unsigned long>(s.epochs.log_entries_replayed),
      static_cast<unsigned long>(s.replayed_index_ops), s.replay_ms);
  const pmrt::Runtime::OpenTimes& t = (*rt)->open_times();
  auto ms = [](std::chrono::nanoseconds d) {
    return std::chrono::duration<double, std::milli>(d).count();
  };
  std::printf(
      "  open steps (ms): trial open %.2f, pool %.2f, epochs %.2f, heap %.2f, catalog %.2f, "
      "engine %.2f (of which journaling the index operations %.2f); %lu still pending after the "
      "first get\n",
      ms(t.trial), ms(t.pool), ms(t.epochs), ms(t.heap), ms(t.catalog), ms(t.engine), s.replay_ms,
      static_cast<unsigned long>(pending));
  char buf[512];
  std::snprintf(buf, sizeof(buf),
                "{\"bench\": \"index-restart\", \"keys\": %lu, \"open_ms\": %.3f, "
                "\"first_get_ms\": %.3f, \"found\": %s, \"replayed_index_ops\": %lu, "
                "\"pending_at_first_get\": %lu, \"trial_ms\": %.3f, \"engine_ms\": %.3f, "
                "\"journal_ms\": %.3f, \"log_budget\": %lu, \"records_replayed\": %lu}",
                a.keys, open_ms, first_ms, found ? "true" : "false",
                static_cast<unsigned long>(s.replayed_index_ops),
                static_cast<unsigned long>(pending), ms(t.trial), ms(t.engine), s.replay_ms,
                static_cast<unsigned long>(s.txn.log_budget),
                static_cast<unsigned long>(s.txn.recovered_records));
  AppendJson(a.json, buf);
  (void)(*rt)->Close();
  ::unlink(path.c_str());
  if (!found) Die("the first get missed");
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string f = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) Die(f + " needs a value");
      return argv[++i];
    };
    if (f == "--system") {
      a.system = next();
    } else if (f == "--keys") {
      a.keys = std::strtoull(next().c_str(), nullptr, 10);
    } else if (f == "--seconds") {
      a.seconds = std::strtod(next().c_str(), nullptr);
    } else if (f == "--threads") {
      a.threads = std::atoi(next().c_str());
    } else if (f == "--dist") {
      a.dist = next();
    } else if (f == "--dir") {
      a.dir = next();
    } else if (f == "--json") {
      a.json = next();
    } else if (f == "--restart") {
      a.restart = true;
    } else if (f == "--keep") {
      a.keep = next();
    } else if (f == "--reopen") {
      a.reopen = next();
    } else if (f == "--log-budget") {
      a.log_budget = std::strtoull(next().c_str(), nullptr, 10);
    } else {
      Die("unknown flag " + f + " (see the top of bench/index_txbench.cc)");
    }
  }
  if (a.threads < 1 || a.threads > 56 || a.keys == 0 || (a.dist != "zipf" && a.dist != "uniform")) {
    Die("bad --threads, --keys or --dist");
  }
  if (a.restart) {
    RunRestart(a);
  } else {
    RunMix(a);
  }
  return 0;
}
