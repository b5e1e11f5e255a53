// Heap: open and close, formatting a new heap, loading (and validating) an existing one's
// metadata, and the heap's part of pool growth (docs/alloc.md, "Layout", "Growth").
#include <algorithm>
#include <cstdio>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "alloc/internal/heap_state.h"

namespace pmrt::alloc_internal {
constinit thread_local alloc::AllocError tls_error = alloc::AllocError::kNone;
}  // namespace pmrt::alloc_internal

namespace pmrt::alloc {

namespace {

std::atomic<uint64_t> g_next_heap_id{1};
std::atomic<Heap*> g_default{nullptr};

constexpr Site kHeaderFlush{"alloc.heap.header.flush"};
constexpr Site kHeaderFence{"alloc.heap.header.fence"};
constexpr Site kGrowSegment{"alloc.grow.segment"};
constexpr Site kGrowSegmentFence{"alloc.grow.segment.fence"};

uint32_t HeaderCrc(const HeapHeader& h) { return Crc32c(&h, offsetof(HeapHeader, crc)); }

}  // namespace

using alloc_internal::tls_error;

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
  caches_.ForEach(
      [](ThreadCache& tc) { tc.pending.clear_and_dispose([](FreeBatch* b) { delete b; }); });
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

absl::Status Heap::Corrupt(uint64_t chunk, const std::string& what) const {
  return absl::DataLossError(absl::StrCat(
      pool_.path(), ": heap chunk ", chunk, " (metadata at offset ",
      pool_.offset_of(&HeaderLine(chunk)), ", data at offset ", ChunkOffset(chunk), "): ", what));
}

}  // namespace pmrt::alloc
