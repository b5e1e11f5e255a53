// The allocator's shared internal state: the thread caches, the free batches and each chunk's
// volatile state, the hot helpers every part of Heap uses, and the constants of its chunk
// states. Included by the alloc/ sources only (heap.cc: open, format, load, growth; chunks.cc:
// chunk runs, metadata writes and the boundary; allocate.cc; free.cc; tx_hooks.cc;
// inspect.cc).
#ifndef PMRT_ALLOC_INTERNAL_HEAP_STATE_H_
#define PMRT_ALLOC_INTERNAL_HEAP_STATE_H_

#include <array>
#include <atomic>
#include <boost/intrusive/list.hpp>
#include <cstdint>
#include <mutex>
#include <vector>

#include "alloc/allocator.h"
#include "alloc/internal/heap_layout.h"
#include "alloc/internal/logged_line.h"
#include "base/crc32c.h"

namespace pmrt::alloc {

using alloc_internal::ChunkKind;
using alloc_internal::ChunkMeta;
using alloc_internal::HeapHeader;
using alloc_internal::kBitmapLines;
using alloc_internal::kBitsPerLine;
using alloc_internal::kChunkSize;
using alloc_internal::kLiveWords;
using alloc_internal::kWordsPerLine;
using alloc_internal::LineWriter;
using alloc_internal::LoggedLine;
using alloc_internal::MakeState;
using alloc_internal::SegmentHeader;
using alloc_internal::StateClass;
using alloc_internal::StateKind;
using alloc_internal::StateRun;

}  // namespace pmrt::alloc

namespace pmrt::alloc_internal {

using alloc::SizeClasses;

// The frees of one thread in one epoch, reusable once the epoch has closed. Its small blocks
// go back to the thread cache that freed them (so that two threads' lists do not mix blocks of
// one live-map line, which costs a contended line per call): the reclaimer marks the batch
// ready, and the cache collects it (ThreadCache::pending).
struct ThreadCache;
// A batch is in at most one list at a time (its cache's pending list, or none while it is being
// filled, collected or kept spare), so one hook serves.
struct FreeBatch
    : boost::intrusive::list_base_hook<boost::intrusive::link_mode<boost::intrusive::normal_link>> {
  std::vector<uint64_t> small[SizeClasses::kCount];  // block offsets by class
  // Small blocks of chunks another cache owns, per owner (a few owners at a time; a block whose
  // slot holds another owner goes to `small`): once ready they go to the owner's inbox, so
  // that allocations in a chunk keep coming from one thread.
  static constexpr int kForeign = 4;
  ThreadCache* foreign_owner[kForeign] = {};
  std::vector<uint64_t> foreign[kForeign];
  std::vector<std::pair<uint64_t, uint64_t>> extents;  // (first chunk, chunk count)
  std::atomic<bool> ready{false};                      // the grace period has passed
  uint64_t epoch = 0;                                  // of its frees

  // Where a freed block of chunk owner `owner` (null: none) waits in this batch.
  std::vector<uint64_t>& For(ThreadCache* owner, ThreadCache* self, int c) {
    if (owner == nullptr || owner == self) return small[c];
    const int slot = static_cast<int>((reinterpret_cast<uintptr_t>(owner) >> 6) % kForeign);
    if (foreign_owner[slot] == nullptr) foreign_owner[slot] = owner;
    return foreign_owner[slot] == owner ? foreign[slot] : small[c];
  }
};

constexpr size_t kRefillBatch = 64;  // blocks moved from a central list per refill

// Per class: the list size at which a free first looks at spilling (two chunks' worth and a
// refill batch; see Heap::MaybeSpill).
constexpr std::array<uint32_t, SizeClasses::kCount> kInitialSpillAt = [] {
  std::array<uint32_t, SizeClasses::kCount> a{};
  for (int c = 0; c < SizeClasses::kCount; ++c)
    a[c] = static_cast<uint32_t>(2 * SizeClasses::kBlocksPerChunk[c] + kRefillBatch);
  return a;
}();

// Aligned to a cache line: two threads' caches never share one (the lists and counters are
// written on every call).
struct alignas(64) ThreadCache {
  // Written by the owner only (every call); read by Stats from any thread.
  std::atomic<uint64_t> allocations{0}, frees{0};
  // Per class: the list size at which a free looks at spilling (Heap::MaybeSpill), and
  // whether the list ran empty (Refill) since the last look.
  std::array<uint32_t, SizeClasses::kCount> spill_at = kInitialSpillAt;
  bool drained[SizeClasses::kCount] = {};
  std::vector<uint64_t> free[SizeClasses::kCount];  // block offsets ready to hand out
  uint64_t batch_epoch = 0;
  FreeBatch* batch = nullptr;  // frees of batch_epoch, retired as one object
  uint64_t batch_bytes = 0;    // in `batch` so far (Heap::NoteBatchBytes)
  // Batches this cache retired, oldest first; collected into the lists once ready. The lock is
  // taken once per batch by the owner, and by an allocation that finds the heap full
  // (Heap::StealReady).
  std::mutex pending_mu;
  boost::intrusive::list<FreeBatch, boost::intrusive::constant_time_size<false>> pending;
  // Blocks of this cache's chunks freed by other caches (reusable at once), collected by
  // Refill; and this cache's outgoing ones, per owner (a few owners at a time), sent in bulk.
  std::mutex inbox_mu;
  std::vector<uint64_t> inbox;
  static constexpr int kOutboxes = 4;
  static constexpr size_t kOutboxBatch = 64;
  ThreadCache* out_owner[kOutboxes] = {};
  std::vector<uint64_t> out[kOutboxes];
  std::vector<uint32_t> dirty_chunks[2];  // chunks changed, per epoch parity
  uint64_t seen_ops = 0;  // allocations + frees at the last boundary (Heap::Rebalance only)
};

// A small chunk in use this run. `live` is the truth about its blocks while the heap runs
// (bit set = allocated); the persistent bitmap catches up at each boundary. The blocks
// allocated in the current epoch (what callers write into new blocks, to be written back at the
// boundary) are exactly the bits set in `live` and clear in `media`: the boundary derives them,
// so the hot path records nothing per data line.
struct alignas(64) ChunkVolatile {
  // Word w of the live map beside word w of the bitmap as of the current epoch's start (what
  // media holds: it changes only at boundaries, when no guard is open), in one cache line, so
  // FreeUnshared tells a block allocated in this epoch without a second miss.
  struct Word {
    std::atomic<uint64_t> live{0};
    uint64_t media = 0;
  };
  // The last epoch in which the chunk was listed for the boundary (Touch); in the first line,
  // with the first words of the live map.
  std::atomic<uint64_t> dirty_epoch{0};
  // The thread cache that took the chunk (fresh, or read from an earlier run by Refill); null
  // for a chunk first read by a free. Set before the chunk is published, then immutable. A
  // block of this chunk freed by another cache in the epoch of its allocation is sent back to
  // the owner (ThreadCache::inbox), so that allocations in a chunk come from one thread only.
  ThreadCache* owner = nullptr;
  Word words[kLiveWords];
};

// The calling thread's context for one heap, found with one thread-local load on the hot path:
// its thread cache and its slot of the heap's epoch manager (Heap::Local).
struct TlsContext {
  uint64_t heap_id = 0;  // Heap ids start at 1 and never repeat
  ThreadCache* tc = nullptr;
  epoch::ThreadSlot* slot = nullptr;
};
// constinit: no dynamic initialization, so every source reads it directly (no TLS wrapper).
extern constinit thread_local TlsContext tls_context;
// Why the calling thread's last null-returning Allocate failed (Heap::LastError).
extern constinit thread_local alloc::AllocError tls_error;

inline constexpr uint64_t kTailState = MakeState(ChunkKind::kExtent, 0, 0);  // inside an extent
// A grown segment's metadata chunk (volatile only: its header line on media stays zero).
inline constexpr uint64_t kMetaState = MakeState(ChunkKind::kExtent, 1, 0);
// Tail and metadata chunks: no block starts there; each is the free state on media.
constexpr bool Inert(uint64_t s) { return StateKind(s) == ChunkKind::kExtent && StateRun(s) == 0; }

inline uint32_t SegmentCrc(const SegmentHeader& h) {
  return Crc32c(&h, offsetof(SegmentHeader, crc));
}

// Relaxed add by the owning thread (no read-modify-write: only the owner writes).
inline void Bump(std::atomic<uint64_t>& c) {
  c.store(c.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
}

}  // namespace pmrt::alloc_internal

namespace pmrt::alloc {

using alloc_internal::Bump;
using alloc_internal::ChunkVolatile;
using alloc_internal::FreeBatch;
using alloc_internal::Inert;
using alloc_internal::kMetaState;
using alloc_internal::kTailState;
using alloc_internal::SegmentCrc;
using alloc_internal::ThreadCache;
using alloc_internal::tls_context;

inline ChunkVolatile* Heap::Vol(uint64_t chunk, std::memory_order mo) const {
  return reinterpret_cast<ChunkVolatile*>(vol_[chunk].load(mo) & ~kVolTagMask);
}

inline Heap::Context Heap::Local() {
  const alloc_internal::TlsContext& ctx = tls_context;
  if (ctx.heap_id == id_) [[likely]]
    return {ctx.tc, ctx.slot};
  return LocalSlow();
}

inline void Heap::Touch(ThreadCache& tc, ChunkVolatile& v, uint64_t chunk, uint64_t e) {
  // The first change of a chunk in e lists it in the changing thread's cache for e's boundary.
  if (v.dirty_epoch.load(std::memory_order_relaxed) != e &&
      v.dirty_epoch.exchange(e, std::memory_order_relaxed) != e) {
    tc.dirty_chunks[e & 1].push_back(static_cast<uint32_t>(chunk));
  }
}

}  // namespace pmrt::alloc

#endif  // PMRT_ALLOC_INTERNAL_HEAP_STATE_H_
