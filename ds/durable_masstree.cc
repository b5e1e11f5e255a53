#include "ds/durable_masstree.h"

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"

namespace pmrt::ds {

using ds_internal::DurablePolicy;
using ds_internal::LeafNode;
using ds_internal::MasstreeDescriptor;

void PoolNodeAllocator::Free(void* p) {
  if (absl::Status st = heap_->Free(p); !st.ok()) {
    // A node or value the tree retires is a live block of this heap by construction: anything
    // else means the tree is corrupt, and freeing on would spread it.
    std::fprintf(stderr, "pmrt::ds::PoolNodeAllocator: %s\n", st.ToString().c_str());
    std::abort();
  }
}

bool PoolNodeAllocator::WaitForLogSpace() {
  if (epochs_->LocalSlot().depth > 0) return false;  // the caller's own guard: cannot advance
  // In the pool's failed mode no epoch completes and no log block comes back: the write is
  // refused (kNoMemory).
  if (epochs_->pool().failed()) return false;
  // The log's blocks of the running epoch are released by the advance that completes it.
  if (absl::Status st = epochs_->Advance(); !st.ok()) {
    if (epochs_->pool().failed()) return false;
    std::fprintf(stderr, "pmrt::ds::PoolNodeAllocator: epoch advance failed: %s\n",
                 st.ToString().c_str());
    std::abort();
  }
  return true;
}

namespace {

absl::Status CheckRuntime(Pool& pool, epoch::Manager& epochs, alloc::Heap& heap) {
  if (&heap.pool() != &pool || &heap.epochs() != &epochs || &epochs.pool() != &pool) {
    return absl::InvalidArgumentError(absl::StrCat(
        pool.path(),
        ": DurableMasstree: the heap and the epoch manager must be those of the pool"));
  }
  return absl::OkStatus();
}

bool AlignedInPool(const Pool& pool, uint64_t off, size_t size) {
  return off != 0 && off % 64 == 0 && off < pool.size() && pool.size() - off >= size;
}

}  // namespace

absl::StatusOr<std::unique_ptr<DurableMasstree>> DurableMasstree::Create(
    Pool& pool, epoch::Manager& epochs, alloc::Heap& heap, const DurableMasstreeOptions& options) {
  if (absl::Status st = CheckRuntime(pool, epochs, heap); !st.ok()) return st;
  epoch::Guard g(epochs);
  const uint64_t e = g.epoch();
  auto desc_mem = heap.TryAllocate(sizeof(MasstreeDescriptor), alignof(MasstreeDescriptor));
  if (!desc_mem.ok()) return desc_mem.status();
  auto leaf_mem = heap.TryAllocate(sizeof(LeafNode), alignof(LeafNode));
  if (!leaf_mem.ok()) {
    (void)heap.FreeUnshared(*desc_mem);
    return leaf_mem.status();
  }
  auto* desc = new (*desc_mem) MasstreeDescriptor{};
  // Before the policy reads it.
  desc->version = options.value_checksums ? MasstreeDescriptor::kVersion
                                          : MasstreeDescriptor::kFirstChecksumVersion - 1;
  DurablePolicy policy(pool, epochs, desc);
  // Both blocks are new in e: the heap registered their lines dirty, so the boundary that
  // completes e makes them durable; if e fails they are free again (and the caller's link to
  // the descriptor, written in e, is rolled back with them).
  LeafNode* root = LeafNode::Init(*leaf_mem, /*root=*/true, /*locked=*/false, /*low=*/0);
  policy.InitLeaf(root, e);
  desc->magic = MasstreeDescriptor::kMagic;
  desc->leaf_size = sizeof(LeafNode);
  desc->root.store(pool.offset_of(root), std::memory_order_relaxed);
  desc->logged_epoch.store(e, std::memory_order_relaxed);  // new in e: never copied in e
  return std::unique_ptr<DurableMasstree>(
      new DurableMasstree(PoolNodeAllocator(heap), std::move(policy), desc, 0));
}

absl::StatusOr<std::unique_ptr<DurableMasstree>> DurableMasstree::Open(Pool& pool,
                                                                       epoch::Manager& epochs,
                                                                       alloc::Heap& heap,
                                                                       uint64_t descriptor) {
  if (absl::Status st = CheckRuntime(pool, epochs, heap); !st.ok()) return st;
  if (!AlignedInPool(pool, descriptor, sizeof(MasstreeDescriptor))) {
    return absl::InvalidArgumentError(
        absl::StrCat(pool.path(), ": DurableMasstree::Open: descriptor offset ", descriptor,
                     " is not a 64-byte aligned offset inside the pool"));
  }
  auto* desc = static_cast<MasstreeDescriptor*>(pool.at(descriptor));
  if (desc->magic != MasstreeDescriptor::kMagic) {
    return absl::DataLossError(absl::StrCat(pool.path(), ": no Masstree descriptor at offset ",
                                            descriptor, " (bad magic)"));
  }
  if (desc->version < MasstreeDescriptor::kOldestVersion ||
      desc->version > MasstreeDescriptor::kVersion || desc->leaf_size != sizeof(LeafNode)) {
    return absl::FailedPreconditionError(absl::StrCat(
        pool.path(), ": Masstree at offset ", descriptor, " has layout version ", desc->version,
        " and ", desc->leaf_size, "-byte leaves; this build reads versions ",
        MasstreeDescriptor::kOldestVersion, " to ", MasstreeDescriptor::kVersion, " with ",
        sizeof(LeafNode), "-byte leaves"));
  }
  const uint64_t root = desc->root.load(std::memory_order_acquire);
  if (!AlignedInPool(pool, root, sizeof(LeafNode))) {
    return absl::DataLossError(absl::StrCat(pool.path(), ": Masstree at offset ", descriptor,
                                            " names root offset ", root,
                                            ", not a node inside the pool"));
  }
  DurablePolicy policy(pool, epochs, desc);
  return std::unique_ptr<DurableMasstree>(
      new DurableMasstree(PoolNodeAllocator(heap), std::move(policy), desc, kUnknownCount));
}

absl::Status DurableMasstree::Destroy(const epoch::Guard& g) {
  PoolNodeAllocator& a = allocator();
  epoch::Manager& epochs = a.epochs();
  Pool& pool = epochs.pool();
  if (!g.Of(epochs) || epochs.LocalSlot().depth == 0) {
    return absl::FailedPreconditionError(
        absl::StrCat(pool.path(), ": DurableMasstree::Destroy at offset ", descriptor(),
                     ": the guard must be this thread's, of the tree's epoch manager"));
  }
  // Collect first (the check reads every node), free afterwards.
  struct Collect : TreeVisitor {
    std::vector<void*> blocks;
    absl::Status Node(const void* node, size_t, bool, int) override {
      blocks.push_back(const_cast<void*>(node));
      return absl::OkStatus();
    }
    absl::Status Value(const void* value, size_t, const void*, int) override {
      blocks.push_back(const_cast<void*>(value));
      return absl::OkStatus();
    }
  } collect;
  if (absl::Status st = CheckInvariants(nullptr, &collect); !st.ok()) {
    return absl::InternalError(absl::StrCat(pool.path(), ": DurableMasstree::Destroy at offset ",
                                            descriptor(),
                                            ": the tree fails its check, nothing "
                                            "freed: ",
                                            std::string(st.message())));
  }
  // The descriptor's magic, undo-logged in this epoch: if the epoch fails, the log restores it
  // and the heap's rollback makes every block below live again; if it completes, the stale
  // offset reads as "no tree".
  auto* desc = const_cast<MasstreeDescriptor*>(policy().descriptor());
  if (!mutation::Swapped(ds_internal::kDropDescriptorSnapshot)) {
    if (absl::Status st = epochs.log().Snapshot(desc, sizeof(*desc), &desc->logged_epoch);
        !st.ok()) {
      return st;
    }
  }
  desc->magic = 0;
  collect.blocks.push_back(desc);
  // Each free is recorded in this epoch (Heap::Free: reusable once the epoch has closed and is
  // durable); a crash before that leaves every block allocated.
  for (void* b : collect.blocks) {
    if (absl::Status st = a.heap().Free(b); !st.ok()) {
      return absl::InternalError(
          absl::StrCat(pool.path(), ": DurableMasstree::Destroy: freeing the block at offset ",
                       pool.offset_of(b), " failed (the epoch must not complete: abandon the ",
                       "process to roll it back): ", std::string(st.message())));
    }
  }
  return absl::OkStatus();
}

uint64_t DurableMasstree::descriptor() const {
  return reinterpret_cast<uintptr_t>(policy().descriptor()) - policy().base();
}

}  // namespace pmrt::ds
