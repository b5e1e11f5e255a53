#include "runtime/runtime.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <utility>

#include "absl/cleanup/cleanup.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "runtime/internal/pending_replay.h"
#include "runtime/internal/replay_journal.h"

namespace pmrt {
namespace {

// The root region the runtime binds: its header, then the program's root.
struct RegionBytes {
  uint8_t bytes[4096];
};
constexpr size_t kUserRootBytes = sizeof(RegionBytes) - kRuntimeHeaderBytes;
static_assert(sizeof(RuntimeHeader) <= kRuntimeHeaderBytes);

// A logged index operation: tag = index id << 1 | op; bytes = the key's length (4 bytes), the
// key, then (a put) the value.
constexpr uint64_t kOpPut = 0;
constexpr uint64_t kOpRemove = 1;
constexpr uint64_t kMaxIndexId = (uint64_t{1} << 45) - 1;

std::string EncodeOp(std::string_view key, std::string_view value) {
  std::string out(4, '\0');
  const auto n = static_cast<uint32_t>(key.size());
  std::memcpy(out.data(), &n, 4);
  out.append(key);
  out.append(value);
  return out;
}

// A catalog value: the index tree's descriptor offset and the index's id.
std::string EncodeEntry(uint64_t descriptor, uint64_t id) {
  std::string out(16, '\0');
  std::memcpy(out.data(), &descriptor, 8);
  std::memcpy(out.data() + 8, &id, 8);
  return out;
}

bool DecodeEntry(std::string_view v, uint64_t* descriptor, uint64_t* id) {
  if (v.size() != 16) return false;
  std::memcpy(descriptor, v.data(), 8);
  std::memcpy(id, v.data() + 8, 8);
  return true;
}

// What an abort runs (nothing under the gate's no-undo mutant).
template <class F>
std::function<void()> UndoOf(const F& undo) {
  if (mutation::Swapped(runtime_internal::kNoUndoMutant)) return nullptr;
  return undo;
}

absl::Status NoRoom(std::string_view what, std::string_view name) {
  return absl::ResourceExhaustedError(absl::StrCat(
      "index ", std::string(name), ": ", std::string(what),
      " found no room (the pool is full, or the undo log is full inside the caller's own "
      "epoch guard); nothing changed"));
}

}  // namespace

// ---- Index ----------------------------------------------------------------------------------

std::string Index::Ref(const void* object) const {
  const uint64_t off = rt_.pool_->offset_of(object);
  return std::string(reinterpret_cast<const char*>(&off), 8);
}

absl::Status Index::Log(uint64_t op, std::string_view key, std::string_view value,
                        std::function<void()> undo) {
  absl::Status st = rt_.engine_->LogLogical(id_ << 1 | op, EncodeOp(key, value), UndoOf(undo));
  if (!st.ok()) undo();  // not in the transaction: reverted now
  return st;
}

absl::StatusOr<ds::PutResult> Index::put(std::string_view key, std::string_view value) {
  if (rt_.replaying()) RETURN_IF_ERROR(rt_.Materialize(id_, key));
  if (!rt_.engine_->InTransaction()) {
    const ds::PutResult r = tree_->put(key, value);
    if (r == ds::PutResult::kNoMemory) return NoRoom("put", name_);
    return r;
  }
  // In a transaction: applied now (the transaction reads its own writes), logged in its record,
  // reverted by its abort (to the value the put replaced, or by a remove).
  std::string previous;
  const ds::PutResult r = tree_->put(key, value, &previous);
  if (r == ds::PutResult::kNoMemory) return NoRoom("put", name_);
  std::optional<std::string> old;
  if (r == ds::PutResult::kUpdated) old = std::move(previous);
  ds::DurableMasstree* tree = tree_.get();
  auto undo = [tree, k = std::string(key), old = std::move(old)] {
    if (old.has_value() ? tree->put(k, *old) == ds::PutResult::kNoMemory : !tree->remove(k)) {
      std::fprintf(stderr, "pmrt: an aborted transaction's index put could not be undone\n");
    }
  };
  if (absl::Status st = Log(kOpPut, key, value, std::move(undo)); !st.ok()) return st;
  return r;
}

absl::StatusOr<ds::InsertResult> Index::insert_if_absent(std::string_view key,
                                                         std::string_view value) {
  if (rt_.replaying()) RETURN_IF_ERROR(rt_.Materialize(id_, key));
  const ds::InsertResult r = tree_->insert_if_absent(key, value);
  if (r == ds::InsertResult::kNoMemory) return NoRoom("insert_if_absent", name_);
  if (r == ds::InsertResult::kExists || !rt_.engine_->InTransaction()) return r;
  ds::DurableMasstree* tree = tree_.get();
  auto undo = [tree, k = std::string(key)] { (void)tree->remove(k); };
  if (absl::Status st = Log(kOpPut, key, value, std::move(undo)); !st.ok()) return st;
  return r;
}

absl::StatusOr<bool> Index::remove(std::string_view key) {
  if (rt_.replaying()) RETURN_IF_ERROR(rt_.Materialize(id_, key));
  if (!rt_.engine_->InTransaction()) {
    // Inside the caller's own guard a full undo log makes the tree's remove return false with
    // the key still there: that is no room, not an absent key.
    if (tree_->remove(key)) return true;
    if (tree_->get(key).has_value()) return NoRoom("remove", name_);
    return false;
  }
  std::optional<std::string> old = tree_->get(key);
  if (!old.has_value()) {
    // Logged all the same: the transaction's result is "absent", and a crash that rolls back an
    // epoch-scoped remove of this key made before it (in the failed epoch) must not bring the
    // key back past the transaction's replay. Nothing to undo.
    if (absl::Status st = Log(kOpRemove, key, {}, [] {}); !st.ok()) return st;
    return false;
  }
  if (!tree_->remove(key)) return NoRoom("remove", name_);
  ds::DurableMasstree* tree = tree_.get();
  auto undo = [tree, k = std::string(key), old = std::move(*old)] {
    if (tree->put(k, old) == ds::PutResult::kNoMemory) {
      std::fprintf(stderr, "pmrt: an aborted transaction's index remove could not be undone\n");
    }
  };
  if (absl::Status st = Log(kOpRemove, key, {}, std::move(undo)); !st.ok()) return st;
  return true;
}

size_t Index::scan(std::string_view from, size_t count, ds::ScanCallback cb) const {
  if (rt_.replaying()) rt_.FinishReplayForRead();
  return tree_->scan(from, count, cb);
}

size_t Index::size() const {
  if (rt_.replaying()) rt_.FinishReplayForRead();
  return tree_->size();
}

// ---- recovery ------------------------------------------------------------------------------

std::vector<CatalogEntry> ReadCatalog(const ds::DurableMasstree& catalog) {
  std::vector<CatalogEntry> out;
  catalog.scan("", ~size_t{0}, [&](std::string_view name, std::string_view v) {
    uint64_t desc = 0, id = 0;
    if (!DecodeEntry(v, &desc, &id)) desc = id = 0;
    out.push_back({std::string(name), desc, id});
    return true;
  });
  return out;
}

absl::Status ReplayIndexOps(Pool& pool, epoch::Manager& epochs, alloc::Heap& heap,
                            const ds::DurableMasstree& catalog,
                            const std::vector<txn::LogicalOp>& ops, uint64_t* applied) {
  std::map<uint64_t, CatalogEntry> by_id;
  std::vector<uint64_t> ids;
  for (CatalogEntry& e : ReadCatalog(catalog)) {
    if (e.descriptor == 0) continue;
    ids.push_back(e.id);
    by_id[e.id] = std::move(e);
  }
  std::sort(ids.begin(), ids.end());
  // A journal a lazy replay left (a crash before it was applied) comes first.
  std::optional<runtime_internal::Journal> journal;
  const auto& h = *static_cast<const RuntimeHeader*>(pool.region_base(PoolRegion::kRoot));
  if (h.magic == RuntimeHeader::kMagic && h.journal != 0) {
    auto read = runtime_internal::ReadJournal(pool, heap, h.journal);
    if (!read.ok()) return read.status();
    journal = std::move(*read);
  }
  uint64_t stamp_hi;
  auto plan =
      runtime_internal::PlanReplay(epochs, journal ? &*journal : nullptr, ops, ids, &stamp_hi);
  if (!plan.ok()) return plan.status();
  std::map<uint64_t, std::unique_ptr<ds::DurableMasstree>> trees;
  for (const runtime_internal::IndexOp& op : *plan) {
    const CatalogEntry& entry = by_id.at(op.id);
    auto& tree = trees[op.id];
    if (tree == nullptr) {
      auto t = ds::DurableMasstree::Open(pool, epochs, heap, entry.descriptor);
      if (!t.ok()) {
        return absl::Status(t.status().code(), absl::StrCat("index ", entry.name, ": ",
                                                            std::string(t.status().message())));
      }
      tree = std::move(*t);
    }
    // Outside a guard of its own, a write waits for room at the boundary instead of failing;
    // the marks below may then fall in a later epoch, which only means that a crash before they
    // are durable applies the same entries again (before the newer operations, as here).
    if (!op.remove) {
      if (tree->put(op.key, op.value) == ds::PutResult::kNoMemory) {
        return NoRoom("replay of a put", entry.name);
      }
    } else {
      (void)tree->remove(op.key);  // absent already: the same end state
    }
    ++*applied;
  }
  // The journal stays: every entry not applied before is marked now, those applied above and
  // those a newer operation superseded (applied again later, one would overwrite it). A crash
  // before these marks are durable finds the entries and the newer operations again.
  if (journal.has_value()) {
    epoch::Guard g(epochs);
    for (const runtime_internal::IndexOp& e : journal->entries) {
      if (runtime_internal::AppliedDurably(epochs, *e.mark)) continue;
      *e.mark = g.epoch();
      epochs.RecordDirty(e.mark, sizeof(uint64_t));
    }
  }
  return absl::OkStatus();
}

// ---- Runtime --------------------------------------------------------------------------------

absl::StatusOr<std::unique_ptr<Runtime>> Runtime::Open(const std::string& path,
                                                       RuntimeOptions options) {
  struct stat sb;
  const auto start = std::chrono::steady_clock::now();
  const bool create = options.create_size != 0 && stat(path.c_str(), &sb) != 0 && errno == ENOENT;
  if (options.trial_open && !create) {
    // The same open in memory; it ends (pool closed, lock released) before the real one.
    RuntimeOptions trial = options;
    trial.trial_open = false;
    trial.pool.private_mapping = true;
    trial.epochs.interval = std::chrono::milliseconds(0);
    PoolOptions trial_pool = trial.pool;
    trial_pool.defer_attach = true;
    auto pool = Pool::Open(path, trial.layout, trial_pool);
    if (!pool.ok()) return pool.status();
    auto opened = AttachImpl(std::move(*pool), std::move(trial), /*trial=*/true);
    if (!opened.ok()) return opened.status();
    if (absl::Status st = (*opened)->Close(); !st.ok()) return st;
  }
  const auto trial_time = std::chrono::steady_clock::now() - start;
  // An existing pool is written only once its epoch manager has validated it: a pool that the
  // manager refuses is left byte-identical (PoolOptions::defer_attach).
  PoolOptions open_options = options.pool;
  open_options.defer_attach = true;
  absl::StatusOr<std::unique_ptr<Pool>> pool =
      create ? Pool::Create(path, options.create_size, options.layout, options.pool)
             : Pool::Open(path, options.layout, open_options);
  if (!pool.ok()) return pool.status();
  const auto pool_time = std::chrono::steady_clock::now() - start - trial_time;
  auto rt = AttachImpl(std::move(*pool), std::move(options), /*trial=*/false);
  if (rt.ok()) {
    (*rt)->times_.trial = trial_time;
    (*rt)->times_.pool = pool_time;
  }
  return rt;
}

absl::StatusOr<std::unique_ptr<Runtime>> Runtime::Attach(std::unique_ptr<Pool> pool,
                                                         RuntimeOptions options) {
  return AttachImpl(std::move(pool), std::move(options), /*trial=*/false);
}

absl::StatusOr<std::unique_ptr<Runtime>> Runtime::AttachImpl(std::unique_ptr<Pool> pool,
                                                             RuntimeOptions options, bool trial) {
  if (options.txn.replay_logical) {
    return absl::InvalidArgumentError(
        "Runtime::Open: options.txn.replay_logical is the runtime's own; leave it empty");
  }
  std::unique_ptr<Runtime> rt(new Runtime());
  rt->pool_ = std::move(pool);
  rt->trial_ = trial;
  bool created = false;
  auto t = std::chrono::steady_clock::now();
  auto lap = [&t](std::chrono::nanoseconds* into) {
    const auto now = std::chrono::steady_clock::now();
    *into = now - t;
    t = now;
  };
  // Recovery in the contract's order: the epochs (external log), the heap, then the catalog and
  // the engine, whose replay of committed transactions hands their index operations to Replay.
  auto epochs = epoch::Manager::Open(*rt->pool_, options.epochs);
  if (!epochs.ok()) return epochs.status();
  rt->epochs_ = std::move(*epochs);
  lap(&rt->times_.epochs);
  auto heap = alloc::Heap::Open(*rt->pool_, *rt->epochs_);
  if (!heap.ok()) return heap.status();
  rt->heap_ = std::move(*heap);
  lap(&rt->times_.heap);
  if (auto st = rt->OpenCatalog(&created); !st.ok()) return st;
  if (auto st = rt->ReadJournalAtOpen(); !st.ok()) return st;
  lap(&rt->times_.catalog);
  options.txn.replay_logical = [p = rt.get()](const std::vector<txn::LogicalOp>& ops) {
    return p->Replay(ops);
  };
  auto engine = txn::Engine::Open(*rt->pool_, *rt->epochs_, *rt->heap_, options.txn);
  if (!engine.ok()) return engine.status();
  rt->engine_ = std::move(*engine);
  if (auto st = rt->StartPendingReplay(options.background_replay); !st.ok()) return st;
  lap(&rt->times_.engine);
  if (created) {
    if (auto st = rt->epochs_->Sync(); !st.ok()) return st;
  }
  return rt;
}

Runtime::Runtime() : pending_(std::make_unique<PendingReplay>()) {}

RuntimeHeader& Runtime::header() {
  return *reinterpret_cast<RuntimeHeader*>(pool_->region_base(PoolRegion::kRoot));
}

void* Runtime::user_root() {
  return static_cast<uint8_t*>(pool_->region_base(PoolRegion::kRoot)) + kRuntimeHeaderBytes;
}

absl::Status Runtime::OpenCatalog(bool* created) {
  auto region = pool_->root<RegionBytes>();
  if (!region.ok()) {
    return absl::Status(region.status().code(),
                        absl::StrCat(pool_->path(), ": not a runtime pool (root region): ",
                                     std::string(region.status().message())));
  }
  RuntimeHeader& h = header();
  if (h.magic == RuntimeHeader::kMagic) {
    auto tree = ds::DurableMasstree::Open(*pool_, *epochs_, *heap_, h.catalog);
    if (!tree.ok()) return tree.status();
    catalog_ = std::move(*tree);
    return absl::OkStatus();
  }
  if (h.magic != 0 || h.catalog != 0) {
    return absl::DataLossError(absl::StrCat(pool_->path(), ": the root region at offset ",
                                            pool_->offset_of(&h),
                                            " holds no runtime header (bad magic)"));
  }
  // A fresh pool: the catalog's creation and its publication in one epoch (the header is
  // undo-logged first), so a crash keeps both or neither.
  epoch::Guard g(*epochs_);
  auto tree = ds::DurableMasstree::Create(*pool_, *epochs_, *heap_);
  if (!tree.ok()) return tree.status();
  if (auto st = epochs_->log().Snapshot(&h, sizeof(h), &h.logged_epoch); !st.ok()) return st;
  h.catalog = (*tree)->descriptor();
  h.next_index_id = 1;
  h.magic = RuntimeHeader::kMagic;
  catalog_ = std::move(*tree);
  *created = true;
  return absl::OkStatus();
}

absl::StatusOr<Index*> Runtime::OpenIndexLocked(const std::string& name, uint64_t id,
                                                uint64_t descriptor) {
  if (auto it = open_.find(name); it != open_.end()) return it->second.get();
  auto tree = ds::DurableMasstree::Open(*pool_, *epochs_, *heap_, descriptor);
  if (!tree.ok()) {
    return absl::Status(tree.status().code(),
                        absl::StrCat("index ", name, ": ", std::string(tree.status().message())));
  }
  std::unique_ptr<Index> index(new Index(*this, name, id, std::move(*tree)));
  Index* p = index.get();
  open_.emplace(name, std::move(index));
  return p;
}

absl::StatusOr<Index*> Runtime::FindLocked(std::string_view name) {
  if (auto it = open_.find(name); it != open_.end()) return it->second.get();
  std::string v;
  uint64_t desc, id;
  if (!catalog_->get(name, &v)) {
    return absl::NotFoundError(
        absl::StrCat(pool_->path(), ": no index named '", std::string(name), "'"));
  }
  if (!DecodeEntry(v, &desc, &id)) {
    return absl::DataLossError(absl::StrCat(pool_->path(), ": the catalog entry of index '",
                                            std::string(name), "' is ", v.size(),
                                            " bytes, not 16"));
  }
  return OpenIndexLocked(std::string(name), id, desc);
}

absl::StatusOr<Index*> Runtime::find_index(std::string_view name) {
  std::lock_guard<std::mutex> l(mu_);
  return FindLocked(name);
}

absl::StatusOr<Index*> Runtime::index(std::string_view name) {
  std::lock_guard<std::mutex> l(mu_);
  if (auto found = FindLocked(name);
      found.ok() || found.status().code() != absl::StatusCode::kNotFound) {
    return found;
  }
  // A new index must be durable before any transaction can log an operation on it (a replayed
  // operation needs its index): created, published and synced here, outside any guard.
  if (epochs_->LocalSlot().depth > 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        pool_->path(), ": index '", std::string(name),
        "' does not exist yet, and an index cannot be created inside a transaction or an "
        "epoch guard (its creation is made durable before it is used); create it before"));
  }
  RuntimeHeader& h = header();
  uint64_t desc, id;
  {
    epoch::Guard g(*epochs_);
    if (h.next_index_id > kMaxIndexId) {
      return absl::ResourceExhaustedError(
          absl::StrCat(pool_->path(), ": every index id has been used"));
    }
    auto tree = ds::DurableMasstree::Create(*pool_, *epochs_, *heap_);
    if (!tree.ok()) return tree.status();
    if (auto st = epochs_->log().Snapshot(&h, sizeof(h), &h.logged_epoch); !st.ok()) return st;
    desc = (*tree)->descriptor();
    id = h.next_index_id++;
    if (catalog_->put(name, EncodeEntry(desc, id)) == ds::PutResult::kNoMemory) {
      return NoRoom("creation", name);  // (the tree and the id are rolled back with the epoch
                                        // only by a crash; the id is simply skipped)
    }
    open_.emplace(std::string(name), std::unique_ptr<Index>(new Index(*this, std::string(name), id,
                                                                      std::move(*tree))));
  }
  if (auto st = epochs_->Sync(); !st.ok()) return st;
  return open_.find(name)->second.get();
}

absl::Status Runtime::drop_index(std::string_view name) {
  RETURN_IF_ERROR(finish_replay());  // (no pending entry may name the index's tree)
  std::lock_guard<std::mutex> l(mu_);
  auto found = FindLocked(name);
  if (!found.ok()) return found.status();
  Index* index = *found;
  epoch::Guard g(*epochs_);
  // The catalog entry and the tree go in one epoch: a crash keeps both or neither.
  if (!catalog_->remove(name)) return NoRoom("drop", name);
  if (auto st = index->tree().Destroy(g); !st.ok()) {
    (void)catalog_->put(name, EncodeEntry(index->tree().descriptor(), index->id()));
    return st;
  }
  open_.erase(open_.find(name));
  return absl::OkStatus();
}

std::vector<std::string> Runtime::indexes() {
  std::vector<std::string> names;
  catalog_->scan("", ~size_t{0}, [&](std::string_view name, std::string_view) {
    names.emplace_back(name);
    return true;
  });
  return names;
}

absl::Status Runtime::BindUserRoot(size_t size, size_t align) {
  if (size > kUserRootBytes || align > 64) {
    return absl::InvalidArgumentError(
        absl::StrCat(pool_->path(), ": root type (", size, " bytes, alignment ", align,
                     ") does not fit the runtime's ", kUserRootBytes, "-byte root"));
  }
  RuntimeHeader& h = header();
  std::lock_guard<std::mutex> l(mu_);
  if (h.user_root_size == size) return absl::OkStatus();
  if (h.user_root_size != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat(pool_->path(), ": root type size mismatch: the pool's root is a ",
                     h.user_root_size, "-byte type, root<T>() asks for ", size, " bytes"));
  }
  epoch::Guard g(*epochs_);
  if (auto st = epochs_->log().Snapshot(&h, sizeof(h), &h.logged_epoch); !st.ok()) return st;
  h.user_root_size = size;
  return absl::OkStatus();
}

absl::Status Runtime::log_root(const epoch::Guard& g) {
  if (!g.Of(*epochs_)) {
    return absl::FailedPreconditionError(
        absl::StrCat(pool_->path(), ": log_root needs a guard of this runtime's epoch manager"));
  }
  RuntimeHeader& h = header();
  if (h.user_root_size == 0) {
    return absl::FailedPreconditionError(
        absl::StrCat(pool_->path(), ": log_root before root<T>() bound the root's type"));
  }
  return epochs_->log().Snapshot(user_root(), h.user_root_size, &h.user_logged_epoch);
}

RuntimeStats Runtime::stats() const {
  RuntimeStats s;
  s.epochs = epochs_->stats();
  s.heap = heap_->Stats();
  s.txn = engine_->stats();
  {
    std::lock_guard<std::mutex> l(const_cast<std::mutex&>(mu_));
    s.indexes = catalog_->size();
  }
  s.replayed_index_ops = replayed_;
  s.replay_ms = replay_ms_;
  {
    std::lock_guard<std::mutex> l(pending_->mu);
    s.pending_index_ops = pending_->left;
  }
  s.health = pool_->health();
  return s;
}

absl::Status Runtime::Close() {
  StopReplay();
  if (engine_ != nullptr) {
    bool due;
    {
      std::lock_guard<std::mutex> l(pending_->mu);
      due = pending_->retire_due;
    }
    if (due) {
      if (absl::Status st = RetireJournal(); !st.ok()) {
        std::fprintf(stderr, "pmrt: %s: freeing the applied index replay journal: %s\n",
                     pool_->path().c_str(), st.ToString().c_str());
      }
    }
  }
  {
    std::lock_guard<std::mutex> l(mu_);
    open_.clear();
  }
  engine_.reset();
  catalog_.reset();
  heap_.reset();
  epochs_.reset();
  if (pool_ == nullptr) return absl::OkStatus();
  absl::Status st = pool_->Close();
  pool_.reset();
  return st;
}

Runtime::~Runtime() {
  if (absl::Status st = Close(); !st.ok()) {
    std::fprintf(stderr, "pmrt: closing the runtime: %s\n", st.ToString().c_str());
  }
}

}  // namespace pmrt
