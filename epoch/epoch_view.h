// EpochView: the read-only epoch state that recovery code and the InCLL helpers consult.
// Implemented by epoch::Manager (epoch/epoch.h); tests may implement it with a fake.
#ifndef PMRT_EPOCH_EPOCH_VIEW_H_
#define PMRT_EPOCH_EPOCH_VIEW_H_

#include <cstdint>

namespace pmrt::epoch {

class EpochView {
 public:
  virtual ~EpochView() = default;
  // The epoch new work is tagged with right now (inside a guard: the guard's epoch).
  virtual uint64_t current() const = 0;
  // The first epoch of this execution; every epoch before it belongs to an earlier run.
  virtual uint64_t execution_first() const = 0;
  // True when e was running at a crash: its changes must be rolled back.
  virtual bool IsFailed(uint64_t e) const = 0;
  bool PredatesExecution(uint64_t e) const { return e < execution_first(); }
};

}  // namespace pmrt::epoch

#endif  // PMRT_EPOCH_EPOCH_VIEW_H_
