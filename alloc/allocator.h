// The persistent heap: alloc::pnew / pdelete and raw Allocate / Free inside a pool.
//
//   auto heap = pmrt::alloc::Heap::Open(*pool, *epochs);    // after epoch::Manager::Open
//   Node* n = pmrt::alloc::pnew<Node>(args...);              // the default (first opened) heap
//   ...
//   pmrt::alloc::pdelete(n);                                  // deferred: reused after its epoch
//
// Crash behaviour (epoch scope, DESIGN.md contract 3): after a crash in epoch e the heap is as
// it was when e began — blocks allocated in e are free again, blocks freed in e are still
// allocated. Allocation and free never flush or fence, and never write persistent metadata:
// they flip a bit in the chunk's volatile live map. At the epoch boundary (no guard open) the
// changed bitmap lines are copied to media, each line logged in place first — it carries its
// own undo copy tagged with the epoch (alloc/internal/logged_line.h) — and written back with
// the epoch's other dirty lines. A crash before the boundary completes loses exactly the
// epoch's changes, which is the contract. A freed block is reused only after the epoch of its free
// has closed (no guard can hold it) and is durable. A newly allocated block is registered dirty, so
// what the caller writes into it in the same epoch is written back at the boundary; later changes
// to the object are the caller's to log (epoch::ExternalLog, InCLL).
//
// Restart reads one line per 64 KiB chunk (not the blocks): open time does not grow with the
// number of live objects. Bitmaps are read when a chunk is first used in a run.
//
// Thread safety: everything may be called from any thread. Walk/Stats/Check read a consistent
// heap only when no allocation or free runs concurrently.
#ifndef PMRT_ALLOC_ALLOCATOR_H_
#define PMRT_ALLOC_ALLOCATOR_H_

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "alloc/internal/mapped_array.h"
#include "alloc/size_class.h"
#include "epoch/epoch.h"
#include "epoch/per_thread.h"
#include "epoch/pool.h"

namespace pmrt::alloc_internal {
struct LoggedLine;
struct ThreadCache;
struct ChunkVolatile;
struct FreeBatch;
}  // namespace pmrt::alloc_internal

namespace pmrt::alloc {

// Why the last null-returning Allocate of this thread failed.
enum class AllocError : uint8_t {
  kNone,
  kPoolFull,      // no free block of the class and no free chunk run large enough
  kTooLarge,      // larger than the whole heap
  kBadAlignment,  // not a power of two, or above 64 KiB
  kNoHeap,        // pnew with no open heap
  // No free block, and the call could not wait for the epoch to end (it runs under an epoch
  // guard or a transaction, or the epochs are advanced by hand): blocks freed in the running
  // or previous epoch, or free blocks cached by other threads, may make room once it ends.
  kPoolFullCannotWait,
  kOverflow,  // an array whose byte size does not fit in size_t
};
const char* AllocErrorName(AllocError e);

struct BlockInfo {
  uint64_t offset;  // pool offset of the block
  uint64_t size;    // usable bytes (the class size, or the extent's length)
};

struct HeapStats {
  uint64_t heap_bytes = 0;           // bytes of chunk data in the heap
  uint64_t used_bytes = 0;           // bytes in live blocks
  uint64_t free_bytes = 0;           // heap_bytes - used_bytes
  uint64_t largest_free_extent = 0;  // bytes in the largest run of free chunks
  uint64_t live_blocks = 0;          // small blocks plus extents
  uint64_t live_extents = 0;
  std::array<uint64_t, SizeClasses::kCount> live_per_class{};
  uint64_t chunks = 0, free_chunks = 0, small_chunks = 0, extent_chunks = 0;
  uint64_t allocations = 0, frees = 0;  // since open
  // Fragmentation: free bytes inside chunks that hold a size class (a large allocation
  // cannot use them until every block of their chunk is free and the chunk returns).
  uint64_t free_in_small_chunks = 0;
  uint64_t chunks_returned = 0;  // empty small chunks given back to the free runs, since open
  uint64_t double_frees = 0;     // refused frees of blocks that were not allocated, since open
  uint64_t segments = 1;         // 1 + the pool's growths (each adds a heap segment)
};

class Heap {
 public:
  // Attaches to the pool's heap region (formats it on first use) and recovers it: chunk headers
  // of failed epochs are rolled back; bitmaps roll back lazily, on first use. One Heap per pool.
  static absl::StatusOr<std::unique_ptr<Heap>> Open(Pool& pool, epoch::Manager& epochs);
  // The checks Open makes of the heap's header before it reads anything else (magic, checksum,
  // version, geometry), reading only: for a caller that must refuse a damaged heap before any
  // layer below it writes (the pmrt tools run it before epoch::Manager::Open). OK for a region
  // never formatted.
  static absl::Status ValidateHeader(const Pool& pool);
  ~Heap();
  Heap(const Heap&) = delete;
  Heap& operator=(const Heap&) = delete;

  // Hot path: a block of at least `size` bytes aligned to `align` (a power of two <= 64 KiB),
  // or null with LastError() set. No flush, no fence.
  //
  // A full heap waits once for its frees before failing: blocks freed with Free in the running
  // or previous epoch, free blocks cached by other threads (idle, busy or exited), and chunks
  // whose blocks are all free (returned to the free runs, so any size class or a large
  // allocation can use them) come back after at most two epoch boundaries. When the epochs run
  // on the background advancer (ManagerOptions::interval > 0) and the caller holds no
  // epoch::Guard (no transaction, no tree callback), the call drives those boundaries itself
  // and retries; otherwise it cannot wait and fails with kPoolFullCannotWait (the next
  // boundary still gathers the free blocks, so a retry outside the guard can succeed).
  void* Allocate(size_t size, size_t align = 16);
  // The same with an error naming the pool, the size and the reason.
  absl::StatusOr<void*> TryAllocate(size_t size, size_t align = 16);
  // For a caller whose allocation failed with kPoolFullCannotWait under a guard it has left
  // since (a tree write, a transaction that aborted): runs the boundaries the allocation could
  // not (two at most, the same as a full Allocate outside a guard). True when something may
  // have come back, so one retry is worth it; false when the caller still holds a guard, the
  // epochs are advanced by hand, or nothing was freed since the last such boundaries.
  bool MakeRoom();
  // calloc: n elements of `size` bytes, zero-filled (null with kOverflow when n * size does not
  // fit in size_t).
  void* AllocateZeroed(size_t n, size_t size, size_t align = 16);
  // realloc for a block the caller owns outright: null p allocates; a size that fits the
  // block's usable size returns p unchanged; otherwise the contents move to a new block and p
  // is freed with FreeUnshared. On failure p is untouched and null is returned (LastError set;
  // kInvalidArgument-style misuse, p not a live block, also returns null with kNone).
  void* Reallocate(void* p, size_t size, size_t align = 16);

  // Free and FreeUnshared: a null pointer is a no-op. kInvalidArgument for a pointer that is not
  // the start of a block of this heap; kFailedPrecondition for a block that is not allocated (a
  // double free: counted in HeapStats::double_frees; a debug build, without NDEBUG, aborts with
  // the block's offset). On error nothing changes.
  //
  // Free: the block may still be read by other threads under their epoch guards (a node
  // unlinked from a shared structure). It is reused only after the epoch of the free has closed
  // (no guard can hold it) and is durable. pdelete uses Free.
  absl::Status Free(void* p);
  // FreeUnshared: the caller owns the block outright, no other thread can hold a reference to
  // it (the malloc/free contract). A block allocated in the current epoch is reusable at once:
  // its allocation was never durable, so no crash can need its old contents, and no reader can
  // hold it. An older block waits for the epoch to close, as with Free (its free must be
  // durable before the block is reused).
  absl::Status FreeUnshared(void* p);
  static AllocError LastError();
  // Sets the calling thread's LastError (for allocation wrappers such as pnew_array).
  static void SetLastError(AllocError e);

  // Usable bytes of the live block starting at p; 0 when p is not one.
  size_t UsableSize(const void* p) const;

  // Every live block, in address order.
  absl::Status Walk(const std::function<void(const BlockInfo&)>& fn) const;
  HeapStats Stats() const;
  // Bytes of chunk data in the heap (HeapStats::heap_bytes without the walk).
  uint64_t capacity() const {
    return (chunks_.load(std::memory_order_acquire) - meta_chunks_.load(std::memory_order_acquire))
           << 16;
  }
  // Bytes of the chunks that hold nothing (neither an extent nor a size class's blocks): one
  // load per chunk, no block walk. A lower bound of what the heap can still hand out (free
  // blocks inside chunks of a size class are not counted).
  uint64_t FreeChunkBytes() const;
  // Allocate calls since Open (all threads; cheap: no heap walk).
  uint64_t AllocationsSinceOpen() const;
  // Deep consistency check of the metadata: chunk states, extent runs, bitmap bits beyond a
  // chunk's blocks, free chunks with allocated bits. kDataLoss naming the chunk and offset.
  // REQUIRES: a quiet heap: no allocation or free runs meanwhile, and no epoch boundary (one
  // returns empty chunks), or a chunk changing state can read as damaged.
  absl::Status Check() const;
  // Recovers now every metadata line still tagged with a failed epoch of an earlier execution
  // (the heap recovers them lazily, at their next change; until then they name that epoch):
  // its words restored from its undo copy and tagged with the current epoch, dirty until the
  // next boundary. For epoch::Manager::ClearFailedEpochs (`pmrt repair`). Returns the number of
  // lines. REQUIRES: no other thread uses the heap, no background advancer runs.
  uint64_t SettleFailedLines();

  // ---- transaction hooks (txn/): allocation and free that follow a transaction's outcome ----
  // Replays a committed transaction's allocation or free after a crash: idempotent, logged in
  // the current epoch like any other change. REQUIRES: a Guard.
  absl::Status MarkAllocated(uint64_t offset);
  // The same for a small block of `usable_size` bytes (its class size, UsableSize at
  // allocation) whose chunk the rollback may have freed whole (the chunk was first used in the
  // failed epoch): such a chunk is formatted again for that class, with only this block
  // allocated, logged in the caller's epoch. REQUIRES: a Guard; before any allocation.
  absl::Status MarkAllocated(uint64_t offset, size_t usable_size);
  absl::Status MarkFreed(uint64_t offset);
  // Undoes an allocation whose transaction aborted: the block was never published, so it is
  // reusable at once (no grace period). REQUIRES: a Guard.
  absl::Status FreeUnpublished(void* p);

  Pool& pool() const { return pool_; }
  epoch::Manager& epochs() const { return epochs_; }
  // The first heap opened that is still open (used by pnew/pdelete).
  static Heap* Default();

 private:
  Heap(Pool& pool, epoch::Manager& epochs);
  absl::Status Format();
  absl::Status Load();
  // The calling thread's cache and epoch slot (one thread-local load after the first call).
  struct Context {
    alloc_internal::ThreadCache* tc;
    epoch::ThreadSlot* slot;
  };
  Context Local();
  Context LocalSlow();
  void* AllocateSlow(size_t size, size_t align);
  // One allocation of class c (or an extent, c < 0) that waits for frees when the heap is full
  // and it can (Allocate's contract).
  void* AllocateWaiting(int c, size_t size);
  // Automatic growth (PoolOptions::grow_by) for an allocation of `size` bytes that failed: true
  // when the pool grew (by this call, or by another thread since `growths`), so a retry may
  // succeed.
  bool GrowFor(size_t size, uint64_t growths);
  // The heap's part of Pool::Grow (Pool::GrowthListener).
  absl::Status PrepareGrowth(uint64_t old_size, uint64_t new_size);
  void CommitGrowth();
  absl::Status LoadSegments();
  void* AllocateSmall(alloc_internal::ThreadCache& tc, int c, uint64_t e);
  // Hands out the last block of the thread's (non-empty) list of class c in epoch e.
  void* Take(alloc_internal::ThreadCache& tc, int c, uint64_t e);
  // Asks the next boundary to gather every free block and return empty chunks, and drives
  // that boundary when the caller can wait; false when it cannot (or nothing can come back).
  bool WaitForFrees(bool again);
  uint64_t TotalFrees();  // frees since open, all threads
  void SpillToCentral(std::vector<uint64_t>& free_list, int c, size_t count);
  void* AllocateExtent(size_t size, uint64_t e);
  bool Refill(alloc_internal::ThreadCache& tc, int c, uint64_t e);
  bool LoadNextChunk(int c, std::vector<uint64_t>* out, alloc_internal::ThreadCache* owner);
  alloc_internal::ChunkVolatile* LoadChunk(uint64_t chunk, int c, std::vector<uint64_t>* out,
                                           alloc_internal::ThreadCache* owner);
  alloc_internal::ChunkVolatile* EnsureLoaded(uint64_t chunk, int c);
  void Touch(alloc_internal::ThreadCache& tc, alloc_internal::ChunkVolatile& v, uint64_t chunk,
             uint64_t e);
  // vol_[chunk] untagged: the chunk's volatile state, null until it is first used this run.
  alloc_internal::ChunkVolatile* Vol(uint64_t chunk,
                                     std::memory_order mo = std::memory_order_acquire) const;
  void SetVol(uint64_t chunk, alloc_internal::ChunkVolatile* v, int c);
  // The class of a small block whose chunk is in use this run (its tag in vol_).
  int LoadedClass(uint64_t off) const;
  enum class FreeMode { kShared, kUnshared, kUnpublished };
  absl::Status FreeImpl(void* p, FreeMode mode);
  alloc_internal::FreeBatch* OpenBatch(alloc_internal::ThreadCache& tc, uint64_t e);
  template <bool unshared>
  bool FreeFast(void* p);
  void ReleaseBatch(alloc_internal::FreeBatch* batch);
  // Moves a batch's blocks to the central lists; returns how many.
  uint64_t BatchToCentral(alloc_internal::FreeBatch& b);
  void ToCentral(std::vector<uint64_t>& blocks_of_any_class);
  void NoteBatchBytes(alloc_internal::ThreadCache& tc, uint64_t bytes);
  std::vector<alloc_internal::FreeBatch*> TakeReady(alloc_internal::ThreadCache& tc);
  void CollectReady(alloc_internal::ThreadCache& tc);
  void CollectInbox(alloc_internal::ThreadCache& tc);
  void SendOutbox(alloc_internal::ThreadCache& tc, int slot);
  bool StealReady();
  bool TakeCentral(std::vector<uint64_t>& fl, int c);  // a refill batch from the central list
  bool RefillFromChunks(alloc_internal::ThreadCache& tc, int c, uint64_t e);
  void MaybeSpill(alloc_internal::ThreadCache& tc, int c);
  bool TakeRun(uint64_t n, uint64_t* start);
  bool TakeChunk(uint64_t chunk);  // REQUIRES: chunk_mu_; removes one chunk from the free runs
  void ReturnRun(uint64_t start, uint64_t n);
  // A freed extent's run, after its grace period: its tails' states reset, then ReturnRun.
  void ReturnExtent(uint64_t start, uint64_t n);
  void SetChunkState(uint64_t chunk, uint64_t state, uint64_t e);
  // The same at the boundary: the logged line joins the boundary's flush ranges.
  void SetChunkStateAtBoundary(uint64_t chunk, uint64_t state, uint64_t e, std::vector<Range>& out);
  alloc_internal::ChunkVolatile* NewVol();  // REQUIRES: chunk_mu_
  void CollectDirty(uint64_t e, std::vector<Range>& out);
  // CollectDirty prefetches the chunk this many places ahead in a dirty list.
  static constexpr size_t kCollectAhead = 4;
  void PrefetchChunkLines(uint64_t chunk) const;
  // Boundary work (step 3 of an advance, no guard open, so every thread cache may be touched):
  // caches idle since the last boundary, or all of them under pressure, give their free blocks
  // to the central lists; under pressure, chunks whose blocks are all free go back to the free
  // runs (their state change logged in e, its line added to `out`).
  void Rebalance(uint64_t e, std::vector<Range>& out);
  uint64_t DrainCache(alloc_internal::ThreadCache& tc);
  uint64_t ReturnEmptyChunks(uint64_t e, std::vector<Range>& out);
  // Chunk, block and class (-1: an extent) of the block starting at p; false if none.
  bool Locate(const void* p, uint64_t* chunk, uint32_t* block, int* cls) const;
  absl::Status LocateError(const void* p) const;
  // Counts a double free (kFailedPrecondition) and, in a debug build, aborts naming it.
  absl::Status DoubleFreeOr(absl::Status st);
  bool BlockLive(uint64_t chunk, uint32_t block) const;
  uint64_t ChunkOffset(uint64_t chunk) const { return data_off_ + (chunk << 16); }
  alloc_internal::LoggedLine& HeaderLine(uint64_t chunk) const;
  alloc_internal::LoggedLine* BitmapLines(uint64_t chunk) const;
  absl::Status Corrupt(uint64_t chunk, const std::string& what) const;

  Pool& pool_;
  bool attached_ = false;  // holds the pool's PoolLayer::kHeap
  epoch::Manager& epochs_;
  const uint64_t id_;          // unique per Heap instance in this process (keys the thread context)
  uint8_t* region_ = nullptr;  // heap region start
  uint64_t region_off_ = 0;    // its pool offset
  uint64_t data_off_ = 0;      // pool offset of chunk 0's data
  // Chunks in the heap (every segment's, metadata chunks included); grows with the pool
  // (release: the new chunks' volatile state is ready once the count is seen).
  std::atomic<uint64_t> chunks_{0};
  std::atomic<uint64_t> meta_chunks_{0};  // of grown segments
  uint64_t max_chunks_ = 0;               // the most chunks the pool can grow to in this run
  // Bytes one thread may free in one epoch before it asks for an early boundary: 1/16 of the
  // heap (at least 1 MiB).
  uint64_t early_advance_bytes_ = 0;
  // Chunk metadata (internal/heap_layout.h): chunk c's header line at headers_ + c *
  // header_stride_, its bitmap lines at bitmaps_ + c * bitmap_stride_ (version 2: all headers
  // contiguous, then all bitmaps; version 1: interleaved ChunkMeta records).
  uint8_t* headers_ = nullptr;
  uint8_t* bitmaps_ = nullptr;
  size_t header_stride_ = 0, bitmap_stride_ = 0;
  uint64_t seg0_chunks_ = 0;  // chunks of segment 0 (the HeapHeader's)
  // Grown segments (heap_layout.h), in chunk order; entries below the count are immutable.
  struct Segment {
    uint64_t first = 0, count = 0, meta = 0;
    uint8_t* headers = nullptr;  // header line of chunk `first`
    uint8_t* bitmaps = nullptr;  // bitmap lines of chunk `first`
  };
  alloc_internal::MappedArray<Segment> segments_;
  std::atomic<uint64_t> segment_count_{0};
  // The grown segment that holds `chunk`, which is past segment 0.
  const Segment& SegmentOf(uint64_t chunk) const;
  Segment pending_;     // the segment PrepareGrowth wrote, for CommitGrowth (under the pool's lock)
  std::mutex grow_mu_;  // one automatic growth at a time
  int flush_source_ = 0;

  // Volatile mirror of every chunk's (recovered) state word, and the volatile state of each
  // small chunk in use this run (null until the chunk is first used: its bitmap is read then).
  // Sized for max_chunks_ (untouched pages cost nothing), so growth never moves them.
  alloc_internal::MappedArray<std::atomic<uint64_t>> state_;
  alloc_internal::MappedArray<std::atomic<uint8_t>> small_class_;  // class + 1 of a small chunk
  // A small chunk's volatile state (64-byte aligned) tagged with its class + 1 in the low six
  // bits: the free path reads both with one load. 0 until the chunk is first used this run.
  static constexpr uintptr_t kVolTagMask = 63;
  alloc_internal::MappedArray<std::atomic<uintptr_t>> vol_;

  mutable std::mutex chunk_mu_;                          // guards the three below and chunk loading
  std::map<uint64_t, uint64_t> free_runs_;               // start -> length, coalesced
  std::set<std::pair<uint64_t, uint64_t>> by_length_;    // (length, start), best fit
  std::vector<uint64_t> unloaded_[SizeClasses::kCount];  // used chunks not yet read this run

  struct alignas(64) Central {
    std::mutex mu;
    std::vector<uint64_t> blocks;  // reusable block offsets
  };
  Central central_[SizeClasses::kCount];
  std::mutex batches_mu_;
  std::vector<alloc_internal::FreeBatch*> spare_batches_;  // reused: no allocation per epoch
  std::atomic<int64_t> retired_batches_{0};  // free batches awaiting their grace period
  // Set by an allocation that found the heap full: the next two boundaries gather every
  // cache's free blocks and return empty chunks (the frees of the first boundary's epoch are
  // ready only after it), and record what came back (blocks + chunks).
  std::atomic<int> pressure_{0};
  std::atomic<uint64_t> pressure_gain_{0};
  std::atomic<uint64_t> pressure_epoch_{~uint64_t{0}};     // the last boundary under pressure
  std::atomic<uint64_t> frees_at_pressure_{~uint64_t{0}};  // TotalFrees() at that boundary
  std::atomic<uint64_t> chunks_returned_{0};
  std::atomic<uint64_t> double_frees_{0};
  // Volatile states of returned chunks, kept for reuse (REQUIRES: chunk_mu_): a reader that
  // loaded the pointer just before the return (UsableSize outside a guard) reads valid memory.
  std::vector<alloc_internal::ChunkVolatile*> spare_vols_;
  PerThread<alloc_internal::ThreadCache> caches_;
};

// Transaction scope (installed by txn/): while the calling thread has a transaction open, pnew
// and pdelete go through it, so the allocation or free follows the transaction's outcome
// (DESIGN.md contract 3). Null outside transactions.
class TxScope {
 public:
  // A block of the default heap owned by the transaction; null on failure (the transaction is
  // doomed with the reason).
  virtual void* TxAllocate(size_t size, size_t align) = 0;
  // Frees a live block when the transaction commits.
  virtual absl::Status TxFree(void* p) = 0;

 protected:
  ~TxScope() = default;
};
inline thread_local TxScope* tls_tx_scope = nullptr;

// Constructs a T in the default heap. Null (and the thread's LastError) on failure.
template <class T, class... Args>
T* pnew(Args&&... args) {
  Heap* h = Heap::Default();
  if (h == nullptr) return nullptr;
  TxScope* tx = tls_tx_scope;
  void* p =
      tx != nullptr ? tx->TxAllocate(sizeof(T), alignof(T)) : h->Allocate(sizeof(T), alignof(T));
  return p == nullptr ? nullptr : new (p) T(std::forward<Args>(args)...);
}

// Destroys and frees a T of the default heap. A pointer that is not a live block is refused
// before anything is destroyed.
template <class T>
absl::Status pdelete(T* p) {
  if (p == nullptr) return absl::OkStatus();
  Heap* h = Heap::Default();
  if (h == nullptr) return absl::FailedPreconditionError("pdelete: no heap is open");
  if (h->UsableSize(p) == 0) return h->Free(p);  // the error says why
  p->~T();
  if (TxScope* tx = tls_tx_scope) return tx->TxFree(p);
  return h->Free(p);
}

}  // namespace pmrt::alloc

namespace pmrt::alloc_internal {
// Bytes in front of a pnew_array's elements: its element count, for a T whose destructors
// pdelete_array must run (none for a trivially destructible T), padded to T's alignment.
template <class T>
constexpr size_t ArrayCookie() {
  return std::is_trivially_destructible_v<T> ? 0 : std::max(alignof(T), sizeof(size_t));
}
}  // namespace pmrt::alloc_internal

namespace pmrt::alloc {

// Constructs n value-initialized Ts in one block of the default heap (through the
// transaction when one is open, as pnew). Null on failure with LastError set (kOverflow when
// the bytes do not fit in size_t). n == 0 gives a valid block with no elements.
template <class T>
T* pnew_array(size_t n) {
  Heap* h = Heap::Default();
  if (h == nullptr) {
    Heap::SetLastError(AllocError::kNoHeap);
    return nullptr;
  }
  constexpr size_t cookie = alloc_internal::ArrayCookie<T>();
  if (n > (SIZE_MAX - cookie) / sizeof(T)) {
    Heap::SetLastError(AllocError::kOverflow);
    return nullptr;
  }
  const size_t bytes = cookie + n * sizeof(T);
  constexpr size_t align = std::max(alignof(T), alignof(size_t));
  TxScope* tx = tls_tx_scope;
  auto* base = static_cast<uint8_t*>(tx != nullptr ? tx->TxAllocate(bytes, align)
                                                   : h->Allocate(bytes, align));
  if (base == nullptr) return nullptr;
  if constexpr (cookie != 0) new (base) size_t(n);
  T* first = reinterpret_cast<T*>(base + cookie);
  for (size_t i = 0; i < n; ++i) new (first + i) T();
  return first;
}

// Destroys (last element first) and frees an array from pnew_array<T>. A pointer that is not
// one is refused before anything is destroyed.
template <class T>
absl::Status pdelete_array(T* p) {
  if (p == nullptr) return absl::OkStatus();
  Heap* h = Heap::Default();
  if (h == nullptr) return absl::FailedPreconditionError("pdelete_array: no heap is open");
  constexpr size_t cookie = alloc_internal::ArrayCookie<T>();
  void* base = reinterpret_cast<uint8_t*>(p) - cookie;
  if (h->UsableSize(base) == 0) return h->Free(base);  // the error says why
  if constexpr (cookie != 0) {
    for (size_t i = *static_cast<size_t*>(base); i > 0; --i) p[i - 1].~T();
  }
  if (TxScope* tx = tls_tx_scope) return tx->TxFree(base);
  return h->Free(base);
}

}  // namespace pmrt::alloc

#endif  // PMRT_ALLOC_ALLOCATOR_H_
