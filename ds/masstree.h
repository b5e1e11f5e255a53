// pmrt::ds::Masstree: a concurrent ordered map from byte-string keys to byte-string values, the
// Masstree of Mao, Kohler and Morris (EuroSys 2012): a trie of B+-trees, each layer indexing
// 8 bytes of the key.
//
//   pmrt::ds::Masstree tree;
//   tree.put("apple", "red");                        // insert or replace
//   std::optional<std::string> v = tree.get("apple");
//   tree.scan("a", 10, [](std::string_view k, std::string_view v) { return true; });
//   tree.remove("apple");
//
// Keys are arbitrary bytes (empty, binary with zero bytes, any length), ordered byte-wise as
// unsigned chars; shorter keys order before their extensions. Values are arbitrary bytes up to
// 4 GiB. For fixed-size values see put_as/get_as; for 8-byte integer keys in numeric order,
// U64Key.
//
// Thread safety: every operation may run concurrently with every other. Lookups and scans take
// no locks and write no shared memory; writers lock one border node (plus, during a split, the
// ancestors that change). Operations are linearizable, except that a scan sees keys inserted or
// removed while it runs in either state (keys present throughout are visited, each at most
// once, in ascending order). size() is exact only while no writer runs.
//
// Memory: nodes and values come from the NodeAllocator (ds/node_allocator.h); removed or
// replaced ones are retired and freed only after every concurrent reader is done. Layouts and
// the concurrency protocol: docs/masstree.md.
//
// Durability: the allocator selects the tree policy (ds/internal/tree_policy.h). With the
// default CachingNodeAllocator the tree is transient and durability is compiled out. With
// PoolNodeAllocator the same source is the durable tree of ds/durable_masstree.h (nodes in a
// pool, in-cache-line and external undo logs on the epoch scope).
#ifndef PMRT_DS_MASSTREE_H_
#define PMRT_DS_MASSTREE_H_

#include <algorithm>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "ds/internal/node_layout.h"
#include "ds/internal/tree_check.h"
#include "ds/internal/tree_core.h"
#include "ds/internal/tree_find.h"
#include "ds/internal/tree_insert.h"
#include "ds/internal/tree_policy.h"
#include "ds/internal/tree_remove.h"
#include "ds/internal/tree_scan.h"
#include "ds/node_allocator.h"

namespace pmrt::ds {

enum class PutResult : uint8_t {
  kInserted,  // the key was new
  kUpdated,   // the key existed; its value was replaced
  kNoMemory,  // an allocation failed; the tree is unchanged
};

enum class InsertResult : uint8_t {
  kInserted,  // the key was new
  kExists,    // the key existed; nothing changed
  kNoMemory,  // an allocation failed; the tree is unchanged
};

// An 8-byte big-endian key, so that integer order is key order.
class U64Key {
 public:
  explicit U64Key(uint64_t v) {
    for (int i = 0; i < 8; ++i) bytes_[i] = static_cast<char>(v >> (56 - 8 * i));
  }
  operator std::string_view() const { return {bytes_, 8}; }  // NOLINT: a key is a view
  std::string_view view() const { return {bytes_, 8}; }

 private:
  char bytes_[8];
};

// What CheckInvariants found: keys, layers, border and interior nodes, height.
using TreeShape = ds_internal::TreeShape;
// What CheckInvariants can show a caller: every node and value object of the tree.
using TreeVisitor = ds_internal::TreeVisitor;

// Receives each key and value of a scan, in ascending key order; returns false to stop. The
// views are valid only during the call.
using ScanCallback = absl::FunctionRef<bool(std::string_view key, std::string_view value)>;

template <IsNodeAllocator A = CachingNodeAllocator>
class BasicMasstree {
 public:
  using Allocator = A;
  using Policy = ds_internal::PolicyOf<A>;
  static constexpr bool kDurable = Policy::kDurable;

  // Creates an empty transient tree. Aborts if the allocator cannot provide the first node.
  // (The durable tree is created and reopened by DurableMasstree, ds/durable_masstree.h.)
  explicit BasicMasstree(A alloc = A()) requires(!kDurable);
  // REQUIRES: no other thread uses the tree. The transient tree retires every node and value;
  // the durable tree only detaches (its nodes stay in the pool).
  ~BasicMasstree();
  BasicMasstree(const BasicMasstree&) = delete;
  BasicMasstree& operator=(const BasicMasstree&) = delete;

  // The value stored under `key`, or nullopt.
  std::optional<std::string> get(std::string_view key) const;
  // Copies the value under `key` into *value; false when absent (*value untouched).
  bool get(std::string_view key, std::string* value) const;
  // Copies up to buf.size() bytes of the value under `key` into `buf`; returns the value's whole
  // length (more than buf.size() when the copy was cut short), or nullopt when absent.
  std::optional<size_t> get(std::string_view key, std::span<char> buf) const;
  // Zero-copy read: calls f(value) with a view of the value under `key`, valid only during the
  // call, which runs under the tree's read guard (keep it short; it must not write this tree
  // or wait for an epoch). Returns whether the key was found (f is not called when absent).
  template <class F>
  requires std::invocable<F&, std::string_view>
  bool read(std::string_view key, F&& f) const;
  // As get(key, value), comparing the value's checksum first where the tree keeps them (the
  // durable tree, ds/durable_masstree.h): kDataLoss naming the key when it fails (*value
  // untouched). True when found, false when absent.
  absl::StatusOr<bool> get_verified(std::string_view key, std::string* value) const;
  // True when `value`, a view that this tree's scan or range passed to its callback with `key`,
  // matches its checksum, or when the tree keeps none. REQUIRES: called inside that callback.
  bool value_intact(std::string_view key, std::string_view value) const {
    return !core_.policy.value_checksums() ||
           ds_internal::ValueChecksum(key, value) ==
               ds_internal::ValueObject::LoadChecksum(core_.policy.value_form(), value);
  }
  // The value under `key` as a T (its bytes, as put_as stored them); nullopt when absent or when
  // the stored value is not sizeof(T) bytes.
  template <class T>
  requires std::is_trivially_copyable_v<T> std::optional<T> get_as(std::string_view key)
  const;

  // Inserts `key` or replaces its value (a new value object; the old one is retired). The
  // durable tree's write operations, should the external undo log be full, wait for the next
  // epoch boundary (advancing the epoch themselves) and retry (see ds/durable_masstree.h for a
  // caller that holds its own epoch guard).
  PutResult put(std::string_view key, std::string_view value);
  // The same; on kUpdated, *previous receives the value it replaced.
  PutResult put(std::string_view key, std::string_view value, std::string* previous);
  template <class T>
  requires std::is_trivially_copyable_v<T> PutResult put_as(std::string_view key, const T& value) {
    return put(key, std::string_view(reinterpret_cast<const char*>(&value), sizeof(T)));
  }
  // Inserts `key` only if it is absent.
  InsertResult insert_if_absent(std::string_view key, std::string_view value);
  // Removes `key`; false when it was absent.
  bool remove(std::string_view key);

  // Calls cb on up to `count` keys >= `from`, ascending; returns how many it visited (a false
  // from cb stops the scan; that key counts).
  size_t scan(std::string_view from, size_t count, ScanCallback cb) const;
  // Calls cb on the keys in [lo, hi), ascending; returns how many it visited.
  size_t range(std::string_view lo, std::string_view hi, ScanCallback cb) const;

  // Number of keys (exact when no writer runs, an estimate otherwise). A reopened durable tree
  // counts its keys once, at the first call.
  size_t size() const;

  // Structural check (ds/internal/tree_check.h) and, where the tree keeps them, value checksums
  // (kDataLoss when only those fail), including size() against the keys found; fills *shape
  // when given, with what was found up to a failure; `visitor` (may be null) sees every node and
  // value object the check reaches. REQUIRES: no writer runs concurrently. `values` false checks
  // the structure alone (no value checksums: what a reader needs before it trusts the links).
  absl::Status CheckInvariants(TreeShape* shape = nullptr, TreeVisitor* visitor = nullptr,
                               bool values = true) const;

  A& allocator() { return alloc_; }
  const Policy& policy() const { return core_.policy; }

  // A run of operations by one thread under one read-side critical section (below).
  class Batch;

 protected:
  using Guard = typename A::Guard;
  using Writer = ds_internal::Writer<A, Policy>;
  static constexpr int64_t kUnknownCount = INT64_MIN;

  // For DurableMasstree: a tree over an existing root word (`root_word` in the pool, already
  // naming a root node). `count` is the number of keys, or kUnknownCount.
  BasicMasstree(A alloc, Policy policy, std::atomic<uint64_t>* root_word, int64_t count)
      : alloc_(std::move(alloc)), core_(std::move(policy)), base_count_(count) {
    core_.root_word = root_word;
  }

  static uint64_t EpochOf(const Guard& g) {
    if constexpr (kDurable) {
      return g.epoch();
    } else {
      return 0;
    }
  }
  // Runs a write operation in a guard; retries it after an epoch boundary while the durable
  // tree's undo log is full (the operation changed nothing then).
  template <class F>
  ds_internal::WriteOutcome Write(F&& op);

  mutable A alloc_;  // Guards need a mutable allocator; const operations allocate nothing
  ds_internal::TreeCore<Policy> core_;
  // Keys when the tree was created or opened (kUnknownCount: a reopened tree not yet counted).
  mutable std::atomic<int64_t> base_count_{0};
};

// Batch: the calling thread's operations on one tree under one allocator guard, as the original
// Masstree's threads run between quiescent points: entering and leaving the guard (for the
// transient tree an announcement with a full fence) is paid once per batch, not per operation.
//
//   ds::Masstree::Batch batch(tree);
//   for (...) batch.put(key, value), batch.get(other);
//
// Each operation first asks the guard whether it holds anything up (the allocator guard's
// stale(): the transient tree's reclamation has advanced past it, or an epoch boundary of the
// durable tree is waiting for it) and then renews it (a durable renewal waits out the
// boundary). So a boundary waits for at most the one operation a thread of a batch is running,
// plus whatever the caller does between two operations of its batch: hold a Batch only across
// a run of operations, never while the thread waits or sleeps (as a guard). The operations
// have the tree's own semantics; a write that finds no room under the batch's guard (the
// durable tree's undo log or heap) leaves it, retries as the tree's operation does, and
// renews it. Not thread-safe: one thread uses a Batch, and while it lives that thread holds
// a guard (nesting as guards do).
template <IsNodeAllocator A>
class BasicMasstree<A>::Batch {
 public:
  explicit Batch(BasicMasstree& tree) : tree_(tree) { Take(); }
  ~Batch() { Drop(); }
  Batch(const Batch&) = delete;
  Batch& operator=(const Batch&) = delete;

  std::optional<std::string> get(std::string_view key) {
    Step();
    return tree_.get(key);
  }
  bool get(std::string_view key, std::string* value) {
    Step();
    return tree_.get(key, value);
  }
  std::optional<size_t> get(std::string_view key, std::span<char> buf) {
    Step();
    return tree_.get(key, buf);
  }
  template <class F>
  requires std::invocable<F&, std::string_view>
  bool read(std::string_view key, F&& f) {
    Step();
    return tree_.read(key, std::forward<F>(f));
  }
  template <class T>
  requires std::is_trivially_copyable_v<T> std::optional<T> get_as(std::string_view key) {
    Step();
    return tree_.template get_as<T>(key);
  }
  PutResult put(std::string_view key, std::string_view value, std::string* previous = nullptr) {
    return Retried(PutResult::kNoMemory, [&] { return tree_.put(key, value, previous); });
  }
  template <class T>
  requires std::is_trivially_copyable_v<T> PutResult put_as(std::string_view key, const T& value) {
    return put(key, std::string_view(reinterpret_cast<const char*>(&value), sizeof(T)));
  }
  InsertResult insert_if_absent(std::string_view key, std::string_view value) {
    return Retried(InsertResult::kNoMemory, [&] { return tree_.insert_if_absent(key, value); });
  }
  bool remove(std::string_view key) {
    // The tree's remove() says false both for an absent key and for a full undo log under a
    // guard: the outcome tells them apart.
    const auto removed = ds_internal::WriteOutcome::kRemoved;
    return Retried(ds_internal::WriteOutcome::kNoMemory, [&] {
             return tree_.Write([&](Writer& w) { return ds_internal::RemoveKey(w, key); });
           }) == removed;
  }
  size_t scan(std::string_view from, size_t count, ScanCallback cb) {
    Step();
    return tree_.scan(from, count, cb);
  }
  size_t range(std::string_view lo, std::string_view hi, ScanCallback cb) {
    Step();
    return tree_.range(lo, hi, cb);
  }
  // A quiescent point: ends the guard and takes a new one (a durable one in the open epoch).
  void quiesce() {
    Drop();
    Take();
  }

 private:
  // The guard lives in guard_ between Take and Drop (always, outside quiesce and Retried).
  Guard& guard() { return *std::launder(reinterpret_cast<Guard*>(guard_)); }
  void Take() { new (guard_) Guard(tree_.alloc_); }
  void Drop() { guard().~Guard(); }
  void Step() {
    if constexpr (requires(const Guard& g) {
                    { g.stale() } -> std::same_as<bool>;
                  }) {
      if (!guard().stale()) return;
    }
    quiesce();
  }
  // Runs a write; a no-room result under the batch's guard (nothing changed) is retried once
  // outside it, where the tree's operation can wait for room.
  template <class R, class Op>
  R Retried(R no_room, Op&& op) {
    Step();
    R r = op();
    if (r != no_room) return r;
    Drop();
    try {
      r = op();
    } catch (...) {
      Take();
      throw;
    }
    Take();
    return r;
  }

  BasicMasstree& tree_;
  alignas(Guard) std::byte guard_[sizeof(Guard)];
};

using Masstree = BasicMasstree<CachingNodeAllocator>;

// ---- Implementation -------------------------------------------------------------------------

template <IsNodeAllocator A>
BasicMasstree<A>::BasicMasstree(A alloc) requires(!kDurable)
    : alloc_(std::move(alloc)), core_(Policy()) {
  using ds_internal::LeafNode;
  void* mem = alloc_.AllocateNode(sizeof(LeafNode), alignof(LeafNode));
  if (mem == nullptr) {
    std::fputs("pmrt::ds::BasicMasstree: cannot allocate the root node\n", stderr);
    std::abort();
  }
  LeafNode* root = LeafNode::Init(mem, /*root=*/true, /*locked=*/false, /*low=*/0);
  // Release: the initialized root is visible to any thread that is later handed the tree.
  core_.SetRoot(ds_internal::HeaderOf(root));
}

template <IsNodeAllocator A>
BasicMasstree<A>::~BasicMasstree() {
  if constexpr (!kDurable) {
    // No Guard: no other thread uses the tree, and a guard held across millions of retires
    // would keep the allocator's reclamation from advancing (MallocNodeAllocator's Ebr would
    // rescan an ever longer limbo list: quadratic). Each retire then frees as it goes.
    Writer w{core_, alloc_, 0};
    ds_internal::DestroyNode(w, core_.Root());
  }
}

template <IsNodeAllocator A>
template <class F>
ds_internal::WriteOutcome BasicMasstree<A>::Write(F&& op) {
  bool waited_for_room = false;
  for (;;) {
    ds_internal::WriteOutcome out;
    {
      Guard g(alloc_);
      Writer w{core_, alloc_, EpochOf(g)};
      out = op(w);
    }
    if constexpr (kDurable) {
      if (out == ds_internal::WriteOutcome::kNoLog) {
        // Outside our guard: the boundary waits for guards. Not possible inside a caller's.
        if (alloc_.WaitForLogSpace()) continue;
        return ds_internal::WriteOutcome::kNoMemory;
      }
      if (out == ds_internal::WriteOutcome::kNoMemory && !waited_for_room) {
        // The heap could not wait for its frees under our guard: once, outside it.
        waited_for_room = true;
        if (alloc_.WaitForHeapRoom()) continue;
      }
    }
    return out;
  }
}

template <IsNodeAllocator A>
std::optional<std::string> BasicMasstree<A>::get(std::string_view key) const {
  Guard g(alloc_);
  const ds_internal::ValueObject* v = ds_internal::Lookup(core_, key);
  if (v == nullptr) return std::nullopt;
  return std::string(v->value());
}

template <IsNodeAllocator A>
bool BasicMasstree<A>::get(std::string_view key, std::string* value) const {
  Guard g(alloc_);
  const ds_internal::ValueObject* v = ds_internal::Lookup(core_, key);
  if (v == nullptr) return false;
  value->assign(v->value());
  return true;
}

template <IsNodeAllocator A>
std::optional<size_t> BasicMasstree<A>::get(std::string_view key, std::span<char> buf) const {
  Guard g(alloc_);
  const ds_internal::ValueObject* v = ds_internal::Lookup(core_, key);
  if (v == nullptr) return std::nullopt;
  const std::string_view value = v->value();
  const size_t n = std::min(buf.size(), value.size());
  if (n > 0) std::memcpy(buf.data(), value.data(), n);  // (an empty span's data may be null)
  return value.size();
}

template <IsNodeAllocator A>
template <class F>
requires std::invocable<F&, std::string_view>
bool BasicMasstree<A>::read(std::string_view key, F&& f) const {
  Guard g(alloc_);
  const ds_internal::ValueObject* v = ds_internal::Lookup(core_, key);
  if (v == nullptr) return false;
  f(v->value());
  return true;
}

template <IsNodeAllocator A>
absl::StatusOr<bool> BasicMasstree<A>::get_verified(std::string_view key,
                                                    std::string* value) const {
  Guard g(alloc_);
  const ds_internal::ValueObject* v = ds_internal::Lookup(core_, key);
  if (v == nullptr) return false;
  if (!value_intact(key, v->value())) {
    std::string where;
    if constexpr (kDurable) {
      where = absl::StrCat(" at offset ", reinterpret_cast<uintptr_t>(v) - core_.policy.base());
    }
    return absl::DataLossError(
        absl::StrCat("the value object", where, " of key \"",
                     absl::CHexEscape(absl::string_view(key.data(), key.size())), "\" (",
                     v->value_len(), " bytes) fails its checksum"));
  }
  value->assign(v->value());
  return true;
}

template <IsNodeAllocator A>
template <class T>
requires std::is_trivially_copyable_v<T> std::optional<T> BasicMasstree<A>::get_as(
    std::string_view key)
const {
  Guard g(alloc_);
  const ds_internal::ValueObject* v = ds_internal::Lookup(core_, key);
  if (v == nullptr || v->value_len() != sizeof(T)) return std::nullopt;
  T out;
  std::memcpy(&out, v->value().data(), sizeof(T));
  return out;
}

template <IsNodeAllocator A>
PutResult BasicMasstree<A>::put(std::string_view key, std::string_view value) {
  return put(key, value, nullptr);
}

template <IsNodeAllocator A>
PutResult BasicMasstree<A>::put(std::string_view key, std::string_view value,
                                std::string* previous) {
  using ds_internal::WriteOutcome;
  switch (Write([&](Writer& w) {
    return ds_internal::PutKey(w, key, value, ds_internal::PutMode::kUpsert, previous);
  })) {
    case WriteOutcome::kInserted:
      return PutResult::kInserted;
    case WriteOutcome::kUpdated:
      return PutResult::kUpdated;
    default:
      return PutResult::kNoMemory;
  }
}

template <IsNodeAllocator A>
InsertResult BasicMasstree<A>::insert_if_absent(std::string_view key, std::string_view value) {
  using ds_internal::WriteOutcome;
  switch (Write([&](Writer& w) {
    return ds_internal::PutKey(w, key, value, ds_internal::PutMode::kInsertIfAbsent);
  })) {
    case WriteOutcome::kInserted:
      return InsertResult::kInserted;
    case WriteOutcome::kExists:
      return InsertResult::kExists;
    default:
      return InsertResult::kNoMemory;
  }
}

template <IsNodeAllocator A>
bool BasicMasstree<A>::remove(std::string_view key) {
  return Write([&](Writer& w) { return ds_internal::RemoveKey(w, key); }) ==
         ds_internal::WriteOutcome::kRemoved;
}

template <IsNodeAllocator A>
size_t BasicMasstree<A>::scan(std::string_view from, size_t count, ScanCallback cb) const {
  if (count == 0) return 0;
  Guard g(alloc_);
  size_t visited = 0;
  ds_internal::ScanTree(core_, from, /*inclusive=*/true,
                        [&](std::string_view k, const ds_internal::ValueObject& v) {
                          ++visited;
                          return cb(k, v.value()) && visited < count;
                        });
  return visited;
}

template <IsNodeAllocator A>
size_t BasicMasstree<A>::range(std::string_view lo, std::string_view hi, ScanCallback cb) const {
  if (!(lo < hi)) return 0;
  Guard g(alloc_);
  size_t visited = 0;
  ds_internal::ScanTree(core_, lo, /*inclusive=*/true,
                        [&](std::string_view k, const ds_internal::ValueObject& v) {
                          if (!(k < hi)) return false;
                          ++visited;
                          return cb(k, v.value());
                        });
  return visited;
}

template <IsNodeAllocator A>
size_t BasicMasstree<A>::size() const {
  int64_t base = base_count_.load(std::memory_order_acquire);
  if (base == kUnknownCount) {
    // A reopened durable tree: count once (exact when no writer runs meanwhile), less what
    // this execution's writers have added so far.
    const int64_t before = core_.size.Sum();
    size_t keys = 0;
    {
      Guard g(alloc_);
      ds_internal::ScanTree(core_, "", /*inclusive=*/true,
                            [&](std::string_view, const ds_internal::ValueObject&) {
                              ++keys;
                              return true;
                            });
    }
    int64_t expected = kUnknownCount;
    base_count_.compare_exchange_strong(expected, static_cast<int64_t>(keys) - before,
                                        std::memory_order_acq_rel);
    base = base_count_.load(std::memory_order_acquire);
  }
  const int64_t n = base + core_.size.Sum();
  return n < 0 ? 0 : static_cast<size_t>(n);
}

template <IsNodeAllocator A>
absl::Status BasicMasstree<A>::CheckInvariants(TreeShape* shape, TreeVisitor* visitor,
                                               bool values) const {
  Guard g(alloc_);
  TreeShape found;
  absl::Status s = ds_internal::CheckTree(core_, &found, visitor, values);
  if (shape != nullptr) *shape = found;  // what was found so far, also on a failure
  if (!s.ok() && s.code() != absl::StatusCode::kDataLoss) return s;
  // A reopened tree not yet counted takes the check's count (no writer runs): size() below
  // does not walk the tree a second time.
  int64_t unknown = kUnknownCount;
  base_count_.compare_exchange_strong(unknown, static_cast<int64_t>(found.keys) - core_.size.Sum(),
                                      std::memory_order_acq_rel);
  if (!s.ok()) return s;
  if (found.keys != size()) {
    return absl::InternalError(
        absl::StrCat("size() is ", size(), " but the tree holds ", found.keys, " keys"));
  }
  return absl::OkStatus();
}

}  // namespace pmrt::ds

#endif  // PMRT_DS_MASSTREE_H_
