// pmrt-txn-reopen: what a transaction-heavy run leaves in the log, and how long the next clean
// open takes (docs/performance.md, "Log at rest and clean reopen").
//
//   pmrt-txn-reopen [--sizes 256M,2G,8G] [--txns N] [--words K] [--array W] [--dir DIR]
//                   [--json FILE]
//
// For each pool size: create a pmrt::Runtime pool file in DIR (default /dev/shm) with the
// default options (log budget sized to the pool, background advancer and reclaimer), run N
// (1,000,000) transactions of K (4) random 8-byte words over a W-word (1M) array in the pool,
// sync, report the log's bytes owned, let the engine idle for 3 s and report them again (owned
// and in use), close,
// then time Runtime::Open of the same file (the whole open: pool, epochs with the undo-log
// replay, heap, engine recovery, catalog) five times, closing in between. Reports the median
// and the largest open. /dev/shm is not persistent memory: PMEM_IS_PMEM_FORCE=1 (set unless the
// environment sets it) selects the pmem backend's clwb + sfence.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "runtime/runtime.h"
#include "txn/txn.h"

namespace {

struct Args {
  std::vector<uint64_t> sizes = {uint64_t{256} << 20, uint64_t{2} << 30, uint64_t{8} << 30};
  uint64_t txns = 1000000;
  int words = 4;
  uint64_t array = 1 << 20;
  std::string dir = "/dev/shm";
  std::string json;
};

bool ParseSize(std::string_view s, uint64_t* out) {
  uint64_t mult = 1;
  if (!s.empty() && (s.back() == 'M' || s.back() == 'G')) {
    mult = s.back() == 'M' ? uint64_t{1} << 20 : uint64_t{1} << 30;
    s.remove_suffix(1);
  }
  uint64_t v;
  if (!absl::SimpleAtoi(absl::string_view(s.data(), s.size()), &v)) return false;
  *out = v * mult;
  return true;
}

double Ms(std::chrono::steady_clock::duration d) {
  return std::chrono::duration<double, std::milli>(d).count();
}

struct Root {
  uint64_t array;  // pool offset of the word array
};

int Run(const Args& a, uint64_t size, FILE* json) {
  const std::string path = a.dir + "/pmrt-txn-reopen.pool";
  std::remove(path.c_str());
  pmrt::RuntimeOptions o;
  o.create_size = size;
  uint64_t owned = 0, in_use = 0, budget = 0, busy_owned = 0;
  double run_s = 0;
  {
    auto rt = pmrt::Runtime::Open(path, o);
    if (!rt.ok()) {
      std::fprintf(stderr, "open: %s\n", rt.status().ToString().c_str());
      return 1;
    }
    Root* root = *(*rt)->root<Root>();
    auto* words = static_cast<uint64_t*>(pmrt::alloc::Heap::Default()->AllocateZeroed(a.array, 8));
    if (words == nullptr) {
      std::fprintf(stderr, "no room for the array\n");
      return 1;
    }
    (void)pmrt::txn::Run(
        [&] { return pmrt::txn::write(&root->array, (*rt)->pool().offset_of(words)); });
    uint64_t rng = 88172645463325252ull;
    const auto start = std::chrono::steady_clock::now();
    for (uint64_t t = 0; t < a.txns; ++t) {
      absl::Status st = pmrt::txn::Run([&]() -> absl::Status {
        for (int k = 0; k < a.words; ++k) {
          rng ^= rng << 13;
          rng ^= rng >> 7;
          rng ^= rng << 17;
          if (auto s = pmrt::txn::write(&words[rng % a.array], rng); !s.ok()) return s;
        }
        return absl::OkStatus();
      });
      if (!st.ok()) {
        std::fprintf(stderr, "transaction %lu: %s\n", static_cast<unsigned long>(t),
                     st.ToString().c_str());
        return 1;
      }
    }
    run_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    (void)(*rt)->sync();
    const pmrt::txn::Stats busy = (*rt)->engine().stats();
    busy_owned = busy.log_bytes_owned;
    // An idle engine shrinks its log (txn.md, "An idle engine").
    std::this_thread::sleep_for(std::chrono::seconds(3));
    const pmrt::txn::Stats s = (*rt)->engine().stats();
    owned = s.log_bytes_owned;
    in_use = s.log_bytes;
    budget = s.log_budget;
    if (auto st = (*rt)->Close(); !st.ok()) {
      std::fprintf(stderr, "close: %s\n", st.ToString().c_str());
      return 1;
    }
  }
  std::vector<double> opens;
  pmrt::Runtime::OpenTimes steps;
  double recovery_ms = 0;
  for (int i = 0; i < 5; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    auto rt = pmrt::Runtime::Open(path, pmrt::RuntimeOptions{});
    const double ms = Ms(std::chrono::steady_clock::now() - t0);
    if (!rt.ok()) {
      std::fprintf(stderr, "reopen: %s\n", rt.status().ToString().c_str());
      return 1;
    }
    opens.push_back(ms);
    steps = (*rt)->open_times();
    recovery_ms =
        std::chrono::duration<double, std::milli>((*rt)->engine().stats().recovery_time).count();
    (void)(*rt)->Close();
  }
  std::sort(opens.begin(), opens.end());
  std::printf(
      "pool %6lu MiB: %lu transactions of %d words in %.1f s; log owned %.1f MiB at the end of "
      "the run; after 3 s idle %.2f MiB owned, %.2f MiB in use (budget %.1f MiB); clean reopen "
      "median %.2f ms, max %.2f ms\n",
      static_cast<unsigned long>(size >> 20), static_cast<unsigned long>(a.txns), a.words, run_s,
      busy_owned / 1048576.0, owned / 1048576.0, in_use / 1048576.0, budget / 1048576.0, opens[2],
      opens.back());
  std::printf(
      "  last open: trial open %.2f ms (RuntimeOptions::trial_open), then pool %.2f ms, epochs "
      "%.2f ms, heap %.2f ms, engine %.2f ms (recovery %.2f ms), catalog %.2f ms\n",
      Ms(steps.trial), Ms(steps.pool), Ms(steps.epochs), Ms(steps.heap), Ms(steps.engine),
      recovery_ms, Ms(steps.catalog));
  if (json != nullptr) {
    std::fprintf(json,
                 "{\"bench\": \"txn-reopen\", \"pool_bytes\": %lu, \"txns\": %lu, \"words\": %d, "
                 "\"array_words\": %lu, \"run_s\": %.3f, \"log_owned_end_of_run\": %lu, "
                 "\"log_owned_bytes\": %lu, "
                 "\"log_in_use_bytes\": %lu, \"log_budget\": %lu, \"reopen_ms_median\": %.3f, "
                 "\"reopen_ms_max\": %.3f}\n",
                 static_cast<unsigned long>(size), static_cast<unsigned long>(a.txns), a.words,
                 static_cast<unsigned long>(a.array), run_s, static_cast<unsigned long>(busy_owned),
                 static_cast<unsigned long>(owned), static_cast<unsigned long>(in_use),
                 static_cast<unsigned long>(budget), opens[2], opens.back());
    std::fflush(json);
  }
  std::remove(path.c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  setenv("PMEM_IS_PMEM_FORCE", "1", /*overwrite=*/0);
  Args a;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string f = argv[i], v = argv[i + 1];
    bool ok = true;
    if (f == "--sizes") {
      a.sizes.clear();
      for (absl::string_view s : absl::StrSplit(v, ',')) {
        uint64_t n = 0;
        ok = ok && ParseSize(std::string_view(s.data(), s.size()), &n);
        a.sizes.push_back(n);
      }
    } else if (f == "--txns") {
      ok = absl::SimpleAtoi(v, &a.txns);
    } else if (f == "--words") {
      ok = absl::SimpleAtoi(v, &a.words) && a.words > 0;
    } else if (f == "--array") {
      ok = absl::SimpleAtoi(v, &a.array) && a.array > 0;
    } else if (f == "--dir") {
      a.dir = v;
    } else if (f == "--json") {
      a.json = v;
    } else {
      ok = false;
    }
    if (!ok) {
      std::fprintf(stderr, "pmrt-txn-reopen: bad flag %s %s\n", f.c_str(), v.c_str());
      return 2;
    }
  }
  FILE* json = a.json.empty() ? nullptr : std::fopen(a.json.c_str(), "a");
  for (uint64_t size : a.sizes)
    if (int rc = Run(a, size, json); rc != 0) return rc;
  if (json != nullptr) std::fclose(json);
  return 0;
}
