// pmrt::Pool: a pool file (or a simulated pool) mapped into memory, with its header, its
// typed root object and the regions the layers above keep their state in.
//
//   auto pool = pmrt::Pool::Create("/dev/shm/app.pool", 64 << 20, "my-app");
//   if (!pool.ok()) return pool.status();
//   auto root = (*pool)->root<MyRoot>();       // absl::StatusOr<MyRoot*>, zeroed at first use
//   ...
//   (*pool)->Close();                          // also done by the destructor
//
//   auto again = pmrt::Pool::Open("/dev/shm/app.pool", "my-app");
//
// Open validates everything it reads before it writes a byte: a missing, empty, truncated,
// foreign, corrupt, newer-format or wrong-layout file gets a specific error naming the path and
// the problem, and the file is left untouched. The on-media format is in docs/format.md.
//
// Thread safety: a Pool may be used from any number of threads; Create/Open/Close are not
// concurrent with other calls on the same Pool. A pool file is opened by one Pool at a time
// (flock); a second opener, in this process or another, gets kFailedPrecondition.
#ifndef PMRT_EPOCH_POOL_H_
#define PMRT_EPOCH_POOL_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "epoch/persist.h"
#include "epoch/pool_layout.h"

namespace pmrt {

struct PoolOptions {
  // Persistence backend. Unset: PMRT_BACKEND from the environment if set, else pmem when
  // libpmem says the mapping is persistent memory (pmem_is_pmem), else msync.
  std::optional<BackendKind> backend;
  // Required with BackendKind::kSim: the simulator whose working copy is the pool (a pmrt::Sim,
  // testing/sim.h).
  SimHooks* sim = nullptr;
  // How the pmem backend writes log records (epoch/persist.h, RecordWrites). Unset:
  // PMRT_RECORD_WRITES ("stream" or "flush") from the environment if set, else the processor's
  // faster way (DefaultRecordWrites). Only speed differs; any pool opens with either.
  std::optional<RecordWrites> record_writes;
  // Create only: sizes of the regions reserved for the layers above (rounded up to 4 KiB).
  size_t root_size = 4096;
  size_t epoch_area_size = 64 * 1024;
  size_t log_area_size = 0;  // 0: 1/16 of the pool, at least 256 KiB
  // Create only: size the file without allocating its blocks (a sparse file: a large pool takes
  // disk space as the heap uses it). The default allocates every block at creation, so that a
  // store can never fail for lack of space; a sparse pool on a full file system gets SIGBUS at
  // the first store into a page that cannot be backed.
  bool sparse = false;
  // Growth (Pool::Grow). The most the pool may grow to while this Pool is open: a file pool
  // reserves this much address space at open, so that growth extends the mapping in place
  // (pptrs are offsets, and raw pointers into the pool stay valid); an in-memory pool's caller
  // owns this many bytes at `base`. 0: for a file pool, max(4 x its size, 16 GiB), but at most
  // a quarter of an address-space limit (RLIMIT_AS), and halved until the address space allows
  // it, down to the pool's size; for an in-memory pool, its size (no growth). Not recorded in the
  // pool: the next open may reserve more.
  size_t max_size = 0;
  // Automatic growth: when the heap cannot serve an allocation, the pool grows by this many
  // bytes (at least what the allocation needs) and the allocation is retried. 0: never.
  size_t grow_by = 0;
  // Open writes nothing: the clean-shutdown flag and the open count (docs/format.md, "Attach")
  // are written by the first layer that writes, once its own validation has passed
  // (epoch::Manager::Open, through BeginWrites), or by root<T>() or Grow; a pool that nothing
  // wrote to is closed without a write. So a pool whose layer refuses to open is left
  // byte-identical. For readers that must not change a pool they cannot open (the pmrt tools).
  bool defer_attach = false;
  // Open only (file pools): maps the file private, copy-on-write. Everything written after the
  // open, the recovery of every layer included, stays in this process's memory; nothing ever
  // reaches the file, and the persistence backend is eADR (stores only: there is nothing to
  // write back). The file is left byte-identical whatever happens, so this serves readers that
  // must not change a pool even when it needs recovery (the `pmrt` tools' info, check and
  // dump), and a trial open that proves every layer opens before the real open writes
  // (RuntimeOptions::trial_open). Grow is refused.
  bool private_mapping = false;
};

enum class PoolRegion { kRoot, kEpoch, kLog, kHeap };

// The layers that run on a pool; at most one of each per pool (Pool::AttachLayer).
enum class PoolLayer : uint32_t { kEpochs = 1, kHeap = 2, kTransactions = 4 };

class Pool {
 public:
  // Smallest pool Create accepts.
  static constexpr size_t kMinPoolSize = 1 << 20;

  // Creates a new pool file of `size` bytes. Errors: kAlreadyExists (path exists),
  // kInvalidArgument (size too small or not page-multiple-able, layout name too long or empty),
  // kPermissionDenied / kNotFound (directory), kResourceExhausted (no space).
  // The file appears at `path` only once it is complete (created under a temporary name,
  // synced, then linked into place), so a crash during Create leaves no pool at `path`.
  static absl::StatusOr<std::unique_ptr<Pool>> Create(const std::string& path, size_t size,
                                                      std::string_view layout,
                                                      const PoolOptions& options = {});
  // Opens an existing pool file created with the same layout name.
  static absl::StatusOr<std::unique_ptr<Pool>> Open(const std::string& path,
                                                    std::string_view layout,
                                                    const PoolOptions& options = {});
  // The same two on memory the caller owns (the crash simulator's working copy or a crash
  // image): the header and recovery paths are the ones file pools use. `name` stands in for
  // the path in error messages.
  static absl::StatusOr<std::unique_ptr<Pool>> CreateInMemory(void* base, size_t size,
                                                              std::string_view layout,
                                                              const PoolOptions& options,
                                                              std::string_view name = "<memory>");
  static absl::StatusOr<std::unique_ptr<Pool>> OpenInMemory(void* base, size_t size,
                                                            std::string_view layout,
                                                            const PoolOptions& options,
                                                            std::string_view name = "<memory>");

  ~Pool();
  Pool(const Pool&) = delete;
  Pool& operator=(const Pool&) = delete;

  // Grows the pool to `new_size` bytes (rounded up to 4 KiB), crash-atomically: a crash at any
  // point leaves the old size or the new one, and either opens cleanly (docs/format.md,
  // "Growth"). The file is extended (its blocks allocated unless the pool was opened with
  // PoolOptions::sparse) and synced, the mapping extended in place, the heap's metadata for the
  // new space written and persisted, and only then the new size committed in the state page.
  // Any thread may call it, concurrently with every other call but Close. Errors:
  // kInvalidArgument (smaller than the pool, or too little to hold a heap segment: at least
  // kMinGrowth), kResourceExhausted (past max_size(), no space on the file system),
  // kFailedPrecondition (closed, or in the failed mode). Growth of a pool that another process
  // has open cannot happen: a pool is locked by the one Pool that has it open.
  absl::Status Grow(size_t new_size);
  // The smallest growth Grow accepts: room for one heap segment (its metadata and one chunk).
  static constexpr size_t kMinGrowth = 256 * 1024;
  // The most this Pool can grow to (PoolOptions::max_size as reserved).
  size_t max_size() const { return capacity_; }
  // PoolOptions::grow_by as given at open; may be changed while the pool is open.
  size_t grow_by() const { return grow_by_.load(std::memory_order_relaxed); }
  void set_grow_by(size_t bytes) { grow_by_.store(bytes, std::memory_order_relaxed); }
  // Number of growths in this run.
  uint64_t growths() const { return growths_.load(std::memory_order_relaxed); }

  // The layer that lays out the pool's end (the heap) takes part in growth: `prepare` writes
  // and persists its metadata for the space [old_size, new_size) before the new size is
  // committed (a crash before the commit leaves the old size, whose Open ignores everything
  // past it); `commit` makes the new space usable once it is. Set by the heap's Open, cleared
  // (empty functions) by its destructor.
  struct GrowthListener {
    std::function<absl::Status(uint64_t old_size, uint64_t new_size)> prepare;
    std::function<void(uint64_t old_size, uint64_t new_size)> commit;
  };
  void SetGrowthListener(GrowthListener listener);

  // Marks the pool cleanly shut down (durably), unmaps and unlocks it. Idempotent. After a
  // crash (was_clean_shutdown() false) the mark is written only once this run's recovery is
  // acknowledged (AcknowledgeRecovery below); until then Close leaves the pool marked as
  // crashed, so that a run that opened the pool but did not recover it (a tool that only
  // read it, a layer whose open failed) cannot hide the crash from the next one.
  absl::Status Close();

  // Parts of recovery that read was_clean_shutdown(). epoch::Manager::Open acknowledges
  // kRecoveredEpochs once the failed epochs are durably recorded and rolled back;
  // txn::Engine::Open acknowledges kRecoveredTxn once committed transactions are replayed.
  // Close marks a crashed pool clean only with kRecoveredEpochs acknowledged and, in a pool
  // that holds a transaction directory, kRecoveredTxn too. A program that uses the pool
  // without those layers recovers its own state and then acknowledges kRecoveredAll.
  enum RecoveryPart : uint32_t {
    kRecoveredEpochs = 1,
    kRecoveredTxn = 2,
    kRecoveredAll = kRecoveredEpochs | kRecoveredTxn,
  };
  void AcknowledgeRecovery(uint32_t parts = kRecoveredAll) {
    recovered_.fetch_or(parts, std::memory_order_acq_rel);
  }
  // True when Close would mark the pool cleanly shut down.
  bool recovery_acknowledged() const;
  // True when `part` has been acknowledged in this run.
  bool acknowledged(RecoveryPart part) const {
    return (recovered_.load(std::memory_order_acquire) & part) != 0;
  }

  // A txn::Engine is open on the pool: set by Engine::Open, cleared by the engine's close once
  // it has written back every word its log holds (a hot word's committed value may be only in
  // the log until then). Close does not mark the pool clean while it is set (an engine leaked,
  // or closed after the pool, or a transaction left open by an exited thread): the next Open
  // replays the log.
  void SetTxnEngineOpen(bool open) { txn_engine_open_.store(open, std::memory_order_release); }
  bool txn_engine_open() const { return txn_engine_open_.load(std::memory_order_acquire); }

  // The root object: sizeof(T) bytes at a fixed offset, zero at first use. The first call
  // records sizeof(T); a later call (in any run) with another size gets kFailedPrecondition,
  // and one larger than the root region gets kInvalidArgument.
  template <class T>
  absl::StatusOr<T*> root() {
    static_assert(std::is_trivially_copyable_v<T> && std::is_standard_layout_v<T>,
                  "a persistent root must be trivially copyable and standard layout");
    auto st = BindRoot(sizeof(T), alignof(T));
    if (!st.ok()) return st;
    return reinterpret_cast<T*>(base_ + header().root.offset);
  }

  // Address of pool offset `off`; offset 0 is null.
  void* at(uint64_t off) const { return off == 0 ? nullptr : base_ + off; }
  // Pool offset of an address inside the pool; 0 for null.
  uint64_t offset_of(const void* p) const {
    return p == nullptr ? 0 : static_cast<uint64_t>(static_cast<const uint8_t*>(p) - base_);
  }
  // Whether [p, p+len) lies inside the mapping. Unsigned arithmetic throughout: an address
  // made from a crafted offset (pool base + an offset of 2^63 or more) is refused, not taken
  // for one below the base.
  bool contains(const void* p, size_t len = 1) const {
    const auto b = reinterpret_cast<uintptr_t>(p), base = reinterpret_cast<uintptr_t>(base_);
    const size_t size = this->size();
    return b >= base && len <= size && b - base <= size - len;
  }
  // The same for pool offset `off` (as read from media): no address is formed first.
  bool contains_offset(uint64_t off, size_t len = 1) const {
    const size_t size = this->size();
    return len <= size && off <= size - len;
  }

  uint8_t* base() const { return base_; }
  // The pool's size: the header's, or what the last growth committed. Grows while the pool is
  // open (acquire: space a growth added is ready once its size is seen).
  size_t size() const { return size_.load(std::memory_order_acquire); }
  const std::string& path() const { return path_; }
  std::string_view layout() const;
  const Persister& persister() const { return persister_; }
  // OK, or the failed mode's error (PoolHealth): entered when the seam cannot make something
  // durable; sticky while the pool is open; the next Open recovers its last durable state.
  absl::Status health() const { return health_->status(); }
  bool failed() const { return health_->failed(); }
  PoolHealth& health_state() { return *health_; }
  const PoolHeader& header() const { return *reinterpret_cast<const PoolHeader*>(base_); }
  PoolState& state() const { return *reinterpret_cast<PoolState*>(base_ + kPoolHeaderSize); }
  RegionDesc region(PoolRegion r) const;
  void* region_base(PoolRegion r) const { return base_ + region(r).offset; }
  // False when the previous run did not Close() the pool (a crash): recovery is due.
  bool was_clean_shutdown() const { return was_clean_shutdown_; }
  // Opened with PoolOptions::private_mapping: no write reaches the file.
  bool is_private() const { return private_; }
  // The backend a writing open of this pool chooses: persister()'s, except for a private
  // mapping (whose persister is eADR).
  BackendKind writing_backend() const { return writing_backend_; }
  // Number of times the pool has been opened (including this one); persisted.
  uint64_t open_count() const;
  // The open's first writes (clean_shutdown = 0, open_count + 1, each durable), done at Open
  // unless PoolOptions::defer_attach; then by the first layer about to write (idempotent; the
  // layers open on one thread, before any other thread uses the pool).
  void BeginWrites();

  // The process-wide default pool (the first one opened that is still open), used by the
  // single-pool conveniences of the layers above. Null when none is open.
  static Pool* Default();

  // A layer's Open attaches it; its destructor detaches it. Two of one layer on one pool would
  // each believe it owns the pool's area (a second epoch manager, heap or transaction engine
  // recovers and writes what the first is using): kFailedPrecondition naming the pool.
  absl::Status AttachLayer(PoolLayer layer);
  void DetachLayer(PoolLayer layer);
  // A layer's destructor checks that no layer above it is still attached (a wrong teardown
  // order): it reports `who` and the layer still open on stderr and aborts, since the layer
  // above would go on using what is being torn down.
  void CheckNoLayerAbove(PoolLayer layer, const char* who) const;

 private:
  Pool() = default;
  static absl::StatusOr<std::unique_ptr<Pool>> Attach(std::unique_ptr<Pool> pool,
                                                      std::string_view layout,
                                                      const PoolOptions& options);
  absl::Status BindRoot(size_t size, size_t align);
  absl::Status ChooseBackend(const PoolOptions& options);
  void Unmap();
  absl::Status ExtendFile(size_t old_size, size_t new_size);

  uint8_t* base_ = nullptr;
  std::atomic<size_t> size_{0};
  size_t capacity_ = 0;  // bytes reserved (file) or owned by the caller (in-memory) at base_
  bool sparse_ = false;
  std::atomic<size_t> grow_by_{0};
  std::atomic<uint64_t> growths_{0};
  std::mutex grow_mu_;  // one growth at a time; guards listener_
  GrowthListener listener_;
  std::string path_;
  int fd_ = -1;  // -1 for in-memory pools
  bool owns_mapping_ = false;
  bool private_ = false;
  bool closed_ = false;
  bool was_clean_shutdown_ = true;
  void WriteAttach();
  std::once_flag begin_writes_;
  std::atomic<bool> writes_begun_{false};  // BeginWrites done
  std::atomic<uint32_t> recovered_{0};     // RecoveryPart bits acknowledged in this run
  std::atomic<bool> txn_engine_open_{false};
  std::atomic<uint32_t> layers_{0};                                      // PoolLayer bits attached
  std::unique_ptr<PoolHealth> health_ = std::make_unique<PoolHealth>();  // persister_ points here
  Persister persister_;
  BackendKind writing_backend_ = BackendKind::kEadr;
};

}  // namespace pmrt

#endif  // PMRT_EPOCH_POOL_H_
