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
// Durability: this is the transient tree. The border node reserves the fields the durable tree
// needs for in-cache-line logging (ds/internal/node_layout.h); durability comes later.
#ifndef PMRT_DS_MASSTREE_H_
#define PMRT_DS_MASSTREE_H_

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "ds/internal/node_layout.h"
#include "ds/internal/tree_check.h"
#include "ds/internal/tree_core.h"
#include "ds/internal/tree_find.h"
#include "ds/internal/tree_insert.h"
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

// Receives each key and value of a scan, in ascending key order; returns false to stop. The
// views are valid only during the call.
using ScanCallback = absl::FunctionRef<bool(std::string_view key, std::string_view value)>;

template <IsNodeAllocator A = MallocNodeAllocator>
class BasicMasstree {
 public:
  using Allocator = A;

  // Creates an empty tree. Aborts if the allocator cannot provide the first node.
  explicit BasicMasstree(A alloc = A());
  // REQUIRES: no other thread uses the tree. Retires every node and value.
  ~BasicMasstree();
  BasicMasstree(const BasicMasstree&) = delete;
  BasicMasstree& operator=(const BasicMasstree&) = delete;

  // The value stored under `key`, or nullopt.
  std::optional<std::string> get(std::string_view key) const;
  // Copies the value under `key` into *value; false when absent (*value untouched).
  bool get(std::string_view key, std::string* value) const;
  // The value under `key` as a T (its bytes, as put_as stored them); nullopt when absent or when
  // the stored value is not sizeof(T) bytes.
  template <class T>
  requires std::is_trivially_copyable_v<T> std::optional<T> get_as(std::string_view key)
  const;

  // Inserts `key` or replaces its value (a new value object; the old one is retired).
  PutResult put(std::string_view key, std::string_view value);
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

  // Number of keys (exact when no writer runs, an estimate otherwise).
  size_t size() const;

  // Structural check (ds/internal/tree_check.h), including size() against the keys found;
  // fills *shape when given. REQUIRES: no writer runs concurrently.
  absl::Status CheckInvariants(TreeShape* shape = nullptr) const;

  A& allocator() { return alloc_; }

 private:
  using Guard = typename A::Guard;

  mutable A alloc_;  // Guards need a mutable allocator; const operations allocate nothing
  ds_internal::TreeCore core_;
};

using Masstree = BasicMasstree<MallocNodeAllocator>;

// ---- Implementation -------------------------------------------------------------------------

template <IsNodeAllocator A>
BasicMasstree<A>::BasicMasstree(A alloc) : alloc_(std::move(alloc)) {
  using ds_internal::LeafNode;
  void* mem = alloc_.AllocateNode(sizeof(LeafNode), alignof(LeafNode));
  if (mem == nullptr) {
    std::fputs("pmrt::ds::BasicMasstree: cannot allocate the root node\n", stderr);
    std::abort();
  }
  LeafNode* root = LeafNode::Init(mem, /*root=*/true, /*locked=*/false, /*low=*/0);
  // Release: the initialized root is visible to any thread that is later handed the tree.
  core_.root.store(ds_internal::HeaderOf(root), std::memory_order_release);
}

template <IsNodeAllocator A>
BasicMasstree<A>::~BasicMasstree() {
  Guard g(alloc_);
  ds_internal::DestroyNode(alloc_, core_.root.load(std::memory_order_acquire));
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
template <class T>
requires std::is_trivially_copyable_v<T> std::optional<T> BasicMasstree<A>::get_as(
    std::string_view key)
const {
  Guard g(alloc_);
  const ds_internal::ValueObject* v = ds_internal::Lookup(core_, key);
  if (v == nullptr || v->value_len != sizeof(T)) return std::nullopt;
  T out;
  std::memcpy(&out, v->value().data(), sizeof(T));
  return out;
}

template <IsNodeAllocator A>
PutResult BasicMasstree<A>::put(std::string_view key, std::string_view value) {
  Guard g(alloc_);
  using ds_internal::WriteOutcome;
  switch (ds_internal::PutKey(core_, alloc_, key, value, ds_internal::PutMode::kUpsert)) {
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
  Guard g(alloc_);
  using ds_internal::WriteOutcome;
  switch (ds_internal::PutKey(core_, alloc_, key, value, ds_internal::PutMode::kInsertIfAbsent)) {
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
  Guard g(alloc_);
  return ds_internal::RemoveKey(core_, alloc_, key);
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
  const int64_t n = core_.size.Sum();
  return n < 0 ? 0 : static_cast<size_t>(n);
}

template <IsNodeAllocator A>
absl::Status BasicMasstree<A>::CheckInvariants(TreeShape* shape) const {
  Guard g(alloc_);
  TreeShape found;
  if (absl::Status s = ds_internal::CheckTree(core_, &found); !s.ok()) return s;
  if (shape != nullptr) *shape = found;
  if (found.keys != size()) {
    return absl::InternalError(
        absl::StrCat("size() is ", size(), " but the tree holds ", found.keys, " keys"));
  }
  return absl::OkStatus();
}

}  // namespace pmrt::ds

#endif  // PMRT_DS_MASSTREE_H_
