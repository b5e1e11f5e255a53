// PoolView: a pool opened for inspection by the operator subcommands of the `pmrt` tool (info,
// check, dump; docs/tool.md), and the two things they compute from it: a PoolReport (what
// `pmrt info` prints) and a CheckReport (what `pmrt check` finds).
//
//   auto view = pmrt::tools::PoolView::Open("/dev/shm/kv.pool", "pmrt");
//   if (!view.ok()) ...                       // one line naming the file; nothing was written
//   PoolReport r = (*view)->Report();
//   CheckReport c = (*view)->Check();          // c.problems empty: healthy
//
// Opening is the runtime's ordinary open on a private (copy-on-write) mapping of the file
// (PoolOptions::private_mapping): Pool::Open (validates the header and state page), then, only
// for the layers the pool already holds, epoch::Manager::Open (which recovers: it records the
// epochs a crash left unfinished as failed and replays their external undo log),
// alloc::Heap::Open (rolls the heap back to the same point), txn::Engine::Open when the pool
// has a transaction directory (replays committed transactions) and, for a key-value pool
// (layout "pmrt", tools/kv_store.h), the durable Masstree named by the root object; for a
// runtime's pool (layout "pmrt-runtime", runtime/runtime.h), the catalog of named indexes
// (opened before the engine, whose recovery replays the committed transactions' index
// operations into them) and the index named by `index`. Every write of that recovery stays in
// this process's memory: the view shows the pool as the next writing open will recover it, and
// the file is left byte-identical, whether the open succeeds, fails or needs recovery (the next
// program that writes the pool recovers it for real). A layer the pool does not hold yet (a
// pool fresh from `pmrt create`, or one of another layout whose application does not use the
// heap) is left uninitialized, even in memory. The background epoch advancer is not started.
//
// Thread safety: none; a PoolView is used by one thread, and holds the pool's lock (flock), so
// no other process changes the pool while it is open.
#ifndef PMRT_TOOLS_POOL_VIEW_H_
#define PMRT_TOOLS_POOL_VIEW_H_

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "alloc/allocator.h"
#include "ds/durable_masstree.h"
#include "epoch/epoch.h"
#include "epoch/pool.h"
#include "txn/txn.h"

namespace pmrt::tools {

using EpochRanges = std::vector<std::pair<uint64_t, uint64_t>>;

// What `pmrt info` shows. Sections that the pool does not hold are marked absent.
struct PoolReport {
  // Header and state page.
  std::string path, layout, uuid, backend;
  uint32_t format_major = 0, format_minor = 0;
  uint64_t size = 0, create_time_ns = 0, open_count = 0;
  uint64_t created_size = 0;   // the header's size; less than `size` once the pool has grown
  bool clean_shutdown = true;  // the previous run closed the pool
  struct Region {
    const char* name;
    uint64_t offset, size;
  };
  std::vector<Region> regions;

  // Epoch layer (has_epochs: the epoch area is initialized).
  bool has_epochs = false;
  uint64_t completed_before = 0;  // the completed epoch on media before this open
  uint64_t current = 0, completed = 0, execution_first = 0;
  EpochRanges failed;          // every failed range recorded so far
  EpochRanges failed_at_open;  // those this open added (recovery)
  uint64_t log_entries_replayed = 0;
  uint64_t log_blocks_total = 0, log_blocks_free = 0, log_block_size = 0;

  // Heap (has_heap: the heap region is formatted).
  bool has_heap = false;
  alloc::HeapStats heap;

  // Transactions (has_txn: the pool has a transaction directory, recovered at this open).
  bool has_txn = false;
  uint64_t txn_directory = 0;

  // A runtime's pool: its named indexes (name, keys), and the one shown as the tree below.
  bool runtime = false;
  std::vector<std::pair<std::string, uint64_t>> indexes;
  std::string index;
  // Key-value tree (kv: the layout is the key-value layout; has_tree: it holds a tree, or the
  // runtime's pool has the index asked for).
  bool kv = false, has_tree = false;
  uint64_t tree_descriptor = 0;
  uint64_t keys = 0;
  ds::TreeShape shape;
  std::string tree_error;  // non-empty: the tree failed its structural check (run pmrt check)
};

// What `pmrt check` found. Healthy when `problems` is empty.
struct CheckReport {
  std::vector<std::string> problems;  // each names what and where (section, offset, key)
  std::vector<std::string> passed;    // the checks that ran and passed, for the report
  std::vector<std::string> skipped;   // the checks that could not run, and why
  bool healthy() const { return problems.empty(); }
};

class PoolView {
 public:
  // Opens the pool at `path` with layout `layout` as described above. Errors are those of
  // Pool::Open (kNotFound, kPermissionDenied, kFailedPrecondition for another layout, a newer
  // format or a pool in use, kDataLoss for a corrupt header or state page) and those of the
  // recovery of each layer (kDataLoss: corrupt epoch area, heap metadata or tree descriptor),
  // each naming the file.
  // `index`: for a runtime's pool, the named index to show as the tree (none when empty, unless
  // the pool has exactly one); kNotFound when it has no such index. `writable` (`pmrt grow`):
  // the view is opened on a shared mapping, and its recovery reaches the file, after the same
  // open on a private mapping has succeeded (so a pool it refuses is still left byte-identical).
  static absl::StatusOr<std::unique_ptr<PoolView>> Open(const std::string& path,
                                                        const std::string& layout,
                                                        const std::string& index = "",
                                                        bool writable = false);
  ~PoolView();
  PoolView(const PoolView&) = delete;
  PoolView& operator=(const PoolView&) = delete;

  // Reads everything `pmrt info` shows (for a key-value pool this walks the whole tree).
  PoolReport Report() const;
  // The deep check of `pmrt check` (docs/tool.md lists what it checks).
  CheckReport Check() const;

  Pool& pool() const { return *pool_; }
  // Null when the pool holds no such layer (see above).
  epoch::Manager* epochs() const { return epochs_.get(); }
  alloc::Heap* heap() const { return heap_.get(); }
  ds::DurableMasstree* tree() const { return tree_.get(); }
  bool kv() const { return kv_; }
  bool runtime() const { return runtime_; }

  // Closes the layers in reverse order and the pool; the first error.
  absl::Status Close();

 private:
  PoolView() = default;
  absl::Status OpenLayers();
  absl::Status OpenTree();
  absl::Status OpenRuntime();
  void CheckIndexes(CheckReport& r) const;
  void CheckEpochs(CheckReport& r) const;
  void CheckHeapAndTree(CheckReport& r) const;

  std::unique_ptr<Pool> pool_;
  std::unique_ptr<epoch::Manager> epochs_;
  std::unique_ptr<alloc::Heap> heap_;
  std::unique_ptr<txn::Engine> txn_;
  std::unique_ptr<ds::DurableMasstree> catalog_;  // a runtime's pool
  std::unique_ptr<ds::DurableMasstree> tree_;
  bool kv_ = false;
  bool runtime_ = false;
  std::string index_;
  uint64_t completed_before_ = 0;
  uint64_t open_count_ = 0;  // the file's open count
  EpochRanges failed_before_;
};

// Exit statuses of the operator subcommands (docs/tool.md).
inline constexpr int kExitOk = 0;
inline constexpr int kExitFailed = 1;  // a corrupt pool, an unhealthy check, a failed command
inline constexpr int kExitUsage = 2;
inline constexpr int kExitCannotOpen = 3;  // missing, unreadable, in use, other layout, newer

// The exit status for an error of PoolView::Open: a corrupt pool (kDataLoss, kInternal) is
// kExitFailed, anything else that keeps the pool from being opened is kExitCannotOpen.
int ExitStatusForOpenError(const absl::Status& st);

}  // namespace pmrt::tools

#endif  // PMRT_TOOLS_POOL_VIEW_H_
