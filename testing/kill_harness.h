// Process-kill testing: the real file/mmap/open/recover path, under SIGKILL at random moments.
//
//   KillLoopOptions o{.kills = 200, .seed = 1, .max_delay_us = 20000};
//   auto st = RunKillLoop(o,
//       [&](int iter, KillProgress& progress) {       // in a forked child, killed mid-work
//         auto pool = Pool::Open(path, "app"); ...
//         for (;;) { DoOneOperation(); progress.acked.store(++n); }
//       },
//       [&](int iter, const KillProgress& progress) {  // in the parent, after the kill
//         auto pool = Pool::Open(path, "app");           // real open + recovery
//         return CheckAgainstModel(*pool, progress.acked.load());
//       });
//
// A kill leaves the page cache holding every store the child made, flushed or not: it models
// an eADR platform (or "everything evicted"), so it proves program-order atomicity and the real
// open path, never flush/fence placement. That is the crash simulator's job (testing/sim.h).
//
// KillProgress lives in a shared anonymous mapping, so the parent reads exactly what the child
// acknowledged before it died, without files or fsync.
#ifndef PMRT_TESTING_KILL_HARNESS_H_
#define PMRT_TESTING_KILL_HARNESS_H_

#include <atomic>
#include <cstdint>
#include <functional>

#include "absl/status/status.h"

namespace pmrt {

struct KillProgress {
  std::atomic<uint64_t> acked{0};    // operations whose durability the child acknowledged
  std::atomic<uint64_t> started{0};  // operations begun (acked or in flight)
  std::atomic<uint64_t> ready{0};    // set by the child once it has opened its pool
  std::atomic<uint64_t> user[13];    // free for the test
};

struct KillLoopOptions {
  int kills = 100;
  uint64_t seed = 1;
  // The child is killed a uniformly random time in [0, max_delay_us] after it reports ready
  // (or after it starts, when wait_ready is false).
  uint64_t max_delay_us = 20000;
  bool wait_ready = true;
  // With wait_ready false: every ready_every-th kill (iterations ready_every - 1,
  // 2 * ready_every - 1, ...) still waits for the child to be ready first, so that the children
  // reach their workload and acknowledge work even where starting one takes longer than
  // max_delay_us (a loaded machine, a sanitizer build: there every kill timed from the fork
  // fell in the child's start). 0: never. Those kills come a random time in
  // [0, ready_max_delay_us] after the child is ready (0: max_delay_us).
  int ready_every = 0;
  uint64_t ready_max_delay_us = 0;
  // Aimed kills: every aim_every-th kill (iterations 0, aim_every, 2 * aim_every, ...; 0: none)
  // waits, spinning, until the child has stored at least aim_value in progress.user[aim_slot]
  // (a phase it reports before a step the test wants killed, or an event it counts), after the
  // child is ready when wait_ready, then comes a random time in [0, aim_max_delay_us] after. A
  // timed kill from the fork lands in a short step only by chance, and how often depends on the
  // machine; an aimed one lands there or just after.
  int aim_every = 0;
  int aim_slot = 0;
  uint64_t aim_value = 0;
  uint64_t aim_max_delay_us = 0;
};

// Runs `child` in a forked process `kills` times, SIGKILLs it at a random moment, then runs
// `verify` in this process. Returns the first verification error, annotated with the iteration
// and the delay, or an error if a child exited on its own (it must run until killed).
absl::Status RunKillLoop(
    const KillLoopOptions& options,
    const std::function<void(int iteration, KillProgress& progress)>& child,
    const std::function<absl::Status(int iteration, const KillProgress& progress)>& verify);

}  // namespace pmrt

#endif  // PMRT_TESTING_KILL_HARNESS_H_
