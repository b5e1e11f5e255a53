// The LoggedLine protocol (alloc/internal/heap_layout.h): in-cache-line undo logging for the
// heap's metadata.
//
//   LineWriter w(line, epoch, view, persister, dirty);  // recovers, logs on first write in e
//   w.Set(0, w.Get(0) | bit, persister);                // modify the words
//
// REQUIRES: the caller has the line to itself (the heap guarantees it: chunk headers are
// written by the one thread that owns the change, bitmaps only by the advancer at the epoch
// boundary, with no guard open).
//
// Persistence order inside the line (PCSO: same-line stores reach media in program order):
//   [restore words from undo if the tag's epoch failed] -> undo := words -> tag := e
//   -> words := new
// What recovery sees if the crash falls
//   before `tag := e`: the old tag. If its epoch failed, words = undo (restored again);
//                      else the words are the pre-epoch words (nothing of e stored yet).
//   after it:          tag e. If e failed, undo holds the words as of e's start: restored.
#ifndef PMRT_ALLOC_INTERNAL_LOGGED_LINE_H_
#define PMRT_ALLOC_INTERNAL_LOGGED_LINE_H_

#include <atomic>
#include <cstdint>

#include "alloc/internal/heap_layout.h"
#include "epoch/epoch_view.h"
#include "epoch/persist.h"

namespace pmrt::alloc_internal {

// Store-order mutant for the mutation gate: tag stored before the undo copy.
inline constexpr Site kLineOrderSite{"alloc.line.order"};
// Mutants that drop one registration of dirty memory with the epoch boundary each (the gate in
// tests/alloc/alloc_crash_test.cc must kill each): a chunk header's logged line, an extent's
// chunks, a bitmap line marked by MarkAllocated, the bitmap lines a chunk's rebuild writes.
inline constexpr Site kDirtyChunkState{"alloc.mutant.dirty.chunk_state"};
inline constexpr Site kDirtyExtent{"alloc.mutant.dirty.extent"};
// The chunk state line of an empty chunk returned at a boundary, added to its flush.
inline constexpr Site kDirtyChunkReturn{"alloc.mutant.dirty.chunk_return"};
inline constexpr Site kDirtyBitmapMark{"alloc.mutant.dirty.bitmap_mark"};
inline constexpr Site kDirtyBitmapInit{"alloc.mutant.dirty.bitmap_init"};

inline bool TagFailed(uint64_t te, const epoch::EpochView& v) {
  return te != 0 && te < v.execution_first() && v.IsFailed(te);
}

// The words as recovery would leave them: the undo copy if the tag names a failed epoch of an
// earlier execution.
inline void EffectiveWords(const LoggedLine& l, const epoch::EpochView& v,
                           uint64_t out[kWordsPerLine]) {
  const bool failed = TagFailed(l.tag.load(std::memory_order_acquire), v);
  for (size_t i = 0; i < kWordsPerLine; ++i) {
    out[i] = (failed ? l.undo[i] : l.word[i]).load(std::memory_order_relaxed);
  }
}

// Logged write access to one line for epoch `e`. `dirty(line)` is called once per line per
// epoch, so the boundary writes the line back.
class LineWriter {
 public:
  template <class Dirty>
  LineWriter(LoggedLine& l, uint64_t e, const epoch::EpochView& v, const Persister& p,
             Dirty&& dirty)
      : l_(l) {
    const uint64_t te = l.tag.load(std::memory_order_relaxed);
    if (te == e) return;  // already logged in e: modify freely
    if (TagFailed(te, v)) {
      // Lazy recovery: the line was changed in a failed epoch. Restore it first; the tag still
      // names the failed epoch until the store below, so a crash here restores it again.
      for (size_t i = 0; i < kWordsPerLine; ++i)
        l.word[i].store(l.undo[i].load(std::memory_order_relaxed), std::memory_order_relaxed);
    }
    if (mutation::Swapped(kLineOrderSite)) {
      l.tag.store(e, std::memory_order_release);
      p.StoreHint(&l, sizeof(l));
    }
    // Undo copy: the words as of e's start. Until the tag store below, recovery ignores it.
    for (size_t i = 0; i < kWordsPerLine; ++i)
      l.undo[i].store(l.word[i].load(std::memory_order_relaxed), std::memory_order_relaxed);
    p.StoreHint(&l, sizeof(l));
    // Publish the log: release orders the undo stores before it in program order, which PCSO
    // keeps on media. From here, a crash in a failed e restores the undo copy.
    l.tag.store(e, std::memory_order_release);
    p.StoreHint(&l, sizeof(l));
    dirty(&l);
  }
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
};

}  // namespace pmrt::alloc_internal

#endif  // PMRT_ALLOC_INTERNAL_LOGGED_LINE_H_
