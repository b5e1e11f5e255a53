// The crash simulator: the `sim` persistence backend (part of the library pmrt_testing, the
// CMake component `testing`: testing/README.md).
//
// Model (docs/testing.md has the long form):
//   * W, the working copy: the memory the runtime loads and stores (Sim::working()).
//   * M, the media image: what has certainly persisted. M changes only when the runtime
//     flushes a line and then fences, or when a crash image "evicts" a line.
//   * A Flush snapshots each covered line of W (a legal value for the line to reach media).
//     A StoreHint snapshots a line after an ordering-sensitive in-line store (PCSO: each such
//     snapshot is a legal persisted prefix of the line's stores).
//   * A Fence is a crash point (subject to the crash-point policy), then every snapshot the
//     fencing thread flushed becomes part of M (a fence orders only its own thread's flushes).
//   * D, the dirty lines at a crash point: lines of W that differ from M or have recorded
//     versions. Pages of W are write-protected; the first store to a page marks it dirty.
//
// At a crash point the simulator builds crash images, each = M plus, for a chosen subset of D,
// one value each chosen line really held (a flush/hint snapshot or W's current content):
// nothing evicted, everything evicted, each dirty line alone kept / alone lost, all subsets
// when |D| <= exhaustive_max_lines (and each recorded version of each line), and random subsets
// with p in {0.1, 0.5, 0.9}. Every image is a state real x86 hardware (ADR, clwb + sfence)
// could leave behind.
//
// An image is a private copy-on-write mapping of M's memfd with the evicted lines patched in:
// building one costs O(evicted lines), and whatever recovery writes goes to private pages, which
// are dropped after the image (the mapping is the simulator's, reused by every image: a
// handler must neither keep it nor change its mapping), so no image copies the pool.
//
// Every image has a replay id (seed, fence number, image index); setting Options::replay (or
// PMRT_SIM_REPLAY=seed:fence:image) rebuilds exactly that image and no other. On an oracle
// failure the simulator shrinks the evicted set to a minimal failing one and reports it.
//
// Thread safety: OnFlush/OnFence/OnStoreHint may be called from several threads (one mutex).
// Crash images are built while the fencing thread holds that mutex; a multi-threaded workload
// must make the other threads quiescent (for example, by running them in lock step) if it
// wants their in-flight stores excluded from the image's W versions.
#ifndef PMRT_TESTING_SIM_H_
#define PMRT_TESTING_SIM_H_

#include <sys/uio.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "epoch/persist.h"

namespace pmrt {

struct SimReplayId {
  uint64_t seed = 0;
  uint64_t fence = 0;            // 1-based number of the fence at which the crash happened
  uint64_t image = 0;            // index of the image at that fence
  std::string ToString() const;  // "seed:fence:image"
  static absl::StatusOr<SimReplayId> Parse(std::string_view text);
};

class CrashImage;

class Sim final : public SimHooks {
 public:
  enum class CrashPoints {
    kEveryFence,  // every fence is a crash point
    kEveryNth,    // fences n*k + phase, phase drawn from the seed
    kRandom,      // each fence with probability `probability`, drawn from the seed
    kNone,        // no crash points (setup phases)
  };
  struct Options {
    uint64_t seed = 1;
    CrashPoints crash_points = CrashPoints::kEveryFence;
    uint64_t every_nth = 7;
    double probability = 0.1;
    int random_images = 6;              // random subsets per crash point
    int exhaustive_max_lines = 10;      // all 2^|D| subsets at or below this many dirty lines
    int max_single_line_images = 64;    // cap on the 2|D| single-line images per crash point
    uint64_t max_images = UINT64_MAX;   // stop making images after this many
    bool minimize_failures = true;      // shrink a failing evicted set before reporting it
    int max_failures = 1;               // stop making images after this many failures
    std::optional<SimReplayId> replay;  // build only this image (also PMRT_SIM_REPLAY)
    // The seam models the pmem backend (persist.h, SimOps): a pool over this simulator streams
    // records or writes them back with clwb as its RecordWrites says, so the record writers of
    // persistent memory (txn's one-word commit and streamed commits) run here with their code.
    bool pmem = false;
    // Cap on the images made at one crash point (0: none): the per-line version images and
    // random subsets beyond it are skipped, so that a run reaches more crash points.
    uint64_t max_images_per_point = 0;
  };
  // Called for every crash image. Return an error if the recovered state is wrong; the message
  // is reported with the image's replay id. The image's memory is discarded afterwards.
  using ImageHandler = std::function<absl::Status(CrashImage& image)>;

  struct Failure {
    SimReplayId id;
    std::string site;                       // the fence at which the crash happened
    std::string message;                    // the oracle's error
    std::vector<uint64_t> evicted_offsets;  // minimal evicted line offsets (pool-relative)
    std::string ToString() const;
  };
  struct Stats {
    uint64_t flushes = 0, fences = 0, store_hints = 0;
    uint64_t crash_points = 0, images = 0, max_dirty_lines = 0;
    // On the top-level simulator: the crash points of its nested ones (crashes during recovery
    // and the executions after it), which crash_points does not count.
    uint64_t nested_crash_points = 0;
  };

  // A top-level simulator over a fresh zeroed pool of `size` bytes (a multiple of 4096).
  static absl::StatusOr<std::unique_ptr<Sim>> Create(size_t size, Options options);
  ~Sim();
  Sim(const Sim&) = delete;
  Sim& operator=(const Sim&) = delete;

  void* working() const override { return working_; }
  size_t size() const override { return size_; }
  bool models_pmem() const override { return options_.pmem; }
  Persister persister() { return Persister(BackendKind::kSim, this); }
  const Options& options() const { return options_; }

  void SetHandler(ImageHandler handler) { handler_ = std::move(handler); }
  void SetCrashPoints(CrashPoints mode) { options_.crash_points = mode; }

  // Seam hooks (SimHooks, called through Persister).
  void OnFlush(const Site& site, const void* addr, size_t len) override;
  void OnFence(const Site& site) override;
  void OnStoreHint(const void* addr, size_t len) override;

  const Stats& stats() const { return stats_; }
  const std::vector<Failure>& failures() const { return failures_; }
  bool failed() const { return !failures_.empty(); }
  // Every site seen by this simulator (and its nested ones): id -> name.
  const std::map<uint32_t, std::string>& sites_seen() const { return *sites_seen_; }
  // "OK" or every failure, one per line, each with how to replay it.
  std::string Report() const;

 private:
  friend class CrashImage;
  using Line = std::array<uint8_t, kCacheLine>;
  struct LineVersions {
    std::vector<Line> versions;  // flush and hint snapshots since the line was last durable
    // Flushed, not yet fenced: per flushing thread, the index in versions of its last snapshot
    // (a fence makes durable only the calling thread's flushes, as sfence orders only its own).
    std::vector<std::pair<uint64_t, int>> pending;  // (ThreadKey(), index)
  };
  struct Choice {
    uint64_t line;
    int version;  // index into versions; -1 means W's current content
  };

  Sim(size_t size, Options options);
  absl::Status Init();
  absl::Status InitNested(const Sim& parent, const CrashImage& image);

  bool IsCrashPoint();
  std::vector<uint64_t> DirtyLines();
  const uint8_t* MediaLine(uint64_t line) const;
  const uint8_t* ChoiceBytes(const Choice& c) const;
  void CrashAt(const Site& site, const std::vector<uint64_t>& dirty);
  // The number of recorded versions of `line` (flush and store-hint snapshots).
  int VersionsOf(uint64_t line) const;
  // CrashAt's step 4: (index into `dirty`, version) for every recorded version of every dirty
  // line, or, under max_images_per_point with `index` images of the crash point run, a seeded
  // sample of them that leaves room for the random images of step 5.
  std::vector<std::pair<size_t, int>> VersionChoices(const std::vector<uint64_t>& dirty,
                                                     uint64_t index) const;
  // Builds the image for `evicted`, runs the handler; returns its status.
  absl::Status RunImage(const Site& site, uint64_t image_index, const std::vector<Choice>& evicted,
                        bool record_failure);
  void Minimize(const Site& site, uint64_t image_index, std::vector<Choice> evicted,
                Failure& failure);
  void ApplyPending(uint64_t thread);
  // The calling thread's key for pending flushes: unique for the process's life (a thread id
  // may be reused by a later thread, which must not inherit an exited thread's flushes).
  static uint64_t ThreadKey();
  void MarkPageDirty(size_t page);
  void ProtectCleanPages(const std::vector<uint64_t>& dirty);

  static void SegvHandler(int sig, void* info, void* ctx);
  void Track();
  void Untrack();

  uint8_t* ImageView();
  void RevertImage();

  const size_t size_;
  Options options_;
  ImageHandler handler_;
  std::recursive_mutex mu_;

  uint8_t* working_ = nullptr;
  bool owns_working_ = false;
  int media_fd_ = -1;
  uint8_t* media_ = nullptr;    // MAP_SHARED view of media_fd_
  bool media_writable_ = true;  // top level writes M in place; nested writes the overlay
  std::unordered_map<uint64_t, Line> overlay_;  // nested: lines of M that differ from media_fd_
  int depth_ = 0;
  // The crash images' mapping: MAP_PRIVATE of the media file, reused by every image (RevertImage).
  uint8_t* image_ = nullptr;
  int pagemap_fd_ = -1;  // /proc/self/pagemap (-1: unreadable; RevertImage drops every page)
  std::vector<uint64_t> pagemap_;
  pid_t pid_ = 0;   // the process whose pidfd_ it is
  int pidfd_ = -1;  // for process_madvise (-1: one madvise per range)
  std::vector<iovec> iov_;

  std::vector<std::atomic<uint64_t>> page_dirty_;  // bit per page of W: stored to since armed
  // Per thread, the lines it flushed since its last fence.
  std::unordered_map<uint64_t, std::vector<uint64_t>> pending_lines_;
  std::unordered_map<uint64_t, LineVersions> lines_;
  uint64_t fence_count_ = 0;
  uint64_t phase_ = 0;
  bool in_crash_ = false;
  Stats stats_;
  std::vector<Failure> failures_;
  std::shared_ptr<std::map<uint32_t, std::string>> sites_seen_;
  Sim* root_ = this;  // the top-level simulator (for the shared image budget)
};

// One crash image: a private, writable mapping of the simulated media. Valid only inside the
// handler call. Recovery runs on base(); nothing it writes reaches the simulator's media.
class CrashImage {
 public:
  void* base() const { return base_; }
  size_t size() const { return size_; }
  const SimReplayId& id() const { return id_; }
  int depth() const { return sim_->depth_; }
  size_t evicted_lines() const { return evicted_lines_; }

  // Runs `fn` with a nested simulator whose media is this image and whose working copy is
  // this image's memory: every fence `fn` issues through `nested.persister()` is a crash point
  // and `handler` sees the images (a crash during recovery, or during operations after it).
  // Returns the nested simulator's failures as an error.
  absl::Status RunNested(const Sim::Options& options, const std::function<void(Sim& nested)>& fn,
                         Sim::ImageHandler handler);

 private:
  friend class Sim;
  CrashImage(Sim* sim, void* base, size_t size, SimReplayId id, size_t evicted_lines,
             const std::vector<std::pair<uint64_t, const uint8_t*>>* patched)
      : sim_(sim),
        base_(base),
        size_(size),
        id_(id),
        evicted_lines_(evicted_lines),
        patched_(patched) {}
  Sim* sim_;
  void* base_;
  size_t size_;
  SimReplayId id_;
  size_t evicted_lines_;
  const std::vector<std::pair<uint64_t, const uint8_t*>>* patched_;
};

}  // namespace pmrt

#endif  // PMRT_TESTING_SIM_H_
