// Key scrambling and the Zipfian generator shared by the workload drivers (pmrt-ycsb and
// `pmrt bench`, pmrt-txbench, `pmrt demo`): one implementation, so that "Zipfian 0.99" means
// the same distribution in every figure.
//
//   const pmrt::bench::ScrambledZipfian zipf(n, 0.99);   // O(n) set-up (zeta)
//   uint64_t item = zipf.Next(rng);                      // rng: anything with Uniform() in [0,1)
#ifndef PMRT_TOOLS_WORKLOAD_GEN_H_
#define PMRT_TOOLS_WORKLOAD_GEN_H_

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "base/random.h"

namespace pmrt::bench {

// A bijection on 64-bit integers (splitmix64's finalizer of i + the golden ratio): distinct
// items get distinct keys, scattered over the key space.
inline uint64_t Scramble(uint64_t i) { return SplitMix64(i); }

// FNV-1a over the 8 bytes of v, little-endian first (YCSB's fnvhash64).
inline uint64_t Fnv64(uint64_t v) {
  uint64_t h = 0xCBF29CE484222325ull;
  for (int i = 0; i < 8; ++i) {
    h = (h ^ (v & 0xff)) * 0x100000001B3ull;
    v >>= 8;
  }
  return h;
}

// The workload threads' generator (base/random.h). The seed must be nonzero.
using XorShift64 = ::pmrt::XorShift64;

// Items 0..n-1 drawn with Zipfian popularity (theta; YCSB uses 0.99) by the method of Gray et
// al., "Quickly generating billion-record synthetic databases" (SIGMOD 1994), as YCSB's
// ZipfianGenerator does; the ranks are then hashed over the items (FNV), as YCSB's
// ScrambledZipfian does, so the popular items are scattered over the key space.
class ScrambledZipfian {
 public:
  ScrambledZipfian(uint64_t n, double theta) : n_(n) {
    double zeta_n = 0;
    for (uint64_t i = 1; i <= n; ++i) zeta_n += 1.0 / std::pow(static_cast<double>(i), theta);
    const double zeta_2 = 1.0 + std::pow(0.5, theta);
    zeta_n_ = zeta_n;
    alpha_ = 1.0 / (1.0 - theta);
    eta_ = (1.0 - std::pow(2.0 / static_cast<double>(n), 1.0 - theta)) / (1.0 - zeta_2 / zeta_n);
    half_pow_theta_ = std::pow(0.5, theta);
  }

  template <class Rng>
  uint64_t Next(Rng& rng) const {
    const double u = rng.Uniform();
    const double uz = u * zeta_n_;
    uint64_t rank;
    if (uz < 1.0) {
      rank = 0;
    } else if (uz < 1.0 + half_pow_theta_) {
      rank = 1;
    } else {
      rank =
          static_cast<uint64_t>(static_cast<double>(n_) * std::pow(eta_ * u - eta_ + 1.0, alpha_));
    }
    return Fnv64(std::min(rank, n_ - 1)) % n_;
  }

 private:
  uint64_t n_;
  double zeta_n_, alpha_, eta_, half_pow_theta_;
};

}  // namespace pmrt::bench

#endif  // PMRT_TOOLS_WORKLOAD_GEN_H_
