// NodeAllocator: where the Masstree gets its memory and how it gives it back.
//
//   pmrt::ds::BasicMasstree<MyAllocator> tree(MyAllocator(...));
//
// The tree never frees memory that a concurrent reader might still hold. It unlinks a node or
// value object and hands it to Retire*, which frees it later, once every reader that could have
// seen it is gone. To make that possible, every tree operation runs inside the allocator's
// read-side critical section, `typename A::Guard g(allocator)`.
//
// The transient tree uses CachingNodeAllocator below (per-thread free lists of
// ds/internal/node_cache.h + the volatile epoch-based reclamation in ds/internal/ebr.h);
// MallocNodeAllocator is the same with aligned malloc. The durable tree will plug in the pool's
// allocator, with pmrt::epoch::Guard as the critical section and pmrt::epoch::Manager::Retire for
// deferred frees; nothing in the tree's algorithms changes.
#ifndef PMRT_DS_NODE_ALLOCATOR_H_
#define PMRT_DS_NODE_ALLOCATOR_H_

#include <concepts>
#include <cstddef>
#include <cstdlib>

#include "ds/internal/ebr.h"
#include "ds/internal/node_cache.h"

namespace pmrt::ds {

// The contract a NodeAllocator keeps.
//   AllocateNode(size, align): `size` bytes aligned to `align` (a power of two, <= 4096), or
//       nullptr when out of memory (the tree then fails the operation without changing itself).
//   RetireNode(p, size): frees p (from AllocateNode, of that size) once no Guard that began
//       before the call remains.
//   AllocateValue(size): `size` bytes, 16-byte aligned, or nullptr.
//   RetireValue(p, size): as RetireNode, for AllocateValue memory.
//   Guard: constructible from the allocator; the read-side critical section. Nests.
//       Optionally `bool stale() const`: true when the guard holds up the reclamation (or the
//       epoch boundary) that a new guard would not; BasicMasstree::Batch keeps one guard across
//       its operations and renews it then. Without it a Batch renews its guard at every
//       operation.
// All members may be called concurrently from any thread.
template <class A>
concept IsNodeAllocator = requires(A& a, void* p, size_t n) {
  { a.AllocateNode(n, n) } -> std::same_as<void*>;
  { a.RetireNode(p, n) } -> std::same_as<void>;
  { a.AllocateValue(n) } -> std::same_as<void*>;
  { a.RetireValue(p, n) } -> std::same_as<void>;
  requires std::constructible_from<typename A::Guard, A&>;
};

// The read-side critical section of the transient allocators: a guard on Ebr::Global().
class EbrAllocatorGuard {
 public:
  template <class A>
  explicit EbrAllocatorGuard(A&) {
    ds_internal::Ebr::Global().Enter();
  }
  ~EbrAllocatorGuard() { ds_internal::Ebr::Global().Exit(); }
  // True when the guard holds up reclamation (BasicMasstree::Batch then renews it).
  bool stale() const { return ds_internal::Ebr::Global().Stale(); }
  EbrAllocatorGuard(const EbrAllocatorGuard&) = delete;
  EbrAllocatorGuard& operator=(const EbrAllocatorGuard&) = delete;
};

// Transient allocator: aligned malloc, frees deferred through Ebr::Global().
class MallocNodeAllocator {
 public:
  using Guard = EbrAllocatorGuard;

  void* AllocateNode(size_t size, size_t align) {
    return std::aligned_alloc(align, (size + align - 1) / align * align);
  }
  void RetireNode(void* p, size_t size) { ds_internal::Ebr::Global().Retire(p, &Free, size); }
  void* AllocateValue(size_t size) { return std::aligned_alloc(16, (size + 15) / 16 * 16); }
  void RetireValue(void* p, size_t size) { ds_internal::Ebr::Global().Retire(p, &Free, size); }

 private:
  static void Free(void* p, size_t) { std::free(p); }
};
static_assert(IsNodeAllocator<MallocNodeAllocator>);

// Transient allocator of ds::Masstree: per-thread size-class free lists (ds_internal::NodeCache,
// shared by every tree of the process), frees deferred through Ebr::Global(). Nodes of up to
// NodeCache::kMaxSmall bytes with `align` <= 64 come from the cache (a node's size is rounded up
// to a multiple of 64, so its class is 64-aligned); other nodes use aligned_alloc (the cache's
// Free returns a block of a class size to the class, a larger one to free()).
class CachingNodeAllocator {
 public:
  using Guard = EbrAllocatorGuard;

  void* AllocateNode(size_t size, size_t align) {
    const size_t n = RoundNode(size);
    if (align <= 64 && n <= ds_internal::NodeCache::kMaxSmall) {
      return ds_internal::NodeCache::Global().Allocate(n);
    }
    return std::aligned_alloc(align, (size + align - 1) / align * align);
  }
  void RetireNode(void* p, size_t size) { ds_internal::Ebr::Global().Retire(p, &FreeNode, size); }
  void* AllocateValue(size_t size) { return ds_internal::NodeCache::Global().Allocate(size); }
  void RetireValue(void* p, size_t size) { ds_internal::Ebr::Global().Retire(p, &FreeValue, size); }

 private:
  static size_t RoundNode(size_t size) { return (size + 63) / 64 * 64; }
  static void FreeNode(void* p, size_t size) {
    ds_internal::NodeCache::Global().Free(p, RoundNode(size));
  }
  static void FreeValue(void* p, size_t size) { ds_internal::NodeCache::Global().Free(p, size); }
};
static_assert(IsNodeAllocator<CachingNodeAllocator>);

}  // namespace pmrt::ds

#endif  // PMRT_DS_NODE_ALLOCATOR_H_
