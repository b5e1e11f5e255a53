// The background thread (Options::background): it runs a reclamation cycle when the log has
// grown enough since the last one (or writers wait at the budget), gives free log blocks back to
// the heap, runs the idle engine's cycles that empty the log, and is the transactions' watchdog
// (Options::max_open). Committers wake it (Kick) once the log reaches the size at which it would
// run a cycle. Persists nothing itself: the cycle's store order is in reclaim.cc.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <mutex>
#include <thread>
#include <utility>

#include "base/thread_cpu.h"
#include "txn/internal/engine_impl.h"

namespace pmrt::txn {

void Engine::Impl::StartBackground() {
  if (options.background) bg_ = std::thread([this] { BackgroundLoop(); });
}

void Engine::Impl::StopBackground() {
  {
    std::lock_guard<std::mutex> l(bg_mu_);
    bg_stop_ = true;
  }
  bg_cv_.notify_all();
  if (bg_.joinable()) bg_.join();
}

void Engine::Impl::Kick() {
  if (!bg_kick_.exchange(true)) {
    std::lock_guard<std::mutex> l(bg_mu_);  // the waiter tests bg_kick_ under this mutex
    bg_cv_.notify_one();
  }
}

// The background thread runs a cycle once the log has grown by budget / kRegrowthDivisor since
// the last cycle (BackgroundLoop).
constexpr uint64_t kRegrowthDivisor = 8;

std::chrono::nanoseconds Engine::Impl::BackgroundCpu() const { return ThreadCpuTime(bg_); }

void Engine::Impl::BackgroundLoop() {
  uint64_t floor = 0;  // log bytes right after the last cycle: the compacted log and the tails
  // Idleness: no transaction ended for kIdleAfter. An idle engine runs a cycle every
  // kIdleCycleEvery (each advances the epochs, so words age and go cold and the compacted log
  // shrinks) and gives every free block back, until a cycle changes nothing.
  constexpr auto kIdleAfter = std::chrono::milliseconds(500);
  constexpr auto kIdleCycleEvery = std::chrono::milliseconds(250);
  uint64_t seen_activity = ~uint64_t{0};
  auto active_at = std::chrono::steady_clock::now();
  auto idle_cycle_at = active_at;
  int idle_unchanged = 0;  // idle cycles in a row that changed nothing (kIdleCycles: stop)
  constexpr int kIdleCycles = 16;
  auto give_back = [&](uint64_t keep) {
    epoch::Guard g(epochs);
    (void)store.ReturnFree(keep);
  };
  std::unique_lock<std::mutex> l(bg_mu_);
  while (!bg_stop_) {
    bg_cv_.wait_for(l, std::chrono::milliseconds(5), [&] { return bg_stop_ || bg_kick_.load(); });
    if (bg_stop_) break;
    bg_kick_.store(false);
    l.unlock();
    Watchdog();
    // The budget and the committers' trigger in bytes (SetBudget: an automatic budget changes
    // them; the log grows by whole blocks, so `used` reaches the trigger exactly when it reaches
    // reclaim_trigger of the budget).
    const uint64_t log_budget = Budget();
    const uint64_t trigger = trigger_blocks_.load(std::memory_order_relaxed) * store.block_size();
    // Free blocks kept after a cycle: what the log takes until the next one (it runs again once
    // the log has grown by budget / kRegrowthDivisor), twice over. The rest go back to the heap.
    const uint64_t keep_blocks = 2 * (log_budget / kRegrowthDivisor / store.block_size() + 1);
    const uint64_t used = store.blocks_in_use() * store.block_size();
    // Hysteresis: a cycle rewrites the compacted log, so run one only when the log has grown by
    // an eighth of the budget since the last cycle left it (or is over the budget: writers
    // wait). Not more: the log also grows while a cycle runs, and a cycle started later left
    // writers waiting at the budget (docs/txn.md, "Design notes", "The reclaimer"); each cycle
    // then folds fewer records, so the reclaimer works more.
    // Writers wait from stall_blocks_ on (budget / block size, rounded down): a log there runs
    // a cycle even when a budget that is not a whole number of blocks is not reached yet.
    const bool writers_wait =
        store.blocks_in_use() >= stall_blocks_.load(std::memory_order_relaxed);
    if (used >= trigger &&
        (used >= floor + log_budget / kRegrowthDivisor || used >= log_budget || writers_wait)) {
      absl::Status st = Reclaim(/*advance=*/true);
      if (!st.ok()) {
        std::fprintf(stderr, "pmrt txn: reclamation failed: %s\n", st.ToString().c_str());
      }
      {
        std::lock_guard<std::mutex> el(reclaim_error_mu_);
        reclaim_error_ = std::move(st);
      }
      floor = store.blocks_in_use() * store.block_size();
      give_back(keep_blocks);
    } else if (used < floor) {
      floor = used;
    }
    // An idle engine: its log shrinks to what its hot words need, all of it back in the heap.
    const auto now = std::chrono::steady_clock::now();
    uint64_t activity = 0;
    threads_.ForEach([&](const txn_internal::ThreadTx& t) {
      activity += t.commits.Get() + t.one_commits.Get() + t.aborts.Get() + t.seq.load();
    });
    if (activity != seen_activity) {
      seen_activity = activity;
      active_at = now;
      idle_unchanged = 0;
    } else if (idle_unchanged < kIdleCycles && now - active_at >= kIdleAfter &&
               now - idle_cycle_at >= kIdleCycleEvery) {
      idle_cycle_at = now;
      const uint64_t owned_before = store.blocks_owned();
      const uint64_t in_use_before = store.blocks_in_use();
      if (Reclaim(/*advance=*/true, /*idle=*/true).ok()) give_back(0);
      floor = store.blocks_in_use() * store.block_size();
      const bool unchanged =
          store.blocks_owned() == owned_before && store.blocks_in_use() >= in_use_before;
      idle_unchanged = unchanged ? idle_unchanged + 1 : 0;
    }
    // Committers kick only once the log reaches the size at which the test above runs a cycle.
    const uint64_t next =
        std::min(std::max(trigger, floor + log_budget / kRegrowthDivisor), log_budget);
    kick_blocks_.store((next + store.block_size() - 1) / store.block_size(),
                       std::memory_order_relaxed);
    l.lock();
  }
}

void Engine::Impl::Watchdog() {
  const int64_t now = std::chrono::duration_cast<std::chrono::nanoseconds>(
                          std::chrono::steady_clock::now().time_since_epoch())
                          .count();
  const int64_t limit =
      std::chrono::duration_cast<std::chrono::nanoseconds>(options.max_open).count();
  threads_.ForEach([&](txn_internal::ThreadTx& t) {
    const uint64_t open = t.seq.load(std::memory_order_relaxed);
    if ((open & 1) == 0) return;  // no transaction open
    if (open != t.watch_seq) {    // a new one: start its clock
      t.watch_seq = open;
      t.watch_since = now;
      return;
    }
    if (t.watch_since == 0 || now - t.watch_since <= limit) return;
    t.watch_since = 0;  // reported
    t.expired_seq.store(open, std::memory_order_relaxed);
    t.hot.words.store(0, std::memory_order_relaxed);  // its next add takes the general path
    // (Not t.slot: the owner writes it without synchronization with this thread.)
    std::fprintf(stderr,
                 "pmrt txn: a transaction has been open for more than %lld ms (max_open); it "
                 "holds back the epoch boundary and will fail with kDeadlineExceeded at its "
                 "next call\n",
                 static_cast<long long>(options.max_open.count()));
  });
}

}  // namespace pmrt::txn
