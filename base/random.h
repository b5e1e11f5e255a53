// The project's small deterministic generators: the splitmix64 mixer and the xorshift64
// stream. Seeded workloads, fuzz cases, crash schedules and the crash simulator's image choices
// all draw from these, so one seed names one run everywhere. Not for cryptography.
#ifndef PMRT_BASE_RANDOM_H_
#define PMRT_BASE_RANDOM_H_

#include <cstdint>

namespace pmrt {

// splitmix64's finalizer of x + the golden ratio: a bijection on 64-bit integers that scatters
// neighbours over the whole range. SplitMix64(n) for n = s, s+1, ... is the splitmix64 stream.
inline uint64_t SplitMix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// xorshift64 (Marsaglia's 13/7/17 triple): one shift-xor round per draw. The state must be
// nonzero (a zero state stays zero); seed with SplitMix64(seed) | 1 for any seed.
struct XorShift64 {
  uint64_t s;

  // Advances the state `s` and returns it (the stream for code that keeps a bare word).
  static uint64_t Step(uint64_t& s) {
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    return s;
  }
  uint64_t Next() { return Step(s); }
  // Uniform in [0, 1).
  double Uniform() { return static_cast<double>(Next() >> 11) * 0x1.0p-53; }
  // In [0, n) (0 when n is 0); the modulo's bias is below n / 2^64.
  uint64_t Below(uint64_t n) { return n == 0 ? 0 : Next() % n; }
};

}  // namespace pmrt

#endif  // PMRT_BASE_RANDOM_H_
