// Corruption fuzzing of everything that reads a key-value pool's contents: `pmrt info`, `check`,
// `dump`, and the server's open (KvStore::Open, then the structural check `pmrt serve` runs
// before its first client, then reads verified against the values' checksums). Two base pools
// hold data written with self-describing values (each value names its key and a version, so any
// value served can be checked without an oracle): one closed cleanly, one killed while writing
// (its open recovers: failed-epoch ranges, external-log replay, lazy leaf repair). Each case
// damages a copy with a seeded mix of bit flips anywhere, bit flips and crafted words (offsets of
// 2^63 and more, offsets of other nodes, misaligned and wild offsets) in the tree's nodes and
// value objects, zeroed and random pages, and truncations; then runs the four readers in a child
// process under a timeout. Every case must end without a crash or a hang, every value served
// must be one written for its key (a damaged one is detected: an error, never bytes), and the
// file must be byte-identical after the three tools and after an open that refused it. Two
// negative controls (the reads without the structural check first; without the checksums) show
// that the same cases do crash a reader and do serve damaged values when a defence is missing.
//
// PMRT_CORRUPTION_CASES (default 2000) and PMRT_CORRUPTION_SEED (default 1) override the run; a
// failure prints the case and its mutations, and PMRT_CORRUPTION_SEED + the case number replay
// its mutations (the crashed base pool differs a little from run to run, with where the kill
// lands: PMRT_CORRUPTION_KEEP=DIR keeps the damaged pool of a failing case there;
// PMRT_CORRUPTION_VERBOSE=1 shows what the readers print).
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "ds/durable_masstree.h"
#include "ds/internal/node_layout.h"
#include "ds/internal/value_ref.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/util/test_util.h"
#include "tools/inspect.h"
#include "tools/kv_store.h"

namespace pmrt {
namespace {

using ds_internal::LeafNode;

constexpr size_t kPoolSize = 4 << 20;
constexpr int kKeys = 1500;
constexpr int kWrongValueExit = 42;   // the child served a value never written for its key
constexpr int kChangedFileExit = 43;  // a tool, or an open that refused the pool, changed it
constexpr auto kCaseTimeout = std::chrono::seconds(30);

using Rng = testing::SplitMix;

// Creates or replaces the file at `path` with `bytes`.
void WriteWhole(const std::string& path, const std::string& bytes) {
  const int fd = open(path.c_str(), O_CREAT | O_WRONLY | O_TRUNC | O_CLOEXEC, 0644);
  ASSERT_GE(fd, 0) << path;
  ASSERT_EQ(write(fd, bytes.data(), bytes.size()), static_cast<ssize_t>(bytes.size()));
  close(fd);
}

// Key i, and long keys sharing prefixes (layers, key suffixes) for every third.
std::string KeyOf(int i) {
  if (i % 3 == 0) return absl::StrCat("a shared prefix of thirty-two b/", i);
  if (i % 3 == 1) return absl::StrCat("k", i);
  return absl::StrCat("user:", i * 7919 % 100003, ":profile");
}

// A value that names its key and version: "<version>|<key>|" and filler from both.
std::string ValueOf(std::string_view key, uint64_t version) {
  std::string v = absl::StrCat(version, "|");
  v.append(key);
  v.push_back('|');
  const size_t filler = (version * 31 + key.size() * 17) % 120;
  for (size_t i = 0; i < filler; ++i) v.push_back(static_cast<char>('a' + (i + version) % 26));
  return v;
}

// True when `value` is ValueOf(key, v) for some v.
bool Written(std::string_view key, std::string_view value) {
  const size_t bar = value.find('|');
  uint64_t version;
  if (bar == std::string_view::npos ||
      !absl::SimpleAtoi(absl::string_view(value.data(), bar), &version)) {
    return false;
  }
  return value == ValueOf(key, version);
}

// Offsets of the tree's nodes and value objects in a base pool, the targets of crafted words.
struct Targets {
  std::vector<uint64_t> nodes, values;
  uint64_t heap_begin = 0, heap_end = 0;
};

class Collect : public ds::TreeVisitor {
 public:
  Collect(const Pool& pool, Targets* t) : pool_(pool), t_(t) {}
  absl::Status Node(const void* node, size_t, bool, int) override {
    t_->nodes.push_back(pool_.offset_of(node));
    return absl::OkStatus();
  }
  absl::Status Value(const void* value, size_t, const void*, int) override {
    t_->values.push_back(pool_.offset_of(value));
    return absl::OkStatus();
  }

 private:
  const Pool& pool_;
  Targets* t_;
};

// Writes the base data: keys put, some updated, some removed; closed cleanly.
void Fill(const std::string& path) {
  tools::KvStoreOptions o;
  o.create_size = kPoolSize;
  auto kv = tools::KvStore::Open(path, o);
  ASSERT_TRUE(kv.ok()) << kv.status();
  ds::DurableMasstree& t = (*kv)->tree();
  for (int i = 0; i < kKeys; ++i) {
    const std::string k = KeyOf(i);
    ASSERT_NE(t.put(k, ValueOf(k, 1)), ds::PutResult::kNoMemory);
  }
  for (int i = 0; i < kKeys; i += 4) {
    const std::string k = KeyOf(i);
    ASSERT_NE(t.put(k, ValueOf(k, 2)), ds::PutResult::kNoMemory);
  }
  for (int i = 1; i < kKeys; i += 9) ASSERT_TRUE(t.remove(KeyOf(i)));
  ASSERT_TRUE((*kv)->Close().ok());
}

// A copy of `clean` that a child killed while it updated, inserted and removed keys with a
// short epoch: its next open recovers.
void Crash(const std::string& clean, const std::string& path) {
  const std::optional<std::string> image = testing::ReadFile(clean);
  ASSERT_TRUE(image.has_value());
  WriteWhole(path, *image);
  int ready[2];
  ASSERT_EQ(pipe(ready), 0);
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    close(ready[0]);
    tools::KvStoreOptions o;
    o.epochs.interval = std::chrono::milliseconds(2);
    auto kv = tools::KvStore::Open(path, o);
    if (!kv.ok()) _exit(1);
    ds::DurableMasstree& t = (*kv)->tree();
    for (uint64_t round = 3;; ++round) {
      for (int i = 0; i < kKeys; i += 5) {
        const std::string k = KeyOf((i + static_cast<int>(round)) % kKeys);
        if (i % 3 == 0) {
          t.remove(k);
        } else {
          t.put(k, ValueOf(k, round));
        }
      }
      if (round == 6) (void)!write(ready[1], "r", 1);
    }
  }
  close(ready[1]);
  char c;
  ASSERT_EQ(read(ready[0], &c, 1), 1);
  close(ready[0]);
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  kill(pid, SIGKILL);
  int status;
  waitpid(pid, &status, 0);
}

// Negative controls: the readers with one defence taken away, which the fuzzer must catch.
enum class Control {
  kNone,
  kUnchecked,   // the reads run without the structural check first
  kUnverified,  // the reads do not compare values with their checksums
};

// What a reader does with the damaged pool (in the child; stdout and stderr to /dev/null).
int ReadEverything(const std::string& path, Control control) {
  const std::optional<std::string> before = testing::ReadFile(path);
  if (control == Control::kNone) {
    tools::InfoCommand({path});
    tools::CheckCommand({path});
    tools::DumpCommand({path});
    if (testing::ReadFile(path) != before) return kChangedFileExit;
  }
  // As `pmrt serve` opens: tried first on a private mapping, and nothing reads the tree before
  // its structure is checked.
  tools::KvStoreOptions o;
  o.require_tree = true;
  o.trial_open = control != Control::kUnchecked;
  o.check_tree = control != Control::kUnchecked;
  auto kv = tools::KvStore::Open(path, o);
  if (!kv.ok()) {  // refused: named on stderr, the file as it was
    return control == Control::kNone && testing::ReadFile(path) != before ? kChangedFileExit : 0;
  }
  const ds::DurableMasstree& t = (*kv)->tree();
  std::string value;
  for (int i = 0; i < kKeys; ++i) {
    const std::string k = KeyOf(i);
    const absl::StatusOr<bool> found = control == Control::kUnverified
                                           ? absl::StatusOr<bool>(t.get(k, &value))
                                           : t.get_verified(k, &value);
    if (found.ok() && *found && !Written(k, value)) return kWrongValueExit;
  }
  bool wrong = false;
  t.scan("", SIZE_MAX, [&](std::string_view k, std::string_view v) {
    if ((control == Control::kUnverified || t.value_intact(k, v)) && !Written(k, v)) {
      wrong = true;
    }
    return !wrong;
  });
  if (wrong) return kWrongValueExit;
  (void)t.size();
  return 0;
}

class CorruptionFuzzTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new testing::TempDir();
    Fill(dir_->File("clean.pool"));
    Crash(dir_->File("clean.pool"), dir_->File("crashed.pool"));
    targets_ = new Targets();
    // The targets come from the clean pool (the crashed one shares most of its nodes), found
    // on a scratch copy: opening changes a pool.
    const std::optional<std::string> clean = testing::ReadFile(dir_->File("clean.pool"));
    ASSERT_TRUE(clean.has_value());
    WriteWhole(dir_->File("scratch.pool"), *clean);
    auto kv = tools::KvStore::Open(dir_->File("scratch.pool"));
    ASSERT_TRUE(kv.ok()) << kv.status();
    Collect c((*kv)->pool(), targets_);
    ASSERT_TRUE((*kv)->tree().CheckInvariants(nullptr, &c).ok());
    const RegionDesc heap = (*kv)->pool().region(PoolRegion::kHeap);
    targets_->heap_begin = heap.offset;
    targets_->heap_end = heap.offset + heap.size;
    ASSERT_TRUE((*kv)->Close().ok());
  }
  static void TearDownTestSuite() {
    delete targets_;
    delete dir_;
  }

  static testing::TempDir* dir_;
  static Targets* targets_;
};
testing::TempDir* CorruptionFuzzTest::dir_ = nullptr;
Targets* CorruptionFuzzTest::targets_ = nullptr;

// One mutation of `image`, described in *log.
void Mutate(Rng& rng, const Targets& t, std::string& image, std::string* log) {
  auto put64 = [&](uint64_t at, uint64_t v) {
    if (at + 8 <= image.size()) std::memcpy(image.data() + at, &v, 8);
  };
  auto crafted = [&]() -> uint64_t {
    switch (rng.Below(7)) {
      case 0:
        return uint64_t{1} << 63 | rng.Below(kPoolSize);  // negative as a signed difference
      case 1:
        return ~uint64_t{0} - rng.Below(4096);
      case 2:
        return t.nodes.empty() ? 0 : t.nodes[rng.Below(t.nodes.size())];  // another node
      case 3:
        return t.values.empty() ? 0 : t.values[rng.Below(t.values.size())];
      case 4:
        return rng.Below(kPoolSize) | 1;  // misaligned
      case 5:
        return kPoolSize + rng.Below(uint64_t{1} << 40);  // past the end
      default:
        return 0;
    }
  };
  const uint64_t kind = rng.Below(100);
  if (kind < 20) {
    const uint64_t at = rng.Below(image.size());
    const int bit = static_cast<int>(rng.Below(8));
    image[at] = static_cast<char>(image[at] ^ (1 << bit));
    absl::StrAppend(log, " flip@", at, ".", bit);
  } else if (kind < 45 && !t.nodes.empty()) {
    // A word of a node: keys, permutation, links, logs.
    const uint64_t node = t.nodes[rng.Below(t.nodes.size())];
    const uint64_t at = node + 8 * rng.Below(sizeof(LeafNode) / 8);
    if (rng.Chance(50)) {
      const uint64_t v = crafted();
      put64(at, v);
      absl::StrAppend(log, " word@", at, "=", v);
    } else {
      const uint64_t byte = at + rng.Below(8);
      const int bit = static_cast<int>(rng.Below(8));
      if (byte < image.size()) image[byte] = static_cast<char>(image[byte] ^ (1 << bit));
      absl::StrAppend(log, " nodeflip@", byte, ".", bit);
    }
  } else if (kind < 65 && !t.values.empty()) {
    // A value object: its lengths, key suffix, bytes or checksum.
    const uint64_t obj = t.values[rng.Below(t.values.size())];
    if (rng.Chance(30)) {
      const uint32_t len = rng.Chance(50) ? static_cast<uint32_t>(rng.Next())
                                          : static_cast<uint32_t>(rng.Below(256));
      const uint64_t at = obj + (rng.Chance(50) ? 0 : 4);
      if (at + 4 <= image.size()) std::memcpy(image.data() + at, &len, 4);
      absl::StrAppend(log, " len@", at, "=", len);
    } else {
      const uint64_t byte = obj + rng.Below(64);
      if (byte < image.size()) image[byte] = static_cast<char>(image[byte] ^ (1 << rng.Below(8)));
      absl::StrAppend(log, " valueflip@", byte);
    }
  } else if (kind < 75) {
    // A page of the heap (nodes, values, the heap's own metadata) zeroed or randomized.
    const uint64_t pages = (t.heap_end - t.heap_begin) / 4096;
    const uint64_t at = t.heap_begin + 4096 * rng.Below(pages);
    const bool zero = rng.Chance(50);
    for (uint64_t i = at; i < at + 4096 && i < image.size(); ++i) {
      image[i] = zero ? '\0' : static_cast<char>(rng.Next());
    }
    absl::StrAppend(log, zero ? " zeropage@" : " randpage@", at);
  } else if (kind < 85) {
    // A page anywhere (header, state, epoch area, external log, heap).
    const uint64_t at = 4096 * rng.Below(image.size() / 4096);
    const bool zero = rng.Chance(50);
    for (uint64_t i = at; i < at + 4096 && i < image.size(); ++i) {
      image[i] = zero ? '\0' : static_cast<char>(rng.Next());
    }
    absl::StrAppend(log, zero ? " zeropage@" : " randpage@", at);
  } else if (kind < 95) {
    // A crafted word anywhere in the heap's data.
    const uint64_t at = t.heap_begin + 8 * rng.Below((t.heap_end - t.heap_begin) / 8);
    const uint64_t v = crafted();
    put64(at, v);
    absl::StrAppend(log, " heapword@", at, "=", v);
  } else {
    const uint64_t len = rng.Below(image.size());
    image.resize(len);
    absl::StrAppend(log, " truncate=", len);
  }
}

// The outcome of one case: "" when it ended well, else what went wrong.
std::string RunCase(const std::string& path, Control control = Control::kNone,
                    std::chrono::seconds timeout = kCaseTimeout) {
  const pid_t pid = fork();
  if (pid < 0) return "fork failed";
  if (pid == 0) {
    if (std::getenv("PMRT_CORRUPTION_VERBOSE") == nullptr) {
      const int null = open("/dev/null", O_WRONLY);
      dup2(null, 1);
      dup2(null, 2);
    }
    const int status = ReadEverything(path, control);
    std::fflush(stdout);
    _exit(status);
  }
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  int status = 0;
  for (;;) {
    const pid_t r = waitpid(pid, &status, WNOHANG);
    if (r == pid) break;
    if (std::chrono::steady_clock::now() > deadline) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      return "hang (killed after the timeout)";
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  if (WIFSIGNALED(status)) return absl::StrCat("crash: signal ", WTERMSIG(status));
  if (WEXITSTATUS(status) == kWrongValueExit) return "served a value never written for its key";
  if (WEXITSTATUS(status) == kChangedFileExit) {
    return "the tools, or an open that refused the pool, changed the file";
  }
  if (WEXITSTATUS(status) != 0) return absl::StrCat("exit status ", WEXITSTATUS(status));
  return "";
}

// Runs `cases` cases from `seed`; returns the failures (at most `max_failures`, then stops),
// each described with its case, replay seed and mutations.
std::vector<std::string> RunCases(const testing::TempDir& dir, const Targets& targets,
                                  uint64_t seed, uint64_t cases, Control control,
                                  size_t max_failures,
                                  std::chrono::seconds timeout = kCaseTimeout) {
  std::map<std::string, std::string> base;
  for (const char* name : {"clean.pool", "crashed.pool"}) {
    std::optional<std::string> image = testing::ReadFile(dir.File(name));
    EXPECT_TRUE(image.has_value() && image->size() == kPoolSize) << name;
    if (!image.has_value()) return {"no base pool"};
    base[name] = std::move(*image);
  }
  const char* keep = std::getenv("PMRT_CORRUPTION_KEEP");
  const std::string path = dir.File("case.pool");
  std::vector<std::string> failures;
  for (uint64_t c = 0; c < cases && failures.size() < max_failures; ++c) {
    Rng rng(seed + c);
    const bool crashed = rng.Chance(50);
    std::string image = base[crashed ? "crashed.pool" : "clean.pool"];
    std::string log;
    const int mutations = 1 + static_cast<int>(rng.Below(3));
    for (int m = 0; m < mutations; ++m) Mutate(rng, targets, image, &log);
    WriteWhole(path, image);
    const std::string outcome = RunCase(path, control, timeout);
    if (outcome.empty()) continue;
    failures.push_back(absl::StrCat("case ", c, " (PMRT_CORRUPTION_SEED=", seed + c, ", ",
                                    crashed ? "crashed" : "clean", " pool):", log, ": ", outcome));
    if (keep != nullptr) WriteWhole(absl::StrCat(keep, "/case-", c, ".pool"), image);
  }
  return failures;
}

TEST_F(CorruptionFuzzTest, NoReaderCrashesHangsOrServesDamagedValues) {
  // The undamaged pools read clean (the crashed one after its recovery).
  for (const char* name : {"clean.pool", "crashed.pool"}) {
    const std::optional<std::string> image = testing::ReadFile(dir_->File(name));
    ASSERT_TRUE(image.has_value());
    WriteWhole(dir_->File("case.pool"), *image);
    EXPECT_EQ(RunCase(dir_->File("case.pool")), "") << name;
  }
  const uint64_t cases = testing::EnvOr("PMRT_CORRUPTION_CASES", 2000);
  const uint64_t seed = testing::EnvOr("PMRT_CORRUPTION_SEED", 1);
  for (const std::string& f : RunCases(*dir_, *targets_, seed, cases, Control::kNone, 5)) {
    ADD_FAILURE() << f;
  }
}

// The fuzzer's teeth: without the structural check before reading, damaged pools crash or
// hang the reader; without the checksums, damaged values are served. Each is caught within 300
// cases.
TEST_F(CorruptionFuzzTest, NegativeControlsAreCaught) {
  // (A hang is the reader following a cycle: a 2 s limit is ample for an undamaged read.)
  const std::vector<std::string> unchecked =
      RunCases(*dir_, *targets_, 1, 300, Control::kUnchecked, 1, std::chrono::seconds(2));
  ASSERT_EQ(unchecked.size(), 1u) << "no crash or hang without the structural check";
  std::printf("without the structural check: %s\n", unchecked[0].c_str());
  // (Under ASan a wild access ends the child with ASan's exit status instead of a signal.)
  EXPECT_THAT(unchecked[0], ::testing::AnyOf(::testing::HasSubstr(": crash: signal"),
                                             ::testing::HasSubstr(": hang"),
                                             ::testing::HasSubstr(": exit status")));
  const std::vector<std::string> unverified =
      RunCases(*dir_, *targets_, 1, 300, Control::kUnverified, 1);
  ASSERT_EQ(unverified.size(), 1u) << "no damaged value served without the checksums";
  std::printf("without the checksums: %s\n", unverified[0].c_str());
  EXPECT_THAT(unverified[0], ::testing::HasSubstr("served a value never written"));
}

}  // namespace
}  // namespace pmrt
