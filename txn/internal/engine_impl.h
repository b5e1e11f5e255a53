// Engine::Impl: the state behind txn::Engine, shared by txn.cc (transactions), reclaim.cc (the
// reclaimer) and recovery.cc (open). Only txn/ includes this.
#ifndef PMRT_TXN_INTERNAL_ENGINE_IMPL_H_
#define PMRT_TXN_INTERNAL_ENGINE_IMPL_H_

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "txn/internal/log_store.h"
#include "txn/internal/word_index.h"
#include "txn/txn.h"

namespace pmrt::txn {

namespace txn_detail {

// Persistence sites of transactions (docs/txn.md, "Store orders").
inline constexpr Site kSnapshotFlush{"txn.snapshot.flush"};
inline constexpr Site kSnapshotFence{"txn.snapshot.fence"};
inline constexpr Site kCommitFlush{"txn.commit.flush"};
inline constexpr Site kCommitFence{"txn.commit.fence"};
inline constexpr Site kCompactFlush{"txn.reclaim.compact.flush"};
inline constexpr Site kCompactFence{"txn.reclaim.compact.fence"};
inline constexpr Site kDescFlush{"txn.reclaim.desc.flush"};
inline constexpr Site kDescFence{"txn.reclaim.desc.fence"};
inline constexpr Site kHeadMoveFlush{"txn.reclaim.head.flush"};
inline constexpr Site kHeadMoveFence{"txn.reclaim.head.fence"};

// The set of words declared in the running transaction: open addressing, keys word + 1.
class WordSet {
 public:
  // True if newly inserted.
  bool Insert(uint64_t word) {
    if ((count_ + 1) * 2 > slots_.size()) Grow();
    const uint64_t key = word + 1;
    for (size_t i = Hash(word);; i = (i + 1) & mask_) {
      if (slots_[i] == key) return false;
      if (slots_[i] == 0) {
        slots_[i] = key;
        ++count_;
        return true;
      }
    }
  }
  void Clear() {
    if (count_ == 0) return;
    std::fill(slots_.begin(), slots_.end(), 0);
    count_ = 0;
  }

 private:
  size_t Hash(uint64_t w) const { return static_cast<size_t>((w * 0x9E3779B97F4A7C15ull) >> 20) & mask_; }
  void Grow() {
    std::vector<uint64_t> old = std::move(slots_);
    slots_.assign(old.empty() ? 64 : old.size() * 2, 0);
    mask_ = slots_.size() - 1;
    count_ = 0;
    for (uint64_t k : old)
      if (k != 0) Insert(k - 1);
  }
  std::vector<uint64_t> slots_;
  size_t mask_ = 0;
  size_t count_ = 0;
};

struct WriteRec {
  uint64_t word;  // pool word index
  uint64_t old;   // its value when first declared in the transaction (for abort)
};
struct BlockRec {
  uint64_t offset;
  uint64_t bytes;   // allocations: the requested size rounded up to 8 (recorded whole);
                    // frees: the usable size (the tombstone's range)
  uint64_t usable;  // the block's usable size (its class size)
};

// One thread's transaction state (per engine). Adopted as is by a later thread once its thread
// exits (with its log slot: the log continues).
struct ThreadTx final : alloc::TxScope {
  Engine::Impl* impl = nullptr;
  uint32_t slot = txn_internal::kCompactSlot;  // log slot; kCompactSlot until assigned
  int depth = 0;
  bool aborted = false;            // aborted at an inner level; memory already restored
  absl::Status doom;               // the first error of the transaction
  std::optional<epoch::Guard> guard;
  alloc::TxScope* outer_scope = nullptr;  // restored at the end (a transaction of another pool)
  uint64_t epoch = 0;
  std::thread::id owner;
  std::vector<WriteRec> writes;
  WordSet declared;
  std::vector<BlockRec> allocs;
  std::vector<BlockRec> frees;
  std::vector<uint64_t> cold;      // scratch: words to snapshot
  // Watchdog: begin time (steady ns, 0 = none), written by the owner; `expired` set by the
  // reclaimer thread. Relaxed: the flag is advisory and checked at the next call.
  std::atomic<int64_t> open_since_ns{0};
  std::atomic<bool> expired{false};
  int64_t reported_since = 0;      // background thread only: the begin time it reported

  void* TxAllocate(size_t size, size_t align) override;
  absl::Status TxFree(void* p) override;
};

}  // namespace txn_detail

class Engine::Impl {
 public:
  Impl(Engine& engine);
  ~Impl();

  // ---- transactions (txn.cc) ----
  txn_detail::ThreadTx& Local();
  absl::Status Begin(txn_detail::ThreadTx& t);
  absl::Status Commit(txn_detail::ThreadTx& t);
  absl::Status Abort(txn_detail::ThreadTx& t);
  absl::Status Add(txn_detail::ThreadTx& t, const void* p, size_t n);
  void* TxAllocate(txn_detail::ThreadTx& t, size_t size, size_t align);
  absl::Status TxFree(txn_detail::ThreadTx& t, void* p);

  // ---- recovery (recovery.cc) ----
  absl::Status Recover();

  // ---- reclamation (reclaim.cc) ----
  absl::Status Reclaim(bool advance);
  void StartBackground();
  void StopBackground();

  Engine& engine;
  Pool& pool;
  epoch::Manager& epochs;
  alloc::Heap& heap;
  const Options options;
  txn_internal::LogStore store;
  std::unique_ptr<txn_internal::WordIndex> index;
  std::atomic<uint64_t> next_stamp{1};

  // Reclamation state: the current descriptor (horizon, seq, which of the two lines).
  std::mutex reclaim_mu;
  uint64_t horizon = 0;
  uint64_t seq = 0;
  int desc_line = 1;  // the line holding the current descriptor; the next cycle writes the other
  uint64_t compact_bytes = 0;

  // Statistics (relaxed counters).
  std::atomic<uint64_t> commits{0}, aborts{0}, snapshots{0}, snapshot_words{0}, record_bytes{0};
  std::atomic<uint64_t> log_peak{0}, cycles{0}, words_kept{0}, words_dropped{0}, words_cold{0};
  uint64_t recovered_records = 0, recovered_words = 0;
  std::chrono::nanoseconds recovery_time{0};

 private:
  absl::Status AssignSlot(txn_detail::ThreadTx& t);
  absl::Status Doom(txn_detail::ThreadTx& t, absl::Status st);
  absl::Status Snapshot(txn_detail::ThreadTx& t);
  absl::Status WriteCommit(txn_detail::ThreadTx& t);
  void RollBack(txn_detail::ThreadTx& t);
  void End(txn_detail::ThreadTx& t);
  bool InFresh(const txn_detail::ThreadTx& t, uint64_t word) const;
  void NoteLogSize();
  void BackgroundLoop();
  void Watchdog();

  PerThread<txn_detail::ThreadTx> threads_;
  std::mutex slot_mu_;
  bool slot_used_[txn_internal::kMaxSlots] = {};

  std::mutex bg_mu_;
  std::condition_variable bg_cv_;
  bool bg_stop_ = false;
  std::atomic<bool> bg_kick_{false};  // set by committers when the log passes the trigger
  std::thread bg_;
};

}  // namespace pmrt::txn

#endif  // PMRT_TXN_INTERNAL_ENGINE_IMPL_H_
