// Heap's free path: locating a block, the thread's free batch of the epoch (reusable once the
// epoch has closed and is durable), blocks of another thread's chunks sent back to it, spilling
// to the central lists; double frees and foreign pointers reported (docs/alloc.md, "Free").
#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "alloc/internal/heap_state.h"

namespace pmrt::alloc {

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

// The calling thread's batch of epoch e, opened on its first free in e: reusable once e has
// closed (no guard can hold its blocks any more, and e is durable).
FreeBatch* Heap::OpenBatch(ThreadCache& tc, uint64_t e) {
  FreeBatch* batch;
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
    tc.pending.push_back(*batch);
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
  return batch;
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
    batch = OpenBatch(tc, e);
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
  while (!tc.pending.empty() && tc.pending.front().ready.load(std::memory_order_acquire)) {
    ready.push_back(&tc.pending.front());
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

}  // namespace pmrt::alloc
