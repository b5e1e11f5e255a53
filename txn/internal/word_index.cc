#include "txn/internal/word_index.h"

#include <sys/mman.h>

#include <cerrno>
#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace pmrt::txn_internal {

absl::StatusOr<std::unique_ptr<WordIndex>> WordIndex::Create(size_t pool_size) {
  const uint64_t words = (pool_size + 7) / 8;
  const size_t bytes = (words * 8 + 4095) & ~size_t{4095};
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "txn: cannot reserve ", bytes, " bytes for the word index: ", std::strerror(errno)));
  }
  return std::unique_ptr<WordIndex>(
      new WordIndex(static_cast<std::atomic<uint64_t>*>(p), words, bytes));
}

WordIndex::~WordIndex() { munmap(values_, bytes_); }

void WordIndex::Clear() { madvise(values_, bytes_, MADV_DONTNEED); }

}  // namespace pmrt::txn_internal
