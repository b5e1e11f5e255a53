// `pmrt serve`: the key-value server's command line (tools/server/server.h does the work).
#ifndef PMRT_TOOLS_SERVER_SERVE_MAIN_H_
#define PMRT_TOOLS_SERVER_SERVE_MAIN_H_

#include <string>
#include <vector>

namespace pmrt::tools {

// Runs `pmrt serve POOL [flags]` (args excludes "serve") until SIGINT or SIGTERM. Returns the
// process exit status: 0 after a clean shutdown, 1 on an error (one line on stderr naming the
// file or address and the problem), 2 on a usage error.
int ServeMain(const std::vector<std::string>& args);

}  // namespace pmrt::tools

#endif  // PMRT_TOOLS_SERVER_SERVE_MAIN_H_
