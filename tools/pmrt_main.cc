// pmrt: the command-line tool.
//
//   pmrt create POOL --size BYTES [--layout NAME]   create a pool file
//   pmrt info POOL [--layout NAME]                   print the header and state of a pool
//   pmrt demo [POOL]                                 the README's demo of what pmrt does today
//
// Errors print one line naming the file and the problem, and exit with status 1 (2 for usage).
#include <libpmem.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "epoch/persist.h"
#include "epoch/pool.h"
#include "epoch/sim.h"
#include "tests/epoch/toy_redo_log.h"

namespace pmrt {
namespace {

constexpr char kDefaultLayout[] = "pmrt";

int Usage() {
  std::fprintf(stderr,
               "usage: pmrt create POOL --size BYTES [--layout NAME]\n"
               "       pmrt info POOL [--layout NAME]\n"
               "       pmrt demo [POOL]\n");
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
  uint64_t mult = 1;
  std::string num = text;
  if (!num.empty()) {
    switch (num.back()) {
      case 'K': case 'k': mult = 1ull << 10; num.pop_back(); break;
      case 'M': case 'm': mult = 1ull << 20; num.pop_back(); break;
      case 'G': case 'g': mult = 1ull << 30; num.pop_back(); break;
    }
  }
  uint64_t v;
  if (!absl::SimpleAtoi(num, &v)) return false;
  *out = v * mult;
  return true;
}

void PrintInfo(const Pool& pool) {
  const PoolHeader& h = pool.header();
  std::printf("pool            %s\n", pool.path().c_str());
  std::printf("format          %u.%u\n", h.major, h.minor);
  std::printf("layout          %s\n", std::string(pool.layout()).c_str());
  std::printf("size            %lu bytes\n", static_cast<unsigned long>(h.pool_size));
  std::printf("uuid            ");
  for (uint8_t b : h.uuid) std::printf("%02x", b);
  std::printf("\nbackend         %s\n", std::string(BackendName(pool.persister().kind())).c_str());
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
  auto pool = Pool::Create(args[0], size, Flag(args, "--layout", kDefaultLayout));
  if (!pool.ok()) return Fail(pool.status());
  PrintInfo(**pool);
  return 0;
}

int Info(const std::vector<std::string>& args) {
  if (args.empty()) return Usage();
  auto pool = Pool::Open(args[0], Flag(args, "--layout", kDefaultLayout));
  if (!pool.ok()) return Fail(pool.status());
  PrintInfo(**pool);
  return 0;
}

constexpr Site kDemoFlush{"demo.flush"};
constexpr Site kDemoFence{"demo.fence"};

// Average ns for one "store a line, flush it, fence" on the given backend.
double PersistCost(const Pool& pool, BackendKind kind, int iterations) {
  Persister p(kind, nullptr);
  auto* line = static_cast<uint64_t*>(pool.region_base(PoolRegion::kHeap));
  auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < iterations; ++i) {
    line[(i % 64) * 8] = static_cast<uint64_t>(i);
    p.Persist(kDemoFlush, kDemoFence, &line[(i % 64) * 8], 8);
  }
  auto ns = std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - start);
  return ns.count() / iterations;
}

// Runs the crash simulator over the toy redo log for about `seconds`: images per second.
void SimDemo(double seconds, toy::ToyBug bug) {
  Sim::Options o;
  o.seed = 42;
  auto sim = Sim::Create(64 << 20, o);
  if (!sim.ok()) return (void)Fail(sim.status());
  (*sim)->SetCrashPoints(Sim::CrashPoints::kNone);
  PoolOptions po;
  po.backend = BackendKind::kSim;
  po.sim = sim->get();
  auto pool = Pool::CreateInMemory((*sim)->working(), 64 << 20, "toy", po, "sim");
  if (!pool.ok()) return (void)Fail(pool.status());
  toy::ToyStore store((*pool)->region_base(PoolRegion::kHeap), (*pool)->persister(), bug);
  toy::Model model;
  (*sim)->SetHandler([&](CrashImage& img) -> absl::Status {
    PoolOptions eadr;
    eadr.backend = BackendKind::kEadr;
    auto p = Pool::OpenInMemory(img.base(), img.size(), "toy", eadr, "image");
    if (!p.ok()) return p.status();
    toy::ToyStore s((*p)->region_base(PoolRegion::kHeap), (*p)->persister(), bug);
    s.Recover();
    return model.Check(s.Read());
  });
  (*sim)->SetCrashPoints(Sim::CrashPoints::kEveryFence);
  uint64_t rng = 7;
  auto start = std::chrono::steady_clock::now();
  double elapsed = 0;
  while (elapsed < seconds && !(*sim)->failed()) {
    auto tx = toy::RandomTx(rng);
    model.Begin(tx);
    uint64_t seq = store.Commit(tx);
    model.End();
    store.Apply(seq);
    elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }
  const auto& s = (*sim)->stats();
  std::printf("  toy redo log, bug %-30s %8lu crash images in %.2f s (%6.0f/s): %s\n",
              toy::BugName(bug), static_cast<unsigned long>(s.images), elapsed,
              s.images / elapsed,
              (*sim)->failed() ? ("CAUGHT: " + (*sim)->failures()[0].message).c_str()
                               : "all recovered correctly");
}

int Demo(const std::vector<std::string>& args) {
  const std::string path = args.empty() ? "/dev/shm/pmrt-demo.pool" : args[0];
  unlink(path.c_str());
  std::printf("== pmrt demo: pool file %s ==\n\n", path.c_str());
  auto pool = Pool::Create(path, 64 << 20, kDefaultLayout);
  if (!pool.ok()) return Fail(pool.status());
  PrintInfo(**pool);

  std::printf("\n== cost of persisting one cache line (store + flush + fence), measured now ==\n");
  const int n = 100000;
  std::printf("  pmem  (libpmem clwb/clflushopt + sfence) %8.1f ns\n",
              PersistCost(**pool, BackendKind::kPmem, n));
  std::printf("  eadr  (sfence only)                      %8.1f ns\n",
              PersistCost(**pool, BackendKind::kEadr, n));
  std::printf("  msync (msync of the page, tmpfs/disk)    %8.1f ns\n",
              PersistCost(**pool, BackendKind::kMsync, n / 10));

  std::printf("\n== crash simulator: every fence is a crash point, every image recovered ==\n");
  SimDemo(2.0, toy::ToyBug::kNone);
  SimDemo(1.0, toy::ToyBug::kMissingFence);
  SimDemo(1.0, toy::ToyBug::kCommitBeforePayloadInLine);

  if (auto st = (*pool)->Close(); !st.ok()) return Fail(st);
  auto again = Pool::Open(path, kDefaultLayout);
  if (!again.ok()) return Fail(again.status());
  std::printf("\n== reopened: last shutdown %s, opened %lu times ==\n",
              (*again)->was_clean_shutdown() ? "clean" : "crashed",
              static_cast<unsigned long>((*again)->open_count()));
  return 0;
}

}  // namespace
}  // namespace pmrt

int main(int argc, char** argv) {
  if (argc < 2) return pmrt::Usage();
  std::string cmd = argv[1];
  std::vector<std::string> args(argv + 2, argv + argc);
  if (cmd == "create") return pmrt::Create(args);
  if (cmd == "info") return pmrt::Info(args);
  if (cmd == "demo") return pmrt::Demo(args);
  return pmrt::Usage();
}
