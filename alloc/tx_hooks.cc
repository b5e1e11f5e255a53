// Heap's transaction hooks: replaying a committed transaction's allocations and frees after a
// crash (idempotent, logged in the current epoch), and undoing an aborted one's allocation.
#include "absl/strings/str_cat.h"
#include "alloc/internal/heap_state.h"

namespace pmrt::alloc {

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

}  // namespace pmrt::alloc
