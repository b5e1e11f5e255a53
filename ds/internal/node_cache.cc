#include "ds/internal/node_cache.h"

#include <algorithm>
#include <cstdlib>
#include <new>
#include <utility>

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#endif

namespace pmrt::ds_internal {

static_assert(NodeCache::ClassOf(16) == 0 && NodeCache::ClassOf(1024) == 63 &&
              NodeCache::ClassOf(1025) == 64 &&
              NodeCache::ClassOf(NodeCache::kMaxSmall) == NodeCache::kClasses - 1);
static_assert(NodeCache::ClassSize(NodeCache::ClassOf(320)) == 320);
static_assert(NodeCache::ClassSize(NodeCache::kClasses - 1) == NodeCache::kMaxSmall);
static_assert(sizeof(NodeCache::Block) == sizeof(void*));  // the smallest class holds the link

// The calling thread's free lists; handed to the central lists at thread exit.
struct NodeCacheThread {
  NodeCache::Chain lists[NodeCache::kClasses];
  ~NodeCacheThread();
};

namespace {
// Set when the thread's lists are gone (thread exit), for frees that thread-exit handlers
// make afterwards (Ebr's): those go to the central lists. Trivially destructible, so it is
// readable for the whole life of the thread.
thread_local bool tls_exited = false;
thread_local NodeCacheThread tls_cache;

constexpr size_t kMinSlab = 64 * 1024;

// Under AddressSanitizer a free block is poisoned past its link word, so that a use after free
// of a tree node or value is reported although the block stays in the process.
void PoisonFree([[maybe_unused]] void* p, [[maybe_unused]] size_t bytes) {
#if defined(__SANITIZE_ADDRESS__)
  ASAN_POISON_MEMORY_REGION(static_cast<char*>(p) + sizeof(NodeCache::Block),
                            bytes - sizeof(NodeCache::Block));
#endif
}
void Unpoison([[maybe_unused]] void* p, [[maybe_unused]] size_t bytes) {
#if defined(__SANITIZE_ADDRESS__)
  ASAN_UNPOISON_MEMORY_REGION(p, bytes);
#endif
}
}  // namespace

NodeCacheThread::~NodeCacheThread() {
  tls_exited = true;
  for (int c = 0; c < NodeCache::kClasses; ++c) NodeCache::Global().ReleaseAll(c, lists[c]);
}

NodeCache& NodeCache::Global() {
  static NodeCache* const instance = new NodeCache();  // intentionally leaked: see header
  return *instance;
}

void* NodeCache::Allocate(size_t size) {
  if (size > kMaxSmall) return std::malloc(size);
  const int c = ClassOf(size);
  if (tls_exited) [[unlikely]] {
    Chain one;
    if (!Refill(c, one)) return nullptr;
    Block* b = &one.front();
    one.pop_front();
    ReleaseAll(c, one);
    Unpoison(b, ClassSize(c));
    return b;
  }
  Chain& list = tls_cache.lists[c];
  if (list.empty() && !Refill(c, list)) return nullptr;
  Block* b = &list.front();
  list.pop_front();
  Unpoison(b, ClassSize(c));
  return b;
}

void NodeCache::Free(void* p, size_t size) {
  if (p == nullptr) return;
  if (size > kMaxSmall) {
    std::free(p);
    return;
  }
  const int c = ClassOf(size);
  PoisonFree(p, ClassSize(c));
  Block* b = new (p) Block;
  if (tls_exited) [[unlikely]] {
    Chain one;
    one.push_front(*b);
    ReleaseAll(c, one);
    return;
  }
  Chain& list = tls_cache.lists[c];
  list.push_front(*b);
  if (list.size() > 2 * BatchOf(c)) Release(c, list);
}

bool NodeCache::Refill(int c, Chain& list) {
  Central& central = central_[c];
  {
    std::lock_guard<std::mutex> l(central.mu);
    if (!central.batches.empty()) {
      list.swap(central.batches.back());
      central.batches.pop_back();
      return true;
    }
  }
  // A new slab, carved whole into this list. Aligned to 64, so a class whose size is a
  // multiple of 64 gets 64-aligned blocks.
  const size_t block = ClassSize(c);
  const size_t blocks = std::max<size_t>(kMinSlab / block, 2 * BatchOf(c));
  const size_t bytes = (blocks * block + 63) / 64 * 64;
  auto* slab = static_cast<char*>(std::aligned_alloc(64, bytes));
  if (slab == nullptr) return false;
  slab_bytes_.fetch_add(bytes, std::memory_order_relaxed);
  for (size_t i = blocks; i-- > 0;) {
    PoisonFree(slab + i * block, block);
    list.push_front(*new (slab + i * block) Block);
  }
  return true;
}

void NodeCache::Release(int c, Chain& list) {
  const uint32_t n = BatchOf(c);
  Chain batch;
  auto last = list.begin();
  for (uint32_t i = 1; i < n; ++i) ++last;
  batch.splice_after(batch.before_begin(), list, list.before_begin(), last, n);
  std::lock_guard<std::mutex> l(central_[c].mu);
  central_[c].batches.push_back(std::move(batch));
}

void NodeCache::ReleaseAll(int c, Chain& list) {
  if (list.empty()) return;
  std::lock_guard<std::mutex> l(central_[c].mu);
  central_[c].batches.emplace_back().swap(list);
}

}  // namespace pmrt::ds_internal
