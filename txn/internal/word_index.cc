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
  // Transparent huge pages where the system allows them (THP "madvise" mode, Debian's default;
  // advisory: an error only means 4 KiB pages). A transaction's words are scattered, so each
  // index slot it reads is usually on a page of its own: with 4 KiB pages the index's pages
  // (one per 512 words) compete with the data's for the TLB. With 2 MiB pages a 1M-word index
  // is 4 TLB entries (faster at K = 16 uniform: docs/txn.md, "Design notes", "The index").
  // The cost: a touched index page is resident 2 MiB at a time (the pages of 256 Ki pool
  // words), at most the index's full size, as before.
  (void)madvise(p, bytes, MADV_HUGEPAGE);
  // The fast-line map: a byte per 8 words (1/64 of the pool; 128 KiB for an 8 MiB array, which
  // stays in the caches where the index's 8 MiB does not). Fresh pages read 0: no line is fast
  // until the reclaimer has seen all its words hot.
  const size_t line_bytes = ((words + 7) / 8 + 4095) & ~size_t{4095};
  void* l = mmap(nullptr, line_bytes, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (l == MAP_FAILED) {
    const int err = errno;
    munmap(p, bytes);
    return absl::ResourceExhaustedError(absl::StrCat(
        "txn: cannot reserve ", line_bytes, " bytes for the fast-line map: ", std::strerror(err)));
  }
  return std::unique_ptr<WordIndex>(new WordIndex(static_cast<std::atomic<uint64_t>*>(p), words,
                                                  bytes, static_cast<std::atomic<uint8_t>*>(l),
                                                  line_bytes));
}

WordIndex::~WordIndex() {
  munmap(values_, bytes_);
  munmap(lines_, line_bytes_);
}

void WordIndex::Clear() {
  madvise(values_, bytes_, MADV_DONTNEED);
  madvise(lines_, line_bytes_, MADV_DONTNEED);
}

}  // namespace pmrt::txn_internal
