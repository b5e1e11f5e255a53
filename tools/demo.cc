// `pmrt demo`: the README's main demonstration (tools/demo.h). The stages, in order:
//
//   1. create the pool fresh and print what it is;
//   2. load a durable Masstree (the index "demo" of a pmrt::Runtime) with --keys keys, with a
//      progress line;
//   3. YCSB A (50% update, 50% read, Zipfian 0.99) on the durable tree and on the transient tree
//      (ds::Masstree: per-thread node cache, durability compiled out) loaded with the same keys, in
//      alternating chunks so that both meet the same background load; both throughputs and their
//      ratio;
//   4. crash: a child process writes until SIGKILLed, the pool is reopened and every key
//      verified (tools/demo_crash.cc);
//   5. briefly, the cost of persisting a cache line on each backend, and the crash simulator
//      over a small redo-logged protocol with and without planted bugs.
//
// Every number printed is measured by this run.
#include "tools/demo.h"

#include <linux/magic.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "ds/masstree.h"
#include "epoch/persist.h"
#include "epoch/pool.h"
#include "testing/sim.h"
#include "tools/demo_internal.h"
#include "tools/kv_store.h"
#include "tools/toy_redo_log.h"

namespace pmrt::tools {
namespace demo_internal {

// ---- the progress line (declared in demo_internal.h) ----------------------------------------

ProgressLine::ProgressLine(std::string label, uint64_t total, const std::atomic<uint64_t>& done)
    : label_(std::move(label)),
      total_(std::max<uint64_t>(total, 1)),
      done_(done),
      tty_(isatty(STDOUT_FILENO) == 1),
      thread_([this] { Loop(); }) {}

void ProgressLine::Finish() {
  if (stop_.exchange(true)) return;
  thread_.join();
  // On a terminal, clear the line for the caller's summary; plain lines stay as printed.
  if (tty_) std::printf("\r%*s\r", 100, "");
  std::fflush(stdout);
}

void ProgressLine::Loop() {
  const auto period = std::chrono::milliseconds(tty_ ? 100 : 1000);
  auto next = Clock::now() + period;
  while (!stop_.load(std::memory_order_relaxed)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    if (Clock::now() < next) continue;
    next += period;
    Print();
  }
}

void ProgressLine::Print() {
  const uint64_t n = done_.load(std::memory_order_relaxed);
  const double s = MsSince(start_) / 1000;
  std::printf("%s  %-26s %9lu / %lu (%3.0f%%)  %5.1f s  %6.2f M/s   %s", tty_ ? "\r" : "",
              label_.c_str(), static_cast<unsigned long>(n), static_cast<unsigned long>(total_),
              100.0 * static_cast<double>(n) / static_cast<double>(total_), s,
              s > 0 ? static_cast<double>(n) / s / 1e6 : 0.0, tty_ ? "" : "\n");
  std::fflush(stdout);
}

namespace {

// Prints the usage to `out`; returns the exit status for a usage error.
int Usage(FILE* out) {
  std::fprintf(out,
               "usage: pmrt demo [POOL] [--keys N] [--seconds S] [--threads T] [--crash-after S]\n"
               "  POOL            created fresh (default /dev/shm/pmrt-demo.pool; an existing\n"
               "                  pmrt pool there is replaced, any other file is left alone)\n"
               "  --keys N        keys loaded (default 1000000)\n"
               "  --seconds S     YCSB A run time per tree (default 3)\n"
               "  --threads T     loader, YCSB and writer threads (default 2, at most %d)\n"
               "  --crash-after S the crashing child's run time (default min(1.5, S))\n",
               kMaxThreads);
  return 2;
}

int Fail(const absl::Status& st) {
  std::fflush(stdout);
  std::fprintf(stderr, "pmrt demo: %s\n", st.ToString().c_str());
  return 1;
}

// Parses the arguments after "demo"; false on a usage error (printed).
bool ParseOptions(const std::vector<std::string>& args, DemoOptions* o) {
  bool crash_after_set = false;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a.rfind("--", 0) != 0) {
      if (i != 0) return false;
      o->pool = a;
      continue;
    }
    if (i + 1 >= args.size()) return false;
    const std::string& v = args[++i];
    bool ok = true;
    if (a == "--keys") {
      ok = absl::SimpleAtoi(v, &o->keys) && o->keys > 0;
    } else if (a == "--seconds") {
      ok = absl::SimpleAtod(v, &o->seconds) && o->seconds > 0 && o->seconds < 3600;
    } else if (a == "--threads") {
      ok = absl::SimpleAtoi(v, &o->threads) && o->threads >= 1 && o->threads <= kMaxThreads;
    } else if (a == "--crash-after") {
      ok = absl::SimpleAtod(v, &o->crash_after) && o->crash_after > 0 && o->crash_after < 3600;
      crash_after_set = true;
    } else {
      ok = false;
    }
    if (!ok) {
      std::fprintf(stderr, "pmrt demo: bad value '%s' for %s\n", v.c_str(), a.c_str());
      return false;
    }
  }
  if (!crash_after_set) o->crash_after = std::min(1.5, o->seconds);
  return true;
}

// Pool bytes for the demo: room for the keys twice over (the crash stage inserts up to as many
// new keys), ~200 bytes per key (value object, a share of a leaf and of the interiors, values
// replaced but not yet reclaimed), plus 256 MiB for the log area and slack; whole MiB.
size_t PoolSizeFor(uint64_t keys) {
  const size_t want = static_cast<size_t>(keys) * 2 * 200 + (size_t{256} << 20);
  return (want + (size_t{1} << 20) - 1) & ~((size_t{1} << 20) - 1);
}

// Removes a previous demo pool at `path` so that the demo starts fresh; refuses to remove a
// file that does not open as a pmrt pool of the runtime's or the key-value layout.
absl::Status RemoveOldPool(const std::string& path) {
  struct stat sb;
  if (stat(path.c_str(), &sb) != 0) {
    if (errno == ENOENT) return absl::OkStatus();
    return absl::InvalidArgumentError(absl::StrCat(path, ": cannot stat the pool path"));
  }
  {
    // A runtime's pool (what the demo makes), or a key-value pool (what it made before).
    auto old = Pool::Open(path, kRuntimeLayout);
    if (!old.ok()) old = Pool::Open(path, kKvLayout);
    if (!old.ok()) {
      return absl::FailedPreconditionError(
          absl::StrCat(path, " exists and is not a pmrt pool that the demo may replace (",
                       old.status().message(), "); remove it or name another POOL"));
    }
  }
  if (unlink(path.c_str()) != 0) {
    return absl::PermissionDeniedError(absl::StrCat(path, ": cannot remove the old pool"));
  }
  return absl::OkStatus();
}

// On tmpfs (/dev/shm) there is no medium behind the page cache: the demo models persistent
// memory there with the pmem backend (clwb + sfence through libpmem), as the benchmarks do with
// PMEM_IS_PMEM_FORCE=1, unless the environment chooses (PMRT_BACKEND or PMEM_IS_PMEM_FORCE).
// Elsewhere the pool picks its backend as usual. Sets o->backend and o->backend_note.
void ChooseBackend(DemoOptions* o) {
  if (std::getenv("PMRT_BACKEND") != nullptr) {
    o->backend_note = "(from PMRT_BACKEND)";
    return;
  }
  if (std::getenv("PMEM_IS_PMEM_FORCE") != nullptr) {
    o->backend_note = "(PMEM_IS_PMEM_FORCE is set)";
    return;
  }
  const size_t slash = o->pool.rfind('/');
  const std::string dir = slash == std::string::npos ? "." : o->pool.substr(0, slash + 1);
  struct statfs fs;
  if (statfs(dir.c_str(), &fs) != 0 || fs.f_type != TMPFS_MAGIC) return;
  o->backend = BackendKind::kPmem;
  o->backend_note = "(the pool is on tmpfs: persistent memory modelled with clwb + sfence)";
}

// ---- stage 2: load --------------------------------------------------------------------------

// Puts items [0, keys) at version 0 on `threads` threads (item ranges split evenly), counting
// in *done. False if the tree ran out of memory.
template <class Tree>
bool Load(Tree& tree, uint64_t keys, int threads, std::atomic<uint64_t>* done) {
  std::atomic<bool> failed{false};
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      const uint64_t lo = keys * t / threads, hi = keys * (t + 1) / threads;
      uint64_t batch = 0;
      for (uint64_t i = lo; i < hi; ++i) {
        if (tree.put_as(KeyOf(i), ValueOf(i, 0)) == ds::PutResult::kNoMemory) {
          failed.store(true);
          return;
        }
        if (++batch == 4096) {
          done->fetch_add(batch, std::memory_order_relaxed);
          batch = 0;
        }
      }
      done->fetch_add(batch, std::memory_order_relaxed);
    });
  }
  for (auto& w : workers) w.join();
  return !failed.load();
}

// Loads `tree` with a progress line; prints and returns the seconds taken (negative: out of
// memory).
template <class Tree>
double TimedLoad(Tree& tree, const DemoOptions& o, const std::string& label) {
  std::atomic<uint64_t> done{0};
  const auto start = Clock::now();
  bool ok;
  {
    ProgressLine progress(label, o.keys, done);
    ok = Load(tree, o.keys, o.threads, &done);
  }
  const double s = MsSince(start) / 1000;
  if (!ok) return -1;
  std::printf("  %-26s %lu keys in %.2f s: %.2f M keys/s\n", label.c_str(),
              static_cast<unsigned long>(o.keys), s, static_cast<double>(o.keys) / s / 1e6);
  return s;
}

// ---- stage 3: YCSB A ------------------------------------------------------------------------

struct YcsbCount {
  uint64_t ops = 0, misses = 0;
  double seconds = 0;
  double PerSecond() const { return seconds > 0 ? static_cast<double>(ops) / seconds : 0; }
};

// YCSB A for `seconds` on `threads` threads: each operation picks an item (Zipfian), then with
// probability 1/2 replaces its value (a new value object with the same contents, so that every
// key stays at version 0 for the crash stage) and otherwise reads it. Adds to *count.
template <class Tree>
void RunYcsbA(Tree& tree, const ScrambledZipfian& zipf, int threads, double seconds, uint64_t seed,
              YcsbCount* count) {
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> ops{0}, misses{0};
  std::vector<std::thread> workers;
  const auto start = Clock::now();
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      Rng rng{seed * kMaxThreads + static_cast<uint64_t>(t)};
      uint64_t n = 0, miss = 0;
      while (!stop.load(std::memory_order_relaxed)) {
        const uint64_t item = zipf.Next(rng);
        if (rng.Next() & 1) {
          if (tree.put_as(KeyOf(item), ValueOf(item, 0)) != ds::PutResult::kUpdated) ++miss;
        } else if (!tree.template get_as<uint64_t>(KeyOf(item)).has_value()) {
          ++miss;
        }
        ++n;
      }
      ops.fetch_add(n);
      misses.fetch_add(miss);
    });
  }
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
  stop.store(true);
  for (auto& w : workers) w.join();
  count->seconds += MsSince(start) / 1000;
  count->ops += ops.load();
  count->misses += misses.load();
}

// Runs YCSB A on both trees in kRounds alternating chunks (which tree goes first alternates
// too), so that both meet the same background load on a shared machine. Prints the figures;
// an error if any operation missed its key.
absl::Status CompareYcsbA(ds::DurableMasstree& durable, ds::Masstree& transient,
                          const DemoOptions& o) {
  constexpr int kRounds = 6;
  const auto zstart = Clock::now();
  const ScrambledZipfian zipf(o.keys, 0.99);
  std::printf(
      "  Zipfian 0.99 over %lu keys (%.0f ms to set up); %d threads; %d alternating "
      "chunks of %.2f s, %d per tree\n",
      static_cast<unsigned long>(o.keys), MsSince(zstart), o.threads, kRounds,
      o.seconds / (kRounds / 2), kRounds / 2);
  YcsbCount d, t;
  for (int round = 0; round < kRounds; ++round) {
    const double chunk = o.seconds / (kRounds / 2);
    const uint64_t seed = static_cast<uint64_t>(round / 2) + 1;  // same streams on both trees
    if ((round % 2 == 0) == (round / 2 % 2 == 0)) {
      RunYcsbA(durable, zipf, o.threads, chunk, seed, &d);
    } else {
      RunYcsbA(transient, zipf, o.threads, chunk, seed, &t);
    }
  }
  std::printf("  durable   (pool, InCLL + epochs) %8.3f M ops/s  (%lu ops in %.2f s)\n",
              d.PerSecond() / 1e6, static_cast<unsigned long>(d.ops), d.seconds);
  std::printf("  transient (node cache, no log)   %8.3f M ops/s  (%lu ops in %.2f s)\n",
              t.PerSecond() / 1e6, static_cast<unsigned long>(t.ops), t.seconds);
  std::printf("  durable / transient              %8.2f\n",
              t.PerSecond() > 0 ? d.PerSecond() / t.PerSecond() : 0.0);
  if (d.misses + t.misses != 0) {
    return absl::InternalError(absl::StrCat("YCSB A: ", d.misses, " durable and ", t.misses,
                                            " transient operations did not find their key"));
  }
  return absl::OkStatus();
}

// Stages 2 and 3: creates the pool with its tree, loads both trees, compares them, and closes
// the pool cleanly (every key at version 0).
absl::Status LoadAndCompare(const DemoOptions& o) {
  RuntimeOptions ko;
  ko.create_size = PoolSizeFor(o.keys);
  ko.pool.backend = o.backend;
  const auto start = Clock::now();
  auto kv = DemoStore::Open(o.pool, ko);
  if (!kv.ok()) return kv.status();
  const Pool& pool = kv->pool();
  std::printf("pool     %s, %lu MiB, created in %.1f ms\n", pool.path().c_str(),
              static_cast<unsigned long>(pool.size() >> 20), MsSince(start));
  std::printf("backend  %s %s\n", std::string(BackendName(pool.persister().kind())).c_str(),
              o.backend_note.c_str());
  std::printf("epochs   every 64 ms: work is durable once the next epoch has begun\n");
  std::printf("machine  %u CPUs, load average %s\n", std::thread::hardware_concurrency(),
              [] {
                char buf[64] = "?";
                if (FILE* f = std::fopen("/proc/loadavg", "r")) {
                  if (std::fscanf(f, "%63[^ ]", buf) != 1) buf[0] = '?';
                  std::fclose(f);
                }
                return std::string(buf);
              }()
                  .c_str());

  std::printf("\n== load: %lu keys (8-byte scrambled keys, 8-byte values), %d threads ==\n",
              static_cast<unsigned long>(o.keys), o.threads);
  if (TimedLoad(kv->tree(), o, "durable Masstree") < 0) {
    return absl::ResourceExhaustedError(absl::StrCat(o.pool, ": the pool is full during load"));
  }
  const auto sync_start = Clock::now();
  if (auto st = kv->epochs().Sync(); !st.ok()) return st;
  std::printf("  %-26s %.1f ms (everything above is durable now)\n", "Sync", MsSince(sync_start));
  auto transient = std::make_unique<ds::Masstree>();
  if (TimedLoad(*transient, o, "transient Masstree") < 0) {
    return absl::ResourceExhaustedError("transient tree: out of memory during load");
  }

  std::printf("\n== YCSB A: 50%% update / 50%% read, same keys, same threads ==\n");
  if (auto st = CompareYcsbA(kv->tree(), *transient, o); !st.ok()) return st;
  transient.reset();
  return kv->Close();
}

// ---- stage 5: persistence cost and the crash simulator ---------------------------------------

constexpr Site kDemoFlush{"demo.flush"};
constexpr Site kDemoFence{"demo.fence"};

// Average ns for one "store a line, flush it, fence" on the given backend.
double PersistCost(const Pool& pool, BackendKind kind, int iterations) {
  Persister p(kind, nullptr);
  auto* line = static_cast<uint64_t*>(pool.region_base(PoolRegion::kHeap));
  const auto start = Clock::now();
  for (int i = 0; i < iterations; ++i) {
    line[(i % 64) * 8] = static_cast<uint64_t>(i);
    p.Persist(kDemoFlush, kDemoFence, &line[(i % 64) * 8], 8);
  }
  return MsSince(start) * 1e6 / iterations;
}

// Prints the persist cost per backend, measured on a scratch pool beside `path`.
absl::Status PrintPersistCosts(const std::string& path) {
  const std::string scratch_path = path + ".scratch";
  unlink(scratch_path.c_str());
  auto scratch = Pool::Create(scratch_path, 4 << 20, "scratch");
  if (!scratch.ok()) return scratch.status();
  const int n = 100000;
  std::printf("  pmem  (libpmem clwb/clflushopt + sfence) %9.1f ns\n",
              PersistCost(**scratch, BackendKind::kPmem, n));
  std::printf("  eadr  (sfence only)                      %9.1f ns\n",
              PersistCost(**scratch, BackendKind::kEadr, n));
  std::printf("  msync (msync of the page, tmpfs/disk)    %9.1f ns\n",
              PersistCost(**scratch, BackendKind::kMsync, n / 50));
  scratch->reset();
  unlink(scratch_path.c_str());
  return absl::OkStatus();
}

// Runs the crash simulator over the toy redo log (tools/toy_redo_log.h), every fence a
// crash point and every crash image recovered through the real open path; prints images per
// second and whether a failure was caught. OK when the outcome is the expected one (a planted
// bug caught, the correct protocol never failing). The correct protocol runs for `seconds`; a
// planted bug runs until it is caught or kMaxBugImages crash images have passed, whatever the
// time: the workload is seeded, so whether it is caught does not depend on the machine's
// speed (missing-fence is caught at its 2,653rd image, which a loaded machine did not reach in
// the 0.25 s the demo test gives it).
constexpr uint64_t kMaxBugImages = 100000;
absl::Status SimDemo(double seconds, toy::ToyBug bug) {
  Sim::Options so;
  so.seed = 42;
  auto sim = Sim::Create(64 << 20, so);
  if (!sim.ok()) return sim.status();
  (*sim)->SetCrashPoints(Sim::CrashPoints::kNone);
  PoolOptions po;
  po.backend = BackendKind::kSim;
  po.sim = sim->get();
  auto pool = Pool::CreateInMemory((*sim)->working(), 64 << 20, "toy", po, "sim");
  if (!pool.ok()) return pool.status();
  toy::ToyStore store((*pool)->region_base(PoolRegion::kHeap), (*pool)->persister(), bug);
  toy::Model model;
  (*sim)->SetHandler([&](CrashImage& img) -> absl::Status {
    PoolOptions eadr;
    eadr.backend = BackendKind::kEadr;
    auto p = Pool::OpenInMemory(img.base(), img.size(), "toy", eadr, "image");
    if (!p.ok()) return p.status();
    toy::ToyStore s((*p)->region_base(PoolRegion::kHeap), (*p)->persister(), bug);
    s.Recover();
    return model.Check(s.Read());
  });
  (*sim)->SetCrashPoints(Sim::CrashPoints::kEveryFence);
  uint64_t rng = 7;
  const auto start = Clock::now();
  double elapsed = 0;
  const bool planted = bug != toy::ToyBug::kNone;
  while (!(*sim)->failed() &&
         (planted ? (*sim)->stats().images < kMaxBugImages : elapsed < seconds)) {
    auto tx = toy::RandomTx(rng);
    model.Begin(tx);
    const uint64_t seq = store.Commit(tx);
    model.End();
    store.Apply(seq);
    elapsed = MsSince(start) / 1000;
  }
  // No crash points while the pool closes below: the handler's model goes out of scope first.
  (*sim)->SetCrashPoints(Sim::CrashPoints::kNone);
  const auto& s = (*sim)->stats();
  const bool caught = (*sim)->failed();
  std::printf(
      "  bug %-28s %7lu crash images in %.2f s: %s\n", toy::BugName(bug),
      static_cast<unsigned long>(s.images), elapsed,
      caught ? ("CAUGHT: " + (*sim)->failures()[0].message).c_str() : "all recovered correctly");
  if (caught != (bug != toy::ToyBug::kNone)) {
    return absl::InternalError(absl::StrCat(
        "crash simulator, bug ", toy::BugName(bug),
        caught ? ": a failure in the correct protocol" : ": the planted bug was not caught"));
  }
  return absl::OkStatus();
}

absl::Status Extras(const DemoOptions& o) {
  std::printf("\n== cost of persisting one cache line (store + flush + fence), measured now ==\n");
  if (auto st = PrintPersistCosts(o.pool); !st.ok()) return st;
  std::printf("\n== crash simulator: a small redo log, every fence a crash point ==\n");
  const double budget = std::min(1.0, o.seconds / 2);
  for (const toy::ToyBug bug :
       {toy::ToyBug::kNone, toy::ToyBug::kMissingFence, toy::ToyBug::kCommitBeforePayloadInLine}) {
    if (auto st = SimDemo(budget, bug); !st.ok()) return st;
  }
  return absl::OkStatus();
}

// The whole demo (DemoMain).
int Run(const std::vector<std::string>& args) {
  DemoOptions o;
  for (const std::string& a : args) {
    if (a == "--help" || a == "-h") {
      Usage(stdout);
      return 0;
    }
  }
  if (!ParseOptions(args, &o)) return Usage(stderr);
  const auto start = Clock::now();
  std::printf("== pmrt demo ==\n");
  ChooseBackend(&o);
  if (auto st = RemoveOldPool(o.pool); !st.ok()) return Fail(st);
  if (auto st = LoadAndCompare(o); !st.ok()) return Fail(st);
  if (auto st = CrashAndRecover(o); !st.ok()) return Fail(st);
  if (auto st = Extras(o); !st.ok()) return Fail(st);
  std::printf(
      "\ndemo done in %.1f s; the pool stays at %s (inspect it with `pmrt info %s`, "
      "remove it with rm)\n",
      MsSince(start) / 1000, o.pool.c_str(), o.pool.c_str());
  return 0;
}

}  // namespace
}  // namespace demo_internal

int DemoMain(const std::vector<std::string>& args) { return demo_internal::Run(args); }

}  // namespace pmrt::tools
