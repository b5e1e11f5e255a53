// Heap's allocation path: a thread cache's lists first, then the central lists, then fresh or
// partly free chunks, extents for large blocks; when the heap is full, waiting for the running
// epoch's frees and growing the pool (docs/alloc.md, "Allocation").
#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "alloc/internal/heap_state.h"

namespace pmrt::alloc {

namespace {

thread_local absl::Status tls_grow_error;  // why the calling thread's last automatic growth failed

bool IsPowerOfTwo(size_t v) { return v != 0 && (v & (v - 1)) == 0; }

}  // namespace

using alloc_internal::kRefillBatch;
using alloc_internal::tls_error;

inline void* Heap::Take(ThreadCache& tc, int c, uint64_t e) {
  auto& fl = tc.free[c];
  const uint64_t off = fl.back();
  fl.pop_back();
  const uint64_t chunk = (off - data_off_) >> alloc_internal::kChunkShift;
  const uint32_t b = SizeClasses::BlockOf(static_cast<uint32_t>(off & (kChunkSize - 1)), c);
  ChunkVolatile& v = *Vol(chunk, std::memory_order_relaxed);
  v.words[b / 64].live.fetch_or(uint64_t{1} << (b % 64), std::memory_order_relaxed);
  // The block's data is written back at the boundary with whatever the caller stores in it
  // (CollectDirty: live now, clear on media).
  Touch(tc, v, chunk, e);
  Bump(tc.allocations);
  return pool_.base() + off;
}

// ---- allocation -------------------------------------------------------------------------------

void* Heap::Allocate(size_t size, size_t align) {
  // The fast path: a small size with at most the default alignment, served from the thread's
  // list (every class size is a multiple of 16).
  if (size - 1 < 1024 && align - 1 < 16 && (align & (align - 1)) == 0) {
    const int c = SizeClasses::kSmallTable[(size + 15) >> 4];
    const Context ctx = Local();
    // The list is read inside the guard: a boundary (no guard open) may drain it.
    epoch::LeafGuard g(epochs_, *ctx.slot);  // Take opens no guard
    if (!ctx.tc->free[c].empty()) [[likely]]
      return Take(*ctx.tc, c, g.epoch());
  }
  return AllocateSlow(size, align);
}

void* Heap::AllocateSlow(size_t size, size_t align) {
  if (!IsPowerOfTwo(align) || align > kChunkSize) {
    tls_error = AllocError::kBadAlignment;
    return nullptr;
  }
  const int c = SizeClasses::For(size, align);
  tls_grow_error = absl::OkStatus();
  for (bool grown = false;;) {
    const uint64_t growths = pool_.growths();
    void* p = AllocateWaiting(c, size);
    if (p != nullptr || grown) return p;
    // Full (or the request larger than the heap): grow the pool once when it may, and retry.
    if (tls_error != AllocError::kPoolFull && tls_error != AllocError::kPoolFullCannotWait &&
        tls_error != AllocError::kTooLarge)
      return p;
    const AllocError why = tls_error;
    if (!GrowFor(size, growths)) {
      tls_error = why;
      return p;
    }
    grown = true;
  }
}

void* Heap::AllocateWaiting(int c, size_t size) {
  for (int attempt = 0;; ++attempt) {
    void* p;
    {
      const Context ctx = Local();
      epoch::Guard g(epochs_, *ctx.slot);
      p = c >= 0 ? AllocateSmall(*ctx.tc, c, g.epoch()) : AllocateExtent(size, g.epoch());
    }
    if (p != nullptr || tls_error != AllocError::kPoolFull || attempt == 2) return p;
    if (!WaitForFrees(attempt > 0)) {
      if (attempt == 0 && (!epochs_.clocked() || epochs_.LocalSlot().depth > 0))
        tls_error = AllocError::kPoolFullCannotWait;
      return p;
    }
  }
}

void Heap::SpillToCentral(std::vector<uint64_t>& fl, int c, size_t count) {
  // The oldest `count` blocks (the front of the list).
  const auto n = static_cast<ptrdiff_t>(count);
  {
    std::lock_guard<std::mutex> l(central_[c].mu);
    central_[c].blocks.insert(central_[c].blocks.end(), fl.begin(), fl.begin() + n);
  }
  fl.erase(fl.begin(), fl.begin() + n);
}

bool Heap::WaitForFrees(bool again) {
  // Blocks freed in the running epoch (or the one before) become reusable at the end of the
  // advance that closes their epoch, and a boundary under pressure gathers the free blocks of
  // every cache and returns empty chunks: after at most two advances every free made before
  // this call is back where this thread finds it. The request stands even when this call
  // cannot wait: impossible inside the caller's own guard (the advance would wait for it
  // forever), and not ours to do when the caller clocks the epochs by hand.
  //
  // Nothing can come back when no free awaits its grace period and nothing was freed since
  // two boundaries gathered every free block (or, on the second try, when the boundary found
  // nothing): a full heap then fails without a boundary per call.
  if (retired_batches_.load(std::memory_order_acquire) == 0 &&
      (again ? pressure_gain_.load(std::memory_order_acquire) == 0
             : pressure_.load(std::memory_order_acquire) == 0 &&
                   TotalFrees() == frees_at_pressure_.load(std::memory_order_acquire))) {
    if (again) pressure_.store(0, std::memory_order_release);  // nothing left to gather
    return false;
  }
  pressure_gain_.store(0, std::memory_order_relaxed);
  // Two boundaries: blocks whose grace period ends with the first are returned by the second
  // (the second try runs that one).
  if (!again) pressure_.store(2, std::memory_order_release);
  if (!epochs_.clocked() || epochs_.LocalSlot().depth > 0) return false;
  return epochs_.Advance().ok();
}

bool Heap::MakeRoom() {
  if (!epochs_.clocked() || epochs_.LocalSlot().depth > 0) return false;
  if (!WaitForFrees(false)) return false;
  (void)WaitForFrees(true);
  return true;
}

uint64_t Heap::TotalFrees() {
  uint64_t n = 0;
  caches_.ForEach([&](ThreadCache& tc) { n += tc.frees.load(std::memory_order_relaxed); });
  return n;
}

void* Heap::AllocateZeroed(size_t n, size_t size, size_t align) {
  if (size != 0 && n > SIZE_MAX / size) {
    tls_error = AllocError::kOverflow;
    return nullptr;
  }
  const size_t bytes = n * size;
  void* p = Allocate(bytes == 0 ? 1 : bytes, align);
  // A reused block holds its last owner's bytes. The zeroes reach media with the block's other
  // data of this epoch (a new block is written back at the boundary).
  if (p != nullptr) std::memset(p, 0, bytes);
  return p;
}

void* Heap::Reallocate(void* p, size_t size, size_t align) {
  if (p == nullptr) return Allocate(size, align);
  const size_t have = UsableSize(p);
  if (have == 0) {  // not a live block of this heap: nothing to move
    tls_error = AllocError::kNone;
    return nullptr;
  }
  if (size <= have && (reinterpret_cast<uintptr_t>(p) & (align - 1)) == 0) return p;
  void* q = Allocate(size, align);
  if (q == nullptr) return nullptr;
  std::memcpy(q, p, std::min(have, size));
  (void)FreeUnshared(p);  // live (checked above) and the caller's own
  return q;
}

absl::StatusOr<void*> Heap::TryAllocate(size_t size, size_t align) {
  void* p = Allocate(size, align);
  if (p != nullptr) return p;
  const std::string what = absl::StrCat(
      pool_.path(), ": cannot allocate ", size, " bytes aligned to ", align, ": ",
      AllocErrorName(tls_error), tls_grow_error.ok() ? "" : "; growing the pool failed: ",
      tls_grow_error.ok() ? "" : tls_grow_error.message());
  if (tls_error == AllocError::kBadAlignment) return absl::InvalidArgumentError(what);
  return absl::ResourceExhaustedError(what);
}

void* Heap::AllocateSmall(ThreadCache& tc, int c, uint64_t e) {
  if (tc.free[c].empty() && !Refill(tc, c, e)) {
    tls_error = AllocError::kPoolFull;
    return nullptr;
  }
  return Take(tc, c, e);
}

void* Heap::AllocateExtent(size_t size, uint64_t e) {
  const uint64_t n = (size + kChunkSize - 1) / kChunkSize;
  if (n == 0 || n > chunks_) {
    tls_error = AllocError::kTooLarge;
    return nullptr;
  }
  uint64_t start;
  if (!TakeRun(n, &start)) {
    tls_error = AllocError::kPoolFull;
    return nullptr;
  }
  for (uint64_t t = 1; t < n; ++t) state_[start + t].store(kTailState);
  // Logged in e: if e fails the run is free again.
  SetChunkState(start, MakeState(ChunkKind::kExtent, 0, static_cast<uint32_t>(n)), e);
  if (!mutation::Swapped(alloc_internal::kDirtyExtent)) {
    epochs_.RecordDirty(pool_.base() + ChunkOffset(start), n * kChunkSize);
  }
  Bump(caches_.Local().allocations);
  return pool_.base() + ChunkOffset(start);
}

bool Heap::Refill(ThreadCache& tc, int c, uint64_t e) {
  auto& fl = tc.free[c];
  tc.drained[c] = true;
  // 0. Blocks of this cache's chunks that other caches freed, and this cache's own frees whose
  //    grace period has passed.
  CollectInbox(tc);
  CollectReady(tc);
  if (!fl.empty()) return true;
  // 1. The central list; 2-3. chunks; 4. the heap is full: other caches' ready frees, through
  //    the central list, once.
  return TakeCentral(fl, c) || RefillFromChunks(tc, c, e) || (StealReady() && TakeCentral(fl, c));
}

bool Heap::TakeCentral(std::vector<uint64_t>& fl, int c) {
  Central& cen = central_[c];
  std::lock_guard<std::mutex> l(cen.mu);
  const size_t take = std::min(kRefillBatch, cen.blocks.size());
  fl.insert(fl.end(), cen.blocks.end() - static_cast<ptrdiff_t>(take), cen.blocks.end());
  cen.blocks.resize(cen.blocks.size() - take);
  return take > 0;
}

bool Heap::RefillFromChunks(ThreadCache& tc, int c, uint64_t e) {
  auto& fl = tc.free[c];
  // 2. A chunk of this class from an earlier run, not read yet in this one.
  while (LoadNextChunk(c, &fl, &tc)) {
    if (!fl.empty()) return true;
  }
  // 3. A fresh chunk. Its state change is logged in e: if e fails, the chunk is free again
  //    together with every block handed out from it.
  uint64_t chunk;
  if (!TakeRun(1, &chunk)) return false;
  ChunkVolatile* v;
  {
    std::lock_guard<std::mutex> l(chunk_mu_);
    v = NewVol();
  }
  v->owner = &tc;
  SetVol(chunk, v, c);
  SetChunkState(chunk, MakeState(ChunkKind::kSmall, static_cast<uint32_t>(c), 1), e);
  const uint32_t size = SizeClasses::Size(c);
  for (uint32_t b = SizeClasses::BlocksPerChunk(c); b > 0; --b) {
    fl.push_back(ChunkOffset(chunk) + uint64_t{b - 1} * size);  // lowest address first out
  }
  return true;
}

ChunkVolatile* Heap::LoadChunk(uint64_t chunk, int c, std::vector<uint64_t>* out,
                               ThreadCache* owner) {
  // REQUIRES: chunk_mu_. The recovered bitmap becomes the live map; its clear bits are free
  // blocks, in no free list yet (the chunk was untouched this run).
  ChunkVolatile* v = NewVol();
  v->owner = owner;
  const uint32_t size = SizeClasses::Size(c), blocks = SizeClasses::BlocksPerChunk(c);
  for (size_t line = 0; line < kBitmapLines; ++line) {
    uint64_t w[kWordsPerLine];
    alloc_internal::EffectiveWords(BitmapLines(chunk)[line], epochs_, w);
    for (size_t k = 0; k < kWordsPerLine && line * kWordsPerLine + k < kLiveWords; ++k) {
      v->words[line * kWordsPerLine + k].live.store(w[k], std::memory_order_relaxed);
      v->words[line * kWordsPerLine + k].media = w[k];
    }
  }
  for (uint32_t b = 0; b < blocks; ++b) {
    if ((v->words[b / 64].live.load(std::memory_order_relaxed) >> (b % 64) & 1) == 0)
      out->push_back(ChunkOffset(chunk) + uint64_t{b} * size);
  }
  std::erase(unloaded_[c], chunk);
  SetVol(chunk, v, c);
  return v;
}

bool Heap::LoadNextChunk(int c, std::vector<uint64_t>* out, ThreadCache* owner) {
  std::lock_guard<std::mutex> l(chunk_mu_);
  if (unloaded_[c].empty()) return false;
  LoadChunk(unloaded_[c].back(), c, out, owner);
  return true;
}

ChunkVolatile* Heap::EnsureLoaded(uint64_t chunk, int c) {
  ChunkVolatile* v = Vol(chunk);
  if (v != nullptr) return v;
  std::vector<uint64_t> blocks;
  {
    std::lock_guard<std::mutex> l(chunk_mu_);
    v = Vol(chunk);
    if (v != nullptr) return v;
    v = LoadChunk(chunk, c, &blocks, nullptr);  // its free blocks go to the central list
  }
  Central& cen = central_[c];
  std::lock_guard<std::mutex> l(cen.mu);
  cen.blocks.insert(cen.blocks.end(), blocks.begin(), blocks.end());
  return v;
}

bool Heap::GrowFor(size_t size, uint64_t growths) {
  const size_t by = pool_.grow_by();
  if (by == 0) return false;
  std::lock_guard<std::mutex> l(grow_mu_);
  if (pool_.growths() != growths) return true;  // another thread grew the pool meanwhile
  // At least grow_by (and the smallest growth), and enough for the request as one run of data
  // chunks in the new segment, after its metadata chunks.
  const uint64_t n = std::max<uint64_t>(1, (size + kChunkSize - 1) / kChunkSize);
  uint64_t count = n + 1;
  while (count - alloc_internal::MetaChunksFor(count) < n) ++count;
  const uint64_t fits = ChunkOffset(chunks_.load(std::memory_order_acquire)) + count * kChunkSize;
  const uint64_t old_size = pool_.size();
  const absl::Status st =
      pool_.Grow(std::max<uint64_t>(old_size + std::max<uint64_t>(by, Pool::kMinGrowth), fits));
  if (!st.ok()) {
    tls_grow_error = st;
    return false;
  }
  return true;
}

}  // namespace pmrt::alloc
