#include "testing/kill_harness.h"

#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <new>
#include <random>
#include <thread>

#include "absl/strings/str_cat.h"

namespace pmrt {

absl::Status RunKillLoop(const KillLoopOptions& options,
                         const std::function<void(int, KillProgress&)>& child,
                         const std::function<absl::Status(int, const KillProgress&)>& verify) {
  void* shared = mmap(nullptr, sizeof(KillProgress), PROT_READ | PROT_WRITE,
                      MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (shared == MAP_FAILED) return absl::InternalError("kill loop: mmap of the progress page");
  std::mt19937_64 rng(options.seed);
  absl::Status result = absl::OkStatus();
  for (int i = 0; i < options.kills && result.ok(); ++i) {
    auto* progress = new (shared) KillProgress();
    const bool wait_ready =
        options.wait_ready ||
        (options.ready_every > 0 && i % options.ready_every == options.ready_every - 1);
    const uint64_t bound = !options.wait_ready && wait_ready && options.ready_max_delay_us != 0
                               ? options.ready_max_delay_us
                               : options.max_delay_us;
    const bool aimed = options.aim_every > 0 && i % options.aim_every == 0;
    const uint64_t delay_us = aimed        ? rng() % (options.aim_max_delay_us + 1)
                              : bound == 0 ? 0
                                           : rng() % (bound + 1);
    std::fflush(nullptr);  // nothing buffered may be written twice
    pid_t pid = fork();
    if (pid < 0) {
      result = absl::InternalError("kill loop: fork failed");
      break;
    }
    if (pid == 0) {
      child(i, *progress);
      _exit(3);  // the child must run until killed
    }
    if (wait_ready) {
      // Wait (bounded) for the child to open its pool, so the delay falls in the workload.
      auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
      while (progress->ready.load() == 0 && std::chrono::steady_clock::now() < deadline) {
        int status;
        if (waitpid(pid, &status, WNOHANG) == pid) {
          munmap(shared, sizeof(KillProgress));
          return absl::InternalError(absl::StrCat(
              "kill loop: iteration ", i, ": child exited before it was ready, status ", status));
        }
        std::this_thread::sleep_for(std::chrono::microseconds(50));
      }
    }
    if (aimed) {
      // Spin: the step aimed at may last only tens of microseconds.
      auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
      while (progress->user[options.aim_slot].load() < options.aim_value &&
             std::chrono::steady_clock::now() < deadline) {
        int status;
        if (waitpid(pid, &status, WNOHANG) == pid) {
          munmap(shared, sizeof(KillProgress));
          return absl::InternalError(absl::StrCat(
              "kill loop: iteration ", i, ": child exited before its aimed step, status ", status));
        }
      }
    }
    std::this_thread::sleep_for(std::chrono::microseconds(delay_us));
    kill(pid, SIGKILL);
    int status = 0;
    waitpid(pid, &status, 0);
    if (!WIFSIGNALED(status) || WTERMSIG(status) != SIGKILL) {
      result = absl::InternalError(
          absl::StrCat("kill loop: iteration ", i, ": child ended on its own, status ", status));
      break;
    }
    absl::Status st = verify(i, *progress);
    if (!st.ok()) {
      result =
          absl::Status(st.code(), absl::StrCat("kill loop iteration ", i, " (seed ", options.seed,
                                               ", killed after ", delay_us, " us, ",
                                               progress->acked.load(), " acked): ", st.message()));
    }
  }
  munmap(shared, sizeof(KillProgress));
  return result;
}

}  // namespace pmrt
