// pmrt::Runtime: one object that opens a pool with every layer in the one correct order, recovers
// it in the contract's order, and gives a program its typed root, named durable indexes and
// transactions that span words, allocations and index operations.
//
//   pmrt::RuntimeOptions options;
//   options.create_size = 1 << 30;                         // created if missing
//   auto rt = pmrt::Runtime::Open("/mnt/pmem/app.pool", options);
//   Root* root = *(*rt)->root<Root>();                     // zero at first use
//   pmrt::Index* users = *(*rt)->index("users");           // created at first use, durable
//   absl::Status st = pmrt::txn::Run([&]() -> absl::Status {
//     Account* a = pmrt::alloc::pnew<Account>(100);        // allocated by the transaction
//     RETURN_IF_ERROR(pmrt::txn::write(&root->accounts, root->accounts + 1));
//     return users->put("alice", users->Ref(a)).status();  // part of the transaction
//   });                                                    // durable when Run returns OK
//   (*rt)->sync();                                         // epoch-scope work durable now
//
// Open order: Pool, epoch::Manager (rolls back the epochs a crash interrupted), alloc::Heap,
// the runtime's catalog of indexes, txn::Engine (replays committed transactions: their words
// and allocations, and journals their index operations, which are applied after Open returns:
// RuntimeOptions::background_replay). Close (or the destructor) tears them down in reverse.
//
// Durability (docs/durability.md, item 5 and its table): inside a transaction, index operations are
// part of it: durable when commit returns, undone by abort, replayed after a crash with the
// transaction's word writes, in commit order. Outside a transaction they are epoch-scoped, as
// every other write outside one: durable once the next epoch has begun (or at sync()).
//
// Thread safety: index(), find_index(), indexes(), stats(), sync() and the Index operations may
// be called from any thread; drop_index() requires that no other thread uses that index; Close
// requires that no other thread uses the runtime.
#ifndef PMRT_RUNTIME_RUNTIME_H_
#define PMRT_RUNTIME_RUNTIME_H_

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "alloc/allocator.h"
#include "ds/durable_masstree.h"
#include "epoch/epoch.h"
#include "epoch/pool.h"
#include "txn/txn.h"

namespace pmrt {

// The layout name of a runtime's pool (RuntimeOptions::layout's default).
inline constexpr char kRuntimeLayout[] = "pmrt-runtime";

struct RuntimeOptions {
  // Create the pool with this size when the file does not exist (0: it must exist).
  size_t create_size = 0;
  std::string layout = kRuntimeLayout;
  PoolOptions pool;
  epoch::ManagerOptions epochs;
  txn::Options txn;  // replay_logical is the runtime's own: leave it empty
  // An existing pool is first opened on a private mapping of the file
  // (PoolOptions::private_mapping), where every layer's recovery runs in memory, and is opened
  // for writing only when that succeeded: a pool that any layer refuses is left byte-identical.
  // It costs a second open, recovery included (open_times().trial). False halves the open
  // time; a refusal found after the epoch manager's recovery (damaged heap chunk metadata, a
  // damaged transaction log or catalog) then leaves that recovery's writes, which lose nothing
  // durable.
  bool trial_open = true;
  // After a crash, the index operations of committed transactions that the crash rolled back are
  // not applied before Open returns: recovery journals them in the pool (durably, in one block),
  // reads answer from the journal for the keys it holds, a write to such a key applies its entry
  // first, and a background thread applies the rest (docs/durability.md, "Restart"). False: no
  // thread; entries are applied on access, by scan() or size() (all of them), or finish_replay().
  bool background_replay = true;
};

struct RuntimeStats {
  epoch::ManagerStats epochs;
  alloc::HeapStats heap;
  txn::Stats txn;
  size_t indexes = 0;
  uint64_t replayed_index_ops = 0;  // index operations of committed transactions to replay at open
  double replay_ms = 0;  // the time it took to journal them (inside the engine's recovery)
  uint64_t pending_index_ops = 0;  // of those, the ones not yet applied to their trees
  absl::Status health;             // the pool's failed mode, or OK
};

// The runtime's header at the start of the pool's root region; the program's root follows it.
struct RuntimeHeader {
  static constexpr uint64_t kMagic = 0x31544e5552544d50ull;  // "PMRTRUN1"
  std::atomic<uint64_t> logged_epoch;                        // its external-log mark
  uint64_t magic;
  uint64_t catalog;         // descriptor of the catalog tree (index name -> IndexEntry)
  uint64_t next_index_id;   // ids are never reused
  uint64_t user_root_size;  // sizeof the program's root type, bound at its first root<T>()
  std::atomic<uint64_t> user_logged_epoch;  // the program root's external-log mark (log_root)
  uint64_t journal;  // the index replay journal's block (runtime/internal/replay_journal.h), or 0
};
inline constexpr size_t kRuntimeHeaderBytes = 256;

class Runtime;

namespace runtime_internal {
// Logic mutants of the runtime's crash suite's gate (tests/runtime/runtime_crash_test.cc): a
// recovery that replays no index operation, one that replays them newest first, an index
// operation inside a transaction that an abort does not undo, a lazy replay whose applied mark
// is never written back. Each must make the suite fail.
inline constexpr Site kSkipReplayMutant{"runtime.mutant.skip_replay"};
inline constexpr Site kReplayOrderMutant{"runtime.mutant.replay_order"};
inline constexpr Site kNoUndoMutant{"runtime.mutant.no_undo"};
inline constexpr Site kUnrecordedMarkMutant{"runtime.mutant.unrecorded_mark"};
}  // namespace runtime_internal

// For tools that open a runtime pool's layers themselves (tools/pool_view.cc): its catalog and
// the replay of its index operations, as Runtime::Open does them.

// A named index as the catalog holds it.
struct CatalogEntry {
  std::string name;
  uint64_t descriptor;  // of its tree
  uint64_t id;
};
// Every entry of `catalog`, in name order; an entry that does not decode is returned with
// descriptor 0 (tools report it).
std::vector<CatalogEntry> ReadCatalog(const ds::DurableMasstree& catalog);
// Replays the index operations `ops` (in commit order) on the trees `catalog` names: Runtime's
// recovery, and that of a tool that opens a runtime pool's layers itself (tools/pool_view.cc).
// An operation whose index has no entry (dropped since) is dropped with it. *applied counts the
// operations applied.
absl::Status ReplayIndexOps(Pool& pool, epoch::Manager& epochs, alloc::Heap& heap,
                            const ds::DurableMasstree& catalog,
                            const std::vector<txn::LogicalOp>& ops, uint64_t* applied);

// A named durable Masstree of a Runtime. Keys and values are byte strings (as ds::Masstree).
class Index {
 public:
  // Inside a transaction of the calling thread: part of it (see the header comment); the
  // transaction is doomed by an error. Outside: epoch-scoped. Errors: kResourceExhausted (the
  // pool is full, or the undo log is full inside the caller's own guard: nothing changed),
  // kInvalidArgument (the operation does not fit in the transaction's log record).
  absl::StatusOr<ds::PutResult> put(std::string_view key, std::string_view value);
  absl::StatusOr<ds::InsertResult> insert_if_absent(std::string_view key, std::string_view value);
  absl::StatusOr<bool> remove(std::string_view key);  // true when the key was present

  // Reads see the calling transaction's own writes (they are applied in place). While a
  // restart's replay is pending, get() answers from the journal for a key it holds, and scan()
  // and size() first apply every pending operation (Runtime::finish_replay).
  std::optional<std::string> get(std::string_view key) const;
  bool get(std::string_view key, std::string* value) const;
  size_t scan(std::string_view from, size_t count, ds::ScanCallback cb) const;
  size_t size() const;

  // A value naming a persistent object of this runtime's pool (its pool offset, 8 bytes), and
  // back (null when the value names no object of that size in the pool).
  std::string Ref(const void* object) const;
  template <class T>
  T* Deref(std::string_view value) const;

  const std::string& name() const { return name_; }
  uint64_t id() const { return id_; }
  ds::DurableMasstree& tree() { return *tree_; }
  const ds::DurableMasstree& tree() const { return *tree_; }

 private:
  friend class Runtime;
  Index(Runtime& rt, std::string name, uint64_t id, std::unique_ptr<ds::DurableMasstree> tree)
      : rt_(rt), name_(std::move(name)), id_(id), tree_(std::move(tree)) {}
  // Logs operation `op` on `key` in the calling thread's transaction, with `undo` for its
  // abort; on error runs `undo` at once (the change was applied before).
  absl::Status Log(uint64_t op, std::string_view key, std::string_view value,
                   std::function<void()> undo);

  Runtime& rt_;
  std::string name_;
  uint64_t id_;
  std::unique_ptr<ds::DurableMasstree> tree_;
};

class Runtime {
 public:
  // Opens (or creates, with options.create_size) the pool at `path` and every layer. Errors:
  // the pool's (kNotFound, kInvalidArgument for another layout, kDataLoss for a corrupt header,
  // kFailedPrecondition for a pool in use), each layer's recovery errors, kDataLoss when
  // the root region holds no runtime header of this format, kInvalidArgument for options.
  static absl::StatusOr<std::unique_ptr<Runtime>> Open(const std::string& path,
                                                       RuntimeOptions options = {});
  // The same on a pool opened by the caller (an in-memory pool, say); create_size, layout and
  // pool options are not used. The runtime owns the pool from now on, also on error.
  static absl::StatusOr<std::unique_ptr<Runtime>> Attach(std::unique_ptr<Pool> pool,
                                                         RuntimeOptions options = {});
  ~Runtime();  // Close(), reporting an error on stderr
  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;

  // Closes the indexes, the engine (writing its hot words back), the heap, the epoch manager
  // (completing the running epoch) and the pool. Idempotent. Returns the pool's close status.
  absl::Status Close();

  // The program's root: zero at first use; sizeof(T) is bound at the first call (a later call
  // with another size is kFailedPrecondition). Update it in a transaction (txn::write), or
  // under an epoch::Guard after log_root() (epoch scope).
  template <class T>
  absl::StatusOr<T*> root();
  // Epoch-scope update of the root: undo-logs the whole user root before the caller's stores,
  // in the calling thread's guard `g` (durable once the epoch completes; a crash before rolls
  // back the stores together).
  absl::Status log_root(const epoch::Guard& g);

  // The index named `name`, created (empty, durable before this returns) at first use.
  // Creation cannot run inside a transaction or an epoch guard (kFailedPrecondition).
  absl::StatusOr<Index*> index(std::string_view name);
  // The existing index named `name` (kNotFound).
  absl::StatusOr<Index*> find_index(std::string_view name);
  // Removes the index and frees its tree, epoch-scoped (a crash before the epoch completes keeps
  // it). REQUIRES: no other thread uses it; Index pointers to it become invalid.
  absl::Status drop_index(std::string_view name);
  std::vector<std::string> indexes();

  // Everything done before the call is durable when it returns OK.
  absl::Status sync();
  // Applies every index operation still pending from a restart's replay (RuntimeOptions::
  // background_replay) in the calling thread. Errors: the first failed application's
  // (kResourceExhausted for a full pool); the entries not applied stay pending.
  absl::Status finish_replay();
  // Index operations of a restart's replay not yet applied (cheap; stats() walks the heap).
  uint64_t pending_index_ops();
  RuntimeStats stats() const;
  // How long each step of the open took (Attach's steps; the pool's own open is the caller's
  // in Attach, Open's in Open).
  struct OpenTimes {
    std::chrono::nanoseconds trial{0};  // the trial open (RuntimeOptions::trial_open)
    std::chrono::nanoseconds pool{0}, epochs{0}, heap{0}, catalog{0}, engine{0};
  };
  const OpenTimes& open_times() const { return times_; }

  Pool& pool() { return *pool_; }
  epoch::Manager& epochs() { return *epochs_; }
  alloc::Heap& heap() { return *heap_; }
  txn::Engine& engine() { return *engine_; }
  // The catalog: index name -> (tree descriptor, id), 16 bytes (for checks and tools).
  ds::DurableMasstree& catalog() { return *catalog_; }

 private:
  friend class Index;
  struct Region;
  struct PendingReplay;
  Runtime();
  static absl::StatusOr<std::unique_ptr<Runtime>> AttachImpl(std::unique_ptr<Pool> pool,
                                                             RuntimeOptions options, bool trial);
  absl::Status OpenCatalog(bool* created);
  absl::Status Replay(const std::vector<txn::LogicalOp>& ops);
  // The lazy replay (runtime/lazy_replay.cc).
  absl::Status ReadJournalAtOpen();
  absl::Status StartPendingReplay(bool background);
  bool replaying() const { return replaying_.load(std::memory_order_acquire); }
  // Whether a pending entry decides `key` of index `id`: then *value is its state.
  bool PendingGet(uint64_t id, std::string_view key, std::optional<std::string>* value);
  absl::Status Materialize(uint64_t id, std::string_view key);
  absl::Status ApplyPending(size_t max_entries, size_t* left);
  absl::Status ApplyEntry(size_t i);
  // Applies entry i, claimed by the calling thread; false (nothing changed) when the tree found
  // no room under the application's guard.
  bool TryApplyClaimed(size_t i);
  void FinishReplayForRead();
  absl::Status RetireJournal();
  void StopReplay();
  absl::StatusOr<Index*> OpenIndexLocked(const std::string& name, uint64_t id, uint64_t descriptor);
  absl::StatusOr<Index*> FindLocked(std::string_view name);
  RuntimeHeader& header();
  void* user_root();
  absl::Status BindUserRoot(size_t size, size_t align);

  std::unique_ptr<Pool> pool_;
  std::unique_ptr<epoch::Manager> epochs_;
  std::unique_ptr<alloc::Heap> heap_;
  std::unique_ptr<ds::DurableMasstree> catalog_;
  std::unique_ptr<txn::Engine> engine_;
  std::mutex mu_;  // the open indexes
  std::map<std::string, std::unique_ptr<Index>, std::less<>> open_;
  uint64_t replayed_ = 0;
  double replay_ms_ = 0;
  OpenTimes times_;
  bool trial_ = false;  // the trial open: recovery validates the index operations, writes none
  std::unique_ptr<PendingReplay> pending_;
  std::atomic<bool> replaying_{false};
};

inline std::optional<std::string> Index::get(std::string_view key) const {
  if (rt_.replaying()) {
    std::optional<std::string> v;
    if (rt_.PendingGet(id_, key, &v)) return v;
  }
  return tree_->get(key);
}

inline bool Index::get(std::string_view key, std::string* value) const {
  if (rt_.replaying()) {
    std::optional<std::string> v;
    if (rt_.PendingGet(id_, key, &v)) {
      if (v.has_value()) *value = std::move(*v);
      return v.has_value();
    }
  }
  return tree_->get(key, value);
}

template <class T>
absl::StatusOr<T*> Runtime::root() {
  static_assert(std::is_trivially_copyable_v<T> && std::is_standard_layout_v<T>,
                "a persistent root must be trivially copyable and standard layout");
  if (auto st = BindUserRoot(sizeof(T), alignof(T)); !st.ok()) return st;
  return static_cast<T*>(user_root());
}

template <class T>
T* Index::Deref(std::string_view value) const {
  if (value.size() != 8) return nullptr;
  uint64_t off;
  std::memcpy(&off, value.data(), 8);
  return rt_.pool_->contains_offset(off, sizeof(T)) ? static_cast<T*>(rt_.pool_->at(off)) : nullptr;
}

}  // namespace pmrt

#endif  // PMRT_RUNTIME_RUNTIME_H_
