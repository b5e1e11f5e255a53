// pmrt-fence-window: how much work may follow a commit's fence before it delays the next
// transaction's cache misses (docs/txn.md, "Stores after the fence"; docs/performance.md).
//
// Each iteration models a transaction of one word: a 16-byte non-temporal store (or, with
// --record flush, two stores and a clwb) into a log ring
// on /dev/shm, `sfence` (a commit), then a read-modify-write of a random word of an array (the
// next transaction's miss). Between the fence and the miss, or between the miss and the next
// store, the iteration adds N independent additions, N stores or N loads (all L1 hits). While
// they fit in the processor's window the miss overlaps the fence's drain; once they do not, the
// miss is paid after it. Prints ns per iteration for each N; nothing is asserted (a property of
// the machine, not of pmrt).
//
//   pmrt-fence-window [--words N (1M)] [--iters N (1M)] [--rounds N (3)] [--dir /dev/shm]
//                     [--record stream|flush (stream): the record non-temporal, or stored + clwb]
//
// x86-64 only (it times the instructions themselves); elsewhere it says so and exits 0.
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#if defined(__x86_64__)
#include <emmintrin.h>
#include <xmmintrin.h>

namespace {

constexpr size_t kRing = size_t{1} << 20;

enum class Pad { kNone, kAluAfterFence, kStoresAfterFence, kLoadsAfterFence, kStoresAfterMiss };

// N copies of an instruction, unrolled by the assembler: exactly N of them run per iteration.
template <int N>
inline void Alu() {
  asm volatile(".rept %c0\n add $1, %%r8\n add $1, %%r9\n add $1, %%r10\n add $1, %%r11\n .endr"
               :
               : "i"(N / 4)
               : "r8", "r9", "r10", "r11", "cc");
}
template <int N>
inline void Stores(uint64_t* p) {
  asm volatile(".rept %c1\n movq %%r8, (%0)\n add $8, %0\n .endr" : "+r"(p) : "i"(N) : "memory");
}
template <int N>
inline void Loads(uint64_t* p) {
  asm volatile(".rept %c1\n mov (%0), %%r9\n add $8, %0\n .endr"
               : "+r"(p)
               : "i"(N)
               : "r9", "memory");
}

uint64_t scratch[8][256];

// The commit's record: a 16-byte non-temporal store (record writes `stream`), or two stores
// and a clwb of their line (`flush`; docs/architecture.md).
template <bool kClwb>
inline void Record(uint8_t* at, uint64_t w, uint64_t i) {
  if constexpr (kClwb) {
    auto* d = reinterpret_cast<uint64_t*>(at);
    d[0] = w;
    d[1] = i;
    asm volatile("clwb %0" : "+m"(*reinterpret_cast<volatile char*>(at)));
  } else {
    _mm_stream_si128(reinterpret_cast<__m128i*>(at),
                     _mm_set_epi64x(static_cast<long long>(w), static_cast<long long>(i)));
  }
}

template <Pad kPad, int N, bool kClwb>
double Run(uint8_t* ring, uint64_t* arr, size_t words, int iters) {
  const auto t0 = std::chrono::steady_clock::now();
  size_t at = 0;
  uint64_t x = 88172645463325252ull;
  for (int i = 0; i < iters; ++i) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    const uint64_t w = x % words;
    uint64_t* const s = scratch[i & 7];
    if constexpr (kPad == Pad::kAluAfterFence) Alu<N>();
    if constexpr (kPad == Pad::kStoresAfterFence) Stores<N>(s);
    if constexpr (kPad == Pad::kLoadsAfterFence) Loads<N>(s);
    arr[w] += 1;  // the next transaction's miss
    if constexpr (kPad == Pad::kStoresAfterMiss) Stores<N>(s);
    Record<kClwb>(ring + at, w, static_cast<uint64_t>(i));
    at = (at + 16) & (kRing - 1);
    _mm_sfence();  // the commit
  }
  const auto t1 = std::chrono::steady_clock::now();
  return std::chrono::duration<double, std::nano>(t1 - t0).count() / iters;
}

// 48-byte records (a K = 1 commit record) written with non-temporal stores and fenced one by
// one, `stride` bytes apart: at 48 half of them straddle two cache lines, at 64 none does.
double Records(uint8_t* ring, size_t stride, int iters) {
  const auto t0 = std::chrono::steady_clock::now();
  size_t at = 0;
  for (int i = 0; i < iters; ++i) {
    auto* d = reinterpret_cast<long long*>(ring + at);
    for (int w = 0; w < 6; ++w) _mm_stream_si64(d + w, i + w);
    _mm_sfence();
    at += stride;
    if (at + 64 > kRing) at = 0;
  }
  const auto t1 = std::chrono::steady_clock::now();
  return std::chrono::duration<double, std::nano>(t1 - t0).count() / iters;
}

template <Pad kPad, bool kClwb>
void Row(const char* name, uint8_t* ring, uint64_t* arr, size_t words, int iters) {
  std::printf("%-22s", name);
  std::printf(" %7.1f", Run<kPad, 16, kClwb>(ring, arr, words, iters));
  std::printf(" %7.1f", Run<kPad, 32, kClwb>(ring, arr, words, iters));
  std::printf(" %7.1f", Run<kPad, 64, kClwb>(ring, arr, words, iters));
  std::printf(" %7.1f", Run<kPad, 96, kClwb>(ring, arr, words, iters));
  std::printf(" %7.1f", Run<kPad, 128, kClwb>(ring, arr, words, iters));
  std::printf(" %7.1f", Run<kPad, 160, kClwb>(ring, arr, words, iters));
  std::printf(" %7.1f\n", Run<kPad, 200, kClwb>(ring, arr, words, iters));
}

template <bool kClwb>
void Rounds(int rounds, uint8_t* ring, uint64_t* arr, size_t words, int iters) {
  for (int r = 1; r <= rounds; ++r) {
    std::printf("round %d: no padding %.1f ns\n", r,
                Run<Pad::kNone, 0, kClwb>(ring, arr, words, iters));
    std::printf("%-22s %7s %7s %7s %7s %7s %7s %7s\n", "N =", "16", "32", "64", "96", "128", "160",
                "200");
    Row<Pad::kAluAfterFence, kClwb>("additions after fence", ring, arr, words, iters);
    Row<Pad::kLoadsAfterFence, kClwb>("loads after fence", ring, arr, words, iters);
    Row<Pad::kStoresAfterFence, kClwb>("stores after fence", ring, arr, words, iters);
    Row<Pad::kStoresAfterMiss, kClwb>("stores after miss", ring, arr, words, iters);
    const double straddle = Records(ring, 48, iters), aligned = Records(ring, 64, iters);
    std::printf(
        "48-byte non-temporal records + sfence: %.1f ns packed (half straddle two lines), %.1f ns "
        "one line each\n",
        straddle, aligned);
  }
}

}  // namespace

int main(int argc, char** argv) {
  size_t words = size_t{1} << 20;
  int iters = 1000000, rounds = 3;
  std::string dir = "/dev/shm";
  bool clwb = false;  // --record flush: the record stored and written back with clwb
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--words") {
      words = std::strtoull(argv[i + 1], nullptr, 10);
    } else if (a == "--iters") {
      iters = std::atoi(argv[i + 1]);
    } else if (a == "--rounds") {
      rounds = std::atoi(argv[i + 1]);
    } else if (a == "--dir") {
      dir = argv[i + 1];
    } else if (a == "--record") {
      const std::string v = argv[i + 1];
      if (v != "stream" && v != "flush") {
        std::fprintf(stderr, "pmrt-fence-window: --record takes stream or flush, not %s\n",
                     v.c_str());
        return 2;
      }
      clwb = v == "flush";
    } else {
      std::fprintf(stderr, "pmrt-fence-window: unknown option %s\n", a.c_str());
      return 2;
    }
  }
  if (words == 0 || iters <= 0) {
    std::fprintf(stderr, "pmrt-fence-window: --words and --iters must be positive\n");
    return 2;
  }
  const std::string path = dir + "/pmrt-fence-window-" + std::to_string(getpid());
  const int fd = open(path.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
  if (fd < 0 || ftruncate(fd, kRing) != 0) {
    std::fprintf(stderr, "pmrt-fence-window: cannot create %s: %s\n", path.c_str(),
                 std::strerror(errno));
    return 1;
  }
  void* m = mmap(nullptr, kRing, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  unlink(path.c_str());
  if (m == MAP_FAILED) {
    std::fprintf(stderr, "pmrt-fence-window: mmap %s: %s\n", path.c_str(), std::strerror(errno));
    return 1;
  }
  auto* ring = static_cast<uint8_t*>(m);
  std::memset(ring, 0, kRing);
  std::vector<uint64_t> arr(words, 1);
  std::printf("ns per iteration (16-byte record %s + sfence + one random word of %zu)\n",
              clwb ? "stored + clwb" : "non-temporal", words);
  if (clwb) {
    Rounds<true>(rounds, ring, arr.data(), words, iters);
  } else {
    Rounds<false>(rounds, ring, arr.data(), words, iters);
  }
  munmap(m, kRing);
  return 0;
}
#else
int main() {
  std::printf("pmrt-fence-window: x86-64 only\n");
  return 0;
}
#endif
