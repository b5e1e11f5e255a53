// The inline paths of txn::begin, txn::commit and txn::add (txn/txn.h): the calling thread's
// open transaction on the default engine as those paths read it, and the entry points of the
// general paths they fall back to. Engine::Impl (txn/txn.cc) sets this state up and keeps it;
// nothing outside txn/ uses it.
#ifndef PMRT_TXN_INTERNAL_FAST_PATH_H_
#define PMRT_TXN_INTERNAL_FAST_PATH_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "absl/status/status.h"

namespace pmrt::txn {
class Engine;
}  // namespace pmrt::txn

namespace pmrt::txn_internal {

struct ThreadTx;

// begin() and commit() of the common case, true when done: no status to build, so none is
// stored (each store before the next transaction's first miss is one more that the previous
// commit's fence holds back; docs/txn.md, "Design notes"). Otherwise false, having changed nothing,
// and the general path does the call and reports its status.
bool BeginFast();
bool CommitFast();
absl::Status BeginGeneral();
absl::Status CommitGeneral();

// Engine::Default(): the first engine opened that is still open.
inline std::atomic<txn::Engine*> g_default{nullptr};

// One declared word of a transaction: its pool word index and its value when declared (abort
// restores it).
struct WriteRec {
  uint64_t word;
  uint64_t old;
};

// What the inline path of add() reads and writes of the calling thread's open transaction on
// the default engine (txn/txn.cc, Engine::Impl::Begin sets it up). The write list lives here
// because both paths append to it.
struct Hot {
  std::atomic<uint64_t>* index = nullptr;  // the word index (txn/internal/word_index.h)
  // Its fast-line map (one byte per 8 words; WordIndex::kFast: the slot need not be read; all
  // 0 when Options::fast_lines is off).
  const std::atomic<uint8_t>* fast_lines = nullptr;
  uintptr_t base = 0;  // the pool's mapping
  // The pool's size in words while the inline path may run; 0 sends every add() to the general
  // path, which reports the reason (set by the owner when the transaction is aborted, doomed or
  // has allocated, and by the watchdog when it expires).
  std::atomic<uint64_t> words{0};
  uint64_t epoch = 0;  // the transaction's epoch (kept here for every engine's transactions)
  // The oldest touch epoch that needs no CAS: epoch - slack, as 32 bits (as the index keeps it).
  uint32_t touch_floor = 0;
  uint32_t slack = 0;  // the engine's touch slack (fixed)
  WriteRec* begin = nullptr;
  WriteRec* end = nullptr;
  WriteRec* limit = nullptr;
};
// What tls_hot points to outside a transaction on the default engine: no words, so every add()
// goes to the general path, which reports it (so that the inline path needs no null test).
inline constinit Hot g_no_hot{};
// Hot::fast_lines' value for a fast line (WordIndex::kFast; checked in txn/engine.cc). A line is
// 8 words: the byte of word w is fast_lines[w >> 3] (WordIndex::LineOf).
inline constexpr uint8_t kFastLine = 1;
// Where txn::prefetch finds the default engine's pool mapping and word index: set by the engine
// that becomes the default at its open, cleared at its close (size 0: prefetch touches only the
// data). Relaxed atomics: a prefetch with stale values only prefetches addresses that no longer
// matter (a prefetch never faults).
inline std::atomic<uintptr_t> g_prefetch_base{0};
inline std::atomic<uintptr_t> g_prefetch_index{0};
inline std::atomic<uint64_t> g_prefetch_size{0};
// Whether the processor has PREFETCHW (CPUID 8000_0001h, ECX bit 8; set by txn.cc before main).
inline constinit bool g_prefetchw = false;
// A hint that the calling thread will soon store to p's cache line: PREFETCHW where the processor
// has it, which fetches the line in a state this core may write (so the store later finds it
// owned: no request for ownership after the load, which for a line another core has read, or
// one the store waits on behind a fence, is a second round trip); otherwise a prefetch for
// writing as the compiler makes it (prefetcht0 on x86-64 without -mprfchw). Like any prefetch
// it never faults: p may be any address. For lines written after the load, not for lines also
// read first (the data line of add(): its old value; PREFETCHW there measured slower at K = 16,
// docs/txn.md, "Design notes", "Tried and not kept").
[[gnu::always_inline]] inline void PrefetchForWrite(const void* p) {
#if defined(__x86_64__)
  if (g_prefetchw) [[likely]] {
    asm volatile("prefetchw (%0)" : : "r"(p));  // (an address in a register: nothing dereferenced)
    return;
  }
#endif
  __builtin_prefetch(p, 1);
}
// The calling thread's open transaction on the default engine, or &g_no_hot.
// constinit: no dynamic initialization, so other translation units read it directly (no TLS
// wrapper call on the inline path).
extern constinit thread_local Hot* tls_hot;
absl::Status AddGeneral(const void* p, size_t n);

// add()'s inline path: true when it has declared [p, p+n), false when the general path must
// (a bool, so that the caller's absl::Status is built only on the general path).
[[gnu::always_inline]] inline bool AddInline(const void* p, size_t n) {
  Hot* h = tls_hot;
  // The word's number: the pool offset rotated right by 3, which is off / 8 for an aligned
  // offset and at least 2^61 (outside any pool) for a misaligned one, so that one comparison
  // tests alignment, the pool's bounds and an open transaction (g_no_hot has no words).
  const uint64_t off = reinterpret_cast<uintptr_t>(p) - h->base;
  const uint64_t word = off >> 3 | off << 61;
  if (n != 8 || word >= h->words.load(std::memory_order_relaxed) || h->end == h->limit)
      [[unlikely]] {
    return false;
  }
  // The data line is needed below (the old value) and by the caller's store: start its miss
  // now, alongside the index slot's (the CAS below orders later loads after it).
  __builtin_prefetch(p, 1);
  std::atomic<uint64_t>& slot = h->index[word];
  // A fast line (docs/txn.md, "Fast lines"): every word of it is hot, and the reclaimer makes
  // none cold until the epoch in which it clears the byte has completed, which this
  // transaction's guard (entered before this load) holds back. So the slot need not be read
  // now: its line is only prefetched for the commit, which stores it after its fence (for
  // writing: the store is the line's only use). (A seq_cst load is a plain load on x86-64; the
  // order it gives is the argument's.)
  if (h->fast_lines[word >> 3].load(std::memory_order_seq_cst) == kFastLine) [[likely]] {
    PrefetchForWrite(&slot);
  } else {
    uint64_t v = slot.load(std::memory_order_acquire);
    if ((v >> 32) == 0) [[unlikely]]  // cold (key 0)
      return false;
    // Not touched in the last `slack` epochs (as Engine::Add; docs/txn.md, "The index"): the
    // touch epoch is before epoch - slack (in 32-bit wrapping order).
    if (static_cast<int32_t>(static_cast<uint32_t>(v) - h->touch_floor) < 0) [[unlikely]] {
      // Pairs with the reclaimer's cold CAS (txn/reclaim.cc): once this succeeds, the word's
      // newest record stays while the transaction can still fail.
      const auto epoch = static_cast<uint32_t>(h->epoch);
      if (!slot.compare_exchange_strong(v, (v & ~uint64_t{0xFFFFFFFF}) | epoch,
                                        std::memory_order_acq_rel, std::memory_order_acquire)) {
        return false;
      }
    }
  }
  WriteRec* const r = h->end;
  r->word = word;
  std::memcpy(&r->old, p, 8);
  h->end = r + 1;
  return true;
}

}  // namespace pmrt::txn_internal

#endif  // PMRT_TXN_INTERNAL_FAST_PATH_H_
