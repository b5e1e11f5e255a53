// `pmrt demo`: the README's main demonstration (tools/demo.h).
#include "tools/demo.h"

#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "alloc/allocator.h"
#include "epoch/epoch.h"
#include "epoch/persist.h"
#include "epoch/pool.h"
#include "epoch/pptr.h"
#include "epoch/sim.h"
#include "tests/epoch/toy_redo_log.h"

namespace pmrt::tools {
namespace {

constexpr char kDefaultLayout[] = "pmrt";

int Fail(const absl::Status& st) {
  std::fprintf(stderr, "pmrt demo: %s\n", st.ToString().c_str());
  return 1;
}

// The pool's identity and regions, as `pmrt info` prints them.
void PrintHeader(const Pool& pool) {
  const PoolHeader& h = pool.header();
  std::printf("pool            %s\n", pool.path().c_str());
  std::printf("format          %u.%u\n", h.major, h.minor);
  std::printf("layout          %s\n", std::string(pool.layout()).c_str());
  std::printf("size            %lu bytes\n", static_cast<unsigned long>(h.pool_size));
  std::printf("backend         %s\n", std::string(BackendName(pool.persister().kind())).c_str());
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
              toy::BugName(bug), static_cast<unsigned long>(s.images), elapsed, s.images / elapsed,
              (*sim)->failed() ? ("CAUGHT: " + (*sim)->failures()[0].message).c_str()
                               : "all recovered correctly");
}

// A persistent linked list built under the real epoch clock and heap by a child process that
// is SIGKILLed mid-epoch; the parent reopens the pool and checks what survived.
struct DemoNode {
  uint64_t value;
  pptr<DemoNode> next;
};
struct DemoRoot {
  std::atomic<uint64_t> logged_epoch;  // the external log's in-object mark
  pptr<DemoNode> head;
  uint64_t count;
};

struct Opened {
  std::unique_ptr<Pool> pool;
  std::unique_ptr<epoch::Manager> epochs;
  std::unique_ptr<alloc::Heap> heap;
};

absl::StatusOr<Opened> OpenAll(const std::string& path) {
  Opened o;
  auto pool = Pool::Open(path, kDefaultLayout);
  if (!pool.ok()) return pool.status();
  o.pool = std::move(*pool);
  auto epochs = epoch::Manager::Open(*o.pool);
  if (!epochs.ok()) return epochs.status();
  o.epochs = std::move(*epochs);
  auto heap = alloc::Heap::Open(*o.pool, *o.epochs);
  if (!heap.ok()) return heap.status();
  o.heap = std::move(*heap);
  return o;
}

[[noreturn]] void CrashChild(const std::string& path, std::atomic<uint64_t>* synced) {
  auto o = OpenAll(path);
  if (!o.ok()) _exit(2);
  DemoRoot* root = *o->pool->root<DemoRoot>();
  for (uint64_t i = 1;; ++i) {
    {
      epoch::Guard g(*o->epochs);
      DemoNode* n = alloc::pnew<DemoNode>(DemoNode{i, root->head});
      if (n == nullptr) _exit(3);
      // The root changes in place: undo-log it once per epoch before the first change.
      if (!o->epochs->log().Snapshot(root, sizeof(*root), &root->logged_epoch).ok()) _exit(4);
      root->head = pptr<DemoNode>(*o->pool, n);
      root->count = i;
    }
    if (i % 20000 == 0) {
      if (!o->epochs->Sync().ok()) _exit(5);
      synced->store(i);  // everything up to node i is durable
    }
  }
}

void CrashDemo(const std::string& path) {
  std::printf("\n== epochs + heap: a child builds a persistent list, SIGKILLed mid-epoch ==\n");
  auto* synced = static_cast<std::atomic<uint64_t>*>(
      mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0));
  synced->store(0);
  std::fflush(nullptr);
  const pid_t pid = fork();
  if (pid == 0) CrashChild(path, synced);
  std::this_thread::sleep_for(std::chrono::milliseconds(700));
  kill(pid, SIGKILL);
  waitpid(pid, nullptr, 0);
  const uint64_t durable = synced->load();
  const auto start = std::chrono::steady_clock::now();
  auto o = OpenAll(path);
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  if (!o.ok()) return (void)Fail(o.status());
  DemoRoot* root = *o->pool->root<DemoRoot>();
  uint64_t nodes = 0, expect = root->count;
  bool ordered = true;
  for (DemoNode* n = root->head.get(*o->pool); n != nullptr; n = n->next.get(*o->pool)) {
    ordered &= n->value == expect - nodes;
    ++nodes;
  }
  const alloc::HeapStats st = o->heap->Stats();
  std::printf("  killed after 0.7 s; the child had synced %lu nodes\n",
              static_cast<unsigned long>(durable));
  std::printf("  reopened and recovered in %.2f ms (pool, epochs, heap); last shutdown %s\n", ms,
              o->pool->was_clean_shutdown() ? "clean" : "CRASH");
  std::printf("  failed epochs rolled back: %s; list holds %lu nodes (root says %lu), %s\n",
              o->epochs->failed_ranges().empty() ? "none" : "yes",
              static_cast<unsigned long>(nodes), static_cast<unsigned long>(root->count),
              ordered ? "values consecutive" : "VALUES OUT OF ORDER");
  std::printf("  heap: %lu live blocks for %lu nodes (%s), every synced node present: %s\n",
              static_cast<unsigned long>(st.live_blocks), static_cast<unsigned long>(nodes),
              st.live_blocks == nodes ? "no leak" : "MISMATCH",
              nodes >= durable && nodes == root->count ? "yes" : "NO");
}

int Demo(const std::vector<std::string>& args) {
  const std::string path = args.empty() ? "/dev/shm/pmrt-demo.pool" : args[0];
  unlink(path.c_str());
  std::printf("== pmrt demo: pool file %s ==\n\n", path.c_str());
  auto pool = Pool::Create(path, 64 << 20, kDefaultLayout);
  if (!pool.ok()) return Fail(pool.status());
  PrintHeader(**pool);

  std::printf("\n== cost of persisting one cache line (store + flush + fence), measured now ==\n");
  {
    // On a scratch pool beside the demo's: the measurement scribbles over its heap region.
    const std::string scratch_path = path + ".scratch";
    unlink(scratch_path.c_str());
    auto scratch = Pool::Create(scratch_path, 4 << 20, "scratch");
    if (!scratch.ok()) return Fail(scratch.status());
    const int n = 100000;
    std::printf("  pmem  (libpmem clwb/clflushopt + sfence) %8.1f ns\n",
                PersistCost(**scratch, BackendKind::kPmem, n));
    std::printf("  eadr  (sfence only)                      %8.1f ns\n",
                PersistCost(**scratch, BackendKind::kEadr, n));
    std::printf("  msync (msync of the page, tmpfs/disk)    %8.1f ns\n",
                PersistCost(**scratch, BackendKind::kMsync, n / 10));
    unlink(scratch_path.c_str());
  }

  std::printf("\n== crash simulator: every fence is a crash point, every image recovered ==\n");
  SimDemo(2.0, toy::ToyBug::kNone);
  SimDemo(1.0, toy::ToyBug::kMissingFence);
  SimDemo(1.0, toy::ToyBug::kCommitBeforePayloadInLine);

  if (auto st = (*pool)->Close(); !st.ok()) return Fail(st);
  CrashDemo(path);
  return 0;
}

}  // namespace

int DemoMain(const std::vector<std::string>& args) { return Demo(args); }

}  // namespace pmrt::tools
