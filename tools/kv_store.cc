#include "tools/kv_store.h"

#include <sys/stat.h>

#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace pmrt::tools {
namespace {

using Clock = std::chrono::steady_clock;

std::chrono::nanoseconds Since(Clock::time_point start) { return Clock::now() - start; }

}  // namespace

absl::StatusOr<std::unique_ptr<KvStore>> KvStore::Open(const std::string& path,
                                                       const KvStoreOptions& options) {
  std::unique_ptr<KvStore> kv(new KvStore());
  auto t0 = Clock::now();
  struct stat sb;
  const bool create = options.create_size != 0 && stat(path.c_str(), &sb) != 0 && errno == ENOENT;
  if (options.trial_open && !create) {
    // The trial: the same open in memory. It must end (its pool closed, the lock released)
    // before the real open takes the lock.
    KvStoreOptions trial = options;
    trial.trial_open = false;
    trial.pool.private_mapping = true;
    trial.epochs.interval = std::chrono::milliseconds(0);  // no advancer thread for the trial
    auto opened = Open(path, trial);
    if (!opened.ok()) return opened.status();
    if (absl::Status st = (*opened)->Close(); !st.ok()) return st;
  }
  if (create) {
    auto pool = Pool::Create(path, options.create_size, options.layout, options.pool);
    if (!pool.ok()) return pool.status();
    kv->pool_ = std::move(*pool);
    kv->created_ = true;
  } else {
    // Nothing is written until a layer's own validation has passed: a pool whose layer refuses
    // to open is left byte-identical.
    PoolOptions po = options.pool;
    po.defer_attach = true;
    auto pool = Pool::Open(path, options.layout, po);
    if (!pool.ok()) return pool.status();
    kv->pool_ = std::move(*pool);
  }
  kv->times_.pool = Since(t0);

  t0 = Clock::now();
  // A damaged heap header is refused before the manager's recovery writes anything.
  if (absl::Status st = alloc::Heap::ValidateHeader(*kv->pool_); !st.ok()) return st;
  auto epochs = epoch::Manager::Open(*kv->pool_, options.epochs);
  if (!epochs.ok()) return epochs.status();
  kv->epochs_ = std::move(*epochs);
  kv->times_.epochs = Since(t0);

  t0 = Clock::now();
  auto heap = alloc::Heap::Open(*kv->pool_, *kv->epochs_);
  if (!heap.ok()) return heap.status();
  kv->heap_ = std::move(*heap);
  kv->times_.heap = Since(t0);

  t0 = Clock::now();
  auto root = kv->pool_->root<KvRoot>();
  if (!root.ok()) {
    return absl::Status(root.status().code(),
                        absl::StrCat(path, ": not a key-value pool (root object): ",
                                     std::string(root.status().message())));
  }
  KvRoot* r = *root;
  if (r->magic == KvRoot::kMagic && r->tree != 0) {
    auto tree = ds::DurableMasstree::Open(*kv->pool_, *kv->epochs_, *kv->heap_, r->tree);
    if (!tree.ok()) return tree.status();
    kv->tree_ = std::move(*tree);
  } else if (r->magic != 0 || r->tree != 0) {
    return absl::DataLossError(absl::StrCat(path, ": root object at offset ",
                                            kv->pool_->offset_of(r),
                                            " is not a key-value root (bad magic)"));
  } else if (options.require_tree) {
    return absl::NotFoundError(absl::StrCat(path, ": the pool holds no key-value tree yet"));
  } else {
    // Creation and publication in one epoch: the root is undo-logged before it changes, the
    // tree's memory is allocated in the same epoch, so a crash before the epoch completes rolls
    // both back (root zero, memory free) and one after it keeps both.
    epoch::Guard g(*kv->epochs_);
    auto tree = ds::DurableMasstree::Create(*kv->pool_, *kv->epochs_, *kv->heap_);
    if (!tree.ok()) return tree.status();
    if (auto st = kv->epochs_->log().Snapshot(r, sizeof(*r), &r->logged_epoch); !st.ok()) return st;
    r->tree = (*tree)->descriptor();
    r->magic = KvRoot::kMagic;
    kv->tree_ = std::move(*tree);
    kv->created_ = true;
  }
  if (options.check_tree) {
    if (absl::Status st = kv->tree_->CheckInvariants(nullptr, nullptr, /*values=*/false);
        !st.ok()) {
      return absl::DataLossError(absl::StrCat(path, ": the tree fails its check (`pmrt check ",
                                              path, "` lists the damage): ", st.message()));
    }
  }
  kv->times_.tree = Since(t0);
  if (kv->created_) {
    if (auto st = kv->epochs_->Sync(); !st.ok()) return st;
  }
  return kv;
}

absl::Status KvStore::Close() {
  tree_.reset();
  heap_.reset();
  epochs_.reset();
  if (pool_ == nullptr) return absl::OkStatus();
  absl::Status st = pool_->Close();
  pool_.reset();
  return st;
}

KvStore::~KvStore() { Close().IgnoreError(); }

}  // namespace pmrt::tools
