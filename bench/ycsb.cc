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
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "tools/ycsb_driver.h"

int main(int argc, char** argv) {
  // --backend pmem on /dev/shm: libpmem must treat the mapping as persistent memory.
  setenv("PMEM_IS_PMEM_FORCE", "1", /*overwrite=*/0);
  auto o = pmrt::ycsb::ParseOptions(std::vector<std::string>(argv + 1, argv + argc));
  if (!o.ok()) {
    std::fprintf(stderr, "pmrt-ycsb: %s\n", std::string(o.status().message()).c_str());
    return 2;
  }
  return pmrt::ycsb::RunYcsb(*o);
}
