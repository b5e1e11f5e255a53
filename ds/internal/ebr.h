// Ebr: a small, volatile, process-wide epoch-based reclamation scheme for the transient
// Masstree (MallocNodeAllocator). The durable tree uses pmrt::epoch::Manager instead.
//
//   {
//     EbrGuard g;                      // readers and writers run inside a guard
//     Node* n = shared.load(...);      // n stays allocated until g ends, even if unlinked
//   }
//   Ebr::Global().Retire(p, &FreeIt, size);  // after unlinking p; freed when no guard can see it
//
// Protocol. A global epoch G only grows. Entering a guard announces G in the thread's record
// (re-read until G is unchanged after the announcement). G moves from g to g+1 only when every
// thread inside a guard has announced g. Retire() runs inside a guard (it opens one if the caller
// has none) that announced epoch a, and tags the object a+1; the object is freed once G >= a+3.
// Why that is safe: G reached a+2 only after the retiring thread left epoch a (its Exit() is a
// release store, after its unlink, and the advancer read it with acquire before its acq_rel CAS),
// so a guard that announced a+2 or later loaded G from that CAS's release sequence and sees the
// unlink; and when G >= a+3 every active guard announced at least a+2.
//
// The free is ordered after every access of a guard that could hold the object by the same
// chain (guard exit: release store; advancer: acquire loads, acq_rel CAS; freeing thread:
// acquire load of G), which is what ThreadSanitizer checks.
//
// Thread safety: all members may be called from any thread. Guards nest. A thread's retired
// objects live in its own list; when the thread exits, they move to a shared orphan list that
// any later collection frees.
#ifndef PMRT_DS_INTERNAL_EBR_H_
#define PMRT_DS_INTERNAL_EBR_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <vector>

namespace pmrt::ds_internal {

class Ebr {
 public:
  using Deleter = void (*)(void* p, size_t size);

  // The process-wide instance (never destroyed, so thread exit can always reach it).
  static Ebr& Global() {
    static Ebr* const instance = new Ebr();  // intentionally leaked: outlives every thread
    return *instance;
  }

  // A nested guard only counts; the outermost one announces (EnterOutermost).
  void Enter() {
    Record* r = tls_record_;
    if (r != nullptr && r->depth > 0) {
      ++r->depth;
      return;
    }
    EnterOutermost();
  }
  void Exit() {
    Record* r = tls_record_;  // set by the Enter this Exit matches
    if (--r->depth > 0) return;
    // Release: every access the guard made happens-before an advancer that reads 0 here
    // (acquire in TryAdvance), and therefore before the free that follows the advance.
    r->announced.store(0, std::memory_order_release);
  }
  // True when the calling thread's guard announced an epoch older than the global one: the
  // advance it allows has happened, and a holder that can end its guard at will
  // (ds::BasicMasstree::Batch) re-announces, so that the next advance is not held up by it.
  // REQUIRES: the calling thread is inside a guard.
  bool Stale() const {
    return (tls_record_->announced.load(std::memory_order_relaxed) >> 1) !=
           global_.load(std::memory_order_relaxed);
  }
  // Frees `p` with `deleter(p, size)` once no guard that could have seen it remains.
  // REQUIRES: p is unreachable for guards that start after this call.
  void Retire(void* p, Deleter deleter, size_t size);
  // Tries to advance the epoch and frees what is safe to free; returns the number freed.
  size_t Collect();

  uint64_t epoch() const { return global_.load(std::memory_order_acquire); }
  // Objects retired and not yet freed (all threads; approximate while threads run).
  size_t pending() const;

  struct Retired {
    void* p;
    Deleter deleter;
    size_t size;
    uint64_t epoch;  // freed once G >= epoch + 2
  };
  struct alignas(64) Record {
    // 0 when outside any guard, else (announced epoch << 1) | 1. Written by the owner only.
    std::atomic<uint64_t> announced{0};
    std::atomic<bool> in_use{true};
    std::atomic<size_t> limbo_size{0};  // limbo.size(), for pending(); written by the owner
    Record* next = nullptr;             // immutable once the record is published
    // Owner-only state.
    int depth = 0;
    uint32_t retires_since_collect = 0;
    std::vector<Retired> limbo;  // ascending epochs
  };

 private:
  Ebr() = default;
  void EnterOutermost();
  Record* LocalRecord();
  Record* Acquire();
  void Release(Record* r);
  bool TryAdvance();
  size_t FreeUpTo(std::vector<Retired>& list, uint64_t safe_epoch);
  friend struct EbrThreadHandle;

  std::atomic<uint64_t> global_{1};
  std::atomic<Record*> head_{nullptr};
  std::atomic<size_t> orphans_size_{0};
  std::mutex orphans_mu_;
  std::vector<Retired> orphans_;
  // The calling thread's record (EbrThreadHandle owns it), for the inline guard paths.
  static inline thread_local Record* tls_record_ = nullptr;
};

// RAII guard on Ebr::Global().
class EbrGuard {
 public:
  EbrGuard() { Ebr::Global().Enter(); }
  ~EbrGuard() { Ebr::Global().Exit(); }
  EbrGuard(const EbrGuard&) = delete;
  EbrGuard& operator=(const EbrGuard&) = delete;
};

}  // namespace pmrt::ds_internal

#endif  // PMRT_DS_INTERNAL_EBR_H_
