// Persistent pointers: 8-byte pool-relative offsets, so a pool maps at any address.
//
//   struct Node { pmrt::pptr<Node> next; uint64_t key; };
//   Node* n = node_ptr.get(pool);          // resolve against a pool (or a base address)
//   node_ptr = pmrt::pptr<Node>(pool, n);  // from an address inside the pool
//
// Offset 0 is null (the pool header lives there, so no object can). `atomic_pptr<T>` is the
// same 8 bytes as a std::atomic<uint64_t>; an aligned 8-byte store is failure-atomic on x86-64,
// so a crash leaves either the old or the new offset on media, never a mix.
#ifndef PMRT_EPOCH_PPTR_H_
#define PMRT_EPOCH_PPTR_H_

#include <atomic>
#include <cstdint>
#include <type_traits>

#include "epoch/pool.h"

namespace pmrt {

template <class T>
class pptr {
 public:
  constexpr pptr() = default;
  constexpr pptr(std::nullptr_t) {}  // NOLINT: null converts implicitly, as with T*
  static constexpr pptr FromOffset(uint64_t off) {
    pptr p;
    p.off_ = off;
    return p;
  }
  // REQUIRES: obj is null or inside `pool`.
  pptr(const Pool& pool, T* obj) : off_(pool.offset_of(obj)) {}

  uint64_t offset() const { return off_; }
  bool is_null() const { return off_ == 0; }
  explicit operator bool() const { return off_ != 0; }

  T* get(const Pool& pool) const { return static_cast<T*>(pool.at(off_)); }
  T* get(const void* base) const {
    return off_ == 0 ? nullptr
                     : reinterpret_cast<T*>(static_cast<uint8_t*>(const_cast<void*>(base)) + off_);
  }

  friend bool operator==(pptr a, pptr b) { return a.off_ == b.off_; }

 private:
  uint64_t off_ = 0;
};
static_assert(sizeof(pptr<int>) == 8 && std::is_trivially_copyable_v<pptr<int>>);

template <class T>
class atomic_pptr {
 public:
  constexpr atomic_pptr() = default;
  pptr<T> load(std::memory_order order = std::memory_order_acquire) const {
    return pptr<T>::FromOffset(off_.load(order));
  }
  void store(pptr<T> p, std::memory_order order = std::memory_order_release) {
    off_.store(p.offset(), order);
  }
  bool compare_exchange_strong(pptr<T>& expected, pptr<T> desired,
                               std::memory_order order = std::memory_order_acq_rel) {
    uint64_t e = expected.offset();
    bool ok = off_.compare_exchange_strong(e, desired.offset(), order);
    if (!ok) expected = pptr<T>::FromOffset(e);
    return ok;
  }
  pptr<T> exchange(pptr<T> p, std::memory_order order = std::memory_order_acq_rel) {
    return pptr<T>::FromOffset(off_.exchange(p.offset(), order));
  }

 private:
  std::atomic<uint64_t> off_{0};
};
static_assert(sizeof(atomic_pptr<int>) == 8);

}  // namespace pmrt

#endif  // PMRT_EPOCH_PPTR_H_
