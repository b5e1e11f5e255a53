#include "ds/internal/ebr.h"

#include <algorithm>
#include <utility>

namespace pmrt::ds_internal {

namespace {
constexpr uint32_t kCollectEvery = 64;  // retires between collection attempts
}  // namespace

// Owns the calling thread's record; hands its unfreed objects to the orphan list at exit.
struct EbrThreadHandle {
  Ebr::Record* record = nullptr;
  ~EbrThreadHandle() {
    if (record != nullptr) Ebr::Global().Release(record);
    // A guard entered later on this exiting thread takes a record of its own.
    record = nullptr;
    Ebr::tls_record_ = nullptr;
  }
};

namespace {
thread_local EbrThreadHandle tls_handle;
}  // namespace

Ebr::Record* Ebr::LocalRecord() {
  if (tls_handle.record == nullptr) {
    tls_handle.record = Acquire();
    tls_record_ = tls_handle.record;
  }
  return tls_handle.record;
}

Ebr::Record* Ebr::Acquire() {
  // Reuse a record a finished thread released.
  for (Record* r = head_.load(std::memory_order_acquire); r != nullptr; r = r->next) {
    bool expected = false;
    // Acquire pairs with Release()'s store: the previous owner's limbo handoff is complete.
    if (!r->in_use.load(std::memory_order_relaxed) &&
        r->in_use.compare_exchange_strong(expected, true, std::memory_order_acquire)) {
      return r;
    }
  }
  auto* r = new Record();
  Record* head = head_.load(std::memory_order_relaxed);
  do {
    r->next = head;
    // Release publishes r->next and the record's initial state to the list walkers
    // (TryAdvance, Acquire load head_ with acquire).
  } while (
      !head_.compare_exchange_weak(head, r, std::memory_order_release, std::memory_order_relaxed));
  return r;
}

void Ebr::Release(Record* r) {
  if (r->depth != 0) {
    r->depth = 0;
    r->announced.store(0, std::memory_order_release);
  }
  if (!r->limbo.empty()) {
    std::lock_guard<std::mutex> lock(orphans_mu_);
    orphans_.insert(orphans_.end(), r->limbo.begin(), r->limbo.end());
    orphans_size_.store(orphans_.size(), std::memory_order_relaxed);
    r->limbo.clear();
    r->limbo_size.store(0, std::memory_order_relaxed);
  }
  r->retires_since_collect = 0;
  // Release pairs with Acquire()'s CAS: the next owner sees an empty limbo.
  r->in_use.store(false, std::memory_order_release);
}

void Ebr::EnterOutermost() {
  Record* r = LocalRecord();
  if (r->depth++ > 0) return;
  uint64_t e = global_.load(std::memory_order_seq_cst);
  for (;;) {
    // seq_cst: the announcement is ordered before every load the guard then makes, and before
    // the re-read of G (a Dekker-style store-then-load; pairs with TryAdvance's record loads).
    r->announced.store((e << 1) | 1, std::memory_order_seq_cst);
    const uint64_t again = global_.load(std::memory_order_seq_cst);
    if (again == e) return;
    e = again;
  }
}

void Ebr::Retire(void* p, Deleter deleter, size_t size) {
  Record* r = LocalRecord();
  const bool outside = r->depth == 0;
  if (outside) Enter();  // the Exit() below is what orders the caller's unlink (see header)
  const uint64_t tag = (r->announced.load(std::memory_order_relaxed) >> 1) + 1;
  r->limbo.push_back({p, deleter, size, tag});
  r->limbo_size.store(r->limbo.size(), std::memory_order_relaxed);
  if (outside) Exit();
  if (++r->retires_since_collect >= kCollectEvery) Collect();
}

bool Ebr::TryAdvance() {
  uint64_t e = global_.load(std::memory_order_seq_cst);
  for (Record* r = head_.load(std::memory_order_acquire); r != nullptr; r = r->next) {
    // Acquire pairs with Exit()'s release store and Enter()'s seq_cst store.
    const uint64_t a = r->announced.load(std::memory_order_seq_cst);
    if ((a & 1) && (a >> 1) != e) return false;
  }
  // acq_rel: the freeing thread that loads the new G (acquire) inherits the record loads above.
  return global_.compare_exchange_strong(e, e + 1, std::memory_order_acq_rel);
}

size_t Ebr::FreeUpTo(std::vector<Retired>& list, uint64_t safe_epoch) {
  size_t kept = 0, freed = 0;
  for (size_t i = 0; i < list.size(); ++i) {
    if (list[i].epoch <= safe_epoch) {
      list[i].deleter(list[i].p, list[i].size);
      ++freed;
    } else {
      list[kept++] = list[i];
    }
  }
  list.resize(kept);
  return freed;
}

size_t Ebr::Collect() {
  Record* r = LocalRecord();
  r->retires_since_collect = 0;
  TryAdvance();
  // Acquire pairs with TryAdvance()'s CAS (see the header's happens-before chain).
  const uint64_t g = global_.load(std::memory_order_acquire);
  if (g < 2) return 0;
  const uint64_t safe = g - 2;
  size_t freed = FreeUpTo(r->limbo, safe);
  r->limbo_size.store(r->limbo.size(), std::memory_order_relaxed);
  if (orphans_size_.load(std::memory_order_relaxed) == 0) return freed;
  std::vector<Retired> orphans;
  {
    std::lock_guard<std::mutex> lock(orphans_mu_);
    orphans.swap(orphans_);
    orphans_size_.store(0, std::memory_order_relaxed);
  }
  freed += FreeUpTo(orphans, safe);
  if (!orphans.empty()) {
    std::lock_guard<std::mutex> lock(orphans_mu_);
    orphans_.insert(orphans_.end(), orphans.begin(), orphans.end());
    orphans_size_.store(orphans_.size(), std::memory_order_relaxed);
  }
  return freed;
}

size_t Ebr::pending() const {
  size_t n = orphans_size_.load(std::memory_order_relaxed);
  for (Record* r = head_.load(std::memory_order_acquire); r != nullptr; r = r->next) {
    n += r->limbo_size.load(std::memory_order_relaxed);
  }
  return n;
}

}  // namespace pmrt::ds_internal
