// Pool files at the system-call level, for create, open and growth: a failed call's errno as the
// most specific status naming the pool, the address-space reservation a file pool maps into (so
// that growth maps more of the file right after what is mapped), the shared mapping itself
// (MAP_SYNC where the file system offers it) and the file's lock. Nothing here writes the pool:
// the persistence order lives with the callers (pool_create.cc, pool_open.cc, pool_grow.cc).
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/resource.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "epoch/internal/pool_internal.h"

namespace pmrt::epoch_internal {
namespace {

// Address space a file pool reserves for growth when PoolOptions::max_size is 0: 4x its size,
// at least this much.
constexpr size_t kDefaultReserve = size_t{16} << 30;

// The most specific canonical code for a pool's caller when a system call fails with `err`.
absl::StatusCode CodeForErrno(int err) {
  switch (err) {
    case ENOENT:
    case ENOTDIR:
      return absl::StatusCode::kNotFound;
    case EACCES:
    case EPERM:
    case EROFS:
    case ETXTBSY:
      return absl::StatusCode::kPermissionDenied;
    case EEXIST:
      return absl::StatusCode::kAlreadyExists;
    case EISDIR:
    case EWOULDBLOCK:
      return absl::StatusCode::kFailedPrecondition;
    case ENOSPC:
    case EDQUOT:
    case ENOMEM:
    case EMFILE:
    case ENFILE:
      return absl::StatusCode::kResourceExhausted;
    case EINVAL:
    case ENAMETOOLONG:
    case ELOOP:
    case EFBIG:
      return absl::StatusCode::kInvalidArgument;
    default:
      return absl::ErrnoToStatus(err, "").code();
  }
}

}  // namespace

absl::Status ErrnoError(int err, std::string_view name, std::string_view what) {
  return PoolError(CodeForErrno(err), name, absl::StrCat(Av(what), ": ", std::strerror(err)));
}

void* MapSharedAt(int fd, void* at, size_t len, off_t off) {
  void* p =
      mmap(at, len, PROT_READ | PROT_WRITE, MAP_SHARED_VALIDATE | MAP_SYNC | MAP_FIXED, fd, off);
  if (p != MAP_FAILED) return p;
  return mmap(at, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd, off);
}

void* MapPool(int fd, size_t len, size_t* reserve, bool copy_on_write) {
  size_t want = std::max(*reserve, len);
  void* r;
  for (;;) {
    r = mmap(nullptr, want, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (r != MAP_FAILED || want == len) break;
    want = std::max(len, RoundUpToPage(want / 2));
  }
  if (r == MAP_FAILED) return MAP_FAILED;
  void* p = copy_on_write ? mmap(r, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_FIXED, fd, 0)
                          : MapSharedAt(fd, r, len, 0);
  if (p == MAP_FAILED) {
    const int err = errno;
    munmap(r, want);
    errno = err;
    return MAP_FAILED;
  }
  *reserve = want;
  return p;
}

size_t FileReserve(const PoolOptions& o, size_t size) {
  if (o.max_size != 0) return std::max(o.max_size, size);
  size_t want = std::max(4 * size, kDefaultReserve);
  rlimit as;
  if (getrlimit(RLIMIT_AS, &as) == 0 && as.rlim_cur != RLIM_INFINITY) {
    want = std::min<size_t>(want, RoundUpToPage(static_cast<size_t>(as.rlim_cur) / 4));
  }
  return std::max(want, size);
}

absl::Status LockFile(int fd, std::string_view name) {
  if (flock(fd, LOCK_EX | LOCK_NB) == 0) return absl::OkStatus();
  if (errno == EWOULDBLOCK) {
    return PoolError(absl::StatusCode::kFailedPrecondition, name,
                     absl::StrCat("pool is in use by another process or Pool: ", Av(name)));
  }
  return ErrnoError(errno, name, "cannot lock the pool file");
}

}  // namespace pmrt::epoch_internal
