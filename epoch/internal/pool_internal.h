// What the pool's source files share: the page size, the persistence sites of the pool layer,
// the status helpers that name the pool, the header's checksum and layout name, the calls that
// map and lock a pool file (epoch/pool_file.cc), the persistence options every create and open
// checks (epoch/pool_backend.cc), and the default pool. Included by epoch/ sources only:
// pool.cc (the Pool object, Close, the root and the layers), pool_create.cc, pool_open.cc,
// pool_grow.cc, pool_backend.cc and pool_file.cc.
#ifndef PMRT_EPOCH_INTERNAL_POOL_INTERNAL_H_
#define PMRT_EPOCH_INTERNAL_POOL_INTERNAL_H_

#include <sys/types.h>
#include <unistd.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string_view>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "base/crc32c.h"
#include "epoch/persist.h"
#include "epoch/pool.h"
#include "epoch/pool_layout.h"

namespace pmrt::epoch_internal {

inline constexpr size_t kPage = 4096;
inline constexpr size_t kChecksumOffset = offsetof(PoolHeader, checksum);

// Persistence sites of the pool layer, in the order a Create + Close run reaches them.
inline constexpr Site kCreateInvalidate{"pool.create.invalidate"};
inline constexpr Site kCreateInvalidateFence{"pool.create.invalidate.fence"};
inline constexpr Site kCreateZero{"pool.create.zero"};
inline constexpr Site kCreateZeroFence{"pool.create.zero.fence"};
inline constexpr Site kCreateHeader{"pool.create.header"};  // fenced by Attach's kOpenDirtyFence
inline constexpr Site kOpenDirty{"pool.open.dirty"};
inline constexpr Site kOpenDirtyFence{"pool.open.dirty.fence"};
inline constexpr Site kOpenCount{"pool.open.count"};
inline constexpr Site kOpenCountFence{"pool.open.count.fence"};
inline constexpr Site kRootBind{"pool.root.bind"};
inline constexpr Site kRootBindFence{"pool.root.bind.fence"};
inline constexpr Site kCloseClean{"pool.close.clean"};
inline constexpr Site kCloseCleanFence{"pool.close.clean.fence"};
// Zeroing on growth is for in-memory pools only: a file grows with zeroes.
inline constexpr Site kGrowZero{"pool.grow.zero"};
inline constexpr Site kGrowZeroFence{"pool.grow.zero.fence"};
inline constexpr Site kGrowCommit{"pool.grow.commit"};
inline constexpr Site kGrowCommitFence{"pool.grow.commit.fence"};

// The first pool attached that is still open (Pool::Default). Set by Attach with a CAS from
// null and cleared by Close with a CAS from itself; seq_cst, these are rare.
inline std::atomic<Pool*> g_default_pool{nullptr};

// ---- errors -------------------------------------------------------------------------------

// This Abseil is built with its own string_view (ABSL_OPTION_USE_STD_STRING_VIEW 0), which
// StrCat takes; std::string_view needs a conversion.
inline absl::string_view Av(std::string_view s) { return absl::string_view(s.data(), s.size()); }

inline absl::Status PoolError(absl::StatusCode code, std::string_view name,
                              std::string_view problem) {
  return absl::Status(code, absl::StrCat(Av(name), ": ", Av(problem)));
}
inline absl::Status DataLoss(std::string_view name, std::string_view problem) {
  return PoolError(absl::StatusCode::kDataLoss, name, problem);
}
inline absl::Status InvalidArgument(std::string_view name, std::string_view problem) {
  return PoolError(absl::StatusCode::kInvalidArgument, name, problem);
}

// `what` failed with `err`: a message naming the path, the operation and the system's reason.
absl::Status ErrnoError(int err, std::string_view name, std::string_view what);

// ---- small helpers ------------------------------------------------------------------------

inline constexpr size_t RoundUpToPage(size_t v) { return (v + kPage - 1) & ~(kPage - 1); }

inline bool IsZero(const uint8_t* p, size_t n) {
  return n == 0 || (p[0] == 0 && std::memcmp(p, p + 1, n - 1) == 0);
}

inline uint32_t HeaderChecksum(const PoolHeader& h) { return Crc32c(&h, kChecksumOffset); }

inline std::string_view LayoutOf(const PoolHeader& h) {
  return std::string_view(h.layout, strnlen(h.layout, sizeof(h.layout)));
}

// Caller memory for an in-memory pool: non-null and page aligned (regions are page aligned
// offsets, so objects in them are aligned only if the base is).
inline absl::Status CheckBase(const void* base, std::string_view name) {
  if (base == nullptr) return InvalidArgument(name, "pool memory is null");
  if (reinterpret_cast<uintptr_t>(base) % kPage != 0) {
    return InvalidArgument(name, "pool memory is not 4 KiB aligned");
  }
  return absl::OkStatus();
}

// ---- mapping and locking a pool file (epoch/pool_file.cc) ---------------------------------

// Maps [off, off + len) of the file at `at` (MAP_FIXED), shared and writable. MAP_SYNC first,
// so that on a DAX file system cache flushes (the pmem backend) are enough for durability
// without msync; other file systems refuse MAP_SYNC and get a plain shared mapping.
void* MapSharedAt(int fd, void* at, size_t len, off_t off);

// Reserves *reserve bytes of address space (at least len; inaccessible, no memory committed)
// and maps the file's first len bytes at its start, so that a growth can map more of the file
// right after them. When the reservation is refused (RLIMIT_AS), halves it until it fits, down
// to len. Sets *reserve to what was reserved. `copy_on_write`: a private mapping (writes never
// reach the file; PoolOptions::private_mapping).
void* MapPool(int fd, size_t len, size_t* reserve, bool copy_on_write = false);

// The address space a file pool reserves. By default max(4 x size, 16 GiB), but under an
// address-space limit (RLIMIT_AS) at most a quarter of it: the reservation, the heap's
// per-chunk arrays sized by it and the rest of the process (threads, buffers, replies) all count
// against the limit, and a reservation that took all of it would leave the process to die of
// its first large allocation.
size_t FileReserve(const PoolOptions& o, size_t size);

// Takes the pool file's exclusive lock without waiting: kFailedPrecondition naming the pool when
// another process or Pool holds it.
absl::Status LockFile(int fd, std::string_view name);

// Closes an fd at scope exit unless released.
class FdGuard {
 public:
  explicit FdGuard(int fd) : fd_(fd) {}
  ~FdGuard() {
    if (fd_ >= 0) close(fd_);
  }
  FdGuard(const FdGuard&) = delete;
  FdGuard& operator=(const FdGuard&) = delete;
  int get() const { return fd_; }
  int release() { return std::exchange(fd_, -1); }

 private:
  int fd_;
};

// ---- persistence options (epoch/pool_backend.cc) -------------------------------------------

// The backend the caller asked for: options.backend, else (file pools only) PMRT_BACKEND.
// Nullopt: none asked for; ChooseBackend decides.
absl::StatusOr<std::optional<BackendKind>> RequestedBackend(const PoolOptions& o, bool in_memory,
                                                            std::string_view name);

// How the pmem backend is to write records: options.record_writes, else PMRT_RECORD_WRITES,
// else the processor's faster way (epoch/persist.h, DefaultRecordWrites).
absl::StatusOr<RecordWrites> RequestedRecordWrites(const PoolOptions& o, std::string_view name);

// Both persistence choices, checked before anything is touched.
// `opening_file`: Pool::Open, the one open that may map a file private.
absl::Status CheckPersistenceOptions(const PoolOptions& o, bool in_memory, std::string_view name,
                                     bool opening_file = false);

}  // namespace pmrt::epoch_internal

#endif  // PMRT_EPOCH_INTERNAL_POOL_INTERNAL_H_
