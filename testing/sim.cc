#include "testing/sim.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "base/random.h"

namespace pmrt {
namespace {

constexpr size_t kPage = 4096;
constexpr size_t kLinesPerPage = kPage / kCacheLine;

uint64_t Hash3(uint64_t a, uint64_t b, uint64_t c) {
  return SplitMix64(SplitMix64(SplitMix64(a) ^ b) ^ c);
}

// The generator of image construction: xorshift64 over a splitmix seed.
XorShift64 Rng(uint64_t seed) { return XorShift64{SplitMix64(seed) | 1}; }

// Tracked working copies, read by the SIGSEGV handler without locks.
constexpr int kMaxTracked = 32;
std::atomic<Sim*> g_tracked[kMaxTracked];
struct sigaction g_previous_segv;
std::once_flag g_install_once;

absl::StatusOr<int> MakeMemfd(const char* name, size_t size) {
  int fd = memfd_create(name, MFD_CLOEXEC);
  if (fd < 0) return absl::InternalError(absl::StrCat("memfd_create: ", std::strerror(errno)));
  if (ftruncate(fd, static_cast<off_t>(size)) != 0) {
    close(fd);
    return absl::ResourceExhaustedError(
        absl::StrCat("sim: cannot size a ", size, "-byte memfd: ", std::strerror(errno)));
  }
  return fd;
}

}  // namespace

std::string SimReplayId::ToString() const { return absl::StrCat(seed, ":", fence, ":", image); }

absl::StatusOr<SimReplayId> SimReplayId::Parse(std::string_view text) {
  std::vector<absl::string_view> parts =
      absl::StrSplit(absl::string_view(text.data(), text.size()), ':');
  SimReplayId id;
  if (parts.size() != 3 || !absl::SimpleAtoi(parts[0], &id.seed) ||
      !absl::SimpleAtoi(parts[1], &id.fence) || !absl::SimpleAtoi(parts[2], &id.image)) {
    return absl::InvalidArgumentError(absl::StrCat("bad simulator replay id '", std::string(text),
                                                   "' (expected seed:fence:image)"));
  }
  return id;
}

std::string Sim::Failure::ToString() const {
  return absl::StrCat("crash at fence ", id.fence, " (site ", site, "), image ", id.image, ": ",
                      message, "\n  replay alone with PMRT_SIM_REPLAY=", id.ToString(),
                      "\n  minimal evicted lines at pool offsets: [",
                      absl::StrJoin(evicted_offsets, ", "), "]");
}

Sim::Sim(size_t size, Options options)
    : size_(size),
      options_(std::move(options)),
      page_dirty_((size + kPage * 64 - 1) / (kPage * 64)),
      sites_seen_(std::make_shared<std::map<uint32_t, std::string>>()) {}

absl::StatusOr<std::unique_ptr<Sim>> Sim::Create(size_t size, Options options) {
  if (size == 0 || size % kPage != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("sim: pool size ", size, " is not a positive multiple of 4096"));
  }
  if (!options.replay.has_value()) {
    if (const char* r = std::getenv("PMRT_SIM_REPLAY"); r != nullptr && *r != '\0') {
      auto id = SimReplayId::Parse(r);
      if (!id.ok()) return id.status();
      options.replay = *id;
    }
  }
  if (options.replay.has_value()) options.seed = options.replay->seed;
  std::unique_ptr<Sim> sim(new Sim(size, std::move(options)));
  auto st = sim->Init();
  if (!st.ok()) return st;
  return sim;
}

absl::Status Sim::Init() {
  auto wfd = MakeMemfd("pmrt-sim-working", size_);
  if (!wfd.ok()) return wfd.status();
  void* w = mmap(nullptr, size_, PROT_READ | PROT_WRITE, MAP_SHARED, *wfd, 0);
  close(*wfd);
  if (w == MAP_FAILED) return absl::InternalError("sim: mmap of the working copy failed");
  working_ = static_cast<uint8_t*>(w);
  owns_working_ = true;
  auto mfd = MakeMemfd("pmrt-sim-media", size_);
  if (!mfd.ok()) return mfd.status();
  media_fd_ = *mfd;
  void* m = mmap(nullptr, size_, PROT_READ | PROT_WRITE, MAP_SHARED, media_fd_, 0);
  if (m == MAP_FAILED) return absl::InternalError("sim: mmap of the media image failed");
  media_ = static_cast<uint8_t*>(m);
  phase_ = SplitMix64(options_.seed) % std::max<uint64_t>(options_.every_nth, 1);
  Track();
  return absl::OkStatus();
}

absl::Status Sim::InitNested(const Sim& parent, const CrashImage& image) {
  depth_ = parent.depth_ + 1;
  root_ = parent.root_;
  sites_seen_ = parent.sites_seen_;
  media_fd_ = -1;  // borrowed: parent's media_fd_ stays open while we run
  media_ = parent.media_;
  media_writable_ = false;
  overlay_ = parent.overlay_;
  for (const auto& [line, bytes] : *image.patched_) {
    std::memcpy(overlay_[line].data(), bytes, kCacheLine);
  }
  working_ = static_cast<uint8_t*>(image.base());
  owns_working_ = false;
  phase_ = SplitMix64(options_.seed) % std::max<uint64_t>(options_.every_nth, 1);
  Track();
  return absl::OkStatus();
}

Sim::~Sim() {
  Untrack();
  if (owns_working_ && working_ != nullptr) munmap(working_, size_);
  if (media_writable_ && media_ != nullptr) munmap(media_, size_);
  if (image_ != nullptr) munmap(image_, size_);
  if (pagemap_fd_ >= 0) close(pagemap_fd_);
  if (pidfd_ >= 0) close(pidfd_);
  if (media_fd_ >= 0 && depth_ == 0) close(media_fd_);
}

// ---- dirty-page tracking ----------------------------------------------------------------------

void Sim::SegvHandler(int sig, void* raw_info, void* ctx) {
  auto* info = static_cast<siginfo_t*>(raw_info);
  auto* addr = static_cast<uint8_t*>(info->si_addr);
  for (auto& slot : g_tracked) {
    Sim* s = slot.load(std::memory_order_acquire);
    if (s == nullptr || addr < s->working_ || addr >= s->working_ + s->size_) continue;
    size_t page = static_cast<size_t>(addr - s->working_) / kPage;
    s->MarkPageDirty(page);
    mprotect(s->working_ + page * kPage, kPage, PROT_READ | PROT_WRITE);
    return;
  }
  // Not ours: hand over to whoever was installed before us (ASan, gtest, or the default).
  if (g_previous_segv.sa_flags & SA_SIGINFO) {
    g_previous_segv.sa_sigaction(sig, info, ctx);
    return;
  }
  if (g_previous_segv.sa_handler == SIG_IGN) return;
  if (g_previous_segv.sa_handler != SIG_DFL) {
    g_previous_segv.sa_handler(sig);
    return;
  }
  signal(SIGSEGV, SIG_DFL);  // re-executing the faulting access now kills the process
}

void Sim::MarkPageDirty(size_t page) {
  page_dirty_[page / 64].fetch_or(uint64_t{1} << (page % 64), std::memory_order_relaxed);
}

void Sim::Track() {
  std::call_once(g_install_once, [] {
    struct sigaction sa {};
    sa.sa_sigaction = [](int sig, siginfo_t* info, void* ctx) { SegvHandler(sig, info, ctx); };
    sa.sa_flags = SA_SIGINFO | SA_NODEFER;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGSEGV, &sa, &g_previous_segv);
  });
  for (auto& slot : g_tracked) {
    Sim* expected = nullptr;
    if (slot.compare_exchange_strong(expected, this, std::memory_order_acq_rel)) {
      // Pages start clean (W == M); the first store to each one faults once and marks it.
      mprotect(working_, size_, PROT_READ);
      return;
    }
  }
  std::fprintf(stderr, "pmrt sim: more than %d simulators alive at once\n", kMaxTracked);
  std::abort();
}

void Sim::Untrack() {
  for (auto& slot : g_tracked) {
    Sim* expected = this;
    if (slot.compare_exchange_strong(expected, nullptr, std::memory_order_acq_rel)) {
      if (working_ != nullptr) mprotect(working_, size_, PROT_READ | PROT_WRITE);
      return;
    }
  }
}

// ---- hooks ------------------------------------------------------------------------------------

void Sim::OnFlush(const Site& site, const void* addr, size_t len) {
  std::lock_guard<std::recursive_mutex> l(mu_);
  ++stats_.flushes;
  (*sites_seen_)[site.id] = site.name;
  auto* p = static_cast<const uint8_t*>(addr);
  if (len == 0 || p < working_ || p + len > working_ + size_) return;  // not this pool
  const uint64_t self = ThreadKey();
  uint64_t first = static_cast<uint64_t>(p - working_) / kCacheLine;
  uint64_t last = static_cast<uint64_t>(p + len - 1 - working_) / kCacheLine;
  for (uint64_t line = first; line <= last; ++line) {
    const uint8_t* w = working_ + line * kCacheLine;
    auto it = lines_.find(line);
    if (it == lines_.end()) {
      size_t page = line / kLinesPerPage;
      bool page_dirty =
          page_dirty_[page / 64].load(std::memory_order_relaxed) & (uint64_t{1} << (page % 64));
      // A line of a clean page equals M: flushing it changes nothing, so record nothing.
      if (!page_dirty || std::memcmp(w, MediaLine(line), kCacheLine) == 0) continue;
      it = lines_.emplace(line, LineVersions{}).first;
    }
    LineVersions& lv = it->second;
    Line snap;
    std::memcpy(snap.data(), w, kCacheLine);
    if (lv.versions.empty() || lv.versions.back() != snap) lv.versions.push_back(snap);
    const int newest = static_cast<int>(lv.versions.size()) - 1;
    auto mine = std::find_if(lv.pending.begin(), lv.pending.end(),
                             [&](const auto& e) { return e.first == self; });
    if (mine == lv.pending.end()) {
      lv.pending.emplace_back(self, newest);
      pending_lines_[self].push_back(line);
    } else {
      mine->second = newest;
    }
  }
}

void Sim::OnStoreHint(const void* addr, size_t len) {
  std::lock_guard<std::recursive_mutex> l(mu_);
  ++stats_.store_hints;
  auto* p = static_cast<const uint8_t*>(addr);
  if (len == 0 || p < working_ || p + len > working_ + size_) return;
  uint64_t first = static_cast<uint64_t>(p - working_) / kCacheLine;
  uint64_t last = static_cast<uint64_t>(p + len - 1 - working_) / kCacheLine;
  for (uint64_t line = first; line <= last; ++line) {
    Line snap;
    std::memcpy(snap.data(), working_ + line * kCacheLine, kCacheLine);
    auto& versions = lines_[line].versions;
    if (versions.empty() || versions.back() != snap) versions.push_back(snap);
  }
}

void Sim::OnFence(const Site& site) {
  std::lock_guard<std::recursive_mutex> l(mu_);
  ++stats_.fences;
  ++fence_count_;
  (*sites_seen_)[site.id] = site.name;
  if (!in_crash_ && IsCrashPoint()) {
    in_crash_ = true;
    CrashAt(site, DirtyLines());
    in_crash_ = false;
  }
  ApplyPending(ThreadKey());
}

uint64_t Sim::ThreadKey() {
  static std::atomic<uint64_t> next{0};
  thread_local const uint64_t key = ++next;
  return key;
}

void Sim::ApplyPending(uint64_t thread) {
  auto mine = pending_lines_.find(thread);
  if (mine == pending_lines_.end()) return;
  for (uint64_t line : mine->second) {
    auto it = lines_.find(line);
    if (it == lines_.end()) continue;
    LineVersions& lv = it->second;
    auto p = std::find_if(lv.pending.begin(), lv.pending.end(),
                          [&](const auto& e) { return e.first == thread; });
    if (p == lv.pending.end()) continue;  // superseded by another thread's newer snapshot
    const int durable = p->second;
    const Line& v = lv.versions[durable];
    if (media_writable_) {
      std::memcpy(media_ + line * kCacheLine, v.data(), kCacheLine);
    } else {
      overlay_[line] = v;
    }
    // The line can never go back to a version older than the one now durable: other threads'
    // pending snapshots at or before it are superseded, the later ones keep their place.
    lv.versions.erase(lv.versions.begin(), lv.versions.begin() + durable + 1);
    std::erase_if(lv.pending, [&](const auto& e) { return e.second <= durable; });
    for (auto& e : lv.pending) e.second -= durable + 1;
    if (lv.versions.empty() && lv.pending.empty()) lines_.erase(it);
  }
  pending_lines_.erase(mine);
}

bool Sim::IsCrashPoint() {
  if (root_->stats_.images >= options_.max_images) return false;
  if (static_cast<int>(failures_.size()) >= options_.max_failures) return false;
  if (options_.replay.has_value() && depth_ == 0) return fence_count_ == options_.replay->fence;
  switch (options_.crash_points) {
    case CrashPoints::kEveryFence:
      return true;
    case CrashPoints::kEveryNth:
      return (fence_count_ + phase_) % std::max<uint64_t>(options_.every_nth, 1) == 0;
    case CrashPoints::kRandom:
      return Rng(Hash3(options_.seed, fence_count_, 0xC0FFEE)).Uniform() < options_.probability;
    case CrashPoints::kNone:
      return false;
  }
  return false;
}

const uint8_t* Sim::MediaLine(uint64_t line) const {
  if (!overlay_.empty()) {
    auto it = overlay_.find(line);
    if (it != overlay_.end()) return it->second.data();
  }
  return media_ + line * kCacheLine;
}

const uint8_t* Sim::ChoiceBytes(const Choice& c) const {
  if (c.version < 0) return working_ + c.line * kCacheLine;
  return lines_.at(c.line).versions[c.version].data();
}

std::vector<uint64_t> Sim::DirtyLines() {
  std::vector<uint64_t> dirty;
  for (size_t w = 0; w < page_dirty_.size(); ++w) {
    uint64_t bits = page_dirty_[w].load(std::memory_order_relaxed);
    while (bits != 0) {
      size_t page = w * 64 + static_cast<size_t>(__builtin_ctzll(bits));
      bits &= bits - 1;
      uint8_t* page_addr = working_ + page * kPage;
      // Re-arm first, then compare: a store racing with us after this point faults and marks
      // the page dirty again, so no store can slip between the comparison and the protection.
      page_dirty_[page / 64].fetch_and(~(uint64_t{1} << (page % 64)), std::memory_order_relaxed);
      mprotect(page_addr, kPage, PROT_READ);
      bool any = false;
      for (size_t i = 0; i < kLinesPerPage; ++i) {
        uint64_t line = page * kLinesPerPage + i;
        if (std::memcmp(page_addr + i * kCacheLine, MediaLine(line), kCacheLine) != 0 ||
            lines_.count(line) != 0) {
          dirty.push_back(line);
          any = true;
        }
      }
      if (any) {
        MarkPageDirty(page);
        mprotect(page_addr, kPage, PROT_READ | PROT_WRITE);
      }
    }
  }
  // Lines with recorded versions on pages that went clean again (rare) are dirty too.
  for (const auto& [line, lv] : lines_) {
    size_t page = line / kLinesPerPage;
    if (!(page_dirty_[page / 64].load(std::memory_order_relaxed) & (uint64_t{1} << (page % 64))))
      dirty.push_back(line);
  }
  std::sort(dirty.begin(), dirty.end());
  dirty.erase(std::unique(dirty.begin(), dirty.end()), dirty.end());
  return dirty;
}

// ---- crash images -----------------------------------------------------------------------------

int Sim::VersionsOf(uint64_t line) const {
  auto it = lines_.find(line);
  return it == lines_.end() ? 0 : static_cast<int>(it->second.versions.size());
}

std::vector<std::pair<size_t, int>> Sim::VersionChoices(const std::vector<uint64_t>& dirty,
                                                        uint64_t index) const {
  std::vector<std::pair<size_t, int>> versions;
  for (size_t i = 0; i < dirty.size(); ++i) {
    for (int v = 0; v < VersionsOf(dirty[i]); ++v) versions.emplace_back(i, v);
  }
  if (const uint64_t cap = options_.max_images_per_point; cap != 0) {
    const uint64_t left = cap > index + static_cast<uint64_t>(options_.random_images)
                              ? cap - index - static_cast<uint64_t>(options_.random_images)
                              : 0;
    if (2 * versions.size() > left) {
      XorShift64 pick = Rng(Hash3(options_.seed, fence_count_, 0x7E55));
      for (size_t k = 0; k < left / 2; ++k) {  // a partial Fisher-Yates shuffle
        std::swap(versions[k], versions[k + pick.Below(versions.size() - k)]);
      }
      versions.resize(left / 2);
    }
  }
  return versions;
}

void Sim::CrashAt(const Site& site, const std::vector<uint64_t>& dirty) {
  ++stats_.crash_points;
  if (root_ != this) ++root_->stats_.nested_crash_points;
  stats_.max_dirty_lines = std::max<uint64_t>(stats_.max_dirty_lines, dirty.size());
  uint64_t index = 0;
  // Runs one image unless the budget is spent; false stops the crash point.
  auto run = [&](std::vector<Choice> evicted) {
    if (root_->stats_.images >= options_.max_images ||
        static_cast<int>(failures_.size()) >= options_.max_failures ||
        (options_.max_images_per_point != 0 && index >= options_.max_images_per_point)) {
      return false;
    }
    uint64_t i = index++;
    if (options_.replay.has_value() && depth_ == 0 && options_.replay->image != i) return true;
    (void)RunImage(site, i, evicted, /*record_failure=*/true);
    return true;
  };
  const size_t n = dirty.size();
  std::vector<Choice> all;
  for (uint64_t l : dirty) all.push_back({l, -1});

  // 1. Nothing evicted (a maximally lazy cache), 2. everything evicted (eADR, process kill).
  if (!run({}) || (n > 0 && !run(all))) return;
  if (n == 0) return;
  // 3. Every subset when few lines are dirty, else each line alone kept and alone lost.
  if (n <= static_cast<size_t>(options_.exhaustive_max_lines)) {
    for (uint64_t mask = 1; mask + 1 < (uint64_t{1} << n); ++mask) {
      std::vector<Choice> ev;
      for (size_t i = 0; i < n; ++i)
        if (mask & (uint64_t{1} << i)) ev.push_back({dirty[i], -1});
      if (!run(std::move(ev))) return;
    }
  } else {
    XorShift64 pick = Rng(Hash3(options_.seed, fence_count_, 0x5EED));
    size_t count = std::min<size_t>(n, options_.max_single_line_images);
    for (size_t k = 0; k < count; ++k) {
      size_t i = count == n ? k : pick.Below(n);
      std::vector<Choice> without = all;
      without.erase(without.begin() + static_cast<ptrdiff_t>(i));
      if (!run({{dirty[i], -1}}) || !run(std::move(without))) return;
    }
  }
  // 4. Every recorded version of every line (flush and store-hint snapshots), alone over M and
  //    over W: this is what exposes a wrong store order inside one line. Under a cap per crash
  //    point (max_images_per_point), a seeded sample of them that leaves room for step 5.
  const std::vector<std::pair<size_t, int>> versions = VersionChoices(dirty, index);
  for (const auto& [i, v] : versions) {
    std::vector<Choice> over_w = all;
    over_w[i].version = v;
    if (!run({{dirty[i], v}}) || !run(std::move(over_w))) return;
  }
  // 5. Random subsets, each chosen line taking a random one of its values.
  static constexpr double kP[] = {0.1, 0.5, 0.9};
  for (int r = 0; r < options_.random_images; ++r) {
    XorShift64 rng = Rng(Hash3(options_.seed, fence_count_, 0xA11CE + static_cast<uint64_t>(r)));
    std::vector<Choice> ev;
    for (uint64_t l : dirty) {
      if (rng.Uniform() >= kP[r % 3]) continue;
      int nv = VersionsOf(l);
      ev.push_back({l, static_cast<int>(rng.Below(static_cast<uint64_t>(nv) + 1)) - 1});
    }
    if (!run(std::move(ev))) return;
  }
}

absl::Status Sim::RunImage(const Site& site, uint64_t image_index,
                           const std::vector<Choice>& evicted, bool record_failure) {
  ++root_->stats_.images;
  if (root_ != this) ++stats_.images;
  uint8_t* img = ImageView();
  std::vector<std::pair<uint64_t, const uint8_t*>> patched;
  patched.reserve(overlay_.size() + evicted.size());
  for (const auto& [line, bytes] : overlay_) {
    std::memcpy(img + line * kCacheLine, bytes.data(), kCacheLine);
    patched.emplace_back(line, bytes.data());
  }
  for (const Choice& c : evicted) {
    const uint8_t* bytes = ChoiceBytes(c);
    std::memcpy(img + c.line * kCacheLine, bytes, kCacheLine);
    patched.emplace_back(c.line, bytes);
  }
  CrashImage image(this, img, size_, {options_.seed, fence_count_, image_index}, evicted.size(),
                   &patched);
  absl::Status st;
  {
    // The image is reverted however the handler leaves (a test's exception included).
    const absl::Cleanup revert = [this] { RevertImage(); };
    st = handler_ ? handler_(image) : absl::OkStatus();
  }
  if (!st.ok() && record_failure) {
    Failure f{image.id(), site.name, std::string(st.message()), {}};
    if (options_.minimize_failures) {
      Minimize(site, image_index, evicted, f);
    } else {
      for (const Choice& c : evicted) f.evicted_offsets.push_back(c.line * kCacheLine);
    }
    failures_.push_back(std::move(f));
  }
  return st;
}

// The images are one MAP_PRIVATE mapping of the media file, made once: a page no image has written
// is the file's own page and shows the media as it is now (the simulator writes the media through
// its MAP_SHARED view), so the pages recovery only reads stay mapped from one image to the next
// instead of faulting in again for each (RevertImage drops the pages an image wrote).
uint8_t* Sim::ImageView() {
  if (image_ != nullptr) return image_;
  void* m = mmap(nullptr, size_, PROT_READ | PROT_WRITE, MAP_PRIVATE,
                 depth_ == 0 ? media_fd_ : root_->media_fd_, 0);
  if (m == MAP_FAILED) {
    std::perror("pmrt sim: mmap of the crash images");
    std::abort();
  }
  image_ = static_cast<uint8_t*>(m);
  // The pagemap has an entry per system page; on a kernel whose pages are not kPage every page
  // is dropped instead.
  if (sysconf(_SC_PAGESIZE) == static_cast<long>(kPage)) {
    pagemap_fd_ = open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
  }
  pid_ = getpid();
  pidfd_ = static_cast<int>(syscall(SYS_pidfd_open, pid_, 0u));
  return image_;
}

// Makes the image the media again: every page an image wrote (the patched lines, recovery's
// writes) is a private copy, which MADV_DONTNEED drops, so the page shows the media file again.
// The private copies are the pages that /proc/self/pagemap lists as present and not a file page
// (or as swapped out); without the pagemap every page is dropped. The ranges go to one
// process_madvise call where the kernel takes it (one TLB shootdown for all of them, not one per
// range: the other threads of the suite keep this address space live on the other cores), else
// to one madvise each. A forked child (whose pagemap and pidfd descriptors are its parent's) drops
// every page.
void Sim::RevertImage() {
  const size_t pages = size_ / kPage;
  const bool forked = getpid() != pid_;
  constexpr uint64_t kPresent = uint64_t{1} << 63, kSwapped = uint64_t{1} << 62,
                     kFilePage = uint64_t{1} << 61;
  auto private_copy = [&](size_t p) {
    const uint64_t e = pagemap_[p];
    return (e & kSwapped) != 0 || ((e & kPresent) != 0 && (e & kFilePage) == 0);
  };
  pagemap_.resize(pages);
  const auto bytes = static_cast<ssize_t>(pages * sizeof(uint64_t));
  const auto at =
      static_cast<off_t>(reinterpret_cast<uintptr_t>(image_) / kPage * sizeof(uint64_t));
  if (forked || pagemap_fd_ < 0 ||
      pread(pagemap_fd_, pagemap_.data(), static_cast<size_t>(bytes), at) != bytes) {
    if (madvise(image_, size_, MADV_DONTNEED) != 0) std::abort();
    return;
  }
  iov_.clear();
  for (size_t p = 0; p < pages;) {
    if (!private_copy(p)) {
      ++p;
      continue;
    }
    size_t end = p + 1;
    while (end < pages && private_copy(end)) ++end;
    iov_.push_back({image_ + p * kPage, (end - p) * kPage});
    p = end;
  }
  if (iov_.empty()) return;
  if (pidfd_ >= 0 && iov_.size() <= IOV_MAX) {
    size_t total = 0;
    for (const iovec& v : iov_) total += v.iov_len;
    const long done =
        syscall(SYS_process_madvise, pidfd_, iov_.data(), iov_.size(), MADV_DONTNEED, 0u);
    if (done == static_cast<long>(total)) return;
    if (done < 0 && errno == EINVAL) {  // a kernel without it for MADV_DONTNEED: stop asking
      close(pidfd_);
      pidfd_ = -1;
    }
  }
  for (const iovec& v : iov_)
    if (madvise(v.iov_base, v.iov_len, MADV_DONTNEED) != 0) std::abort();
}

void Sim::Minimize(const Site& site, uint64_t image_index, std::vector<Choice> evicted,
                   Failure& failure) {
  // Greedy one-at-a-time removal: keep dropping evicted lines while the image still fails.
  int budget = 256;
  for (size_t i = 0; i < evicted.size() && budget > 0;) {
    std::vector<Choice> smaller = evicted;
    smaller.erase(smaller.begin() + static_cast<ptrdiff_t>(i));
    --budget;
    --root_->stats_.images;  // minimization images are not counted against the budget
    if (!RunImage(site, image_index, smaller, /*record_failure=*/false).ok()) {
      evicted = std::move(smaller);
    } else {
      ++i;
    }
  }
  for (const Choice& c : evicted) failure.evicted_offsets.push_back(c.line * kCacheLine);
}

std::string Sim::Report() const {
  if (failures_.empty()) return "OK";
  std::string out;
  for (const auto& f : failures_) absl::StrAppend(&out, f.ToString(), "\n");
  return out;
}

// ---- nested simulation ------------------------------------------------------------------------

absl::Status CrashImage::RunNested(const Sim::Options& options,
                                   const std::function<void(Sim& nested)>& fn,
                                   Sim::ImageHandler handler) {
  Sim::Options o = options;
  o.replay.reset();
  o.seed = Hash3(sim_->options_.seed, id_.fence, id_.image);
  std::unique_ptr<Sim> nested(new Sim(size_, o));
  auto st = nested->InitNested(*sim_, *this);
  if (!st.ok()) return st;
  nested->SetHandler(std::move(handler));
  fn(*nested);
  if (nested->failed()) {
    return absl::InternalError(
        absl::StrCat("nested crash (depth ", nested->depth_, ") failed: ", nested->Report()));
  }
  return absl::OkStatus();
}

}  // namespace pmrt
