// The persistence seam: every flush, fence and batch flush in pmrt goes through here.
//
// A `Persister` is bound to one mapped pool and one backend, chosen at pool open:
//
//   kPmem   libpmem's pmem_flush/pmem_drain (clwb > clflushopt > clflush, detected by libpmem).
//   kEadr   caches are inside the persistence domain: flushes are no-ops, fences are sfence.
//   kMsync  an ordinary file: a flush records the page range, a fence msyncs what was recorded.
//   kSim    the crash simulator (testing/sim.h): flush snapshots lines, fence is a crash point.
//
// The hot path is a switch on a one-byte kind held in the persister (no virtual call, and the
// branch is perfectly predicted since a pool never changes backend).
//
// Every call names a `Site`: a stable, named call site. The mutation gate (`mutation::Disable`)
// turns one site into a no-op so a test can show that the crash suite misses it; see
// docs/testing.md. Example:
//
//   inline constexpr pmrt::Site kCommitFlush{"txn.commit.record"};
//   persister.Flush(kCommitFlush, rec, rec_len);
//   persister.Fence(kCommitFence);
#ifndef PMRT_EPOCH_PERSIST_H_
#define PMRT_EPOCH_PERSIST_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#if defined(__x86_64__)
#include <emmintrin.h>  // _mm_stream_si64, _mm_stream_si128
#include <xmmintrin.h>  // _mm_sfence
#endif

#include "absl/status/statusor.h"

namespace pmrt {

class PoolHealth;
struct Site;

// The `sim` backend's other side: a crash model that sees every flush, fence and in-line store
// hint of the persisters bound to it, over a working copy of memory that holds the pools it
// crashes. The crash simulator implements it (pmrt::Sim, testing/sim.h, in the separate library
// pmrt_testing); the runtime only calls it.
class SimHooks {
 public:
  virtual void OnFlush(const Site& site, const void* addr, size_t len) = 0;
  virtual void OnFence(const Site& site) = 0;
  virtual void OnStoreHint(const void* addr, size_t len) = 0;
  // Whether the model is persistent memory (clwb, non-temporal records) rather than eADR.
  virtual bool models_pmem() const = 0;
  // The working copy: [working(), working() + size()).
  virtual void* working() const = 0;
  virtual size_t size() const = 0;

 protected:
  ~SimHooks() = default;
};

enum class BackendKind : uint8_t { kPmem = 0, kEadr = 1, kMsync = 2, kSim = 3 };
inline constexpr int kNumBackends = 4;
inline constexpr size_t kCacheLine = 64;

std::string_view BackendName(BackendKind kind);
// Parses "pmem", "eadr", "msync" or "sim"; kInvalidArgument names the bad text.
absl::StatusOr<BackendKind> ParseBackend(std::string_view name);

// How the pmem backend writes a new record (Persister::CopyFlush, and the small commit's writer
// through Persister::Streams): the two ways of making a freshly written range durable at the
// next fence, and which is faster depends on the processor (bench/persist_bench,
// BM_RecordPersist, side by side; docs/performance.md, "Record writes"):
//
//   kStream  non-temporal stores (movnti/movntdq): the lines go to memory through the
//            write-combining buffers. On an AMD EPYC (Zen 4) 0.66-0.69x the time of kFlush.
//   kFlush   plain stores, then pmem_flush (clwb) of the range, for records under
//            kStreamAlwaysFrom bytes; larger ones as kStream. On an Intel Xeon (Emerald Rapids)
//            0.74-0.90x the time of kStream up to 4 lines, about even at 8, and 1.2-2.5x from
//            12 lines on: hence the size limit.
//
// Both give the same contract (durable after the next Fence, in any order of lines before it),
// the same records and the same counts; only the instructions differ. Other backends ignore it.
enum class RecordWrites : uint8_t { kStream = 0, kFlush = 1 };
inline constexpr size_t kStreamAlwaysFrom = 512;
std::string_view RecordWritesName(RecordWrites writes);
// Parses "stream" or "flush"; kInvalidArgument names the bad text.
absl::StatusOr<RecordWrites> ParseRecordWrites(std::string_view name);
// This processor's faster way, by its vendor (CPUID): kStream on AMD and Hygon, kFlush on any
// other x86-64 processor (libpmem's choice too for records under 256 bytes) and elsewhere
// (where Streams() is false anyway).
RecordWrites DefaultRecordWrites();
// The rule DefaultRecordWrites applies to the 12-character CPUID vendor string.
RecordWrites RecordWritesForVendor(std::string_view vendor);

// A named persistence call site. The id is a hash of the name, so it is stable across builds
// and can be given on the command line or in PMRT_DISABLE_SITE.
struct Site {
  constexpr explicit Site(const char* site_name) : name(site_name), id(Hash(site_name)) {}
  const char* name;
  uint32_t id;

 private:
  static constexpr uint32_t Hash(const char* s) {
    uint32_t h = 2166136261u;  // FNV-1a
    for (; *s != '\0'; ++s) h = (h ^ static_cast<uint8_t>(*s)) * 16777619u;
    return h == 0 ? 1 : h;  // 0 means "no site disabled"
  }
};

// Mutation gate: disable one flush/fence site, or activate one named store-order mutant.
// Used only by tests; the check on the hot path is one relaxed load and compare.
namespace epoch_internal {
extern std::atomic<uint32_t> g_disabled_site;  // mutation::Disable's site (0: none)
}  // namespace epoch_internal
namespace mutation {
// Makes the site a no-op (0 re-enables everything). Also settable by PMRT_DISABLE_SITE=name.
void Disable(uint32_t site_id);
void Disable(const Site& site);
void EnableAll();
inline bool IsDisabled(const Site& site) {
  return epoch_internal::g_disabled_site.load(std::memory_order_relaxed) == site.id;
}
// Whether any site is disabled or any mutant active: a hot path that checks this once may then
// skip its per-site checks (txn's commit of one word).
inline bool AnyDisabled() {
  return epoch_internal::g_disabled_site.load(std::memory_order_relaxed) != 0;
}
// A store-order mutant: code with an ordering-sensitive in-line store sequence asks
// `mutation::Swapped(kSite)` and, when true, performs the two stores in the wrong order.
inline bool Swapped(const Site& site) { return IsDisabled(site); }
}  // namespace mutation

// Flush/fence counters. Each thread counts in its own block (no shared-line traffic on the
// hot path); Snapshot() sums every thread's block, live and exited.
struct PersistCounts {
  uint64_t flushes = 0;        // Flush() calls that reached the backend
  uint64_t lines_flushed = 0;  // cache lines covered by those calls
  uint64_t bytes_flushed = 0;  // bytes requested
  uint64_t fences = 0;         // Fence() calls that reached the backend
  uint64_t batch_flushes = 0;  // FlushBatch() calls
  PersistCounts& operator+=(const PersistCounts& o);
  PersistCounts operator-(const PersistCounts& o) const;
};
PersistCounts CountersSnapshot(BackendKind kind);
PersistCounts CountersSnapshotAll();

namespace epoch_internal {
enum Counter { kFlushes, kLinesFlushed, kBytesFlushed, kFences, kBatchFlushes, kNumCounters };
// A counter written only by its owning thread: load + store, no read-modify-write.
inline void AddTo(std::atomic<uint64_t>& x, uint64_t n) {
  x.store(x.load(std::memory_order_relaxed) + n, std::memory_order_relaxed);
}
// Written only by the owning thread (load + store, no read-modify-write: as cheap as a plain
// increment); read by CountersSnapshot from any thread, hence atomics with relaxed order.
struct ThreadCounters {
  std::atomic<uint64_t> v[kNumBackends][kNumCounters] = {};
  void Add(BackendKind kind, Counter c, uint64_t n) { AddTo(v[static_cast<int>(kind)][c], n); }
  PersistCounts Read(BackendKind kind) const;
  std::atomic<uint64_t>* row(BackendKind kind) { return v[static_cast<int>(kind)]; }
};
// Counts one flush of [addr, addr+len) in a backend's `row` of a thread's counters.
inline void CountFlushIn(std::atomic<uint64_t>* row, size_t len, const void* addr) {
  const auto a = reinterpret_cast<uintptr_t>(addr);
  AddTo(row[kFlushes], 1);
  AddTo(row[kBytesFlushed], len);
  AddTo(row[kLinesFlushed], len == 0 ? 0 : ((a + len - 1) / kCacheLine) - (a / kCacheLine) + 1);
}
// The calling thread's block: a pointer read on the hot path (constinit: no TLS wrapper call);
// LocalCountersSlow creates and registers the block at the thread's first use.
extern constinit thread_local ThreadCounters* tls_counters;
ThreadCounters& LocalCountersSlow();
inline ThreadCounters& LocalCounters() {
  ThreadCounters* c = tls_counters;
  return c != nullptr ? *c : LocalCountersSlow();
}
void PmemFlush(const void* addr, size_t len);
// Whether pmem_flush writes lines back with clwb here: the processor has it (CPUID leaf 7,
// EBX bit 24) and neither PMEM_NO_CLWB=1 nor PMEM_NO_FLUSH=1 turns it off (libpmem's own rule;
// where libpmem finds the platform flushes caches on power loss (eADR) it skips the flush, and
// clwb is still correct, only needless). Read once per process.
bool InlineClwb();
#if defined(__x86_64__)
// pmem_flush where InlineClwb(): clwb of each line of [addr, addr+len), inline, so that a
// commit's flush makes no call (a call's return address is one more store for the previous
// commit's fence to hold back, and the registers it clobbers are spilled around it).
inline void Clwb(const void* addr, size_t len) {
  auto line = reinterpret_cast<uintptr_t>(addr) & ~uintptr_t{63};
  const uintptr_t end = reinterpret_cast<uintptr_t>(addr) + len;
  do {
    asm volatile("clwb %0" : "+m"(*reinterpret_cast<volatile char*>(line)));
    line += 64;
  } while (line < end);
}
#endif
#if defined(__x86_64__)
// sfence: what pmem_drain does after clwb/clflushopt, and what orders the non-temporal stores
// of PmemCopyNoDrain and Persister::Stream8 (pmem_drain is empty where libpmem flushes with
// plain clflush). Inline: a commit's one fence is on the hot path, and a call would add a
// store (the return address) to the stores the fence holds back.
inline void PmemDrain() { _mm_sfence(); }
#else
void PmemDrain();
#endif
void PmemCopyNoDrain(void* dst, const void* src, size_t len);
void MsyncRecord(const void* addr, size_t len);
// msyncs what this thread recorded. An error puts `health`'s pool in its failed mode (without a
// pool to name, it is reported and the process aborts).
void MsyncFence(PoolHealth* health);
void SimFlush(SimHooks* sim, const Site& site, const void* addr, size_t len);
void SimFence(SimHooks* sim, const Site& site);
void SimStoreHint(SimHooks* sim, const void* addr, size_t len);
// Whether a persister of `kind` over `sim` models kPmem (kSim, SimHooks::models_pmem).
bool SimModelsPmem(BackendKind kind, const SimHooks* sim);
}  // namespace epoch_internal

// A pool's failed mode (docs/durability.md, "The failed mode"): healthy until the seam cannot
// make something durable (an msync error), then failed for as long as the pool stays mapped.
// Sticky: no later success clears it, since what the failed call should have made durable is
// unknown. The layers above refuse to report durability from then on (Manager::Advance and Sync
// return status(), a commit on such a pool fails), reads keep working, and the next open
// recovers the last durable state.
class PoolHealth {
 public:
  // The pool the health is of, named in status() and in a cause's offsets.
  void Bind(std::string path, const void* base) {
    path_ = std::move(path);
    base_ = static_cast<const uint8_t*>(base);
  }
  bool failed() const { return failed_.load(std::memory_order_acquire); }
  // OK, or kDataLoss naming the pool and the first cause.
  absl::Status status() const;
  // Enters the failed mode (the first cause is kept).
  void Fail(std::string cause);
  // The offset of `addr` in the pool, for a cause's text.
  uint64_t OffsetOf(const void* addr) const {
    return static_cast<uint64_t>(static_cast<const uint8_t*>(addr) - base_);
  }

 private:
  std::atomic<bool> failed_{false};
  mutable std::mutex mu_;
  std::string cause_;
  std::string path_;
  const uint8_t* base_ = nullptr;
};

namespace epoch_internal {
// Fault injection for tests: msync calls numbered [from, from + count) from now on (1-based,
// process-wide, counting every msync MsyncFence makes) fail with `err` instead of syncing.
// count 0 clears it.
void InjectMsyncFailures(uint64_t from, uint64_t count, int err);
}  // namespace epoch_internal

// A byte range of the mapped pool to flush in a batch.
struct Range {
  const void* addr;
  size_t len;
};

// Thread-safe: a Persister is immutable after construction and every call may be made from
// any thread. Flushes are ordered only by the calling thread's next Fence (as with sfence).
class Persister {
 public:
  Persister() = default;
  //
  // A kSim persister whose simulator models persistent memory (Sim::Options::pmem) behaves as
  // the kPmem one towards its callers: StreamsRecords and FlushesInline answer as on a processor
  // with clwb and `writes`, so the record writers that use the pmem primitives (SimOps below)
  // run under the simulator.
  Persister(BackendKind kind, SimHooks* sim, RecordWrites writes = DefaultRecordWrites())
      : kind_(kind),
        writes_(writes),
        streams_(kind == BackendKind::kPmem || epoch_internal::SimModelsPmem(kind, sim)),
        clwb_((kind == BackendKind::kPmem && epoch_internal::InlineClwb()) ||
              epoch_internal::SimModelsPmem(kind, sim)),
        sim_(sim) {}

  BackendKind kind() const { return kind_; }
  // The pool's failed mode (Pool binds it): a fence that fails enters it.
  void set_health(PoolHealth* health) { health_ = health; }
  bool failed() const { return health_ != nullptr && health_->failed(); }
  RecordWrites record_writes() const { return writes_; }
  SimHooks* sim() const { return sim_; }

  // Starts writing [addr, addr+len) back to media. Durable only after the next Fence.
  void Flush(const Site& site, const void* addr, size_t len) const {
    if (mutation::IsDisabled(site)) return;
    Count(len, addr);
    switch (kind_) {
      case BackendKind::kPmem:
        PmemFlush(addr, len);
        break;
      case BackendKind::kEadr:
        break;
      case BackendKind::kMsync:
        epoch_internal::MsyncRecord(addr, len);
        break;
      case BackendKind::kSim:
        epoch_internal::SimFlush(sim_, site, addr, len);
        break;
    }
  }

  // Copies [src, src+len) to dst (in the pool) and starts writing dst back: the contract of
  // memcpy followed by Flush(dst, len), durable after the next Fence. For sequential,
  // write-once data (log records). On kPmem it writes as record_writes() says (and a range of
  // kStreamAlwaysFrom bytes or more as kStream): kStream (x86-64) with non-temporal stores
  // (movntdq, 16 bytes each, and movnti for an 8-byte head or tail; a range that is not 8-byte
  // aligned and sized takes memcpy + pmem_flush), the lines going to memory without passing through
  // the cache; kFlush with memcpy + pmem_flush. Disabling `site` leaves the plain copy (reaching
  // media only by eviction).
  void CopyFlush(const Site& site, void* dst, const void* src, size_t len) const {
    if (mutation::IsDisabled(site)) {
      std::memcpy(dst, src, len);
      return;
    }
    Count(len, dst);
    switch (kind_) {
      case BackendKind::kPmem:
        if (StreamsRecord(len)) {
          epoch_internal::PmemCopyNoDrain(dst, src, len);
        } else {
          std::memcpy(dst, src, len);
          PmemFlush(dst, len);
        }
        break;
      case BackendKind::kEadr:
        std::memcpy(dst, src, len);
        break;
      case BackendKind::kMsync:
        std::memcpy(dst, src, len);
        epoch_internal::MsyncRecord(dst, len);
        break;
      case BackendKind::kSim:
        std::memcpy(dst, src, len);
        epoch_internal::SimFlush(sim_, site, dst, len);
        break;
    }
  }

  // Writing a new record straight into the pool, word by word, with no staging copy (txn's
  // small commit). Where Streams(site, max_len) (kPmem on x86-64, RecordWrites::kStream or a
  // record that may be kStreamAlwaysFrom bytes or more, `site` not disabled) the writer puts
  // each word with Stream8, a non-temporal store: the word goes to memory through the
  // write-combining buffers without allocating its line, the contract of a store and a Flush of
  // it in one instruction, durable after the next Fence (the same path as CopyFlush's); then it
  // calls CountStream once for the range and its fence. Elsewhere the writer stores the words
  // plainly and calls Flush(site, ...) for the range.
  bool Streams(const Site& site, size_t max_len) const {
    return StreamsRecords(max_len) && !mutation::IsDisabled(site);
  }
  // Streams() for a site that is not disabled (fixed for the persister's life).
  bool StreamsRecords(size_t max_len) const {
#if defined(__x86_64__)
    return streams_ && StreamsRecord(max_len);
#else
    (void)max_len;
    return false;
#endif
  }
  static void Stream8(void* dst, uint64_t v) {
#if defined(__x86_64__)
    _mm_stream_si64(static_cast<long long*>(dst), static_cast<long long>(v));
#else
    std::memcpy(dst, &v, 8);         // not reached: Streams() is false
#endif
  }
  // Two words {lo, hi} at a 16-byte-aligned dst as one non-temporal store (movntdq): half the
  // stores of two Stream8s, so the fence holds back half as many.
  static void Stream16(void* dst, uint64_t lo, uint64_t hi) {
#if defined(__x86_64__)
    _mm_stream_si128(static_cast<__m128i*>(dst),
                     _mm_set_epi64x(static_cast<long long>(hi), static_cast<long long>(lo)));
#else
    const uint64_t v[2] = {lo, hi};  // not reached: Streams() is false
    std::memcpy(dst, v, 16);
#endif
  }
  // Counts [dst, dst+len), written with Stream8/Stream16 or written back with an inline clwb
  // (PmemOps / SimOps below), as one flush (as CopyFlush counts its copy). The fence that
  // follows counts itself (Fence, PmemOps::Fence).
  void CountStream(const void* dst, size_t len) const { Count(len, dst); }
  // Whether Flush writes lines back with an inline clwb (kPmem where pmem_flush is clwb:
  // epoch_internal::InlineClwb, or kSim modelling kPmem): then the record writers use
  // PmemOps::Clwb / SimOps::Clwb.
  bool FlushesInline() const { return clwb_; }

  // Waits until every Flush this thread issued before it is durable.
  void Fence(const Site& site) const {
    if (mutation::IsDisabled(site)) return;
    epoch_internal::LocalCounters().Add(kind_, epoch_internal::kFences, 1);
    switch (kind_) {
      case BackendKind::kPmem:
        epoch_internal::PmemDrain();
        break;
      case BackendKind::kEadr:
        std::atomic_thread_fence(std::memory_order_seq_cst);
        break;
      case BackendKind::kMsync:
        epoch_internal::MsyncFence(health_);
        break;
      case BackendKind::kSim:
        epoch_internal::SimFence(sim_, site);
        break;
    }
  }

  // Flush + Fence, the common "persist this now".
  void Persist(const Site& flush_site, const Site& fence_site, const void* addr, size_t len) const {
    Flush(flush_site, addr, len);
    Fence(fence_site);
  }

  // Makes every range durable with one fence at the end: the epoch boundary's batch flush.
  // Disabling `site` skips the whole batch (flushes and fence).
  void FlushBatch(const Site& site, std::span<const Range> ranges) const;

  // Crash-simulator hint after an ordering-sensitive store inside one cache line (InCLL):
  // records the line's content so crash images can hold this intermediate state.
  void StoreHint(const void* addr, size_t len) const {
    if (kind_ == BackendKind::kSim) epoch_internal::SimStoreHint(sim_, addr, len);
  }

 private:
  // On kPmem: whether a record of `len` bytes goes with non-temporal stores (RecordWrites).
  bool StreamsRecord(size_t len) const {
    return writes_ == RecordWrites::kStream || len >= kStreamAlwaysFrom;
  }
  // pmem_flush, inline where it is clwb (and the range is not empty).
  void PmemFlush(const void* addr, size_t len) const {
#if defined(__x86_64__)
    if (clwb_ && len != 0) {
      epoch_internal::Clwb(addr, len);
      return;
    }
#endif
    epoch_internal::PmemFlush(addr, len);
  }
  void Count(size_t len, const void* addr) const {
    epoch_internal::CountFlushIn(epoch_internal::LocalCounters().row(kind_), len, addr);
  }

  BackendKind kind_ = BackendKind::kEadr;
  RecordWrites writes_ = RecordWrites::kFlush;  // (next to kind_: Streams reads both at once)
  bool streams_ = false;  // kPmem, or kSim modelling it: StreamsRecord decides per record
  bool clwb_ = false;     // kPmem and epoch_internal::InlineClwb(), or kSim modelling kPmem
  SimHooks* sim_ = nullptr;
  PoolHealth* health_ = nullptr;
};

// The primitives of the record writers that run where Streams() or FlushesInline() holds (txn's
// small commit), as a type the writer takes as a template argument, so that the crash simulator
// runs the writer's own code:
//
//   PmemOps  the instructions: movnti/movntdq (Stream8/16), clwb (Clwb), sfence (Fence). The
//            caller has checked the mutation gate for the whole path (Streams(site), or
//            mutation::AnyDisabled() false), so `site` is not read, except by Fence.
//   SimOps   each primitive handed to the simulator of a kSim persister that models kPmem
//            (Sim::Options::pmem), with the hardware's semantics: a streamed word is a store and
//            a flush of its line (it may reach media at any time, and is durable after the next
//            fence of the thread); a clwb'd line may be written back at any time after its
//            stores, and is durable after the next fence; Fence is a crash point. Every call
//            checks its own site, so the mutation gate reaches each call site.
//
// Both count as the seam does: CountFlush one flush of the range, Fence its fence, in the
// persister's backend row of the calling thread's counters `c` (epoch_internal::LocalCounters()).
struct PmemOps {
  [[gnu::always_inline]] static void Stream8(const Persister&, const Site&, void* dst, uint64_t v) {
    Persister::Stream8(dst, v);
  }
  [[gnu::always_inline]] static void Stream16(const Persister&, const Site&, void* dst, uint64_t lo,
                                              uint64_t hi) {
    Persister::Stream16(dst, lo, hi);
  }
  [[gnu::always_inline]] static void Clwb(const Persister&, const Site&, const void* addr,
                                          size_t len) {
#if defined(__x86_64__)
    epoch_internal::Clwb(addr, len);
#else
    (void)addr, (void)len;  // not reached: FlushesInline() is false
#endif
  }
  [[gnu::always_inline]] static void CountFlush(const Persister&, epoch_internal::ThreadCounters& c,
                                                const void* addr, size_t len) {
    epoch_internal::CountFlushIn(c.row(BackendKind::kPmem), len, addr);
  }
  // The fence, counted here, where it is issued (a caller that has found no site disabled).
  [[gnu::always_inline]] static void Fence(const Persister&, const Site&,
                                           epoch_internal::ThreadCounters& c) {
    epoch_internal::AddTo(c.row(BackendKind::kPmem)[epoch_internal::kFences], 1);
    epoch_internal::PmemDrain();
  }
};

struct SimOps {
  static void Stream8(const Persister& p, const Site& site, void* dst, uint64_t v) {
    std::memcpy(dst, &v, 8);
    if (!mutation::IsDisabled(site)) epoch_internal::SimFlush(p.sim(), site, dst, 8);
  }
  static void Stream16(const Persister& p, const Site& site, void* dst, uint64_t lo, uint64_t hi) {
    const uint64_t v[2] = {lo, hi};
    std::memcpy(dst, v, 16);
    if (!mutation::IsDisabled(site)) epoch_internal::SimFlush(p.sim(), site, dst, 16);
  }
  static void Clwb(const Persister& p, const Site& site, const void* addr, size_t len) {
    if (!mutation::IsDisabled(site) && len != 0) epoch_internal::SimFlush(p.sim(), site, addr, len);
  }
  static void CountFlush(const Persister&, epoch_internal::ThreadCounters& c, const void* addr,
                         size_t len) {
    epoch_internal::CountFlushIn(c.row(BackendKind::kSim), len, addr);
  }
  static void Fence(const Persister& p, const Site& site, epoch_internal::ThreadCounters&) {
    p.Fence(site);  // (checks the site, counts, and is a crash point)
  }
};

}  // namespace pmrt

#endif  // PMRT_EPOCH_PERSIST_H_
