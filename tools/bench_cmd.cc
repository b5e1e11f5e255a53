#include "tools/bench_cmd.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>

#include "tools/ycsb_driver.h"

namespace pmrt::tools {

const char kBenchUsage[] =
    "       pmrt bench [--workload a|b|c|e] [--dist uniform|zipf] [--keys N] [--ops N | --seconds "
    "S]\n"
    "                  [--threads T] [--variant durable|transient|both] [--backend B] [--pool "
    "PATH]\n"
    "                  [--json FILE] ...   (pmrt bench --help lists every option)\n";

int BenchCommand(const std::vector<std::string>& args) {
  for (const std::string& a : args) {
    if (a == "--help" || a == "-h") {
      std::printf("usage: pmrt bench [options]: YCSB on the durable (and transient) Masstree\n%s",
                  ycsb::kOptionsHelp);
      return 0;
    }
  }
  auto o = ycsb::ParseOptions(args);
  if (!o.ok()) {
    std::fprintf(stderr, "pmrt bench: %s\nusage:\n%s", std::string(o.status().message()).c_str(),
                 kBenchUsage);
    return 2;
  }
  // The driver replaces the file at --pool with its own pool: never someone's data.
  struct stat sb;
  if (stat(o->pool.c_str(), &sb) == 0) {
    std::fprintf(stderr,
                 "pmrt bench: %s: file exists; bench creates (and replaces) its own pool there, "
                 "so remove it or choose another --pool\n",
                 o->pool.c_str());
    return 1;
  }
  // --backend pmem (the default) on /dev/shm: libpmem must treat the mapping as persistent
  // memory, as pmrt-ycsb does. Only this process's environment changes.
  setenv("PMEM_IS_PMEM_FORCE", "1", /*overwrite=*/0);
  o->program = "pmrt bench";
  o->progress = isatty(STDOUT_FILENO) ? ycsb::ProgressMode::kTerminal : ycsb::ProgressMode::kLines;
  return ycsb::RunYcsb(*o);
}

}  // namespace pmrt::tools
