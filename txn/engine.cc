// txn::Engine itself: open (recovery, then the thresholds and the background thread), close
// (the write-back of every hot word, then the log's retirement), the statistics and the testing
// hooks; Engine::Impl's construction (the one-declaration commit's path, fixed from the pool's
// persister) and the log's backpressure (SetThresholds: the budget, the stall and trigger sizes;
// WaitForRoom: a begin that waits for the reclaimer, and the failed mode when the log cannot
// drain). The store orders it relies on are argued where the stores are: the close's in close.cc
// (WriteBackForClose, RetireForClose), the open's in recovery.cc.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <optional>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "txn/internal/engine_impl.h"
#include "txn/txn.h"

namespace pmrt::txn {

// ---- Engine ---------------------------------------------------------------------------------

Engine::Engine(Pool& pool, epoch::Manager& epochs, alloc::Heap& heap, Options options)
    : pool_(pool), epochs_(epochs), heap_(heap), options_(options) {}

Engine::~Engine() {
  impl_->StopBackground();
  // A transaction left open by a thread that exited: its in-place values are not committed,
  // so the pool must not be marked clean (the next Open undoes them from the log).
  bool open_tx = false;
  impl_->ForEachThread([&](const ThreadTx& t) { open_tx |= t.depth > 0; });
  // Not after a failed Open (nothing to write back) or after the pool's Close (it stayed
  // unclean).
  if (pool_.base() != nullptr && pool_.txn_engine_open()) {
    impl_->WriteBackForClose();
    // With a transaction left open, its in-place values need the log's snapshots at the next
    // open: the log stays.
    if (!open_tx) {
      (void)impl_->RetireForClose();
      pool_.SetTxnEngineOpen(false);
    }
  }
  Engine* self = this;
  if (txn_internal::g_default.compare_exchange_strong(self, nullptr)) {
    txn_internal::g_prefetch_size.store(0, std::memory_order_relaxed);  // data only from now on
  }
  if (attached_) pool_.DetachLayer(PoolLayer::kTransactions);
}

absl::StatusOr<std::unique_ptr<Engine>> Engine::Open(Pool& pool, epoch::Manager& epochs,
                                                     alloc::Heap& heap, Options options) {
  if (options.reclaim_trigger <= 0 || options.reclaim_trigger > 1) {
    return absl::InvalidArgumentError("txn: reclaim_trigger must be in (0, 1]");
  }
  const bool auto_budget = options.log_budget == 0;
  if (auto_budget) {
    options.log_budget = static_cast<size_t>(
        std::clamp<uint64_t>(heap.capacity() / 16, kAutoLogBudgetMin, kAutoLogBudgetMax));
  }
  if (auto st = pool.AttachLayer(PoolLayer::kTransactions); !st.ok()) return st;
  // The recovery of a crashed pool re-marks the allocations of committed transactions
  // (MarkAllocated): a block the program allocated before could be one of them, and would then
  // be handed out twice.
  if (!pool.was_clean_shutdown() && !pool.acknowledged(Pool::kRecoveredTxn) &&
      pool.state().txn_directory.value.load(std::memory_order_relaxed) != 0 &&
      heap.AllocationsSinceOpen() != 0) {
    pool.DetachLayer(PoolLayer::kTransactions);
    return absl::FailedPreconditionError(absl::StrCat(
        pool.path(), ": txn::Engine::Open after ", heap.AllocationsSinceOpen(),
        " allocation(s) in this run; the pool has a transaction log to recover, which must run "
        "before anything allocates: open the engine right after Heap::Open"));
  }
  std::unique_ptr<Engine> e(new Engine(pool, epochs, heap, options));
  e->attached_ = true;
  e->impl_ = std::make_unique<Impl>(*e);
  e->impl_->auto_budget = auto_budget;
  e->impl_->auto_budget_base = options.log_budget;
  // Every word the pool can grow to in this run: growth never moves the index.
  ASSIGN_OR_RETURN(e->impl_->index, txn_internal::WordIndex::Create(pool.max_size()));
  RETURN_IF_ERROR(e->impl_->Recover());
  e->impl_->SetThresholds();    // the block size is known now
  pool.SetTxnEngineOpen(true);  // until the close's write-back (Pool::Close checks it)
  e->impl_->StartBackground();
  Engine* none = nullptr;
  if (txn_internal::g_default.compare_exchange_strong(none, e.get())) {
    txn_internal::g_prefetch_size.store(0, std::memory_order_relaxed);  // (a racing prefetch)
    txn_internal::g_prefetch_base.store(reinterpret_cast<uintptr_t>(pool.base()),
                                        std::memory_order_relaxed);
    txn_internal::g_prefetch_index.store(reinterpret_cast<uintptr_t>(&e->impl_->index->at(0)),
                                         std::memory_order_relaxed);
    txn_internal::g_prefetch_size.store(pool.max_size(), std::memory_order_relaxed);
  }
  return e;
}

absl::Status Engine::Reclaim(bool advance) {
  if (InTransaction() || impl_->epochs.LocalSlot().depth > 0) {
    return absl::FailedPreconditionError(
        absl::StrCat(pool_.path(),
                     ": txn Reclaim called inside a transaction or while this "
                     "thread holds an epoch guard: its boundary would wait for it "
                     "forever"));
  }
  return impl_->Reclaim(advance);
}

std::vector<uint64_t> Engine::OwnedBlocks() const { return impl_->store.OwnedOffsets(); }

static_assert(txn_internal::kFastLine == WordIndex::kFast && WordIndex::LineOf(8) == 1,
              "txn::add's inline path (txn.h) reads the fast-line map as WordIndex defines it");

bool Engine::IsFastLine(const void* p) const {
  if (!impl_->pool.contains(p, 1)) return false;
  const uint64_t line = WordIndex::LineOf(impl_->pool.offset_of(p) / 8);
  return impl_->index->line(line).load(std::memory_order_relaxed) == WordIndex::kFast;
}

void Engine::SealLogsForTesting() {
  // REQUIRES: no transaction is writing a record (the workers are parked between steps).
  for (uint32_t s = 0; s < txn_internal::kMaxSlots; ++s) impl_->store.Seal(impl_->store.chain(s));
}

uint64_t Engine::GiveBackLogBlocksForTesting(size_t keep) {
  epoch::Guard g(impl_->epochs);
  return impl_->store.ReturnFree(keep);
}

void Engine::FailNextReclaimForTesting() {
  std::lock_guard<std::mutex> l(impl_->reclaim_mu);
  impl_->fail_next_cycle = true;
}

void Engine::SetFoldHookForTesting(std::function<void()> hook) {
  std::lock_guard<std::mutex> l(impl_->reclaim_mu);  // no cycle runs meanwhile
  impl_->fold_hook = std::move(hook);
}

Stats Engine::stats() const {
  Impl& i = *impl_;
  Stats s;
  i.ForEachThread([&](const ThreadTx& t) {
    s.commits += t.commits.Get();
    s.aborts += t.aborts.Get();
    s.snapshots += t.snapshots.Get();
    s.snapshot_words += t.snapshot_words.Get();
    s.record_bytes += t.record_bytes.Get();
    const uint64_t one = t.one_commits.Get();
    s.commits += one;
    s.record_bytes += one * (sizeof(RecordHeader) + 16);
  });
  s.log_bytes = i.store.blocks_in_use() * i.store.block_size();
  s.log_bytes_peak = i.store.blocks_in_use_peak() * i.store.block_size();
  s.log_bytes_owned = i.store.blocks_owned() * i.store.block_size();
  s.cycles = i.cycles.load();
  s.full_cycles = i.full_cycles.load();
  s.stalls = i.stalls.load();
  s.log_budget = i.Budget();
  s.budget_changes = i.budget_changes.load();
  s.words_kept = i.words_kept.load();
  s.words_dropped = i.words_dropped.load();
  s.words_cold = i.words_cold.load();
  s.lines_marked = i.lines_marked.load();
  s.lines_unmarked = i.lines_unmarked.load();
  {
    std::lock_guard<std::mutex> l(i.reclaim_mu);
    s.horizon = i.horizon;
    s.cold_age = i.cold_age;
    s.compact_bytes = i.compact_bytes;
  }
  s.recovered_records = i.recovered_records;
  s.records_read_at_open = i.records_read_at_open;
  s.recovered_words = i.recovered_words;
  s.recovery_time = i.recovery_time;
  s.reclaimer_cpu = i.BackgroundCpu();
  return s;
}

// ---- Impl: construction and the log's backpressure ------------------------------------------

Engine::Impl::Impl(Engine& e)
    : engine(e),
      pool(e.pool_),
      epochs(e.epochs_),
      heap(e.heap_),
      options(e.options_),
      store(e.pool_, e.epochs_, e.heap_) {
  const size_t limit = options.log_limit != 0 ? options.log_limit : 2 * options.log_budget;
  store.set_limit_blocks(std::max<uint64_t>(4, limit / options.block_size));
  touch_slack = static_cast<uint32_t>(std::min(
      {txn_internal::kMaxTouchSlack, options.cold_after_epochs, options.max_cold_after_epochs}));
  cold_age = std::max<uint64_t>(options.cold_after_epochs, touch_slack);
#if defined(__x86_64__)
  const Persister& p = pool.persister();
  one_path_ = p.StreamsRecords(sizeof(RecordHeader) + 16) ? OnePath::kStream
              : p.FlushesInline()                         ? OnePath::kClwb
                                                          : OnePath::kNone;
  sim_seam_ = epoch_internal::SimModelsPmem(p.kind(), p.sim());
  if (sim_seam_)
    one_path_ = one_path_ == OnePath::kStream ? OnePath::kSimStream : OnePath::kSimClwb;
#endif
}

Engine::Impl::~Impl() = default;

void Engine::Impl::SetThresholds() { SetBudget(options.log_budget); }

void Engine::Impl::SetBudget(uint64_t bytes) {
  // The budget is the bound the log keeps under a steady load: above it, new transactions wait
  // for the reclaimer (the records of open ones may still take a block each, and a cycle holds
  // the old and the new compacted log at once until its descriptor switches).
  // A budget the block limit cannot hold is capped at 4/7 of it (64 MiB with 32 KiB blocks):
  // otherwise the logs would reach their limit before the reclaimer's trigger and every record
  // would fail with kResourceExhausted (the rest is for open transactions' records and, during
  // a full cycle, the old and the new compacted log). An automatic budget moves the limit with
  // it (twice the budget, as Options::log_limit's default).
  const uint64_t bs = store.block_size();
  if (auto_budget && options.log_limit == 0) {
    store.set_limit_blocks(std::max<uint64_t>(4, 2 * bytes / bs));
  }
  const uint64_t limit = std::min<uint64_t>(store.limit_blocks(), txn_internal::kTableCapacity);
  const uint64_t b = std::min<uint64_t>(bytes, limit * 4 / 7 * bs);
  budget.store(b, std::memory_order_relaxed);
  stall_blocks_.store(b / bs, std::memory_order_relaxed);
  begin_stall_blocks_.store(options.background ? b / bs : ~uint64_t{0}, std::memory_order_relaxed);
  // Committers wake the reclaimer once the log holds reclaim_trigger of the budget.
  const auto trigger = static_cast<uint64_t>(
      std::ceil(static_cast<double>(b) * options.reclaim_trigger / static_cast<double>(bs)));
  trigger_blocks_.store(trigger, std::memory_order_relaxed);
  kick_blocks_.store(options.background ? trigger : ~uint64_t{0});
}

void Engine::Impl::AdaptBudget(uint64_t k_bytes) {
  // The automatic budget follows the hot set, which the compacted log measures (one entry per
  // hot word). A log of 8 times the compacted log lets records age until most of their entries
  // are superseded before a cycle folds them; a smaller one makes every cycle copy more of K
  // again (the reclaimer's work per transaction grows) and, below 2 times, sends hot words cold
  // (each next write a snapshot and a fence). So: double while K is over 1/8 of the budget,
  // up to what the block table holds, if the heap's free chunks are at least twice what the
  // log may newly take (the log may reach twice its budget: 4 x the budget's growth). Halve,
  // not below the pool-sized start, after 4 full cycles in a row with K under 1/32 of the
  // budget, or when the heap's free chunks are fewer than the budget (the program needs the
  // room), in both cases only once the log in use fits the smaller budget. The heap's free
  // chunks are counted by a scan of its chunk states (1M loads for a 64 GiB heap): for the
  // pressure test, every 4th full cycle only.
  const uint64_t b = Budget();
  const uint64_t bs = store.block_size();
  const uint64_t cap = txn_internal::kTableCapacity * 4 / 7 * bs;
  const uint64_t in_use = store.blocks_in_use() * bs;
  std::optional<uint64_t> free_chunks;  // the heap's free chunk bytes, counted at most once
  auto free_bytes = [&] {
    if (!free_chunks) free_chunks = heap.FreeChunkBytes();
    return *free_chunks;
  };
  auto shrink = [&] {
    const uint64_t want = std::max(auto_budget_base, b / 2);
    if (want < b && in_use <= want) {
      SetBudget(want);
      budget_changes.fetch_add(1, std::memory_order_relaxed);
      small_k_cycles_ = 0;
    }
  };
  if (b > auto_budget_base && adapt_calls_++ % 4 == 0 && free_bytes() < b) {
    return shrink();
  }
  if (k_bytes > b / 8) {
    small_k_cycles_ = 0;
    const uint64_t want = std::min(cap, 2 * b);
    if (want > b && free_bytes() >= 4 * (want - b)) {
      SetBudget(want);
      budget_changes.fetch_add(1, std::memory_order_relaxed);
    }
    return;
  }
  if (b > auto_budget_base && k_bytes < b / 32) {
    if (++small_k_cycles_ >= 4) shrink();
  } else {
    small_k_cycles_ = 0;
  }
}

absl::Status Engine::Impl::WaitForRoom() {
  const uint64_t stall = stall_blocks_.load(std::memory_order_relaxed);
  if (store.blocks_in_use() < stall) return absl::OkStatus();
  stalls.fetch_add(1, std::memory_order_relaxed);
  const auto start = std::chrono::steady_clock::now();
  const auto give_up = start + options.max_log_wait;
  // (In the pool's failed mode no epoch completes, so no block comes back: no wait; the
  // commit refuses the transaction.)
  while (store.blocks_in_use() >= stall && !pool.failed() &&
         std::chrono::steady_clock::now() < give_up) {
    if (!bg_kick_.exchange(true)) {
      std::lock_guard<std::mutex> l(bg_mu_);
      bg_cv_.notify_one();
    }
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
  if (pool.failed()) return pool.health();
  if (store.blocks_in_use() < stall) return absl::OkStatus();
  // The log cannot drain: nothing the reclaimer does brings it under the stall size. Later
  // commits would fail one by one at the log's limit with nothing made durable in between that
  // the caller could rely on; the failed mode says so once, names why, and the next open
  // recovers every committed transaction.
  absl::Status why;
  {
    std::lock_guard<std::mutex> l(reclaim_error_mu_);
    why = reclaim_error_;
  }
  std::string cause =
      absl::StrCat("the transaction log has been full (", store.blocks_in_use(), " blocks of ",
                   store.block_size(), " bytes, stall size ", stall, ") for ",
                   options.max_log_wait.count(), " ms and cannot drain: ");
  if (!why.ok()) {
    absl::StrAppend(&cause, "reclamation fails: ", why.ToString());
  } else {
    absl::StrAppend(&cause, "epoch ", epochs.current(), " has not completed (last completed ",
                    epochs.completed(),
                    "): a guard or an open transaction holds the boundary back");
  }
  pool.health_state().Fail(std::move(cause));
  return pool.health();
}

}  // namespace pmrt::txn
