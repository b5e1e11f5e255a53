// Heap's inspection: block lookup, the walk over live blocks, statistics, settling lines of
// failed epochs, and the deep metadata check (`pmrt check`).
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "alloc/internal/heap_state.h"

namespace pmrt::alloc {

// ---- inspection -------------------------------------------------------------------------------

bool Heap::BlockLive(uint64_t chunk, uint32_t block) const {
  if (const ChunkVolatile* v = Vol(chunk)) {
    return v->words[block / 64].live.load(std::memory_order_relaxed) >> (block % 64) & 1;
  }
  uint64_t w[kWordsPerLine];
  alloc_internal::EffectiveWords(BitmapLines(chunk)[block / kBitsPerLine], epochs_, w);
  const uint32_t bit = block % kBitsPerLine;
  return w[bit / 64] >> (bit % 64) & 1;
}

size_t Heap::UsableSize(const void* p) const {
  uint64_t chunk;
  uint32_t block;
  int c;
  if (!Locate(p, &chunk, &block, &c)) return 0;
  if (c < 0) return StateRun(state_[chunk].load()) * kChunkSize;
  return BlockLive(chunk, block) ? SizeClasses::Size(c) : 0;
}

absl::Status Heap::Walk(const std::function<void(const BlockInfo&)>& fn) const {
  for (uint64_t i = 0; i < chunks_; ++i) {
    const uint64_t s = state_[i].load(std::memory_order_acquire);
    if (Inert(s) || StateKind(s) == ChunkKind::kFree) continue;
    if (StateKind(s) == ChunkKind::kExtent) {
      fn({ChunkOffset(i), uint64_t{StateRun(s)} * kChunkSize});
      continue;
    }
    const int c = static_cast<int>(StateClass(s));
    const uint32_t size = SizeClasses::Size(c), blocks = SizeClasses::BlocksPerChunk(c);
    for (uint32_t b = 0; b < blocks; ++b)
      if (BlockLive(i, b)) fn({ChunkOffset(i) + uint64_t{b} * size, size});
  }
  return absl::OkStatus();
}

namespace {
// A chunk state that holds nothing: neither metadata, nor an extent (its head or tail), nor a
// size class's blocks.
bool FreeChunkState(uint64_t s) {
  return s != kMetaState && s != kTailState && StateKind(s) != ChunkKind::kExtent &&
         StateKind(s) != ChunkKind::kSmall;
}
}  // namespace

uint64_t Heap::FreeChunkBytes() const {
  const uint64_t chunks = chunks_.load(std::memory_order_acquire);
  uint64_t free = 0;
  for (uint64_t i = 0; i < chunks; ++i)
    free += FreeChunkState(state_[i].load(std::memory_order_relaxed)) ? 1 : 0;
  return free * kChunkSize;
}

uint64_t Heap::AllocationsSinceOpen() const {
  uint64_t n = 0;
  const_cast<PerThread<ThreadCache>&>(caches_).ForEach(
      [&](const ThreadCache& tc) { n += tc.allocations.load(std::memory_order_relaxed); });
  return n;
}

HeapStats Heap::Stats() const {
  HeapStats st;
  const uint64_t chunks = chunks_.load(std::memory_order_acquire);
  st.chunks = chunks - meta_chunks_.load(std::memory_order_acquire);
  st.heap_bytes = st.chunks * kChunkSize;
  st.segments = 1 + segment_count_.load(std::memory_order_acquire);
  for (uint64_t i = 0; i < chunks; ++i) {
    const uint64_t s = state_[i].load(std::memory_order_acquire);
    if (s == kMetaState) continue;
    if (FreeChunkState(s)) {
      ++st.free_chunks;
    } else if (StateKind(s) == ChunkKind::kSmall) {
      ++st.small_chunks;
    } else {
      ++st.extent_chunks;
    }
  }
  uint64_t small_used = 0;
  (void)Walk([&](const BlockInfo& b) {
    ++st.live_blocks;
    st.used_bytes += b.size;
    const uint64_t s = state_[(b.offset - data_off_) >> alloc_internal::kChunkShift].load();
    if (StateKind(s) == ChunkKind::kExtent) {
      ++st.live_extents;
    } else {
      ++st.live_per_class[StateClass(s)];
      small_used += b.size;
    }
  });
  st.free_bytes = st.heap_bytes - st.used_bytes;
  st.free_in_small_chunks = st.small_chunks * kChunkSize - small_used;
  st.chunks_returned = chunks_returned_.load(std::memory_order_relaxed);
  st.double_frees = double_frees_.load(std::memory_order_relaxed);
  {
    std::lock_guard<std::mutex> l(chunk_mu_);
    if (!by_length_.empty()) st.largest_free_extent = by_length_.rbegin()->first * kChunkSize;
  }
  const_cast<PerThread<ThreadCache>&>(caches_).ForEach([&](ThreadCache& tc) {
    st.allocations += tc.allocations.load(std::memory_order_relaxed);
    st.frees += tc.frees.load(std::memory_order_relaxed);
  });
  return st;
}

uint64_t Heap::SettleFailedLines() {
  epoch::Guard g(epochs_);
  const Persister& p = pool_.persister();
  uint64_t settled = 0;
  auto settle = [&](LoggedLine& line) {
    if (!alloc_internal::TagFailed(line.tag.load(std::memory_order_acquire), epochs_)) return;
    // The writer's constructor is the whole recovery: undo copy restored, logged again in this
    // epoch, registered dirty; no word changes after it.
    LineWriter w(line, g.epoch(), epochs_, p,
                 [this](const LoggedLine* l) { epochs_.RecordDirty(l, sizeof(*l)); });
    ++settled;
  };
  for (uint64_t i = 0; i < chunks_; ++i) {
    settle(HeaderLine(i));
    LoggedLine* bits = BitmapLines(i);
    for (size_t line = 0; line < kBitmapLines; ++line) settle(bits[line]);
  }
  return settled;
}

absl::Status Heap::Check() const {
  for (uint64_t i = 0; i < chunks_; ++i) {
    uint64_t hw[kWordsPerLine];
    alloc_internal::EffectiveWords(HeaderLine(i), epochs_, hw);
    const uint64_t s = state_[i].load(std::memory_order_acquire);
    const bool tail = Inert(s);  // an extent's tail or a segment's metadata
    if (tail ? hw[0] != MakeState(ChunkKind::kFree, 0, 0) : hw[0] != s) {
      return Corrupt(i, absl::StrCat("state on media ", hw[0], " differs from the heap's ", s));
    }
    const bool small = StateKind(s) == ChunkKind::kSmall && !tail;
    const uint32_t blocks = small ? SizeClasses::BlocksPerChunk(StateClass(s)) : 0;
    const ChunkVolatile* v = Vol(i);
    // Bits of blocks the chunk does not have must be clear, on media and in the live map.
    auto beyond = [blocks](size_t word) {  // mask of word `word`'s bits at or past `blocks`
      const size_t first = word * 64;
      if (first >= blocks) return ~uint64_t{0};
      if (first + 64 <= blocks) return uint64_t{0};
      return ~((uint64_t{1} << (blocks - first)) - 1);
    };
    for (size_t line = 0; line < kBitmapLines; ++line) {
      uint64_t w[kWordsPerLine];
      alloc_internal::EffectiveWords(BitmapLines(i)[line], epochs_, w);
      for (size_t k = 0; k < kWordsPerLine; ++k) {
        const size_t word = line * kWordsPerLine + k;
        const uint64_t live = v != nullptr && word < kLiveWords ? v->words[word].live.load() : 0;
        if (((w[k] | live) & beyond(word)) != 0) {
          return Corrupt(i, absl::StrCat("a bit in word ", word, " is set beyond the chunk's ",
                                         blocks, " blocks"));
        }
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace pmrt::alloc
