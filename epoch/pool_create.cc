// Pool::Create and Pool::CreateInMemory: the argument checks, the region plan and the first
// image of a pool (docs/format.md, "Create order"; the step comments below refer to it).
//
// Persistence order: an old image's header dies first and durably, then every other non-zero
// page is zeroed under one fence, then the checksummed header is flushed; Attach's first fence
// (pool_open.cc) makes it durable. A crash at any point leaves no pool, the old pool intact, or
// a new pool not cleanly shut down. A file pool is written under a temporary name, synced whole
// and linked into place (link() never replaces a file), so that `path` names the complete pool
// or nothing.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/status_macros.h"
#include "epoch/internal/pool_internal.h"
#include "epoch/pool.h"

namespace pmrt {

using epoch_internal::CheckBase;
using epoch_internal::CheckPersistenceOptions;
using epoch_internal::ErrnoError;
using epoch_internal::FdGuard;
using epoch_internal::FileReserve;
using epoch_internal::HeaderChecksum;
using epoch_internal::InvalidArgument;
using epoch_internal::IsZero;
using epoch_internal::kCreateHeader;
using epoch_internal::kCreateInvalidate;
using epoch_internal::kCreateInvalidateFence;
using epoch_internal::kCreateZero;
using epoch_internal::kCreateZeroFence;
using epoch_internal::kPage;
using epoch_internal::LockFile;
using epoch_internal::MapPool;
using epoch_internal::PoolError;
using epoch_internal::RoundUpToPage;

namespace {

constexpr size_t kMinHeapSize = 64 * 1024;
constexpr size_t kMinLogSize = 256 * 1024;

// Random bytes from getrandom(2) (no file I/O, so in-memory Create may use it too); falls back
// to the clock and an address when the kernel has no entropy to give without blocking.
void FillRandom(uint8_t* out, size_t len) {
  size_t got = 0;
  while (got < len) {
    ssize_t n = getrandom(out + got, len - got, GRND_NONBLOCK);
    if (n <= 0) break;
    got += static_cast<size_t>(n);
  }
  if (got == len) return;
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  uint64_t x = static_cast<uint64_t>(ts.tv_nsec) ^ reinterpret_cast<uintptr_t>(out);
  for (; got < len; ++got) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    out[got] = static_cast<uint8_t>(x >> 56);
  }
}

uint64_t RealtimeNanos() {
  timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}

// Unlinks a path at scope exit unless released.
class UnlinkGuard {
 public:
  explicit UnlinkGuard(std::string path) : path_(std::move(path)) {}
  ~UnlinkGuard() {
    if (!path_.empty()) unlink(path_.c_str());
  }
  UnlinkGuard(const UnlinkGuard&) = delete;
  UnlinkGuard& operator=(const UnlinkGuard&) = delete;
  void release() { path_.clear(); }

 private:
  std::string path_;
};

// ---- argument checks and region planning ---------------------------------------------------

absl::Status CheckLayoutName(std::string_view layout, std::string_view name) {
  if (layout.empty()) return InvalidArgument(name, "layout name is empty");
  if (layout.size() > kLayoutNameMax) {
    return InvalidArgument(name, absl::StrFormat("layout name is %d bytes, the limit is %d",
                                                 layout.size(), kLayoutNameMax));
  }
  if (layout.find('\0') != std::string_view::npos) {
    return InvalidArgument(name, "layout name contains a NUL byte");
  }
  return absl::OkStatus();
}

struct RegionPlan {
  RegionDesc root, epoch, log, heap;
};

// Lays out the regions of a `size`-byte pool (size is a page multiple >= kMinPoolSize):
// header, state, root, epoch, log, then the heap to the end.
absl::StatusOr<RegionPlan> PlanRegions(size_t size, const PoolOptions& o, std::string_view name) {
  size_t log_request = o.log_area_size != 0 ? o.log_area_size : std::max(size / 16, kMinLogSize);
  const std::pair<const char*, size_t> requests[] = {{"root_size", o.root_size},
                                                     {"epoch_area_size", o.epoch_area_size},
                                                     {"log_area_size", log_request}};
  for (const auto& [field, value] : requests) {
    if (value > size) {
      return InvalidArgument(name, absl::StrFormat("size too small: %s (%d bytes) is larger than "
                                                   "the pool (%d bytes)",
                                                   field, value, size));
    }
  }
  RegionPlan plan;
  uint64_t next = kPoolHeaderSize + kPoolStateSize;
  auto take = [&next](size_t request) {
    RegionDesc r{next, std::max<uint64_t>(RoundUpToPage(request), kPage)};
    next += r.size;
    return r;
  };
  plan.root = take(o.root_size);
  plan.epoch = take(o.epoch_area_size);
  plan.log = take(log_request);
  // Each request is <= size, so `next` is at most 3 * size + 8 KiB: no overflow.
  if (next > size || size - next < kMinHeapSize) {
    return InvalidArgument(
        name, absl::StrFormat("size too small: a %d-byte pool leaves %d bytes of heap after the "
                              "header, state, root (%d), epoch (%d) and log (%d) regions; the "
                              "heap needs at least %d",
                              size, next > size ? 0 : size - next, plan.root.size, plan.epoch.size,
                              plan.log.size, kMinHeapSize));
  }
  plan.heap = RegionDesc{next, size - next};
  return plan;
}

// Create's size rule: at least kMinPoolSize, rounded up to a 4 KiB multiple.
absl::StatusOr<size_t> CheckCreateSize(size_t size, std::string_view name) {
  if (size < Pool::kMinPoolSize) {
    return InvalidArgument(name, absl::StrFormat("size too small: %d bytes, the minimum is %d",
                                                 size, Pool::kMinPoolSize));
  }
  if (size > (SIZE_MAX & ~(kPage - 1))) {
    return InvalidArgument(name, absl::StrFormat("size %d cannot be rounded up to 4 KiB", size));
  }
  return RoundUpToPage(size);
}

// ---- formatting a new image (docs/format.md, "Create order") ------------------------------

// Zeroes whatever of [base, base + size) is not already zero, durably, old header first, so that
// a new header can be written over it. Pages already zero are not written (a fresh simulator
// pool gets no stores and no fences at all).
void ZeroImage(uint8_t* base, size_t size, const Persister& p) {
  // a. An old pool's header dies first, durably: until this fence a crash leaves the old pool
  //    intact (nothing else has been written), after it the image has no valid header, so the
  //    zeroing below can never be seen under the old header as a damaged "valid" pool.
  if (!IsZero(base, kPoolHeaderSize)) {
    std::memset(base, 0, kPoolHeaderSize);
    p.Persist(kCreateInvalidate, kCreateInvalidateFence, base, kPoolHeaderSize);
  }
  // b. Every other non-zero page (the old state and regions), then one fence: the zeroes must
  //    be durable before any store of the new header can reach media, or a crash image could
  //    show the new header over old state (open count, root binding) or old region contents.
  bool wrote = false;
  for (size_t off = kPoolHeaderSize; off < size; off += kPage) {
    if (IsZero(base + off, kPage)) continue;
    std::memset(base + off, 0, kPage);
    p.Flush(kCreateZero, base + off, kPage);
    wrote = true;
  }
  if (wrote) p.Fence(kCreateZeroFence);
}

// Writes the header of a new pool over memory whose zeroes are durable (a fresh file, or
// ZeroImage). The state page stays zero: clean_shutdown 0 (never closed), open_count 0, root
// unbound.
void WriteNewHeader(uint8_t* base, const Persister& p, PoolHeader h) {
  // The checksum makes the header all-or-nothing: until all of its lines reach media it fails
  // the magic or checksum check (DataLoss: no pool). Flushed without a fence of its own: the
  // caller always attaches next, and Attach's first fence (kOpenDirtyFence) makes it durable.
  // A fence here would order nothing: the header and the stores after it may reach media in
  // any order, and each combination is a legal crash state (no pool, or a new pool not cleanly
  // shut down whose open count is 0 or 1). A file Create also msyncs and fsyncs the whole file
  // before it links it into place.
  h.checksum = HeaderChecksum(h);
  h.checksum_pad = 0;
  std::memcpy(base, &h, sizeof(h));
  p.Flush(kCreateHeader, base, sizeof(h));
}

PoolHeader MakeHeader(size_t size, std::string_view layout, const RegionPlan& plan) {
  PoolHeader h;
  std::memset(&h, 0, sizeof(h));
  std::memcpy(h.magic, kPoolMagic, sizeof(h.magic));
  h.major = kFormatMajor;
  h.minor = kFormatMinor;
  h.header_size = kPoolHeaderSize;
  h.pool_size = size;
  h.create_time_ns = RealtimeNanos();
  FillRandom(h.uuid, sizeof(h.uuid));
  std::memcpy(h.layout, layout.data(), layout.size());
  h.root = plan.root;
  h.epoch = plan.epoch;
  h.log = plan.log;
  h.heap = plan.heap;
  return h;
}

// ---- file helpers ---------------------------------------------------------------------------

std::string DirectoryOf(const std::string& path) {
  std::string dir = std::filesystem::path(path).parent_path().string();
  return dir.empty() ? "." : dir;
}

// Makes the directory entry of a file just linked or unlinked in `dir` durable.
absl::Status SyncDirectory(const std::string& dir, std::string_view name) {
  FdGuard fd(open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (fd.get() < 0) return ErrnoError(errno, name, absl::StrCat("cannot open directory ", dir));
  if (fsync(fd.get()) != 0) {
    return ErrnoError(errno, name, absl::StrCat("cannot fsync directory ", dir));
  }
  return absl::OkStatus();
}

// Creates `<path>.creating.XXXXXX`, locked and allocated to `size` bytes. On success the caller
// owns the returned fd and must unlink `*tmp_name` if it does not link it into place.
absl::StatusOr<int> CreateTempFile(const std::string& path, size_t size, bool sparse,
                                   std::string* tmp_name) {
  std::string tmpl = path + ".creating.XXXXXX";
  FdGuard fd(mkostemp(tmpl.data(), O_CLOEXEC));
  if (fd.get() < 0) return ErrnoError(errno, path, "cannot create the pool file");
  UnlinkGuard unlink_tmp(tmpl);
  // Locked before it has its final name, so no Open can get in between link() and Attach.
  RETURN_IF_ERROR(LockFile(fd.get(), path));
  if (ftruncate(fd.get(), static_cast<off_t>(size)) != 0) {
    return ErrnoError(errno, path, absl::StrFormat("cannot size the pool file to %d bytes", size));
  }
  // Allocates every block now (unless sparse), so that a store to the mapping can never SIGBUS
  // for lack of space later. posix_fallocate returns the error instead of setting errno.
  if (int err = sparse ? 0 : posix_fallocate(fd.get(), 0, static_cast<off_t>(size)); err != 0) {
    if (err == ENOSPC || err == EDQUOT) {
      return PoolError(
          absl::StatusCode::kResourceExhausted, path,
          absl::StrFormat("no space for a %d-byte pool: %s", size, std::strerror(err)));
    }
    return ErrnoError(err, path, "cannot allocate the pool file");
  }
  unlink_tmp.release();
  *tmp_name = std::move(tmpl);
  return fd.release();
}

}  // namespace

// ---- Create -------------------------------------------------------------------------------

absl::StatusOr<std::unique_ptr<Pool>> Pool::Create(const std::string& path, size_t size,
                                                   std::string_view layout,
                                                   const PoolOptions& options) {
  // 1. Check every argument before touching the file system.
  RETURN_IF_ERROR(CheckLayoutName(layout, path));
  ASSIGN_OR_RETURN(const size_t pool_size, CheckCreateSize(size, path));
  ASSIGN_OR_RETURN(const RegionPlan plan, PlanRegions(pool_size, options, path));
  RETURN_IF_ERROR(CheckPersistenceOptions(options, /*in_memory=*/false, path));
  struct stat st;
  if (lstat(path.c_str(), &st) == 0) {
    return PoolError(absl::StatusCode::kAlreadyExists, path, "file exists");
  }

  // 2. A locked, fully allocated temporary file in the same directory, mapped.
  std::string tmp_name;
  ASSIGN_OR_RETURN(int fd, CreateTempFile(path, pool_size, options.sparse, &tmp_name));
  UnlinkGuard unlink_tmp(tmp_name);
  std::unique_ptr<Pool> pool(new Pool);  // not attached: closed_ until Attach
  pool->closed_ = true;
  pool->fd_ = fd;
  pool->path_ = path;
  size_t reserve = FileReserve(options, pool_size);
  void* base = MapPool(fd, pool_size, &reserve);
  if (base == MAP_FAILED) return ErrnoError(errno, path, "cannot map the pool file");
  pool->base_ = static_cast<uint8_t*>(base);
  pool->size_ = pool_size;
  pool->capacity_ = reserve;
  pool->owns_mapping_ = true;
  RETURN_IF_ERROR(pool->ChooseBackend(options));

  // 3. The header. The file is fresh, so the state page and regions are zero already.
  WriteNewHeader(pool->base_, pool->persister_, MakeHeader(pool_size, layout, plan));

  // 4. The whole file durable (data and size), then published under its name. link() fails
  //    with EEXIST rather than replace a file a racing creator put there first.
  if (msync(pool->base_, pool_size, MS_SYNC) != 0 || fsync(fd) != 0) {
    return ErrnoError(errno, path, "cannot sync the new pool file");
  }
  if (link(tmp_name.c_str(), path.c_str()) != 0) {
    if (errno == EEXIST) return PoolError(absl::StatusCode::kAlreadyExists, path, "file exists");
    return ErrnoError(errno, path, "cannot link the new pool file into place");
  }
  UnlinkGuard unlink_final(path);
  // The pool now has both names; drop the temporary one, then make the directory durable so
  // that after a crash `path` names the complete pool (or nothing).
  unlink_tmp.release();
  if (unlink(tmp_name.c_str()) != 0) {
    return ErrnoError(errno, path, absl::StrCat("cannot remove ", tmp_name));
  }
  RETURN_IF_ERROR(SyncDirectory(DirectoryOf(path), path));

  // 5. Open it like any existing pool.
  ASSIGN_OR_RETURN(auto attached, Attach(std::move(pool), layout, options));
  unlink_final.release();
  attached->was_clean_shutdown_ = true;  // a new pool: there is nothing to recover
  return attached;
}

absl::StatusOr<std::unique_ptr<Pool>> Pool::CreateInMemory(void* base, size_t size,
                                                           std::string_view layout,
                                                           const PoolOptions& options,
                                                           std::string_view name) {
  // 1. Arguments (no rounding: the memory is the caller's).
  RETURN_IF_ERROR(CheckLayoutName(layout, name));
  RETURN_IF_ERROR(CheckBase(base, name));
  if (size < kMinPoolSize) {
    return InvalidArgument(
        name, absl::StrFormat("size too small: %d bytes, the minimum is %d", size, kMinPoolSize));
  }
  if (size % kPage != 0) {
    return InvalidArgument(name, absl::StrFormat("size %d is not a 4 KiB multiple", size));
  }
  if (options.max_size % kPage != 0) {
    return InvalidArgument(
        name, absl::StrFormat("max_size %d is not a 4 KiB multiple", options.max_size));
  }
  ASSIGN_OR_RETURN(const RegionPlan plan, PlanRegions(size, options, name));
  RETURN_IF_ERROR(CheckPersistenceOptions(options, /*in_memory=*/true, name));
  std::unique_ptr<Pool> pool(new Pool);
  pool->closed_ = true;
  pool->base_ = static_cast<uint8_t*>(base);
  pool->size_ = size;
  pool->capacity_ = std::max(size, options.max_size);
  pool->path_ = std::string(name);
  RETURN_IF_ERROR(pool->ChooseBackend(options));

  // 2. Zero what is not zero (an old pool's header first), then the header: the same image as
  //    a file Create, all through the persister.
  ZeroImage(pool->base_, size, pool->persister_);
  WriteNewHeader(pool->base_, pool->persister_, MakeHeader(size, layout, plan));
  ASSIGN_OR_RETURN(auto attached, Attach(std::move(pool), layout, options));
  attached->was_clean_shutdown_ = true;  // a new pool: there is nothing to recover
  return attached;
}

}  // namespace pmrt
