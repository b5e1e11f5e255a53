// The sample persistent structure of the epoch layer's crash-simulator and process-kill tests:
// records at the start of the pool's heap region, each undo-logged in the external log (its
// in-object mark first), then changed a few words at a time.
#ifndef PMRT_TESTS_EPOCH_LOGGED_RECORDS_H_
#define PMRT_TESTS_EPOCH_LOGGED_RECORDS_H_

#include <atomic>
#include <cstdint>

#include "epoch/pool.h"

namespace pmrt::epoch::logged_records {

constexpr int kRecords = 24;
constexpr int kWords = 15;

struct Record {
  std::atomic<uint64_t> logged_epoch;  // the external log's in-object mark
  uint64_t words[kWords];
};
static_assert(sizeof(Record) == 128);

inline Record* Records(Pool& pool) {
  return static_cast<Record*>(pool.region_base(PoolRegion::kHeap));
}

}  // namespace pmrt::epoch::logged_records

#endif  // PMRT_TESTS_EPOCH_LOGGED_RECORDS_H_
