// Transactions: begin, add/write, commit, abort, and allocation inside transactions.
// docs/txn.md, "Commit" and "Cold words", has the store orders argued here.
#include "txn/txn.h"

#if defined(__x86_64__)
#include <cpuid.h>
#include <emmintrin.h>
#endif

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "txn/internal/engine_impl.h"

namespace pmrt::txn {

using txn_internal::BlockRec;
using txn_internal::EntryType;
using txn_internal::kCompactWritesAt;
using txn_internal::kMaxEntryWords;
using txn_internal::kMaxLinePad;
using txn_internal::MakeEntryHead;
using txn_internal::RecordHeader;
using txn_internal::RecordKind;
using txn_internal::ThreadTx;
using txn_internal::WordIndex;
using txn_internal::WriteRec;

}  // namespace pmrt::txn

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

namespace {

// Bytes of a logical entry of `n` payload bytes: its head, the length word, the padded bytes.
constexpr size_t LogicalEntryBytes(size_t n) { return 16 + (n + 7) / 8 * 8; }

absl::Status NoTransaction(const char* what) {
  return absl::FailedPreconditionError(
      absl::StrCat("txn::", what,
                   ": no transaction is open on this thread (a transaction belongs to the "
                   "thread that began it)"));
}

// Record builder over reserved log space.
class RecordWriter {
 public:
  explicit RecordWriter(uint8_t* at) : base_(at), p_(reinterpret_cast<uint64_t*>(at) + 4) {}
  void Data(uint64_t word, uint64_t n, const uint8_t* pool_base) {
    *p_++ = MakeEntryHead(EntryType::kData, n, word);
    if (n == 1) {  // the common case: no library call for 8 bytes
      std::memcpy(p_, pool_base + word * 8, 8);
    } else {
      std::memcpy(p_, pool_base + word * 8, n * 8);
    }
    p_ += n;
  }
  void Values(uint64_t word, uint64_t n, const uint64_t* values) {
    *p_++ = MakeEntryHead(EntryType::kData, n, word);
    std::memcpy(p_, values, n * 8);
    p_ += n;
  }
  void Mark(EntryType t, uint64_t word, uint64_t n) { *p_++ = MakeEntryHead(t, n, word); }
  void Logical(uint64_t tag, std::string_view bytes) {
    const uint64_t n = 1 + (bytes.size() + 7) / 8;
    *p_++ = MakeEntryHead(EntryType::kLogical, n, tag);
    p_[n - 1] = 0;  // the last word's padding
    *p_ = bytes.size();
    std::memcpy(p_ + 1, bytes.data(), bytes.size());
    p_ += n;
  }
  // Writes the header last-but-checksum; returns the record's size in bytes.
  size_t Finish(RecordKind kind, uint64_t stamp, uint64_t epoch, uint64_t gen) {
    const size_t words = static_cast<size_t>(p_ - reinterpret_cast<uint64_t*>(base_));
    FinishHeader(base_, words, kind, stamp, epoch, gen);
    return words * 8;
  }
  // The header of a record of `words` words (header included) whose entries follow it at
  // `base`, then its checksum over all of it.
  static void FinishHeader(void* base, size_t words, RecordKind kind, uint64_t stamp,
                           uint64_t epoch, uint64_t gen) {
    FinishHeader(base, words, kind, stamp, epoch, gen, /*crc=*/0);
    auto* h = static_cast<RecordHeader*>(base);
    h->crc = txn_internal::RecordCrc(h);
  }
  // The same with the checksum already computed (WriteSmallCommit).
  static void FinishHeader(void* base, size_t words, RecordKind kind, uint64_t stamp,
                           uint64_t epoch, uint64_t gen, uint32_t crc) {
    auto* h = static_cast<RecordHeader*>(base);
    h->words = static_cast<uint16_t>(words);
    h->kind = static_cast<uint16_t>(kind);
    h->crc = crc;
    h->stamp = stamp;
    h->epoch = epoch;
    h->gen = gen;
  }

 private:
  uint8_t* base_;
  uint64_t* p_;
};

// Runs of ascending consecutive words, each at most kMaxEntryWords long.
template <class F>
void ForEachRun(const std::vector<uint64_t>& sorted, F&& fn) {
  size_t i = 0;
  while (i < sorted.size()) {
    size_t j = i + 1;
    while (j < sorted.size() && sorted[j] == sorted[j - 1] + 1 && j - i < kMaxEntryWords) ++j;
    fn(i, j);
    i = j;
  }
}

#if defined(__x86_64__)
// One step of the record checksum (CRC32C, 8 bytes), for code compiled for SSE 4.2
// (WriteSmallCommitCrc); the same as RecordCrc's fast path.
#pragma GCC push_options
#pragma GCC target("sse4.2")
inline uint64_t Crc8(uint64_t crc, uint64_t v) { return __builtin_ia32_crc32di(crc, v); }
#pragma GCC pop_options
#else
inline uint64_t Crc8(uint64_t crc, uint64_t) { return crc; }  // never called
#endif

}  // namespace

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
  if (options.log_budget == 0) {
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
  s.log_budget = i.budget;
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
  return s;
}

// ---- the calling thread's transaction on the default engine ---------------------------------

namespace {
absl::Status NoEngine() {
  return absl::FailedPreconditionError("txn: no transaction engine is open (txn::Engine::Open)");
}
}  // namespace

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

// ---- Impl: transactions ---------------------------------------------------------------------

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
         store.blocks_in_use() < begin_stall_blocks_;
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
  if (options.background && store.blocks_in_use() >= stall_blocks_ &&
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
      // the reclaimer's cold CAS in Reclaim. (The data line is not registered dirty: a hot
      // word's committed value is in its newest record; the reclaimer writes the line back
      // when the word goes cold.)
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

absl::Status Engine::Impl::Snapshot(ThreadTx& t) {
  // Cold words have no live record, so nothing could restore them if an uncommitted value
  // reached media. Their current (committed) values go to the log first: records of kind
  // kSnapshot, flushed, then one fence; only then may the caller store to them.
  std::vector<uint64_t>& cold = t.cold;
  std::sort(cold.begin(), cold.end());
  const uint8_t* base = pool.base();
  txn_internal::Chain& log = store.chain(t.slot);
  const size_t max_bytes = store.max_record_bytes();
  std::vector<std::pair<uint64_t, uint64_t>> stamped;  // (first index in cold, stamp)
  size_t i = 0;
  while (i < cold.size()) {
    // As many words as fit in one record (runs of consecutive words share an entry head).
    size_t bytes = sizeof(RecordHeader), j = i;
    uint64_t run = 0;
    while (j < cold.size()) {
      const bool extends = j > i && cold[j] == cold[j - 1] + 1 && run < kMaxEntryWords;
      const size_t more = extends ? 8 : 16;
      if (bytes + more > max_bytes) break;
      bytes += more;
      run = extends ? run + 1 : 1;
      ++j;
    }
    const uint64_t stamp = next_stamp.fetch_add(1, std::memory_order_relaxed);
    absl::StatusOr<uint8_t*> reserved = store.Reserve(log, t.slot, bytes);
    if (!reserved.ok()) {
      // Whatever an earlier record of this call put in flight (a new block's table entry)
      // is fenced before the guard can end, as on the normal path.
      pool.persister().Fence(txn_internal::kSnapshotAbandonFence);
      return reserved.status();
    }
    uint8_t* at = *reserved;
    RecordWriter w(at);
    std::vector<uint64_t> part(cold.begin() + static_cast<ptrdiff_t>(i),
                               cold.begin() + static_cast<ptrdiff_t>(j));
    ForEachRun(part, [&](size_t a, size_t b) { w.Data(part[a], b - a, base); });
    const size_t written =
        w.Finish(RecordKind::kSnapshot, stamp, t.hot.epoch, store.BlockGen(log.tail));
    pool.persister().Flush(txn_internal::kSnapshotFlush, at, written);
    store.Publish(log, written);
    stamped.emplace_back(i, stamp);
    i = j;
  }
  // One fence for every snapshot record of this call. After it the old values are durable and
  // the in-place stores may reach media in any order.
  pool.persister().Fence(txn_internal::kSnapshotFence);
  t.snapshots.Add(stamped.size());
  t.snapshot_words.Add(cold.size());
  for (size_t r = 0; r < stamped.size(); ++r) {
    const size_t end = r + 1 < stamped.size() ? stamped[r + 1].first : cold.size();
    const uint32_t key = WordIndex::KeyOf(stamped[r].second);
    for (size_t c = stamped[r].first; c < end; ++c) {
      const uint64_t w = cold[c];
      // A cold word is written only by its holder: the reclaimer CASes only hot values.
      index->at(w).store(WordIndex::Pack(key, t.hot.epoch), std::memory_order_release);
      uint64_t old;
      std::memcpy(&old, base + w * 8, 8);
      t.PushWrite({w, old});
    }
  }
  KickIfOverTrigger();
  return absl::OkStatus();
}

[[gnu::always_inline]] inline void Engine::Impl::EndKeepingGuard(ThreadTx& t, bool small) {
  t.hot.end = t.hot.begin;
  // (hot.words stays: with tls_hot reset no add() reads it, and Commit's fast path needs depth 1.)
  if (txn_internal::tls_hot == &t.hot) txn_internal::tls_hot = &txn_internal::g_no_hot;
  // A small commit's transaction has neither (SmallCommitReady).
  if (!small && !t.allocs.empty()) t.allocs.clear();
  if (!small && !t.frees.empty()) t.frees.clear();
  if (!small && !t.logical.empty()) t.logical.clear();
  if (t.compact_at != kCompactWritesAt) t.compact_at = kCompactWritesAt;
  t.depth = 0;
  t.seq.store(t.seq.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);  // even
  alloc::tls_tx_scope = t.outer_scope;
  if (t.outer_scope != nullptr) t.outer_scope = nullptr;
}

[[gnu::always_inline]] inline absl::Status Engine::Impl::WriteSmallCommit(ThreadTx& t) {
#if defined(__x86_64__)
  if (txn_internal::g_crc_in_commit_loop) [[likely]] {
    if (t.writes_size() == 1 && CommitOne(t)) return absl::OkStatus();
    // (The record's largest size for its declarations: the header and a head and value each.)
    // On kPmem the streamed writer checks no site (PmemOps): with one disabled, the plain one,
    // which checks each. Under the simulator every call checks its own (SimOps).
    if (pool.persister().StreamsRecords(sizeof(RecordHeader) + 16 * t.writes_size())) {
      if (sim_seam_) [[unlikely]]
        return WriteSmallCommitStreamSim(t);
      if (!mutation::AnyDisabled()) return WriteSmallCommitStream(t);
    }
    return WriteSmallCommitCrc(t);
  }
#endif
  return WriteSmallCommitPortable(t);
}

[[gnu::always_inline]] inline bool Engine::Impl::CommitOne(ThreadTx& t) {
#if defined(__x86_64__)
  // One test of the mutation gate for all of the path's sites: with any site disabled (or a
  // mutant active), the general small commit, which checks each. Under the crash simulator
  // (kSim*) the path runs with every site checked by its own call (SimOps).
  const OnePath path = one_path_;
  if (path != OnePath::kNone && txn_internal::g_crc_in_commit_loop) [[likely]] {
    if (path < OnePath::kSimStream && !mutation::AnyDisabled()) [[likely]] {
      if (uint8_t* at = SmallCommitOneReady(t, path == OnePath::kClwbLine); at != nullptr)
          [[likely]] {
        return path == OnePath::kClwbLine ? CommitOneLine(t, at)
               : path == OnePath::kStream ? CommitOneStream(t, at)
                                          : CommitOneCrc(t, at);
      }
    } else if (path >= OnePath::kSimStream) {
      if (uint8_t* at = SmallCommitOneReady(t, path == OnePath::kSimClwbLine); at != nullptr)
        return CommitOneSim(t, at, path);
    }
  }
#else
  (void)t;
#endif
  return false;
}

[[gnu::always_inline]] inline uint8_t* Engine::Impl::SmallCommitOneReady(ThreadTx& t, bool line) {
  // The one-declaration commit makes no call (a call's return address, and the registers the
  // compiler keeps across it, are stores that the previous commit's fence holds back), so it
  // runs only where it needs none: room in the log's tail block (the record goes there), the
  // thread's persist counters made, and no reclaimer to wake (KickIfOverTrigger would call; no
  // block is taken since).
  if (epoch_internal::tls_counters == nullptr ||
      (store.blocks_in_use() >= kick_blocks_.load(std::memory_order_relaxed) &&
       !bg_kick_.load(std::memory_order_relaxed))) {
    return nullptr;
  }
  constexpr size_t kBytes = sizeof(RecordHeader) + 16;
  txn_internal::Chain& c = store.chain(t.slot);
  if (!line) return store.TryReserve(c, kBytes);
  // (Where c has no tail block, TryReserve fails whatever the size; the address is not used.)
  const uintptr_t at = reinterpret_cast<uintptr_t>(c.tail_at) + c.pos;
  return store.TryReserve(c, kBytes + txn_internal::LinePad(at, kBytes));
}

[[gnu::always_inline]] inline bool Engine::Impl::SmallCommitReady(const ThreadTx& t) const {
  // The common case: the outermost commit of a transaction on the default engine that is not
  // aborted, doomed or expired and has not allocated (each of which zeroes hot.words, as it
  // sends txn::add to its general path), with no free and 1 to kSmallCommitWrites declarations.
  return t.depth == 1 && t.hot.words.load(std::memory_order_relaxed) != 0 && t.frees.empty() &&
         t.writes_size() - 1 < txn_internal::kSmallCommitWrites;
}

[[gnu::always_inline]] inline absl::Status Engine::Impl::Commit(ThreadTx& t) {
  if (SmallCommitReady(t)) [[likely]]
    return WriteSmallCommit(t);  // it ends the transaction, committed or not
  return CommitSlow(t);
}

absl::Status Engine::Impl::EndAfterCommit(ThreadTx& t, absl::Status st) {
  if (!st.ok() && !t.aborted) {  // (an inner abort has already restored memory)
    RollBack(t);
    t.aborts.Add(1);
  }
  End(t);
  return st;
}

absl::Status Engine::Impl::CommitSlow(ThreadTx& t) {
  if (t.depth == 0) return NoTransaction("commit");
  if (t.depth > 1) {  // flat nesting: an inner commit does nothing
    --t.depth;
    return t.aborted ? absl::AbortedError("txn::commit: the transaction was aborted") : t.doom;
  }
  absl::Status st = absl::OkStatus();
  if (t.aborted) {
    st = absl::AbortedError("txn::commit: the transaction was aborted at an inner level");
  } else if (pool.failed()) {
    st = pool.health();  // the failed mode: nothing more can be made durable; rolled back
  } else if (t.Expired()) {
    st = absl::DeadlineExceededError(
        absl::StrCat("txn::commit: the transaction was open longer than ", options.max_open.count(),
                     " ms and was aborted"));
  } else if (!t.doom.ok()) {
    st = t.doom;
  } else if (t.allocs.empty() && t.frees.empty() && t.logical.empty() &&
             t.writes_size() <= txn_internal::kSmallCommitWrites) {
    if (!t.writes_empty()) [[likely]]
      return WriteSmallCommit(t);  // it ends the transaction, committed or not
  } else {
    st = WriteCommit(t);
    // Its fence failed (the failed mode): the transaction took effect, but whether its record
    // is durable is unknown, and the caller is told so (as the small commit does).
    if (st.ok() && pool.failed()) {
      (void)EndAfterCommit(t, absl::OkStatus());
      return pool.health();
    }
  }
  return EndAfterCommit(t, std::move(st));
}

absl::Status Engine::Impl::WriteCommit(ThreadTx& t) {
  // 1. The record's entries: each declared word once (its value now, the transaction's last),
  //    whole new blocks, allocations and frees. Declared words inside blocks freed here are
  //    dropped: the free's tombstone covers them.
  std::vector<uint64_t>& words = t.words;
  words.clear();
  if (t.allocs.empty() && t.writes_size() <= txn_internal::SmallWordSet::kMaxWords) {
    // The common case: each word once, in declaration order (a range declared in ascending
    // order still forms one run). No sort: a record's entries may come in any order.
    t.small_set.Reset();
    for (const WriteRec* w = t.hot.begin; w != t.hot.end; ++w)
      if (t.small_set.Insert(w->word)) words.push_back(w->word);
  } else {
    for (const WriteRec* w = t.hot.begin; w != t.hot.end; ++w) words.push_back(w->word);
  }
  if (!t.frees.empty()) {
    std::erase_if(words, [&](uint64_t w) {
      for (const BlockRec& f : t.frees)
        if (w >= f.offset / 8 && w < (f.offset + f.bytes) / 8) return true;
      return false;
    });
  }
  for (const BlockRec& a : t.allocs)
    for (uint64_t w = a.offset / 8; w < (a.offset + a.bytes) / 8; ++w) words.push_back(w);
  if (!t.allocs.empty() || t.writes_size() > txn_internal::SmallWordSet::kMaxWords) {
    std::sort(words.begin(), words.end());
    words.erase(std::unique(words.begin(), words.end()), words.end());
  }
  size_t bytes = sizeof(RecordHeader) + 8 * (t.allocs.size() + t.frees.size());
  // (Under the gate's mutant the record leaves them out: a rolled-back epoch then loses them.)
  const bool logical = !mutation::Swapped(txn_internal::kDropLogicalMutant);
  for (const txn_internal::LogicalRec& l : t.logical)
    if (logical) bytes += LogicalEntryBytes(l.bytes.size());
  ForEachRun(words, [&](size_t a, size_t b) { bytes += 8 + 8 * (b - a); });
  if (bytes > store.max_record_bytes()) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "txn::commit: the transaction's record (", bytes, " bytes) does not fit in a log block (",
        store.max_record_bytes(), "); use smaller transactions or a larger block_size"));
  }
  // 2. The commit-order stamp. Taken while the caller still holds its locks: a conflicting
  //    transaction that commits later (after our unlock) takes a larger one.
  const uint64_t stamp = next_stamp.fetch_add(1, std::memory_order_relaxed);
  txn_internal::Chain& log = store.chain(t.slot);
  ASSIGN_OR_RETURN(uint8_t * at, store.Reserve(log, t.slot, bytes));
  // 3. Build the record in the thread's staging buffer (cached); its checksum (computed last,
  //    over everything) is the commit mark.
  const uint8_t* base = pool.base();
  if (t.stage == nullptr) t.stage = std::make_unique<uint64_t[]>(store.max_record_bytes() / 8);
  RecordWriter w(reinterpret_cast<uint8_t*>(t.stage.get()));
  ForEachRun(words, [&](size_t a, size_t b) { w.Data(words[a], b - a, base); });
  for (const BlockRec& a : t.allocs) w.Mark(EntryType::kAlloc, a.offset / 8, a.usable / 8);
  for (const BlockRec& f : t.frees) w.Mark(EntryType::kFree, f.offset / 8, f.bytes / 8);
  for (const txn_internal::LogicalRec& l : t.logical)
    if (logical) w.Logical(l.tag, l.bytes);
  const size_t written =
      w.Finish(RecordKind::kCommit, stamp, t.hot.epoch, store.BlockGen(log.tail));
  // 4. Copy the record into the log (CopyFlush: as stores + flush of its lines; non-temporal
  //    stores or stores + clwb, as the pool's record writes say; Reserve flushed a new block's
  //    header, link, head and table entry), then the one fence of the commit. Before it completes
  //    the record may be on media whole (the transaction counts as committed: allowed, commit has
  //    not returned), torn (bad checksum: recovery stops this log there) or absent. The data lines
  //    are not flushed: the record redoes them (written back when a word goes cold, or at close).
  pool.persister().CopyFlush(txn_internal::kCommitFlush, at, t.stage.get(), written);
  pool.persister().Fence(txn_internal::kCommitFence);
  store.Publish(log, written);
  // 5. The index: the record is now the newest of each of its words. A freed block's words go
  //    cold (nothing may be replayed into the block's next life).
  const uint32_t key = WordIndex::KeyOf(stamp);
  for (uint64_t wd : words) {
    index->at(wd).store(WordIndex::Pack(key, t.hot.epoch), std::memory_order_release);
  }
  // Each such word's line stops being fast (docs/txn.md, "Fast lines"): the slot first, then
  // the byte (kFreed), seq_cst, so that the reclaimer's check of the line (kChecking, the 8
  // slots, then kFast by CAS) either reads the cold slot or has its CAS fail on this byte. A
  // byte that reads 0 (seq_cst, after the slot's store) needs no store: a check that starts
  // after this load reads the cold slot. No other transaction declares the freed words
  // meanwhile (they are this one's until the heap frees them in step 6), but one may hold
  // another word of the line, declared on the fast path: the reclaimer makes no word of a kFreed
  // line cold before the grace period of its own unmarking (Reclaim).
  for (const BlockRec& f : t.frees) {
    uint64_t done_line = ~uint64_t{0};
    for (uint64_t wd = f.offset / 8; wd < (f.offset + f.bytes) / 8; ++wd) {
      if (index->at(wd).load(std::memory_order_relaxed) == 0) continue;
      index->at(wd).store(0, std::memory_order_seq_cst);
      if (WordIndex::LineOf(wd) == done_line) continue;
      done_line = WordIndex::LineOf(wd);
      std::atomic<uint8_t>& line = index->line(done_line);
      const uint8_t b = line.load(std::memory_order_seq_cst);
      if (b == WordIndex::kFast || b == WordIndex::kChecking)
        line.store(WordIndex::kFreed, std::memory_order_seq_cst);
    }
  }
  // 6. The frees, epoch-scoped in this epoch like the record: if the epoch fails, the heap
  //    rolls them back and recovery replays them from the record.
  for (const BlockRec& f : t.frees) {
    if (absl::Status st = heap.Free(pool.at(f.offset)); !st.ok()) {
      std::fprintf(stderr, "pmrt txn: free at commit failed: %s\n", st.ToString().c_str());
    }
  }
  t.commits.Add(1);
  t.record_bytes.Add(written);
  KickIfOverTrigger();
  return absl::OkStatus();
}

// WriteCommit for the common transaction: declared words only (no allocation, no free), at most
// kSmallCommitWrites declarations. The same record as the general path and one fence, written
// straight into the log (no staging buffer, no word vector, no sort), its shape found first in
// registers, and the log's room taken without a call while the tail block has it.
absl::Status Engine::Impl::WriteSmallCommitPortable(ThreadTx& t) {
  return WriteSmallCommitBody<false, false>(t);
}

#if defined(__x86_64__)
// Compiled for SSE 4.2 (its crc32 instruction inside the entry loop); called only where the
// processor has it.
[[gnu::target("sse4.2")]] absl::Status Engine::Impl::WriteSmallCommitCrc(ThreadTx& t) {
  return WriteSmallCommitBody<true, false>(t);
}
[[gnu::target("sse4.2")]] absl::Status Engine::Impl::WriteSmallCommitStream(ThreadTx& t) {
  return WriteSmallCommitBody<true, true>(t);
}
// (The body cannot fail with one declaration: true.)
[[gnu::target("sse4.2")]] bool Engine::Impl::CommitOneCrc(ThreadTx& t, uint8_t* at) {
  return WriteSmallCommitBody<true, false, true>(t, at).ok();
}
[[gnu::target("sse4.2")]] bool Engine::Impl::CommitOneLine(ThreadTx& t, uint8_t* at) {
  return WriteSmallCommitBody<true, false, true, true>(t, at).ok();
}
[[gnu::target("sse4.2")]] bool Engine::Impl::CommitOneStream(ThreadTx& t, uint8_t* at) {
  return WriteSmallCommitBody<true, true, true>(t, at).ok();
}
[[gnu::target("sse4.2")]] absl::Status Engine::Impl::WriteSmallCommitStreamSim(ThreadTx& t) {
  return WriteSmallCommitBody<true, true, false, false, SimOps>(t);
}
[[gnu::target("sse4.2")]] bool Engine::Impl::CommitOneSim(ThreadTx& t, uint8_t* at, OnePath path) {
  switch (path) {
    case OnePath::kSimStream:
      return WriteSmallCommitBody<true, true, true, false, SimOps>(t, at).ok();
    case OnePath::kSimClwbLine:
      return WriteSmallCommitBody<true, false, true, true, SimOps>(t, at).ok();
    default:
      return WriteSmallCommitBody<true, false, true, false, SimOps>(t, at).ok();
  }
}
#endif

absl::Status Engine::Impl::SmallCommitFailed(ThreadTx& t, absl::Status st) {
  return EndAfterCommit(t, std::move(st));
}

namespace {
// Two bits of a 64-bit filter for a word (a Bloom filter with k = 2 over a multiplicative
// hash): with 16 different words, a word finds both its bits set by others with probability
// ~0.14 at most (0.9 look-ups per 16-word transaction; one bit: ~1.9).
inline uint64_t FilterBits(uint64_t word) {
  const uint64_t h = word * 0x9E3779B97F4A7C15ull;
  return uint64_t{1} << (h >> 58) | uint64_t{1} << ((h >> 52) & 63);
}

// The value of pool word `wd` now (at commit: the transaction's last).
inline uint64_t ValueOf(const uint8_t* base, uint64_t wd) {
  uint64_t value;
  std::memcpy(&value, base + wd * 8, 8);
  return value;
}

// A single-word data entry of word `wd`: its head and the word's value now (the
// transaction's last), folded into the record's checksum where it is computed as it goes.
template <bool kCrcInLoop>
[[gnu::always_inline]] inline std::pair<uint64_t, uint64_t> SingleEntry(uint64_t wd,
                                                                        const uint8_t* base,
                                                                        uint64_t& crc) {
  const uint64_t head = MakeEntryHead(EntryType::kData, 1, wd);
  const uint64_t value = ValueOf(base, wd);
  if constexpr (kCrcInLoop) crc = Crc8(Crc8(crc, head), value);
  return {head, value};
}

// Two words {lo, hi} at d (8-byte aligned) as one 16-byte store (movups on x86-64): one entry of
// the store buffer instead of two, so one store fewer for the commit's fence to hold back.
[[gnu::always_inline]] inline void Store16(uint64_t* d, uint64_t lo, uint64_t hi) {
#if defined(__x86_64__)
  _mm_storeu_si128(reinterpret_cast<__m128i*>(d),
                   _mm_set_epi64x(static_cast<long long>(hi), static_cast<long long>(lo)));
#else
  d[0] = lo;
  d[1] = hi;
#endif
}

// Puts the words of a record into the log, in order, starting with `first` at `d`: with
// kStream by non-temporal stores (Ops::Stream8; two words that fill an aligned 16 bytes go as
// one Stream16, so the fence holds back half as many stores), otherwise by plain stores
// (flushed by the caller).
template <bool kStream, class Ops>
class WordSink {
 public:
  [[gnu::always_inline]] WordSink(const Persister& p, uint64_t* d, uint64_t first) : p_(p), d_(d) {
    if constexpr (kStream) {
      if ((reinterpret_cast<uintptr_t>(d_) & 8) != 0) {
        Ops::Stream8(p_, txn_internal::kStreamRuns, d_, first);  // the second half of a pair: alone
      } else {
        pending_ = first;
      }
      ++d_;
    } else {
      *d_++ = first;
    }
  }
  [[gnu::always_inline]] void Put(uint64_t v) {
#if defined(__x86_64__)
    if constexpr (kStream) {
      if ((reinterpret_cast<uintptr_t>(d_) & 8) == 0) {
        pending_ = v;  // the first half of an aligned pair
      } else {         // the second half: the first is pending (this is not the first word)
        Ops::Stream16(p_, txn_internal::kStreamRuns, d_ - 1, pending_, v);
      }
      ++d_;
      return;
    }
#endif
    *d_++ = v;
  }
  // Puts a first half left pending.
  [[gnu::always_inline]] void End() {
    if constexpr (kStream) {
      if ((reinterpret_cast<uintptr_t>(d_) & 8) != 0) {
        Ops::Stream8(p_, txn_internal::kStreamRuns, d_ - 1, pending_);
      }
    }
  }

 private:
  const Persister& p_;
  uint64_t* d_;
  uint64_t pending_ = 0;
};
}  // namespace

// Stamps a thread takes at once for its small commits, and how far the shared counter may run
// ahead of a block's first stamp before the block is given up (below).
inline constexpr uint64_t kStampBlock = 64;
// How far ahead of its record a small commit fetches the log for writing (above): 256 to 1024
// bytes measured alike at K = 1 (+3%), 4096 less.
inline constexpr size_t kLogWriteAhead = 512;
inline constexpr uint64_t kStampWindow = uint64_t{1} << 29;

// Whether the record whose index key is `key` has a smaller stamp than s, for a thread whose
// block begins at lo (lo_key = KeyOf(lo)) and has used [lo, s) (`used` = s - lo). A thread key
// gives its stamp modulo 2^31 - 1 only; d = (stamp - lo) mod that is below `used` for this
// thread's own stamps, and at least half the modulus for a stamp up to 2^30 below lo (one
// further below may answer false: a needless new block, never a wrong order). A stamp at or
// above s gives d in [used, 2^29), so false, as long as no stamp in use is more than 2^29
// above lo: SmallCommitStamp gives the block up before the shared counter gets that far. A
// cold slot answers false too.
[[gnu::always_inline]] inline bool StampPrecedes(uint32_t key, uint32_t lo_key, uint64_t used) {
  if (WordIndex::IsCompactKey(key)) return true;  // K's entries from before this open
  if (key == 0) return false;  // cold: not at commit (touch slack, fast lines' grace); safe
  constexpr uint32_t m = WordIndex::kKeyModulus;
  const uint32_t d = key >= lo_key ? key - lo_key : key + m - lo_key;
  return d < used || d >= m / 2;
}

// KeyAfter gives KeyOf of the block's later stamps (SmallCommitStamp): checked across a wrap of
// the key modulus.
constexpr bool KeyAfterIsKeyOf() {
  constexpr uint64_t m = WordIndex::kKeyModulus;
  for (const uint64_t s : {uint64_t{0}, m - kStampBlock, m - 1, 2 * m - 7, 5 * m + 3}) {
    for (uint32_t n = 0; n < kStampBlock; ++n) {
      if (WordIndex::KeyAfter(WordIndex::KeyOf(s), n) != WordIndex::KeyOf(s + n)) return false;
    }
  }
  return true;
}
static_assert(KeyAfterIsKeyOf());

// Whether no stamp has been handed out since the calling thread's block, which has a stamp left
// (docs/txn.md, "Commit order"): then every stamp in use is below the block's end, and those in
// the block that are in use are the thread's own, below its next stamp; so the newest record of
// every word is older than that stamp and the commit takes it without reading any index slot.
// The record of a declared word that another thread wrote was stamped before that thread's
// commit returned, and so before the caller's isolation (its lock) passed the word to this
// transaction: this relaxed read of the counter, after that, sees the stamp's fetch_add.
// (add() no longer reads the slot of a word in a fast line, so its acquire load is not what
// orders this read.) This transaction's own
// snapshots took stamps from the counter, so a transaction with one is not solo.
[[gnu::always_inline]] inline bool Engine::Impl::SmallCommitSolo(const ThreadTx& t) const {
  // (The mutant counts a commit as solo whatever the counter says.)
  return t.stamp_next < t.stamp_end && (next_stamp.load(std::memory_order_relaxed) == t.stamp_end ||
                                        mutation::Swapped(txn_internal::kSoloMutant));
}

// The commit order (docs/txn.md, "Commit order"): recovery replays records by stamp, so a
// record must have a larger stamp than every earlier record of each of its words, and stamps
// are unique. The shared counter hands out stamps one at a time to the general commit and to
// snapshots, and in blocks of kStampBlock here: every stamp it hands out is above every stamp
// handed out before, so only a record from a block handed out after this thread's (another
// thread's) can be newer than s. Each declared word's index slot holds the key of its newest
// record (this transaction's writes are not published until after its fence); when one is not
// provably older, the commit takes a new block, which starts above it. The slots are re-read
// with acquire (lines add() has just touched): a key seen pairs with its writer's index store,
// after that writer took its stamp, so the counter read after them is at least that stamp
// plus one, and the window test keeps every such stamp within 2^29 of lo.
// (The slots are read by the caller, in the loop that makes the record's shape: one pass over the
// declarations instead of two. `older` is only used while the block has stamps left.)
// `solo` (SmallCommitSolo) needs no slot at all: no stamp has been handed out since the block.
[[gnu::always_inline]] inline uint64_t Engine::Impl::SmallCommitStamp(ThreadTx& t, bool solo,
                                                                      bool older,
                                                                      uint32_t& stamp_key) {
  const uint64_t s = t.stamp_next;
  if (s < t.stamp_end) [[likely]] {
    const uint32_t lo_key = t.stamp_lo_key;
    const uint64_t used = s - t.stamp_lo;
    // (The mutant takes the block's next stamp whatever the slots say.)
    if (solo || ((older || mutation::Swapped(txn_internal::kStampMutant)) &&
                 next_stamp.load(std::memory_order_relaxed) - t.stamp_lo <= kStampWindow))
        [[likely]] {
      t.stamp_next = s + 1;
      stamp_key = WordIndex::KeyAfter(lo_key, static_cast<uint32_t>(used));  // used < kStampBlock
      return s;
    }
  }
  const uint64_t b = next_stamp.fetch_add(kStampBlock, std::memory_order_relaxed);
  t.stamp_lo = b;
  t.stamp_lo_key = stamp_key = WordIndex::KeyOf(b);
  t.stamp_next = b + 1;
  t.stamp_end = b + kStampBlock;
  return b;
}

template <bool kCrcInLoop, bool kStream, bool kOne, bool kLine, class Ops>
[[gnu::always_inline]] inline absl::Status Engine::Impl::WriteSmallCommitBody(ThreadTx& t,
                                                                              uint8_t* one_at) {
  const Persister& persister = pool.persister();
  static_assert(kCrcInLoop || !kStream, "a streamed record's checksum is computed as it goes");
  static_assert(!kLine || (kOne && !kStream && kCrcInLoop), "only the clwb one-word commit pads");
  // The failed mode (an msync error: only the paths that fence with Persister::Fence can meet
  // it): nothing more can be made durable, so the transaction is rolled back.
  if constexpr (!kOne && !kStream) {
    if (persister.failed()) [[unlikely]]
      return SmallCommitFailed(t, pool.health());
  }
  const WriteRec* const wb = t.hot.begin;
  const size_t k = kOne ? 1 : t.writes_size();  // 1 to kSmallCommitWrites
  static_assert(txn_internal::kSmallCommitWrites <= 64, "one bit per declaration below");
  // 1. The record's shape, in registers only (every store made here is one more that the
  //    previous commit's fence may hold back; docs/txn.md, "Stores after the fence"): which
  //    declarations repeat an earlier one's word (`dups`: dropped) and which extend a run of
  //    ascending consecutive words (`joins`: they share the head of the run before them, as
  //    ForEachRun makes them). Without joins (the common case) every entry holds a single
  //    word, in declaration order (streamed in pairs, below). A 64-bit filter with two bits
  //    per word (on a hash of it) sends only a word whose bits are both set already to a
  //    look-up among the earlier declarations.
  //    The same pass reads each word's index slot for the commit-order stamp (step 2): whether
  //    its newest record is older than the next stamp of the thread's block (`older`).
  uint64_t filter = 0, dups = 0, joins = 0;
  uint64_t prev = wb[0].word - 2;  // the last kept word (this one extends nothing)
  std::atomic<uint64_t>* const slots = &index->at(0);
  const uint32_t lo_key = t.stamp_lo_key;
  const uint64_t used = t.stamp_next - t.stamp_lo;
  auto precedes = [&](uint64_t wd) {
    return StampPrecedes(WordIndex::Key(slots[wd].load(std::memory_order_acquire)), lo_key, used);
  };
  // No stamp handed out since the thread's block (and the block has one left): every record of
  // every word is older than the block's next stamp, and no slot needs reading.
  const bool solo = SmallCommitSolo(t);
  bool older = true;
  // The loop is written twice, with the slot reads and without (no test of `solo` per
  // declaration); one declaration repeats and extends nothing, so k = 1, the most common
  // transaction of all, skips it.
  auto shape = [&](auto solo_constant) {
    constexpr bool kSolo = decltype(solo_constant)::value;
    if (k == 1) {
      if constexpr (!kSolo) older = precedes(wb[0].word);
      return;
    }
    uint64_t bit = 1;  // the declaration's bit
    for (const WriteRec* w = wb; w != wb + k; ++w, bit <<= 1) {
      const uint64_t wd = w->word;
      const uint64_t bits = FilterBits(wd);
      if ((filter & bits) == bits) [[unlikely]] {
        bool dup = false;
        for (const WriteRec* e = wb; e != w && !dup; ++e) dup = e->word == wd;
        if (dup) {
          dups |= bit;
          continue;
        }
      }
      if constexpr (!kSolo) older &= precedes(wd);
      filter |= bits;
      if (wd == prev + 1) [[unlikely]]
        joins |= bit;
      prev = wd;
    }
  };
  if (solo) {
    shape(std::true_type{});
  } else {
    shape(std::false_type{});
  }
  const uint64_t all = k == 64 ? ~uint64_t{0} : (uint64_t{1} << k) - 1;
  const uint64_t keep = all & ~dups;      // the first declaration of each word
  const uint64_t starts = keep & ~joins;  // those that start an entry
  const auto kept = static_cast<size_t>(__builtin_popcountll(keep));
  const auto runs = static_cast<size_t>(__builtin_popcountll(starts));
  static_assert(txn_internal::kSmallCommitWrites < kMaxEntryWords, "a run fits in one entry");
  // The record of one declaration ends at its cache line's end, padded with kPadWord, where the
  // engine pads (pad_ones_: a version-2 directory, records not streamed), so that the next record
  // starts on a line of its own. Unpadded, three one-word records in four write a line that the
  // previous commit has just written back, and half of them write back two lines; padded, each
  // writes back one line that no earlier commit wrote (docs/txn.md, "Line-ending records"). The
  // one-word commit's room for the pad is SmallCommitOneReady's (kLine); the general path
  // reserves room for the largest pad and takes what the record's address needs.
  size_t pad_words = 0;
  if constexpr (kLine) {
    pad_words =
        txn_internal::LinePad(reinterpret_cast<uintptr_t>(one_at), sizeof(RecordHeader) + 16) / 8;
  }
  [[maybe_unused]] const bool pad_one = !kOne && !kStream && k == 1 && pad_ones_;
  size_t rec_words = sizeof(RecordHeader) / 8 + runs + kept + pad_words;
  size_t bytes = rec_words * 8;
  static_assert(sizeof(RecordHeader) + 16 * txn_internal::kSmallCommitWrites <=
                    txn_internal::kMinBlockSize - txn_internal::kBlockPayload,
                "a small commit's record fits in any log block");
  // 2. The commit-order stamp (chosen while the caller still holds its locks, as in
  //    WriteCommit; from the thread's block, without a locked instruction, when no declared
  //    word's newest record is newer) and room in the log, taken without a call while the tail
  //    block has it.
  uint32_t stamp_key;
  const uint64_t stamp = SmallCommitStamp(t, solo, older, stamp_key);
  txn_internal::Chain& log = store.chain(t.slot);
  uint8_t* at = kOne ? one_at : store.TryReserve(log, bytes + (pad_one ? kMaxLinePad : 0));
  if constexpr (!kOne) {  // (kOne: there is room, SmallCommitOneReady)
    if (at == nullptr) [[unlikely]] {
      absl::StatusOr<uint8_t*> r = store.Reserve(log, t.slot, bytes + (pad_one ? kMaxLinePad : 0));
      if (!r.ok()) return SmallCommitFailed(t, r.status());
      at = *r;
    }
    if (pad_one) {
      pad_words = txn_internal::LinePad(reinterpret_cast<uintptr_t>(at), bytes) / 8;
      rec_words += pad_words;
      bytes = rec_words * 8;
    }
  }
  // The log line this thread's commit writes a few commits from now (kLogWriteAhead bytes on),
  // fetched for writing while this record is built, so that a record's first store to a new
  // line does not wait for the line (our reading of the gain: a freed block comes back from the
  // reclaimer, whose core read its lines last; the floor's ring, which no other core reads, did
  // not slow down at 64 MiB instead of 1 MiB). Past the block's end it fetches
  // another block's line, or none: a hint, never a fault (docs/txn.md, "Design notes", "Write
  // prefetches", measures it with the slot's prefetch in add()).
  txn_internal::PrefetchForWrite(at + kLogWriteAhead);
  // (at == BlockAt(log.tail) + log.pos, as read again below; kOne keeps what it needs of the
  // chain in registers instead, the position to publish among them.)
  const uint64_t gen = store.BlockGen(log.tail);
  const uint64_t one_published = kOne ? txn_internal::LogStore::PublishedAfter(log, bytes) : 0;
  // 3. The record, straight into the log: the header's words after the first (stamp, epoch,
  //    gen), the entries (each word's value now, the transaction's last), and the checksum
  //    alongside (the header first with its crc field taken as zero, as RecordCrc computes
  //    it); then the header's first word, which holds the checksum. Before the fence the record
  //    may be on media whole, torn or absent in any mix of its words; only the checksum, over
  //    all of it, marks it committed.
  uint64_t crc = 0xFFFFFFFFu;
  const uint64_t head0 = rec_words | static_cast<uint64_t>(RecordKind::kCommit) << 16;
  if constexpr (kCrcInLoop) {
    crc = Crc8(crc, head0);
    crc = Crc8(crc, stamp);
    crc = Crc8(crc, t.hot.epoch);
    crc = Crc8(crc, gen);
  }
  {
    const uint8_t* const base = pool.base();
    auto* const d = reinterpret_cast<uint64_t*>(at);
    // Single-word entries only (no run; duplicates dropped): each entry is {head, value}, so
    // the stream goes in 16-byte pairs without a per-word test of the alignment; the words are
    // those `keep` names (all when none repeats), in declaration order. (The four loops are
    // written out: with the entry's stores in a lambda, GCC 12 made each K = 16 transaction
    // ~8% more instructions, callgrind.)
    if constexpr (kOne && !kStream) {
      // One entry: the checksum first, then the record's six words as three 16-byte stores.
      const auto [head, value] = SingleEntry<kCrcInLoop>(wb[0].word, base, crc);
      if constexpr (kLine) {
        for (size_t i = 0; i < pad_words; ++i) crc = Crc8(crc, txn_internal::kPadWord);
      }
      Store16(d, head0 | static_cast<uint64_t>(~static_cast<uint32_t>(crc)) << 32, stamp);
      Store16(d + 2, t.hot.epoch, gen);
      Store16(d + 4, head, value);
      if constexpr (kLine) {
        for (size_t i = 0; i < pad_words; ++i) d[6 + i] = txn_internal::kPadWord;
      }
    } else if (kStream && joins == 0 && (reinterpret_cast<uintptr_t>(d) & 8) == 0) {
      // A 16-byte-aligned record: word 1 | words 2-3 | each entry {head, value}: aligned pairs.
      Ops::Stream8(persister, txn_internal::kStreamPairs, d + 1, stamp);
      Ops::Stream16(persister, txn_internal::kStreamPairs, d + 2, t.hot.epoch, gen);
      uint64_t* e = d + sizeof(RecordHeader) / 8;
      if (dups == 0) {
        for (const WriteRec* w = wb; w != wb + k; ++w, e += 2) {
          const auto [head, value] = SingleEntry<kCrcInLoop>(w->word, base, crc);
          Ops::Stream16(persister, txn_internal::kStreamPairs, e, head, value);
        }
      } else {
        for (uint64_t m = keep; m != 0; m &= m - 1, e += 2) {
          const auto [head, value] =
              SingleEntry<kCrcInLoop>(wb[__builtin_ctzll(m)].word, base, crc);
          Ops::Stream16(persister, txn_internal::kStreamPairs, e, head, value);
        }
      }
    } else if (kStream && joins == 0) {
      // The other alignment: words 1-2 | word 3 and the first head | each value with the next
      // head | the last value alone.
      Ops::Stream16(persister, txn_internal::kStreamOdd, d + 1, stamp, t.hot.epoch);
      uint64_t carry = gen;
      uint64_t* e = d + 3;
      if (dups == 0) {
        for (const WriteRec* w = wb; w != wb + k; ++w, e += 2) {
          const auto [head, value] = SingleEntry<kCrcInLoop>(w->word, base, crc);
          Ops::Stream16(persister, txn_internal::kStreamOdd, e, carry, head);
          carry = value;
        }
      } else {
        for (uint64_t m = keep; m != 0; m &= m - 1, e += 2) {
          const auto [head, value] =
              SingleEntry<kCrcInLoop>(wb[__builtin_ctzll(m)].word, base, crc);
          Ops::Stream16(persister, txn_internal::kStreamOdd, e, carry, head);
          carry = value;
        }
      }
      Ops::Stream8(persister, txn_internal::kStreamOdd, e, carry);
    } else {
      const bool single = joins == 0;  // no run of two words or more
      WordSink<kStream, Ops> sink(persister, d + 1, stamp);
      sink.Put(t.hot.epoch);
      sink.Put(gen);
      for (uint64_t m = keep; m != 0; m &= m - 1) {
        const unsigned i = static_cast<unsigned>(__builtin_ctzll(m));
        const uint64_t wd = wb[i].word;
        if ((starts >> i & 1) != 0) {
          uint64_t n = 1;
          if (!single) [[unlikely]] {  // the run's length: its declarations kept up to the next
            const uint64_t after = ~uint64_t{0} << i << 1;  // declarations after i
            const uint64_t next = starts & after;
            const uint64_t upto = next == 0 ? ~uint64_t{0} : (next & -next) - 1;
            n += static_cast<uint64_t>(__builtin_popcountll(keep & after & upto));
          }
          const uint64_t head = MakeEntryHead(EntryType::kData, n, wd);
          sink.Put(head);
          if constexpr (kCrcInLoop) crc = Crc8(crc, head);
        }
        const uint64_t value = ValueOf(base, wd);
        sink.Put(value);
        if constexpr (kCrcInLoop) crc = Crc8(crc, value);
      }
      for (size_t i = 0; i < pad_words; ++i) {  // (pad_one)
        sink.Put(txn_internal::kPadWord);
        if constexpr (kCrcInLoop) crc = Crc8(crc, txn_internal::kPadWord);
      }
      sink.End();
    }
  }
  // What follows reads the log position, the block's gen and the epoch again rather than keep
  // them in registers across the loop (the stores above may alias them, so the compiler cannot
  // reuse them): spilling them would be stores too. kOne has no loop and few live values: it
  // keeps the record's address and the position to publish (bench/fence_path.sh: 454 -> 406
  // instructions from one commit's fence to the next with the other changes of that commit).
  txn_internal::Chain& tail = kOne ? log : store.chain(t.slot);
  auto* const rec = reinterpret_cast<uint64_t*>(kOne ? at : store.BlockAt(tail.tail) + tail.pos);
  if constexpr (kOne && !kStream) {
    // (stored above, with the rest)
  } else if constexpr (kCrcInLoop) {
    const uint64_t h0 = head0 | static_cast<uint64_t>(~static_cast<uint32_t>(crc)) << 32;
    if constexpr (kStream) {
      Ops::Stream8(persister, txn_internal::kStreamHead, rec, h0);
    } else {
      *rec = h0;
    }
  } else {
    RecordWriter::FinishHeader(rec, rec_words, RecordKind::kCommit, stamp, t.hot.epoch,
                               store.BlockGen(tail.tail));
  }
  if constexpr (kOne) {  // (the counters exist, no site is disabled: CommitOne)
    if constexpr (!kStream) Ops::Clwb(persister, txn_internal::kOneClwb, rec, bytes);
    Ops::CountFlush(persister, *epoch_internal::tls_counters, rec, bytes);
  } else if constexpr (kStream) {
    persister.CountStream(rec, bytes);
  } else {
    persister.Flush(txn_internal::kSmallFlush, rec, bytes);
  }
  // The transaction's volatile bookkeeping and the statistics go before the fence, where they
  // overlap the drain of the record's stores. The record is complete, so nothing below can
  // fail; the transaction ends here.
  if constexpr (kOne) {
    static_assert(sizeof(RecordHeader) + 16 == 48,
                  "stats() counts one_commits' bytes so (their line padding left out)");
    t.one_commits.Add(1);
  } else {
    t.commits.Add(1);
    t.record_bytes.Add(bytes - pad_words * 8);  // (line padding not counted: Stats)
    KickIfOverTrigger();  // (kOne: SmallCommitOneReady checked it; no block taken since)
  }
  // What the stores after the fence store, computed before it (see "Stores after the fence"
  // in docs/txn.md: the instructions after the fence wait in the reorder buffer until it
  // retires, and the fewer they are, the sooner the caller's next transaction starts its
  // misses).
  const uint64_t published =
      kOne ? one_published : txn_internal::LogStore::PublishedAfter(tail, bytes);
  const uint64_t v = WordIndex::Pack(stamp_key, t.hot.epoch);
  const WriteRec* const w_end = wb + k;
  epoch::ThreadSlot& guard_slot = *t.epoch_slot;
  EndKeepingGuard(t, /*small=*/true);
  // 4. The one fence, the commit point: a crash before it completes finds the record whole (the
  //    transaction counts as committed: allowed, commit has not returned), torn (bad checksum:
  //    this log ends there, the transaction is undone) or absent; after it, committed.
  //    Each fence is counted where it is issued (Ops::Fence, Persister::Fence).
  if constexpr (kOne) {
    Ops::Fence(persister, txn_internal::kOneFence, *epoch_internal::tls_counters);
  } else if constexpr (kStream) {
    Ops::Fence(persister, txn_internal::kStreamFence, epoch_internal::LocalCounters());
  } else {
    persister.Fence(txn_internal::kSmallFence);
  }
  store.PublishValue(tail, published);
  // 5. The index: the record is now the newest of each of its words (after the fence: the
  //    reclaimer may drop a word's older records once the index names a newer one). Straight
  //    from the write list (EndKeepingGuard emptied it but left its entries): a word declared
  //    twice gets the same value twice.
  for (const WriteRec* w = wb; w != w_end; ++w) slots[w->word].store(v, std::memory_order_release);
  // Last, the guard: the epoch cannot complete before the record is durable and published.
  epoch::Guard::Exit(guard_slot);
  // A fence that failed (the failed mode): the transaction took effect, but whether its record
  // is durable is unknown, and the caller is told so.
  if constexpr (!kOne && !kStream) {
    if (persister.failed()) [[unlikely]]
      return pool.health();
  }
  return absl::OkStatus();
}

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

void Engine::Impl::SetThresholds() {
  // The budget is the bound the log keeps under a steady load: above it, new transactions wait
  // for the reclaimer (the records of open ones may still take a block each, and a cycle holds
  // the old and the new compacted log at once until its descriptor switches).
  // A budget the block limit cannot hold is capped at 4/7 of it (64 MiB with 32 KiB blocks):
  // otherwise the logs would reach their limit before the reclaimer's trigger and every record
  // would fail with kResourceExhausted (the rest is for open transactions' records and, during
  // a full cycle, the old and the new compacted log).
  const uint64_t bs = store.block_size();
  const uint64_t limit = std::min<uint64_t>(store.limit_blocks(), txn_internal::kTableCapacity);
  budget = std::min<uint64_t>(options.log_budget, limit * 4 / 7 * bs);
  stall_blocks_ = budget / bs;
  begin_stall_blocks_ = options.background ? stall_blocks_ : ~uint64_t{0};
  // Committers wake the reclaimer once the log holds reclaim_trigger of the budget.
  trigger_blocks_ = static_cast<uint64_t>(
      std::ceil(static_cast<double>(budget) * options.reclaim_trigger / static_cast<double>(bs)));
  kick_blocks_.store(options.background ? trigger_blocks_ : ~uint64_t{0});
}

absl::Status Engine::Impl::WaitForRoom() {
  const uint64_t stall = stall_blocks_;
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

void Engine::Impl::Kick() {
  if (!bg_kick_.exchange(true)) {
    std::lock_guard<std::mutex> l(bg_mu_);  // the waiter tests bg_kick_ under this mutex
    bg_cv_.notify_one();
  }
}

// ---- the entry points (after the inline functions they expand) ----------------------------

absl::Status Engine::Begin() { return impl_->Begin(impl_->Local()); }
absl::Status Engine::Commit() { return impl_->Commit(impl_->Local()); }
absl::Status Engine::Abort() { return impl_->Abort(impl_->Local()); }
absl::Status Engine::Add(const void* p, size_t n) { return impl_->Add(impl_->Local(), p, n); }
bool Engine::InTransaction() { return impl_->Local().depth > 0; }

}  // namespace pmrt::txn

namespace pmrt::txn_internal {

using txn::Engine;
using txn::NoEngine;

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

absl::Status CommitGeneral() {
  if (Engine* e = Engine::Default(); e != nullptr) [[likely]] {
    Engine::Impl& i = *e->impl_;
    ThreadTx* t = i.LocalIfReady();
    if (t != nullptr && !t->commit_failed.ok()) [[unlikely]]  // (CommitFast's small commit)
      return std::exchange(t->commit_failed, absl::OkStatus());
    if (t != nullptr && i.SmallCommitReady(*t)) [[likely]]
      return i.WriteSmallCommit(*t);
    return e->Commit();
  }
  return NoEngine();
}

namespace {
// CommitFast's small commit of several declarations (a function of its own, so that CommitFast
// needs no stack frame on its way to the one-word commit).
[[gnu::noinline]] bool CommitSmall(Engine::Impl& i, ThreadTx& t) {
  absl::Status st = i.WriteSmallCommit(t);
  if (st.ok()) [[likely]]
    return true;
  t.commit_failed = std::move(st);
  return false;
}
}  // namespace

bool CommitFast() {
  // The common case, a small commit (SmallCommitReady), made here: true when it committed.
  // The most common transaction of all, one declaration, where the commit cannot fail and makes
  // no call (SmallCommitOneReady), is a tail call to the one-word commit, which returns true.
  // A small commit that fails (it has ended the transaction) leaves its status for
  // CommitGeneral, which txn::commit (txn.h) calls next; anything else returns false having
  // changed nothing, and CommitGeneral commits.
  if (Engine* e = Engine::Default(); e != nullptr) [[likely]] {
    Engine::Impl& i = *e->impl_;
    ThreadTx* t = i.LocalIfReady();
    if (t != nullptr && i.SmallCommitReady(*t)) [[likely]]
      return t->writes_size() == 1 ? i.CommitOne(*t) : CommitSmall(i, *t);
  }
  return false;
}
}  // namespace pmrt::txn_internal
