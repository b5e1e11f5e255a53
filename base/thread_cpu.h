// The CPU time a running std::thread has used so far (its POSIX thread CPU clock), for the
// background threads' statistics (the epoch advancer, the transaction reclaimer): what they
// cost beside the work they serve.
#ifndef PMRT_BASE_THREAD_CPU_H_
#define PMRT_BASE_THREAD_CPU_H_

#include <pthread.h>
#include <time.h>

#include <chrono>
#include <thread>

namespace pmrt {

// Zero for a thread that is not running (not joinable) or whose clock cannot be read.
// REQUIRES: `t` is not joined or detached concurrently.
inline std::chrono::nanoseconds ThreadCpuTime(const std::thread& t) {
  if (!t.joinable()) return std::chrono::nanoseconds(0);
  clockid_t id;
  timespec ts{};
  // native_handle() is not const, though it only reads the handle.
  pthread_t handle = const_cast<std::thread&>(t).native_handle();
  if (pthread_getcpuclockid(handle, &id) != 0 || clock_gettime(id, &ts) != 0)
    return std::chrono::nanoseconds(0);
  return std::chrono::seconds(ts.tv_sec) + std::chrono::nanoseconds(ts.tv_nsec);
}

}  // namespace pmrt

#endif  // PMRT_BASE_THREAD_CPU_H_
