#include "epoch/epoch.h"

#include <linux/membarrier.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <thread>

#include "absl/strings/str_cat.h"
#include "base/crc32c.h"
#include "base/thread_cpu.h"

namespace pmrt::epoch {
namespace {

constexpr Site kHeaderFlush{"epoch.header.flush"};
constexpr Site kHeaderFence{"epoch.header.fence"};
constexpr Site kFailedRangeFlush{"epoch.failed.range.flush"};
constexpr Site kFailedCountFlush{"epoch.failed.count.flush"};
constexpr Site kFailedFence{"epoch.failed.fence"};
constexpr Site kFailedWidenFlush{"epoch.failed.widen.flush"};  // a range widened in place
constexpr Site kFailedWidenFence{"epoch.failed.widen.fence"};
constexpr Site kFailedClearFlush{"epoch.failed.clear.flush"};  // ClearFailedEpochs' count
constexpr Site kFailedClearFence{"epoch.failed.clear.fence"};
constexpr Site kCompletedFlush{"epoch.completed.flush"};
constexpr Site kCompletedFence{"epoch.completed.fence"};
// The boundary's write-back of the closing epoch's dirty lines, one site per call: by the
// advancer alone; split between threads (flush_threads), the advancer's share and each helper's;
// and a thread's own list, written back by that thread while it waits for the epoch to open.
constexpr Site kBoundaryBatch{"epoch.boundary.batch"};
constexpr Site kBoundaryShare{"epoch.boundary.share"};
constexpr Site kBoundaryHelper{"epoch.boundary.helper"};
constexpr Site kBoundaryHelp{"epoch.boundary.help"};

uint32_t HeaderCrc(const EpochAreaHeader& h) { return Crc32c(&h, offsetof(EpochAreaHeader, crc)); }

#if defined(__SANITIZE_THREAD__)
constexpr bool kTsan = true;
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
constexpr bool kTsan = true;
#else
constexpr bool kTsan = false;
#endif
#else
constexpr bool kTsan = false;
#endif

// Asymmetric fences (the userspace-RCU scheme): a guard's announce is a plain store followed by
// a plain load, and the advancer pays instead, with membarrier(), which makes every thread of
// the process execute a full fence. Registered once; when the kernel refuses (or under TSan,
// which cannot see membarrier) guards use a seq_cst store-load pair.
bool RegisterAsymmetricFences() {
  if (kTsan) return false;
  return syscall(__NR_membarrier, MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED, 0, 0) == 0;
}

}  // namespace

bool Manager::AsymmetricFences() {
  static const bool on = RegisterAsymmetricFences();
  return on;
}

namespace {}  // namespace

Manager::Manager(Pool& pool, ManagerOptions options)
    : pool_(pool),
      options_(options),
      area_(static_cast<EpochAreaLayout*>(pool.region_base(PoolRegion::kEpoch))) {}

absl::StatusOr<std::unique_ptr<Manager>> Manager::Open(Pool& pool, ManagerOptions options) {
  if (pool.region(PoolRegion::kEpoch).size < kEpochAreaMinSize) {
    return absl::FailedPreconditionError(absl::StrCat(
        pool.path(), ": epoch area of ", pool.region(PoolRegion::kEpoch).size,
        " bytes is smaller than the ", kEpochAreaMinSize, " bytes the epoch layer needs"));
  }
  if (auto st = pool.AttachLayer(PoolLayer::kEpochs); !st.ok()) return st;
  std::unique_ptr<Manager> m(new Manager(pool, options));
  m->attached_ = true;
  m->log_ = std::make_unique<ExternalLog>(pool, *m);
  if (auto st = m->Recover(); !st.ok()) return st;  // (m, not opened, advances nothing)
  m->opened_ = true;
  if (options.interval.count() > 0)
    m->advancer_ = std::thread([p = m.get()] { p->AdvancerLoop(); });
  return m;
}

Manager::~Manager() {
  if (attached_) pool_.CheckNoLayerAbove(PoolLayer::kEpochs, "the epoch::Manager");
  {
    std::lock_guard<std::mutex> l(clock_mu_);
    stopping_ = true;
  }
  clock_cv_.notify_all();
  if (advancer_.joinable()) advancer_.join();
  // Everything done so far becomes durable, and every retired object is reclaimed (an object
  // retired in e is freed at the end of the advance from e to e+1). A manager whose Open failed
  // writes nothing: its recovery did not complete, so no epoch may be recorded complete.
  if (opened_) (void)Advance();
  if (attached_) pool_.DetachLayer(PoolLayer::kEpochs);
}

// ---- durable epoch state ----------------------------------------------------------------------

void Manager::PersistCompleted(uint64_t e) {
  // An aligned 8-byte store is failure-atomic: media holds the old or the new value. Before
  // the fence a crash recovers as if e had failed; after it, e is durable.
  area_->completed.store(e, std::memory_order_release);
  persister().Persist(kCompletedFlush, kCompletedFence, &area_->completed, 8);
  // A fence that failed (the failed mode) leaves e's completion unknown: not reported.
  if (!pool_.failed()) completed_.store(e, std::memory_order_release);
}

absl::Status Manager::InitArea() {
  // A fresh area is all zero, which is already a valid state (completed 0, no failed epoch):
  // only the header is written. It must be durable before any state word is, or a crash could
  // leave state under a zero magic, which is refused as corrupt. The header line itself may be
  // half written by an earlier attempt (magic is stored last), so only the state is checked.
  const auto* bytes = reinterpret_cast<const uint8_t*>(area_);
  for (size_t i = sizeof(EpochAreaHeader); i < sizeof(EpochAreaLayout); ++i) {
    if (bytes[i] != 0) {
      return absl::DataLossError(absl::StrCat(pool_.path(), ": epoch area at offset ",
                                              pool_.region(PoolRegion::kEpoch).offset,
                                              " has no header but holds data at byte ", i));
    }
  }
  pool_.BeginWrites();  // the area is valid: this open may write (PoolOptions::defer_attach)
  EpochAreaHeader h{kEpochAreaMagic, kEpochAreaVersion, 0};
  h.crc = HeaderCrc(h);
  // Version and crc first, the magic last, in one line (PCSO): until the magic is on media
  // the area reads as fresh and is initialized again; after it, the header is whole.
  area_->header.version = h.version;
  area_->header.crc = h.crc;
  std::atomic_ref<uint64_t>(area_->header.magic).store(h.magic, std::memory_order_release);
  persister().StoreHint(&area_->header, sizeof(h));
  // Durable before Open returns: a fence orders only the calling thread's flushes, and the
  // first state write (a failed range at this open, or `completed` in an advance on another
  // thread) must not reach media before the header. A crash before this fence leaves a
  // fresh-looking area, initialized again at the next open.
  persister().Persist(kHeaderFlush, kHeaderFence, &area_->header, sizeof(h));
  return absl::OkStatus();
}

absl::Status Manager::LoadArea() {
  const uint64_t where = pool_.region(PoolRegion::kEpoch).offset;
  const EpochAreaHeader& h = area_->header;
  if (h.magic != kEpochAreaMagic || h.crc != HeaderCrc(h)) {
    return absl::DataLossError(absl::StrCat(pool_.path(), ": epoch area at offset ", where,
                                            " has a bad magic or checksum"));
  }
  if (h.version > kEpochAreaVersion) {
    return absl::FailedPreconditionError(absl::StrCat(pool_.path(), ": epoch area version ",
                                                      h.version, " is newer than supported (",
                                                      kEpochAreaVersion, ")"));
  }
  const uint64_t count = area_->failed_count.load(std::memory_order_relaxed);
  if (count > kMaxFailedRanges) {
    return absl::DataLossError(absl::StrCat(pool_.path(), ": epoch area at offset ", where,
                                            ": failed-epoch count ", count, " exceeds ",
                                            kMaxFailedRanges));
  }
  failed_.clear();
  for (uint64_t i = 0; i < count; ++i) {
    const FailedRange& r = area_->failed[i];
    if (r.lo == 0 && r.hi == 0) continue;  // a count that reached media before its range
    if (r.lo > r.hi || (!failed_.empty() && r.lo <= failed_.back().second)) {
      return absl::DataLossError(absl::StrCat(pool_.path(), ": epoch area at offset ", where,
                                              ": failed-epoch range ", i, " is malformed"));
    }
    failed_.emplace_back(r.lo, r.hi);
  }
  completed_.store(area_->completed.load(std::memory_order_relaxed));
  return absl::OkStatus();
}

absl::Status Manager::RecordFailed(uint64_t lo, uint64_t hi) {
  // Idempotent: a crash during recovery re-adds the same range, which is found here.
  if (!failed_.empty() && failed_.back().second >= hi) return absl::OkStatus();
  const uint64_t count = failed_.size();
  if (!failed_.empty() && failed_.back().second + 1 >= lo) {
    // Contiguous with the last range (a crash right after recovering from one): widen it in
    // place. One aligned 8-byte store: media has the old or new `hi`; either way the range
    // still covers the older epochs, and the newer ones are re-added by the next open.
    // Durable before `completed` moves past the widened range (Recover step 4).
    pool_.BeginWrites();
    area_->failed[count - 1].hi = hi;
    persister().Persist(kFailedWidenFlush, kFailedWidenFence, &area_->failed[count - 1], 16);
    failed_.back().second = hi;
    return absl::OkStatus();
  }
  // The last slot is kept for an open by `pmrt repair` (ManagerOptions::repair).
  const uint64_t limit = options_.repair ? kMaxFailedRanges : kMaxFailedRanges - 1;
  if (count >= limit) {
    return absl::ResourceExhaustedError(
        absl::StrCat(pool_.path(), ": the failed-epoch set is full (", count,
                     " crashes recorded); the pool can no longer record a crash: `pmrt repair ",
                     pool_.path(), "` rolls the set up"));
  }
  pool_.BeginWrites();  // the range fits: this open may write (PoolOptions::defer_attach)
  // Range and count are flushed together and made durable by one fence, before `completed`
  // moves (Recover step 4). A crash before that fence may leave the count without the range
  // (a slot that was zero: the range [0, 0], which names no epoch) or the range without the
  // count; either way `completed` has not moved, so the next open records the same range
  // again.
  area_->failed[count] = {lo, hi};
  persister().Flush(kFailedRangeFlush, &area_->failed[count], 16);
  area_->failed_count.store(count + 1, std::memory_order_release);
  persister().Persist(kFailedCountFlush, kFailedFence, &area_->failed_count, 8);
  failed_.emplace_back(lo, hi);
  return absl::OkStatus();
}

absl::Status Manager::Recover() {
  // 1. Read (or create) the durable state.
  if (area_->header.magic == 0) {
    if (auto st = InitArea(); !st.ok()) return st;
  }
  if (auto st = LoadArea(); !st.ok()) return st;
  if (auto st = log_->Configure(area_->header.version >= kEpochAreaFirstDirectoryVersion);
      !st.ok()) {
    return st;
  }
  const uint64_t c = completed_.load();
  // 2. A crash: the epoch that was running (c+1) and the one an unfinished advance may have
  //    started (c+2) are failed. Durable before anything is rolled back or restarted.
  if (!pool_.was_clean_shutdown()) {
    if (auto st = RecordFailed(c + 1, c + 2); !st.ok()) return st;
    if (pool_.failed()) return pool_.health();  // its fence failed: the crash is not recorded
  }
  // Validation is over: from here the open writes (replay, `completed`, then the epochs).
  pool_.BeginWrites();
  execution_first_ = std::max(c, failed_.empty() ? 0 : failed_.back().second) + 1;
  global_.store(execution_first_, std::memory_order_release);
  // 3. Roll back the failed epochs' externally logged objects (eagerly; InCLL is lazy).
  auto replayed = log_->Replay(*this, options_.replay_threads);
  if (!replayed.ok()) return replayed.status();
  stats_.log_entries_replayed = *replayed;
  stats_.log_blocks_scanned = log_->blocks_scanned();
  // 4. Every epoch before this execution is now durable or failed and rolled back. Moving
  //    `completed` up makes a crash in this execution fail only this execution's epochs; its
  //    fence also makes the replay's block frees durable before any new work starts.
  if (c != execution_first_ - 1 || *replayed > 0) PersistCompleted(execution_first_ - 1);
  if (pool_.failed()) return pool_.health();  // a fence of this recovery failed
  // 5. The crash is durably recorded (the failed range) and rolled back: the pool may be
  //    marked cleanly shut down at its Close as far as this layer is concerned.
  pool_.AcknowledgeRecovery(Pool::kRecoveredEpochs);
  return absl::OkStatus();
}

bool Manager::IsFailed(uint64_t e) const {
  auto it = std::upper_bound(failed_.begin(), failed_.end(), std::make_pair(e, UINT64_MAX));
  return it != failed_.begin() && std::prev(it)->second >= e;
}

std::vector<std::pair<uint64_t, uint64_t>> Manager::failed_ranges() const { return failed_; }

absl::Status Manager::ClearFailedEpochs() {
  if (LocalSlot().depth > 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        pool_.path(), ": ClearFailedEpochs under the calling thread's own epoch guard"));
  }
  if (pool_.failed()) return pool_.health();
  if (area_->failed_count.load(std::memory_order_relaxed) == 0) return absl::OkStatus();
  // One aligned 8-byte store, durable before this returns: media has the whole set or none of
  // it. The ranges stay in their slots, past the count, where LoadArea never reads them; the
  // next crash writes slot 0 and the count under one fence (RecordFailed), and were the count
  // to reach media first, slot 0 would name an old range, which nothing names any more.
  area_->failed_count.store(0, std::memory_order_release);
  persister().Persist(kFailedClearFlush, kFailedClearFence, &area_->failed_count, 8);
  if (pool_.failed()) return pool_.health();
  failed_.clear();
  return absl::OkStatus();
}

// ---- threads ----------------------------------------------------------------------------------

std::vector<ThreadSlot*> Manager::Slots() {
  std::vector<ThreadSlot*> out;
  slots_.ForEach([&](ThreadSlot& s) { out.push_back(&s); });
  return out;
}

void Guard::EnterSlow(Manager& m, ThreadSlot* slot) {
  // The inline constructor's fast path failed (an advance is closing the epoch, or it raced
  // with one), or guards use the seq_cst store-load pair. Our slot announces no epoch here.
  const bool asymmetric = m.asymmetric_;
  for (int spins = 0;; ++spins) {
    const uint64_t g = m.global_.load(std::memory_order_acquire);
    if ((g & Manager::kClosing) == 0) {
      // As the inline fast path: announce, then re-check.
      if (asymmetric) {
        slot->epoch.store(g, std::memory_order_relaxed);
        std::atomic_signal_fence(std::memory_order_seq_cst);
        if (m.global_.load(std::memory_order_acquire) == g) return;
      } else {
        slot->epoch.store(g, std::memory_order_seq_cst);
        if (m.global_.load(std::memory_order_seq_cst) == g) return;
      }
      slot->epoch.store(0, std::memory_order_seq_cst);  // never block the advancer
    }
    // An advance is in progress: no work may start in the next epoch before this one is
    // durably complete (see Manager::Advance). Meanwhile, write back our own lines of the
    // closing epoch (they are in this core's cache, and our list is complete: we hold no
    // guard), then sleep until the epoch opens.
    if ((g & Manager::kClosing) != 0) {
      m.HelpFlush(*slot, (g & ~Manager::kClosing) - 1);
      if (spins > 16) m.global_.wait(g, std::memory_order_acquire);
    }
  }
}

void Manager::RecordDirty(const void* addr, size_t len) {
  ThreadSlot& slot = LocalSlot();
  const uint64_t e = slot.epoch.load(std::memory_order_relaxed);
  auto& d = slot.dirty[e & 1];
  // Sequential writers (a log, a fresh chunk) produce adjacent ranges: extend the last one.
  if (!d.empty()) {
    auto* last_end = static_cast<const uint8_t*>(d.back().addr) + d.back().len;
    auto* begin = static_cast<const uint8_t*>(addr);
    if (begin >= static_cast<const uint8_t*>(d.back().addr) && begin <= last_end) {
      d.back().len =
          std::max<size_t>(d.back().len, begin + len - static_cast<const uint8_t*>(d.back().addr));
      return;
    }
  }
  d.push_back({addr, len});
}

int Manager::AddFlushSource(FlushSource source) {
  std::lock_guard<std::mutex> l(advance_mu_);
  flush_sources_.emplace_back(next_source_id_, std::move(source));
  return next_source_id_++;
}

void Manager::RemoveFlushSource(int id) {
  std::lock_guard<std::mutex> l(advance_mu_);
  std::erase_if(flush_sources_, [id](const auto& s) { return s.first == id; });
}

void Manager::Retire(void* obj, std::function<void(void*)> deleter) {
  ThreadSlot& slot = LocalSlot();
  const uint64_t e = slot.epoch.load(std::memory_order_relaxed);
  slot.retired[e % 3].emplace_back(obj, std::move(deleter));
}

// ---- the advance ------------------------------------------------------------------------------

void Manager::FlushRanges(std::vector<Range>& ranges) {
  const int n = std::clamp(options_.flush_threads, 1, 64);
  if (n == 1 || ranges.size() < std::max<size_t>(options_.flush_parallel_from, 1)) {
    persister().FlushBatch(kBoundaryBatch, ranges);
    return;
  }
  // Several threads share the write-back; each fences its own flushes before it finishes.
  std::vector<std::thread> helpers;
  const size_t per = (ranges.size() + n - 1) / n;
  for (int t = 1; t < n; ++t) {
    size_t b = std::min(ranges.size(), per * t), e = std::min(ranges.size(), per * (t + 1));
    helpers.emplace_back([this, &ranges, b, e] {
      persister().FlushBatch(kBoundaryHelper, std::span<const Range>(ranges.data() + b, e - b));
    });
  }
  persister().FlushBatch(kBoundaryShare,
                         std::span<const Range>(ranges.data(), std::min(per, ranges.size())));
  for (auto& h : helpers) h.join();
}

absl::Status Manager::Advance() {
  // The boundary waits for every guard of the running epoch: the caller's own would never end.
  if (LocalSlot().depth > 0) {
    return absl::FailedPreconditionError(
        absl::StrCat(pool_.path(),
                     ": Advance/Sync called while this thread holds an epoch guard (an "
                     "epoch::Guard, a transaction, a tree operation's callback): the boundary "
                     "would wait for it forever"));
  }
  std::vector<std::pair<void*, std::function<void(void*)>>> reclaim;
  absl::Status failed;
  {
    std::lock_guard<std::mutex> l(advance_mu_);
    // In the failed mode nothing more can be recorded complete: the epoch stays as it is (its
    // guards never wait) and the error is returned at once.
    if (pool_.failed()) return pool_.health();
    AdvanceTimes times;
    times.start = std::chrono::steady_clock::now();
    const auto start = times.start;
    // 1. Close e: new guards wait until step 5. Epochs never overlap, so every change made in
    //    e+1 sees e complete and durable; a crash then fails at most the one epoch that ran.
    const uint64_t e = global_.load(std::memory_order_relaxed);
    global_.store((e + 1) | kClosing, std::memory_order_seq_cst);
    // 2. Wait for every guard of e to end (pairs with Guard's announce/re-check). With
    //    asymmetric fences, membarrier() makes each thread's announce visible before the scan
    //    (or makes its re-check see the closing mark).
    if (AsymmetricFences()) syscall(__NR_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED, 0, 0);
    std::vector<ThreadSlot*> slots = Slots();
    if (!WaitForGuards(e, slots, start + options_.max_guard_wait)) return pool_.health();
    times.guard_wait = std::chrono::steady_clock::now() - start;
    if (closing_hook_) closing_hook_(e);
    // 3. Write back everything dirtied in e.
    std::vector<Range> ranges;
    WriteBackEpoch(e, slots, ranges, times);
    // 4. e is complete, durably. Before this fence a crash rolls back e; after it, e is kept.
    //    In the pool's failed mode (a flush of this boundary or an earlier one failed) e is
    //    not recorded complete: the next open rolls it back, and needs e's log blocks and the
    //    objects retired in e for that, so step 5 releases and reclaims nothing.
    if (!pool_.failed()) PersistCompleted(e);
    failed = pool_.health();
    // 5. Open e+1, having released e's log blocks and collected its retired objects.
    OpenNextEpoch(e, slots, failed, reclaim);
    const auto opened = std::chrono::steady_clock::now();
    times.stall = opened - start;
    // 6. Run the reclaimers, still under advance_mu_: when an Advance returns, no reclaimer of
    //    an earlier advance is still running (an owner may then safely go away).
    for (auto& [obj, deleter] : reclaim) deleter(obj);
    times.reclaim = std::chrono::steady_clock::now() - opened;
    CountAdvance(ranges, reclaim.size(), times);
  }
  return failed;
}

bool Manager::WaitForGuards(uint64_t e, const std::vector<ThreadSlot*>& slots,
                            std::chrono::steady_clock::time_point give_up) {
  for (ThreadSlot* s : slots) {
    for (int spins = 0; s->epoch.load(std::memory_order_seq_cst) == e; ++spins) {
      if (spins <= 64) continue;
      std::this_thread::yield();
      if ((spins & 255) != 0 || std::chrono::steady_clock::now() < give_up) continue;
      // e cannot complete. Reopen it (nothing of e+1 has started: its guards were waiting)
      // and enter the failed mode: e's work is never recorded complete, the next open rolls
      // it back.
      pool_.health_state().Fail(
          absl::StrCat("epoch ", e, " cannot complete: a guard of it has been held for more than ",
                       options_.max_guard_wait.count(), " ms"));
      global_.store(e, std::memory_order_seq_cst);
      global_.notify_all();
      return false;
    }
  }
  return true;
}

void Manager::WriteBackEpoch(uint64_t e, const std::vector<ThreadSlot*>& slots,
                             std::vector<Range>& ranges, AdvanceTimes& times) {
  // No guard is open, so no list is being appended. A thread that tried to enter a guard
  // meanwhile may have claimed its own list and be writing it back (HelpFlush); every other
  // list is claimed and written back here.
  std::vector<ThreadSlot*> helped;
  for (ThreadSlot* s : slots) {
    if (!ClaimFlush(*s, e)) {
      helped.push_back(s);
      continue;
    }
    auto& d = s->dirty[e & 1];
    ranges.insert(ranges.end(), d.begin(), d.end());
    d.clear();
  }
  const auto sources_start = std::chrono::steady_clock::now();
  for (auto& [id, source] : flush_sources_) source(e, ranges);
  const auto flush_start = std::chrono::steady_clock::now();
  times.sources = flush_start - sources_start;
  FlushRanges(ranges);
  // The helpers' lines are durable once each has fenced its own flushes (a fence orders
  // only the calling thread's flushes); flush_done's release pairs with this acquire.
  for (ThreadSlot* s : helped) {
    for (int spins = 0; s->flush_done.load(std::memory_order_acquire) != e; ++spins) {
      if (spins > 64) std::this_thread::yield();
    }
  }
  times.flush = std::chrono::steady_clock::now() - flush_start;
}

void Manager::OpenNextEpoch(uint64_t e, const std::vector<ThreadSlot*>& slots,
                            const absl::Status& failed,
                            std::vector<std::pair<void*, std::function<void(void*)>>>& reclaim) {
  // Reclaim: e's log blocks will never be replayed, and objects retired in e can be held by no
  // guard (every guard of e has ended; guards of e+1 start after the retiring thread's unlink,
  // which happened inside its guard of e).
  for (ThreadSlot* s : slots) {
    if (!failed.ok()) break;
    log_->Release(s->log_cursor, e);
    auto& r = s->retired[e % 3];
    std::move(r.begin(), r.end(), std::back_inserter(reclaim));
    r.clear();
  }
  global_.store(e + 1, std::memory_order_seq_cst);
  global_.notify_all();  // guards sleeping in Guard() (pairs with their wait)
}

void Manager::CountAdvance(const std::vector<Range>& ranges, size_t reclaimed,
                           const AdvanceTimes& times) {
  uint64_t lines = 0;
  for (const Range& r : ranges) {
    auto a = reinterpret_cast<uintptr_t>(r.addr);
    lines += r.len == 0 ? 0 : (a + r.len - 1) / kCacheLine - a / kCacheLine + 1;
  }
  std::lock_guard<std::mutex> sl(stats_mu_);
  ++stats_.advances;
  stats_.lines_flushed += lines;
  stats_.ranges_flushed += ranges.size();
  stats_.boundary_time += times.stall;
  stats_.guard_wait_time += times.guard_wait;
  stats_.source_time += times.sources;
  stats_.flush_time += times.flush;
  stats_.reclaim_time += times.reclaim;
  stats_.reclaimed += reclaimed;
}

bool Manager::ClaimFlush(ThreadSlot& s, uint64_t e) {
  uint64_t claimed = s.flush_claim.load(std::memory_order_relaxed);
  return claimed < e && s.flush_claim.compare_exchange_strong(claimed, e);
}

void Manager::HelpFlush(ThreadSlot& s, uint64_t e) {
  // REQUIRES: the caller owns `s` and holds no guard; e is closing, so s.dirty[e & 1] is final.
  if (!ClaimFlush(s, e)) return;
  auto& d = s.dirty[e & 1];
  if (!d.empty()) persister().FlushBatch(kBoundaryHelp, d);  // flushes, then this thread's fence
  d.clear();
  {
    std::lock_guard<std::mutex> l(stats_mu_);
    ++stats_.helped_flushes;
  }
  s.flush_done.store(e, std::memory_order_release);  // pairs with WriteBackEpoch's acquire
}

absl::Status Manager::Sync() {
  // The caller holds no guard, so all its work so far ran in epochs <= e0.
  const uint64_t e0 = current();
  while (completed() < e0) {
    if (auto st = Advance(); !st.ok()) return st;
  }
  return absl::OkStatus();
}

void Manager::AdvancerLoop() {
  std::unique_lock<std::mutex> l(clock_mu_);
  while (!stopping_) {
    clock_cv_.wait_for(l, options_.interval, [this] { return stopping_ || advance_requested_; });
    if (stopping_) break;
    if (advance_requested_) {
      advance_requested_ = false;
      std::lock_guard<std::mutex> sl(stats_mu_);
      ++stats_.requested_advances;  // counted before the advance it starts
    }
    l.unlock();
    (void)Advance();
    l.lock();
  }
}

void Manager::RequestAdvance() {
  if (!clocked()) return;
  {
    std::lock_guard<std::mutex> l(clock_mu_);
    advance_requested_ = true;
  }
  clock_cv_.notify_all();
}

ManagerStats Manager::stats() const {
  std::lock_guard<std::mutex> l(stats_mu_);
  ManagerStats s = stats_;
  s.log_entries = log_->entries_written();
  s.advancer_cpu = ThreadCpuTime(advancer_);
  return s;
}

}  // namespace pmrt::epoch
