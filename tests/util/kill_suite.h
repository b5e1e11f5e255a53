// Shared pieces of the process-kill suites (a forked child runs a deterministic operation stream
// while epochs advance; the parent kills it and checks the recovered pool): how the child's
// epochs advance, the KillProgress.user[] words it publishes, the shared record of each
// operation's epoch, and the operation counts at which a kill may have cut the stream.
#ifndef PMRT_TESTS_UTIL_KILL_SUITE_H_
#define PMRT_TESTS_UTIL_KILL_SUITE_H_

#include <sys/mman.h>

#include <cstdint>
#include <cstdlib>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "testing/kill_harness.h"

namespace pmrt::testing {

// kManual: interval 0, the child calls Advance() itself. kBackground: the background advancer.
enum class Clocking { kManual, kBackground };

// KillProgress.user[] words. The child stores, the parent reads after the kill.
enum KillWord {
  kPhase = 0,          // the suite's phase: how far the child got
  kDurableOps = 1,     // kManual: operations made durable by the last finished Advance
  kAdvanceOps = 2,     // kManual: operations done when the advance in flight began
  kAdvancing = 3,      // kManual: 1 while an Advance is in flight
  kCompletedSeen = 4,  // kBackground: Manager::completed() as last read by the child
};

// kBackground: the epoch of each acknowledged operation (at most kMax), in a mapping shared with
// the child.
template <size_t Max>
class OpEpochs {
 public:
  static constexpr size_t kMax = Max;
  OpEpochs() {
    void* p = mmap(nullptr, kMax * sizeof(uint64_t), PROT_READ | PROT_WRITE,
                   MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) std::abort();
    epochs_ = static_cast<uint64_t*>(p);
  }
  ~OpEpochs() { munmap(epochs_, kMax * sizeof(uint64_t)); }
  OpEpochs(const OpEpochs&) = delete;
  OpEpochs& operator=(const OpEpochs&) = delete;
  uint64_t* data() const { return epochs_; }

 private:
  uint64_t* epochs_;
};

// The operation counts after which the child's work may have been cut, from its progress alone.
inline absl::StatusOr<std::vector<uint64_t>> AllowedCuts(Clocking clocking,
                                                         const KillProgress& progress,
                                                         const uint64_t* op_epochs) {
  const uint64_t acked = progress.acked.load();
  if (clocking == Clocking::kManual) {
    std::vector<uint64_t> cuts = {progress.user[kDurableOps].load()};
    if (progress.user[kAdvancing].load() == 1) cuts.push_back(progress.user[kAdvanceOps].load());
    return cuts;
  }
  // Every operation of an epoch <= completed_seen is durable; after that any epoch boundary
  // (or the end of the acknowledged operations) may be the cut.
  const uint64_t seen = progress.user[kCompletedSeen].load();
  uint64_t k0 = 0;
  while (k0 < acked && op_epochs[k0] <= seen) ++k0;
  std::vector<uint64_t> cuts = {k0};
  for (uint64_t k = 1; k < acked; ++k) {
    if (op_epochs[k] < op_epochs[k - 1]) {
      return absl::InternalError(absl::StrCat("operation ", k, "'s epoch ", op_epochs[k],
                                              " is older than its predecessor's"));
    }
  }
  for (uint64_t k = k0 + 1; k <= acked; ++k) {
    if (k == acked || op_epochs[k - 1] != op_epochs[k]) cuts.push_back(k);
  }
  return cuts;
}

}  // namespace pmrt::testing

#endif  // PMRT_TESTS_UTIL_KILL_SUITE_H_
