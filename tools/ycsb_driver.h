// The YCSB driver: YCSB workloads on the Masstree, the durable tree against the same tree with
// durability compiled out (docs/performance.md, "Masstree"; DESIGN.md section 6).
//
// It is the code of both `pmrt-ycsb` (bench/ycsb.cc) and `pmrt bench` (tools/bench_cmd.cc),
// which take the same options:
//
//   --workload a|b|c|e[,...] --dist uniform|zipf --keys N (--ops N | --seconds S) --threads T
//   --variant durable|transient|both [--backend pmem|msync|eadr] [--json FILE]
//   [--pool PATH] [--epoch-ms N] [--seed N] [--keep-pool] [--rounds R]
//   --recovery --keys N [--threads T] [--repeat K] [--backend ...] [--json FILE]
//   [--pool-size BYTES]
//
//   auto o = pmrt::ycsb::ParseOptions({"--workload", "a", "--keys", "1000"});
//   if (o.ok()) return pmrt::ycsb::RunYcsb(*o);     // the process's exit status
//
// Workloads (YCSB core workloads, 8-byte keys and 8-byte values):
//   a  50% update, 50% read            (update = put of an existing key: a new value object)
//   b   5% update, 95% read
//   c  100% read
//   e  100% scan: 10 keys from a random existing key
// --dist: the key chosen for each operation, uniform over the N keys or Zipfian with theta 0.99
// (YCSB's ScrambledZipfian: the popular ranks are hashed over the key space). Key i is the
// 8-byte big-endian U64Key of a bijective 64-bit mix of i, so keys are distinct and scattered.
// The tree is loaded with the N keys first (T threads, in the order of i), untimed; the durable
// tree is then made durable (Sync) before the timed phase. --ops is the total over all threads;
// --seconds S runs each workload for S seconds instead (each thread stops at the deadline).
// A list of workloads (--workload a,b,c,e) runs them one after the other on the same loaded tree
// (each reported on its own), which saves the load of each.
//
// Variants: transient = ds::Masstree (malloc + volatile epoch-based reclamation); durable =
// ds::DurableMasstree in a key-value pool file (layout "pmrt", tools/kv_store.h: with
// --keep-pool, pmrt info, check and dump read it; default /dev/shm/pmrt-ycsb-<pid>.pool, removed
// at the end), the epoch advancing every --epoch-ms (64) in the background. --backend pmem uses
// clwb + sfence through libpmem; on /dev/shm that needs PMEM_IS_PMEM_FORCE=1, which main() sets
// unless the environment sets it. both: one process loads both trees and splits each workload's
// --ops into --rounds (10) chunks, running a transient chunk and a durable chunk in turn
// (alternating which goes first), so both meet the same background load of a shared machine; the
// figures of each variant sum its chunks, and a ratio line follows. The durable tree's epoch
// advances (every --epoch-ms, by a thread of the benchmark, as the Manager's background advancer
// would) run only during its own chunks, so the transient chunks never pay for them.
//
// Output: the configuration and results on one line; throughput (ops per wall second, and ops per
// process-CPU-second times threads: what the run does with one core per thread, which is what
// survives other tenants of a small shared machine; it includes the durable tree's advancer
// thread), p50/p99 latency (sampled: one operation in 8 is timed), and for the durable tree the
// epoch figures of the timed phase (epochs, lines written back and boundary time per epoch, the
// boundary's share of an epoch of --epoch-ms (boundary_share_pct; the design goal is <= 2%),
// external-log entries per epoch, fences per operation). --json FILE appends one JSON object per
// run: run (the process id: --variant both writes both variants' lines under one run), workload,
// dist, variant, threads, keys, ops, ops_per_sec, p50_ns, p99_ns, ops_per_cpu_sec, and the epoch
// figures.
//
// --recovery: the worst case of the paper's section 6.3. A child process opens the loaded pool,
// runs workload A (uniform) on T threads for two epochs (advancing by hand every --epoch-ms),
// then for one more epoch's worth of time, and is SIGKILLed just before that epoch's boundary.
// The parent reopens the pool and times Pool::Open, Manager::Open (which replays the external
// log), Heap::Open, DurableMasstree::Open and the first get; then a full scan (every leaf
// repaired lazily). Repeated --repeat (3) times. --pool-size fixes the pool's size (default: by
// the key count), so that runs with different key counts open pools of the same size: the epoch
// layer's open reads every external-log block header, a cost of the pool's size.
//
// Progress (Options::progress: off in pmrt-ycsb, whose output scripts parse; on in pmrt bench):
// while the tree loads and while each workload runs, the operations done and the throughput of
// the last interval, on stdout: on a terminal one line rewritten in place, otherwise a plain
// line every second. Workers add to a shared counter once per 1024 operations (one relaxed
// add: no measurable cost); the reporter thread only reads it.
#ifndef PMRT_TOOLS_YCSB_DRIVER_H_
#define PMRT_TOOLS_YCSB_DRIVER_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "epoch/persist.h"

namespace pmrt::ycsb {

// How the driver reports progress while it loads and runs.
enum class ProgressMode {
  kNone,
  kTerminal,  // one line on stdout, rewritten in place (\r) a few times a second
  kLines,     // a plain line on stdout every second (for logs and pipes)
};

struct Options {
  char workload = 'a';          // the workload being run (one of `workloads`)
  std::string workloads = "a";  // the workloads to run, in order
  bool zipf = false;
  uint64_t keys = 1000000;
  uint64_t ops = 2000000;  // total over all threads, per workload (unless seconds > 0)
  double seconds = 0;      // > 0: run each workload for this long instead of `ops`
  int threads = 2;
  bool durable = true;
  BackendKind backend = BackendKind::kPmem;
  std::string json;  // append one JSON object per run to this file
  std::string pool;  // default /dev/shm/pmrt-ycsb-<pid>.pool
  int epoch_ms = 64;
  uint64_t seed = 1;
  bool keep_pool = false;
  bool recovery = false;
  bool both = false;
  int repeat = 3;
  int rounds = 10;
  size_t pool_size = 0;         // 0: by the key count
  bool value_checksums = true;  // the durable tree's values carry checksums
  bool per_op_guards = false;   // each operation takes its own guard (no Tree::Batch)
  ProgressMode progress = ProgressMode::kNone;
  std::string program = "pmrt-ycsb";  // prefix of error messages
};

// The option lines of a usage message (each starts with "  --").
extern const char kOptionsHelp[];

// Parses the options above (argv without the program name). kInvalidArgument names the bad
// option.
absl::StatusOr<Options> ParseOptions(const std::vector<std::string>& args);

// Runs the benchmark the options describe, printing results on stdout (and --json). Returns
// the exit status: 0, or 2 after printing "<program>: <error>" on stderr for an error that
// stops the run (a pool that cannot be created, a failed epoch advance).
int RunYcsb(const Options& options);

}  // namespace pmrt::ycsb

#endif  // PMRT_TOOLS_YCSB_DRIVER_H_
