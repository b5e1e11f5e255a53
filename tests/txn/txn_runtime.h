// Test helper: a pool with its epoch manager, heap and transaction engine, over caller memory
// (a buffer, the crash simulator's working copy, or a crash image) or a file.
#ifndef PMRT_TESTS_TXN_TXN_RUNTIME_H_
#define PMRT_TESTS_TXN_TXN_RUNTIME_H_

#include <sys/mman.h>

#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "alloc/allocator.h"
#include "epoch/epoch.h"
#include "epoch/pool.h"
#include "tests/alloc/heap_runtime.h"
#include "txn/internal/log_layout.h"
#include "txn/internal/log_store.h"
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

// The valid records of every thread log of `pool`, read from the media as recovery reads them:
// the directory's heads, each block's records from kBlockPayload while they are valid for the
// block's gen, and the blocks' links while they are of the same incarnation.
inline std::vector<const txn_internal::RecordHeader*> ThreadLogRecords(Pool& pool) {
  using namespace txn_internal;  // NOLINT: the layout's names
  std::vector<const RecordHeader*> out;
  const uint64_t dir_off = pool.state().txn_directory.value.load(std::memory_order_acquire);
  if (dir_off == 0) return out;
  const auto* dir = static_cast<const DirectoryLayout*>(pool.at(dir_off));
  const size_t bs = dir->header.block_size;
  for (size_t slot = 0; slot < kMaxSlots; ++slot) {
    uint64_t off = dir->heads[slot].load(std::memory_order_acquire);
    uint64_t want_gen = 0;  // the head block's gen is its header's
    for (size_t hops = 0; off != 0 && hops < pool.size() / bs; ++hops) {
      const auto* block = static_cast<const uint8_t*>(pool.at(off));
      const uint64_t gen = reinterpret_cast<const BlockHeader*>(block)->gen;
      if (want_gen != 0 && gen != want_gen) break;
      size_t pos = kBlockPayload;
      while (const RecordHeader* h = ValidRecord(block, bs, gen, pos)) {
        out.push_back(h);
        pos += size_t{h->words} * 8;
      }
      const auto* link = reinterpret_cast<const BlockLink*>(block + sizeof(BlockHeader));
      if (link->gen != gen) break;
      off = link->next;
      want_gen = link->next_gen;
    }
  }
  return out;
}

// What a record holds: its data entries, their words, and its pad words.
struct RecordShape {
  size_t entries = 0;
  size_t data_words = 0;
  size_t pad_words = 0;
  bool commit = false;
  // The commit record of one declaration: one data entry of one word.
  bool one_word() const { return commit && entries == 1 && data_words == 1; }
};
inline RecordShape ShapeOf(const txn_internal::RecordHeader* h) {
  RecordShape r;
  r.commit = h->kind == static_cast<uint16_t>(txn_internal::RecordKind::kCommit);
  size_t words = sizeof(txn_internal::RecordHeader) / 8;
  txn_internal::ForEachEntry(h, [&](uint64_t head, const uint64_t* values) {
    ++words;
    if (values == nullptr) return;
    ++r.entries;
    r.data_words += txn_internal::EntryWords(head);
    words += txn_internal::EntryWords(head);
  });
  r.pad_words = h->words - words;  // (ForEachEntry skips them)
  return r;
}

}  // namespace pmrt::txn::testing

#endif  // PMRT_TESTS_TXN_TXN_RUNTIME_H_
