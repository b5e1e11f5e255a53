// The operator subcommands of the `pmrt` tool that read a pool: info, check and dump
// (docs/tool.md). Each takes the arguments after its name and returns the process's exit status
// (tools/pool_view.h: 0 ok, 1 failed or unhealthy, 2 usage, 3 cannot open); errors are one line
// on stderr naming the file.
//
//   pmrt info POOL [--json] [--layout NAME]
//   pmrt check POOL [--layout NAME]
//   pmrt dump POOL [--limit N] [--from KEY] [--hex | --json] [--layout NAME]
#ifndef PMRT_TOOLS_INSPECT_H_
#define PMRT_TOOLS_INSPECT_H_

#include <string>
#include <vector>

namespace pmrt::tools {

int InfoCommand(const std::vector<std::string>& args);
int CheckCommand(const std::vector<std::string>& args);
int DumpCommand(const std::vector<std::string>& args);

// The usage lines of the three, for the tool's usage message.
extern const char kInspectUsage[];

}  // namespace pmrt::tools

#endif  // PMRT_TOOLS_INSPECT_H_
