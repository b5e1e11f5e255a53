// The durable Masstree: the same tree as ds/masstree.h, with its nodes and values in a pool and
// every change undo-logged on the epoch scope (DESIGN.md contract 1): after a crash in epoch e
// the tree reopens exactly as it was when e began.
//
//   auto pool = pmrt::Pool::Open(path, "app");                   // or Create
//   auto epochs = pmrt::epoch::Manager::Open(**pool);           // replays the external log
//   auto heap = pmrt::alloc::Heap::Open(**pool, **epochs);      // rolls the heap back
//   auto tree = pmrt::ds::DurableMasstree::Create(**pool, **epochs, **heap);
//   uint64_t where = (*tree)->descriptor();   // keep it in the pool (e.g. the root object)
//   (*tree)->put("k", "v");                   // durable once the next epoch has begun
//   (*epochs)->Sync();                        // ... or now
//   // after a restart (open order: pool, Manager, Heap, then the tree):
//   auto again = pmrt::ds::DurableMasstree::Open(**pool, **epochs, **heap, where);
//
// Open does no work proportional to the tree: the external log was replayed by Manager::Open,
// and every node repairs its in-line logs at its first access in the new execution. The
// contract, the layout and the logging cases are in docs/masstree.md, "Durability".
//
// Thread safety: as BasicMasstree. The Manager and the Heap must outlive the tree; the tree
// must be destroyed (it only detaches) before they are. Operations may run inside a caller's
// own epoch::Guard (they then run in its epoch), with one difference: should the external undo
// log be full, a write cannot wait for the next epoch; put and insert_if_absent then return
// kNoMemory, and remove returns false, with the tree unchanged.
#ifndef PMRT_DS_DURABLE_MASSTREE_H_
#define PMRT_DS_DURABLE_MASSTREE_H_

#include <cstddef>
#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "alloc/allocator.h"
#include "ds/durable_stats.h"
#include "ds/internal/durable_policy.h"
#include "ds/masstree.h"
#include "epoch/epoch.h"
#include "epoch/pool.h"

namespace pmrt::ds {

// The NodeAllocator of the durable tree: nodes and value objects come from the pool's
// persistent heap, the read-side critical section is an epoch::Guard, and retired memory goes
// back through Heap::Free, which defers reuse until the retiring epoch has closed (no guard can
// hold the block) and is durable. The free is recorded in the same epoch as the unlink that
// retires the block, so a crash either keeps both or rolls both back: no leak, no double free.
// (Deferring the Free itself with Manager::Retire would record it in a later epoch, and a crash
// there would leak the block.)
class PoolNodeAllocator {
 public:
  using Policy = ds_internal::DurablePolicy;

  class Guard {
   public:
    explicit Guard(PoolNodeAllocator& a) : epochs_(a.epochs_), g_(*a.epochs_) {}
    uint64_t epoch() const { return g_.epoch(); }
    // True when an advance waits for this guard (the tree's Batch then ends and renews it).
    bool stale() const { return g_.Stale(*epochs_); }

   private:
    epoch::Manager* epochs_;
    epoch::Guard g_;
  };

  explicit PoolNodeAllocator(alloc::Heap& heap) : heap_(&heap), epochs_(&heap.epochs()) {}

  void* AllocateNode(size_t size, size_t align) { return heap_->Allocate(size, align); }
  void RetireNode(void* p, size_t) { Free(p); }
  void* AllocateValue(size_t size) { return heap_->Allocate(size, 16); }
  void RetireValue(void* p, size_t) { Free(p); }
  // The external undo log is full until the running epoch completes: advances the epoch and
  // returns true, or returns false (without waiting) when the calling thread holds an
  // epoch::Guard of its own (the advance would wait for it forever).
  bool WaitForLogSpace();
  // An allocation of the write just ended failed (it ran under the write's guard, which could
  // not wait for frees): runs the heap's boundaries now (Heap::MakeRoom); true when a retry is
  // worth it. False under a caller's guard or with epochs advanced by hand.
  bool WaitForHeapRoom() { return heap_->MakeRoom(); }

  alloc::Heap& heap() const { return *heap_; }
  epoch::Manager& epochs() const { return *epochs_; }

 private:
  void Free(void* p);

  alloc::Heap* heap_;
  epoch::Manager* epochs_;
};
static_assert(IsNodeAllocator<PoolNodeAllocator>);

// How DurableMasstree::Create lays a new tree out.
struct DurableMasstreeOptions {
  // Every value object carries a CRC32C of its full key and bytes (layout version 3: the
  // checksum in the object's header, ds/internal/value_ref.h), checked by CheckInvariants,
  // get_verified and value_intact. False makes a version-1 tree, without them: no checksum
  // computed per write (a value object of a key with a suffix is 4 bytes smaller), and no way
  // to tell a value changed on media from the one written.
  bool value_checksums = true;
};

class DurableMasstree : public BasicMasstree<PoolNodeAllocator> {
 public:
  // A new, empty tree in the pool (a descriptor and a root leaf, allocated in the current
  // epoch: durable once it completes). Errors: kInvalidArgument (heap of another pool or
  // manager), kResourceExhausted (heap full).
  static absl::StatusOr<std::unique_ptr<DurableMasstree>> Create(
      Pool& pool, epoch::Manager& epochs, alloc::Heap& heap,
      const DurableMasstreeOptions& options = {});
  // Reopens the tree whose descriptor() was `descriptor`. REQUIRES: Manager::Open and
  // Heap::Open of this execution are done. Errors: kInvalidArgument (offset outside the pool or
  // misaligned, heap of another pool), kDataLoss (no tree descriptor there, or a root outside
  // the pool), kFailedPrecondition (a newer or different node layout).
  static absl::StatusOr<std::unique_ptr<DurableMasstree>> Open(Pool& pool, epoch::Manager& epochs,
                                                               alloc::Heap& heap,
                                                               uint64_t descriptor);

  // The pool offset that reopens this tree.
  uint64_t descriptor() const;

  // Frees the whole tree: every node and value object, then the descriptor (its magic cleared
  // first, undo-logged, so that Open of the stale offset fails with kDataLoss), all in the
  // epoch of `g`, the calling thread's guard. The frees take effect when that epoch completes;
  // a crash before then rolls every one of them back with the rest of the epoch. The caller
  // removes its own reference to descriptor() in the same guard (an undo-logged root, say), so
  // that no crash can separate the reference from the tree. The tree is first checked as
  // CheckInvariants does: a tree that fails the check is not touched (kInternal, naming the
  // violation). REQUIRES: no other thread uses the tree, now or later; afterwards the object
  // only detaches (destroy it without calling anything else). Errors: kFailedPrecondition
  // (`g` is not a guard of this tree's manager on this thread), kInternal (check failed),
  // kResourceExhausted (the undo log is full: nothing was freed).
  absl::Status Destroy(const epoch::Guard& g);
  DurableStats durable_stats() const { return policy().stats(); }

  // For inspection tools that walk the pool's objects (tools/pool_view.cc):
  // The size of the tree's descriptor object (at descriptor()).
  static constexpr size_t kDescriptorBytes = sizeof(ds_internal::MasstreeDescriptor);
  // The most bytes a value object holds in front of its value besides the key's suffix (header
  // and, in the inline form, the checksum): a value's view starts at most this many bytes plus
  // the key's length after its object.
  static constexpr size_t kMaxValueHeaderBytes =
      sizeof(ds_internal::ValueObject) + sizeof(uint32_t);
  // The value bytes of the value object at pool offset `offset`, read as the layout says,
  // unchecked. REQUIRES: `offset` is a value object of this tree (CheckInvariants lists them).
  std::string_view ValueOfObject(uint64_t offset) const {
    return reinterpret_cast<const ds_internal::ValueObject*>(policy().base() + offset)->value();
  }

 private:
  DurableMasstree(PoolNodeAllocator alloc, ds_internal::DurablePolicy policy,
                  ds_internal::MasstreeDescriptor* desc, int64_t count)
      : BasicMasstree(std::move(alloc), std::move(policy), &desc->root, count) {}
};

}  // namespace pmrt::ds

#endif  // PMRT_DS_DURABLE_MASSTREE_H_
