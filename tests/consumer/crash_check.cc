// A program crash-tests a structure of its own with the installed crash simulator (the CMake
// component `testing`, pmrt::testing): a record whose value must be durable before the flag
// that publishes it. The correct order passes at every crash image; the same code without the
// value's fence (the classic bug) is caught.
#include <cstdint>
#include <cstdio>

#include "absl/status/status.h"
#include "epoch/persist.h"
#include "testing/sim.h"

namespace {

struct Record {
  uint64_t value;  // line 0
  uint64_t pad[7];
  uint64_t valid;  // line 1: 1 once `value` is durable
};

constexpr pmrt::Site kValue("consumer.value"), kValueFence("consumer.value.fence");
constexpr pmrt::Site kFlag("consumer.flag"), kFlagFence("consumer.flag.fence");

void Publish(const pmrt::Persister& p, Record* r, uint64_t v, bool forget_fence) {
  r->value = v;
  p.Flush(kValue, &r->value, sizeof(r->value));
  if (!forget_fence) p.Fence(kValueFence);  // the value is durable before the flag is written
  r->valid = 1;
  p.Flush(kFlag, &r->valid, sizeof(r->valid));
  p.Fence(kFlagFence);
}

// The simulator's images of Publish; returns its report ("OK" or the failures).
std::string CrashTest(bool forget_fence, uint64_t* images) {
  auto sim = pmrt::Sim::Create(4096, pmrt::Sim::Options{});
  if (!sim.ok()) return std::string(sim.status().message());
  (*sim)->SetHandler([](pmrt::CrashImage& image) -> absl::Status {
    const auto* r = static_cast<const Record*>(image.base());
    if (r->valid == 1 && r->value != 42) return absl::DataLossError("the flag without its value");
    return absl::OkStatus();
  });
  Publish((*sim)->persister(), static_cast<Record*>((*sim)->working()), 42, forget_fence);
  *images = (*sim)->stats().images;
  return (*sim)->Report();
}

}  // namespace

int main() {
  uint64_t images = 0;
  const std::string ok = CrashTest(/*forget_fence=*/false, &images);
  if (ok != "OK") {
    std::fprintf(stderr, "crash_check: the correct order failed: %s\n", ok.c_str());
    return 1;
  }
  uint64_t bug_images = 0;
  if (CrashTest(/*forget_fence=*/true, &bug_images) == "OK") {
    std::fprintf(stderr, "crash_check: the simulator missed the missing fence\n");
    return 1;
  }
  std::printf("crash_check: %lu crash images correct; the missing fence caught\n",
              static_cast<unsigned long>(images));
  return 0;
}
