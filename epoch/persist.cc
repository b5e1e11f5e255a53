#include "epoch/persist.h"

#include <libpmem.h>
#if defined(__x86_64__)
#include <cpuid.h>
#include <immintrin.h>
#endif
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace pmrt {

std::string_view BackendName(BackendKind kind) {
  switch (kind) {
    case BackendKind::kPmem:
      return "pmem";
    case BackendKind::kEadr:
      return "eadr";
    case BackendKind::kMsync:
      return "msync";
    case BackendKind::kSim:
      return "sim";
  }
  return "unknown";
}

absl::StatusOr<BackendKind> ParseBackend(std::string_view name) {
  for (int i = 0; i < kNumBackends; ++i) {
    auto kind = static_cast<BackendKind>(i);
    if (name == BackendName(kind)) return kind;
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown persistence backend '", std::string(name),
                                                 "' (expected pmem, eadr, msync)"));
}

std::string_view RecordWritesName(RecordWrites writes) {
  return writes == RecordWrites::kStream ? "stream" : "flush";
}

absl::StatusOr<RecordWrites> ParseRecordWrites(std::string_view name) {
  for (const RecordWrites w : {RecordWrites::kStream, RecordWrites::kFlush}) {
    if (name == RecordWritesName(w)) return w;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown record write mode '", std::string(name), "' (expected stream, flush)"));
}

RecordWrites RecordWritesForVendor(std::string_view vendor) {
  return vendor == "AuthenticAMD" || vendor == "HygonGenuine" ? RecordWrites::kStream
                                                              : RecordWrites::kFlush;
}

RecordWrites DefaultRecordWrites() {
#if defined(__x86_64__)
  static const RecordWrites chosen = [] {
    unsigned max_leaf = 0, vendor[3] = {0, 0, 0};
    if (__get_cpuid(0, &max_leaf, &vendor[0], &vendor[2], &vendor[1]) == 0) {
      return RecordWrites::kFlush;
    }
    char name[12];
    std::memcpy(name, vendor, 12);  // EBX, EDX, ECX: "AuthenticAMD", "GenuineIntel", ...
    return RecordWritesForVendor(std::string_view(name, 12));
  }();
  return chosen;
#else
  return RecordWrites::kFlush;
#endif
}

PersistCounts& PersistCounts::operator+=(const PersistCounts& o) {
  flushes += o.flushes;
  lines_flushed += o.lines_flushed;
  bytes_flushed += o.bytes_flushed;
  fences += o.fences;
  batch_flushes += o.batch_flushes;
  return *this;
}

PersistCounts PersistCounts::operator-(const PersistCounts& o) const {
  PersistCounts r;
  r.flushes = flushes - o.flushes;
  r.lines_flushed = lines_flushed - o.lines_flushed;
  r.bytes_flushed = bytes_flushed - o.bytes_flushed;
  r.fences = fences - o.fences;
  r.batch_flushes = batch_flushes - o.batch_flushes;
  return r;
}

namespace epoch_internal {
namespace {
uint32_t SiteFromEnv() {
  const char* name = std::getenv("PMRT_DISABLE_SITE");
  if (name == nullptr || *name == '\0') return 0;
  // Site's constructor is constexpr but works at run time on any C string.
  return Site(name).id;
}
}  // namespace
std::atomic<uint32_t> g_disabled_site{SiteFromEnv()};
}  // namespace epoch_internal

namespace mutation {
void Disable(uint32_t site_id) {
  epoch_internal::g_disabled_site.store(site_id, std::memory_order_relaxed);
}
void Disable(const Site& site) { Disable(site.id); }
void EnableAll() { Disable(uint32_t{0}); }
}  // namespace mutation

namespace epoch_internal {
namespace {

// Registry of per-thread counter blocks. A thread registers on its first count; at exit its
// totals fold into `retired` so nothing counted is ever lost.
struct CounterRegistry {
  std::mutex mu;
  std::vector<ThreadCounters*> live;
  PersistCounts retired[kNumBackends];
};
CounterRegistry& Registry() {
  static auto* r = new CounterRegistry;  // never destroyed: threads may exit after main
  return *r;
}

struct ThreadCounterSlot {
  ThreadCounters counters;
  ThreadCounterSlot() {
    std::lock_guard<std::mutex> l(Registry().mu);
    Registry().live.push_back(&counters);
  }
  ~ThreadCounterSlot() {
    auto& r = Registry();
    std::lock_guard<std::mutex> l(r.mu);
    for (int i = 0; i < kNumBackends; ++i) {
      r.retired[i] += counters.Read(static_cast<BackendKind>(i));
    }
    std::erase(r.live, &counters);
    tls_counters = nullptr;  // a later use at this thread's exit takes the slow path again
  }
};

// Page ranges recorded by kMsync flushes of this thread, msynced by its next fence.
struct MsyncPending {
  std::vector<std::pair<uintptr_t, uintptr_t>> ranges;  // [begin, end), page aligned
};
thread_local MsyncPending tls_msync;

uintptr_t PageSize() {
  static const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  return page;
}

}  // namespace

PersistCounts ThreadCounters::Read(BackendKind kind) const {
  const auto& a = v[static_cast<int>(kind)];
  PersistCounts c;
  c.flushes = a[kFlushes].load(std::memory_order_relaxed);
  c.lines_flushed = a[kLinesFlushed].load(std::memory_order_relaxed);
  c.bytes_flushed = a[kBytesFlushed].load(std::memory_order_relaxed);
  c.fences = a[kFences].load(std::memory_order_relaxed);
  c.batch_flushes = a[kBatchFlushes].load(std::memory_order_relaxed);
  return c;
}

constinit thread_local ThreadCounters* tls_counters = nullptr;

ThreadCounters& LocalCountersSlow() {
  thread_local ThreadCounterSlot slot;
  tls_counters = &slot.counters;
  return slot.counters;
}

void PmemFlush(const void* addr, size_t len) { pmem_flush(addr, len); }

bool InlineClwb() {
#if defined(__x86_64__)
  static const bool clwb = [] {
    unsigned a = 0, b = 0, c = 0, d = 0;
    if (__get_cpuid_count(7, 0, &a, &b, &c, &d) == 0 || (b & (1u << 24)) == 0) return false;
    for (const char* var : {"PMEM_NO_CLWB", "PMEM_NO_FLUSH"}) {
      const char* v = std::getenv(var);
      if (v != nullptr && std::strcmp(v, "1") == 0) return false;
    }
    return true;
  }();
  return clwb;
#else
  return false;
#endif
}
#if defined(__x86_64__)
// (PmemDrain is inline in persist.h.)
// Non-temporal stores (movntdq, 16 bytes each, with movnti for an 8-byte head or tail that is
// not 16-byte aligned): the bytes go to memory through the write-combining buffers, not the
// cache; the next sfence waits for them. Half as many stores as 8-byte movnti, so the store
// buffer that the fence drains holds half as many entries. A range that is not 8-byte aligned
// and sized takes memcpy + pmem_flush.
void PmemCopyNoDrain(void* dst, const void* src, size_t len) {
  if (((reinterpret_cast<uintptr_t>(dst) | len) & 7) != 0) {
    std::memcpy(dst, src, len);
    pmem_flush(dst, len);
    return;
  }
  auto* d = static_cast<uint8_t*>(dst);
  const auto* s = static_cast<const uint8_t*>(src);
  const uint8_t* const end = d + len;
  auto stream8 = [&] {
    long long v;
    std::memcpy(&v, s, 8);
    _mm_stream_si64(reinterpret_cast<long long*>(d), v);
    d += 8;
    s += 8;
  };
  if ((reinterpret_cast<uintptr_t>(d) & 15) != 0 && d < end) stream8();
  for (; end - d >= 16; d += 16, s += 16) {
    _mm_stream_si128(reinterpret_cast<__m128i*>(d),
                     _mm_loadu_si128(reinterpret_cast<const __m128i*>(s)));
  }
  if (d < end) stream8();
}
#else
void PmemDrain() { pmem_drain(); }
void PmemCopyNoDrain(void* dst, const void* src, size_t len) {
  std::memcpy(dst, src, len);
  pmem_flush(dst, len);
}
#endif

void MsyncRecord(const void* addr, size_t len) {
  if (len == 0) return;
  const uintptr_t page = PageSize();
  const auto a = reinterpret_cast<uintptr_t>(addr);
  uintptr_t begin = a & ~(page - 1);
  uintptr_t end = (a + len + page - 1) & ~(page - 1);
  auto& v = tls_msync.ranges;
  // Coalesce with the previous range when adjacent or overlapping (the common sequential case).
  if (!v.empty() && begin <= v.back().second && end >= v.back().first) {
    v.back().first = std::min(v.back().first, begin);
    v.back().second = std::max(v.back().second, end);
    return;
  }
  v.emplace_back(begin, end);
}

// InjectMsyncFailures' window and the msync calls made so far.
static std::atomic<uint64_t> g_msync_calls{0};
static std::atomic<uint64_t> g_fail_from{0}, g_fail_count{0};
static std::atomic<int> g_fail_errno{0};

// The error an msync of [b, e) gets: an injected one, or msync's own.
static int Msync(uintptr_t b, uintptr_t e) {
  const uint64_t n = g_msync_calls.fetch_add(1, std::memory_order_relaxed) + 1;
  const uint64_t from = g_fail_from.load(std::memory_order_relaxed);
  if (from != 0 && n >= from && n - from < g_fail_count.load(std::memory_order_relaxed)) {
    return g_fail_errno.load(std::memory_order_relaxed);
  }
  return msync(reinterpret_cast<void*>(b), e - b, MS_SYNC) == 0 ? 0 : errno;
}

void MsyncFence(PoolHealth* health) {
  auto& v = tls_msync.ranges;
  if (v.empty()) return;
  std::sort(v.begin(), v.end());
  // Ranges separated by a small gap become one msync: one system call over a few clean pages
  // costs far less than one call per dirty page (4.6 ms vs 1.2 us for scattered tmpfs pages,
  // bench/epoch_bench.cc BM_MsyncScattered).
  constexpr uintptr_t kMaxGap = 32 * 4096;
  size_t out = 0;
  for (size_t i = 1; i < v.size(); ++i) {
    if (v[i].first <= v[out].second + kMaxGap) {
      v[out].second = std::max(v[out].second, v[i].second);
    } else {
      v[++out] = v[i];
    }
  }
  v.resize(out + 1);
  for (const auto& [b, e] : v) {
    // MS_SYNC: returns once the pages are on the file's storage. A failure means the
    // durability of the range is unknown: the pool enters its failed mode (sticky).
    if (const int err = Msync(b, e); err != 0) {
      if (health == nullptr) {
        std::fprintf(stderr, "pmrt: msync of %zu bytes failed: %s\n", static_cast<size_t>(e - b),
                     std::strerror(err));
        std::abort();
      }
      health->Fail(absl::StrCat("msync of ", e - b, " bytes at pool offset ",
                                health->OffsetOf(reinterpret_cast<const void*>(b)),
                                " failed: ", std::strerror(err), " (errno ", err, ")"));
    }
  }
  v.clear();
}

void InjectMsyncFailures(uint64_t from, uint64_t count, int err) {
  g_fail_count.store(0, std::memory_order_relaxed);
  g_fail_errno.store(err, std::memory_order_relaxed);
  g_fail_from.store(count == 0 ? 0 : g_msync_calls.load(std::memory_order_relaxed) + from,
                    std::memory_order_relaxed);
  g_fail_count.store(count, std::memory_order_relaxed);
}

void SimFlush(SimHooks* sim, const Site& site, const void* addr, size_t len) {
  sim->OnFlush(site, addr, len);
}
void SimFence(SimHooks* sim, const Site& site) { sim->OnFence(site); }
void SimStoreHint(SimHooks* sim, const void* addr, size_t len) { sim->OnStoreHint(addr, len); }
bool SimModelsPmem(BackendKind kind, const SimHooks* sim) {
  return kind == BackendKind::kSim && sim != nullptr && sim->models_pmem();
}

}  // namespace epoch_internal

void Persister::FlushBatch(const Site& site, std::span<const Range> ranges) const {
  if (mutation::IsDisabled(site)) return;
  epoch_internal::LocalCounters().Add(kind_, epoch_internal::kBatchFlushes, 1);
  for (const Range& r : ranges) {
    Count(r.len, r.addr);
    switch (kind_) {
      case BackendKind::kPmem:
        PmemFlush(r.addr, r.len);
        break;
      case BackendKind::kEadr:
        break;
      case BackendKind::kMsync:
        epoch_internal::MsyncRecord(r.addr, r.len);
        break;
      case BackendKind::kSim:
        epoch_internal::SimFlush(sim_, site, r.addr, r.len);
        break;
    }
  }
  Fence(site);
}

absl::Status PoolHealth::status() const {
  if (!failed()) return absl::OkStatus();
  std::lock_guard<std::mutex> l(mu_);
  return absl::DataLossError(absl::StrCat(
      path_, ": the pool is in its failed mode (", cause_,
      "): nothing more becomes durable and writes are refused; reopen it to recover its last "
      "durable state"));
}

void PoolHealth::Fail(std::string cause) {
  std::lock_guard<std::mutex> l(mu_);
  if (failed_.load(std::memory_order_relaxed)) return;
  cause_ = std::move(cause);
  failed_.store(true, std::memory_order_release);
}

PersistCounts CountersSnapshot(BackendKind kind) {
  auto& r = epoch_internal::Registry();
  std::lock_guard<std::mutex> l(r.mu);
  PersistCounts total = r.retired[static_cast<int>(kind)];
  for (const auto* t : r.live) total += t->Read(kind);
  return total;
}

PersistCounts CountersSnapshotAll() {
  PersistCounts total;
  for (int i = 0; i < kNumBackends; ++i) total += CountersSnapshot(static_cast<BackendKind>(i));
  return total;
}

}  // namespace pmrt
