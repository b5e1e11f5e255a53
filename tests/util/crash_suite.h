// Shared pieces of the crash-simulator suites: the outcome of a run, the budget knobs, and the
// mutation gate loop (disable each persistence site in turn; the suite must fail for each).
#ifndef PMRT_TESTS_UTIL_CRASH_SUITE_H_
#define PMRT_TESTS_UTIL_CRASH_SUITE_H_

#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "epoch/persist.h"
#include "epoch/sim.h"

namespace pmrt::testing {

struct CrashOutcome {
  Sim::Stats stats;
  std::vector<Sim::Failure> failures;
  std::map<uint32_t, std::string> sites;
  double seconds = 0;
};

// An environment override for an image budget (the ASan preset lowers them).
inline uint64_t EnvOr(const char* name, uint64_t fallback) {
  const char* v = std::getenv(name);
  return v == nullptr ? fallback : std::strtoull(v, nullptr, 10);
}

// The sites of `seen` whose names start with `prefix`, plus `extra` (store-order mutants,
// which the simulator never sees as flushes or fences).
inline std::map<uint32_t, std::string> SitesWithPrefix(const std::map<uint32_t, std::string>& seen,
                                                       const std::string& prefix,
                                                       const std::vector<Site>& extra = {}) {
  std::map<uint32_t, std::string> out;
  for (const auto& [id, name] : seen)
    if (name.rfind(prefix, 0) == 0) out[id] = name;
  for (const Site& s : extra) out[s.id] = s.name;
  return out;
}

// Disables each site in turn and runs `run`; a site whose run has no failure survives.
// Prints one line per mutant and the score; returns the survivors.
inline std::vector<std::string> RunMutationGate(const std::map<uint32_t, std::string>& sites,
                                                const std::function<CrashOutcome()>& run,
                                                const char* label) {
  std::vector<std::string> survivors;
  for (const auto& [id, name] : sites) {
    mutation::Disable(id);
    const CrashOutcome r = run();
    mutation::EnableAll();
    if (r.failures.empty()) {
      survivors.push_back(name);
      std::printf("mutant %-32s SURVIVED %lu images\n", name.c_str(), r.stats.images);
    } else {
      std::printf("mutant %-32s killed after %6lu images\n", name.c_str(), r.stats.images);
    }
  }
  std::printf("%s mutation gate: %zu/%zu killed\n", label, sites.size() - survivors.size(),
              sites.size());
  return survivors;
}

}  // namespace pmrt::testing

#endif  // PMRT_TESTS_UTIL_CRASH_SUITE_H_
