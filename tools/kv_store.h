// KvStore: a pool that holds one durable Masstree, opened the way every pmrt tool opens it
// (pool, epoch manager, heap, tree), with the tree's descriptor in the pool's root object.
//
//   auto kv = pmrt::tools::KvStore::Open("/dev/shm/kv.pool", {.create_size = 1 << 30});
//   (*kv)->tree().put("k", "v");     // durable at the next epoch boundary
//   (*kv)->epochs().Sync();          // ... or now
//
// The root object (KvRoot) is undo-logged through the external log before it changes, so the
// tree's creation and its publication in the root happen in one epoch: a crash rolls back both
// (the tree's memory is freed by the heap's rollback, the root reads 0 again) or keeps both.
// A pool whose root has no tree yet (fresh from `pmrt create`) gets one at the first Open
// that is not read-only.
//
// Destruction order is the reverse of opening: tree (detaches), heap, manager (advances twice:
// everything durable), pool (marked cleanly shut down).
#ifndef PMRT_TOOLS_KV_STORE_H_
#define PMRT_TOOLS_KV_STORE_H_

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "alloc/allocator.h"
#include "ds/durable_masstree.h"
#include "epoch/epoch.h"
#include "epoch/pool.h"

namespace pmrt::tools {

// The layout name of pools that hold a KvStore (what `pmrt create` makes by default).
inline constexpr char kKvLayout[] = "pmrt";

// The root object of a KvStore pool.
struct KvRoot {
  static constexpr uint64_t kMagic = 0x31564b54524d50ull;  // "PMRTKV1"
  std::atomic<uint64_t> logged_epoch;                      // the external log's in-object mark
  uint64_t magic;                                          // kMagic once a tree is published
  uint64_t tree;                                           // the tree's descriptor offset
};

struct KvStoreOptions {
  // Create the pool with this size when it does not exist (0: the pool must exist).
  size_t create_size = 0;
  std::string layout = kKvLayout;
  PoolOptions pool;
  epoch::ManagerOptions epochs;
  // Do not create a tree in a pool that has none (kNotFound instead); for inspection tools.
  bool require_tree = false;
  // Check the tree's structure as part of the open (CheckInvariants without the values): a
  // damaged tree is kDataLoss naming the node, instead of a crash or hang at a later walk.
  bool check_tree = false;
  // An existing pool is first opened (and checked, with check_tree) on a private mapping of the
  // file (PoolOptions::private_mapping), where every layer's recovery runs in memory; only when
  // that succeeds is it opened for writing. A pool that any layer refuses, or whose tree fails
  // its check, is left byte-identical. Costs a second open. `pmrt serve` and `pmrt repair` use
  // it.
  bool trial_open = false;
};

class KvStore {
 public:
  // Opens (or creates, see options) the pool at `path` and its tree. Errors are the pool's
  // (kNotFound, kFailedPrecondition for another layout or a newer format, kDataLoss for a
  // corrupt header, kUnavailable for a pool in use), the manager's and heap's recovery errors,
  // the tree's (kDataLoss: the root names no valid tree, or with check_tree its structure is
  // damaged), and kNotFound with require_tree.
  static absl::StatusOr<std::unique_ptr<KvStore>> Open(const std::string& path,
                                                       const KvStoreOptions& options = {});
  ~KvStore();
  KvStore(const KvStore&) = delete;
  KvStore& operator=(const KvStore&) = delete;

  Pool& pool() const { return *pool_; }
  epoch::Manager& epochs() const { return *epochs_; }
  alloc::Heap& heap() const { return *heap_; }
  ds::DurableMasstree& tree() const { return *tree_; }
  // Time Open spent in each step (pool, manager incl. log replay, heap, tree).
  struct OpenTimes {
    std::chrono::nanoseconds pool{0}, epochs{0}, heap{0}, tree{0};
  };
  const OpenTimes& open_times() const { return times_; }
  // True when this Open created the pool file or the tree.
  bool created() const { return created_; }

  // Closes everything now (the destructor does the same); the first error.
  absl::Status Close();

 private:
  KvStore() = default;
  std::unique_ptr<Pool> pool_;
  std::unique_ptr<epoch::Manager> epochs_;
  std::unique_ptr<alloc::Heap> heap_;
  std::unique_ptr<ds::DurableMasstree> tree_;
  OpenTimes times_;
  bool created_ = false;
};

}  // namespace pmrt::tools

#endif  // PMRT_TOOLS_KV_STORE_H_
