// `pmrt demo`: the README's main demonstration (what `./run.sh` runs).
//
//   pmrt demo [POOL] [--keys N] [--seconds S] [--threads T] [--crash-after S]
//
// Creates POOL fresh (default /dev/shm/pmrt-demo.pool), loads a durable Masstree, compares it
// with the transient tree on YCSB A, crashes a writing child with SIGKILL and verifies every
// key after reopening, and prints everything it measures as it goes. The stages are listed at
// the top of tools/demo.cc; the crash oracle at the top of tools/demo_crash.cc.
#ifndef PMRT_TOOLS_DEMO_H_
#define PMRT_TOOLS_DEMO_H_

#include <string>
#include <vector>

namespace pmrt::tools {

// Runs the demo with the arguments after "demo". Returns the process exit status: 0 when every
// check passed, 1 on an error or a failed check, 2 for bad usage.
int DemoMain(const std::vector<std::string>& args);

}  // namespace pmrt::tools

#endif  // PMRT_TOOLS_DEMO_H_
