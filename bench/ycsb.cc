// pmrt-ycsb: YCSB workloads on the Masstree, the durable tree against the same tree with
// durability compiled out (docs/performance.md, "Masstree"; DESIGN.md section 6). The driver,
// its options and its output are described in tools/ycsb_driver.h; `pmrt bench` runs the same
// driver with a progress line.
//
//   pmrt-ycsb --workload a|b|c|e[,...] --dist uniform|zipf --keys N --ops N --threads T
//             --variant durable|transient|both [--backend pmem|msync|eadr] [--json FILE]
//             [--pool PATH] [--epoch-ms N] [--seed N] [--keep-pool] [--rounds R] [--seconds S]
//   pmrt-ycsb --recovery --keys N [--threads T] [--repeat K] [--backend ...] [--json FILE]
//             [--pool-size BYTES]
//   pmrt-ycsb --help
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "tools/ycsb_driver.h"

int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--help" || a == "-h") {
      std::printf(
          "pmrt-ycsb: YCSB workloads on the durable Masstree and its transient twin\n\n"
          "  pmrt-ycsb [options]              run the workloads\n"
          "  pmrt-ycsb --recovery [options]   time the recovery after a SIGKILL\n\n"
          "Options:\n%s\n"
          "Output: a line per run (and a JSON object with --json): throughput, latency, and for\n"
          "the durable tree the epochs' boundary time (boundary_share_pct: the share of an\n"
          "epoch of --epoch-ms spent at its boundary), lines written back and fences per op.\n",
          pmrt::ycsb::kOptionsHelp);
      return 0;
    }
  }
  // --backend pmem on /dev/shm: libpmem must treat the mapping as persistent memory.
  setenv("PMEM_IS_PMEM_FORCE", "1", /*overwrite=*/0);
  auto o = pmrt::ycsb::ParseOptions(std::vector<std::string>(argv + 1, argv + argc));
  if (!o.ok()) {
    std::fprintf(stderr, "pmrt-ycsb: %s\n", std::string(o.status().message()).c_str());
    return 2;
  }
  return pmrt::ycsb::RunYcsb(*o);
}
