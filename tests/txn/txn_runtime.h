// Test helper: a pool with its epoch manager, heap and transaction engine, over caller memory
// (a buffer, the crash simulator's working copy, or a crash image) or a file.
#ifndef PMRT_TESTS_TXN_TXN_RUNTIME_H_
#define PMRT_TESTS_TXN_TXN_RUNTIME_H_

#include <sys/mman.h>

#include <cstring>
#include <memory>
#include <string>

#include "alloc/allocator.h"
#include "epoch/epoch.h"
#include "epoch/pool.h"
#include "tests/alloc/heap_runtime.h"
#include "txn/txn.h"

namespace pmrt::txn::testing {

// The pool, manager and heap, and the engine.
struct Runtime : alloc::test_runtime::HeapRuntime {
  std::unique_ptr<Engine> engine;
  // Destroys in dependency order (the engine first).
  void Reset() {
    engine.reset();
    heap.reset();
    epochs.reset();
    pool.reset();
  }
  ~Runtime() { Reset(); }
  Runtime() = default;
  Runtime(Runtime&&) = default;
  Runtime& operator=(Runtime&& o) {
    Reset();
    pool = std::move(o.pool);
    epochs = std::move(o.epochs);
    heap = std::move(o.heap);
    engine = std::move(o.engine);
    return *this;
  }
};

inline epoch::ManagerOptions ManualEpochs() {
  epoch::ManagerOptions eo;
  eo.interval = std::chrono::milliseconds(0);
  return eo;
}

// Attaches the layers to an opened pool.
inline absl::StatusOr<Runtime> Attach(std::unique_ptr<Pool> pool, const Options& to,
                                      const epoch::ManagerOptions& eo = ManualEpochs()) {
  Runtime r;
  if (auto st = alloc::test_runtime::OpenHeapLayers(std::move(pool), r, eo); !st.ok()) return st;
  auto e = Engine::Open(*r.pool, *r.epochs, *r.heap, to);
  if (!e.ok()) return e.status();
  r.engine = std::move(*e);
  return r;
}

inline absl::StatusOr<Runtime> OpenMemory(void* base, size_t size, const PoolOptions& po,
                                          const Options& to, bool create,
                                          const char* layout = "txn-test") {
  auto pool = create ? Pool::CreateInMemory(base, size, layout, po, "mem")
                     : Pool::OpenInMemory(base, size, layout, po, "mem");
  if (!pool.ok()) return pool.status();
  return Attach(std::move(*pool), to);
}

// Anonymous memory for an in-memory pool, and copies of it (a "crash" that keeps every store:
// what a process kill or eADR leaves).
class Buffer {
 public:
  explicit Buffer(size_t size) : size_(size) {
    p_ = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  }
  ~Buffer() { munmap(p_, size_); }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  void* data() const { return p_; }
  size_t size() const { return size_; }
  void CopyFrom(const void* src) { std::memcpy(p_, src, size_); }

 private:
  void* p_;
  size_t size_;
};

}  // namespace pmrt::txn::testing

#endif  // PMRT_TESTS_TXN_TXN_RUNTIME_H_
