// Heap's chunks: the free runs of whole chunks, each chunk's volatile state and the thread's
// context, the logged writes of chunk metadata, and the epoch boundary's part (the epoch's
// dirty ranges, rebalancing the thread caches, returning empty chunks; docs/alloc.md).
#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "alloc/internal/heap_state.h"

namespace pmrt::alloc_internal {
constinit thread_local TlsContext tls_context;
}  // namespace pmrt::alloc_internal

namespace pmrt::alloc {

namespace {

// Appends one range per run of consecutive set bits of `bits` (bit i = the block of `size`
// bytes at base + i * size).
void RangesOfBlocks(uint8_t* base, const uint64_t* bits, size_t n, uint32_t size,
                    std::vector<Range>& out) {
  for (size_t w = 0; w < n; ++w) {
    uint64_t b = bits[w];
    while (b != 0) {
      const int first = __builtin_ctzll(b);
      const uint64_t rest = ~(b >> first);
      const int run = rest == 0 ? 64 - first : __builtin_ctzll(rest);
      out.push_back({base + (w * 64 + first) * uint64_t{size}, static_cast<size_t>(run) * size});
      b = first + run == 64 ? 0 : b & ~(((uint64_t{1} << run) - 1) << first);
    }
  }
}

}  // namespace

// ---- chunk runs -------------------------------------------------------------------------------

bool Heap::TakeRun(uint64_t n, uint64_t* start) {
  std::lock_guard<std::mutex> l(chunk_mu_);
  auto it = by_length_.lower_bound({n, 0});
  if (it == by_length_.end()) return false;
  const auto [len, s] = *it;
  by_length_.erase(it);
  free_runs_.erase(s);
  if (len > n) {
    free_runs_[s + n] = len - n;
    by_length_.insert({len - n, s + n});
  }
  *start = s;
  return true;
}

void Heap::ReturnExtent(uint64_t start, uint64_t n) {
  // The head's state went free with the free (logged); the tails' volatile states follow now,
  // before any allocation can take the run (on media a tail's header line was never written).
  for (uint64_t t = 1; t < n; ++t)
    state_[start + t].store(MakeState(ChunkKind::kFree, 0, 0), std::memory_order_release);
  ReturnRun(start, n);
}

void Heap::ReturnRun(uint64_t start, uint64_t n) {
  std::lock_guard<std::mutex> l(chunk_mu_);
  auto next = free_runs_.lower_bound(start);
  if (next != free_runs_.end() && next->first == start + n) {  // merge with the run after
    n += next->second;
    by_length_.erase({next->second, next->first});
    next = free_runs_.erase(next);
  }
  if (next != free_runs_.begin()) {  // merge with the run before
    auto prev = std::prev(next);
    if (prev->first + prev->second == start) {
      by_length_.erase({prev->second, prev->first});
      start = prev->first;
      n += prev->second;
      free_runs_.erase(prev);
    }
  }
  free_runs_[start] = n;
  by_length_.insert({n, start});
}

// ---- chunk volatile state ---------------------------------------------------------------------
int Heap::LoadedClass(uint64_t off) const {
  const uint64_t chunk = (off - data_off_) >> alloc_internal::kChunkShift;
  return static_cast<int>(vol_[chunk].load(std::memory_order_acquire) & kVolTagMask) - 1;
}

void Heap::SetVol(uint64_t chunk, ChunkVolatile* v, int c) {
  vol_[chunk].store(reinterpret_cast<uintptr_t>(v) | static_cast<uintptr_t>(c + 1),
                    std::memory_order_release);
}

// ---- the thread's context ---------------------------------------------------------------------
Heap::Context Heap::LocalSlow() {
  tls_context = {id_, &caches_.Local(), &epochs_.LocalSlot()};
  return {tls_context.tc, tls_context.slot};
}

// ---- logged metadata writes -------------------------------------------------------------------

void Heap::SetChunkState(uint64_t chunk, uint64_t state, uint64_t e) {
  // One writer per header: a fresh chunk is taken under chunk_mu_ by one thread; an extent is
  // claimed by one CAS on the mirror before its header is written.
  const Persister& p = pool_.persister();
  LineWriter w(HeaderLine(chunk), e, epochs_, p, [this](const LoggedLine* line) {
    if (!mutation::Swapped(alloc_internal::kDirtyChunkState))
      epochs_.RecordDirty(line, sizeof(*line));
  });
  w.Set(0, state, p);
  small_class_[chunk].store(
      StateKind(state) == ChunkKind::kSmall ? static_cast<uint8_t>(StateClass(state) + 1) : 0,
      std::memory_order_release);
  state_[chunk].store(state, std::memory_order_release);
}

void Heap::SetChunkStateAtBoundary(uint64_t chunk, uint64_t state, uint64_t e,
                                   std::vector<Range>& out) {
  const Persister& p = pool_.persister();
  LineWriter w(HeaderLine(chunk), e, epochs_, p, [&out](const LoggedLine* line) {
    if (!mutation::Swapped(alloc_internal::kDirtyChunkReturn)) out.push_back({line, sizeof(*line)});
  });
  w.Set(0, state, p);
  small_class_[chunk].store(0, std::memory_order_release);
  state_[chunk].store(state, std::memory_order_release);
}

void Heap::PrefetchChunkLines(uint64_t chunk) const {
  // With many chunks dirty (a large heap under uniform updates), each chunk's live words and
  // bitmap lines are misses; fetching a later chunk's (for writing: both are written) while
  // this one is collected overlaps them.
  const auto* vol = reinterpret_cast<const char*>(Vol(chunk, std::memory_order_relaxed));
  for (size_t off = 0; off < sizeof(ChunkVolatile); off += 64) __builtin_prefetch(vol + off, 1);
  const auto* bits = reinterpret_cast<const char*>(BitmapLines(chunk));
  for (size_t off = 0; off < sizeof(LoggedLine) * kBitmapLines; off += 64)
    __builtin_prefetch(bits + off, 1);
}

void Heap::CollectDirty(uint64_t e, std::vector<Range>& out) {
  // Step 3 of the advance of e, with no guard open: nobody changes a live map now, and only
  // this thread writes bitmap lines. Each line whose media copy differs from the live map is
  // logged in e (undo + tag, in the line) and updated; the line and the data of the blocks
  // allocated in e (live now, clear on media as of e's start) join the batch flush. If e
  // fails, the undo copies put every line back.
  const Persister& p = pool_.persister();
  auto dirty_line = [&out](const LoggedLine* l) { out.push_back({l, sizeof(*l)}); };
  caches_.ForEach([&](ThreadCache& tc) {
    const std::vector<uint32_t>& chunks = tc.dirty_chunks[e & 1];
    for (size_t i = 0; i < chunks.size(); ++i) {
      if (i + kCollectAhead < chunks.size()) PrefetchChunkLines(chunks[i + kCollectAhead]);
      const uint32_t chunk = chunks[i];
      ChunkVolatile& v = *Vol(chunk);
      LoggedLine* bits = BitmapLines(chunk);
      uint64_t fresh[kLiveWords];  // blocks allocated in e and still live
      for (size_t line = 0; line < kBitmapLines; ++line) {
        uint64_t want[kWordsPerLine], have[kWordsPerLine];
        for (size_t k = 0; k < kWordsPerLine; ++k) {
          const size_t w = line * kWordsPerLine + k;
          want[k] = w < kLiveWords ? v.words[w].live.load(std::memory_order_relaxed) : 0;
        }
        for (size_t k = 0; k < kWordsPerLine && line * kWordsPerLine + k < kLiveWords; ++k) {
          ChunkVolatile::Word& w = v.words[line * kWordsPerLine + k];
          fresh[line * kWordsPerLine + k] = want[k] & ~w.media;
          w.media = want[k];  // media as of e+1's start
        }
        alloc_internal::EffectiveWords(bits[line], epochs_, have);
        if (std::equal(want, want + kWordsPerLine, have)) continue;
        LineWriter lw(bits[line], e, epochs_, p, dirty_line);
        for (size_t k = 0; k < kWordsPerLine; ++k)
          if (lw.Get(k) != want[k]) lw.Set(k, want[k], p);
      }
      const int c = small_class_[chunk].load(std::memory_order_relaxed) - 1;
      RangesOfBlocks(pool_.base() + ChunkOffset(chunk), fresh, kLiveWords, SizeClasses::Size(c),
                     out);
    }
    tc.dirty_chunks[e & 1].clear();
  });
  Rebalance(e, out);
}

ChunkVolatile* Heap::NewVol() {
  if (spare_vols_.empty()) return new ChunkVolatile;
  ChunkVolatile* v = spare_vols_.back();
  spare_vols_.pop_back();
  return v;
}

void Heap::Rebalance(uint64_t e, std::vector<Range>& out) {
  // No guard is open (step 3 of the advance of e): every cache's lists may be touched, and
  // nothing is allocated or freed until step 5.
  int left = pressure_.load(std::memory_order_acquire);
  while (left > 0 && !pressure_.compare_exchange_weak(left, left - 1)) {
  }
  const bool pressure = left > 0;
  if (pressure) pressure_epoch_.store(e, std::memory_order_relaxed);  // read by e's reclaimers
  uint64_t moved = 0, frees = 0;
  caches_.ForEach([&](ThreadCache& tc) {
    frees += tc.frees.load(std::memory_order_relaxed);
    // A cache that neither allocated nor freed for a whole epoch (an idle or exited thread, a
    // consumer that went quiet) would strand its free blocks: they go to the central lists.
    const uint64_t ops =
        tc.allocations.load(std::memory_order_relaxed) + tc.frees.load(std::memory_order_relaxed);
    const bool idle = ops == tc.seen_ops;
    tc.seen_ops = ops;
    if (idle || pressure) moved += DrainCache(tc);
  });
  if (!pressure) return;
  const uint64_t returned = ReturnEmptyChunks(e, out);
  frees_at_pressure_.store(frees, std::memory_order_release);
  pressure_gain_.fetch_add(moved + returned, std::memory_order_release);
}

uint64_t Heap::DrainCache(ThreadCache& tc) {
  // REQUIRES: no guard open (the boundary). Every free block the cache holds goes to the
  // central lists: its lists, its inbox (blocks of its chunks freed by others), its outboxes,
  // and its ready batches. Batches still in their grace period stay where they are.
  uint64_t moved = 0;
  auto give = [&](int c, std::vector<uint64_t>& v) {
    if (v.empty()) return;
    moved += v.size();
    std::lock_guard<std::mutex> l(central_[c].mu);
    central_[c].blocks.insert(central_[c].blocks.end(), v.begin(), v.end());
    v.clear();
  };
  for (FreeBatch* b : TakeReady(tc)) {
    moved += BatchToCentral(*b);
    ReleaseBatch(b);
  }
  for (int c = 0; c < SizeClasses::kCount; ++c) give(c, tc.free[c]);
  auto give_mixed = [&](std::vector<uint64_t>& v) {  // blocks of any class
    moved += v.size();
    ToCentral(v);
  };
  {
    std::lock_guard<std::mutex> l(tc.inbox_mu);
    give_mixed(tc.inbox);
  }
  for (int slot = 0; slot < ThreadCache::kOutboxes; ++slot) give_mixed(tc.out[slot]);
  return moved;
}

uint64_t Heap::ReturnEmptyChunks(uint64_t e, std::vector<Range>& out) {
  // REQUIRES: no guard open, every cache drained (Rebalance under pressure): each free block
  // of a chunk in use is in a central list, or in a batch still in its grace period. A chunk
  // all of whose blocks are in the central list has none live and none pending: it goes back to
  // the free runs. Its state change is logged in e; its bitmap lines already say "all free" as
  // of e's end (CollectDirty ran first), so if e fails, the chunk comes back with the bitmap of
  // e's start, whatever e freed in it still allocated: exactly e's rollback.
  uint64_t returned = 0;
  std::vector<uint64_t> to_return;
  for (int c = 0; c < SizeClasses::kCount; ++c) {
    const uint32_t per_chunk = SizeClasses::BlocksPerChunk(c);
    Central& cen = central_[c];
    std::lock_guard<std::mutex> l(cen.mu);
    auto& v = cen.blocks;
    if (v.size() < per_chunk) continue;
    std::sort(v.begin(), v.end());
    std::vector<uint64_t> keep;
    keep.reserve(v.size());
    for (size_t i = 0; i < v.size();) {
      const uint64_t chunk = (v[i] - data_off_) >> alloc_internal::kChunkShift;
      size_t j = i;
      while (j < v.size() && ((v[j] - data_off_) >> alloc_internal::kChunkShift) == chunk) ++j;
      const ChunkVolatile* vol = Vol(chunk, std::memory_order_relaxed);
      bool empty = j - i == per_chunk && vol != nullptr;
      for (size_t w = 0; w < kLiveWords && empty; ++w)
        empty = vol->words[w].live.load(std::memory_order_relaxed) == 0;
      if (empty) {
        to_return.push_back(chunk);
      } else {
        keep.insert(keep.end(), v.begin() + static_cast<ptrdiff_t>(i),
                    v.begin() + static_cast<ptrdiff_t>(j));
      }
      i = j;
    }
    // Lowest addresses handed out first (Take pops the back).
    std::reverse(keep.begin(), keep.end());
    v.swap(keep);
  }
  {
    std::lock_guard<std::mutex> l(chunk_mu_);
    // Chunks of an earlier run not read yet: empty when their recovered bitmap is all zero.
    for (auto& list : unloaded_) {
      std::erase_if(list, [&](uint64_t chunk) {
        for (size_t line = 0; line < kBitmapLines; ++line) {
          uint64_t w[kWordsPerLine];
          alloc_internal::EffectiveWords(BitmapLines(chunk)[line], epochs_, w);
          for (uint64_t x : w)
            if (x != 0) return false;
        }
        to_return.push_back(chunk);
        return true;
      });
    }
    for (uint64_t chunk : to_return) {
      SetChunkStateAtBoundary(chunk, MakeState(ChunkKind::kFree, 0, 0), e, out);
      if (ChunkVolatile* v = Vol(chunk, std::memory_order_relaxed)) {
        // Reset for reuse; kept (not deleted): UsableSize may read it without a guard.
        v->dirty_epoch.store(0, std::memory_order_relaxed);
        v->owner = nullptr;
        for (auto& w : v->words) {
          w.live.store(0, std::memory_order_relaxed);
          w.media = 0;
        }
        spare_vols_.push_back(v);
      }
      vol_[chunk].store(0, std::memory_order_release);
      ++returned;
    }
  }
  for (uint64_t chunk : to_return) ReturnRun(chunk, 1);
  chunks_returned_.fetch_add(returned, std::memory_order_relaxed);
  return returned;
}

}  // namespace pmrt::alloc
