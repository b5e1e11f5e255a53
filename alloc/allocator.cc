#include "alloc/allocator.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "alloc/internal/heap_layout.h"
#include "alloc/internal/logged_line.h"
#include "epoch/crc32c.h"

namespace pmrt::alloc {

using alloc_internal::ChunkKind;
using alloc_internal::ChunkMeta;
using alloc_internal::HeapHeader;
using alloc_internal::kChunkSize;
using alloc_internal::LineWriter;
using alloc_internal::LoggedLine;
using alloc_internal::MakeState;
using alloc_internal::StateClass;
using alloc_internal::StateKind;
using alloc_internal::StateRun;

namespace alloc_detail {

struct PendingFree {
  uint64_t offset;
  uint32_t run;  // 0 for a small block, the extent's chunk count otherwise
};

struct ThreadCache {
  std::vector<uint64_t> free[SizeClasses::kCount];  // block offsets ready to hand out
  uint64_t pending_epoch = 0;
  std::vector<PendingFree>* pending = nullptr;  // frees of pending_epoch, retired as one batch
  std::vector<uint32_t> dirty_chunks[2];        // chunks with dirty lines, per epoch parity
  // Written by the owner only; read by Stats from any thread.
  std::atomic<uint64_t> allocations{0}, frees{0};
};

// Volatile per-chunk map of lines written in the current epoch (1024 lines of 64 bytes).
struct ChunkDirty {
  std::atomic<uint64_t> epoch{0};
  std::atomic<uint64_t> lines[kChunkSize / 64 / 64];
};

}  // namespace alloc_detail

using alloc_detail::PendingFree;
using alloc_detail::ThreadCache;

namespace {

constexpr Site kHeaderFlush{"alloc.heap.header.flush"};
constexpr Site kHeaderFence{"alloc.heap.header.fence"};
constexpr uint64_t kTailState = MakeState(ChunkKind::kExtent, 0, 0);  // inside an extent
constexpr size_t kRefillBatch = 32;

thread_local AllocError tls_error = AllocError::kNone;
std::atomic<Heap*> g_default{nullptr};

uint32_t HeaderCrc(const HeapHeader& h) { return Crc32c(&h, offsetof(HeapHeader, crc)); }

ChunkMeta* Meta(void* meta, uint64_t chunk) { return static_cast<ChunkMeta*>(meta) + chunk; }

bool IsPowerOfTwo(size_t v) { return v != 0 && (v & (v - 1)) == 0; }

}  // namespace

const char* AllocErrorName(AllocError e) {
  switch (e) {
    case AllocError::kNone: return "none";
    case AllocError::kPoolFull: return "pool full";
    case AllocError::kTooLarge: return "larger than the heap";
    case AllocError::kBadAlignment: return "alignment not a power of two <= 64 KiB";
    case AllocError::kNoHeap: return "no heap is open";
  }
  return "?";
}

AllocError Heap::LastError() { return tls_error; }
Heap* Heap::Default() { return g_default.load(std::memory_order_acquire); }

Heap::Heap(Pool& pool, epoch::Manager& epochs) : pool_(pool), epochs_(epochs) {}

Heap::~Heap() {
  // Frees still in their grace period are retired batches that call back into this heap:
  // close the current epoch so they run now.
  (void)epochs_.Advance();
  epochs_.RemoveFlushSource(flush_source_);
  Heap* self = this;
  g_default.compare_exchange_strong(self, nullptr);
}

absl::StatusOr<std::unique_ptr<Heap>> Heap::Open(Pool& pool, epoch::Manager& epochs) {
  std::unique_ptr<Heap> h(new Heap(pool, epochs));
  const RegionDesc r = pool.region(PoolRegion::kHeap);
  h->region_ = static_cast<uint8_t*>(pool.region_base(PoolRegion::kHeap));
  h->region_off_ = r.offset;
  h->meta_ = h->region_ + alloc_internal::kMetaOffset;
  if (reinterpret_cast<HeapHeader*>(h->region_)->magic == 0) {
    if (auto st = h->Format(); !st.ok()) return st;
  }
  if (auto st = h->Load(); !st.ok()) return st;
  h->flush_source_ = epochs.AddFlushSource(
      [p = h.get()](uint64_t e, std::vector<Range>& out) { p->CollectDirty(e, out); });
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
      return absl::DataLossError(absl::StrCat(pool_.path(), ": heap region at offset ",
                                              r.offset, " has no header but holds data at byte ",
                                              i));
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
    return absl::FailedPreconditionError(absl::StrCat(
        pool_.path(), ": heap region of ", r.size, " bytes holds no 64 KiB chunk"));
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

absl::Status Heap::Load() {
  const RegionDesc r = pool_.region(PoolRegion::kHeap);
  const auto& h = *reinterpret_cast<const HeapHeader*>(region_);
  auto bad = [&](const std::string& what) {
    return absl::DataLossError(
        absl::StrCat(pool_.path(), ": heap header at offset ", r.offset, ": ", what));
  };
  if (h.magic != alloc_internal::kHeapMagic || h.crc != HeaderCrc(h)) {
    return bad("bad magic or checksum");
  }
  if (h.version > alloc_internal::kHeapVersion) {
    return absl::FailedPreconditionError(absl::StrCat(pool_.path(), ": heap format version ",
                                                      h.version, " is newer than supported"));
  }
  const uint64_t meta_end = alloc_internal::kMetaOffset + h.chunk_count * sizeof(ChunkMeta);
  if (h.chunk_size != kChunkSize || h.chunk_count == 0 || h.data_offset < meta_end ||
      (r.offset + h.data_offset) % kChunkSize != 0 ||
      h.data_offset + h.chunk_count * kChunkSize > r.size) {
    return bad("geometry does not fit the heap region");
  }
  chunks_ = h.chunk_count;
  data_off_ = r.offset + h.data_offset;
  state_ = std::make_unique<std::atomic<uint64_t>[]>(chunks_);
  loaded_ = std::make_unique<std::atomic<bool>[]>(chunks_);
  dirty_ = std::make_unique<alloc_detail::ChunkDirty[]>(chunks_);
  // One line per chunk: its recovered state. Bitmaps are read when a chunk is first used.
  uint64_t run_start = 0, run_len = 0;
  for (uint64_t i = 0; i < chunks_; ++i) {
    uint64_t w[alloc_internal::kWordsPerLine];
    alloc_internal::EffectiveWords(Meta(meta_, i)->header, epochs_, w);
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
      unloaded_[StateClass(s)].push_back(i);
    } else if (kind == ChunkKind::kExtent && StateRun(s) >= 1 && i + StateRun(s) <= chunks_) {
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

absl::Status Heap::Corrupt(uint64_t chunk, const std::string& what) const {
  return absl::DataLossError(absl::StrCat(pool_.path(), ": heap chunk ", chunk,
                                          " (metadata at offset ",
                                          region_off_ + alloc_internal::kMetaOffset +
                                              chunk * sizeof(ChunkMeta),
                                          ", data at offset ", ChunkOffset(chunk), "): ", what));
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

// ---- logged metadata writes -------------------------------------------------------------------

void Heap::SetChunkState(uint64_t chunk, uint64_t state, uint64_t e) {
  const Persister& p = pool_.persister();
  LineWriter w(Meta(meta_, chunk)->header, e, epochs_, p,
               [this](const LoggedLine* line) { epochs_.RecordDirty(line, sizeof(*line)); });
  w.Set(0, state, p);
  state_[chunk].store(state, std::memory_order_release);
}

bool Heap::SetBit(uint64_t chunk, uint32_t b, bool value, uint64_t e) {
  const Persister& p = pool_.persister();
  LoggedLine& line = Meta(meta_, chunk)->bits[b / alloc_internal::kBitsPerLine];
  const size_t word = (b % alloc_internal::kBitsPerLine) / 64;
  const uint64_t mask = uint64_t{1} << (b % 64);
  LineWriter w(line, e, epochs_, p,
               [this](const LoggedLine* l) { epochs_.RecordDirty(l, sizeof(*l)); });
  const uint64_t v = w.Get(word);
  if (((v & mask) != 0) != value) w.Set(word, value ? (v | mask) : (v & ~mask), p);
  return (v & mask) != 0;
}

void Heap::MarkDirty(uint64_t chunk, uint64_t rel, uint64_t len, uint64_t e) {
  alloc_detail::ChunkDirty& d = dirty_[chunk];
  if (d.epoch.load(std::memory_order_relaxed) != e && d.epoch.exchange(e) != e) {
    caches_.Local().dirty_chunks[e & 1].push_back(static_cast<uint32_t>(chunk));
  }
  for (uint64_t line = rel / 64, last = (rel + len - 1) / 64; line <= last; ++line) {
    const uint64_t bit = uint64_t{1} << (line % 64);
    auto& w = d.lines[line / 64];
    if ((w.load(std::memory_order_relaxed) & bit) == 0) w.fetch_or(bit, std::memory_order_relaxed);
  }
}

void Heap::CollectDirty(uint64_t e, std::vector<Range>& out) {
  // Runs inside the advance with no guard open: nobody marks lines concurrently.
  caches_.ForEach([&](ThreadCache& tc) {
    for (uint32_t chunk : tc.dirty_chunks[e & 1]) {
      uint8_t* base = pool_.base() + ChunkOffset(chunk);
      for (auto& w : dirty_[chunk].lines) {
        uint64_t bits = w.exchange(0, std::memory_order_relaxed);
        const size_t word = static_cast<size_t>(&w - dirty_[chunk].lines);
        while (bits != 0) {  // one range per run of consecutive dirty lines
          const int first = __builtin_ctzll(bits);
          const uint64_t rest = ~(bits >> first);
          const int run = rest == 0 ? 64 : __builtin_ctzll(rest);
          out.push_back({base + (word * 64 + first) * 64, static_cast<size_t>(run) * 64});
          bits = run == 64 ? 0 : bits & ~(((uint64_t{1} << run) - 1) << first);
        }
      }
    }
    tc.dirty_chunks[e & 1].clear();
  });
}

// ---- allocation -------------------------------------------------------------------------------

void* Heap::Allocate(size_t size, size_t align) {
  if (!IsPowerOfTwo(align) || align > kChunkSize) {
    tls_error = AllocError::kBadAlignment;
    return nullptr;
  }
  epoch::Guard g(epochs_);
  const int c = SizeClasses::For(size, std::max<size_t>(align, 16));
  return c >= 0 ? AllocateSmall(c, g.epoch()) : AllocateExtent(size, g.epoch());
}

absl::StatusOr<void*> Heap::TryAllocate(size_t size, size_t align) {
  void* p = Allocate(size, align);
  if (p != nullptr) return p;
  const std::string what = absl::StrCat(pool_.path(), ": cannot allocate ", size,
                                        " bytes aligned to ", align, ": ",
                                        AllocErrorName(tls_error));
  if (tls_error == AllocError::kBadAlignment) return absl::InvalidArgumentError(what);
  return absl::ResourceExhaustedError(what);
}

void* Heap::AllocateSmall(int c, uint64_t e) {
  ThreadCache& tc = caches_.Local();
  auto& fl = tc.free[c];
  if (fl.empty() && !Refill(tc, c, e)) {
    tls_error = AllocError::kPoolFull;
    return nullptr;
  }
  const uint64_t off = fl.back();
  fl.pop_back();
  const uint64_t chunk = (off - data_off_) >> alloc_internal::kChunkShift;
  const uint64_t rel = off & (kChunkSize - 1);
  const uint32_t size = SizeClasses::Size(c);
  // The bit is durable at the boundary with the line; if this epoch fails, the line's undo
  // copy (taken on its first change in the epoch) clears it again.
  SetBit(chunk, static_cast<uint32_t>(rel / size), true, e);
  MarkDirty(chunk, rel, size, e);  // what the caller writes into the block
  tc.allocations.store(tc.allocations.load(std::memory_order_relaxed) + 1,
                       std::memory_order_relaxed);
  return pool_.base() + off;
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
  SetChunkState(start, MakeState(ChunkKind::kExtent, 0, static_cast<uint32_t>(n)), e);
  for (uint64_t t = 0; t < n; ++t) MarkDirty(start + t, 0, kChunkSize, e);
  ThreadCache& tc = caches_.Local();
  tc.allocations.store(tc.allocations.load(std::memory_order_relaxed) + 1,
                       std::memory_order_relaxed);
  return pool_.base() + ChunkOffset(start);
}

bool Heap::Refill(ThreadCache& tc, int c, uint64_t e) {
  auto& fl = tc.free[c];
  {  // 1. Blocks whose free has passed its grace period.
    Central& cen = central_[c];
    std::lock_guard<std::mutex> l(cen.mu);
    const size_t take = std::min(kRefillBatch, cen.blocks.size());
    fl.insert(fl.end(), cen.blocks.end() - static_cast<ptrdiff_t>(take), cen.blocks.end());
    cen.blocks.resize(cen.blocks.size() - take);
    if (take > 0) return true;
  }
  // 2. A chunk of this class from an earlier run, not read yet in this one.
  if (LoadNextChunk(c, &fl)) return !fl.empty() || Refill(tc, c, e);
  // 3. A fresh chunk. Its state change is logged in e: if e fails, the chunk is free again
  //    together with every block handed out from it.
  uint64_t chunk;
  if (!TakeRun(1, &chunk)) return false;
  SetChunkState(chunk, MakeState(ChunkKind::kSmall, static_cast<uint32_t>(c), 1), e);
  loaded_[chunk].store(true, std::memory_order_release);
  const uint32_t size = SizeClasses::Size(c);
  for (uint32_t b = SizeClasses::BlocksPerChunk(c); b > 0; --b) {
    fl.push_back(ChunkOffset(chunk) + uint64_t{b - 1} * size);  // lowest address first out
  }
  return true;
}

bool Heap::LoadNextChunk(int c, std::vector<uint64_t>* out) {
  // Under chunk_mu_, and `loaded` set only after the read: a concurrent Free of a block in the
  // chunk waits in EnsureLoaded until the read is done, so the block it frees is not read as
  // free here too.
  std::lock_guard<std::mutex> l(chunk_mu_);
  if (unloaded_[c].empty()) return false;
  const uint64_t chunk = unloaded_[c].back();
  unloaded_[c].pop_back();
  ReadFreeBlocks(chunk, c, out);
  loaded_[chunk].store(true, std::memory_order_release);
  return true;
}

void Heap::ReadFreeBlocks(uint64_t chunk, int c, std::vector<uint64_t>* out) const {
  // Every clear bit of the recovered bitmap. Called once per chunk per run, before any block
  // of the chunk can be freed in this run (Free loads the chunk first), so each block found
  // here is in no free list yet.
  const uint32_t size = SizeClasses::Size(c), blocks = SizeClasses::BlocksPerChunk(c);
  for (uint32_t b0 = 0; b0 < blocks; b0 += alloc_internal::kBitsPerLine) {
    uint64_t w[alloc_internal::kWordsPerLine];
    alloc_internal::EffectiveWords(Meta(meta_, chunk)->bits[b0 / alloc_internal::kBitsPerLine],
                                   epochs_, w);
    for (uint32_t b = b0; b < std::min<uint32_t>(blocks, b0 + alloc_internal::kBitsPerLine); ++b) {
      if ((w[(b - b0) / 64] >> (b % 64) & 1) == 0) out->push_back(ChunkOffset(chunk) + b * size);
    }
  }
}

void Heap::EnsureLoaded(uint64_t chunk, int c) {
  if (loaded_[chunk].load(std::memory_order_acquire)) return;
  std::vector<uint64_t> blocks;
  {
    std::lock_guard<std::mutex> l(chunk_mu_);
    if (loaded_[chunk].load(std::memory_order_relaxed)) return;
    std::erase(unloaded_[c], chunk);
    ReadFreeBlocks(chunk, c, &blocks);
    loaded_[chunk].store(true, std::memory_order_release);
  }
  Central& cen = central_[c];
  std::lock_guard<std::mutex> l(cen.mu);
  cen.blocks.insert(cen.blocks.end(), blocks.begin(), blocks.end());
}

// ---- free -------------------------------------------------------------------------------------

absl::Status Heap::Locate(const void* p, uint64_t* chunk, uint32_t* block, int* cls) const {
  const auto* b = static_cast<const uint8_t*>(p);
  const uint64_t off = pool_.contains(p) ? static_cast<uint64_t>(b - pool_.base()) : 0;
  if (off < data_off_ || off >= data_off_ + (chunks_ << alloc_internal::kChunkShift)) {
    return absl::InvalidArgumentError(absl::StrCat(
        pool_.path(), ": pointer ", absl::StrFormat("%p", p),
        " is not inside the heap of this pool"));
  }
  *chunk = (off - data_off_) >> alloc_internal::kChunkShift;
  const uint64_t rel = off & (kChunkSize - 1);
  const uint64_t s = state_[*chunk].load(std::memory_order_acquire);
  if (StateKind(s) == ChunkKind::kSmall) {
    *cls = static_cast<int>(StateClass(s));
    const uint32_t size = SizeClasses::Size(*cls);
    if (rel % size == 0 && rel / size < SizeClasses::BlocksPerChunk(*cls)) {
      *block = static_cast<uint32_t>(rel / size);
      return absl::OkStatus();
    }
  } else if (StateKind(s) == ChunkKind::kExtent && StateRun(s) > 0 && rel == 0) {
    *cls = -1;
    *block = 0;
    return absl::OkStatus();
  } else if (StateKind(s) == ChunkKind::kFree && rel == 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        pool_.path(), ": double free: no block is allocated at offset ", off, " (a free chunk)"));
  }
  return absl::InvalidArgumentError(absl::StrCat(pool_.path(), ": offset ", off,
                                                 " is not the start of a heap block"));
}

absl::Status Heap::Free(void* p) { return FreeImpl(p, /*grace=*/true); }

absl::Status Heap::FreeUnpublished(void* p) { return FreeImpl(p, /*grace=*/false); }

absl::Status Heap::FreeImpl(void* p, bool grace) {
  uint64_t chunk;
  uint32_t block;
  int c;
  if (auto st = Locate(p, &chunk, &block, &c); !st.ok()) return st;
  epoch::Guard g(epochs_);
  const uint64_t e = g.epoch();
  PendingFree pf{pool_.offset_of(p), 0};
  if (c >= 0) {
    EnsureLoaded(chunk, c);
    // Logged in e: if e fails the bit is set again (the block is still allocated).
    if (!SetBit(chunk, block, false, e)) {
      return absl::FailedPreconditionError(absl::StrCat(
          pool_.path(), ": double free: block at offset ", pf.offset, " is not allocated"));
    }
  } else {
    uint64_t s = state_[chunk].load(std::memory_order_acquire);
    const uint64_t freeing = MakeState(ChunkKind::kFree, 0, 0);
    if (StateKind(s) != ChunkKind::kExtent || !state_[chunk].compare_exchange_strong(s, freeing)) {
      return absl::FailedPreconditionError(absl::StrCat(
          pool_.path(), ": double free: extent at offset ", pf.offset, " is not allocated"));
    }
    pf.run = StateRun(s);
    SetChunkState(chunk, freeing, e);
  }
  ThreadCache& tc = caches_.Local();
  tc.frees.store(tc.frees.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  if (!grace) {
    std::vector<PendingFree> now{pf};
    ReleaseFreed(&now);
    return absl::OkStatus();
  }
  // Reusable once e has closed: no guard can hold the block, and the free is durable.
  if (tc.pending == nullptr || tc.pending_epoch != e) {
    tc.pending = new std::vector<PendingFree>;
    tc.pending_epoch = e;
    epochs_.Retire(tc.pending, [this](void* v) {
      auto* batch = static_cast<std::vector<PendingFree>*>(v);
      ReleaseFreed(batch);
      delete batch;
    });
  }
  tc.pending->push_back(pf);
  return absl::OkStatus();
}

void Heap::ReleaseFreed(std::vector<PendingFree>* batch) {
  std::sort(batch->begin(), batch->end(),
            [](const PendingFree& a, const PendingFree& b) { return a.offset < b.offset; });
  for (const PendingFree& f : *batch) {
    const uint64_t chunk = (f.offset - data_off_) >> alloc_internal::kChunkShift;
    if (f.run > 0) {
      ReturnRun(chunk, f.run);
      continue;
    }
    Central& cen = central_[StateClass(state_[chunk].load(std::memory_order_acquire))];
    std::lock_guard<std::mutex> l(cen.mu);
    cen.blocks.push_back(f.offset);
  }
}

// ---- transaction replay hooks -----------------------------------------------------------------

absl::Status Heap::MarkAllocated(uint64_t offset) {
  uint64_t chunk;
  uint32_t block;
  int c;
  if (auto st = Locate(pool_.base() + offset, &chunk, &block, &c); !st.ok()) return st;
  if (c < 0) return absl::OkStatus();  // an extent's state word is its allocation
  if (UsableSize(pool_.base() + offset) != 0) return absl::OkStatus();  // replayed already
  if (loaded_[chunk].load(std::memory_order_acquire)) {
    // A clear bit in a chunk in use means the block sits in a free list: marking it would
    // hand it out twice.
    return absl::FailedPreconditionError(absl::StrCat(
        pool_.path(), ": MarkAllocated at offset ", offset,
        ": the block is free and its chunk is in use; replay must precede allocation"));
  }
  epoch::Guard g(epochs_);
  SetBit(chunk, block, true, g.epoch());
  return absl::OkStatus();
}

absl::Status Heap::MarkFreed(uint64_t offset) {
  uint64_t chunk;
  uint32_t block;
  int c;
  if (auto st = Locate(pool_.base() + offset, &chunk, &block, &c); !st.ok()) return st;
  if (UsableSize(pool_.base() + offset) == 0) return absl::OkStatus();  // already free
  return Free(pool_.base() + offset);
}

// ---- inspection -------------------------------------------------------------------------------

size_t Heap::UsableSize(const void* p) const {
  uint64_t chunk;
  uint32_t block;
  int c;
  if (!Locate(p, &chunk, &block, &c).ok()) return 0;
  if (c < 0) return StateRun(state_[chunk].load()) * kChunkSize;
  const LoggedLine& line = Meta(meta_, chunk)->bits[block / alloc_internal::kBitsPerLine];
  const uint32_t bit = block % alloc_internal::kBitsPerLine;
  uint64_t w[alloc_internal::kWordsPerLine];
  alloc_internal::EffectiveWords(line, epochs_, w);  // a line may still await lazy recovery
  return (w[bit / 64] >> (bit % 64) & 1) ? SizeClasses::Size(c) : 0;
}

absl::Status Heap::Walk(const std::function<void(const BlockInfo&)>& fn) const {
  for (uint64_t i = 0; i < chunks_; ++i) {
    const uint64_t s = state_[i].load(std::memory_order_acquire);
    if (s == kTailState || StateKind(s) == ChunkKind::kFree) continue;
    if (StateKind(s) == ChunkKind::kExtent) {
      fn({ChunkOffset(i), uint64_t{StateRun(s)} * kChunkSize});
      continue;
    }
    const int c = static_cast<int>(StateClass(s));
    const uint32_t size = SizeClasses::Size(c), blocks = SizeClasses::BlocksPerChunk(c);
    for (uint32_t b0 = 0; b0 < blocks; b0 += alloc_internal::kBitsPerLine) {
      uint64_t w[alloc_internal::kWordsPerLine];
      alloc_internal::EffectiveWords(Meta(meta_, i)->bits[b0 / alloc_internal::kBitsPerLine],
                                     epochs_, w);
      for (uint32_t b = b0; b < std::min<uint32_t>(blocks, b0 + alloc_internal::kBitsPerLine); ++b) {
        if (w[(b - b0) / 64] >> (b % 64) & 1) fn({ChunkOffset(i) + uint64_t{b} * size, size});
      }
    }
  }
  return absl::OkStatus();
}

HeapStats Heap::Stats() const {
  HeapStats st;
  st.chunks = chunks_;
  st.heap_bytes = chunks_ * kChunkSize;
  for (uint64_t i = 0; i < chunks_; ++i) {
    const uint64_t s = state_[i].load(std::memory_order_acquire);
    if (s == kTailState || StateKind(s) == ChunkKind::kExtent) {
      ++st.extent_chunks;
    } else if (StateKind(s) == ChunkKind::kSmall) {
      ++st.small_chunks;
    } else {
      ++st.free_chunks;
    }
  }
  (void)Walk([&](const BlockInfo& b) {
    ++st.live_blocks;
    st.used_bytes += b.size;
    const uint64_t s = state_[(b.offset - data_off_) >> alloc_internal::kChunkShift].load();
    if (StateKind(s) == ChunkKind::kExtent) {
      ++st.live_extents;
    } else {
      ++st.live_per_class[StateClass(s)];
    }
  });
  st.free_bytes = st.heap_bytes - st.used_bytes;
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

absl::Status Heap::Check() const {
  for (uint64_t i = 0; i < chunks_; ++i) {
    uint64_t hw[alloc_internal::kWordsPerLine];
    alloc_internal::EffectiveWords(Meta(meta_, i)->header, epochs_, hw);
    const uint64_t s = state_[i].load(std::memory_order_acquire);
    const bool tail = s == kTailState;
    if (tail ? hw[0] != MakeState(ChunkKind::kFree, 0, 0) : hw[0] != s) {
      return Corrupt(i, absl::StrCat("state on media ", hw[0], " differs from the heap's ", s));
    }
    const uint32_t blocks =
        StateKind(s) == ChunkKind::kSmall && !tail ? SizeClasses::BlocksPerChunk(StateClass(s)) : 0;
    for (uint32_t line = 0; line < alloc_internal::kBitmapLines; ++line) {
      uint64_t w[alloc_internal::kWordsPerLine];
      alloc_internal::EffectiveWords(Meta(meta_, i)->bits[line], epochs_, w);
      for (uint32_t k = 0; k < alloc_internal::kBitsPerLine; ++k) {
        const uint32_t b = line * alloc_internal::kBitsPerLine + k;
        if ((w[k / 64] >> (k % 64) & 1) && b >= blocks) {
          return Corrupt(i, absl::StrCat("bit ", b, " set beyond the chunk's ", blocks,
                                         " blocks"));
        }
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace pmrt::alloc
