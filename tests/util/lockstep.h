// Lockstep: real worker threads that run one step at a time, in the order the caller chooses,
// so a multi-threaded workload under the crash simulator is deterministic (a seeded schedule)
// and the simulator never builds an image while another thread is mid-store.
//
//   Lockstep workers(2, [&](int w) { DoOneOperation(w); });
//   for (...) workers.Step(rng() % 2);   // runs one operation on that worker's own thread
#ifndef PMRT_TESTS_UTIL_LOCKSTEP_H_
#define PMRT_TESTS_UTIL_LOCKSTEP_H_

#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace pmrt::testing {

class Lockstep {
 public:
  Lockstep(int threads, std::function<void(int worker)> step) : step_(std::move(step)) {
    for (int t = 0; t < threads; ++t) workers_.emplace_back([this, t] { Loop(t); });
  }
  ~Lockstep() {
    {
      std::lock_guard<std::mutex> l(mu_);
      turn_ = kStop;
    }
    cv_.notify_all();
    for (auto& w : workers_) w.join();
  }
  // Runs one step on `worker` and returns when it is done.
  void Step(int worker) {
    Start(worker);
    Wait();
  }
  // The same in two halves, for a step that blocks until the caller does something (a guard
  // entered while an advance is closing the epoch): Start returns at once, Wait once it is done.
  void Start(int worker) {
    std::lock_guard<std::mutex> l(mu_);
    turn_ = worker;
    cv_.notify_all();
  }
  void Wait() {
    std::unique_lock<std::mutex> l(mu_);
    cv_.wait(l, [&] { return turn_ == kIdle; });
  }

 private:
  static constexpr int kIdle = -1, kStop = -2;
  void Loop(int t) {
    std::unique_lock<std::mutex> l(mu_);
    for (;;) {
      cv_.wait(l, [&] { return turn_ == t || turn_ == kStop; });
      if (turn_ == kStop) return;
      step_(t);
      turn_ = kIdle;
      cv_.notify_all();
    }
  }
  std::function<void(int)> step_;
  std::mutex mu_;
  std::condition_variable cv_;
  int turn_ = kIdle;
  std::vector<std::thread> workers_;
};

}  // namespace pmrt::testing

#endif  // PMRT_TESTS_UTIL_LOCKSTEP_H_
