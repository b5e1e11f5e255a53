// Pool::Open and Pool::OpenInMemory: validation and the refusal paths (docs/format.md, "Open:
// validation order"), then Attach, the common tail of every open and create, and the open's first
// writes (docs/format.md, "Attach"; the step comments below refer to both).
//
// Invariants: nothing is written before every check has passed, so a refused pool is left
// untouched; a file pool's header is validated from a pread copy before anything is mapped, and
// again once mapped. Each refusal is the most specific status naming the pool: kNotFound or
// kPermissionDenied for a file that cannot be opened for writing, kDataLoss for a damaged or
// foreign one, kInvalidArgument for the wrong layout, kFailedPrecondition for a newer format or
// a pool in use.
//
// Persistence order (WriteAttach): clean_shutdown = 0 durably before anything else is written,
// then open_count + 1 on its own line and fence.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <mutex>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/status_macros.h"
#include "epoch/internal/pool_internal.h"
#include "epoch/pool.h"

namespace pmrt {

using epoch_internal::Av;
using epoch_internal::CheckBase;
using epoch_internal::CheckPersistenceOptions;
using epoch_internal::DataLoss;
using epoch_internal::ErrnoError;
using epoch_internal::FdGuard;
using epoch_internal::FileReserve;
using epoch_internal::g_default_pool;
using epoch_internal::HeaderChecksum;
using epoch_internal::InvalidArgument;
using epoch_internal::IsZero;
using epoch_internal::kChecksumOffset;
using epoch_internal::kOpenCount;
using epoch_internal::kOpenCountFence;
using epoch_internal::kOpenDirty;
using epoch_internal::kOpenDirtyFence;
using epoch_internal::kPage;
using epoch_internal::LayoutOf;
using epoch_internal::LockFile;
using epoch_internal::MapPool;
using epoch_internal::PoolError;

namespace {

// Reads exactly `len` bytes at `off`, retrying short reads and EINTR.
absl::Status PreadFull(int fd, void* buf, size_t len, off_t off, std::string_view name) {
  auto* p = static_cast<uint8_t*>(buf);
  while (len > 0) {
    ssize_t n = pread(fd, p, len, off);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return ErrnoError(errno, name, "cannot read the pool header");
    if (n == 0) return DataLoss(name, "truncated while reading the pool header");
    p += n;
    off += n;
    len -= static_cast<size_t>(n);
  }
  return absl::OkStatus();
}

// ---- validation (docs/format.md, "Open: validation order") ---------------------------------

// The checks a pool of `actual_size` bytes must pass before its header can even be read.
absl::Status CheckHeaderFits(uint64_t actual_size, std::string_view name) {
  if (actual_size == 0) return DataLoss(name, "empty file, not a pmrt pool");
  if (actual_size < kPoolHeaderSize + kPoolStateSize) {
    return DataLoss(name, absl::StrFormat("truncated: %d bytes, shorter than the %d-byte pool "
                                          "header and state",
                                          actual_size, kPoolHeaderSize + kPoolStateSize));
  }
  return absl::OkStatus();
}

absl::Status CheckRegions(const PoolHeader& h, std::string_view name) {
  const std::pair<const char*, RegionDesc> regions[] = {
      {"root", h.root}, {"epoch", h.epoch}, {"log", h.log}, {"heap", h.heap}};
  uint64_t prev_end = kPoolHeaderSize + kPoolStateSize;
  for (const auto& [region, r] : regions) {
    auto bad = [&, region = region, r = r](std::string_view why) {
      return DataLoss(name, absl::StrFormat("corrupt header: %s region [%d, +%d) %s", region,
                                            r.offset, r.size, why));
    };
    if (r.offset % kPage != 0 || r.size % kPage != 0) return bad("is not 4 KiB aligned");
    if (r.size == 0) return bad("is empty");
    if (r.offset < prev_end) return bad("overlaps the region before it");
    if (r.offset > h.pool_size || r.size > h.pool_size - r.offset) {
      return bad(absl::StrFormat("ends past the end of the pool (%d)", h.pool_size));
    }
    prev_end = r.offset + r.size;
  }
  if (prev_end != h.pool_size) {
    return DataLoss(name, absl::StrFormat("corrupt header: heap region ends at %d, not at the "
                                          "end of the pool (%d)",
                                          prev_end, h.pool_size));
  }
  return absl::OkStatus();
}

// Validates a copy of a pool header and the layout the caller expects. Reads nothing but `h`;
// shared by file and in-memory opens.
absl::Status ValidateHeader(const PoolHeader& h, std::string_view layout, std::string_view name) {
  // 1. Magic: is this a pmrt pool at all?
  if (std::memcmp(h.magic, kPoolMagic, sizeof(kPoolMagic)) != 0) {
    return DataLoss(name, "not a pmrt pool (bad magic)");
  }
  // 2. Major version, before the checksum: magic/major/minor are at fixed offsets in every
  //    format version, but a newer major may move or redefine the checksum.
  if (h.major > kFormatMajor) {
    return PoolError(absl::StatusCode::kFailedPrecondition, name,
                     absl::StrFormat("pool format version %d.%d is newer than this build "
                                     "supports (%d.%d)",
                                     h.major, h.minor, kFormatMajor, kFormatMinor));
  }
  // 3. Checksum over every byte before it, then the padding it does not cover.
  const uint32_t crc = HeaderChecksum(h);
  if (crc != h.checksum) {
    return DataLoss(name, absl::StrFormat("corrupt header: checksum at offset %d is 0x%08x, but "
                                          "the CRC32C of the header is 0x%08x",
                                          kChecksumOffset, h.checksum, crc));
  }
  if (h.checksum_pad != 0) {
    return DataLoss(name, absl::StrFormat("corrupt header: checksum_pad at offset %d is not zero",
                                          offsetof(PoolHeader, checksum_pad)));
  }
  // 4. Fields whose values this version defines.
  if (h.major == 0) return DataLoss(name, "corrupt header: format major version 0");
  if (h.header_size != kPoolHeaderSize) {
    return DataLoss(name, absl::StrFormat("corrupt header: header_size %d, expected %d",
                                          h.header_size, kPoolHeaderSize));
  }
  const std::string_view stored = LayoutOf(h);
  if (stored.size() > kLayoutNameMax || stored.empty() ||
      !IsZero(reinterpret_cast<const uint8_t*>(h.layout) + stored.size(),
              sizeof(h.layout) - stored.size())) {
    return DataLoss(name, "corrupt header: layout name is empty or not NUL-terminated and padded");
  }
  // 5. The caller's expectations.
  if (stored != layout) {
    return InvalidArgument(
        name, absl::StrCat("pool layout is '", Av(stored), "', expected '", Av(layout), "'"));
  }
  // 6. The header's size, then the regions inside it (the pool's actual size, which growth may
  //    have raised, is checked against the file by PoolSizeOf).
  if (h.pool_size % kPage != 0 || h.pool_size < Pool::kMinPoolSize) {
    return DataLoss(name, absl::StrFormat("corrupt header: pool_size %d is not a 4 KiB multiple "
                                          "of at least %d",
                                          h.pool_size, Pool::kMinPoolSize));
  }
  return CheckRegions(h, name);
}

// The pool's size: the header's pool_size, or the state page's grown_size once the pool has
// grown. `available` bytes are there (the file's length, or the caller's memory); more is fine
// (a growth whose commit did not happen leaves the file longer, and the next growth reuses the
// tail), less is a truncated pool.
absl::StatusOr<uint64_t> PoolSizeOf(const PoolHeader& h, const PoolState& s, uint64_t available,
                                    std::string_view name) {
  const uint64_t grown = s.grown_size.value.load(std::memory_order_relaxed);
  if (grown != 0 && (grown <= h.pool_size || grown % kPage != 0)) {
    return DataLoss(name, absl::StrFormat("corrupt state: grown_size %d is not a 4 KiB multiple "
                                          "larger than the header's pool_size %d",
                                          grown, h.pool_size));
  }
  const uint64_t size = grown != 0 ? grown : h.pool_size;
  if (available < size) {
    return DataLoss(
        name, absl::StrFormat("truncated: %d bytes, but the %s %d", available,
                              grown != 0 ? "pool has grown to" : "header says the pool is", size));
  }
  return size;
}

// Validates the state page (not checksummed: its words are updated in place).
//
// The state words are atomics so that each 8-byte store is single-copy atomic (and so
// failure-atomic on media); Open, Close and this check are never concurrent with other calls on
// the pool and publish nothing but the word itself, hence relaxed order throughout.
absl::Status ValidateState(const PoolState& s, const PoolHeader& h, std::string_view name) {
  const uint64_t clean = s.clean_shutdown.value.load(std::memory_order_relaxed);
  if (clean > 1) {
    return DataLoss(
        name, absl::StrFormat("corrupt state: clean_shutdown is %d (0 or 1 expected)", clean));
  }
  const uint64_t root_size = s.root_type_size.value.load(std::memory_order_relaxed);
  if (root_size > h.root.size) {
    return DataLoss(name, absl::StrFormat("corrupt state: root_type_size %d is larger than the "
                                          "root region (%d)",
                                          root_size, h.root.size));
  }
  return absl::OkStatus();
}

// Opens an existing pool file for reading and writing and locks it. Returns the fd and size.
absl::StatusOr<std::pair<int, uint64_t>> OpenPoolFile(const std::string& path) {
  FdGuard fd(open(path.c_str(), O_RDWR | O_CLOEXEC));
  if (fd.get() < 0) {
    const int err = errno;
    if (err == ENOENT) return PoolError(absl::StatusCode::kNotFound, path, "no such pool file");
    if (err == EISDIR) {
      return PoolError(absl::StatusCode::kFailedPrecondition, path,
                       "is a directory, not a pool file");
    }
    if (err == EACCES || err == EPERM || err == EROFS) {
      return PoolError(absl::StatusCode::kPermissionDenied, path,
                       absl::StrCat("cannot open the pool for writing (a pool must be "
                                    "writable): ",
                                    std::strerror(err)));
    }
    return ErrnoError(err, path, "cannot open the pool file");
  }
  struct stat st;
  if (fstat(fd.get(), &st) != 0) return ErrnoError(errno, path, "cannot stat the pool file");
  if (!S_ISREG(st.st_mode)) {
    return PoolError(absl::StatusCode::kFailedPrecondition, path, "not a regular file");
  }
  RETURN_IF_ERROR(LockFile(fd.get(), path));
  return std::make_pair(fd.release(), static_cast<uint64_t>(st.st_size));
}

}  // namespace

// ---- Open ---------------------------------------------------------------------------------

absl::StatusOr<std::unique_ptr<Pool>> Pool::Open(const std::string& path, std::string_view layout,
                                                 const PoolOptions& options) {
  // 1. Open and lock; validate the header from a pread copy before mapping anything.
  RETURN_IF_ERROR(
      CheckPersistenceOptions(options, /*in_memory=*/false, path, /*opening_file=*/true));
  ASSIGN_OR_RETURN(auto opened, OpenPoolFile(path));
  FdGuard fd(opened.first);
  const uint64_t file_size = opened.second;
  RETURN_IF_ERROR(CheckHeaderFits(file_size, path));
  PoolHeader h;
  RETURN_IF_ERROR(PreadFull(fd.get(), &h, sizeof(h), 0, path));
  RETURN_IF_ERROR(ValidateHeader(h, layout, path));
  PoolState state;
  RETURN_IF_ERROR(PreadFull(fd.get(), &state, sizeof(state), kPoolHeaderSize, path));
  ASSIGN_OR_RETURN(const uint64_t pool_size, PoolSizeOf(h, state, file_size, path));

  // 2. Map and attach (Attach validates the mapped header and state before writing).
  size_t reserve = FileReserve(options, pool_size);
  void* base = MapPool(fd.get(), pool_size, &reserve, options.private_mapping);
  if (base == MAP_FAILED) return ErrnoError(errno, path, "cannot map the pool file");
  std::unique_ptr<Pool> pool(new Pool);
  pool->closed_ = true;
  pool->private_ = options.private_mapping;
  pool->fd_ = fd.release();
  pool->path_ = path;
  pool->base_ = static_cast<uint8_t*>(base);
  pool->size_ = pool_size;
  pool->capacity_ = reserve;
  pool->owns_mapping_ = true;
  return Attach(std::move(pool), layout, options);
}

absl::StatusOr<std::unique_ptr<Pool>> Pool::OpenInMemory(void* base, size_t size,
                                                         std::string_view layout,
                                                         const PoolOptions& options,
                                                         std::string_view name) {
  RETURN_IF_ERROR(CheckPersistenceOptions(options, /*in_memory=*/true, name));
  RETURN_IF_ERROR(CheckBase(base, name));
  RETURN_IF_ERROR(CheckHeaderFits(size, name));
  std::unique_ptr<Pool> pool(new Pool);
  pool->closed_ = true;
  pool->base_ = static_cast<uint8_t*>(base);
  pool->size_ = size;  // the memory's size until Attach reads the pool's
  pool->capacity_ = size;
  pool->path_ = std::string(name);
  return Attach(std::move(pool), layout, options);
}

// Common tail of every open: validate what is mapped, choose the backend, then the first writes.
absl::StatusOr<std::unique_ptr<Pool>> Pool::Attach(std::unique_ptr<Pool> pool,
                                                   std::string_view layout,
                                                   const PoolOptions& options) {
  // 1. Validate a copy of the mapped header (a file pool's was checked by pread already; this
  //    also catches a change between that read and the mapping) and the state page.
  PoolHeader h;
  std::memcpy(&h, pool->base_, sizeof(h));
  RETURN_IF_ERROR(ValidateHeader(h, layout, pool->path_));
  ASSIGN_OR_RETURN(const uint64_t pool_size,
                   PoolSizeOf(h, pool->state(), pool->size(), pool->path_));
  RETURN_IF_ERROR(ValidateState(pool->state(), h, pool->path_));
  pool->size_ = pool_size;
  pool->sparse_ = options.sparse;
  pool->grow_by_ = options.grow_by;
  RETURN_IF_ERROR(pool->ChooseBackend(options));

  pool->was_clean_shutdown_ =
      pool->state().clean_shutdown.value.load(std::memory_order_relaxed) == 1;
  pool->closed_ = false;
  if (!options.defer_attach) pool->BeginWrites();

  Pool* expected = nullptr;
  g_default_pool.compare_exchange_strong(expected, pool.get());
  return pool;
}

void Pool::BeginWrites() {
  std::call_once(begin_writes_, [this] { WriteAttach(); });
}

void Pool::WriteAttach() {
  // 2. clean_shutdown = 0, durably, before anything else is written: from here until Close
  //    persists 1, any crash is seen by the next Open as an unclean shutdown. A crash before
  //    this fence leaves the previous value (and nothing else of ours has been written).
  PoolState& s = state();
  s.clean_shutdown.value.store(0, std::memory_order_relaxed);
  persister_.Persist(kOpenDirty, kOpenDirtyFence, &s.clean_shutdown, kCacheLine);
  // 3. open_count + 1: its own line and fence; a crash before the fence loses only the count.
  s.open_count.value.fetch_add(1, std::memory_order_relaxed);
  persister_.Persist(kOpenCount, kOpenCountFence, &s.open_count, kCacheLine);
  writes_begun_.store(true, std::memory_order_release);
}

}  // namespace pmrt
