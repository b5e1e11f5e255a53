// pmrt-space: space efficiency of pmrt's persistent heap against glibc malloc on the same trace
// (docs/performance.md, "Space efficiency").
//
//   pmrt-space [--live-mb L] [--churn N] [--seed S] [--dir DIR] [--json FILE]
//
// The trace (seeded, the same for both): sizes 90% uniform in [16, 1024], 9% log-uniform in
// [1 KiB, 64 KiB], 1% log-uniform in [64 KiB, 1 MiB]. Fill: allocate until the requested bytes
// live reach L MiB (256); churn: N (400,000) times free a random live block and allocate a new
// size; every block is written whole (memset) when allocated. Efficiency = requested bytes live
// at the end / bytes the allocator holds for them:
//   pmrt    the heap's chunks that are not free, x 64 KiB (small-block and extent chunks; the
//           metadata, 1472 bytes per chunk, is reported apart), on a pool file in DIR
//           (/dev/shm) of 4 x L, epochs advanced by the background advancer; after the trace the
//           epochs are synced twice so every free is back.
//   malloc  the process's resident set growth over the trace (VmRSS), in a forked child so that
//           nothing else of this process counts, and glibc's own view (mallinfo2: the arena plus
//           mmapped chunks).
// Each runs once per invocation; the report is one line each and a ratio.
#include <malloc.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "alloc/allocator.h"
#include "epoch/epoch.h"
#include "epoch/pool.h"

namespace {

struct Args {
  uint64_t live_mb = 256;
  uint64_t churn = 400000;
  uint64_t seed = 42;
  std::string dir = "/dev/shm";
  std::string json;
};

uint64_t Next(uint64_t& s) {
  s ^= s << 13;
  s ^= s >> 7;
  s ^= s << 17;
  return s;
}

size_t DrawSize(uint64_t& rng) {
  const uint64_t r = Next(rng);
  const double u = static_cast<double>(Next(rng) >> 11) / 9007199254740992.0;
  auto log_uniform = [&](double lo, double hi) {
    return static_cast<size_t>(std::exp(std::log(lo) + u * (std::log(hi) - std::log(lo))));
  };
  if (r % 100 < 90) return 16 + (r >> 8) % 1009;
  if (r % 100 < 99) return log_uniform(1024, 65536);
  return log_uniform(65536, 1 << 20);
}

// Runs the trace on alloc/free callbacks; returns the requested bytes live at the end.
template <class Alloc, class Free>
uint64_t RunTrace(const Args& a, Alloc&& alloc, Free&& free_fn) {
  struct Block {
    void* p;
    size_t size;
  };
  std::vector<Block> live;
  uint64_t rng = a.seed * 0x9E3779B97F4A7C15ull | 1;
  uint64_t bytes = 0;
  auto add = [&] {
    const size_t size = DrawSize(rng);
    void* p = alloc(size);
    if (p == nullptr) {
      std::fprintf(stderr, "pmrt-space: allocation of %zu bytes failed\n", size);
      std::exit(1);
    }
    std::memset(p, 0x5A, size);
    live.push_back({p, size});
    bytes += size;
  };
  while (bytes < a.live_mb << 20) add();
  for (uint64_t i = 0; i < a.churn; ++i) {
    const size_t k = Next(rng) % live.size();
    free_fn(live[k].p);
    bytes -= live[k].size;
    live[k] = live.back();
    live.pop_back();
    add();
  }
  return bytes;
}

uint64_t RssBytes() {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::strtoull(line.c_str() + 6, nullptr, 10) << 10;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  setenv("PMEM_IS_PMEM_FORCE", "1", /*overwrite=*/0);
  Args a;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string f = argv[i], v = argv[i + 1];
    bool ok = true;
    if (f == "--live-mb") {
      ok = absl::SimpleAtoi(v, &a.live_mb) && a.live_mb > 0;
    } else if (f == "--churn") {
      ok = absl::SimpleAtoi(v, &a.churn);
    } else if (f == "--seed") {
      ok = absl::SimpleAtoi(v, &a.seed);
    } else if (f == "--dir") {
      a.dir = v;
    } else if (f == "--json") {
      a.json = v;
    } else {
      ok = false;
    }
    if (!ok) {
      std::fprintf(stderr, "pmrt-space: bad flag %s %s\n", f.c_str(), v.c_str());
      return 2;
    }
  }

  // glibc malloc, in a child: its RSS growth and its own accounting, written back over a pipe.
  int fds[2];
  if (pipe(fds) != 0) return 1;
  const pid_t pid = fork();
  if (pid == 0) {
    close(fds[0]);
    const uint64_t rss0 = RssBytes();
    const uint64_t live = RunTrace(
        a, [](size_t n) { return std::malloc(n); }, [](void* p) { std::free(p); });
    const uint64_t rss = RssBytes() - rss0;
    const struct mallinfo2 mi = mallinfo2();
    const uint64_t out[3] = {live, rss, static_cast<uint64_t>(mi.arena + mi.hblkhd)};
    if (write(fds[1], out, sizeof(out)) != sizeof(out)) _exit(1);
    _exit(0);
  }
  close(fds[1]);
  uint64_t m[3] = {0, 0, 0};
  const bool got = read(fds[0], m, sizeof(m)) == sizeof(m);
  int status = 0;
  waitpid(pid, &status, 0);
  if (!got || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    std::fprintf(stderr, "pmrt-space: the malloc run failed\n");
    return 1;
  }

  // pmrt.
  const std::string path = a.dir + "/pmrt-space.pool";
  std::remove(path.c_str());
  uint64_t live = 0, footprint = 0, meta = 0, frag = 0, usable = 0,
           pool_size = 4 * (a.live_mb << 20) + (64 << 20);
  {
    auto pool = pmrt::Pool::Create(path, pool_size, "pmrt-space");
    if (!pool.ok()) {
      std::fprintf(stderr, "pmrt-space: %s\n", pool.status().ToString().c_str());
      return 1;
    }
    auto epochs = pmrt::epoch::Manager::Open(**pool, {});
    if (!epochs.ok()) return 1;
    auto heap = pmrt::alloc::Heap::Open(**pool, **epochs);
    if (!heap.ok()) return 1;
    pmrt::alloc::Heap& h = **heap;
    live = RunTrace(
        a, [&](size_t n) { return h.Allocate(n); }, [&](void* p) { (void)h.FreeUnshared(p); });
    (void)(*epochs)->Sync();
    (void)(*epochs)->Sync();
    const pmrt::alloc::HeapStats st = h.Stats();
    footprint = (st.chunks - st.free_chunks) * 65536;
    frag = st.free_in_small_chunks;
    usable = st.used_bytes;
    meta = (st.chunks - st.free_chunks) * 1472;
  }
  std::remove(path.c_str());

  const double pmrt_eff = static_cast<double>(live) / static_cast<double>(footprint);
  const double rss_eff = static_cast<double>(m[0]) / static_cast<double>(m[1]);
  const double mi_eff = static_cast<double>(m[0]) / static_cast<double>(m[2]);
  std::printf("trace: %lu MiB live, %lu churn operations, seed %lu\n",
              static_cast<unsigned long>(a.live_mb), static_cast<unsigned long>(a.churn),
              static_cast<unsigned long>(a.seed));
  std::printf(
      "pmrt    %.1f MiB live in %.1f MiB of chunks (+%.1f MiB metadata): efficiency %.3f; "
      "blocks' usable bytes %.1f MiB (size rounding %.1f MiB), free inside small-block "
      "chunks %.1f MiB\n",
      live / 1048576.0, footprint / 1048576.0, meta / 1048576.0, pmrt_eff, usable / 1048576.0,
      (usable - live) / 1048576.0, frag / 1048576.0);
  std::printf(
      "malloc  %.1f MiB live, RSS grew %.1f MiB (efficiency %.3f); mallinfo2 %.1f MiB "
      "(efficiency %.3f)\n",
      m[0] / 1048576.0, m[1] / 1048576.0, rss_eff, m[2] / 1048576.0, mi_eff);
  std::printf("pmrt / malloc (RSS): %.3f\n", pmrt_eff / rss_eff);
  if (!a.json.empty()) {
    FILE* j = std::fopen(a.json.c_str(), "a");
    if (j != nullptr) {
      std::fprintf(
          j,
          "{\"bench\": \"space\", \"live_mb\": %lu, \"churn\": %lu, \"seed\": %lu, "
          "\"pmrt_live\": %lu, \"pmrt_chunk_bytes\": %lu, \"pmrt_meta_bytes\": %lu, "
          "\"pmrt_efficiency\": %.4f, \"pmrt_usable_bytes\": %lu, "
          "\"pmrt_free_in_small_chunks\": %lu, \"malloc_live\": %lu, \"malloc_rss_bytes\": %lu, "
          "\"malloc_mallinfo_bytes\": %lu, \"malloc_rss_efficiency\": %.4f, "
          "\"malloc_mallinfo_efficiency\": %.4f}\n",
          static_cast<unsigned long>(a.live_mb), static_cast<unsigned long>(a.churn),
          static_cast<unsigned long>(a.seed), static_cast<unsigned long>(live),
          static_cast<unsigned long>(footprint), static_cast<unsigned long>(meta), pmrt_eff,
          static_cast<unsigned long>(usable), static_cast<unsigned long>(frag),
          static_cast<unsigned long>(m[0]), static_cast<unsigned long>(m[1]),
          static_cast<unsigned long>(m[2]), rss_eff, mi_eff);
      std::fclose(j);
    }
  }
  return 0;
}
