// Pool: creating, validating, mapping and closing pool files and in-memory pools.
//
// The on-media format, the order Create writes it in and the order Open checks it in are
// described in docs/format.md; the step comments below refer to it.
#include "epoch/pool.h"

#include <fcntl.h>
#include <libpmem.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/crc32c.h"
#include "base/status_macros.h"

namespace pmrt {
namespace {

constexpr size_t kPage = 4096;
constexpr size_t kMinHeapSize = 64 * 1024;
constexpr size_t kMinLogSize = 256 * 1024;
constexpr size_t kChecksumOffset = offsetof(PoolHeader, checksum);

// Persistence sites of the pool layer, in the order a Create + Close run reaches them.
constexpr Site kCreateInvalidate{"pool.create.invalidate"};
constexpr Site kCreateInvalidateFence{"pool.create.invalidate.fence"};
constexpr Site kCreateZero{"pool.create.zero"};
constexpr Site kCreateZeroFence{"pool.create.zero.fence"};
constexpr Site kCreateHeader{"pool.create.header"};  // fenced by Attach's kOpenDirtyFence
constexpr Site kOpenDirty{"pool.open.dirty"};
constexpr Site kOpenDirtyFence{"pool.open.dirty.fence"};
constexpr Site kOpenCount{"pool.open.count"};
constexpr Site kOpenCountFence{"pool.open.count.fence"};
constexpr Site kRootBind{"pool.root.bind"};
constexpr Site kRootBindFence{"pool.root.bind.fence"};
constexpr Site kCloseClean{"pool.close.clean"};
constexpr Site kCloseCleanFence{"pool.close.clean.fence"};
constexpr Site kGrowZero{"pool.grow.zero"};  // in-memory pools only: a file grows with zeroes
constexpr Site kGrowZeroFence{"pool.grow.zero.fence"};
constexpr Site kGrowCommit{"pool.grow.commit"};
constexpr Site kGrowCommitFence{"pool.grow.commit.fence"};

// Address space a file pool reserves for growth when PoolOptions::max_size is 0: 4x its size,
// at least this much.
constexpr size_t kDefaultReserve = size_t{16} << 30;

// The first pool attached that is still open (Pool::Default). Set by Attach with a CAS from
// null and cleared by Close with a CAS from itself; seq_cst, these are rare.
std::atomic<Pool*> g_default_pool{nullptr};

// ---- errors -------------------------------------------------------------------------------

// This Abseil is built with its own string_view (ABSL_OPTION_USE_STD_STRING_VIEW 0), which
// StrCat takes; std::string_view needs a conversion.
absl::string_view Av(std::string_view s) { return absl::string_view(s.data(), s.size()); }

absl::Status PoolError(absl::StatusCode code, std::string_view name, std::string_view problem) {
  return absl::Status(code, absl::StrCat(Av(name), ": ", Av(problem)));
}
absl::Status DataLoss(std::string_view name, std::string_view problem) {
  return PoolError(absl::StatusCode::kDataLoss, name, problem);
}
absl::Status InvalidArgument(std::string_view name, std::string_view problem) {
  return PoolError(absl::StatusCode::kInvalidArgument, name, problem);
}

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

// `what` failed with `err`: a message naming the path, the operation and the system's reason.
absl::Status ErrnoError(int err, std::string_view name, std::string_view what) {
  return PoolError(CodeForErrno(err), name, absl::StrCat(Av(what), ": ", std::strerror(err)));
}

// ---- small helpers ------------------------------------------------------------------------

constexpr size_t RoundUpToPage(size_t v) { return (v + kPage - 1) & ~(kPage - 1); }

bool IsZero(const uint8_t* p, size_t n) {
  return n == 0 || (p[0] == 0 && std::memcmp(p, p + 1, n - 1) == 0);
}

uint32_t HeaderChecksum(const PoolHeader& h) { return Crc32c(&h, kChecksumOffset); }

std::string_view LayoutOf(const PoolHeader& h) {
  return std::string_view(h.layout, strnlen(h.layout, sizeof(h.layout)));
}

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

// Maps [off, off + len) of the file at `at` (MAP_FIXED), shared and writable. MAP_SYNC first,
// so that on a DAX file system cache flushes (the pmem backend) are enough for durability
// without msync; other file systems refuse MAP_SYNC and get a plain shared mapping.
void* MapSharedAt(int fd, void* at, size_t len, off_t off) {
  void* p =
      mmap(at, len, PROT_READ | PROT_WRITE, MAP_SHARED_VALIDATE | MAP_SYNC | MAP_FIXED, fd, off);
  if (p != MAP_FAILED) return p;
  return mmap(at, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd, off);
}

// Reserves *reserve bytes of address space (at least len; inaccessible, no memory committed)
// and maps the file's first len bytes at its start, so that a growth can map more of the file
// right after them. When the reservation is refused (RLIMIT_AS), halves it until it fits, down
// to len. Sets *reserve to what was reserved. `copy_on_write`: a private mapping (writes never
// reach the file; PoolOptions::private_mapping).
void* MapPool(int fd, size_t len, size_t* reserve, bool copy_on_write = false) {
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

// The address space a file pool reserves. By default max(4 x size, 16 GiB), but under an
// address-space limit (RLIMIT_AS) at most a quarter of it: the reservation, the heap's
// per-chunk arrays sized by it and the rest of the process (threads, buffers, replies) all count
// against the limit, and a reservation that took all of it would leave the process to die of
// its first large allocation.
size_t FileReserve(const PoolOptions& o, size_t size) {
  if (o.max_size != 0) return std::max(o.max_size, size);
  size_t want = std::max(4 * size, kDefaultReserve);
  rlimit as;
  if (getrlimit(RLIMIT_AS, &as) == 0 && as.rlim_cur != RLIM_INFINITY) {
    want = std::min<size_t>(want, RoundUpToPage(static_cast<size_t>(as.rlim_cur) / 4));
  }
  return std::max(want, size);
}

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

// The backend the caller asked for: options.backend, else (file pools only) PMRT_BACKEND.
// Nullopt: none asked for; ChooseBackend decides.
absl::StatusOr<std::optional<BackendKind>> RequestedBackend(const PoolOptions& o, bool in_memory,
                                                            std::string_view name) {
  std::optional<BackendKind> kind = o.backend;
  const char* env = std::getenv("PMRT_BACKEND");
  if (!kind && !in_memory && env != nullptr && *env != '\0') {
    auto parsed = ParseBackend(env);
    if (!parsed.ok()) {
      return InvalidArgument(name, absl::StrCat("PMRT_BACKEND: ", parsed.status().message()));
    }
    kind = *parsed;
  }
  if (kind == BackendKind::kSim) {
    if (!in_memory) {
      return InvalidArgument(name, "the sim backend is only for in-memory pools");
    }
    if (o.sim == nullptr) return InvalidArgument(name, "the sim backend needs PoolOptions::sim");
  }
  return kind;
}

// How the pmem backend is to write records: options.record_writes, else PMRT_RECORD_WRITES,
// else the processor's faster way (epoch/persist.h, DefaultRecordWrites).
absl::StatusOr<RecordWrites> RequestedRecordWrites(const PoolOptions& o, std::string_view name) {
  if (o.record_writes) return *o.record_writes;
  const char* env = std::getenv("PMRT_RECORD_WRITES");
  if (env == nullptr || *env == '\0') return DefaultRecordWrites();
  auto parsed = ParseRecordWrites(env);
  if (!parsed.ok()) {
    return InvalidArgument(name, absl::StrCat("PMRT_RECORD_WRITES: ", parsed.status().message()));
  }
  return *parsed;
}

// Both persistence choices, checked before anything is touched.
// `opening_file`: Pool::Open, the one open that may map a file private.
absl::Status CheckPersistenceOptions(const PoolOptions& o, bool in_memory, std::string_view name,
                                     bool opening_file = false) {
  if (o.private_mapping && !opening_file) {
    return InvalidArgument(name, "private_mapping applies to opening a pool file only");
  }
  RETURN_IF_ERROR(RequestedBackend(o, in_memory, name).status());
  return RequestedRecordWrites(o, name).status();
}

// Caller memory for an in-memory pool: non-null and page aligned (regions are page aligned
// offsets, so objects in them are aligned only if the base is).
absl::Status CheckBase(const void* base, std::string_view name) {
  if (base == nullptr) return InvalidArgument(name, "pool memory is null");
  if (reinterpret_cast<uintptr_t>(base) % kPage != 0) {
    return InvalidArgument(name, "pool memory is not 4 KiB aligned");
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

absl::Status LockFile(int fd, std::string_view name) {
  if (flock(fd, LOCK_EX | LOCK_NB) == 0) return absl::OkStatus();
  if (errno == EWOULDBLOCK) {
    return PoolError(absl::StatusCode::kFailedPrecondition, name,
                     absl::StrCat("pool is in use by another process or Pool: ", Av(name)));
  }
  return ErrnoError(errno, name, "cannot lock the pool file");
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

// ---- backend --------------------------------------------------------------------------------

absl::Status Pool::ChooseBackend(const PoolOptions& options) {
  const bool in_memory = fd_ < 0;
  ASSIGN_OR_RETURN(std::optional<BackendKind> kind, RequestedBackend(options, in_memory, path_));
  if (!kind) {
    // In-memory pools have nothing to msync; caller memory is treated as in the persistence
    // domain unless the caller says otherwise.
    if (in_memory) {
      kind = BackendKind::kEadr;
    } else {
      kind = pmem_is_pmem(base_, size()) ? BackendKind::kPmem : BackendKind::kMsync;
    }
  }
  writing_backend_ = *kind;
  if (private_) kind = BackendKind::kEadr;  // nothing reaches the file: stores only
  if (*kind == BackendKind::kSim) {
    const auto w = reinterpret_cast<uintptr_t>(options.sim->working());
    const auto b = reinterpret_cast<uintptr_t>(base_);
    if (b < w || capacity_ > options.sim->size() || b - w > options.sim->size() - capacity_) {
      return InvalidArgument(path_, "the pool's memory is not inside the simulator's working copy");
    }
  }
  ASSIGN_OR_RETURN(const RecordWrites writes, RequestedRecordWrites(options, path_));
  persister_ = Persister(*kind, *kind == BackendKind::kSim ? options.sim : nullptr, writes);
  health_->Bind(path_, base_);
  persister_.set_health(health_.get());
  return absl::OkStatus();
}

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

// ---- growth (docs/format.md, "Growth") ------------------------------------------------------

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
