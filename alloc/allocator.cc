#include "alloc/allocator.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
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
struct FreeBatch {
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
  std::deque<FreeBatch*> pending;
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

}  // namespace pmrt::alloc_internal

namespace pmrt::alloc {

using alloc_internal::ChunkVolatile;
using alloc_internal::FreeBatch;
using alloc_internal::ThreadCache;

namespace {

// The calling thread's context for one heap, found with one thread-local load on the hot path:
// its thread cache and its slot of the heap's epoch manager.
struct TlsContext {
  uint64_t heap_id = 0;  // Heap ids start at 1 and never repeat
  ThreadCache* tc = nullptr;
  epoch::ThreadSlot* slot = nullptr;
};
thread_local TlsContext tls_context;
std::atomic<uint64_t> g_next_heap_id{1};

constexpr Site kHeaderFlush{"alloc.heap.header.flush"};
constexpr Site kHeaderFence{"alloc.heap.header.fence"};
constexpr uint64_t kTailState = MakeState(ChunkKind::kExtent, 0, 0);  // inside an extent
// A grown segment's metadata chunk (volatile only: its header line on media stays zero).
constexpr uint64_t kMetaState = MakeState(ChunkKind::kExtent, 1, 0);
// Tail and metadata chunks: no block starts there; each is the free state on media.
constexpr bool Inert(uint64_t s) { return StateKind(s) == ChunkKind::kExtent && StateRun(s) == 0; }
constexpr Site kGrowSegment{"alloc.grow.segment"};
constexpr Site kGrowSegmentFence{"alloc.grow.segment.fence"};
using alloc_internal::kRefillBatch;

thread_local AllocError tls_error = AllocError::kNone;
thread_local absl::Status tls_grow_error;  // why the calling thread's last automatic growth failed
std::atomic<Heap*> g_default{nullptr};

uint32_t HeaderCrc(const HeapHeader& h) { return Crc32c(&h, offsetof(HeapHeader, crc)); }
uint32_t SegmentCrc(const SegmentHeader& h) { return Crc32c(&h, offsetof(SegmentHeader, crc)); }

bool IsPowerOfTwo(size_t v) { return v != 0 && (v & (v - 1)) == 0; }

// Relaxed add by the owning thread (no read-modify-write: only the owner writes).
void Bump(std::atomic<uint64_t>& c) {
  c.store(c.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
}

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

const char* AllocErrorName(AllocError e) {
  switch (e) {
    case AllocError::kNone:
      return "none";
    case AllocError::kPoolFull:
      return "pool full";
    case AllocError::kTooLarge:
      return "larger than the heap";
    case AllocError::kBadAlignment:
      return "alignment not a power of two <= 64 KiB";
    case AllocError::kNoHeap:
      return "no heap is open";
    case AllocError::kPoolFullCannotWait:
      return "pool full, and this call cannot wait for the frees of the running epoch (it runs "
             "under an epoch guard or a transaction, or the epochs are advanced by hand): retry "
             "outside it";
    case AllocError::kOverflow:
      return "the array's size in bytes overflows";
  }
  return "?";
}

AllocError Heap::LastError() { return tls_error; }
void Heap::SetLastError(AllocError e) { tls_error = e; }
Heap* Heap::Default() { return g_default.load(std::memory_order_acquire); }

Heap::Heap(Pool& pool, epoch::Manager& epochs)
    : pool_(pool), epochs_(epochs), id_(g_next_heap_id.fetch_add(1)) {}

Heap::~Heap() {
  if (attached_) pool_.CheckNoLayerAbove(PoolLayer::kHeap, "the alloc::Heap");
  // Frees still in their grace period are retired batches that call back into this heap, and
  // the boundary must copy this epoch's bitmap changes: close the epoch now (Advance runs the
  // reclaimers under its lock, so none is still running when it returns).
  (void)epochs_.Advance();
  if (attached_) pool_.SetGrowthListener({});
  epochs_.RemoveFlushSource(flush_source_);
  Heap* self = this;
  g_default.compare_exchange_strong(self, nullptr);
  if (vol_)
    for (uint64_t i = 0; i < chunks_; ++i) delete Vol(i);
  for (ChunkVolatile* v : spare_vols_) delete v;
  for (FreeBatch* b : spare_batches_) delete b;  // every batch was released by the Advance
  caches_.ForEach([](ThreadCache& tc) {
    for (FreeBatch* b : tc.pending) delete b;
    tc.pending.clear();
  });
  if (attached_) pool_.DetachLayer(PoolLayer::kHeap);
}

absl::StatusOr<std::unique_ptr<Heap>> Heap::Open(Pool& pool, epoch::Manager& epochs) {
  if (auto st = pool.AttachLayer(PoolLayer::kHeap); !st.ok()) return st;
  std::unique_ptr<Heap> h(new Heap(pool, epochs));
  h->attached_ = true;
  const RegionDesc r = pool.region(PoolRegion::kHeap);
  h->region_ = static_cast<uint8_t*>(pool.region_base(PoolRegion::kHeap));
  h->region_off_ = r.offset;
  if (reinterpret_cast<HeapHeader*>(h->region_)->magic == 0) {
    if (auto st = h->Format(); !st.ok()) return st;
  }
  if (auto st = h->Load(); !st.ok()) return st;
  h->flush_source_ = epochs.AddFlushSource(
      [p = h.get()](uint64_t e, std::vector<Range>& out) { p->CollectDirty(e, out); });
  pool.SetGrowthListener({[p = h.get()](uint64_t old_size, uint64_t new_size) {
                            return p->PrepareGrowth(old_size, new_size);
                          },
                          [p = h.get()](uint64_t, uint64_t) { p->CommitGrowth(); }});
  Heap* none = nullptr;
  g_default.compare_exchange_strong(none, h.get());
  return h;
}

// ---- format and load --------------------------------------------------------------------------

absl::Status Heap::Format() {
  const RegionDesc r = pool_.region(PoolRegion::kHeap);
  // A heap without a header must be all zero (an empty heap); anything else is damage.
  const size_t probe = std::min<size_t>(r.size, alloc_internal::kMetaOffset + 64 * 1024);
  for (size_t i = 0; i < probe; ++i) {
    if (region_[i] != 0) {
      return absl::DataLossError(absl::StrCat(pool_.path(), ": heap region at offset ", r.offset,
                                              " has no header but holds data at byte ", i));
    }
  }
  uint64_t n = r.size / kChunkSize;
  uint64_t data = 0;
  for (; n > 0; --n) {
    const uint64_t meta_end = r.offset + alloc_internal::kMetaOffset + n * sizeof(ChunkMeta);
    data = (meta_end + kChunkSize - 1) / kChunkSize * kChunkSize;
    if (data + n * kChunkSize <= r.offset + r.size) break;
  }
  if (n == 0) {
    return absl::FailedPreconditionError(
        absl::StrCat(pool_.path(), ": heap region of ", r.size, " bytes holds no 64 KiB chunk"));
  }
  HeapHeader h{};
  h.magic = alloc_internal::kHeapMagic;
  h.version = alloc_internal::kHeapVersion;
  h.chunk_size = kChunkSize;
  h.chunk_count = n;
  h.data_offset = data - r.offset;
  h.crc = HeaderCrc(h);
  // The zeroed metadata already says "every chunk free". The header is durable before any
  // metadata line changes (the first allocation), or a crash could leave metadata under a
  // zero header, which Format refuses as damage.
  std::memcpy(region_, &h, sizeof(h));
  pool_.persister().Persist(kHeaderFlush, kHeaderFence, region_, sizeof(h));
  return absl::OkStatus();
}

absl::Status Heap::ValidateHeader(const Pool& pool) {
  const RegionDesc r = pool.region(PoolRegion::kHeap);
  const auto& h = *static_cast<const HeapHeader*>(pool.region_base(PoolRegion::kHeap));
  if (h.magic == 0) return absl::OkStatus();  // never formatted (Format checks the rest)
  auto bad = [&](const std::string& what) {
    return absl::DataLossError(
        absl::StrCat(pool.path(), ": heap header at offset ", r.offset, ": ", what));
  };
  if (h.magic != alloc_internal::kHeapMagic || h.crc != HeaderCrc(h)) {
    return bad("bad magic or checksum");
  }
  if (h.version == 0) return bad("version 0");
  if (h.version > alloc_internal::kHeapVersion) {
    return absl::FailedPreconditionError(
        absl::StrCat(pool.path(), ": heap format version ", h.version, " is newer than supported"));
  }
  const uint64_t meta_end = alloc_internal::kMetaOffset + h.chunk_count * sizeof(ChunkMeta);
  if (h.chunk_size != kChunkSize || h.chunk_count == 0 || h.data_offset < meta_end ||
      (r.offset + h.data_offset) % kChunkSize != 0 ||
      h.data_offset + h.chunk_count * kChunkSize > r.size) {
    return bad("geometry does not fit the heap region");
  }
  return absl::OkStatus();
}

absl::Status Heap::Load() {
  const RegionDesc r = pool_.region(PoolRegion::kHeap);
  const auto& h = *reinterpret_cast<const HeapHeader*>(region_);
  // Open formatted a region whose magic was 0, so the header is checked in full here.
  if (absl::Status st = ValidateHeader(pool_); !st.ok()) return st;
  chunks_ = h.chunk_count;
  seg0_chunks_ = h.chunk_count;
  data_off_ = r.offset + h.data_offset;
  max_chunks_ = std::max<uint64_t>(chunks_, (pool_.max_size() - data_off_) / kChunkSize);
  uint8_t* meta = region_ + alloc_internal::kMetaOffset;
  if (h.version >= alloc_internal::kFirstSplitMetaVersion) {
    // Every header line together, then every bitmap: Load reads chunks_ consecutive lines.
    headers_ = meta;
    header_stride_ = sizeof(LoggedLine);
    bitmaps_ = meta + chunks_ * sizeof(LoggedLine);
    bitmap_stride_ = kBitmapLines * sizeof(LoggedLine);
  } else {
    headers_ = meta;
    header_stride_ = sizeof(ChunkMeta);
    bitmaps_ = meta + offsetof(ChunkMeta, bits);
    bitmap_stride_ = sizeof(ChunkMeta);
  }
  if (!state_.Allocate(max_chunks_) || !small_class_.Allocate(max_chunks_) ||
      !vol_.Allocate(max_chunks_) || !segments_.Allocate(max_chunks_ / 2 + 1)) {
    return absl::ResourceExhaustedError(absl::StrCat(
        pool_.path(), ": no address space for the heap's state of ", max_chunks_, " chunks"));
  }
  if (auto st = LoadSegments(); !st.ok()) return st;
  early_advance_bytes_ = std::max<uint64_t>(capacity() / 16, uint64_t{1} << 20);
  // One line per chunk: its recovered state. Bitmaps are read when a chunk is first used.
  uint64_t run_start = 0, run_len = 0;
  uint64_t seg_end = seg0_chunks_;  // end of the segment chunk i is in (extents stay inside)
  for (uint64_t i = 0, next_seg = 0; i < chunks_; ++i) {
    if (i == seg_end) {  // a grown segment: its metadata chunks, then its data
      if (run_len > 0) ReturnRun(run_start, run_len);
      run_len = 0;
      const Segment& seg = segments_[next_seg++];
      for (uint64_t m = 0; m < seg.meta; ++m) state_[i + m] = kMetaState;
      i += seg.meta - 1;
      seg_end = seg.first + seg.count;
      continue;
    }
    uint64_t w[alloc_internal::kWordsPerLine];
    alloc_internal::EffectiveWords(HeaderLine(i), epochs_, w);
    const uint64_t s = w[0];
    const ChunkKind kind = StateKind(s);
    if (kind == ChunkKind::kFree) {
      state_[i] = s;
      if (run_len == 0) run_start = i;
      ++run_len;
      continue;
    }
    if (run_len > 0) ReturnRun(run_start, run_len);
    run_len = 0;
    if (kind == ChunkKind::kSmall && StateClass(s) < SizeClasses::kCount && StateRun(s) == 1) {
      state_[i] = s;
      small_class_[i] = static_cast<uint8_t>(StateClass(s) + 1);
      unloaded_[StateClass(s)].push_back(i);
    } else if (kind == ChunkKind::kExtent && StateRun(s) >= 1 && i + StateRun(s) <= seg_end) {
      state_[i] = s;
      for (uint64_t t = 1; t < StateRun(s); ++t) state_[i + t] = kTailState;
      i += StateRun(s) - 1;
    } else {
      return Corrupt(i, absl::StrCat("bad chunk state word ", s));
    }
  }
  if (run_len > 0) ReturnRun(run_start, run_len);
  return absl::OkStatus();
}

// The grown segments after segment 0, read where the pool's size says they are (heap_layout.h).
absl::Status Heap::LoadSegments() {
  const uint64_t end = pool_.size();
  uint64_t next = chunks_;
  uint64_t n = 0, meta = 0;
  while (ChunkOffset(next) + 2 * kChunkSize <= end) {
    const uint64_t off = ChunkOffset(next);
    const auto& sh = *reinterpret_cast<const SegmentHeader*>(pool_.base() + off);
    auto bad = [&](const std::string& what) {
      return absl::DataLossError(absl::StrCat(pool_.path(), ": heap segment at offset ", off,
                                              " (chunk ", next, "): ", what));
    };
    if (sh.magic != alloc_internal::kSegmentMagic || sh.crc != SegmentCrc(sh)) {
      return bad("bad magic or checksum (the pool grew here)");
    }
    if (sh.first_chunk != next || sh.chunk_count < 2 ||
        sh.meta_chunks != alloc_internal::MetaChunksFor(sh.chunk_count) ||
        sh.meta_chunks >= sh.chunk_count || sh.chunk_count > (end - off) / kChunkSize ||
        next + sh.chunk_count > max_chunks_) {
      return bad(absl::StrCat("geometry (first chunk ", sh.first_chunk, ", ", sh.chunk_count,
                              " chunks, ", sh.meta_chunks, " of metadata) does not fit the pool"));
    }
    uint8_t* lines = pool_.base() + off + sizeof(SegmentHeader);
    segments_[n++] = Segment{next, sh.chunk_count, sh.meta_chunks, lines,
                             lines + sh.chunk_count * sizeof(LoggedLine)};
    meta += sh.meta_chunks;
    next += sh.chunk_count;
  }
  segment_count_.store(n, std::memory_order_release);
  meta_chunks_.store(meta, std::memory_order_release);
  chunks_.store(next, std::memory_order_release);
  return absl::OkStatus();
}

const Heap::Segment& Heap::SegmentOf(uint64_t chunk) const {
  // The last segment whose first chunk is at most `chunk` (segments are few: one per growth).
  uint64_t lo = 0, hi = segment_count_.load(std::memory_order_acquire);
  while (hi - lo > 1) {
    const uint64_t mid = lo + (hi - lo) / 2;
    (segments_[mid].first <= chunk ? lo : hi) = mid;
  }
  return segments_[lo];
}

LoggedLine& Heap::HeaderLine(uint64_t chunk) const {
  if (chunk < seg0_chunks_) [[likely]]
    return *reinterpret_cast<LoggedLine*>(headers_ + chunk * header_stride_);
  const Segment& seg = SegmentOf(chunk);
  return reinterpret_cast<LoggedLine*>(seg.headers)[chunk - seg.first];
}

LoggedLine* Heap::BitmapLines(uint64_t chunk) const {
  if (chunk < seg0_chunks_) [[likely]]
    return reinterpret_cast<LoggedLine*>(bitmaps_ + chunk * bitmap_stride_);
  const Segment& seg = SegmentOf(chunk);
  return reinterpret_cast<LoggedLine*>(seg.bitmaps) + (chunk - seg.first) * kBitmapLines;
}

// ---- growth (docs/alloc.md, "Growth") ---------------------------------------------------------

absl::Status Heap::PrepareGrowth(uint64_t old_size, uint64_t new_size) {
  // The new segment starts at the chunk after the last one (in the old pool's unused tail, or
  // at its end) and takes every whole chunk up to the new end.
  const uint64_t first = chunks_.load(std::memory_order_acquire);
  const uint64_t off = ChunkOffset(first);
  const uint64_t count = new_size > off ? (new_size - off) / kChunkSize : 0;
  const uint64_t meta = alloc_internal::MetaChunksFor(count);
  if (count < 2 || meta >= count || first + count > max_chunks_) {
    return absl::InvalidArgumentError(
        absl::StrCat(pool_.path(), ": growing the pool from ", old_size, " to ", new_size,
                     " bytes leaves no room for a heap segment at offset ", off));
  }
  // Its metadata must read "every chunk free": zero. Past old_size the pool made it so; a tail
  // below it may hold the header an interrupted growth wrote.
  uint8_t* base = pool_.base() + off;
  const Persister& p = pool_.persister();
  const uint64_t meta_bytes = sizeof(SegmentHeader) + count * sizeof(ChunkMeta);
  for (uint64_t o = 0; o < meta_bytes && off + o < old_size; o += 64) {
    uint8_t* line = base + o;
    bool zero = true;
    for (int b = 0; b < 64 && zero; ++b) zero = line[b] == 0;
    if (zero) continue;
    std::memset(line, 0, 64);
    p.Flush(kGrowSegment, line, 64);
  }
  SegmentHeader sh{};
  sh.magic = alloc_internal::kSegmentMagic;
  sh.first_chunk = first;
  sh.chunk_count = count;
  sh.meta_chunks = meta;
  sh.crc = SegmentCrc(sh);
  std::memcpy(base, &sh, sizeof(sh));
  // Durable before the pool commits the size that makes Load read it; until then a crash
  // leaves a pool too short for it, and it is never read.
  p.Persist(kGrowSegment, kGrowSegmentFence, base, sizeof(sh));
  uint8_t* lines = base + sizeof(SegmentHeader);
  pending_ = Segment{first, count, meta, lines, lines + count * sizeof(LoggedLine)};
  return absl::OkStatus();
}

void Heap::CommitGrowth() {
  const Segment seg = pending_;
  const uint64_t n = segment_count_.load(std::memory_order_relaxed);
  segments_[n] = seg;
  segment_count_.store(n + 1, std::memory_order_release);
  for (uint64_t m = 0; m < seg.meta; ++m) state_[seg.first + m] = kMetaState;
  meta_chunks_.fetch_add(seg.meta, std::memory_order_acq_rel);
  chunks_.store(seg.first + seg.count, std::memory_order_release);
  // The data chunks: one free run, which an allocation can take from now on.
  ReturnRun(seg.first + seg.meta, seg.count - seg.meta);
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

absl::Status Heap::Corrupt(uint64_t chunk, const std::string& what) const {
  return absl::DataLossError(absl::StrCat(
      pool_.path(), ": heap chunk ", chunk, " (metadata at offset ",
      pool_.offset_of(&HeaderLine(chunk)), ", data at offset ", ChunkOffset(chunk), "): ", what));
}

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

inline ChunkVolatile* Heap::Vol(uint64_t chunk, std::memory_order mo) const {
  return reinterpret_cast<ChunkVolatile*>(vol_[chunk].load(mo) & ~kVolTagMask);
}

int Heap::LoadedClass(uint64_t off) const {
  const uint64_t chunk = (off - data_off_) >> alloc_internal::kChunkShift;
  return static_cast<int>(vol_[chunk].load(std::memory_order_acquire) & kVolTagMask) - 1;
}

void Heap::SetVol(uint64_t chunk, ChunkVolatile* v, int c) {
  vol_[chunk].store(reinterpret_cast<uintptr_t>(v) | static_cast<uintptr_t>(c + 1),
                    std::memory_order_release);
}

// ---- the thread's context ---------------------------------------------------------------------

inline Heap::Context Heap::Local() {
  const TlsContext& ctx = tls_context;
  if (ctx.heap_id == id_) [[likely]]
    return {ctx.tc, ctx.slot};
  return LocalSlow();
}

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

inline void Heap::Touch(ThreadCache& tc, ChunkVolatile& v, uint64_t chunk, uint64_t e) {
  // The first change of a chunk in e lists it in the changing thread's cache for e's boundary.
  if (v.dirty_epoch.load(std::memory_order_relaxed) != e &&
      v.dirty_epoch.exchange(e, std::memory_order_relaxed) != e) {
    tc.dirty_chunks[e & 1].push_back(static_cast<uint32_t>(chunk));
  }
}

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

void Heap::CollectDirty(uint64_t e, std::vector<Range>& out) {
  // Step 3 of the advance of e, with no guard open: nobody changes a live map now, and only
  // this thread writes bitmap lines. Each line whose media copy differs from the live map is
  // logged in e (undo + tag, in the line) and updated; the line and the data of the blocks
  // allocated in e (live now, clear on media as of e's start) join the batch flush. If e
  // fails, the undo copies put every line back.
  const Persister& p = pool_.persister();
  auto dirty_line = [&out](const LoggedLine* l) { out.push_back({l, sizeof(*l)}); };
  caches_.ForEach([&](ThreadCache& tc) {
    for (uint32_t chunk : tc.dirty_chunks[e & 1]) {
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

// ---- free -------------------------------------------------------------------------------------

bool Heap::Locate(const void* p, uint64_t* chunk, uint32_t* block, int* cls) const {
  const auto addr = reinterpret_cast<uintptr_t>(p);
  const auto base = reinterpret_cast<uintptr_t>(pool_.base());
  const uint64_t off = addr - base;  // wraps for addresses below the pool: caught below
  if (addr < base || off < data_off_ || off >= data_off_ + (chunks_ << alloc_internal::kChunkShift))
    return false;
  *chunk = (off - data_off_) >> alloc_internal::kChunkShift;
  const auto rel = static_cast<uint32_t>(off & (kChunkSize - 1));
  // A byte per chunk (the common case, a small block) before the full state word.
  if (const uint8_t sc = small_class_[*chunk].load(std::memory_order_acquire); sc != 0) {
    *cls = sc - 1;
    *block = SizeClasses::BlockOf(rel, *cls);
    return *block * SizeClasses::Size(*cls) == rel && *block < SizeClasses::BlocksPerChunk(*cls);
  }
  const uint64_t s = state_[*chunk].load(std::memory_order_acquire);
  *cls = -1;
  *block = 0;
  return !Inert(s) && StateKind(s) == ChunkKind::kExtent && rel == 0;
}

absl::Status Heap::LocateError(const void* p) const {
  const auto* b = static_cast<const uint8_t*>(p);
  if (!pool_.contains(p) || static_cast<uint64_t>(b - pool_.base()) < data_off_ ||
      static_cast<uint64_t>(b - pool_.base()) >= data_off_ + (chunks_ << 16)) {
    return absl::InvalidArgumentError(absl::StrCat(
        pool_.path(), ": pointer ", absl::StrFormat("%p", p), " is not inside the heap"));
  }
  const uint64_t off = static_cast<uint64_t>(b - pool_.base());
  const uint64_t chunk = (off - data_off_) >> 16;
  if (StateKind(state_[chunk].load()) == ChunkKind::kFree && (off & (kChunkSize - 1)) == 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        pool_.path(), ": double free: no block is allocated at offset ", off, " (a free chunk)"));
  }
  return absl::InvalidArgumentError(
      absl::StrCat(pool_.path(), ": offset ", off, " is not the start of a heap block"));
}

template <bool unshared>
bool Heap::FreeFast(void* p) {
  // The fast path of Free and FreeUnshared: a small block of a chunk in use, and either room
  // in the thread's list (FreeUnshared of a block allocated in the running epoch) or this
  // epoch's free batch already open. It changes nothing unless it completes; anything else (an
  // error included) returns false and the caller takes FreeImpl, which decides from scratch
  // (after this function's guard has closed).
  const uint64_t off = static_cast<uint64_t>(static_cast<uint8_t*>(p) - pool_.base());
  if (off - data_off_ >= (chunks_ << alloc_internal::kChunkShift)) return false;  // wraps below
  const uint64_t chunk = (off - data_off_) >> alloc_internal::kChunkShift;
  const Context ctx = Local();
  ThreadCache& tc = *ctx.tc;
  // Nothing below opens a guard. Inside it the chunk cannot change hands: a boundary (no guard
  // open) may return an empty chunk to the free runs.
  epoch::LeafGuard g(epochs_, *ctx.slot);
  // One load: the chunk's volatile state and its class (tag 0: not a small chunk in use).
  const uintptr_t tagged = vol_[chunk].load(std::memory_order_acquire);
  if ((tagged & kVolTagMask) == 0) return false;
  auto* v = reinterpret_cast<ChunkVolatile*>(tagged & ~kVolTagMask);
  const int c = static_cast<int>(tagged & kVolTagMask) - 1;
  const auto rel = static_cast<uint32_t>(off & (kChunkSize - 1));
  const uint32_t b = SizeClasses::BlockOf(rel, c);
  if (b * SizeClasses::Size(c) != rel || b >= SizeClasses::BlocksPerChunk(c)) return false;
  const uint64_t e = g.epoch();
  ChunkVolatile::Word& word = v->words[b / 64];
  const uint64_t bit = uint64_t{1} << (b % 64);
  std::vector<uint64_t>* to;
  ThreadCache* send_to = nullptr;
  const bool batched = !unshared || (word.media & bit) != 0;  // waits for its grace period
  if (!batched) {
    // Media (read inside the guard: it changes only at boundaries) holds the bitmap as of this
    // epoch's start: a clear bit there means the block was allocated in this epoch, so nothing
    // durable refers to its contents and it is reusable at once: by its chunk's owner.
    if (v->owner != nullptr && v->owner != &tc) {
      const int slot =
          static_cast<int>((reinterpret_cast<uintptr_t>(v->owner) >> 6) % ThreadCache::kOutboxes);
      to = &tc.out[slot];
      if (tc.out_owner[slot] != v->owner) {
        if (!to->empty()) SendOutbox(tc, slot);
        tc.out_owner[slot] = v->owner;
      }
      if (to->size() + 1 >= ThreadCache::kOutboxBatch) send_to = v->owner;
    } else {
      to = &tc.free[c];
      if (to->size() >= tc.spill_at[c]) return false;  // FreeImpl looks at spilling
    }
  } else {
    if (tc.batch == nullptr || tc.batch_epoch != e) return false;  // FreeImpl opens a batch
    to = &tc.batch->For(v->owner, &tc, c);  // reusable once e has closed (FreeImpl)
  }
  if ((word.live.fetch_and(~bit, std::memory_order_relaxed) & bit) == 0) return false;
  Touch(tc, *v, chunk, e);  // the boundary copies the cleared bit to media, logged in e
  Bump(tc.frees);
  to->push_back(off);
  if (batched) NoteBatchBytes(tc, SizeClasses::Size(c));
  if (send_to != nullptr) SendOutbox(tc, static_cast<int>(to - tc.out));
  return true;
}

void Heap::SendOutbox(ThreadCache& tc, int slot) {
  ThreadCache& owner = *tc.out_owner[slot];
  std::lock_guard<std::mutex> l(owner.inbox_mu);
  owner.inbox.insert(owner.inbox.end(), tc.out[slot].begin(), tc.out[slot].end());
  tc.out[slot].clear();
}

void Heap::CollectInbox(ThreadCache& tc) {
  // The owner only: blocks of its chunks that other caches freed go back into its lists.
  std::vector<uint64_t> in;
  {
    std::lock_guard<std::mutex> l(tc.inbox_mu);
    if (tc.inbox.empty()) return;
    in.swap(tc.inbox);
  }
  for (uint64_t off : in) {
    tc.free[LoadedClass(off)].push_back(off);
  }
}

absl::Status Heap::Free(void* p) {
  if (p == nullptr) return absl::OkStatus();
  return FreeFast<false>(p) ? absl::OkStatus() : FreeImpl(p, FreeMode::kShared);
}
absl::Status Heap::FreeUnshared(void* p) {
  if (p == nullptr) return absl::OkStatus();
  return FreeFast<true>(p) ? absl::OkStatus() : FreeImpl(p, FreeMode::kUnshared);
}
absl::Status Heap::FreeUnpublished(void* p) { return FreeImpl(p, FreeMode::kUnpublished); }

absl::Status Heap::DoubleFreeOr(absl::Status st) {
  if (st.code() != absl::StatusCode::kFailedPrecondition) return st;
  double_frees_.fetch_add(1, std::memory_order_relaxed);
#ifndef NDEBUG
  std::fprintf(stderr, "pmrt: %s\n", std::string(st.message()).c_str());
  std::abort();
#endif
  return st;
}

absl::Status Heap::FreeImpl(void* p, FreeMode mode) {
  const Context ctx = Local();
  ThreadCache& tc = *ctx.tc;
  epoch::Guard g(epochs_, *ctx.slot);
  const uint64_t e = g.epoch();
  uint64_t chunk;
  uint32_t block;
  int c;
  if (!Locate(p, &chunk, &block, &c)) return DoubleFreeOr(LocateError(p));
  const uint64_t off = pool_.offset_of(p);
  uint64_t run = 0;
  ThreadCache* owner = nullptr;
  if (c >= 0) {
    ChunkVolatile& v = *EnsureLoaded(chunk, c);
    owner = v.owner;
    const uint64_t bit = uint64_t{1} << (block % 64);
    ChunkVolatile::Word& word = v.words[block / 64];
    if ((word.live.fetch_and(~bit, std::memory_order_relaxed) & bit) == 0) {
      return DoubleFreeOr(absl::FailedPreconditionError(
          absl::StrCat(pool_.path(), ": double free: block at offset ", off, " is not allocated")));
    }
    Touch(tc, v, chunk, e);  // the boundary copies the cleared bit to media, logged in e
    if (mode == FreeMode::kUnshared && (word.media & bit) == 0) {
      // Media holds the bitmap as of e's start: a clear bit there means the block was
      // allocated in e, so nothing durable refers to its contents.
      Bump(tc.frees);
      auto& fl = tc.free[c];
      fl.push_back(off);
      MaybeSpill(tc, c);
      return absl::OkStatus();
    }
  } else {
    uint64_t s = state_[chunk].load(std::memory_order_acquire);
    const uint64_t freeing = MakeState(ChunkKind::kFree, 0, 0);
    if (!state_[chunk].compare_exchange_strong(s, freeing)) return DoubleFreeOr(LocateError(p));
    run = StateRun(s);
    SetChunkState(chunk, freeing, e);  // logged in e: if e fails the extent is live again
  }
  Bump(tc.frees);
  FreeBatch* batch;
  const bool grace = mode != FreeMode::kUnpublished;
  if (!grace) {
    batch = new FreeBatch;
  } else if (tc.batch != nullptr && tc.batch_epoch == e) {
    batch = tc.batch;
  } else {
    // Reusable once e has closed: no guard can hold the block any more, and e is durable.
    CollectReady(tc);  // once per thread per epoch: earlier batches back into the lists
    for (int slot = 0; slot < ThreadCache::kOutboxes; ++slot)
      if (!tc.out[slot].empty()) SendOutbox(tc, slot);
    {
      std::lock_guard<std::mutex> l(batches_mu_);
      if (spare_batches_.empty()) {
        batch = new FreeBatch;
      } else {
        batch = spare_batches_.back();
        spare_batches_.pop_back();
      }
    }
    {
      std::lock_guard<std::mutex> l(tc.pending_mu);
      tc.pending.push_back(batch);
    }
    tc.batch = batch;
    tc.batch_epoch = e;
    tc.batch_bytes = 0;
    batch->epoch = e;
    retired_batches_.fetch_add(1, std::memory_order_relaxed);  // once per thread per epoch
    epochs_.Retire(batch, [this](void* b) {
      // Runs once e has closed. Extents return to the free runs now; small blocks wait in the
      // batch for the cache that freed them.
      auto* fb = static_cast<FreeBatch*>(b);
      for (auto [first, n] : fb->extents) ReturnExtent(first, n);
      fb->extents.clear();
      if (pressure_epoch_.load(std::memory_order_relaxed) == fb->epoch) {
        // A full heap waits for this advance: the blocks go where any thread finds them, and
        // the next boundary under pressure can return their chunks.
        pressure_gain_.fetch_add(BatchToCentral(*fb), std::memory_order_release);
      }
      fb->ready.store(true, std::memory_order_release);
      retired_batches_.fetch_sub(1, std::memory_order_release);
    });
  }
  if (c >= 0) {
    batch->For(owner, &tc, c).push_back(off);
  } else {
    batch->extents.emplace_back(chunk, run);
  }
  if (!grace) {
    ReleaseBatch(batch);
  } else {
    NoteBatchBytes(tc, c >= 0 ? SizeClasses::Size(c) : run * kChunkSize);
  }
  return absl::OkStatus();
}

void Heap::NoteBatchBytes(ThreadCache& tc, uint64_t bytes) {
  // Blocks freed in an epoch are reusable only after it: a thread that frees much in one epoch
  // asks the advancer to end it early (once per batch), which bounds the bytes waiting for
  // their grace period to about early_advance_bytes_ per freeing thread.
  const uint64_t before = tc.batch_bytes;
  tc.batch_bytes = before + bytes;
  if (before < early_advance_bytes_ && tc.batch_bytes >= early_advance_bytes_)
    epochs_.RequestAdvance();
}

void Heap::ToCentral(std::vector<uint64_t>& mixed) {
  // Blocks of any class (their chunks are in use: the class is in vol_'s tag).
  for (uint64_t off : mixed) {
    Central& cen = central_[LoadedClass(off)];
    std::lock_guard<std::mutex> l(cen.mu);
    cen.blocks.push_back(off);
  }
  mixed.clear();
}

uint64_t Heap::BatchToCentral(FreeBatch& b) {
  uint64_t moved = 0;
  for (int c = 0; c < SizeClasses::kCount; ++c) {
    auto& v = b.small[c];
    if (v.empty()) continue;
    moved += v.size();
    std::lock_guard<std::mutex> l(central_[c].mu);
    central_[c].blocks.insert(central_[c].blocks.end(), v.begin(), v.end());
    v.clear();
  }
  for (int k = 0; k < FreeBatch::kForeign; ++k) {
    moved += b.foreign[k].size();
    ToCentral(b.foreign[k]);
    b.foreign_owner[k] = nullptr;
  }
  return moved;
}

void Heap::ReleaseBatch(FreeBatch* batch) {
  BatchToCentral(*batch);
  for (auto [chunk, n] : batch->extents) ReturnExtent(chunk, n);
  batch->extents.clear();
  batch->ready.store(false, std::memory_order_relaxed);
  std::lock_guard<std::mutex> l(batches_mu_);
  spare_batches_.push_back(batch);
}

void Heap::MaybeSpill(ThreadCache& tc, int c) {
  // A thread that frees more than it allocates (a consumer) would strand blocks in its own
  // list. When the list reaches spill_at: if it ran empty since the last look, the thread uses
  // what it frees (a batch workload) and the threshold doubles; otherwise the oldest chunk's
  // worth goes to the central list.
  auto& fl = tc.free[c];
  if (fl.size() < tc.spill_at[c]) return;
  if (tc.drained[c]) {
    tc.drained[c] = false;
    tc.spill_at[c] = static_cast<uint32_t>(std::min<size_t>(2 * fl.size(), uint32_t{1} << 30));
  } else {
    // Down to a chunk's worth below the threshold at once: a ready batch can bring many.
    SpillToCentral(fl, c, fl.size() - (tc.spill_at[c] - SizeClasses::BlocksPerChunk(c)));
  }
}

std::vector<FreeBatch*> Heap::TakeReady(ThreadCache& tc) {
  // The ready batches at the front of tc's pending list (their epochs closed), oldest first.
  std::vector<FreeBatch*> ready;
  std::lock_guard<std::mutex> l(tc.pending_mu);
  while (!tc.pending.empty() && tc.pending.front()->ready.load(std::memory_order_acquire)) {
    ready.push_back(tc.pending.front());
    tc.pending.pop_front();
  }
  return ready;
}

void Heap::CollectReady(ThreadCache& tc) {
  // The owner only: the ready batches' blocks join this cache's lists, and the batches are
  // reused.
  for (FreeBatch* b : TakeReady(tc)) {
    for (int c = 0; c < SizeClasses::kCount; ++c) {
      auto& v = b->small[c];
      if (v.empty()) continue;
      tc.free[c].insert(tc.free[c].end(), v.begin(), v.end());
      v.clear();
      MaybeSpill(tc, c);
    }
    for (int k = 0; k < FreeBatch::kForeign; ++k) {
      auto& v = b->foreign[k];
      if (v.empty()) continue;
      ThreadCache& owner = *b->foreign_owner[k];
      std::lock_guard<std::mutex> l(owner.inbox_mu);
      owner.inbox.insert(owner.inbox.end(), v.begin(), v.end());
      v.clear();
    }
    ReleaseBatch(b);  // empty now: back to the spares
  }
}

bool Heap::StealReady() {
  // The heap is full: ready batches of every cache (their owners may be idle, or gone) go to
  // the central lists. Lists of other caches are not touched (only their owners do).
  bool any = false;
  caches_.ForEach([&](ThreadCache& tc) {
    for (FreeBatch* b : TakeReady(tc)) {
      any |= BatchToCentral(*b) > 0;
      ReleaseBatch(b);
    }
    std::vector<uint64_t> in;
    {
      std::lock_guard<std::mutex> l(tc.inbox_mu);
      in.swap(tc.inbox);
    }
    any |= !in.empty();
    ToCentral(in);
  });
  return any;
}

// ---- transaction replay hooks -----------------------------------------------------------------

absl::Status Heap::MarkAllocated(uint64_t offset) {
  uint64_t chunk;
  uint32_t block;
  int c;
  if (!Locate(pool_.base() + offset, &chunk, &block, &c)) return LocateError(pool_.base() + offset);
  if (c < 0) return absl::OkStatus();                    // an extent's state word is its allocation
  std::lock_guard<std::mutex> l(chunk_mu_);              // against a concurrent load of the chunk
  if (BlockLive(chunk, block)) return absl::OkStatus();  // replayed already
  if (Vol(chunk) != nullptr) {
    // A clear bit in a chunk in use means the block sits in a free list: marking it would
    // hand it out twice.
    return absl::FailedPreconditionError(absl::StrCat(
        pool_.path(), ": MarkAllocated at offset ", offset,
        ": the block is free and its chunk is in use; replay must precede allocation"));
  }
  // The chunk is not in use this run: nothing but this call writes its bitmap, so write the
  // line directly, logged in the caller's epoch.
  epoch::Guard g(epochs_);
  const Persister& p = pool_.persister();
  LineWriter w(BitmapLines(chunk)[block / kBitsPerLine], g.epoch(), epochs_, p,
               [this](const LoggedLine* line) {
                 if (!mutation::Swapped(alloc_internal::kDirtyBitmapMark)) {
                   epochs_.RecordDirty(line, sizeof(*line));
                 }
               });
  const size_t word = (block % kBitsPerLine) / 64;
  w.Set(word, w.Get(word) | uint64_t{1} << (block % 64), p);
  return absl::OkStatus();
}

absl::Status Heap::MarkAllocated(uint64_t offset, size_t usable_size) {
  uint64_t chunk;
  uint32_t block;
  int c;
  if (Locate(pool_.base() + offset, &chunk, &block, &c)) return MarkAllocated(offset);
  const int cls = SizeClasses::For(usable_size, 16);
  if (cls < 0 || SizeClasses::Size(cls) != usable_size || offset < data_off_ ||
      offset >= data_off_ + (chunks_ << alloc_internal::kChunkShift) ||
      (offset & (kChunkSize - 1)) % usable_size != 0) {
    return LocateError(pool_.base() + offset);
  }
  chunk = (offset - data_off_) >> alloc_internal::kChunkShift;
  block = static_cast<uint32_t>((offset & (kChunkSize - 1)) / usable_size);
  std::lock_guard<std::mutex> l(chunk_mu_);
  if (StateKind(state_[chunk].load()) != ChunkKind::kFree || Vol(chunk) != nullptr ||
      !TakeChunk(chunk)) {
    return LocateError(pool_.base() + offset);
  }
  // The chunk was formatted in a failed epoch and rolled back with it. Format it again, logged
  // in the caller's epoch like Refill's fresh chunk: header, then a bitmap with exactly this
  // block (a free chunk's bitmap lines may hold bits of an earlier life). It is then an
  // unloaded chunk of the class, read when first used.
  epoch::Guard g(epochs_);
  SetChunkState(chunk, MakeState(ChunkKind::kSmall, static_cast<uint32_t>(cls), 1), g.epoch());
  const Persister& p = pool_.persister();
  auto dirty = [this](const LoggedLine* line) {
    if (!mutation::Swapped(alloc_internal::kDirtyBitmapInit))
      epochs_.RecordDirty(line, sizeof(*line));
  };
  for (size_t line = 0; line < kBitmapLines; ++line) {
    uint64_t want[kWordsPerLine] = {}, have[kWordsPerLine];
    if (block / kBitsPerLine == line) {
      want[(block % kBitsPerLine) / 64] = uint64_t{1} << (block % 64);
    }
    alloc_internal::EffectiveWords(BitmapLines(chunk)[line], epochs_, have);
    if (std::equal(want, want + kWordsPerLine, have)) continue;
    LineWriter w(BitmapLines(chunk)[line], g.epoch(), epochs_, p, dirty);
    for (size_t k = 0; k < kWordsPerLine; ++k)
      if (w.Get(k) != want[k]) w.Set(k, want[k], p);
  }
  unloaded_[cls].push_back(chunk);
  return absl::OkStatus();
}

bool Heap::TakeChunk(uint64_t chunk) {
  auto it = free_runs_.upper_bound(chunk);
  if (it == free_runs_.begin()) return false;
  --it;
  const auto [start, n] = *it;
  if (chunk >= start + n) return false;
  by_length_.erase({n, start});
  free_runs_.erase(it);
  if (chunk > start) {
    free_runs_[start] = chunk - start;
    by_length_.insert({chunk - start, start});
  }
  if (chunk + 1 < start + n) {
    free_runs_[chunk + 1] = start + n - chunk - 1;
    by_length_.insert({start + n - chunk - 1, chunk + 1});
  }
  return true;
}

absl::Status Heap::MarkFreed(uint64_t offset) {
  if (UsableSize(pool_.base() + offset) == 0) return absl::OkStatus();  // replayed already
  return Free(pool_.base() + offset);
}

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
    if (s == kTailState || StateKind(s) == ChunkKind::kExtent) {
      ++st.extent_chunks;
    } else if (StateKind(s) == ChunkKind::kSmall) {
      ++st.small_chunks;
    } else {
      ++st.free_chunks;
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
