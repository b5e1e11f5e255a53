// The operator subcommands of the `pmrt` tool that open a pool: info, check, dump and grow
// (docs/tool.md). Each takes the arguments after its name and returns the process's exit status
// (tools/pool_view.h: 0 ok, 1 failed or unhealthy, 2 usage, 3 cannot open); errors are one line
// on stderr naming the file.
//
//   pmrt info POOL [--json] [--layout NAME]
//   pmrt check POOL [--layout NAME]
//   pmrt dump POOL [--limit N] [--from KEY] [--hex | --json] [--layout NAME]
//   pmrt grow POOL SIZE|+BYTES [--layout NAME]
#ifndef PMRT_TOOLS_INSPECT_H_
#define PMRT_TOOLS_INSPECT_H_

#include <string>
#include <vector>

namespace pmrt::tools {

int InfoCommand(const std::vector<std::string>& args);
int CheckCommand(const std::vector<std::string>& args);
int DumpCommand(const std::vector<std::string>& args);
// pmrt grow POOL SIZE|+BYTES [--layout NAME]: grows the pool to SIZE bytes (or by BYTES) through
// its heap (Pool::Grow), after the ordinary open (and recovery); prints the old and new sizes.
int GrowCommand(const std::vector<std::string>& args);
// pmrt repair POOL: opens a key-value pool (its recovery may use the failed-epoch set's reserved
// last slot), recovers every tree node and heap line that still names a failed epoch, makes it
// durable, then empties the failed-epoch set (epoch::Manager::ClearFailedEpochs).
int RepairCommand(const std::vector<std::string>& args);

// The usage lines of these, for the tool's usage message.
extern const char kInspectUsage[];

}  // namespace pmrt::tools

#endif  // PMRT_TOOLS_INSPECT_H_
