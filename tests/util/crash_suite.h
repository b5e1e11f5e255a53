// Shared pieces of the crash-simulator suites: the outcome of a run, the budget knobs, the
// driver of a run (simulator, in-memory pool, image handler, seeded lock-step schedule), the
// checks of a finished run, nested-run plumbing, and the mutation gate loop (disable each
// persistence site in turn; the suite must fail for each).
#ifndef PMRT_TESTS_UTIL_CRASH_SUITE_H_
#define PMRT_TESTS_UTIL_CRASH_SUITE_H_

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "epoch/persist.h"
#include "epoch/pool.h"
#include "gtest/gtest.h"
#include "testing/sim.h"
#include "tests/util/lockstep.h"
#include "tests/util/test_util.h"

namespace pmrt::testing {

struct CrashOutcome {
  Sim::Stats stats;
  std::vector<Sim::Failure> failures;
  std::map<uint32_t, std::string> sites;
  double seconds = 0;
};

// The knobs every crash suite has; a suite derives its Config and sets its own defaults.
struct CrashConfig {
  Sim::Options options;
  uint64_t target_images = 30000;
  int threads = 1;
  int nested_every = 20;  // one image in this many also gets a nested check (0: none)
};

// Images per crash point in the suites' main tests (Sim::Options::max_images_per_point; also
// PMRT_SIM_IMAGES_PER_POINT, 0 for no cap): the image budget spread over many crash points, each
// with the images that matter most (none and all lines evicted, each line alone kept and lost,
// then a seeded sample of the per-line versions and random subsets).
inline constexpr uint64_t kMainImagesPerPoint = 32;

// The image count of a main test whose own count is `images`: PMRT_SIM_IMAGES when set, else
// PMRT_SIM_PERCENT percent of `images` (default 100; the test presets scale the suites to the
// CI's time), never below min(images, kMinMainImages): the count at which every main test
// still reaches each path its coverage checks ask for.
inline constexpr uint64_t kMinMainImages = 20000;
inline uint64_t MainImages(uint64_t images) {
  const uint64_t scaled = images * EnvOr("PMRT_SIM_PERCENT", 100) / 100;
  return EnvOr("PMRT_SIM_IMAGES", std::max(scaled, std::min(images, kMinMainImages)));
}

// The configuration of a suite's main tests: `threads` workers, the simulator's `seed`, half of
// MainImages(images) as the image target, and kMainImagesPerPoint. A finished run therefore has
// at least target / kMainImagesPerPoint crash points (ExpectFinishedRun).
template <typename Config>
Config MainRunConfig(int threads, uint64_t seed, uint64_t images) {
  Config cfg;
  cfg.threads = threads;
  cfg.options.seed = seed;
  cfg.options.max_images_per_point = EnvOr("PMRT_SIM_IMAGES_PER_POINT", kMainImagesPerPoint);
  cfg.target_images = MainImages(images) / 2;
  return cfg;
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

// A gate's explicit expectation: the sites of `seen` whose names start with `prefix` are exactly
// `expected` (a site added to the layer and reached by its suite without a gate entry fails
// here, and so does one the suite no longer reaches). Returns `expected` plus `extra` (logic
// mutants, which the simulator never sees as flushes or fences) as the gate's mutants.
inline std::map<uint32_t, std::string> ExpectSites(const std::map<uint32_t, std::string>& seen,
                                                   const std::string& prefix,
                                                   const std::vector<Site>& expected,
                                                   const std::vector<Site>& extra = {}) {
  std::vector<std::string> got, want;
  for (const auto& [id, name] : seen)
    if (name.rfind(prefix, 0) == 0) got.push_back(name);
  std::map<uint32_t, std::string> out;
  for (const Site& s : expected) {
    want.push_back(s.name);
    out[s.id] = s.name;
  }
  std::sort(got.begin(), got.end());
  std::sort(want.begin(), want.end());
  EXPECT_EQ(got, want) << "the sites with prefix " << prefix
                       << " that the suite reaches differ from the gate's list";
  for (const Site& s : extra) out[s.id] = s.name;
  return out;
}

// Pool options for a pool whose stores and flushes go through `sim` (a top-level or a nested
// simulator).
inline PoolOptions SimPoolOptions(Sim& sim) {
  PoolOptions po;
  po.backend = BackendKind::kSim;
  po.sim = &sim;
  return po;
}

// Pool options for opening a crash image: the image is what the media holds, nothing is cached.
inline PoolOptions EadrPoolOptions() {
  PoolOptions po;
  po.backend = BackendKind::kEadr;
  return po;
}

// The nested simulator of the suites' nested checks: a sample (`probability`) of the next
// execution's fences are crash points, with few images each.
inline Sim::Options NestedSimOptions(double probability) {
  Sim::Options o;
  o.random_images = 1;
  o.exhaustive_max_lines = 4;
  o.max_single_line_images = 4;
  o.crash_points = Sim::CrashPoints::kRandom;
  o.probability = probability;
  return o;
}

// Runs the next execution of `img` under a nested simulator with `options`: `body(nested)` (a
// recovery and a continuation; its status is the nested run's own verdict) while `handler`
// checks every image the nested simulator builds. The body's error comes first.
template <typename Body, typename Handler>
absl::Status RunNestedCheck(CrashImage& img, const Sim::Options& options, Body&& body,
                            Handler&& handler) {
  absl::Status first = absl::OkStatus();
  absl::Status st = img.RunNested(
      options, [&](Sim& nested) { first = body(nested); }, std::forward<Handler>(handler));
  if (!first.ok()) return first;
  return st;
}

// The end of a run that started at `start`: the crash points off (what is torn down next makes
// no images) and the simulator's stats, failures and sites in *out.
inline void FinishRun(Sim& sim, std::chrono::steady_clock::time_point start, CrashOutcome* out) {
  out->seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  sim.SetCrashPoints(Sim::CrashPoints::kNone);
  out->stats = sim.stats();
  out->failures = sim.failures();
  out->sites = sim.sites_seen();
}

// One run of a crash-simulator suite. A simulator over `pool_size` bytes with `options` (stopping
// at `target_images` images) starts with no crash points while `setup(sim, pool_options)` creates
// the pool on sim.working() (pool_options: the sim backend) and opens what the workload needs
// (returns an absl::StatusOr of it). Then every crash image goes to `check(sim, img)`, the crash
// points of `options` apply and `workload(sim, runtime, outcome)` runs, timed. Afterwards the
// crash points are off again (the runtime is torn down without images, before the simulator) and
// the outcome has the simulator's stats, failures and sites.
template <typename Outcome, typename Setup, typename Check, typename Workload>
Outcome RunUnderSim(size_t pool_size, Sim::Options options, uint64_t target_images, Setup&& setup,
                    Check&& check, Workload&& workload) {
  Outcome out;
  options.max_images = target_images;
  auto sim_or = Sim::Create(pool_size, options);
  EXPECT_OK(sim_or);
  if (!sim_or.ok()) return out;
  Sim& sim = **sim_or;
  const auto mode = sim.options().crash_points;
  sim.SetCrashPoints(Sim::CrashPoints::kNone);
  auto rt = setup(sim, SimPoolOptions(sim));
  EXPECT_OK(rt);
  if (!rt.ok()) return out;
  sim.SetHandler([&](CrashImage& img) -> absl::Status { return check(sim, img); });
  sim.SetCrashPoints(mode);
  const auto start = std::chrono::steady_clock::now();
  workload(sim, *rt, out);
  FinishRun(sim, start, &out);
  return out;
}

// The seeded workers' rngs: worker t's starts at seed * factor + t + 1.
inline std::vector<uint64_t> WorkerRngs(int threads, uint64_t seed, uint64_t factor) {
  std::vector<uint64_t> rngs(threads);
  for (int t = 0; t < threads; ++t) rngs[t] = seed * factor + t + 1;
  return rngs;
}

struct NoStop {
  bool operator()() const { return true; }
};

// The suites' seeded schedule, run until `sim` has built `target_images` images or has failed (or
// `go_on()` turns false): each turn draws pick = Next(sched) % picks; `turn(pick, sched)` handles
// it (an advance, a reclamation, ...) and returns true, or returns false and worker
// pick % workers takes one step.
template <typename Turn, typename GoOn = NoStop>
void RunSchedule(const Sim& sim, uint64_t target_images, Lockstep& workers, int threads,
                 uint64_t sched, uint64_t picks, Turn&& turn, GoOn&& go_on = {}) {
  while (!sim.failed() && sim.stats().images < target_images && go_on()) {
    const uint64_t pick = Next(sched) % picks;
    if (!turn(pick, sched)) workers.Step(static_cast<int>(pick % static_cast<uint64_t>(threads)));
  }
}

// A schedule turn for RunSchedule: pick 0 is `advance()` (an epoch advance), every other pick a
// worker's step.
template <typename Advance>
auto AdvanceOnPickZero(Advance advance) {
  return [advance](uint64_t pick, uint64_t&) mutable {
    if (pick != 0) return false;
    advance();
    return true;
  };
}

// Checks a finished run: no failure (fatal: nothing after it runs; wrap the call in
// ASSERT_NO_FATAL_FAILURE where more checks follow), at least `target_images` images; then
// `report(r)` prints its summary.
template <typename Outcome, typename Report>
void ExpectFinishedRun(const Outcome& r, uint64_t target_images, Report&& report) {
  ASSERT_TRUE(r.failures.empty()) << r.failures[0].ToString();
  EXPECT_GE(r.stats.images, target_images);
  report(r);
}

// The same, with the plain summary "<label>: N crash points (and K in nested recoveries), M
// images in S s".
inline void ExpectFinishedRun(const CrashOutcome& r, uint64_t target_images, const char* label) {
  ExpectFinishedRun(r, target_images, [label](const CrashOutcome& o) {
    std::printf("%s: %lu crash points (and %lu in nested recoveries), %lu images in %.2f s\n",
                label, o.stats.crash_points, o.stats.nested_crash_points, o.stats.images,
                o.seconds);
  });
}

// A run killed a mutant: the simulator found a failure.
struct HasFailures {
  template <typename Outcome>
  bool operator()(const Outcome& r) const {
    return !r.failures.empty();
  }
};

// Disables each site in turn and runs `run` (returning an outcome); a site whose run `killed`
// does not accept survives. Prints one line per mutant and the score; returns the survivors.
template <typename Run, typename Killed = HasFailures>
std::vector<std::string> RunMutationGate(const std::map<uint32_t, std::string>& sites, Run&& run,
                                         const char* label, Killed&& killed = {}) {
  std::vector<std::string> survivors;
  for (const auto& [id, name] : sites) {
    mutation::Disable(id);
    const auto r = run();
    mutation::EnableAll();
    if (!killed(r)) {
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
