#include "ds/internal/node_cache.h"

#include <algorithm>
#include <cstdlib>

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#endif

namespace pmrt::ds_internal {

static_assert(NodeCache::ClassOf(16) == 0 && NodeCache::ClassOf(1024) == 63 &&
              NodeCache::ClassOf(1025) == 64 &&
              NodeCache::ClassOf(NodeCache::kMaxSmall) == NodeCache::kClasses - 1);
static_assert(NodeCache::ClassSize(NodeCache::ClassOf(320)) == 320);
static_assert(NodeCache::ClassSize(NodeCache::kClasses - 1) == NodeCache::kMaxSmall);

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
    Block* b = one.head;
    one.head = b->next;
    --one.count;
    ReleaseAll(c, one);
    Unpoison(b, ClassSize(c));
    return b;
  }
  Chain& list = tls_cache.lists[c];
  if (list.head == nullptr && !Refill(c, list)) return nullptr;
  Block* b = list.head;
  list.head = b->next;
  --list.count;
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
  auto* b = static_cast<Block*>(p);
  PoisonFree(p, ClassSize(c));
  if (tls_exited) [[unlikely]] {
    Chain one{b, 1};
    b->next = nullptr;
    ReleaseAll(c, one);
    return;
  }
  Chain& list = tls_cache.lists[c];
  b->next = list.head;
  list.head = b;
  if (++list.count > 2 * BatchOf(c)) Release(c, list);
}

bool NodeCache::Refill(int c, Chain& list) {
  Central& central = central_[c];
  {
    std::lock_guard<std::mutex> l(central.mu);
    if (!central.batches.empty()) {
      list = central.batches.back();
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
  Block* head = nullptr;
  for (size_t i = blocks; i-- > 0;) {
    auto* b = reinterpret_cast<Block*>(slab + i * block);
    b->next = head;
    head = b;
    PoisonFree(b, block);
  }
  list = {head, static_cast<uint32_t>(blocks)};
  return true;
}

void NodeCache::Release(int c, Chain& list) {
  const uint32_t n = BatchOf(c);
  Chain batch{list.head, n};
  Block* last = list.head;
  for (uint32_t i = 1; i < n; ++i) last = last->next;
  list.head = last->next;
  list.count -= n;
  last->next = nullptr;
  std::lock_guard<std::mutex> l(central_[c].mu);
  central_[c].batches.push_back(batch);
}

void NodeCache::ReleaseAll(int c, Chain& list) {
  if (list.head == nullptr) return;
  {
    std::lock_guard<std::mutex> l(central_[c].mu);
    central_[c].batches.push_back(list);
  }
  list = Chain{};
}

}  // namespace pmrt::ds_internal
