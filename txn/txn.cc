// Transactions on the calling thread: begin, add (hot words declared in place, cold ones
// snapshotted first: snapshot.cc), log_logical, abort (the volatile copies put back, newest
// first) and the allocations and frees inside a transaction; the thread's state (ThreadTx); the
// inline begin and add paths of txn.h (BeginFast, AddGeneral) and Engine's begin/add/abort entry
// points. The commit is in commit.cc. docs/txn.md, "Transactions" and "The index", has the
// argument for the touch epochs and the guard a transaction holds from begin to its end.
#include "txn/txn.h"

#if defined(__x86_64__)
#include <cpuid.h>
#endif

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "txn/internal/engine_impl.h"
#include "txn/internal/record_writer.h"

namespace pmrt::txn_internal {
constinit thread_local Hot* tls_hot = &g_no_hot;

namespace {
bool HasPrefetchw() {
#if defined(__x86_64__)
  unsigned a = 0, b = 0, c = 0, d = 0;
  return __get_cpuid(0x80000001u, &a, &b, &c, &d) != 0 && (c & (1u << 8)) != 0;
#else
  return false;
#endif
}
// Before main (no thread reads it yet); until then PrefetchForWrite makes the plain prefetch.
[[maybe_unused]] const bool kPrefetchwSet = (g_prefetchw = HasPrefetchw(), true);
}  // namespace
}  // namespace pmrt::txn_internal

namespace pmrt::txn {

using txn_internal::kCompactWritesAt;
using txn_internal::LogicalEntryBytes;
using txn_internal::NoEngine;

// ---- the calling thread's transaction on the default engine ---------------------------------

absl::Status abort() {
  Engine* e = Engine::Default();
  return e == nullptr ? NoEngine() : e->Abort();
}
absl::Status log_logical(uint64_t tag, std::string_view bytes, std::function<void()> undo) {
  Engine* e = Engine::Default();
  return e == nullptr ? NoEngine() : e->LogLogical(tag, bytes, std::move(undo));
}

absl::Status Engine::LogLogical(uint64_t tag, std::string_view bytes, std::function<void()> undo) {
  return impl_->AddLogical(impl_->Local(), tag, bytes, std::move(undo));
}

absl::Status Engine::Impl::AddLogical(ThreadTx& t, uint64_t tag, std::string_view bytes,
                                      std::function<void()> undo) {
  if (t.depth == 0) return NoTransaction("log_logical");
  if (t.aborted || !t.doom.ok()) {
    return t.aborted ? absl::AbortedError("txn::log_logical: the transaction was aborted") : t.doom;
  }
  if (tag > txn_internal::kWordIndexMask) {
    return Doom(t, absl::InvalidArgumentError(
                       absl::StrCat("txn::log_logical: tag ", tag, " does not fit in 46 bits")));
  }
  size_t bytes_in_record = sizeof(RecordHeader) + LogicalEntryBytes(bytes.size());
  for (const txn_internal::LogicalRec& l : t.logical)
    bytes_in_record += LogicalEntryBytes(l.bytes.size());
  if (bytes_in_record > store.max_record_bytes()) {
    return Doom(
        t, absl::InvalidArgumentError(absl::StrCat(
               "txn::log_logical: the transaction's logical operations (", bytes_in_record,
               " bytes) exceed what one log record holds (", store.max_record_bytes(), " bytes)")));
  }
  t.logical.push_back({tag, std::string(bytes), std::move(undo)});
  // Its commit must take the general path (SmallCommitReady reads hot.words), as after an
  // allocation.
  t.hot.words.store(0, std::memory_order_relaxed);
  return absl::OkStatus();
}

bool in_transaction() {
  Engine* e = Engine::Default();
  return e != nullptr && e->InTransaction();
}

Scope::Scope() : begin_(begin()), owner_(std::this_thread::get_id()), open_(begin_.ok()) {}

Scope::~Scope() {
  if (open_ && std::this_thread::get_id() == owner_) (void)abort();
}

absl::Status Scope::CheckThread() const {
  if (std::this_thread::get_id() != owner_) {
    return absl::FailedPreconditionError(
        "txn::Scope used from a thread other than the one that began it");
  }
  if (!open_) return absl::FailedPreconditionError("txn::Scope: the transaction is not open");
  return absl::OkStatus();
}

absl::Status Scope::Commit() {
  RETURN_IF_ERROR(CheckThread());
  open_ = false;
  return commit();
}

absl::Status Scope::Abort() {
  RETURN_IF_ERROR(CheckThread());
  open_ = false;
  return abort();
}

// ---- Impl: begin and add --------------------------------------------------------------------

absl::Status Engine::Impl::AssignSlot(ThreadTx& t) {
  std::lock_guard<std::mutex> l(slot_mu_);
  for (uint32_t s = 0; s < txn_internal::kMaxSlots; ++s) {
    if (!slot_used_[s]) {
      slot_used_[s] = true;
      t.slot = s;
      return absl::OkStatus();
    }
  }
  return absl::ResourceExhaustedError(
      absl::StrCat("txn: more than ", txn_internal::kMaxSlots, " threads have run transactions"));
}

absl::Status Engine::Impl::Doom(ThreadTx& t, absl::Status st) {
  t.hot.words.store(0, std::memory_order_relaxed);  // every later add takes the general path
  if (t.doom.ok()) t.doom = st;
  return t.doom;
}

namespace {
// A number for the calling thread, never reused (thread ids and TLS addresses are reused after a
// thread exits): what a transaction records as its owner.
std::atomic<uint64_t> g_thread_serials{0};
constinit thread_local uint64_t tls_thread_serial = 0;
uint64_t ThreadSerial() {
  if (tls_thread_serial == 0) [[unlikely]]
    tls_thread_serial = g_thread_serials.fetch_add(1, std::memory_order_relaxed) + 1;
  return tls_thread_serial;
}
}  // namespace

[[gnu::always_inline]] inline void Engine::Impl::Enter(ThreadTx& t) {
  // The guard keeps the epoch from closing until commit: the transaction's in-place writes and
  // its record belong to one epoch (docs/txn.md, "Epochs").
  Entered(t, epoch::Guard::Enter(epochs, *t.epoch_slot), &engine == Engine::Default());
}

[[gnu::always_inline]] inline void Engine::Impl::Entered(ThreadTx& t, uint64_t epoch,
                                                         bool is_default) {
  // Each store here is one more that the previous commit's fence may hold back
  // (docs/txn.md, "Design notes"): the ones that would store what is already there are tests.
  t.depth = 1;
  if (t.aborted) t.aborted = false;
  t.hot.epoch = epoch;
  t.seq.store(t.seq.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);  // odd
  // Another engine's transaction on this thread, if any (End puts it back, and leaves
  // outer_scope null).
  if (alloc::tls_tx_scope != nullptr) t.outer_scope = alloc::tls_tx_scope;
  alloc::tls_tx_scope = &t;
  if (is_default) {                             // txn::add's inline path (txn.h)
    if (t.hot.index == nullptr) [[unlikely]] {  // fixed for the engine's life
      t.hot.index = &index->at(0);
      t.hot.fast_lines = index->lines();
      t.hot.base = reinterpret_cast<uintptr_t>(pool.base());
      t.hot.slack = touch_slack;
    }
    if (const auto floor = static_cast<uint32_t>(epoch) - t.hot.slack; t.hot.touch_floor != floor)
        [[unlikely]] {  // (the epoch advances every 64 ms)
      t.hot.touch_floor = floor;
    }
    // Zeroed when a transaction was aborted, doomed, expired or allocated (End leaves it).
    if (t.hot.words.load(std::memory_order_relaxed) != pool.size() / 8) [[unlikely]]
      t.hot.words.store(pool.size() / 8, std::memory_order_relaxed);
    txn_internal::tls_hot = &t.hot;
  }
}

[[gnu::always_inline]] inline bool Engine::Impl::BeginReady(ThreadTx& t) {
  // The common case: an outermost begin on the thread that ran this ThreadTx's previous
  // transaction (its slot, write list and epoch slot are set up), not doomed, no backpressure.
  // (The thread's serial as it is: 0, never an owner, sends a thread's first begin to
  // BeginSlow, which numbers it.)
  return t.depth == 0 && t.owner == tls_thread_serial && t.owner != 0 && t.doom.ok() &&
         store.blocks_in_use() < begin_stall_blocks_.load(std::memory_order_relaxed);
}

[[gnu::always_inline]] inline absl::Status Engine::Impl::Begin(ThreadTx& t) {
  if (BeginReady(t)) [[likely]] {
    Enter(t);
    return absl::OkStatus();
  }
  return BeginSlow(t);
}

absl::Status Engine::Impl::BeginSlow(ThreadTx& t) {
  if (t.depth > 0) {
    if (t.owner != ThreadSerial()) {  // not expected: a thread's exit aborts its transaction
      return absl::FailedPreconditionError(
          "txn::begin: this thread adopted a transaction left open by a thread that exited");
    }
    ++t.depth;  // flat nesting
    return absl::OkStatus();
  }
  if (t.slot == txn_internal::kCompactSlot) RETURN_IF_ERROR(AssignSlot(t));
  // Backpressure, before the guard: the reclaimer may need to advance the epoch. Not when the
  // caller already holds a guard (the advance would wait for it).
  if (options.background &&
      store.blocks_in_use() >= stall_blocks_.load(std::memory_order_relaxed) &&
      epochs.LocalSlot().depth == 0) {
    RETURN_IF_ERROR(WaitForRoom());
  }
  t.owner = ThreadSerial();
  t.epoch_slot = &epochs.LocalSlot();
  if (!t.doom.ok()) t.doom = absl::OkStatus();
  if (t.hot.begin == nullptr) t.GrowWrites();
  Enter(t);
  return absl::OkStatus();
}

bool Engine::Impl::InFresh(const ThreadTx& t, uint64_t word) const {
  for (const BlockRec& a : t.allocs) {
    if (word >= a.offset / 8 && word < (a.offset + a.bytes) / 8) return true;
  }
  return false;
}

absl::Status Engine::Impl::AddRefused(ThreadTx& t, const void* p, size_t n) {
  if (t.depth == 0) return NoTransaction("add");
  if (t.aborted) return absl::AbortedError("txn::add: the transaction was aborted");
  if (!t.doom.ok()) return t.doom;
  if (t.Expired()) {
    return Doom(t, absl::DeadlineExceededError(absl::StrCat(
                       "txn: the transaction has been open longer than ", options.max_open.count(),
                       " ms (it holds back the epoch boundary)")));
  }
  if (n == 0) return absl::OkStatus();
  if (!pool.contains(p, n)) {
    return Doom(t, absl::InvalidArgumentError("txn::add: the range is not inside the pool"));
  }
  return absl::InternalError("txn::add: refused for no reason");
}

void Engine::Impl::CompactWrites(ThreadTx& t) {
  // Keeps each word's first entry (its value from before the transaction).
  std::stable_sort(t.hot.begin, t.hot.end,
                   [](const WriteRec& a, const WriteRec& b) { return a.word < b.word; });
  t.hot.end = std::unique(t.hot.begin, t.hot.end,
                          [](const WriteRec& a, const WriteRec& b) { return a.word == b.word; });
  t.compact_at = std::max<size_t>(kCompactWritesAt, 2 * t.writes_size());
}

absl::Status Engine::Impl::Add(ThreadTx& t, const void* p, size_t n) {
  // Everything unusual (no transaction, aborted, doomed, expired, empty, outside the pool) in
  // one test; AddRefused says which.
  if (t.depth == 0 || t.aborted || !t.doom.ok() || t.Expired() || n == 0 || !pool.contains(p, n))
      [[unlikely]] {
    return AddRefused(t, p, n);
  }
  const uint64_t off = pool.offset_of(p);
  const uint64_t first = off / 8, last = (off + n - 1) / 8;
  const uint8_t* base = pool.base();
  // The word's index slot and its line (the old value is read below, and the caller stores to
  // it next) are usually both cache misses: start them together.
  __builtin_prefetch(&index->at(first), 1);
  __builtin_prefetch(base + first * 8, 1);
  // A word declared twice gets two entries in `writes`: RollBack restores them newest first, so
  // the first entry's value (from before the transaction) wins, and the record lists each word
  // once. CompactWrites bounds the list when a transaction declares the same words many times.
  if (t.writes_size() >= t.compact_at) [[unlikely]]
    CompactWrites(t);
  t.cold.clear();
  for (uint64_t w = first; w <= last; ++w) {
    if (!t.allocs.empty() && InFresh(t, w)) continue;  // recorded whole at commit
    std::atomic<uint64_t>& slot = index->at(w);
    uint64_t v = slot.load(std::memory_order_acquire);
    for (;;) {
      if (WordIndex::Key(v) == 0) break;  // cold
      // Touched recently enough: in this epoch or at most touch_slack epochs before it (or
      // after it: a transaction of a later epoch). The reclaimer's cold age is at least the
      // slack and its horizon is below this transaction's epoch, so it leaves the word hot
      // while this transaction is open (docs/txn.md, "The index").
      if (static_cast<int32_t>(static_cast<uint32_t>(t.hot.epoch) - WordIndex::Epoch32(v)) <=
          static_cast<int32_t>(touch_slack)) {
        break;
      }
      // Move the touch epoch forward. The reclaimer's CAS of the old value (to cold) now fails,
      // so the word's newest record stays while this transaction can still fail. Pairs with
      // the reclaimer's cold CAS (ReclaimCycle::DecideOne, reclaim.cc). (The data line is not
      // registered dirty: a hot word's committed value is in its newest record; the reclaimer
      // writes the line back when the word goes cold.)
      if (slot.compare_exchange_weak(v, WordIndex::Pack(WordIndex::Key(v), t.hot.epoch),
                                     std::memory_order_acq_rel, std::memory_order_acquire)) {
        break;
      }
    }
    if (WordIndex::Key(v) == 0) {
      t.cold.push_back(w);
      continue;
    }
    uint64_t old;
    std::memcpy(&old, base + w * 8, 8);
    t.PushWrite({w, old});
  }
  if (t.cold.empty()) return absl::OkStatus();
  if (absl::Status st = Snapshot(t); !st.ok()) return Doom(t, st);
  return absl::OkStatus();
}

// ---- Impl: abort, and allocation inside a transaction ---------------------------------------

absl::Status Engine::Impl::Abort(ThreadTx& t) {
  if (t.depth == 0) return NoTransaction("abort");
  if (!t.aborted) {
    RollBack(t);
    t.aborts.Add(1);
    t.aborted = true;
    t.hot.words.store(0, std::memory_order_relaxed);  // later adds report the abort
  }
  if (--t.depth == 0) End(t);
  return absl::OkStatus();
}

void Engine::Impl::AbortAtThreadExit(ThreadTx& t) {
  // What a crash of the thread would give (the transaction undone), and its epoch guard released:
  // left open, it would hold back every later epoch boundary (and with them reclamation, until
  // begin() stalls), and the thread that adopts this ThreadTx would find it open.
  std::fprintf(stderr,
               "pmrt txn: a thread exited inside a transaction (begin() without commit() or "
               "abort()); the transaction is aborted\n");
  t.depth = 1;  // every level at once
  (void)Abort(t);
}

void Engine::Impl::RollBack(ThreadTx& t) {
  // The layers above first, newest first: their undo may read words the transaction wrote.
  for (auto it = t.logical.rbegin(); it != t.logical.rend(); ++it) {
    if (it->undo) it->undo();
  }
  t.logical.clear();
  // From the volatile copies: every declared word gets its value from before the transaction.
  // Their records (or snapshots) stay the newest, and say the same; the lines are written back
  // when the words go cold or at close, like any hot word's.
  uint8_t* base = pool.base();
  // Newest first: a word declared more than once ends with its first entry's value.
  for (const WriteRec* r = t.hot.end; r != t.hot.begin;) {
    --r;
    std::memcpy(base + r->word * 8, &r->old, 8);
  }
  t.hot.end = t.hot.begin;
  for (const BlockRec& a : t.allocs) {
    if (absl::Status st = heap.FreeUnpublished(pool.at(a.offset)); !st.ok()) {
      std::fprintf(stderr, "pmrt txn: undoing an allocation failed: %s\n", st.ToString().c_str());
    }
  }
  t.allocs.clear();
  t.frees.clear();
}

void Engine::Impl::End(ThreadTx& t) {
  EndKeepingGuard(t);
  epoch::Guard::Exit(*t.epoch_slot);
}

void* Engine::Impl::TxAllocate(ThreadTx& t, size_t size, size_t align) {
  if (t.aborted || !t.doom.ok()) return nullptr;
  const size_t bytes = (size + 7) / 8 * 8;
  // The block is recorded whole in the commit record, with the header and its entry heads.
  if (bytes + sizeof(RecordHeader) + 16 > store.max_record_bytes()) {
    (void)Doom(t,
               absl::InvalidArgumentError(absl::StrCat("txn: an allocation of ", size,
                                                       " bytes inside a transaction exceeds what "
                                                       "one log record holds (",
                                                       store.max_record_bytes(), " bytes)")));
    return nullptr;
  }
  void* p = heap.Allocate(size, align);
  if (p == nullptr) {
    (void)Doom(t, absl::ResourceExhaustedError(absl::StrCat(
                      "txn: allocation of ", size,
                      " bytes failed: ", alloc::AllocErrorName(alloc::Heap::LastError()))));
    return nullptr;
  }
  t.allocs.push_back({pool.offset_of(p), bytes, heap.UsableSize(p)});
  t.hot.words.store(0, std::memory_order_relaxed);  // add() must check the fresh blocks
  return p;
}

absl::Status Engine::Impl::TxFree(ThreadTx& t, void* p) {
  if (t.aborted) return absl::AbortedError("txn: pdelete in an aborted transaction");
  if (!t.doom.ok()) return t.doom;
  const uint64_t off = pool.offset_of(p);
  for (auto it = t.allocs.begin(); it != t.allocs.end(); ++it) {
    if (it->offset == off) {  // allocated in this transaction: never published
      t.allocs.erase(it);
      return heap.FreeUnpublished(p);
    }
  }
  for (const BlockRec& f : t.frees) {
    if (f.offset == off) {
      return absl::FailedPreconditionError(
          absl::StrCat("txn: double pdelete of the block at offset ", off, " in one transaction"));
    }
  }
  const size_t usable = heap.UsableSize(p);
  if (usable == 0) return heap.Free(p);  // the heap says why it is not a live block
  t.frees.push_back({off, usable / 8 * 8, usable});
  return absl::OkStatus();
}

// ---- the entry points (after the inline functions they expand) ----------------------------

absl::Status Engine::Begin() { return impl_->Begin(impl_->Local()); }
absl::Status Engine::Abort() { return impl_->Abort(impl_->Local()); }
absl::Status Engine::Add(const void* p, size_t n) { return impl_->Add(impl_->Local(), p, n); }
bool Engine::InTransaction() { return impl_->Local().depth > 0; }

}  // namespace pmrt::txn

namespace pmrt::txn_internal {

using txn::Engine;

absl::Status NoTransaction(const char* what) {
  return absl::FailedPreconditionError(
      absl::StrCat("txn::", what,
                   ": no transaction is open on this thread (a transaction belongs to the "
                   "thread that began it)"));
}

void* ThreadTx::TxAllocate(size_t size, size_t align) {
  return impl->TxAllocate(*this, size, align);
}
absl::Status ThreadTx::TxFree(void* p) { return impl->TxFree(*this, p); }
void ThreadTx::OnThreadExit() {
  if (depth > 0 && impl != nullptr) impl->AbortAtThreadExit(*this);
}

void ThreadTx::GrowWrites() {
  const size_t n = writes_size();
  const size_t cap = std::max<size_t>(64, 2 * static_cast<size_t>(hot.limit - hot.begin));
  auto grown = std::make_unique<WriteRec[]>(cap);
  std::copy(hot.begin, hot.end, grown.get());
  write_buf = std::move(grown);
  hot.begin = write_buf.get();
  hot.end = hot.begin + n;
  hot.limit = hot.begin + cap;
}

absl::Status AddGeneral(const void* p, size_t n) {
  Engine* e = Engine::Default();
  return e == nullptr ? NoEngine() : e->Add(p, n);
}

absl::Status BeginGeneral() {
  Engine* e = Engine::Default();
  return e != nullptr ? e->Begin() : NoEngine();
}

bool BeginFast() {
  // The common case: an outermost begin on the default engine by the thread of its previous
  // transaction; no call, no status to build (txn::begin, inline in txn.h, makes the OK one).
  if (Engine* e = Engine::Default(); e != nullptr) [[likely]] {
    Engine::Impl& i = *e->impl_;
    ThreadTx* t = i.LocalIfReady();
    uint64_t epoch;
    if (t != nullptr && i.BeginReady(*t) && epoch::Guard::TryEnter(i.epochs, *t->epoch_slot, epoch))
        [[likely]] {
      i.Entered(*t, epoch, /*is_default=*/true);
      return true;
    }
  }
  return false;
}
}  // namespace pmrt::txn_internal
