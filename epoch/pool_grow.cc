// Pool::Grow: extending a pool while it is open (docs/format.md, "Growth"; the step comments
// below refer to it). One growth at a time (grow_mu_); the heap above prepares and then takes the
// new space through the GrowthListener.
//
// Persistence order: the new bytes are zero and durable (a file extended, fsynced and mapped
// after the old bytes; caller memory zeroed and persisted), then the heap's metadata for them,
// then the commit, grown_size on its own line and fence. A crash before the commit's fence opens
// the pool at its old size (the extra bytes are ignored and reused by the next growth), after it
// at the new size with its metadata ready. An Open never finds a pool longer than its file.
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <mutex>
#include <utility>

#include "absl/strings/str_format.h"
#include "base/status_macros.h"
#include "epoch/internal/pool_internal.h"
#include "epoch/pool.h"

namespace pmrt {

using epoch_internal::ErrnoError;
using epoch_internal::InvalidArgument;
using epoch_internal::IsZero;
using epoch_internal::kGrowCommit;
using epoch_internal::kGrowCommitFence;
using epoch_internal::kGrowZero;
using epoch_internal::kGrowZeroFence;
using epoch_internal::kPage;
using epoch_internal::MapSharedAt;
using epoch_internal::PoolError;
using epoch_internal::RoundUpToPage;

void Pool::SetGrowthListener(GrowthListener listener) {
  std::lock_guard<std::mutex> l(grow_mu_);
  listener_ = std::move(listener);
}

// Extends the file from old_size to new_size bytes of zeroes (allocated unless sparse), durably,
// and maps the new bytes right after the old ones.
absl::Status Pool::ExtendFile(size_t old_size, size_t new_size) {
  // A growth whose commit did not happen left the file longer: cut it back first, so that the
  // new bytes are zeroes whatever that growth wrote.
  if (ftruncate(fd_, static_cast<off_t>(old_size)) != 0 ||
      ftruncate(fd_, static_cast<off_t>(new_size)) != 0) {
    return ErrnoError(errno, path_,
                      absl::StrFormat("cannot extend the pool file to %d bytes", new_size));
  }
  auto undo = [&] { (void)!ftruncate(fd_, static_cast<off_t>(old_size)); };
  if (int err = sparse_ ? 0
                        : posix_fallocate(fd_, static_cast<off_t>(old_size),
                                          static_cast<off_t>(new_size - old_size));
      err != 0) {
    undo();
    if (err == ENOSPC || err == EDQUOT) {
      return PoolError(absl::StatusCode::kResourceExhausted, path_,
                       absl::StrFormat("no space to grow the pool from %d to %d bytes: %s",
                                       old_size, new_size, std::strerror(err)));
    }
    return ErrnoError(err, path_, "cannot allocate the grown pool file");
  }
  // The file's new length is durable before the commit names it: an Open never finds a pool
  // longer than its file.
  if (fsync(fd_) != 0) {
    const int err = errno;
    undo();
    return ErrnoError(err, path_, "cannot sync the grown pool file");
  }
  if (MapSharedAt(fd_, base_ + old_size, new_size - old_size, static_cast<off_t>(old_size)) ==
      MAP_FAILED) {
    const int err = errno;
    // Give the range back to the reservation before the file shrinks under it.
    mmap(base_ + old_size, new_size - old_size, PROT_NONE,
         MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
    undo();
    return ErrnoError(err, path_, "cannot map the grown part of the pool");
  }
  return absl::OkStatus();
}

absl::Status Pool::Grow(size_t new_size) {
  std::lock_guard<std::mutex> l(grow_mu_);
  if (closed_) return PoolError(absl::StatusCode::kFailedPrecondition, path_, "pool is closed");
  if (health_->failed()) return health_->status();
  if (private_) {
    return PoolError(absl::StatusCode::kFailedPrecondition, path_,
                     "cannot grow a pool opened with a private mapping (nothing reaches the file)");
  }
  const size_t old_size = size();
  new_size = RoundUpToPage(new_size);
  if (new_size < old_size + kMinGrowth) {
    return InvalidArgument(path_, absl::StrFormat("cannot grow the pool from %d to %d bytes: a "
                                                  "growth adds at least %d bytes",
                                                  old_size, new_size, kMinGrowth));
  }
  if (!listener_.prepare) {
    return PoolError(absl::StatusCode::kFailedPrecondition, path_,
                     "a pool grows through its heap: open an alloc::Heap on it first");
  }
  BeginWrites();

  if (new_size > capacity_) {
    return PoolError(absl::StatusCode::kResourceExhausted, path_,
                     absl::StrFormat("cannot grow the pool from %d to %d bytes: this run can "
                                     "grow it to %d (PoolOptions::max_size; reopen it to grow "
                                     "further)",
                                     old_size, new_size, capacity_));
  }
  // 1. The new bytes, zero and durable: a file is extended (zeroes by definition) and synced;
  //    memory the caller owns may hold anything, so what is not zero is zeroed and persisted.
  if (fd_ >= 0) {
    RETURN_IF_ERROR(ExtendFile(old_size, new_size));
  } else {
    bool wrote = false;
    for (size_t off = old_size; off < new_size; off += kPage) {
      if (IsZero(base_ + off, kPage)) continue;
      std::memset(base_ + off, 0, kPage);
      persister_.Flush(kGrowZero, base_ + off, kPage);
      wrote = true;
    }
    if (wrote) persister_.Fence(kGrowZeroFence);
  }
  // 2. The heap's metadata for the new space, persisted (its own fence).
  if (listener_.prepare) RETURN_IF_ERROR(listener_.prepare(old_size, new_size));
  // 3. The commit: grown_size, its own line, persisted. A crash before this fence opens at the
  //    old size (the new bytes are ignored), after it at the new size with its metadata ready.
  PoolState& s = state();
  s.grown_size.value.store(new_size, std::memory_order_relaxed);
  persister_.Persist(kGrowCommit, kGrowCommitFence, &s.grown_size, kCacheLine);
  if (health_->failed()) return health_->status();
  size_.store(new_size, std::memory_order_release);
  growths_.fetch_add(1, std::memory_order_relaxed);
  // 4. The heap takes the new space.
  if (listener_.commit) listener_.commit(old_size, new_size);
  return absl::OkStatus();
}

}  // namespace pmrt
