// pmrt: the command-line tool.
//
//   pmrt create POOL --size BYTES [--layout NAME] [--sparse]   create a pool file
//   pmrt info POOL [--json] [--layout NAME]          header, epochs, log, heap, tree (inspect.h)
//   pmrt check POOL [--layout NAME]                  deep check: healthy (0) or not (1)
//   pmrt grow POOL SIZE|+BYTES [--layout NAME]       grow the pool (and its heap) in place
//   pmrt dump POOL [--limit N] [--from KEY] [--hex | --json]   keys and values in order
//   pmrt bench [YCSB options] [--json FILE]          the YCSB driver (tools/bench_cmd.h)
//   pmrt demo [POOL]                                 the README's demo (tools/demo.h)
//   pmrt serve POOL [options]                        the RESP2 server (tools/server/serve_main.h)
//
// docs/tool.md describes each. Errors print one line naming the file and the problem, and exit
// with status 1 (2 for usage; 3 when info, check or dump cannot open the pool).
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "epoch/persist.h"
#include "epoch/pool.h"
#include "tools/bench_cmd.h"
#include "tools/bytes_format.h"
#include "tools/demo.h"
#include "tools/inspect.h"
#include "tools/server/serve_main.h"

namespace pmrt {
namespace {

constexpr char kDefaultLayout[] = "pmrt";

int Usage() {
  std::fprintf(stderr,
               "usage: pmrt create POOL --size BYTES [--layout NAME] [--sparse]\n"
               "%s"
               "%s"
               "       pmrt demo [POOL] [--keys N] [--seconds S] [--threads T] [--crash-after S]\n"
               "       pmrt serve POOL [--port P] [--bind ADDR] [--create-size BYTES] (--help)\n",
               tools::kInspectUsage, tools::kBenchUsage);
  return 2;
}

int Fail(const absl::Status& st) {
  std::fprintf(stderr, "pmrt: %s\n", st.ToString().c_str());
  return 1;
}

// Parses "--name value" flags after the positional arguments.
std::string Flag(const std::vector<std::string>& args, const std::string& name,
                 const std::string& fallback) {
  for (size_t i = 0; i + 1 < args.size(); ++i)
    if (args[i] == name) return args[i + 1];
  return fallback;
}

bool ParseSize(const std::string& text, size_t* out) {
  const std::optional<uint64_t> v = tools::ParseByteCount(text);
  if (v) *out = *v;
  return v.has_value();
}

void PrintInfo(const Pool& pool) {
  const PoolHeader& h = pool.header();
  std::printf("pool            %s\n", pool.path().c_str());
  std::printf("format          %u.%u\n", h.major, h.minor);
  std::printf("layout          %s\n", std::string(pool.layout()).c_str());
  std::printf("size            %lu bytes\n", static_cast<unsigned long>(pool.size()));
  std::printf("uuid            ");
  for (uint8_t b : h.uuid) std::printf("%02x", b);
  std::printf("\nbackend         %s (records: %s)\n",
              std::string(BackendName(pool.persister().kind())).c_str(),
              std::string(RecordWritesName(pool.persister().record_writes())).c_str());
  std::printf("last shutdown   %s\n", pool.was_clean_shutdown() ? "clean" : "CRASH (recovered)");
  std::printf("opens           %lu\n", static_cast<unsigned long>(pool.open_count()));
  const char* names[] = {"root", "epoch", "log", "heap"};
  for (int r = 0; r < 4; ++r) {
    RegionDesc d = pool.region(static_cast<PoolRegion>(r));
    std::printf("region %-8s offset %10lu  size %10lu\n", names[r],
                static_cast<unsigned long>(d.offset), static_cast<unsigned long>(d.size));
  }
}

int Create(const std::vector<std::string>& args) {
  if (args.empty()) return Usage();
  size_t size = 0;
  if (!ParseSize(Flag(args, "--size", ""), &size)) return Usage();
  PoolOptions options;
  // A sparse file takes disk space as the pool is used (PoolOptions::sparse).
  options.sparse = std::find(args.begin(), args.end(), "--sparse") != args.end();
  auto pool = Pool::Create(args[0], size, Flag(args, "--layout", kDefaultLayout), options);
  if (!pool.ok()) return Fail(pool.status());
  PrintInfo(**pool);
  return 0;
}

}  // namespace
}  // namespace pmrt

int main(int argc, char** argv) {
  if (argc < 2) return pmrt::Usage();
  std::string cmd = argv[1];
  std::vector<std::string> args(argv + 2, argv + argc);
  if (cmd == "create") return pmrt::Create(args);
  if (cmd == "info") return pmrt::tools::InfoCommand(args);
  if (cmd == "check") return pmrt::tools::CheckCommand(args);
  if (cmd == "dump") return pmrt::tools::DumpCommand(args);
  if (cmd == "grow") return pmrt::tools::GrowCommand(args);
  if (cmd == "repair") return pmrt::tools::RepairCommand(args);
  if (cmd == "bench") return pmrt::tools::BenchCommand(args);
  if (cmd == "demo") return pmrt::tools::DemoMain(args);
  if (cmd == "serve") return pmrt::tools::ServeMain(args);
  return pmrt::Usage();
}
