// What the durable tree's hooks did (DurableMasstree::durable_stats()): counters for benchmarks,
// tests and `pmrt demo crash`, kept per tree with relaxed increments.
#ifndef PMRT_DS_DURABLE_STATS_H_
#define PMRT_DS_DURABLE_STATS_H_

#include <cstdint>

namespace pmrt::ds {

struct DurableStats {
  uint64_t leaf_log_copies = 0;  // leaves copied to the external log
  uint64_t interior_log_copies = 0;
  uint64_t parent_log_copies = 0;
  uint64_t relocations = 0;         // updates that moved their key instead of copying the leaf
  uint64_t leaves_recovered = 0;    // lazy repairs
  uint64_t perms_rolled_back = 0;   // ... that restored perm_log
  uint64_t values_rolled_back = 0;  // ... slots restored from a value log
  uint64_t interiors_recovered = 0;
};

}  // namespace pmrt::ds

#endif  // PMRT_DS_DURABLE_STATS_H_
