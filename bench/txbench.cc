// pmrt-txbench: persistent transactions that each update K random 8-byte words of an N-word
// persistent array, on four systems with the same workload code (docs/performance.md,
// "Transactions"; bench/txbench.sh runs the whole comparison).
//
//   pmrt-txbench --system pmrt|pmdk|undo|plain|floor --words K --dist uniform|zipf --array N
//                --threads T [--seconds S] [--warmup S] [--json] [--dir DIR]
//                [--budget-mb M] [--block-kb B] [--backend pmem|eadr|msync] [--seed N]
//                [--prewarm] [--draws D] [--prefetch] [--no-fast-lines] [--hot-ms MS]
//
// Systems:
//   pmrt   txn::begin; K x txn::write(&a[i], v); txn::commit — speculative logging, one fence
//          per commit (txn/txn.h). A pool file in DIR (default /dev/shm, unlinked once mapped),
//          backend pmem, the 64 ms epoch advancer and the background reclaimer with a
//          --budget-mb log budget (0, the default: the engine's automatic budget, which starts
//          at 1/16 of the pool and follows the hot set).
//   pmdk   libpmemobj: pmemobj_tx_begin; K x pmemobj_tx_add_range_direct(&a[i], 8), a[i] = v;
//          pmemobj_tx_commit / pmemobj_tx_end, on a pmemobj pool in DIR.
//   undo   a straightforward undo log on a pmrt pool (pmem backend): per word, the entry
//          {offset, old value, txn id} is written, flushed and fenced before the store; at
//          commit the data words are flushed and fenced, then the commit mark is persisted
//          (K + 2 fences per transaction).
//   plain  the same stores into DRAM, no crash consistency.
//   floor  the work no design of pmrt's kind can skip, and nothing else (PmrtSystem::FloorTx):
//          per word an index slot read (8 bytes per word, in DRAM), the old value kept and the
//          new one stored; one record copied to a log ring with CopyFlush and one fence, a
//          record of one word ending its cache line where pmrt pads such records. A bound on
//          what pmrt could reach on this machine, not a crash-consistent system.
// The array is zeroed first; every system warms up for --warmup (1) s, then runs --seconds (3).
// --prewarm (every system): before that, every word is written once by the system's own
// transactions, so every system starts warm (pages mapped, structures touched); pmrt writes 64
// words per transaction and a reclamation folds the records, so the measurement is pmrt's steady
// state (every word hot) rather than its cold start (the first write of each word pays a
// snapshot: one more fence).
// With T threads, thread t updates its own slice of N/T words (isolation without locks, as a
// program holding per-slice locks would have). K words per transaction are drawn independently
// (uniform, or Zipfian with theta 0.99, YCSB's generator with scrambled ranks) from the slice.
// The word indices are drawn before the run: each thread draws --draws D (2^21) indices and
// reads them in order, round after round (a Zipfian draw costs ~40 ns, a quarter to a half of
// a pmrt transaction's time at K = 16; drawn in the loop it would be measured as part of every
// system's transactions). The sequence repeats every D/K transactions; with D much larger than
// the cache it brings no locality. --draws 0 draws inside the loop instead. The values stored
// come from xorshift64* inside the loop (~2 ns each).
// --prefetch: a program that knows its next transaction's words: each system, after its writes
// and before its commit, prefetches the next transaction's words (pmrt: txn::prefetch, which also
// prefetches their word index slots; the floor: the data and its index; the others: the data
// lines). Not part of the standard comparison; it shows what overlapping one transaction's cache
// misses with the previous commit's fence is worth (docs/txn.md, "Design notes").
//
// /dev/shm is not persistent memory; PMEM_IS_PMEM_FORCE=1 (set by main unless the environment
// sets it) makes libpmem and libpmemobj flush with clwb/clflushopt + sfence as on real PM.
//
// Output: one line per run; with --json one JSON object per run: system, words, dist, array,
// threads, seconds, commits, ops_per_sec (transactions per wall second), ops_per_worker_cpu_sec
// (per second of the workers' own thread CPU time, x threads: the cost on the worker cores,
// immune to other tenants of a shared machine; pmrt's reclaimer and advancer run on other
// threads and are not in it), ops_per_cpu_sec (per process-CPU-second x threads: everything,
// background threads included), fences_per_commit and lines_flushed_per_commit (pmrt and
// undo: every fence of the process, advancer and reclaimer included; pmdk: null, libpmemobj
// does not expose its counts), and for pmrt the log: log_budget, log_bytes_avg/max (sampled
// every 10 ms during the measured interval), snapshots_per_commit, reclaim_cycles (and
// full_cycles of them: the ones that rewrote the compacted log; both since the engine opened),
// close_ms (the engine's close, which writes back every word a live record holds), lines_marked
// and lines_unmarked (fast lines, docs/txn.md; --no-fast-lines turns them off: every
// declaration reads its word's index slot); reclaimer_cpu_seconds and advancer_cpu_seconds (the
// background threads' CPU in the measured interval) and their shares of the workers' CPU
// (reclaimer_cpu_share, advancer_cpu_share), the data entries its cycles decided per commit
// (entries_folded_per_commit: kept, dropped or made cold, the compacted log's own again in each
// full cycle) and its CPU per such entry (reclaimer_ns_per_entry); the log against the hot set
// (HotSeries: the words written in the last --hot-ms, 256 by default, four 64 ms epochs):
// hot_bytes_avg, log_over_hot_avg, log_over_hot_end, and "series", [t, log bytes, hot bytes] every
// 250 ms; steady_after_s (every system): seconds from the first transaction, the warmup's included,
// to the end of the last 250 ms window under 80% of the steady rate (HotSeries::SteadyAfter).
#include <libpmem.h>
#include <libpmemobj.h>
#include <sys/resource.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "alloc/allocator.h"
#include "epoch/epoch.h"
#include "epoch/persist.h"
#include "epoch/pool.h"
#include "tools/workload_gen.h"
#include "txn/txn.h"

namespace {

using Clock = std::chrono::steady_clock;

[[noreturn]] void Die(const std::string& what) {
  std::fprintf(stderr, "pmrt-txbench: %s\n", what.c_str());
  std::exit(1);
}

struct Args {
  std::string system = "pmrt";
  int words = 1;
  std::string dist = "uniform";
  uint64_t array = 1 << 20;
  int threads = 1;
  double seconds = 3;
  double warmup = 1;
  bool json = false;
  std::string dir = "/dev/shm";
  size_t budget_mb = 0;
  size_t block_kb = 32;
  std::string backend = "pmem";
  uint64_t seed = 1;
  bool prewarm = false;
  bool prefetch = false;
  bool fast_lines = true;
  uint64_t draws = uint64_t{1} << 21;
  double hot_ms = 256;  // the hot set: words written in the last hot_ms (four 64 ms epochs)
};

// xorshift64*
struct Rng {
  explicit Rng(uint64_t s) : x(s * 0x9E3779B97F4A7C15ull | 1) {}
  uint64_t Next() {
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    return x * 0x2545F4914F6CDD1Dull;
  }
  double Uniform() { return static_cast<double>(Next() >> 11) * 0x1.0p-53; }
  uint64_t x;
};

using Zipf = pmrt::bench::ScrambledZipfian;

double ThreadCpuSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

double ProcessCpuSeconds() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<double>(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
         static_cast<double>(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1e-6;
}

// A system: the array and a transaction over it. Tx(thread, indices, values) runs one
// transaction; false on failure.
// The log against the hot set, over time. Every 10 ms (the warmup included) the log's bytes and
// each thread's draws consumed; afterwards, at every 250 ms of the measured interval, the hot set:
// the distinct words the threads drew in the --hot-ms before (the words written in that window,
// 8 bytes each), counted from the drawn sequences (none with --draws 0).
class HotSeries {
 public:
  explicit HotSeries(const Args& a) : a_(a) {}
  void Add(double t, uint64_t log_bytes, std::vector<uint64_t> pos) {
    samples_.push_back({t, log_bytes, std::move(pos)});
  }
  // JSON fields: hot_ms; hot_bytes_avg, log_over_hot_avg (the mean over the points of the log's
  // bytes over the hot set's) and log_over_hot_end (the last point); "series": [[t seconds,
  // log bytes, hot bytes], ...].
  std::string Json(const std::vector<std::vector<uint64_t>>& drawn) const {
    std::string out = ", \"hot_ms\": " + std::to_string(a_.hot_ms);
    std::vector<uint32_t> seen(a_.array, 0);
    std::string points;
    double hot_sum = 0, ratio_sum = 0, ratio_end = 0;
    int n = 0;
    int last_slot = -1;
    for (size_t i = 0; i < samples_.size() && a_.draws > 0; ++i) {
      if (samples_[i].t < 0) continue;
      const int slot = static_cast<int>(samples_[i].t / 0.25);
      if (slot == last_slot) continue;
      last_slot = slot;
      const uint64_t hot = 8 * HotWords(i, drawn, seen, static_cast<uint32_t>(n + 1));
      const double ratio = hot > 0 ? static_cast<double>(samples_[i].log_bytes) / hot : 0.0;
      char buf[96];
      std::snprintf(buf, sizeof(buf), "%s[%.2f, %lu, %lu]", n ? ", " : "", samples_[i].t,
                    samples_[i].log_bytes, hot);
      points += buf;
      hot_sum += static_cast<double>(hot);
      ratio_sum += ratio;
      ratio_end = ratio;
      ++n;
    }
    if (n == 0) return out + ", \"hot_bytes_avg\": null, \"log_over_hot_avg\": null";
    char buf[160];
    std::snprintf(buf, sizeof(buf),
                  ", \"hot_bytes_avg\": %.0f, \"log_over_hot_avg\": %.3f, "
                  "\"log_over_hot_end\": %.3f",
                  hot_sum / n, ratio_sum / n, ratio_end);
    return out + buf + ", \"series\": [" + points + "]";
  }

  // Seconds from the first transaction (the warmup's start) to the end of the last 250 ms
  // window whose rate is under 80% of the median window of the run's second half: how long a
  // run takes to reach its steady state (the commits of a window from the draws consumed, k
  // per transaction). 0 when every window is steady; null without two windows.
  std::string SteadyAfter(int k) const {
    struct Window {
      double end, rate;
    };
    std::vector<Window> windows;
    const Sample* from = samples_.empty() ? nullptr : &samples_.front();
    auto commits = [&](const Sample& s) {
      uint64_t n = 0;
      for (uint64_t p : s.pos) n += p;
      return static_cast<double>(n) / k;
    };
    for (const Sample& s : samples_) {
      if (s.t - from->t < 0.25) continue;
      windows.push_back({s.t, (commits(s) - commits(*from)) / (s.t - from->t)});
      from = &s;
    }
    if (windows.size() < 2) return "null";
    const double end_t = windows.back().end;
    std::vector<double> late;
    for (const Window& w : windows)
      if (w.end >= (samples_.front().t + end_t) / 2) late.push_back(w.rate);
    std::nth_element(late.begin(), late.begin() + late.size() / 2, late.end());
    const double steady = late[late.size() / 2];
    double after = samples_.front().t;
    for (const Window& w : windows)
      if (w.rate < 0.8 * steady) after = w.end;
    char buf[32];
    std::snprintf(buf, sizeof(buf), "%.2f", after - samples_.front().t);
    return buf;
  }

 private:
  struct Sample {
    double t;
    uint64_t log_bytes;
    std::vector<uint64_t> pos;
  };
  // The distinct words drawn in the hot_ms before sample i (from the last sample at least that
  // old, or from the start). `seen` marks words with `stamp`, new for each call.
  uint64_t HotWords(size_t i, const std::vector<std::vector<uint64_t>>& drawn,
                    std::vector<uint32_t>& seen, uint32_t stamp) const {
    const double from_t = samples_[i].t - a_.hot_ms / 1000;
    const Sample* from = nullptr;
    for (size_t j = 0; j < i && samples_[j].t <= from_t; ++j) from = &samples_[j];
    uint64_t distinct = 0;
    for (size_t t = 0; t < drawn.size(); ++t) {
      const std::vector<uint64_t>& d = drawn[t];
      const uint64_t end = samples_[i].pos[t], begin = from != nullptr ? from->pos[t] : 0;
      const uint64_t n = std::min<uint64_t>(end - begin, d.size());
      for (uint64_t k = end - n; k < end; ++k) {
        const uint64_t w = d[k % d.size()];
        if (seen[w] != stamp) {
          seen[w] = stamp;
          ++distinct;
        }
      }
    }
    return distinct;
  }

  const Args& a_;
  std::vector<Sample> samples_;
};

class System {
 public:
  virtual ~System() = default;
  virtual uint64_t* array() = 0;
  // `next`: the next transaction's K word indices, to prefetch before this one commits
  // (--prefetch), or null.
  virtual bool Tx(int thread, const uint64_t* idx, const uint64_t* val, int k,
                  const uint64_t* next) = 0;
  virtual bool CountsFences() const { return false; }
  // --prewarm: every word written once, by the system's own transactions of one word (its
  // pages mapped, its lines and the system's structures warm), before the warmup; pmrt also
  // folds the records (PmrtSystem::Prewarm).
  virtual void Prewarm(uint64_t n) {
    for (uint64_t i = 0; i < n; ++i) {
      const uint64_t v = array()[i];
      if (!Tx(0, &i, &v, 1, nullptr)) Die("prewarm: a transaction failed");
    }
  }
  virtual void Sample() {}
  // `worker_cpu`: the workers' thread CPU seconds in the measured interval.
  virtual void Report(std::string& json, uint64_t commits, double worker_cpu) {
    (void)json, (void)commits, (void)worker_cpu;
  }
  // The log's bytes now (0: no log).
  virtual uint64_t LogBytes() { return 0; }
};

std::string PoolPath(const Args& a, const char* what) {
  return a.dir + "/pmrt-txbench-" + what + "-" + std::to_string(getpid());
}

// ---- pmrt -----------------------------------------------------------------------------------

class PmrtSystem : public System {
 public:
  enum Mode { kSpec, kUndo, kFloor };
  explicit PmrtSystem(const Args& a, Mode mode) {
    const bool with_txn = mode == kSpec;
    const std::string path = PoolPath(a, a.system.c_str());
    unlink(path.c_str());
    pmrt::PoolOptions po;
    auto kind = pmrt::ParseBackend(a.backend);
    if (!kind.ok()) Die(kind.status().ToString());
    po.backend = *kind;
    const size_t size = a.array * 8 * 2 + (a.budget_mb << 21) + (256 << 20);
    auto pool = pmrt::Pool::Create(path, size, "pmrt-txbench", po);
    if (!pool.ok()) Die(pool.status().ToString());
    pool_ = std::move(*pool);
    unlink(path.c_str());
    auto m = pmrt::epoch::Manager::Open(*pool_, {});
    if (!m.ok()) Die(m.status().ToString());
    epochs_ = std::move(*m);
    auto h = pmrt::alloc::Heap::Open(*pool_, *epochs_);
    if (!h.ok()) Die(h.status().ToString());
    heap_ = std::move(*h);
    if (with_txn) {
      pmrt::txn::Options o;
      o.log_budget = a.budget_mb << 20;
      o.block_size = a.block_kb << 10;
      o.fast_lines = a.fast_lines;
      auto e = pmrt::txn::Engine::Open(*pool_, *epochs_, *heap_, o);
      if (!e.ok()) Die(e.status().ToString());
      engine_ = std::move(*e);
    }
    void* arr = heap_->Allocate(a.array * 8, 64);
    if (arr == nullptr) Die("cannot allocate the array");
    arr_ = static_cast<uint64_t*>(arr);
    std::memset(arr_, 0, a.array * 8);
    {
      pmrt::epoch::Guard g(*epochs_);
      epochs_->RecordDirty(arr_, a.array * 8);
    }
    if (!epochs_->Sync().ok()) Die("sync");
    if (mode == kFloor) {
      index_ = std::make_unique<uint64_t[]>(a.array);
      for (uint64_t i = 0; i < a.array; ++i) index_[i] = uint64_t{1} << 32;  // every word hot
      floor_.resize(static_cast<size_t>(a.threads));
      for (FloorLog& f : floor_) {
        void* r = heap_->Allocate(kFloorRing, 64);
        if (r == nullptr) Die("cannot allocate a floor ring");
        f.ring = static_cast<uint8_t*>(r);
        f.stage.resize(2 * static_cast<size_t>(a.words));
        f.old.resize(static_cast<size_t>(a.words));
      }
    } else if (!with_txn) {
      // The undo logs: one per thread, K entries of 24 bytes and a commit mark line.
      for (int t = 0; t < a.threads; ++t) {
        void* l = heap_->Allocate(64 + static_cast<size_t>(a.words) * 64, 64);
        if (l == nullptr) Die("cannot allocate an undo log");
        std::memset(l, 0, 64 + static_cast<size_t>(a.words) * 64);
        logs_.push_back(static_cast<uint8_t*>(l));
      }
      txids_.assign(a.threads, 0);
    }
  }
  ~PmrtSystem() override {
    engine_.reset();
    heap_.reset();
    epochs_.reset();
    pool_.reset();
  }
  uint64_t* array() override { return arr_; }
  bool CountsFences() const override { return true; }

  uint64_t LogBytes() override { return engine_ ? engine_->stats().log_bytes : 0; }
  bool HasLog() const { return engine_ != nullptr; }
  void Sample() override {
    if (!engine_) return;
    const uint64_t b = engine_->stats().log_bytes;
    log_sum_ += b;
    ++log_samples_;
    log_max_ = std::max(log_max_, b);
  }

  void Report(std::string& json, uint64_t commits, double worker_cpu) override {
    // How the pool writes records (epoch/persist.h, RecordWrites; PMRT_RECORD_WRITES sets it).
    json += ", \"record_writes\": \"";
    json += pmrt::RecordWritesName(pool_->persister().record_writes());
    json += "\"";
    if (!engine_) return;
    const pmrt::txn::Stats s = engine_->stats();
    char buf[512];
    std::snprintf(
        buf, sizeof(buf),
        ", \"log_budget\": %zu, \"log_bytes_avg\": %.0f, \"log_bytes_max\": %lu, "
        "\"log_bytes_peak_all\": %lu, \"compact_bytes\": %lu, \"snapshots_per_commit\": %.4f, "
        "\"reclaim_cycles\": %lu, \"full_cycles\": %lu, \"words_cold\": %lu, \"stalls\": %lu, "
        "\"lines_marked\": %lu, \"lines_unmarked\": %lu",
        static_cast<size_t>(s.log_budget),  // in effect (the engine caps it)
        log_samples_ ? static_cast<double>(log_sum_) / log_samples_ : 0.0, log_max_,
        s.log_bytes_peak, s.compact_bytes,
        commits ? static_cast<double>(s.snapshots - snapshots0_) / commits : 0.0, s.cycles,
        s.full_cycles, s.words_cold, s.stalls - stalls0_, s.lines_marked, s.lines_unmarked);
    json += buf;
    // The background threads' CPU in the measured interval, as a share of the workers'.
    const double reclaimer =
        std::chrono::duration<double>(s.reclaimer_cpu - reclaimer_cpu0_).count();
    const double advancer =
        std::chrono::duration<double>(epochs_->stats().advancer_cpu - advancer_cpu0_).count();
    // Every data entry a cycle decided (kept, dropped as superseded, or made cold), the
    // compacted log's own entries again in each full cycle: what the reclaimer's CPU buys.
    const uint64_t folded = s.words_kept + s.words_dropped + s.words_cold - folded0_;
    std::snprintf(buf, sizeof(buf),
                  ", \"reclaimer_cpu_seconds\": %.3f, \"advancer_cpu_seconds\": %.3f, "
                  "\"reclaimer_cpu_share\": %.4f, \"advancer_cpu_share\": %.4f, "
                  "\"entries_folded_per_commit\": %.2f, \"reclaimer_ns_per_entry\": %.2f",
                  reclaimer, advancer, worker_cpu > 0 ? reclaimer / worker_cpu : 0.0,
                  worker_cpu > 0 ? advancer / worker_cpu : 0.0,
                  commits ? static_cast<double>(folded) / commits : 0.0,
                  folded ? reclaimer * 1e9 / static_cast<double>(folded) : 0.0);
    json += buf;
    // The close: the engine writes back every word a live record holds (docs/txn.md, "Epochs").
    const auto c0 = std::chrono::steady_clock::now();
    engine_.reset();
    const double close_ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - c0).count();
    json += ", \"close_ms\": " + std::to_string(close_ms);
  }
  void MarkStart() {
    if (!engine_) return;
    const pmrt::txn::Stats s = engine_->stats();
    snapshots0_ = s.snapshots;
    stalls0_ = s.stalls;
    folded0_ = s.words_kept + s.words_dropped + s.words_cold;
    reclaimer_cpu0_ = s.reclaimer_cpu;
    advancer_cpu0_ = epochs_->stats().advancer_cpu;
  }
  // Every word written once in a transaction (64 per transaction), then folded by a
  // reclamation: the log holds a record of every word, as after a long run.
  void Prewarm(uint64_t n) override {
    if (!engine_) return System::Prewarm(n);
    for (uint64_t i = 0; i < n; i += 64) {
      if (!pmrt::txn::begin().ok()) Die("prewarm: begin");
      for (uint64_t j = i; j < std::min(n, i + 64); ++j) (void)pmrt::txn::write(&arr_[j], arr_[j]);
      if (!pmrt::txn::commit().ok()) Die("prewarm: commit");
    }
    if (!epochs_->Sync().ok() || !engine_->Reclaim().ok()) Die("prewarm: reclaim");
  }

 protected:
  bool SpecTx(const uint64_t* idx, const uint64_t* val, int k, const uint64_t* next) {
    if (!pmrt::txn::begin().ok()) return false;
    for (int j = 0; j < k; ++j) (void)pmrt::txn::write(&arr_[idx[j]], val[j]);
    if (next != nullptr) {
      for (int j = 0; j < k; ++j) pmrt::txn::prefetch(&arr_[next[j]]);
    }
    return pmrt::txn::commit().ok();
  }

  // The undo log: entry j = {pool offset of the word, old value, txn id} in its own line.
  bool UndoTx(int thread, const uint64_t* idx, const uint64_t* val, int k, const uint64_t* next) {
    static constexpr pmrt::Site kEntry{"bench.undo.entry"}, kEntryFence{"bench.undo.entry.fence"};
    static constexpr pmrt::Site kData{"bench.undo.data"}, kDataFence{"bench.undo.data.fence"};
    static constexpr pmrt::Site kMark{"bench.undo.mark"}, kMarkFence{"bench.undo.mark.fence"};
    const pmrt::Persister& p = pool_->persister();
    uint8_t* log = logs_[thread];
    const uint64_t txid = ++txids_[thread];
    for (int j = 0; j < k; ++j) {
      auto* e = reinterpret_cast<uint64_t*>(log + 64 + j * 64);
      e[0] = idx[j];
      e[1] = arr_[idx[j]];
      e[2] = txid;
      p.Persist(kEntry, kEntryFence, e, 24);  // the old value is durable before the store
      arr_[idx[j]] = val[j];
    }
    if (next != nullptr) {
      for (int j = 0; j < k; ++j) __builtin_prefetch(&arr_[next[j]], 1);
    }
    for (int j = 0; j < k; ++j) p.Flush(kData, &arr_[idx[j]], 8);
    p.Fence(kDataFence);
    auto* mark = reinterpret_cast<uint64_t*>(log);
    *mark = txid;  // committed: the entries of txid are dead
    p.Persist(kMark, kMarkFence, mark, 8);
    return true;
  }

  // The floor: the work no design of pmrt's kind can skip, and nothing else. Per word, the word's
  // slot in a DRAM index of 8 bytes per word is read and its epoch field stored when it
  // changes (pmrt: hot or cold, and the touch epoch), the old value is kept (for abort) and the
  // new one stored; then the transaction's {word, value} pairs are copied into a log ring with
  // CopyFlush and one fence (pmrt's one persist per commit). No checksum, no deduplication, no
  // log blocks, no reclamation, no epoch guard, no recovery: a bound on what a faster
  // implementation could reach on this machine, not a crash-consistent system.
  static constexpr size_t kFloorRing = 1 << 20;
  struct FloorLog {
    uint8_t* ring = nullptr;
    size_t at = 0;
    uint64_t n = 0;
    std::vector<uint64_t> stage, old;
  };
  bool FloorTx(int thread, const uint64_t* idx, const uint64_t* val, int k, const uint64_t* next) {
    static constexpr pmrt::Site kRecord{"bench.floor.record"}, kFence{"bench.floor.fence"};
    FloorLog& f = floor_[static_cast<size_t>(thread)];
    const uint32_t epoch = static_cast<uint32_t>(++f.n >> 16);  // changes now and then
    for (int j = 0; j < k; ++j) {
      uint64_t& slot = index_[idx[j]];
      const uint64_t v = slot;
      if ((v >> 32) == 0) return false;  // never: every word is hot
      if (static_cast<uint32_t>(v) != epoch) slot = (v & ~uint64_t{0xFFFFFFFF}) | epoch;
      f.old[static_cast<size_t>(j)] = arr_[idx[j]];
      arr_[idx[j]] = val[j];
      f.stage[2 * static_cast<size_t>(j)] = idx[j];
      f.stage[2 * static_cast<size_t>(j) + 1] = val[j];
    }
    std::atomic_signal_fence(std::memory_order_seq_cst);  // keep the old values
    if (next != nullptr) {
      for (int j = 0; j < k; ++j) {
        __builtin_prefetch(&arr_[next[j]], 1);
        __builtin_prefetch(&index_[next[j]], 1);
      }
    }
    const size_t bytes = 16 * static_cast<size_t>(k);
    if (f.at + bytes + 64 > kFloorRing) f.at = 0;
    pool_->persister().CopyFlush(kRecord, f.ring + f.at, f.stage.data(), bytes);
    pool_->persister().Fence(kFence);
    // A record of one word ends its line where pmrt pads such records (records not streamed:
    // docs/txn.md, "Line-ending records"), so that the next starts on a line of its own.
    const bool pad = k == 1 && !pool_->persister().StreamsRecords(bytes);
    f.at = pad ? (f.at + bytes + 63) & ~size_t{63} : f.at + bytes;
    return true;
  }

 private:
  std::unique_ptr<uint64_t[]> index_;
  std::vector<FloorLog> floor_;
  std::unique_ptr<pmrt::Pool> pool_;
  std::unique_ptr<pmrt::epoch::Manager> epochs_;
  std::unique_ptr<pmrt::alloc::Heap> heap_;
  std::unique_ptr<pmrt::txn::Engine> engine_;
  uint64_t* arr_ = nullptr;
  std::vector<uint8_t*> logs_;
  std::vector<uint64_t> txids_;
  uint64_t log_sum_ = 0, log_samples_ = 0, log_max_ = 0, snapshots0_ = 0, stalls0_ = 0,
           folded0_ = 0;
  std::chrono::nanoseconds reclaimer_cpu0_{0}, advancer_cpu0_{0};
};

// Each mode's transaction in a function of its own (as PmdkSystem's and PlainSystem's are):
// one function for the three would make each pay the others' register pressure, its prologue
// saving registers (stores) that the mode does not need.
template <PmrtSystem::Mode kMode>
class PmrtModeSystem final : public PmrtSystem {
 public:
  explicit PmrtModeSystem(const Args& a) : PmrtSystem(a, kMode) {}
  bool Tx(int thread, const uint64_t* idx, const uint64_t* val, int k,
          const uint64_t* next) override {
    if constexpr (kMode == kSpec) {
      (void)thread;
      return SpecTx(idx, val, k, next);
    } else if constexpr (kMode == kUndo) {
      return UndoTx(thread, idx, val, k, next);
    } else {
      return FloorTx(thread, idx, val, k, next);
    }
  }
};

// ---- PMDK -----------------------------------------------------------------------------------

class PmdkSystem : public System {
 public:
  explicit PmdkSystem(const Args& a) {
    path_ = PoolPath(a, "pmdk");
    unlink(path_.c_str());
    const size_t size = a.array * 8 * 2 + (256 << 20);
    pop_ = pmemobj_create(path_.c_str(), "pmrt-txbench", size, 0600);
    if (pop_ == nullptr) Die(path_ + ": pmemobj_create: " + pmemobj_errormsg());
    unlink(path_.c_str());
    PMEMoid root = pmemobj_root(pop_, a.array * 8);
    if (OID_IS_NULL(root)) Die(std::string("pmemobj_root: ") + pmemobj_errormsg());
    arr_ = static_cast<uint64_t*>(pmemobj_direct(root));
    pmemobj_memset_persist(pop_, arr_, 0, a.array * 8);
  }
  ~PmdkSystem() override { pmemobj_close(pop_); }
  uint64_t* array() override { return arr_; }
  bool Tx(int, const uint64_t* idx, const uint64_t* val, int k, const uint64_t* next) override {
    if (pmemobj_tx_begin(pop_, nullptr, TX_PARAM_NONE) != 0) return false;
    for (int j = 0; j < k; ++j) {
      if (pmemobj_tx_add_range_direct(&arr_[idx[j]], 8) != 0) {
        pmemobj_tx_end();
        return false;
      }
      arr_[idx[j]] = val[j];
    }
    if (next != nullptr) {
      for (int j = 0; j < k; ++j) __builtin_prefetch(&arr_[next[j]], 1);
    }
    pmemobj_tx_commit();
    return pmemobj_tx_end() == 0;
  }

 private:
  std::string path_;
  PMEMobjpool* pop_ = nullptr;
  uint64_t* arr_ = nullptr;
};

// ---- plain ----------------------------------------------------------------------------------

class PlainSystem : public System {
 public:
  explicit PlainSystem(const Args& a) : arr_(a.array, 0) {}
  uint64_t* array() override { return arr_.data(); }
  bool Tx(int, const uint64_t* idx, const uint64_t* val, int k, const uint64_t* next) override {
    for (int j = 0; j < k; ++j) arr_[idx[j]] = val[j];
    if (next != nullptr) {
      for (int j = 0; j < k; ++j) __builtin_prefetch(&arr_[next[j]], 1);
    }
    std::atomic_signal_fence(std::memory_order_seq_cst);  // keep the stores
    return true;
  }

 private:
  std::vector<uint64_t> arr_;
};

// ---- driver ---------------------------------------------------------------------------------

void Usage() {
  std::fprintf(
      stderr,
      "usage: pmrt-txbench --system pmrt|pmdk|undo|plain|floor --words K --dist uniform|zipf "
      "--array N --threads T [--seconds S] [--warmup S] [--json] [--dir DIR] "
      "[--budget-mb M] [--block-kb B] [--backend pmem|eadr|msync] [--seed N] [--prewarm] "
      "[--no-fast-lines] "
      "[--draws D] [--prefetch] [--hot-ms MS]\n");
  std::exit(2);
}

Args Parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    auto val = [&]() -> std::string {
      if (i + 1 >= argc) Usage();
      return argv[++i];
    };
    if (k == "--system")
      a.system = val();
    else if (k == "--words")
      a.words = std::atoi(val().c_str());
    else if (k == "--dist")
      a.dist = val();
    else if (k == "--array")
      a.array = std::strtoull(val().c_str(), nullptr, 10);
    else if (k == "--threads")
      a.threads = std::atoi(val().c_str());
    else if (k == "--seconds")
      a.seconds = std::atof(val().c_str());
    else if (k == "--warmup")
      a.warmup = std::atof(val().c_str());
    else if (k == "--json")
      a.json = true;
    else if (k == "--dir")
      a.dir = val();
    else if (k == "--budget-mb")
      a.budget_mb = std::strtoull(val().c_str(), nullptr, 10);
    else if (k == "--block-kb")
      a.block_kb = std::strtoull(val().c_str(), nullptr, 10);
    else if (k == "--backend")
      a.backend = val();
    else if (k == "--seed")
      a.seed = std::strtoull(val().c_str(), nullptr, 10);
    else if (k == "--prewarm")
      a.prewarm = true;
    else if (k == "--prefetch")
      a.prefetch = true;
    else if (k == "--no-fast-lines")
      a.fast_lines = false;
    else if (k == "--draws")
      a.draws = std::strtoull(val().c_str(), nullptr, 10);
    else if (k == "--hot-ms")
      a.hot_ms = std::atof(val().c_str());
    else
      Usage();
  }
  if (a.words < 1 || a.words > 1024 || a.threads < 1 ||
      a.array < static_cast<uint64_t>(a.threads) || (a.dist != "uniform" && a.dist != "zipf") ||
      (a.system != "pmrt" && a.system != "pmdk" && a.system != "undo" && a.system != "plain" &&
       a.system != "floor") ||
      (a.prefetch && a.draws == 0) || !(a.hot_ms > 0)) {
    Usage();
  }
  return a;
}

}  // namespace

int main(int argc, char** argv) {
  if (std::getenv("PMEM_IS_PMEM_FORCE") == nullptr) setenv("PMEM_IS_PMEM_FORCE", "1", 1);
  const Args a = Parse(argc, argv);
  std::unique_ptr<System> sys;
  PmrtSystem* pmrt_sys = nullptr;
  if (a.system == "pmrt" || a.system == "undo" || a.system == "floor") {
    std::unique_ptr<PmrtSystem> p;
    if (a.system == "pmrt") {
      p = std::make_unique<PmrtModeSystem<PmrtSystem::kSpec>>(a);
    } else if (a.system == "undo") {
      p = std::make_unique<PmrtModeSystem<PmrtSystem::kUndo>>(a);
    } else {
      p = std::make_unique<PmrtModeSystem<PmrtSystem::kFloor>>(a);
    }
    pmrt_sys = p.get();
    sys = std::move(p);
  } else if (a.system == "pmdk") {
    sys = std::make_unique<PmdkSystem>(a);
  } else {
    sys = std::make_unique<PlainSystem>(a);
  }
  if (a.prewarm) sys->Prewarm(a.array);
  const uint64_t slice = a.array / static_cast<uint64_t>(a.threads);
  std::unique_ptr<Zipf> zipf;
  if (a.dist == "zipf") zipf = std::make_unique<Zipf>(slice, 0.99);

  std::atomic<int> phase{0};  // 0 warmup, 1 measure, 2 stop
  std::vector<std::atomic<uint64_t>> counts(a.threads);
  // Draws consumed per thread (published every 64 transactions) and the drawn sequences, for
  // the hot set (HotSeries).
  std::vector<std::atomic<uint64_t>> consumed(a.threads);
  std::vector<std::vector<uint64_t>> drawn_all(a.threads);
  std::vector<double> worker_cpu(a.threads, 0.0);  // thread CPU seconds in the measured interval
  std::atomic<uint64_t> failures{0};
  std::vector<std::thread> workers;
  for (int t = 0; t < a.threads; ++t) {
    workers.emplace_back([&, t] {
      Rng rng(a.seed * 1000003 + static_cast<uint64_t>(t) + 1);
      std::vector<uint64_t> idx(a.words), val(a.words);
      const uint64_t base = slice * static_cast<uint64_t>(t);
      auto draw = [&] { return base + (zipf ? zipf->Next(rng) : rng.Next() % slice); };
      std::vector<uint64_t>& drawn = drawn_all[t];  // drawn before the run (the file comment)
      drawn.resize(a.draws);
      for (uint64_t& d : drawn) d = draw();
      uint64_t used = 0;
      size_t next = 0;
      uint64_t n = 0;
      int seen = 0;
      double cpu_start = 0;
      while (true) {
        const int ph = phase.load(std::memory_order_relaxed);
        if (ph == 2) break;
        if (ph != seen) {  // the measured interval starts: count from here
          seen = ph;
          n = 0;
          cpu_start = ThreadCpuSeconds();
        }
        for (int j = 0; j < a.words; ++j) {
          if (drawn.empty()) {
            idx[j] = draw();
          } else {
            idx[j] = drawn[next];
            if (++next == drawn.size()) next = 0;
          }
          val[j] = rng.Next();
        }
        // --prefetch: the next transaction's indices, where they follow in the drawn sequence.
        const uint64_t* ahead = a.prefetch && next + static_cast<size_t>(a.words) <= drawn.size()
                                    ? &drawn[next]
                                    : nullptr;
        if (!sys->Tx(t, idx.data(), val.data(), a.words, ahead)) {
          failures.fetch_add(1);  // not counted: the rates are of committed transactions
          continue;
        }
        ++n;
        used += static_cast<uint64_t>(a.words);
        if ((n & 63) == 0) {
          counts[t].store(n, std::memory_order_relaxed);
          consumed[t].store(used, std::memory_order_relaxed);
        }
      }
      counts[t].store(n, std::memory_order_relaxed);
      worker_cpu[t] = ThreadCpuSeconds() - cpu_start;
    });
  }
  // Every 10 ms from the warmup's start: the log's bytes and each thread's draws consumed.
  HotSeries series(a);
  auto take = [&](Clock::time_point t0) {
    std::vector<uint64_t> pos(a.threads);
    for (int t = 0; t < a.threads; ++t) pos[t] = consumed[t].load(std::memory_order_relaxed);
    series.Add(std::chrono::duration<double>(Clock::now() - t0).count(), sys->LogBytes(),
               std::move(pos));
  };
  const Clock::time_point warm_end = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                                        std::chrono::duration<double>(a.warmup));
  while (Clock::now() < warm_end) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    take(warm_end);
  }
  if (pmrt_sys != nullptr) pmrt_sys->MarkStart();
  const pmrt::PersistCounts c0 = pmrt::CountersSnapshotAll();
  const double cpu0 = ProcessCpuSeconds();
  const auto t0 = Clock::now();
  phase.store(1);
  while (Clock::now() - t0 < std::chrono::duration<double>(a.seconds)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    sys->Sample();
    take(t0);
  }
  phase.store(2);
  const auto t1 = Clock::now();
  for (auto& w : workers) w.join();
  const double cpu = ProcessCpuSeconds() - cpu0;
  const pmrt::PersistCounts dc = pmrt::CountersSnapshotAll() - c0;
  const double secs = std::chrono::duration<double>(t1 - t0).count();
  uint64_t commits = 0;
  for (auto& c : counts) commits += c.load();
  const double ops = static_cast<double>(commits) / secs;
  const double ops_cpu = cpu > 0 ? static_cast<double>(commits) / cpu * a.threads : 0;
  double wcpu = 0;
  for (double c : worker_cpu) wcpu += c;
  const double ops_wcpu = wcpu > 0 ? static_cast<double>(commits) / wcpu * a.threads : 0;
  std::string fences = "null", lines = "null";
  if (sys->CountsFences() && commits > 0) {
    fences = std::to_string(static_cast<double>(dc.fences) / static_cast<double>(commits));
    lines = std::to_string(static_cast<double>(dc.lines_flushed) / static_cast<double>(commits));
  }
  std::printf(
      "%-5s K=%-2d %-7s N=%lu T=%d: %10.0f tx/s wall, %10.0f per worker-cpu-s, %10.0f per "
      "process-cpu-s; fences/commit %s%s\n",
      a.system.c_str(), a.words, a.dist.c_str(), a.array, a.threads, ops, ops_wcpu, ops_cpu,
      fences.c_str(), failures.load() ? " (failures!)" : "");
  if (a.json) {
    char buf[512];
    std::snprintf(buf, sizeof(buf),
                  "{\"system\": \"%s\", \"words\": %d, \"dist\": \"%s\", \"array\": %lu, "
                  "\"threads\": %d, \"seconds\": %.3f, \"commits\": %lu, \"failures\": %lu, "
                  "\"ops_per_sec\": %.0f, \"ops_per_worker_cpu_sec\": %.0f, "
                  "\"ops_per_cpu_sec\": %.0f, \"worker_cpu_seconds\": %.3f, "
                  "\"process_cpu_seconds\": %.3f, \"fences_per_commit\": %s, "
                  "\"lines_flushed_per_commit\": %s",
                  a.system.c_str(), a.words, a.dist.c_str(), a.array, a.threads, secs, commits,
                  failures.load(), ops, ops_wcpu, ops_cpu, wcpu, cpu, fences.c_str(),
                  lines.c_str());
    std::string json = buf;
    const bool has_log = pmrt_sys != nullptr && pmrt_sys->HasLog();
    sys->Report(json, commits, wcpu);
    if (has_log) json += series.Json(drawn_all);
    json += ", \"steady_after_s\": " + series.SteadyAfter(a.words);
    json += ", \"draws\": " + std::to_string(a.draws);
    json += a.prefetch ? ", \"prefetch\": true" : ", \"prefetch\": false";
    json += a.prewarm ? ", \"prewarm\": true}" : ", \"prewarm\": false}";
    std::printf("%s\n", json.c_str());
  }
  std::fflush(stdout);
  sys.reset();
  return failures.load() == 0 ? 0 : 1;
}
