// The Pool object once it is open: Close (the clean-shutdown mark), the typed root's binding,
// the regions and accessors, the default pool and the layers attached to it. Creating a pool is
// in pool_create.cc, opening and validating one in pool_open.cc, growth in pool_grow.cc, the
// persistence choices in pool_backend.cc, mapping and locking in pool_file.cc; what they share is
// in epoch/internal/pool_internal.h. The on-media format is described in docs/format.md.
//
// Persistence order: Close marks the pool clean (clean_shutdown = 1, its own line and fence) only
// after everything written to a file pool's mapping is durable, and only when nothing is left to
// recover; a root binding records sizeof(T) durably on its first call.
#include "epoch/pool.h"

#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "epoch/internal/pool_internal.h"

namespace pmrt {

using epoch_internal::ErrnoError;
using epoch_internal::g_default_pool;
using epoch_internal::InvalidArgument;
using epoch_internal::kCloseClean;
using epoch_internal::kCloseCleanFence;
using epoch_internal::kPage;
using epoch_internal::kRootBind;
using epoch_internal::kRootBindFence;
using epoch_internal::LayoutOf;
using epoch_internal::PoolError;

// ---- Close and accessors ------------------------------------------------------------------

Pool::~Pool() {
  absl::Status st = Close();
  if (!st.ok()) std::fprintf(stderr, "pmrt: closing pool: %s\n", st.ToString().c_str());
}

bool Pool::recovery_acknowledged() const {
  if (was_clean_shutdown_) return true;
  const uint32_t got = recovered_.load(std::memory_order_acquire);
  if ((got & kRecoveredEpochs) == 0) return false;
  return (got & kRecoveredTxn) != 0 ||
         state().txn_directory.value.load(std::memory_order_acquire) == 0;
}

absl::Status Pool::Close() {
  absl::Status result;
  if (!closed_) {
    closed_ = true;
    Pool* self = this;
    g_default_pool.compare_exchange_strong(self, nullptr);
    // 1. Everything written to a file pool's mapping is made durable first: clean_shutdown = 1
    //    promises the next Open that nothing needs recovering. (Layers above persist their own
    //    state before Close; this also covers plain stores the user never flushed.) If the
    //    sync fails, the flag stays 0 and the next Open runs recovery.
    if (!writes_begun_.load(std::memory_order_acquire)) {
      // Opened with defer_attach and never written: closed as it was found.
    } else if (fd_ >= 0 && !private_ &&  // a private mapping has nothing to sync: no write
                                         // of it reaches the file, the flag below included
               (msync(base_, size(), MS_SYNC) != 0 || fsync(fd_) != 0)) {
      result = ErrnoError(errno, path_, "cannot sync the pool before closing it");
    } else if (health_->failed()) {
      // The failed mode: epochs after the last durable one did not complete, so the pool stays
      // marked as crashed and the next Open rolls them back.
      result = health_->status();
    } else if (!recovery_acknowledged()) {
      // A crashed pool whose recovery this run did not complete: it stays marked as crashed
      // (clean_shutdown 0 since Open), and the next Open recovers.
    } else if (txn_engine_open()) {
      // A transaction engine is still open: words it holds may be durable only in its log, so
      // the pool stays marked as crashed and the next Open replays the log.
    } else {
      // 2. clean_shutdown = 1, its own line, persisted: a crash before the fence leaves 0 (an
      //    unclean shutdown, recovery runs and finds nothing to do), after it 1.
      PoolState& s = state();
      s.clean_shutdown.value.store(1, std::memory_order_relaxed);
      persister_.Persist(kCloseClean, kCloseCleanFence, &s.clean_shutdown, kCacheLine);
    }
  }
  Unmap();
  return result;
}

void Pool::Unmap() {
  if (owns_mapping_ && base_ != nullptr) munmap(base_, capacity_);
  base_ = nullptr;
  size_ = 0;
  capacity_ = 0;
  owns_mapping_ = false;
  if (fd_ >= 0) close(fd_);  // also releases the flock
  fd_ = -1;
}

absl::Status Pool::BindRoot(size_t size, size_t align) {
  if (closed_) {
    return PoolError(absl::StatusCode::kFailedPrecondition, path_, "pool is closed");
  }
  const RegionDesc root = header().root;
  if (size > root.size || align > kPage) {
    return InvalidArgument(path_, absl::StrFormat("root type (%d bytes, alignment %d) does not "
                                                  "fit the %d-byte root region",
                                                  size, align, root.size));
  }
  BeginWrites();  // the caller writes through the root it gets
  // The first binding records sizeof(T) durably (a CAS so that concurrent first calls agree);
  // a crash before the fence leaves 0 and the next run binds again. The region itself is zero
  // from Create, so the root is zero at first use. Relaxed: the CAS publishes only the size
  // word itself, which every caller reads through this same CAS.
  auto& bound = state().root_type_size.value;
  uint64_t expected = 0;
  if (bound.compare_exchange_strong(expected, size, std::memory_order_relaxed)) {
    persister_.Persist(kRootBind, kRootBindFence, &state().root_type_size, kCacheLine);
    return absl::OkStatus();
  }
  if (expected != size) {
    return PoolError(absl::StatusCode::kFailedPrecondition, path_,
                     absl::StrFormat("root type size mismatch: the pool's root is a %d-byte "
                                     "type, root<T>() asks for %d bytes",
                                     expected, size));
  }
  return absl::OkStatus();
}

std::string_view Pool::layout() const { return LayoutOf(header()); }

RegionDesc Pool::region(PoolRegion r) const {
  const PoolHeader& h = header();
  switch (r) {
    case PoolRegion::kRoot:
      return h.root;
    case PoolRegion::kEpoch:
      return h.epoch;
    case PoolRegion::kLog:
      return h.log;
    case PoolRegion::kHeap:  // to the end of the pool, which growth moves
      return RegionDesc{h.heap.offset, size() - h.heap.offset};
  }
  return RegionDesc{0, 0};
}

uint64_t Pool::open_count() const {
  return state().open_count.value.load(std::memory_order_relaxed);  // written only by Attach
}

Pool* Pool::Default() { return g_default_pool.load(); }

absl::Status Pool::AttachLayer(PoolLayer layer) {
  const auto bit = static_cast<uint32_t>(layer);
  if ((layers_.fetch_or(bit, std::memory_order_acq_rel) & bit) == 0) return absl::OkStatus();
  const char* name = layer == PoolLayer::kEpochs ? "an epoch manager"
                     : layer == PoolLayer::kHeap ? "a heap"
                                                 : "a transaction engine";
  return absl::FailedPreconditionError(
      absl::StrCat(path_, ": ", name,
                   " is already open on this pool in this process; use that "
                   "one (a second one would recover and overwrite what the first uses)"));
}

void Pool::DetachLayer(PoolLayer layer) {
  layers_.fetch_and(~static_cast<uint32_t>(layer), std::memory_order_acq_rel);
}

void Pool::CheckNoLayerAbove(PoolLayer layer, const char* who) const {
  const uint32_t above =
      layers_.load(std::memory_order_acquire) & ~(2 * static_cast<uint32_t>(layer) - 1);
  if (above == 0) return;
  const char* open = (above & static_cast<uint32_t>(PoolLayer::kTransactions)) != 0
                         ? "a txn::Engine"
                         : "an alloc::Heap";
  std::fprintf(stderr,
               "pmrt: %s: %s destroyed while %s of this pool is still open; destroy the layers "
               "in reverse order of their opening (engine, heap, epoch manager, pool)\n",
               path_.c_str(), who, open);
  std::abort();
}

}  // namespace pmrt
