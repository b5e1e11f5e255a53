// `pmrt bench`: the YCSB driver of tools/ycsb_driver.h (the code of `pmrt-ycsb`, same options and
// --json output) with a progress line: rewritten in place on a terminal, a plain line every
// second otherwise (docs/tool.md).
#ifndef PMRT_TOOLS_BENCH_CMD_H_
#define PMRT_TOOLS_BENCH_CMD_H_

#include <string>
#include <vector>

namespace pmrt::tools {

// Runs the benchmark; the arguments after "bench". Returns the exit status (0, 2 for usage or
// a failed run).
int BenchCommand(const std::vector<std::string>& args);

extern const char kBenchUsage[];

}  // namespace pmrt::tools

#endif  // PMRT_TOOLS_BENCH_CMD_H_
