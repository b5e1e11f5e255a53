// The LoggedLine protocol (alloc/internal/heap_layout.h): in-cache-line undo logging for the
// heap's metadata, with the line's tag doubling as its lock.
//
//   LineWriter w(line, epoch, view, dirty);   // locks, recovers, logs on first write in epoch
//   w.Set(0, w.Get(0) | bit);                 // modify the words
//   // ~LineWriter unlocks
//
// Persistence order inside the line (PCSO: same-line stores reach media in program order):
//   lock CAS (tag := old|1) -> [restore words from undo if the old epoch failed]
//   -> undo := words -> tag := e|1 -> words := new -> tag := e|0 (unlock)
// What recovery sees if the crash falls
//   before `tag := e|1`: the old tag. If the old epoch failed, words = undo (restore again);
//                        else words are the pre-epoch words (nothing of e stored yet).
//   after it:            tag e. If e failed, undo holds the words as of e's start: restored.
// The lock bit is meaningless after a crash (recovery ignores it).
#ifndef PMRT_ALLOC_INTERNAL_LOGGED_LINE_H_
#define PMRT_ALLOC_INTERNAL_LOGGED_LINE_H_

#include <atomic>
#include <cstdint>
#include <thread>

#include "alloc/internal/heap_layout.h"
#include "epoch/epoch_view.h"
#include "epoch/persist.h"

namespace pmrt::alloc_internal {

// Store-order mutant for the mutation gate: tag stored before the undo copy.
inline constexpr Site kLineOrderSite{"alloc.line.order"};

// The words as recovery would leave them: the undo copy if the tag names a failed epoch of an
// earlier execution. Reads without locking; for quiescent lines (open, heap walk) or under lock.
inline void EffectiveWords(const LoggedLine& l, const epoch::EpochView& v,
                           uint64_t out[kWordsPerLine]) {
  const uint64_t te = l.tag.load(std::memory_order_acquire) >> 1;
  const bool failed = te != 0 && te < v.execution_first() && v.IsFailed(te);
  for (size_t i = 0; i < kWordsPerLine; ++i) {
    out[i] = (failed ? l.undo[i] : l.word[i]).load(std::memory_order_relaxed);
  }
}

// Exclusive, logged write access to one line for the calling thread's epoch `e`.
// `Dirty` is called once per line per epoch with the line's address (the epoch layer's
// RecordDirty), so the boundary writes the line back.
class LineWriter {
 public:
  template <class Dirty>
  LineWriter(LoggedLine& l, uint64_t e, const epoch::EpochView& v, const Persister& p,
             Dirty&& dirty)
      : l_(l), e_(e) {
    uint64_t t = l.tag.load(std::memory_order_relaxed);
    for (int spins = 0;; ++spins) {
      if ((t & 1) == 0 &&
          l.tag.compare_exchange_weak(t, t | 1, std::memory_order_acquire,
                                      std::memory_order_relaxed)) {
        break;
      }
      if (spins > 64) std::this_thread::yield();
      t = l.tag.load(std::memory_order_relaxed);
    }
    const uint64_t te = t >> 1;
    if (te == e) return;  // already logged in e: modify freely
    if (te != 0 && te < v.execution_first() && v.IsFailed(te)) {
      // Lazy recovery: the line was changed in a failed epoch. Restore it first; the tag still
      // names the failed epoch until the store below, so a crash here restores it again.
      for (size_t i = 0; i < kWordsPerLine; ++i)
        l.word[i].store(l.undo[i].load(std::memory_order_relaxed), std::memory_order_relaxed);
    }
    if (mutation::Swapped(kLineOrderSite)) {
      l.tag.store(e << 1 | 1, std::memory_order_release);
      p.StoreHint(&l, sizeof(l));
    }
    // Undo copy: the words as of e's start. Until the tag store below, recovery ignores it.
    for (size_t i = 0; i < kWordsPerLine; ++i)
      l.undo[i].store(l.word[i].load(std::memory_order_relaxed), std::memory_order_relaxed);
    p.StoreHint(&l, sizeof(l));
    // Publish the log: release orders the undo stores before it (PCSO then keeps that order
    // on media). From here, a crash in a failed e restores the undo copy.
    l.tag.store(e << 1 | 1, std::memory_order_release);
    p.StoreHint(&l, sizeof(l));
    dirty(&l);
  }
  ~LineWriter() { l_.tag.store(e_ << 1, std::memory_order_release); }
  LineWriter(const LineWriter&) = delete;
  LineWriter& operator=(const LineWriter&) = delete;

  uint64_t Get(size_t i) const { return l_.word[i].load(std::memory_order_relaxed); }
  // Modifies a word; release keeps it after the tag store in program (and so media) order.
  void Set(size_t i, uint64_t v, const Persister& p) {
    l_.word[i].store(v, std::memory_order_release);
    p.StoreHint(&l_, sizeof(l_));
  }

 private:
  LoggedLine& l_;
  uint64_t e_;
};

}  // namespace pmrt::alloc_internal

#endif  // PMRT_ALLOC_INTERNAL_LOGGED_LINE_H_
