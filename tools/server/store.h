// server::Store: what `pmrt serve` serves — a runtime pool (runtime/runtime.h) and its index
// "db0", Redis's database 0. Commands outside MULTI write the index epoch-scoped; EXEC, MSET,
// MSETNX, multi-key DEL and the keyspace commands that write two keys run as one pmrt
// transaction each (docs/server.md, "Durability").
//
//   auto store = pmrt::server::Store::Open("/dev/shm/redis.pool", {.create_size = 1 << 30});
//   pmrt::Index& db = (*store)->db();
//   db.put("k", "v");                    // durable at the next epoch boundary
//   (*store)->runtime().sync();          // ... or now
//
// Open finishes a restart's replay of committed transactions before it returns (the server
// reads and writes the tree directly: no entry may be pending), and with check_tree checks the
// tree's structure first. A pool of another layout (a key-value pool of `pmrt create`, say) is
// refused with the layout named; nothing in it is written.
#ifndef PMRT_TOOLS_SERVER_STORE_H_
#define PMRT_TOOLS_SERVER_STORE_H_

#include <chrono>
#include <cstddef>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "runtime/runtime.h"

namespace pmrt::server {

// The index that holds Redis's database 0: key -> value.
inline constexpr char kDbIndex[] = "db0";
// The deadlines of the keys of db0 that have one (EXPIRE, SET ... EX): key -> the unix time in
// milliseconds after which the key is gone, 8 bytes little-endian. Every key here is in db0:
// a write that changes both indexes runs in one epoch guard or one transaction.
inline constexpr char kExpiresIndex[] = "db0.expires";
// The hashes (HSET): key -> its field count, 8 bytes; a key is a hash when it is here, a string
// when it is in db0, never both.
inline constexpr char kHashesIndex[] = "db0.hashes";
// The hashes' fields: HashFieldKey(key, field) -> value. A hash's fields are contiguous, in
// field order, and the keys' order is the hashes' (the key's bytes escaped so that no key's
// prefix is another's).
inline constexpr char kFieldsIndex[] = "db0.fields";

// The store's own records: "flushall" while a FLUSHALL runs (Store::FlushAll).
inline constexpr char kMetaIndex[] = "db0.meta";

// The fields index key of `field` of hash `key`: HashFieldPrefix(key) + field.
std::string HashFieldPrefix(std::string_view key);
std::string HashFieldKey(std::string_view key, std::string_view field);

struct StoreOptions {
  // Create the pool with this size when the file does not exist (0: it must exist).
  size_t create_size = 0;
  PoolOptions pool;
  epoch::ManagerOptions epochs;
  txn::Options txn;
  // Check the tree's structure as part of the open (CheckInvariants without the values): a
  // damaged tree is kDataLoss naming the node, instead of a crash or hang at a later walk.
  bool check_tree = false;
  // An existing pool is first opened, recovered and checked on a private mapping of the file;
  // only when that succeeds is it opened for writing (a refused pool is left byte-identical).
  bool trial_open = false;
};

class Store {
 public:
  static absl::StatusOr<std::unique_ptr<Store>> Open(const std::string& path,
                                                     const StoreOptions& options = {});
  // The same on a pool opened by the caller (an in-memory pool over the crash simulator, say):
  // create_size, pool options and trial_open are not used. The store owns the pool from now on.
  static absl::StatusOr<std::unique_ptr<Store>> Attach(std::unique_ptr<Pool> pool,
                                                       const StoreOptions& options = {});
  ~Store();
  Store(const Store&) = delete;
  Store& operator=(const Store&) = delete;

  Runtime& runtime() const { return *rt_; }
  Index& db() const { return *db_; }
  Index& expires() const { return *expires_; }
  Index& hashes() const { return *hashes_; }
  Index& fields() const { return *fields_; }
  ds::DurableMasstree& tree() const { return db_->tree(); }
  Pool& pool() const { return rt_->pool(); }
  epoch::Manager& epochs() const { return rt_->epochs(); }
  alloc::Heap& heap() const { return rt_->heap(); }
  txn::Engine& engine() const { return rt_->engine(); }
  // True when this Open created the pool file.
  bool created() const { return created_; }
  // How long the open took, the trial open and the replay of committed transactions included.
  std::chrono::nanoseconds open_time() const { return open_time_; }

  // Removes every key (strings, hashes, deadlines) atomically across a crash: a durable mark
  // first (one transaction), then the removals, a slice at a time, with an epoch boundary every
  // 4096 keys (so that no one epoch's undo log holds the whole store), a Sync, and the mark's
  // removal (a transaction). An open that finds the mark finishes the removals before it
  // returns: after a crash the store holds every key or none. Durable on return. REQUIRES: no
  // other thread writes the store meanwhile (the server holds every key's stripe).
  absl::Status FlushAll();

  // Closes everything now (the destructor does the same); the first error.
  absl::Status Close();

 private:
  Store() = default;
  static absl::StatusOr<std::unique_ptr<Store>> OpenOnce(const std::string& path,
                                                         const StoreOptions& options, bool trial);
  // The removals of FlushAll (no mark, no Sync).
  absl::Status RemoveEverything();
  // Binds the indexes of a runtime just opened (the replay finished first) and checks them.
  absl::Status Bind(std::unique_ptr<Runtime> rt, const std::string& path,
                    const StoreOptions& options);
  std::unique_ptr<Runtime> rt_;
  Index* db_ = nullptr;
  Index* expires_ = nullptr;
  Index* hashes_ = nullptr;
  Index* fields_ = nullptr;
  Index* meta_ = nullptr;
  bool created_ = false;
  std::chrono::nanoseconds open_time_{0};
};

}  // namespace pmrt::server

#endif  // PMRT_TOOLS_SERVER_STORE_H_
