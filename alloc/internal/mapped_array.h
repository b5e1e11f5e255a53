// MappedArray<T>: a zero-filled array of `n` Ts in an anonymous MAP_NORESERVE mapping. Only the
// pages that are written become resident, so the heap sizes its per-chunk arrays for every
// chunk the pool can grow to (Pool::max_size) and pays memory only for the chunks it has.
// T must be valid when all its bytes are zero (atomics of integers, pointers).
#ifndef PMRT_ALLOC_INTERNAL_MAPPED_ARRAY_H_
#define PMRT_ALLOC_INTERNAL_MAPPED_ARRAY_H_

#include <sys/mman.h>

#include <cstddef>
#include <type_traits>
#include <utility>

namespace pmrt::alloc_internal {

template <class T>
class MappedArray {
  static_assert(std::is_trivially_destructible_v<T>);

 public:
  MappedArray() = default;
  MappedArray(const MappedArray&) = delete;
  MappedArray& operator=(const MappedArray&) = delete;
  MappedArray(MappedArray&& o) noexcept { *this = std::move(o); }
  MappedArray& operator=(MappedArray&& o) noexcept {
    std::swap(data_, o.data_);
    std::swap(bytes_, o.bytes_);
    return *this;
  }
  ~MappedArray() {
    if (data_ != nullptr) munmap(data_, bytes_);
  }

  // False when the address space is not there (RLIMIT_AS).
  bool Allocate(size_t n) {
    const size_t bytes = ((n == 0 ? 1 : n) * sizeof(T) + 4095) & ~size_t{4095};
    void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) return false;
    *this = MappedArray();
    data_ = static_cast<T*>(p);
    bytes_ = bytes;
    return true;
  }

  T& operator[](size_t i) const { return data_[i]; }
  explicit operator bool() const { return data_ != nullptr; }

 private:
  T* data_ = nullptr;
  size_t bytes_ = 0;
};

}  // namespace pmrt::alloc_internal

#endif  // PMRT_ALLOC_INTERNAL_MAPPED_ARRAY_H_
