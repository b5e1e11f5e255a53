// `pmrt demo`: the README's main demonstration (what `./run.sh` runs).
//
//   pmrt demo [POOL]
//
// Creates POOL fresh (default /dev/shm/pmrt-demo.pool), and prints, as it goes, everything it
// measures. See tools/demo.cc for the stages.
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
