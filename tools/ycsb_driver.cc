// The YCSB driver (tools/ycsb_driver.h).
#include "tools/ycsb_driver.h"

#include <libpmem.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "alloc/allocator.h"
#include "ds/durable_masstree.h"
#include "ds/masstree.h"
#include "epoch/epoch.h"
#include "epoch/persist.h"
#include "epoch/pool.h"
#include "tools/kv_store.h"
#include "tools/workload_gen.h"

namespace pmrt::ycsb {
namespace {

using Clock = std::chrono::steady_clock;

const char* g_program = "pmrt-ycsb";  // set by RunYcsb, for Die

[[noreturn]] void Die(const std::string& what) {
  std::fprintf(stderr, "%s: %s\n", g_program, what.c_str());
  std::exit(2);
}

template <class T>
T Check(absl::StatusOr<T> v, const char* what) {
  if (!v.ok()) Die(absl::StrCat(what, ": ", v.status().ToString()));
  return std::move(*v);
}

absl::Status Bad(const std::string& what) { return absl::InvalidArgumentError(what); }

// Applies one option that takes a value.
absl::Status ApplyValue(Options& o, const std::string& a, const std::string& s) {
  uint64_t v = 0;
  const bool is_num = absl::SimpleAtoi(s, &v);
  auto need_num = [&]() { return Bad("bad number " + s + " after " + a); };
  if (a == "--workload") {
    o.workloads.clear();
    for (const char c : s) {
      if (c == ',') continue;
      if (std::string("abce").find(c) == std::string::npos) {
        return Bad("--workload must be a, b, c or e (or a comma-separated list)");
      }
      o.workloads.push_back(c);
    }
    if (o.workloads.empty()) return Bad("--workload must name a workload");
    o.workload = o.workloads[0];
  } else if (a == "--dist") {
    if (s != "uniform" && s != "zipf") return Bad("--dist must be uniform or zipf");
    o.zipf = s == "zipf";
  } else if (a == "--variant") {
    if (s != "durable" && s != "transient" && s != "both") {
      return Bad("--variant must be durable, transient or both");
    }
    o.durable = s == "durable";
    o.both = s == "both";
  } else if (a == "--backend") {
    auto b = ParseBackend(s);
    if (!b.ok() || *b == BackendKind::kSim) return Bad("--backend must be pmem, msync or eadr");
    o.backend = *b;
  } else if (a == "--json") {
    o.json = s;
  } else if (a == "--pool") {
    o.pool = s;
  } else if (a == "--seconds") {
    if (!absl::SimpleAtod(s, &o.seconds) || !(o.seconds > 0) || o.seconds > 1e6) {
      return Bad("--seconds must be a positive number, not " + s);
    }
  } else if (!is_num) {
    return need_num();
  } else if (a == "--keys") {
    o.keys = v;
  } else if (a == "--ops") {
    o.ops = v;
  } else if (a == "--threads") {
    if (v > 1024) return Bad("--threads must be at most 1024");
    o.threads = static_cast<int>(v);
  } else if (a == "--epoch-ms") {
    if (v > 3600000) return Bad("--epoch-ms must be at most an hour");
    o.epoch_ms = static_cast<int>(v);
  } else if (a == "--seed") {
    o.seed = v;
  } else if (a == "--repeat") {
    o.repeat = static_cast<int>(std::min<uint64_t>(v, 1000));
  } else if (a == "--pool-size") {
    o.pool_size = v;
  } else if (a == "--rounds") {
    o.rounds = static_cast<int>(std::clamp<uint64_t>(v, 1, 1000));
  }
  return absl::OkStatus();
}

}  // namespace

const char kOptionsHelp[] =
    "  --workload a|b|c|e[,...]  YCSB A (50% update), B (5%), C (read only), E (scans)\n"
    "  --dist uniform|zipf       key choice (zipf: theta 0.99, scrambled)\n"
    "  --keys N                  keys loaded first (1000000)\n"
    "  --ops N | --seconds S     operations per workload over all threads (2000000), or time\n"
    "  --threads T               worker threads (2)\n"
    "  --variant durable|transient|both   the tree(s) to run (durable)\n"
    "  --backend pmem|msync|eadr persistence backend of the durable tree's pool (pmem)\n"
    "  --pool PATH               pool file (/dev/shm/pmrt-ycsb-<pid>.pool, removed after)\n"
    "  --keep-pool               keep the pool file\n"
    "  --no-value-checksums      the durable tree's values without checksums (layout 1)\n"
    "  --per-op-guards           each operation in its own guard (default: a Batch per thread)\n"
    "  --json FILE               append one JSON object per run to FILE\n"
    "  --epoch-ms N --seed N --rounds R   epoch length (64), seed (1), rounds of both (10)\n"
    "  --recovery [--repeat K] [--pool-size BYTES]   time recovery after a SIGKILL instead\n";

absl::StatusOr<Options> ParseOptions(const std::vector<std::string>& args) {
  Options o;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--keep-pool") {
      o.keep_pool = true;
    } else if (a == "--no-value-checksums") {
      o.value_checksums = false;
    } else if (a == "--recovery") {
      o.recovery = true;
    } else if (a == "--per-op-guards") {
      o.per_op_guards = true;
    } else if (a == "--workload" || a == "--dist" || a == "--variant" || a == "--backend" ||
               a == "--json" || a == "--pool" || a == "--seconds" || a == "--keys" ||
               a == "--ops" || a == "--threads" || a == "--epoch-ms" || a == "--seed" ||
               a == "--repeat" || a == "--pool-size" || a == "--rounds") {
      if (i + 1 >= args.size()) return Bad("missing value after " + a);
      if (absl::Status st = ApplyValue(o, a, args[++i]); !st.ok()) return st;
    } else {
      return Bad("unknown argument " + a);
    }
  }
  if (o.keys == 0 || o.threads < 1) return Bad("--keys and --threads must be positive");
  if (o.pool.empty()) o.pool = absl::StrCat("/dev/shm/pmrt-ycsb-", getpid(), ".pool");
  return o;
}

namespace {

// ---- keys and distributions -------------------------------------------------------------------

using bench::Scramble;
using Rng = bench::XorShift64;
using Zipfian = bench::ScrambledZipfian;
ds::U64Key KeyOf(uint64_t item) { return ds::U64Key(Scramble(item)); }

// ---- progress -----------------------------------------------------------------------------------

// Operations done in the current phase, over all threads (workers add every kProgressBatch).
std::atomic<uint64_t> g_done{0};
constexpr uint64_t kProgressBatch = 1024;

// Reports g_done while alive (ProgressMode): "label: done / total ops, rate" (total 0: unknown).
class Progress {
 public:
  Progress(const Options& o, std::string label, uint64_t total)
      : mode_(o.progress), label_(std::move(label)), total_(total) {
    g_done.store(0, std::memory_order_relaxed);
    if (mode_ != ProgressMode::kNone) thread_ = std::thread([this] { Loop(); });
  }
  ~Progress() {
    if (mode_ == ProgressMode::kNone) return;
    {
      std::lock_guard<std::mutex> l(mu_);
      stop_ = true;
    }
    cv_.notify_one();
    thread_.join();
    if (mode_ == ProgressMode::kTerminal) {
      std::printf("\r\033[K");  // the result line takes the progress line's place
      std::fflush(stdout);
    }
  }
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

 private:
  void Loop() {
    const auto period = std::chrono::milliseconds(mode_ == ProgressMode::kTerminal ? 250 : 1000);
    uint64_t last = 0;
    auto last_t = Clock::now();
    std::unique_lock<std::mutex> l(mu_);
    while (!cv_.wait_for(l, period, [this] { return stop_; })) {
      const uint64_t done = g_done.load(std::memory_order_relaxed);
      const auto now = Clock::now();
      const double rate = static_cast<double>(done - last) /
                          std::max(1e-9, std::chrono::duration<double>(now - last_t).count());
      last = done;
      last_t = now;
      std::string line = absl::StrFormat("  %s: %d", label_, done);
      if (total_ > 0) {
        absl::StrAppendFormat(
            &line, " / %d ops (%.0f%%)", total_,
            100.0 * static_cast<double>(std::min(done, total_)) / static_cast<double>(total_));
      } else {
        line += " ops";
      }
      absl::StrAppendFormat(&line, ", %.3f Mops/s", rate / 1e6);
      if (mode_ == ProgressMode::kTerminal) {
        std::printf("\r\033[K%s", line.c_str());
      } else {
        std::printf("%s\n", line.c_str());
      }
      std::fflush(stdout);
    }
  }

  const ProgressMode mode_;
  const std::string label_;
  const uint64_t total_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;  // guarded by mu_
  std::thread thread_;
};

// ---- the timed phase ----------------------------------------------------------------------------

struct ThreadResult {
  uint64_t ops = 0, misses = 0, scanned = 0;
  std::vector<uint32_t> samples;  // latency of every 8th operation, ns
};

// Runs `ops` operations, or until `deadline` when it is set (checked every 256 operations).
template <class Tree>
ThreadResult Worker(Tree& tree, const Options& o, const Zipfian* zipf, int t, uint64_t ops,
                    std::optional<Clock::time_point> deadline) {
  ThreadResult r;
  r.samples.reserve(std::min<uint64_t>(ops / 8 + 1, uint64_t{1} << 20));
  Rng rng{Scramble(o.seed * 1000 + static_cast<uint64_t>(t)) | 1};
  const int update_pct = o.workload == 'a' ? 50 : o.workload == 'b' ? 5 : 0;
  // One guard per run of operations (Tree::Batch), or the tree's own guard per operation.
  std::unique_ptr<typename Tree::Batch> batch;
  if (!o.per_op_guards) batch = std::make_unique<typename Tree::Batch>(tree);
  auto run = [&](auto& target) {
    uint64_t i = 0;
    for (; i < ops; ++i) {
      if ((i & 255) == 0 && deadline.has_value() && Clock::now() >= *deadline) break;
      if ((i & (kProgressBatch - 1)) == 0 && i > 0) {
        g_done.fetch_add(kProgressBatch, std::memory_order_relaxed);  // read by Progress only
      }
      const uint64_t item = zipf != nullptr ? zipf->Next(rng) : rng.Next() % o.keys;
      const ds::U64Key key = KeyOf(item);
      const bool timed = (i & 7) == 0;
      const Clock::time_point start = timed ? Clock::now() : Clock::time_point();
      if (o.workload == 'e') {
        r.scanned += target.scan(key, 10, [](std::string_view, std::string_view) { return true; });
      } else if (static_cast<int>(rng.Next() % 100) < update_pct) {
        target.put_as(key, i);
      } else if (!target.template get_as<uint64_t>(key).has_value()) {
        ++r.misses;
      }
      if (timed) {
        r.samples.push_back(static_cast<uint32_t>(std::min<int64_t>(
            UINT32_MAX,
            std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - start).count())));
      }
    }
    return i;
  };
  r.ops = batch != nullptr ? run(*batch) : run(tree);
  return r;
}

double ProcessCpuSeconds();

// Inserts the keys with o.threads threads; reports the load's throughput.
template <class Tree>
void Load(Tree& tree, const Options& o, const char* variant) {
  const double cpu0 = ProcessCpuSeconds();
  const Clock::time_point start = Clock::now();
  {
    Progress progress(o, absl::StrCat("loading the ", variant, " tree"), o.keys);
    std::vector<std::thread> threads;
    for (int t = 0; t < o.threads; ++t) {
      threads.emplace_back([&, t] {
        const uint64_t lo = o.keys * t / o.threads, hi = o.keys * (t + 1) / o.threads;
        std::unique_ptr<typename Tree::Batch> batch;
        if (!o.per_op_guards) batch = std::make_unique<typename Tree::Batch>(tree);
        for (uint64_t i = lo; i < hi; ++i) {
          const ds::PutResult r =
              batch != nullptr ? batch->put_as(KeyOf(i), i) : tree.put_as(KeyOf(i), i);
          if (r == ds::PutResult::kNoMemory) Die("load: out of memory");
          if (((i - lo + 1) & (kProgressBatch - 1)) == 0) {
            g_done.fetch_add(kProgressBatch, std::memory_order_relaxed);  // read by Progress only
          }
        }
      });
    }
    for (auto& th : threads) th.join();
  }
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  const double cpu = ProcessCpuSeconds() - cpu0;
  std::printf("load %-9s %lu keys, %d threads: %.3f M inserts/s (%.2f s, %.2f CPU s)\n", variant,
              o.keys, o.threads, static_cast<double>(o.keys) / seconds / 1e6, seconds, cpu);
  std::fflush(stdout);
  if (o.json.empty()) return;
  FILE* out = std::fopen(o.json.c_str(), "a");
  if (out == nullptr) Die("cannot open " + o.json);
  std::fprintf(out,
               "{\"run\":%d,\"mode\":\"load\",\"variant\":\"%s\",\"threads\":%d,\"keys\":%lu,"
               "\"ops_per_sec\":%.1f,\"seconds\":%.3f,\"cpu_seconds\":%.3f,\"guards\":\"%s\"}\n",
               static_cast<int>(getpid()), variant, o.threads, o.keys,
               static_cast<double>(o.keys) / seconds, seconds, cpu,
               o.per_op_guards ? "per-op" : "batch");
  std::fclose(out);
}

double ProcessCpuSeconds() {
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

struct RunResult {
  double seconds = 0, cpu_seconds = 0;
  uint64_t ops = 0, misses = 0, scanned = 0;
  uint64_t p50 = 0, p99 = 0;
  std::vector<uint32_t> samples;

  // Adds another run's figures (the percentiles are recomputed by Finish).
  void Add(RunResult&& o) {
    seconds += o.seconds;
    cpu_seconds += o.cpu_seconds;
    ops += o.ops;
    misses += o.misses;
    scanned += o.scanned;
    samples.insert(samples.end(), o.samples.begin(), o.samples.end());
  }
  void Finish() {
    if (samples.empty()) return;
    auto at = [&](double q) {
      const size_t k = std::min(samples.size() - 1, static_cast<size_t>(q * samples.size()));
      std::nth_element(samples.begin(), samples.begin() + static_cast<ptrdiff_t>(k), samples.end());
      return static_cast<uint64_t>(samples[k]);
    };
    p50 = at(0.50);
    p99 = at(0.99);
  }
};

// `finish` runs after the workers, inside the timed window: the durable tree's Sync, so that the
// window includes the epoch boundaries (the write-back) of everything the run dirtied.
template <class Tree>
RunResult Run(Tree& tree, const Options& o, const Zipfian* zipf,
              const std::function<void()>& finish = {}) {
  std::vector<ThreadResult> results(o.threads);
  std::vector<std::thread> threads;
  const auto start = Clock::now();
  const double cpu_start = ProcessCpuSeconds();
  std::optional<Clock::time_point> deadline;
  if (o.seconds > 0) {
    deadline = start + std::chrono::duration_cast<Clock::duration>(
                           std::chrono::duration<double>(o.seconds));
  }
  for (int t = 0; t < o.threads; ++t) {
    const uint64_t ops =
        deadline.has_value() ? UINT64_MAX : o.ops * (t + 1) / o.threads - o.ops * t / o.threads;
    threads.emplace_back([&, t, ops] { results[t] = Worker(tree, o, zipf, t, ops, deadline); });
  }
  for (auto& th : threads) th.join();
  if (finish) finish();
  RunResult r;
  r.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  r.cpu_seconds = ProcessCpuSeconds() - cpu_start;
  for (const ThreadResult& t : results) {
    r.ops += t.ops;
    r.misses += t.misses;
    r.scanned += t.scanned;
    r.samples.insert(r.samples.end(), t.samples.begin(), t.samples.end());
  }
  r.Finish();
  return r;
}

struct EpochFigures {
  bool durable = false;
  uint64_t epochs = 0, lines = 0, log_entries = 0, fences = 0, flushes = 0;
  // Per run: the boundaries (the time new guards wait) and three of their parts.
  double boundary_ms = 0, guard_wait_ms = 0, source_ms = 0, flush_ms = 0;
};

// The share of an epoch (--epoch-ms) its boundary takes: the design goal is <= 2%.
double BoundarySharePct(const Options& o, const EpochFigures& f, double per_epoch) {
  return o.epoch_ms > 0 ? 100.0 * f.boundary_ms * per_epoch / o.epoch_ms : 0;
}

void Report(const Options& o, const RunResult& r, const EpochFigures& f) {
  const char* dist = o.zipf ? "zipf" : "uniform";
  const char* variant = o.durable ? "durable" : "transient";
  const double ops_per_sec = static_cast<double>(r.ops) / r.seconds;
  const double ops_per_cpu_sec = static_cast<double>(r.ops) / r.cpu_seconds * o.threads;
  const double per_epoch = f.epochs == 0 ? 0 : 1.0 / static_cast<double>(f.epochs);
  std::printf(
      "ycsb-%c %-7s %-9s threads=%d keys=%lu ops=%lu backend=%s: %.3f Mops/s (%.3f Mops per "
      "cpu-s x threads), p50 %lu ns, p99 %lu ns, %.2f s",
      o.workload, dist, variant, o.threads, o.keys, r.ops,
      o.durable ? std::string(BackendName(o.backend)).c_str() : "-", ops_per_sec / 1e6,
      ops_per_cpu_sec / 1e6, r.p50, r.p99, r.seconds);
  if (r.misses > 0) {
    // Every key read was loaded and none is removed: a miss is a wrong answer, not a figure.
    std::printf(", %lu MISSES\n", r.misses);
    Die(absl::StrCat("ycsb-", std::string(1, o.workload), ": ", r.misses,
                     " lookups of loaded keys found nothing"));
  }
  if (f.durable) {
    std::printf(
        "; %lu epochs: %.0f lines written back, %.2f ms boundary (%.2f%% of %d ms; %.2f ms "
        "waiting for guards, %.2f ms flush sources, %.2f ms flushing), %.1f log entries per "
        "epoch; %.4f fences/op",
        f.epochs, f.lines * per_epoch, f.boundary_ms * per_epoch, BoundarySharePct(o, f, per_epoch),
        o.epoch_ms, f.guard_wait_ms * per_epoch, f.source_ms * per_epoch, f.flush_ms * per_epoch,
        f.log_entries * per_epoch, static_cast<double>(f.fences) / static_cast<double>(r.ops));
  }
  std::printf("\n");
  std::fflush(stdout);
  if (o.json.empty()) return;
  FILE* out = std::fopen(o.json.c_str(), "a");
  if (out == nullptr) Die("cannot open " + o.json);
  std::fprintf(
      out,
      "{\"run\":%d,\"workload\":\"%c\",\"dist\":\"%s\",\"variant\":\"%s\",\"threads\":%d,"
      "\"keys\":%lu,\"ops\":%lu,\"ops_per_sec\":%.1f,\"p50_ns\":%lu,\"p99_ns\":%lu,"
      "\"ops_per_cpu_sec\":%.1f,\"cpu_seconds\":%.3f,"
      "\"seconds\":%.3f,\"backend\":\"%s\",\"epochs\":%lu,"
      "\"lines_flushed_per_epoch\":%.1f,\"boundary_ms_per_epoch\":%.3f,"
      "\"boundary_share_pct\":%.3f,\"guard_wait_ms_per_epoch\":%.3f,"
      "\"source_ms_per_epoch\":%.3f,\"flush_ms_per_epoch\":%.3f,\"log_entries_per_epoch\":%.2f,"
      "\"fences_per_op\":%.6f,\"value_checksums\":%s,\"guards\":\"%s\"}\n",
      static_cast<int>(getpid()), o.workload, dist, variant, o.threads, o.keys, r.ops, ops_per_sec,
      r.p50, r.p99, ops_per_cpu_sec, r.cpu_seconds, r.seconds,
      o.durable ? std::string(BackendName(o.backend)).c_str() : "none", f.epochs,
      f.lines * per_epoch, f.boundary_ms * per_epoch, BoundarySharePct(o, f, per_epoch),
      f.guard_wait_ms * per_epoch, f.source_ms * per_epoch, f.flush_ms * per_epoch,
      f.log_entries * per_epoch,
      static_cast<double>(f.fences) / static_cast<double>(std::max<uint64_t>(1, r.ops)),
      o.durable && o.value_checksums ? "true" : "false", o.per_op_guards ? "per-op" : "batch");
  std::fclose(out);
}

// Operations a workload will run (0: unknown, it runs for --seconds).
uint64_t TotalOps(const Options& o) { return o.seconds > 0 ? 0 : o.ops; }

void RunTransient(const Options& opts, const Zipfian* zipf) {
  ds::Masstree tree;
  Load(tree, opts, "transient");
  for (const char w : opts.workloads) {
    Options o = opts;
    o.workload = w;
    RunResult r;
    {
      Progress progress(o, absl::StrCat("ycsb-", std::string(1, w), " transient"), TotalOps(o));
      r = Run(tree, o, zipf);
    }
    Report(o, r, {});
  }
}

size_t PoolSizeFor(uint64_t keys) {
  // ~100 bytes per key (a 16-byte value object, a share of a 320-byte leaf, interiors) with
  // room for values replaced during the run, plus the log area (1/16).
  const size_t want = static_cast<size_t>(keys) * 192 + (size_t{256} << 20);
  return (want + (size_t{1} << 20) - 1) & ~((size_t{1} << 20) - 1);
}

struct Durable {
  std::unique_ptr<Pool> pool;
  std::unique_ptr<epoch::Manager> epochs;
  std::unique_ptr<alloc::Heap> heap;
  std::unique_ptr<ds::DurableMasstree> tree;  // destroyed first
  void Close() {
    tree.reset();
    heap.reset();
    epochs.reset();
    if (pool) (void)pool->Close();
    pool.reset();
  }
};

Durable OpenDurable(const Options& o, int epoch_ms) {
  Durable d;
  PoolOptions po;
  po.backend = o.backend;
  d.pool = Check(Pool::Open(o.pool, tools::kKvLayout, po), "Pool::Open");
  epoch::ManagerOptions mo;
  mo.interval = std::chrono::milliseconds(epoch_ms);
  d.epochs = Check(epoch::Manager::Open(*d.pool, mo), "Manager::Open");
  d.heap = Check(alloc::Heap::Open(*d.pool, *d.epochs), "Heap::Open");
  tools::KvRoot* root = Check(d.pool->root<tools::KvRoot>(), "root");
  d.tree = Check(ds::DurableMasstree::Open(*d.pool, *d.epochs, *d.heap, root->tree),
                 "DurableMasstree::Open");
  return d;
}

// Creates the pool with a tree holding the N keys, durable and cleanly closed.
void CreateLoaded(const Options& o) {
  PoolOptions po;
  po.backend = o.backend;
  Durable d;
  d.pool = Check(Pool::Create(o.pool, o.pool_size != 0 ? o.pool_size : PoolSizeFor(o.keys),
                              tools::kKvLayout, po),
                 "Pool::Create");
  d.epochs =
      Check(epoch::Manager::Open(*d.pool, {.interval = std::chrono::milliseconds(o.epoch_ms)}),
            "Manager::Open");
  d.heap = Check(alloc::Heap::Open(*d.pool, *d.epochs), "Heap::Open");
  d.tree = Check(ds::DurableMasstree::Create(*d.pool, *d.epochs, *d.heap,
                                             {.value_checksums = o.value_checksums}),
                 "Create");
  {
    epoch::Guard g(*d.epochs);
    tools::KvRoot* root = Check(d.pool->root<tools::KvRoot>(), "root");
    // A new pool: the root is new in this epoch (no undo copy needed), durable at the Sync
    // below. The pool is a key-value pool (tools/kv_store.h) that pmrt info/check/dump and
    // pmrt serve open.
    root->tree = d.tree->descriptor();
    root->magic = tools::KvRoot::kMagic;
    d.epochs->RecordDirty(root, sizeof(tools::KvRoot));
  }
  Load(*d.tree, o, "durable");
  if (auto st = d.epochs->Sync(); !st.ok()) Die(st.ToString());
  d.Close();
}

EpochFigures Figures(const epoch::ManagerStats& a, const epoch::ManagerStats& b,
                     const PersistCounts& pa, const PersistCounts& pb) {
  EpochFigures f;
  f.durable = true;
  f.epochs = b.advances - a.advances;
  f.lines = b.lines_flushed - a.lines_flushed;
  f.log_entries = b.log_entries - a.log_entries;
  f.boundary_ms =
      std::chrono::duration<double, std::milli>(b.boundary_time - a.boundary_time).count();
  const auto ms = [](std::chrono::nanoseconds d) {
    return std::chrono::duration<double, std::milli>(d).count();
  };
  f.flush_ms = ms(b.flush_time - a.flush_time);
  f.guard_wait_ms = ms(b.guard_wait_time - a.guard_wait_time);
  f.source_ms = ms(b.source_time - a.source_time);
  f.fences = pb.fences - pa.fences;
  f.flushes = pb.flushes - pa.flushes;
  return f;
}

void RunDurable(const Options& opts, const Zipfian* zipf) {
  unlink(opts.pool.c_str());
  CreateLoaded(opts);
  Durable d = OpenDurable(opts, opts.epoch_ms);
  // Warm: every leaf is repaired (a clean reopen re-arms each leaf at its first access), so the
  // timed phase measures steady state, as the transient tree's does.
  {
    size_t n = 0;
    d.tree->scan("", SIZE_MAX, [&](std::string_view, std::string_view) { return ++n, true; });
  }
  for (const char w : opts.workloads) {
    Options o = opts;
    o.workload = w;
    if (auto st = d.epochs->Sync(); !st.ok()) Die(st.ToString());
    const epoch::ManagerStats a = d.epochs->stats();
    const PersistCounts pa = CountersSnapshotAll();
    RunResult r;
    {
      Progress progress(o, absl::StrCat("ycsb-", std::string(1, w), " durable"), TotalOps(o));
      r = Run(*d.tree, o, zipf, [&] {
        if (auto st = d.epochs->Sync(); !st.ok()) Die(st.ToString());
      });
    }
    const epoch::ManagerStats b = d.epochs->stats();
    const PersistCounts pb = CountersSnapshotAll();
    Report(o, r, Figures(a, b, pa, pb));
  }
  d.Close();
  if (!opts.keep_pool) unlink(opts.pool.c_str());
}

// Advances the durable tree's epoch every `period` while enabled (the Manager's background
// advancer does the same; this one can be paused during the transient chunks of --variant both).
class ChunkAdvancer {
 public:
  ChunkAdvancer(epoch::Manager& m, std::chrono::milliseconds period)
      : m_(m), period_(period), thread_([this] { Loop(); }) {}
  ~ChunkAdvancer() {
    stop_.store(true);
    thread_.join();
  }
  void Enable(bool on) { enabled_.store(on); }

 private:
  void Loop() {
    while (!stop_.load()) {
      std::this_thread::sleep_for(period_);
      if (enabled_.load() && !m_.Advance().ok()) Die("epoch advance failed");
    }
  }
  epoch::Manager& m_;
  std::chrono::milliseconds period_;
  std::atomic<bool> stop_{false}, enabled_{false};
  std::thread thread_;
};

void RunBoth(const Options& opts, const Zipfian* zipf) {
  ds::Masstree transient;
  Load(transient, opts, "transient");
  unlink(opts.pool.c_str());
  CreateLoaded(opts);
  Durable d = OpenDurable(opts, /*epoch_ms=*/0);
  {
    size_t n = 0;  // every leaf repaired before the timed phase (see RunDurable)
    d.tree->scan("", SIZE_MAX, [&](std::string_view, std::string_view) { return ++n, true; });
  }
  if (auto st = d.epochs->Sync(); !st.ok()) Die(st.ToString());
  ChunkAdvancer advancer(*d.epochs, std::chrono::milliseconds(opts.epoch_ms));
  for (const char w : opts.workloads) {
    Options o = opts;
    o.workload = w;
    RunResult rt, rd;
    epoch::ManagerStats a_sum{}, b_sum{};
    PersistCounts pa_sum, pb_sum;
    auto progress = std::make_unique<Progress>(
        o, absl::StrCat("ycsb-", std::string(1, w), " transient + durable"), 2 * TotalOps(o));
    for (int round = 0; round < opts.rounds; ++round) {
      Options c = o;
      c.ops = o.ops * (round + 1) / opts.rounds - o.ops * round / opts.rounds;
      c.seconds = o.seconds / opts.rounds;
      c.seed = o.seed * 1009 + static_cast<uint64_t>(round);
      for (int k = 0; k < 2; ++k) {
        if ((k == 0) == (round % 2 == 0)) {
          rt.Add(Run(transient, c, zipf));
          continue;
        }
        const epoch::ManagerStats a = d.epochs->stats();
        const PersistCounts pa = CountersSnapshotAll();
        advancer.Enable(true);
        rd.Add(Run(*d.tree, c, zipf, [&] {
          if (auto st = d.epochs->Sync(); !st.ok()) Die(st.ToString());
        }));
        advancer.Enable(false);
        const epoch::ManagerStats b = d.epochs->stats();
        const PersistCounts pb = CountersSnapshotAll();
        a_sum.advances += a.advances;
        b_sum.advances += b.advances;
        a_sum.lines_flushed += a.lines_flushed;
        b_sum.lines_flushed += b.lines_flushed;
        a_sum.log_entries += a.log_entries;
        b_sum.log_entries += b.log_entries;
        a_sum.boundary_time += a.boundary_time;
        b_sum.boundary_time += b.boundary_time;
        a_sum.flush_time += a.flush_time;
        b_sum.flush_time += b.flush_time;
        a_sum.guard_wait_time += a.guard_wait_time;
        b_sum.guard_wait_time += b.guard_wait_time;
        a_sum.source_time += a.source_time;
        b_sum.source_time += b.source_time;
        pa_sum += pa;
        pb_sum += pb;
      }
    }
    progress.reset();
    rt.Finish();
    rd.Finish();
    Options ot = o, od = o;
    ot.durable = false;
    od.durable = true;
    Report(ot, rt, {});
    Report(od, rd, Figures(a_sum, b_sum, pa_sum, pb_sum));
    std::printf("ycsb-%c %-7s durable/transient: %.3f wall, %.3f cpu (%d interleaved rounds)\n", w,
                o.zipf ? "zipf" : "uniform", (rd.ops / rd.seconds) / (rt.ops / rt.seconds),
                (rd.ops / rd.cpu_seconds) / (rt.ops / rt.cpu_seconds), opts.rounds);
    std::fflush(stdout);
  }
  d.Close();
  if (!opts.keep_pool) unlink(opts.pool.c_str());
}

// ---- recovery -----------------------------------------------------------------------------------

double Ms(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

// The child of --recovery: workload A until killed, the last epoch left unfinished.
[[noreturn]] void RecoveryChild(const Options& o, int ready_fd) {
  Durable d = OpenDurable(o, 0);
  std::atomic<int> phase{0};  // 0 run, 1 stop
  std::vector<std::thread> threads;
  for (int t = 0; t < o.threads; ++t) {
    threads.emplace_back([&, t] {
      Rng rng{Scramble(o.seed * 77 + static_cast<uint64_t>(t)) | 1};
      for (uint64_t i = 0; phase.load(std::memory_order_relaxed) == 0; ++i) {
        const ds::U64Key key = KeyOf(rng.Next() % o.keys);
        if (rng.Next() % 2) {
          d.tree->put_as(key, i);
        } else {
          (void)d.tree->get_as<uint64_t>(key);
        }
      }
    });
  }
  const auto epoch = std::chrono::milliseconds(o.epoch_ms);
  for (int e = 0; e < 2; ++e) {
    std::this_thread::sleep_for(epoch);
    if (auto st = d.epochs->Advance(); !st.ok()) _exit(3);
  }
  std::this_thread::sleep_for(epoch - std::chrono::milliseconds(2));
  phase.store(1);
  for (auto& th : threads) th.join();  // inside the failed epoch: nothing more is durable
  const char c = 1;
  if (write(ready_fd, &c, 1) != 1) _exit(4);
  for (;;) pause();
}

void RunRecovery(const Options& o) {
  unlink(o.pool.c_str());
  CreateLoaded(o);
  std::vector<double> totals;
  for (int rep = 0; rep < o.repeat; ++rep) {
    int fds[2];
    if (pipe(fds) != 0) Die("pipe");
    const pid_t pid = fork();
    if (pid < 0) Die("fork");
    if (pid == 0) {
      close(fds[0]);
      RecoveryChild(o, fds[1]);
    }
    close(fds[1]);
    char c;
    if (read(fds[0], &c, 1) != 1) Die("recovery child died before its last epoch ended");
    close(fds[0]);
    kill(pid, SIGKILL);
    int status;
    waitpid(pid, &status, 0);

    const auto t0 = Clock::now();
    PoolOptions po;
    po.backend = o.backend;
    Durable d;
    d.pool = Check(Pool::Open(o.pool, tools::kKvLayout, po), "Pool::Open");
    const auto t1 = Clock::now();
    d.epochs =
        Check(epoch::Manager::Open(*d.pool, {.interval = std::chrono::milliseconds(o.epoch_ms)}),
              "Manager::Open");
    const auto t2 = Clock::now();
    d.heap = Check(alloc::Heap::Open(*d.pool, *d.epochs), "Heap::Open");
    const auto t3 = Clock::now();
    tools::KvRoot* root = Check(d.pool->root<tools::KvRoot>(), "root");
    d.tree = Check(ds::DurableMasstree::Open(*d.pool, *d.epochs, *d.heap, root->tree), "Open");
    const auto t4 = Clock::now();
    Rng rng{Scramble(o.seed + static_cast<uint64_t>(rep))};
    const bool found = d.tree->get_as<uint64_t>(KeyOf(rng.Next() % o.keys)).has_value();
    const auto t5 = Clock::now();
    size_t n = 0;
    d.tree->scan("", SIZE_MAX, [&](std::string_view, std::string_view) { return ++n, true; });
    const auto t6 = Clock::now();
    const auto ds = d.tree->durable_stats();
    const uint64_t replayed = d.epochs->stats().log_entries_replayed;
    totals.push_back(Ms(t0, t5));
    std::printf(
        "recovery keys=%lu pool=%zu MiB threads=%d backend=%s: Pool::Open %.2f ms, Manager::Open "
        "%.2f ms "
        "(%lu log entries replayed), Heap::Open %.2f ms, tree Open %.3f ms, first get %.3f ms "
        "(%s) => %.2f ms to the first answer; then a full scan %.1f ms (%zu keys, %lu leaves "
        "repaired, %lu values and %lu permutations rolled back)\n",
        o.keys, d.pool->size() >> 20, o.threads, std::string(BackendName(o.backend)).c_str(),
        Ms(t0, t1), Ms(t1, t2), replayed, Ms(t2, t3), Ms(t3, t4), Ms(t4, t5),
        found ? "found" : "MISSING", Ms(t0, t5), Ms(t5, t6), n, ds.leaves_recovered,
        ds.values_rolled_back, ds.perms_rolled_back);
    if (n != o.keys) Die(absl::StrCat("recovered tree holds ", n, " keys, expected ", o.keys));
    if (!o.json.empty()) {
      FILE* out = std::fopen(o.json.c_str(), "a");
      if (out == nullptr) Die("cannot open " + o.json);
      std::fprintf(out,
                   "{\"mode\":\"recovery\",\"keys\":%lu,\"pool_mib\":%zu,\"threads\":%d,"
                   "\"backend\":\"%s\","
                   "\"pool_open_ms\":%.3f,\"manager_open_ms\":%.3f,\"log_entries_replayed\":%lu,"
                   "\"heap_open_ms\":%.3f,\"tree_open_ms\":%.3f,\"first_get_ms\":%.3f,"
                   "\"to_first_get_ms\":%.3f,\"full_scan_ms\":%.1f}\n",
                   o.keys, d.pool->size() >> 20, o.threads,
                   std::string(BackendName(o.backend)).c_str(), Ms(t0, t1), Ms(t1, t2), replayed,
                   Ms(t2, t3), Ms(t3, t4), Ms(t4, t5), Ms(t0, t5), Ms(t5, t6));
      std::fclose(out);
    }
    d.Close();
  }
  std::sort(totals.begin(), totals.end());
  std::printf("recovery keys=%lu: median %.2f ms to the first answer (min %.2f, max %.2f)\n",
              o.keys, totals[totals.size() / 2], totals.front(), totals.back());
  if (!o.keep_pool) unlink(o.pool.c_str());
}

}  // namespace

int RunYcsb(const Options& o) {
  g_program = o.program.c_str();
  if (o.recovery) {
    RunRecovery(o);
    return 0;
  }
  std::unique_ptr<Zipfian> zipf;
  if (o.zipf) zipf = std::make_unique<Zipfian>(o.keys, 0.99);
  if (o.both) {
    RunBoth(o, zipf.get());
  } else if (o.durable) {
    RunDurable(o, zipf.get());
  } else {
    RunTransient(o, zipf.get());
  }
  return 0;
}

}  // namespace pmrt::ycsb
