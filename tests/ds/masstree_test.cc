// Tests for pmrt::ds::Masstree: the permutation word, model-based random sequences against
// std::map (short, long, binary and prefix-sharing keys; 8-byte integer keys), structure checks
// after every batch, out-of-memory behaviour, and concurrent workloads with exact oracles.
// Every tree test runs on both variants of the one source: the transient tree and the durable
// tree (PoolNodeAllocator, in an in-memory pool, with the epoch advancing every millisecond so
// that boundaries fall inside the workloads).
#include "ds/masstree.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <random>
#include <set>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "ds/durable_masstree.h"
#include "ds/internal/durable_policy.h"
#include "ds/internal/ebr.h"
#include "ds/internal/permuter.h"
#include "tests/util/test_util.h"

namespace pmrt::ds {
namespace {

#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
constexpr bool kSanitized = true;
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer) || __has_feature(address_sanitizer)
constexpr bool kSanitized = true;
#else
constexpr bool kSanitized = false;
#endif
#else
constexpr bool kSanitized = false;
#endif

// Work sizes shrink under sanitizers (5-15x slower) so the suite stays fast.
int Scaled(int n) { return kSanitized ? std::max(1, n / 3) : n; }

using Model = std::map<std::string, std::string>;

// Everything in the tree, by a full scan.
template <class Tree>
Model Contents(const Tree& t) {
  Model m;
  std::string last;
  bool first = true;
  t.scan("", SIZE_MAX, [&](std::string_view k, std::string_view v) {
    EXPECT_TRUE(first || std::string(k) > last) << "scan out of order";
    first = false;
    last = std::string(k);
    m.emplace(std::string(k), std::string(v));
    return true;
  });
  return m;
}

std::string Printable(std::string_view s) {
  std::string out;
  for (unsigned char c : s) {
    if (c >= 0x20 && c < 0x7f) {
      out.push_back(static_cast<char>(c));
    } else {
      out += "\\x" + std::string(1, "0123456789abcdef"[c >> 4]) + "0123456789abcdef"[c & 15];
    }
  }
  return out;
}

template <class Tree>
void ExpectSameAsModel(const Tree& t, const Model& model) {
  ASSERT_TRUE(t.CheckInvariants().ok()) << t.CheckInvariants();
  EXPECT_EQ(t.size(), model.size());
  Model got = Contents(t);
  ASSERT_EQ(got.size(), model.size());
  auto it = model.begin();
  for (const auto& [k, v] : got) {
    ASSERT_EQ(k, it->first) << Printable(k) << " vs " << Printable(it->first);
    ASSERT_EQ(v, it->second) << Printable(k);
    ++it;
  }
}

// Random keys of length 0..40 over a tiny alphabet with a few fixed prefixes, so that keys share
// whole 8-byte slices (new layers) and differ only in trailing zero bytes.
class KeyGen {
 public:
  explicit KeyGen(uint64_t seed) : rng_(seed) {}
  std::string Next() {
    static const char* const kPrefixes[] = {"", "prefix__", "prefix__prefix__", "\0\0\0\0\0\0\0\0",
                                            "abcdefghabcdefghabcdefgh"};
    static const size_t kPrefixLen[] = {0, 8, 16, 8, 24};
    const int p = static_cast<int>(rng_() % 5);
    std::string k(kPrefixes[p], kPrefixLen[p]);
    const size_t extra = rng_() % (41 - kPrefixLen[p]);
    static const char kAlphabet[] = {'\0', '\1', 'a', 'b', '\xff'};
    for (size_t i = 0; i < extra; ++i) k.push_back(kAlphabet[rng_() % 5]);
    return k;
  }
  std::mt19937_64& rng() { return rng_; }

 private:
  std::mt19937_64 rng_;
};

// ---- The two variants -------------------------------------------------------------------------

struct TransientVariant {
  using Tree = Masstree;
  Tree& tree() { return tree_; }
  Masstree tree_;
};

// A durable tree in a fresh in-memory pool (eadr backend: fences only), the epoch advancing in
// the background every millisecond.
class DurableVariant {
 public:
  using Tree = DurableMasstree;
  static constexpr size_t kPoolSize = size_t{512} << 20;

  DurableVariant() {
    mem_ = mmap(nullptr, kPoolSize, PROT_READ | PROT_WRITE,
                MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (mem_ == MAP_FAILED) std::abort();
    PoolOptions po;
    po.backend = BackendKind::kEadr;
    pool_ = Check(Pool::CreateInMemory(mem_, kPoolSize, "masstree-test", po));
    epoch::ManagerOptions mo;
    mo.interval = std::chrono::milliseconds(1);
    epochs_ = Check(epoch::Manager::Open(*pool_, mo));
    heap_ = Check(alloc::Heap::Open(*pool_, *epochs_));
    tree_ = Check(DurableMasstree::Create(*pool_, *epochs_, *heap_));
  }
  ~DurableVariant() {
    tree_.reset();
    heap_.reset();
    epochs_.reset();
    pool_.reset();
    munmap(mem_, kPoolSize);
  }
  Tree& tree() { return *tree_; }

 private:
  template <class T>
  static T Check(absl::StatusOr<T> v) {
    if (!v.ok()) {
      std::fprintf(stderr, "DurableVariant: %s\n", v.status().ToString().c_str());
      std::abort();
    }
    return std::move(*v);
  }
  void* mem_;
  std::unique_ptr<Pool> pool_;
  std::unique_ptr<epoch::Manager> epochs_;
  std::unique_ptr<alloc::Heap> heap_;
  std::unique_ptr<DurableMasstree> tree_;
};

template <class V>
class MasstreeTest : public ::testing::Test {
 protected:
  typename V::Tree& tree() { return variant_.tree(); }
  V variant_;
};
template <class V>
class MasstreeConcurrentTest : public MasstreeTest<V> {};

class VariantNames {
 public:
  template <class V>
  static std::string GetName(int) {
    return std::is_same_v<V, TransientVariant> ? "Transient" : "Durable";
  }
};
using Variants = ::testing::Types<TransientVariant, DurableVariant>;
TYPED_TEST_SUITE(MasstreeTest, Variants, VariantNames);
TYPED_TEST_SUITE(MasstreeConcurrentTest, Variants, VariantNames);

// ---- Permuter ---------------------------------------------------------------------------------

TEST(PermuterTest, MatchesVectorModel) {
  using P = ds_internal::LeafPermuter;
  std::mt19937_64 rng(7);
  for (int round = 0; round < 500; ++round) {
    P p;
    std::vector<int> live, free_slots;
    for (int i = 0; i < P::kMaxSize; ++i) free_slots.push_back(i);
    for (int step = 0; step < 60; ++step) {
      const bool insert = live.empty() || (live.size() < P::kMaxSize && rng() % 2 == 0);
      if (insert) {
        const int pos = static_cast<int>(rng() % (live.size() + 1));
        const int slot = p.InsertAt(pos);
        ASSERT_EQ(slot, free_slots.front());
        free_slots.erase(free_slots.begin());
        live.insert(live.begin() + pos, slot);
      } else {
        const int pos = static_cast<int>(rng() % live.size());
        ASSERT_EQ(p.RemoveAt(pos), live[pos]);
        free_slots.push_back(live[pos]);  // back of the free list
        live.erase(live.begin() + pos);
      }
      ASSERT_TRUE(p.IsValid());
      ASSERT_EQ(p.size(), static_cast<int>(live.size()));
      for (size_t i = 0; i < live.size(); ++i) ASSERT_EQ(p[i], live[i]);
      for (size_t i = 0; i < free_slots.size(); ++i) ASSERT_EQ(p[live.size() + i], free_slots[i]);
    }
  }
}

TEST(PermuterTest, TruncateFreesTheTail) {
  auto p = ds_internal::LeafPermuter::Identity(14);
  EXPECT_TRUE(p.IsValid());
  p.Truncate(5);
  EXPECT_EQ(p.size(), 5);
  EXPECT_EQ(p.NextFreeSlot(), 5);
  EXPECT_TRUE(p.IsValid());
  EXPECT_FALSE(ds_internal::LeafPermuter(0x1111).IsValid());
}

// ---- Epoch-based reclamation -------------------------------------------------------------------

std::atomic<int> ebr_freed{0};
void CountFree(void*, size_t) { ebr_freed.fetch_add(1); }

TEST(EbrTest, GuardDelaysFreeUntilItEnds) {
  ds_internal::Ebr& ebr = ds_internal::Ebr::Global();
  int objects[4];
  ebr_freed = 0;
  {
    ds_internal::EbrGuard guard;
    for (int& o : objects) ebr.Retire(&o, &CountFree, sizeof(o));
    for (int i = 0; i < 5; ++i) ebr.Collect();
    EXPECT_EQ(ebr_freed.load(), 0) << "freed while a guard that could see them is active";
  }
  for (int i = 0; i < 5; ++i) ebr.Collect();
  EXPECT_EQ(ebr_freed.load(), 4);
}

TEST(EbrTest, OtherThreadsGuardDelaysFree) {
  ds_internal::Ebr& ebr = ds_internal::Ebr::Global();
  int object = 0;
  ebr_freed = 0;
  std::atomic<int> stage{0};
  std::thread reader([&] {
    ds_internal::EbrGuard guard;
    stage = 1;
    while (stage.load() != 2) std::this_thread::yield();
  });
  while (stage.load() != 1) std::this_thread::yield();
  ebr.Retire(&object, &CountFree, sizeof(object));
  for (int i = 0; i < 5; ++i) ebr.Collect();
  EXPECT_EQ(ebr_freed.load(), 0);
  stage = 2;
  reader.join();
  for (int i = 0; i < 5; ++i) ebr.Collect();
  EXPECT_EQ(ebr_freed.load(), 1);
}

TEST(TransientMasstreeTest, UpdatesRetireAndFreeOldValues) {
  Masstree t;
  const size_t before = ds_internal::Ebr::Global().pending();
  for (int i = 0; i < 20000; ++i) t.put("k", std::to_string(i));
  EXPECT_EQ(t.get("k"), "19999");
  EXPECT_LT(ds_internal::Ebr::Global().pending(), before + 1000) << "old values are freed";
}

// ---- Single-threaded behaviour ----------------------------------------------------------------

TYPED_TEST(MasstreeTest, EmptyTree) {
  auto& t = this->tree();
  EXPECT_EQ(t.get(""), std::nullopt);
  EXPECT_EQ(t.get("x"), std::nullopt);
  EXPECT_FALSE(t.remove("x"));
  EXPECT_EQ(t.scan("", 10, [](std::string_view, std::string_view) { return true; }), 0u);
  EXPECT_EQ(t.size(), 0u);
  EXPECT_TRUE(t.CheckInvariants().ok());
}

TYPED_TEST(MasstreeTest, ZeroCopyReadAndBufferGet) {
  auto& t = this->tree();
  const std::string long_value(300, 'v');
  ASSERT_EQ(t.put("short", "abc"), PutResult::kInserted);
  ASSERT_EQ(t.put("long", long_value), PutResult::kInserted);
  std::string seen;
  EXPECT_TRUE(t.read("long", [&](std::string_view v) { seen.assign(v); }));
  EXPECT_EQ(seen, long_value);
  int calls = 0;
  EXPECT_FALSE(t.read("absent", [&](std::string_view) { ++calls; }));
  EXPECT_EQ(calls, 0) << "not called for an absent key";
  char buf[8];
  EXPECT_EQ(t.get("short", std::span<char>(buf)), 3u);
  EXPECT_EQ(std::string_view(buf, 3), "abc");
  std::memset(buf, 0, sizeof(buf));
  EXPECT_EQ(t.get("long", std::span<char>(buf)), 300u) << "the whole length, the copy cut";
  EXPECT_EQ(std::string_view(buf, 8), "vvvvvvvv");
  EXPECT_EQ(t.get("absent", std::span<char>(buf)), std::nullopt);
  EXPECT_EQ(t.get("short", std::span<char>()), 3u) << "an empty buffer asks for the length";
}

TYPED_TEST(MasstreeTest, PutGetUpdateRemove) {
  auto& t = this->tree();
  EXPECT_EQ(t.put("apple", "red"), PutResult::kInserted);
  EXPECT_EQ(t.put("banana", "yellow"), PutResult::kInserted);
  EXPECT_EQ(t.get("apple"), "red");
  EXPECT_EQ(t.put("apple", "green"), PutResult::kUpdated);
  EXPECT_EQ(t.get("apple"), "green");
  std::string v;
  EXPECT_TRUE(t.get("banana", &v));
  EXPECT_EQ(v, "yellow");
  EXPECT_EQ(t.insert_if_absent("banana", "x"), InsertResult::kExists);
  EXPECT_EQ(t.insert_if_absent("cherry", "dark"), InsertResult::kInserted);
  EXPECT_EQ(t.get("banana"), "yellow");
  EXPECT_TRUE(t.remove("apple"));
  EXPECT_FALSE(t.remove("apple"));
  EXPECT_EQ(t.get("apple"), std::nullopt);
  EXPECT_EQ(t.size(), 2u);
  EXPECT_TRUE(t.CheckInvariants().ok());
}

TYPED_TEST(MasstreeTest, EmptyBinaryAndPrefixKeys) {
  auto& t = this->tree();
  Model model;
  const std::string long_prefix(250, 'p');
  std::vector<std::string> keys = {"",
                                   std::string(1, '\0'),
                                   std::string(2, '\0'),
                                   std::string(8, '\0'),
                                   std::string(9, '\0'),
                                   "a",
                                   std::string("a\0", 2),
                                   std::string("a\0\0", 3),
                                   "abcdefgh",
                                   "abcdefghi",
                                   std::string("abcdefgh\0", 9),
                                   "abcdefghabcdefgh",
                                   "abcdefghabcdefgh" + std::string(1, '\0'),
                                   "\xff\xff\xff\xff\xff\xff\xff\xff\xff",
                                   long_prefix,
                                   long_prefix + "a",
                                   long_prefix + "b",
                                   long_prefix + std::string(1, '\0'),
                                   std::string(1000, 'z'),
                                   std::string(1000, 'z') + "!"};
  for (size_t i = 0; i < keys.size(); ++i) {
    const std::string value = "v" + std::to_string(i) + std::string(i * 7, 'x');
    ASSERT_EQ(t.put(keys[i], value), PutResult::kInserted) << Printable(keys[i]);
    model[keys[i]] = value;
    ASSERT_TRUE(t.CheckInvariants().ok()) << t.CheckInvariants();
  }
  for (const auto& [k, v] : model) EXPECT_EQ(t.get(k), v) << Printable(k);
  EXPECT_EQ(t.get(std::string(3, '\0')), std::nullopt);
  EXPECT_EQ(t.get("abcdefghab"), std::nullopt);
  EXPECT_EQ(t.get(long_prefix + "c"), std::nullopt);
  ExpectSameAsModel(t, model);
  for (const auto& k : keys) {
    ASSERT_TRUE(t.remove(k)) << Printable(k);
    model.erase(k);
    ExpectSameAsModel(t, model);
  }
}

TYPED_TEST(MasstreeTest, DeepLayersAreCreatedAndCollected) {
  auto& t = this->tree();
  // 32 keys sharing 200 bytes: 25 layers below the first.
  const std::string shared(200, 's');
  for (int i = 0; i < 32; ++i) t.put(shared + std::to_string(i), std::to_string(i));
  TreeShape shape;
  ASSERT_TRUE(t.CheckInvariants(&shape).ok()) << t.CheckInvariants();
  EXPECT_EQ(shape.keys, 32u);
  EXPECT_GE(shape.layers, 26u);
  for (int i = 0; i < 32; ++i) EXPECT_EQ(t.get(shared + std::to_string(i)), std::to_string(i));
  for (int i = 0; i < 32; ++i) ASSERT_TRUE(t.remove(shared + std::to_string(i)));
  ASSERT_TRUE(t.CheckInvariants(&shape).ok()) << t.CheckInvariants();
  EXPECT_EQ(shape.keys, 0u);
  EXPECT_EQ(shape.layers, 1u) << "emptied layers are unlinked";
}

TYPED_TEST(MasstreeTest, AscendingAndDescendingLoadsSplit) {
  for (bool ascending : {true, false}) {
    TypeParam variant;
    auto& t = variant.tree();
    const int n = Scaled(30000);
    for (int i = 0; i < n; ++i) {
      const uint64_t k = ascending ? i : n - 1 - i;
      ASSERT_EQ(t.put(U64Key(k), std::to_string(k)), PutResult::kInserted);
    }
    TreeShape shape;
    ASSERT_TRUE(t.CheckInvariants(&shape).ok()) << t.CheckInvariants();
    EXPECT_EQ(shape.keys, static_cast<size_t>(n));
    EXPECT_GE(shape.height, 3);
    if (ascending) {
      EXPECT_LE(shape.leaves, static_cast<size_t>(n / 13 + 2)) << "full leaves";
    }
    uint64_t expect = 0;
    t.scan("", SIZE_MAX, [&](std::string_view k, std::string_view v) {
      EXPECT_EQ(k, U64Key(expect).view());
      EXPECT_EQ(v, std::to_string(expect));
      ++expect;
      return true;
    });
    EXPECT_EQ(expect, static_cast<uint64_t>(n));
  }
}

// Applies `ops` random operations to the tree and the model, with checks after each batch.
template <class V>
void RunModelTest(uint64_t seed, int batches, int ops, const std::function<std::string()>& key) {
  V variant;
  auto& t = variant.tree();
  Model model;
  std::mt19937_64 rng(seed);
  for (int b = 0; b < batches; ++b) {
    for (int i = 0; i < ops; ++i) {
      const std::string k = key();
      const int op = static_cast<int>(rng() % 100);
      if (op < 40) {
        const std::string v = std::to_string(rng() % 1000000) + std::string(rng() % 20, 'v');
        const bool existed = model.count(k) > 0;
        ASSERT_EQ(t.put(k, v), existed ? PutResult::kUpdated : PutResult::kInserted);
        model[k] = v;
      } else if (op < 50) {
        const std::string v = "ins" + std::to_string(i);
        const bool existed = model.count(k) > 0;
        ASSERT_EQ(t.insert_if_absent(k, v),
                  existed ? InsertResult::kExists : InsertResult::kInserted);
        model.emplace(k, v);
      } else if (op < 80) {
        ASSERT_EQ(t.remove(k), model.erase(k) > 0) << Printable(k);
      } else {
        auto it = model.find(k);
        ASSERT_EQ(t.get(k), it == model.end() ? std::nullopt : std::optional(it->second))
            << Printable(k);
      }
    }
    ExpectSameAsModel(t, model);
    // Bounded scans and ranges from random points.
    for (int s = 0; s < 50; ++s) {
      const std::string from = key();
      const size_t count = rng() % 40;
      std::vector<std::pair<std::string, std::string>> got;
      t.scan(from, count, [&](std::string_view k, std::string_view v) {
        got.emplace_back(k, v);
        return true;
      });
      auto it = model.lower_bound(from);
      for (const auto& g : got) {
        ASSERT_NE(it, model.end());
        ASSERT_EQ(g.first, it->first) << "scan from " << Printable(from);
        ASSERT_EQ(g.second, it->second);
        ++it;
      }
      ASSERT_EQ(got.size(),
                std::min<size_t>(count, std::distance(model.lower_bound(from), model.end())));
      std::string lo = key(), hi = key();
      if (hi < lo) std::swap(lo, hi);
      size_t in_range = 0;
      auto rit = model.lower_bound(lo);
      t.range(lo, hi, [&](std::string_view k, std::string_view) {
        EXPECT_EQ(k, rit->first);
        ++rit;
        ++in_range;
        return true;
      });
      ASSERT_EQ(in_range,
                static_cast<size_t>(std::distance(model.lower_bound(lo), model.lower_bound(hi))));
    }
  }
  // Drain: everything goes, and the structure shrinks back.
  for (auto it = model.begin(); it != model.end(); it = model.erase(it)) {
    ASSERT_TRUE(t.remove(it->first));
  }
  TreeShape shape;
  ASSERT_TRUE(t.CheckInvariants(&shape).ok()) << t.CheckInvariants();
  EXPECT_EQ(shape.keys, 0u);
  EXPECT_EQ(shape.layers, 1u);
  EXPECT_EQ(shape.leaves, 1u) << "emptied leaves are unlinked";
}

TYPED_TEST(MasstreeTest, RandomVariableKeysMatchStdMap) {
  KeyGen gen(11);
  RunModelTest<TypeParam>(12, 8, Scaled(6000), [&] { return gen.Next(); });
}

TYPED_TEST(MasstreeTest, RandomIntegerKeysMatchStdMap) {
  std::mt19937_64 rng(21);
  RunModelTest<TypeParam>(22, 8, Scaled(8000),
                          [&] { return std::string(U64Key(rng() % 20000).view()); });
}

TYPED_TEST(MasstreeTest, ScanCallbackCanStop) {
  auto& t = this->tree();
  for (int i = 0; i < 100; ++i) t.put(U64Key(i), "x");
  int seen = 0;
  EXPECT_EQ(t.scan(U64Key(10), 50, [&](std::string_view, std::string_view) { return ++seen < 5; }),
            5u);
  EXPECT_EQ(
      t.range(U64Key(20), U64Key(30), [](std::string_view, std::string_view) { return true; }),
      10u);
  EXPECT_EQ(
      t.range(U64Key(30), U64Key(20), [](std::string_view, std::string_view) { return true; }), 0u);
}

TYPED_TEST(MasstreeTest, TypedValues) {
  struct Point {
    int32_t x, y;
  };
  auto& t = this->tree();
  EXPECT_EQ(t.put_as(U64Key(1), Point{3, 4}), PutResult::kInserted);
  EXPECT_EQ(t.template put_as<uint64_t>("n", 42), PutResult::kInserted);
  auto p = t.template get_as<Point>(U64Key(1));
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(p->x, 3);
  EXPECT_EQ(p->y, 4);
  EXPECT_EQ(t.template get_as<uint64_t>("n"), 42u);
  EXPECT_EQ(t.template get_as<uint32_t>("n"), std::nullopt) << "size mismatch";
  EXPECT_EQ(t.template get_as<uint64_t>("missing"), std::nullopt);
}

// A MallocNodeAllocator that grants only as many allocations as `budget` holds.
class FlakyAllocator {
 public:
  class Guard {
   public:
    explicit Guard(FlakyAllocator& a) : inner_(a.base_) {}

   private:
    MallocNodeAllocator::Guard inner_;
  };
  explicit FlakyAllocator(std::atomic<int>* budget) : budget_(budget) {}
  void* AllocateNode(size_t size, size_t align) {
    return Take() ? base_.AllocateNode(size, align) : nullptr;
  }
  void RetireNode(void* p, size_t size) { base_.RetireNode(p, size); }
  void* AllocateValue(size_t size) { return Take() ? base_.AllocateValue(size) : nullptr; }
  void RetireValue(void* p, size_t size) { base_.RetireValue(p, size); }

 private:
  bool Take() { return budget_->fetch_sub(1) > 0; }
  std::atomic<int>* budget_;
  MallocNodeAllocator base_;
};

TEST(TransientMasstreeTest, OutOfMemoryLeavesTreeUnchanged) {
  std::atomic<int> budget{1 << 30};
  BasicMasstree<FlakyAllocator> t{FlakyAllocator(&budget)};
  Model model;
  KeyGen gen(31);
  int failures = 0;
  for (int i = 0; i < Scaled(20000); ++i) {
    budget = static_cast<int>(gen.rng()() % 4);  // 0..3 allocations allowed for this operation
    const std::string k = gen.Next();
    const PutResult r = t.put(k, "v" + std::to_string(i));
    if (r == PutResult::kNoMemory) {
      ++failures;
    } else {
      model[k] = "v" + std::to_string(i);
    }
  }
  budget = 1 << 30;
  EXPECT_GT(failures, 0);
  ASSERT_TRUE(t.CheckInvariants().ok()) << t.CheckInvariants();
  EXPECT_EQ(t.size(), model.size());
  for (const auto& [k, v] : model) ASSERT_EQ(t.get(k), v) << Printable(k);
  size_t n = 0;
  t.scan("", SIZE_MAX, [&](std::string_view, std::string_view) { return ++n, true; });
  EXPECT_EQ(n, model.size());
}

// ---- Durable tree: reopen, descriptor errors, a full undo log ---------------------------------

// A pool file with the runtime the durable tree needs, reopened at will.
class DurableRuntime {
 public:
  // size 0: the file exists already (a copy); it is only removed at the end.
  explicit DurableRuntime(std::string path, size_t size = 64 << 20, size_t log_area = 0)
      : path_(std::move(path)) {
    if (size == 0) return;
    PoolOptions po;
    po.backend = BackendKind::kEadr;
    po.log_area_size = log_area;
    auto pool = Pool::Create(path_, size, "masstree-durable-test", po);
    EXPECT_TRUE(pool.ok()) << pool.status();
  }
  absl::Status Open(std::chrono::milliseconds interval = std::chrono::milliseconds(0)) {
    Close();
    PoolOptions po;
    po.backend = BackendKind::kEadr;
    auto pool = Pool::Open(path_, "masstree-durable-test", po);
    if (!pool.ok()) return pool.status();
    pool_ = std::move(*pool);
    auto m = epoch::Manager::Open(*pool_, {.interval = interval});
    if (!m.ok()) return m.status();
    epochs_ = std::move(*m);
    auto h = alloc::Heap::Open(*pool_, *epochs_);
    if (!h.ok()) return h.status();
    heap_ = std::move(*h);
    return absl::OkStatus();
  }
  void Close() {
    heap_.reset();
    epochs_.reset();
    if (pool_) (void)pool_->Close();
    pool_.reset();
  }
  ~DurableRuntime() {
    Close();
    std::remove(path_.c_str());
  }
  Pool& pool() { return *pool_; }
  epoch::Manager& epochs() { return *epochs_; }
  alloc::Heap& heap() { return *heap_; }

 private:
  std::string path_;
  std::unique_ptr<Pool> pool_;
  std::unique_ptr<epoch::Manager> epochs_;
  std::unique_ptr<alloc::Heap> heap_;
};

std::string TempPoolPath(const char* name) {
  return "/dev/shm/pmrt-" + std::string(name) + "-" + std::to_string(getpid()) + ".pool";
}

TEST(DurableMasstreeTest, ReopensWithItsDescriptor) {
  DurableRuntime rt(TempPoolPath("reopen"));
  ASSERT_TRUE(rt.Open().ok());
  Model model;
  uint64_t where;
  {
    auto t = DurableMasstree::Create(rt.pool(), rt.epochs(), rt.heap());
    ASSERT_TRUE(t.ok()) << t.status();
    where = (*t)->descriptor();
    KeyGen gen(3);
    for (int i = 0; i < 5000; ++i) {
      const std::string k = gen.Next();
      (*t)->put(k, "v" + std::to_string(i));
      model[k] = "v" + std::to_string(i);
    }
    ExpectSameAsModel(**t, model);
  }
  ASSERT_TRUE(rt.Open().ok());  // a clean close and reopen
  auto t = DurableMasstree::Open(rt.pool(), rt.epochs(), rt.heap(), where);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ((*t)->size(), model.size()) << "a reopened tree counts its keys once";
  ExpectSameAsModel(**t, model);
  EXPECT_GT((*t)->durable_stats().leaves_recovered, 0u) << "leaves re-armed at first access";
  (*t)->put("after reopen", "x");
  model["after reopen"] = "x";
  ExpectSameAsModel(**t, model);
}

// Fills a durable tree with short and long keys (layers, key suffixes), updates and removals.
void FillForDestroy(DurableMasstree& t, Model& model) {
  KeyGen gen(11);
  for (int i = 0; i < 20000; ++i) {
    std::string k = gen.Next();
    if (i % 5 == 0) k = "a shared long prefix of forty bytes......" + k;  // layers
    const std::string v = "value-" + std::to_string(i) + std::string(i % 50, 'x');
    t.put(k, v);
    model[k] = v;
  }
  for (int i = 0; i < 3000; ++i) {
    auto it = model.begin();
    std::advance(it, (i * 7919) % model.size());
    if (i % 2 == 0) {
      t.put(it->first, "updated");
      it->second = "updated";
    } else {
      ASSERT_TRUE(t.remove(it->first));
      model.erase(it);
    }
  }
}

TEST(DurableMasstreeTest, DestroyFreesEveryNodeValueAndTheDescriptor) {
  DurableRuntime rt(TempPoolPath("destroy"));
  ASSERT_TRUE(rt.Open().ok());
  ASSERT_OK(rt.epochs().Sync());
  const uint64_t live_before = rt.heap().Stats().live_blocks;
  auto t = DurableMasstree::Create(rt.pool(), rt.epochs(), rt.heap());
  ASSERT_TRUE(t.ok()) << t.status();
  const uint64_t where = (*t)->descriptor();
  Model model;
  FillForDestroy(**t, model);
  ASSERT_OK(rt.epochs().Sync());
  EXPECT_GT(rt.heap().Stats().live_blocks, live_before + model.size());
  {
    epoch::Guard other_thread_guard_stand_in(rt.epochs());
    std::thread([&] {
      // A guard of another thread does not count: this thread holds none.
      EXPECT_EQ((*t)->Destroy(other_thread_guard_stand_in).code(),
                absl::StatusCode::kFailedPrecondition);
    }).join();
    ASSERT_OK((*t)->Destroy(other_thread_guard_stand_in));
  }
  t->reset();
  ASSERT_OK(rt.epochs().Sync());
  ASSERT_OK(rt.epochs().Sync());  // the frees' grace period has passed
  EXPECT_EQ(rt.heap().Stats().live_blocks, live_before);
  ASSERT_OK(rt.heap().Check());
  EXPECT_EQ(DurableMasstree::Open(rt.pool(), rt.epochs(), rt.heap(), where).status().code(),
            absl::StatusCode::kDataLoss);
}

// A crash in the epoch of the Destroy: the file copied mid-epoch holds every store of it (the
// freed bitmaps, the cleared magic); reopening rolls all of it back and the tree is whole.
// `mutant`: ds.masstree.mutant.descriptor_snapshot (the descriptor's magic cleared unlogged).
struct DestroyCrash {
  Model model;
  uint64_t live = 0;    // live blocks before the Destroy
  absl::Status opened;  // the reopened tree's status
  std::unique_ptr<DurableRuntime> rt;
  std::unique_ptr<DurableMasstree> tree;  // (destroyed before rt)
};
void CrashInTheDestroysEpoch(bool mutant, const std::string& name, DestroyCrash& c) {
  const std::string original = TempPoolPath((name + "src").c_str());
  const std::string copy = TempPoolPath((name + "copy").c_str());
  uint64_t where;
  {
    DurableRuntime src(original);
    ASSERT_TRUE(src.Open().ok());
    auto t = DurableMasstree::Create(src.pool(), src.epochs(), src.heap());
    ASSERT_TRUE(t.ok()) << t.status();
    where = (*t)->descriptor();
    FillForDestroy(**t, c.model);
    ASSERT_OK(src.epochs().Sync());
    c.live = src.heap().Stats().live_blocks;
    epoch::Guard g(src.epochs());
    if (mutant) mutation::Disable(ds_internal::kDropDescriptorSnapshot);
    const absl::Status destroyed = (*t)->Destroy(g);
    mutation::EnableAll();
    ASSERT_OK(destroyed);
    ASSERT_EQ(std::system(("cp " + original + " " + copy).c_str()), 0);  // the crash
  }
  c.rt = std::make_unique<DurableRuntime>(copy, 0);  // (size 0: reuses the copied file)
  ASSERT_TRUE(c.rt->Open().ok());
  auto t = DurableMasstree::Open(c.rt->pool(), c.rt->epochs(), c.rt->heap(), where);
  c.opened = t.status();
  if (t.ok()) c.tree = std::move(*t);
}

TEST(DurableMasstreeTest, CrashBeforeTheDestroyCompletesKeepsTheTree) {
  DestroyCrash c;
  ASSERT_NO_FATAL_FAILURE(CrashInTheDestroysEpoch(false, "destroy", c));
  ASSERT_OK(c.opened);
  ExpectSameAsModel(*c.tree, c.model);
  ASSERT_OK(c.tree->CheckInvariants());
  ASSERT_OK(c.rt->heap().Check());
  EXPECT_EQ(c.rt->heap().Stats().live_blocks, c.live);
}

// Its mutant (the descriptor's snapshot dropped): the cleared magic survives the rollback and
// the tree is gone. (The crash suite creates its tree before its crash points, so this is the
// mutant's gate.)
TEST(DurableMasstreeTest, MutationGateKillsTheDescriptorSnapshotMutant) {
  DestroyCrash c;
  ASSERT_NO_FATAL_FAILURE(CrashInTheDestroysEpoch(true, "destroymut", c));
  EXPECT_FALSE(c.opened.ok()) << "ds.masstree.mutant.descriptor_snapshot survived";
}

TEST(DurableMasstreeTest, OpenRejectsBadDescriptors) {
  DurableRuntime rt(TempPoolPath("baddesc"));
  ASSERT_TRUE(rt.Open().ok());
  auto t = DurableMasstree::Create(rt.pool(), rt.epochs(), rt.heap());
  ASSERT_TRUE(t.ok());
  const uint64_t where = (*t)->descriptor();
  EXPECT_EQ(DurableMasstree::Open(rt.pool(), rt.epochs(), rt.heap(), 0).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(DurableMasstree::Open(rt.pool(), rt.epochs(), rt.heap(), where + 8).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(
      DurableMasstree::Open(rt.pool(), rt.epochs(), rt.heap(), rt.pool().size()).status().code(),
      absl::StatusCode::kInvalidArgument);
  // A block of the heap that holds something else.
  void* other = rt.heap().Allocate(64, 64);
  ASSERT_NE(other, nullptr);
  std::memset(other, 0x5a, 64);
  EXPECT_EQ(DurableMasstree::Open(rt.pool(), rt.epochs(), rt.heap(), rt.pool().offset_of(other))
                .status()
                .code(),
            absl::StatusCode::kDataLoss);
  auto& desc = *static_cast<ds_internal::MasstreeDescriptor*>(rt.pool().at(where));
  desc.version = 99;
  EXPECT_EQ(DurableMasstree::Open(rt.pool(), rt.epochs(), rt.heap(), where).status().code(),
            absl::StatusCode::kFailedPrecondition);
  desc.version = ds_internal::MasstreeDescriptor::kVersion;
  EXPECT_TRUE(DurableMasstree::Open(rt.pool(), rt.epochs(), rt.heap(), where).ok());
}

// Value checksums: every value of a new tree carries one, layers moved by a second key with
// the same slice keep theirs (the check passes), a changed byte is caught by get_verified,
// value_intact and the check. The same for the inline form (layout 3, the default) and the
// trailer form (layout 2, made by an older build); a version-1 tree (none) reads and writes
// without them.
TEST(DurableMasstreeTest, ValueChecksumsCatchChangedBytes) {
  DurableRuntime rt(TempPoolPath("checksums"));
  ASSERT_TRUE(rt.Open().ok());
  // A new tree whose descriptor then says `version` (the policy reads it at Open).
  auto tree_of_version = [&](uint32_t version) {
    auto made = DurableMasstree::Create(rt.pool(), rt.epochs(), rt.heap());
    EXPECT_TRUE(made.ok());
    const uint64_t where = (*made)->descriptor();
    made->reset();
    static_cast<ds_internal::MasstreeDescriptor*>(rt.pool().at(where))->version = version;
    auto opened = DurableMasstree::Open(rt.pool(), rt.epochs(), rt.heap(), where);
    EXPECT_TRUE(opened.ok()) << opened.status();
    return std::move(*opened);
  };
  for (const auto& [version, form] :
       {std::pair{3u, ds_internal::ValueForm::kInline}, {2u, ds_internal::ValueForm::kTrailer}}) {
    SCOPED_TRACE(absl::StrCat("layout version ", version));
    std::unique_ptr<DurableMasstree> made = tree_of_version(version);
    DurableMasstree& tree = *made;
    ASSERT_TRUE(tree.policy().value_checksums());
    ASSERT_EQ(tree.policy().value_form(), form);
    Model model;
    KeyGen gen(5);
    for (int i = 0; i < 3000; ++i) {
      std::string k = gen.Next();
      if (i % 3 == 0) k = "one long shared prefix, many layers deep: " + k;
      const std::string v = "value-" + std::to_string(i);
      tree.put(k, v);
      model[k] = v;
    }
    ds::TreeShape shape;
    ASSERT_TRUE(tree.CheckInvariants(&shape).ok());
    EXPECT_EQ(shape.checksummed_values, model.size());
    EXPECT_GT(shape.layers, 1u);
    for (const auto& [k, v] : model) {
      std::string got;
      auto found = tree.get_verified(k, &got);
      ASSERT_TRUE(found.ok() && *found && got == v) << k;
    }
    std::string none;
    EXPECT_FALSE(*tree.get_verified("absent", &none));

    // One byte of one value changes on media: a short key (no suffix) and a long one.
    for (const std::string& victim :
         {model.begin()->first, model.lower_bound("one long shared prefix")->first}) {
      char* byte = nullptr;
      tree.scan(victim, 1, [&](std::string_view, std::string_view v) {
        byte = const_cast<char*>(v.data());
        return false;
      });
      ASSERT_NE(byte, nullptr);
      *byte ^= 0x20;
      std::string got = "untouched";
      auto found = tree.get_verified(victim, &got);
      EXPECT_EQ(found.status().code(), absl::StatusCode::kDataLoss);
      EXPECT_THAT(std::string(found.status().message()),
                  ::testing::HasSubstr("fails its checksum"));
      EXPECT_EQ(got, "untouched");
      size_t intact = 0;
      tree.scan("", SIZE_MAX, [&](std::string_view k, std::string_view v) {
        intact += tree.value_intact(k, v);
        return true;
      });
      EXPECT_EQ(intact, model.size() - 1);
      absl::Status st = tree.CheckInvariants(&shape);
      EXPECT_EQ(st.code(), absl::StatusCode::kDataLoss) << st;
      EXPECT_EQ(shape.bad_checksums, 1u);
      ASSERT_EQ(shape.checksum_failures.size(), 1u);
      // The unverified read serves what the media holds; rewriting the key heals it.
      EXPECT_NE(*tree.get(victim), model[victim]);
      tree.put(victim, model[victim]);
      EXPECT_TRUE(tree.CheckInvariants().ok());
    }
  }

  // A tree of descriptor version 1 (made by an older build: no checksums).
  std::unique_ptr<DurableMasstree> v1 = tree_of_version(1);
  EXPECT_FALSE(v1->policy().value_checksums());
  for (int i = 0; i < 500; ++i) v1->put("v1 key " + std::to_string(i), std::to_string(i));
  ds::TreeShape shape;
  ASSERT_TRUE(v1->CheckInvariants(&shape).ok());
  EXPECT_EQ(shape.checksummed_values, 0u);
  std::string got;
  EXPECT_EQ(*v1->get_verified("v1 key 7", &got), true);
  EXPECT_EQ(got, "7");
}

// The inline form keeps a small value's object at the plain form's size: an 8-byte key with an
// 8-byte value takes one 16-byte block, checksum included; a key with a suffix pays the 4 bytes.
// A value the form cannot hold is refused (kNoMemory, the tree unchanged), and an object of
// another form than its tree's fails the check.
TEST(DurableMasstreeTest, InlineChecksumsKeepSmallValuesSmall) {
  DurableRuntime rt(TempPoolPath("inline"));
  ASSERT_TRUE(rt.Open().ok());
  auto t = DurableMasstree::Create(rt.pool(), rt.epochs(), rt.heap());
  ASSERT_TRUE(t.ok()) << t.status();
  DurableMasstree& tree = **t;
  ASSERT_EQ(tree.policy().value_form(), ds_internal::ValueForm::kInline);
  ASSERT_EQ(tree.put(U64Key(7).view(), "8 bytes!"), PutResult::kInserted);
  const std::string long_key = "a key with a suffix past its slice";
  ASSERT_EQ(tree.put(long_key, "value"), PutResult::kInserted);
  auto object_of = [&](std::string_view key) {
    const ds_internal::ValueObject* found = nullptr;
    tree.scan(key, 1, [&](std::string_view, std::string_view v) {
      // The inline form's checksum sits right before the value, the header before that (no
      // suffix) or the suffix (with one).
      const char* at = v.data() - sizeof(uint32_t);
      if (key.size() <= 8)
        at -= sizeof(ds_internal::ValueObject) - sizeof(uint32_t);
      else
        at -= (key.size() - 8) + sizeof(ds_internal::ValueObject);
      found = reinterpret_cast<const ds_internal::ValueObject*>(at);
      return false;
    });
    return found;
  };
  const ds_internal::ValueObject* small = object_of(U64Key(7).view());
  ASSERT_NE(small, nullptr);
  EXPECT_TRUE(small->is_inline());
  EXPECT_EQ(small->value(), "8 bytes!");
  EXPECT_EQ(small->suffix_len(), 0u);
  EXPECT_EQ(ds_internal::ValueBytes(tree.policy(), small), 16u);
  EXPECT_EQ(small->checksum(), ds_internal::ValueChecksum(U64Key(7).view(), "8 bytes!"));
  const ds_internal::ValueObject* suffixed = object_of(long_key);
  ASSERT_NE(suffixed, nullptr);
  EXPECT_EQ(suffixed->suffix(), long_key.substr(8));
  EXPECT_EQ(suffixed->value(), "value");
  EXPECT_EQ(ds_internal::ValueBytes(tree.policy(), suffixed),
            sizeof(ds_internal::ValueObject) + (long_key.size() - 8) + 4 + 5);
  EXPECT_EQ(suffixed->checksum(), ds_internal::ValueChecksum(long_key, "value"));
  ASSERT_TRUE(tree.CheckInvariants().ok());

  // 2^30 bytes (readable zero pages, never touched): past what a value object holds.
  const size_t huge = ds_internal::ValueObject::kMaxValueBytes + 1;
  void* zeros = mmap(nullptr, huge, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  ASSERT_NE(zeros, MAP_FAILED);
  EXPECT_EQ(tree.put("huge", std::string_view(static_cast<const char*>(zeros), huge)),
            PutResult::kNoMemory);
  EXPECT_EQ(tree.insert_if_absent("huge", std::string_view(static_cast<const char*>(zeros), huge)),
            InsertResult::kNoMemory);
  munmap(zeros, huge);
  EXPECT_FALSE(tree.get("huge").has_value());

  // The form bit cleared: the object reads as another form, which the check refuses.
  auto* header = const_cast<ds_internal::ValueObject*>(small);
  header->len_word &= ~ds_internal::ValueObject::kInlineBit;
  absl::Status st = tree.CheckInvariants();
  EXPECT_FALSE(st.ok());
  EXPECT_THAT(std::string(st.message()), ::testing::HasSubstr("another layout version's form"));
  header->len_word |= ds_internal::ValueObject::kInlineBit;
  EXPECT_TRUE(tree.CheckInvariants().ok());
}

// A 256 KiB undo log (4 blocks) and no background advancer: random inserts split leaves that
// existed before the epoch (each split copies the leaf, its right sibling and the parent), so
// the log fills within an epoch. Writes then advance the epoch themselves and retry; inside a
// caller's guard they report kNoMemory with the tree unchanged.
TEST(DurableMasstreeTest, FullUndoLogWaitsForTheBoundary) {
  DurableRuntime rt(TempPoolPath("fulllog"), 64 << 20, 256 << 10);
  ASSERT_TRUE(rt.Open().ok());
  auto t = DurableMasstree::Create(rt.pool(), rt.epochs(), rt.heap());
  ASSERT_TRUE(t.ok());
  Model model;
  std::mt19937_64 rng(5);
  auto load = [&](int n, const std::string& v) {
    for (int i = 0; i < n; ++i) {
      const std::string k(U64Key(rng()).view());
      ASSERT_EQ((*t)->put(k, v), PutResult::kInserted);
      model[k] = v;
    }
  };
  load(20000, "a");  // nodes created in this epoch are never copied in it
  ASSERT_TRUE(rt.epochs().Sync().ok());
  const uint64_t advances_before = rt.epochs().stats().advances;
  load(20000, "b");  // splits of older nodes: copies
  EXPECT_GT(rt.epochs().stats().advances, advances_before) << "the log filled and was waited for";
  ExpectSameAsModel(**t, model);
  ASSERT_TRUE(rt.epochs().Sync().ok());
  // Inside the caller's own guard a full log cannot be waited for.
  int no_memory = 0;
  {
    epoch::Guard g(rt.epochs());
    for (int i = 0; i < 40000 && no_memory == 0; ++i) {
      const std::string k(U64Key(rng()).view());
      const PutResult r = (*t)->put(k, "w");
      if (r == PutResult::kNoMemory) {
        ++no_memory;
      } else {
        ASSERT_EQ(r, PutResult::kInserted);
        model[k] = "w";
      }
    }
  }
  EXPECT_EQ(no_memory, 1);
  ExpectSameAsModel(**t, model);
}

// A crash image without the simulator: a copy of a live pool file taken mid-epoch, between
// operations (on eADR every store is in the file, as after a power cut with persistent caches).
// Its recovery rolls that epoch back, lazily: four threads then race to repair the same leaves
// (readers and writers on disjoint keys) and must all see the state the epoch began with.
TEST(DurableMasstreeTest, ThreadsRaceToRepairAfterACrash) {
  const std::string original = TempPoolPath("racesrc"), copy = TempPoolPath("racecopy");
  Model at_sync;
  uint64_t where;
  {
    DurableRuntime rt(original);
    ASSERT_TRUE(rt.Open().ok());
    auto t = DurableMasstree::Create(rt.pool(), rt.epochs(), rt.heap());
    ASSERT_TRUE(t.ok());
    where = (*t)->descriptor();
    for (int i = 0; i < 20000; ++i) {
      const std::string k(U64Key(static_cast<uint64_t>(i) * 7919).view());
      (*t)->put(k, "v" + std::to_string(i));
      at_sync[k] = "v" + std::to_string(i);
    }
    ASSERT_TRUE(rt.epochs().Sync().ok());
    // The failed epoch: updates, removals and inserts, then the "crash".
    for (int i = 0; i < 20000; i += 3) (*t)->put(U64Key(static_cast<uint64_t>(i) * 7919), "x");
    for (int i = 1; i < 20000; i += 7) (*t)->remove(U64Key(static_cast<uint64_t>(i) * 7919));
    for (int i = 0; i < 3000; ++i) (*t)->put(U64Key(static_cast<uint64_t>(i) * 7919 + 1), "new");
    ASSERT_EQ(std::system(("cp " + original + " " + copy).c_str()), 0);
    t->reset();
  }
  DurableRuntime rt(copy, 0);  // (size 0: reuses the copied file)
  ASSERT_TRUE(rt.Open().ok());
  auto t = DurableMasstree::Open(rt.pool(), rt.epochs(), rt.heap(), where);
  ASSERT_TRUE(t.ok()) << t.status();
  DurableMasstree& tree = **t;
  std::vector<Model> written(4);
  std::vector<std::thread> threads;
  for (int id = 0; id < 4; ++id) {
    threads.emplace_back([&, id] {
      std::mt19937_64 rng(40 + id);
      for (int i = 0; i < Scaled(6000); ++i) {
        const int n = static_cast<int>(rng() % 20000);
        const std::string k(U64Key(static_cast<uint64_t>(n) * 7919).view());
        if (n % 4 == id && rng() % 2 == 0) {  // this thread's keys: written
          const std::string v = "t" + std::to_string(id) + "." + std::to_string(i);
          tree.put(k, v);
          written[id][k] = v;
        } else if (n % 4 != id) {  // others' keys: only read, from at_sync or a writer
          std::optional<std::string> v = tree.get(k);
          ASSERT_TRUE(v.has_value()) << Printable(k);
          ASSERT_TRUE(*v == at_sync[k] || (*v)[0] == 't') << Printable(k) << " -> " << *v;
        }
        if (i % 500 == 0) {
          size_t n_scanned = 0;
          tree.scan(k, 50, [&](std::string_view, std::string_view) { return ++n_scanned, true; });
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  Model expect = at_sync;
  for (const Model& m : written) {
    for (const auto& [k, v] : m) expect[k] = v;
  }
  ExpectSameAsModel(tree, expect);
  EXPECT_GT(tree.durable_stats().perms_rolled_back, 0u);
  EXPECT_GT(tree.durable_stats().values_rolled_back, 0u);
}

// ---- Concurrency ------------------------------------------------------------------------------

// Each thread owns a key prefix; at the end the tree must equal the union of the thread models.
TYPED_TEST(MasstreeConcurrentTest, DisjointKeyRangesExact) {
  constexpr int kThreads = 4;
  auto& t = this->tree();
  std::vector<Model> models(kThreads);
  std::vector<std::thread> threads;
  for (int id = 0; id < kThreads; ++id) {
    threads.emplace_back([&, id] {
      KeyGen gen(100 + id);
      Model& m = models[id];
      const std::string own(1, static_cast<char>('A' + id));
      for (int i = 0; i < Scaled(30000); ++i) {
        // The thread byte first, then keys that share slices across threads' subtrees.
        const std::string k = own + gen.Next();
        const int op = static_cast<int>(gen.rng()() % 10);
        if (op < 5) {
          t.put(k, k + "#" + std::to_string(i));
          m[k] = k + "#" + std::to_string(i);
        } else if (op < 8) {
          EXPECT_EQ(t.remove(k), m.erase(k) > 0);
        } else {
          auto it = m.find(k);
          EXPECT_EQ(t.get(k), it == m.end() ? std::nullopt : std::optional(it->second));
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  Model all;
  for (const Model& m : models) all.insert(m.begin(), m.end());
  ExpectSameAsModel(t, all);
}

// Values name the key they were written for: "<key>|<thread>|<seq>".
std::string ValueFor(const std::string& key, int thread, int seq) {
  return key + "|" + std::to_string(thread) + "|" + std::to_string(seq);
}
bool ValueNamesKey(std::string_view value, std::string_view key) {
  return value.size() > key.size() && value.substr(0, key.size()) == key &&
         value[key.size()] == '|';
}

// Threads share one key set. Writes happen under a per-key lock that also updates the model,
// so the final tree must equal the model exactly; unlocked gets must only return values written
// for that key; unlocked scans must be strictly ascending with matching values.
template <class V>
void RunSharedKeysOracle(int threads_count, int ops_per_thread) {
  const int kThreads = threads_count;
  constexpr int kKeys = 600;
  KeyGen gen(5);
  std::vector<std::string> keys;
  std::set<std::string> unique;
  while (static_cast<int>(keys.size()) < kKeys) {
    std::string k = gen.Next();
    if (unique.insert(k).second) keys.push_back(k);
  }
  std::vector<std::mutex> locks(kKeys);
  std::vector<std::optional<std::string>> model(kKeys);
  V variant;
  auto& t = variant.tree();
  std::atomic<int64_t> scans_checked{0};
  std::vector<std::thread> threads;
  for (int id = 0; id < kThreads; ++id) {
    threads.emplace_back([&, id] {
      std::mt19937_64 rng(1000 + id);
      for (int i = 0; i < ops_per_thread; ++i) {
        const int ki = static_cast<int>(rng() % kKeys);
        const std::string& k = keys[ki];
        const int op = static_cast<int>(rng() % 100);
        if (op < 35) {
          std::lock_guard<std::mutex> lock(locks[ki]);
          const std::string v = ValueFor(k, id, i);
          EXPECT_EQ(t.put(k, v), model[ki] ? PutResult::kUpdated : PutResult::kInserted);
          model[ki] = v;
        } else if (op < 60) {
          std::lock_guard<std::mutex> lock(locks[ki]);
          EXPECT_EQ(t.remove(k), model[ki].has_value());
          model[ki].reset();
        } else if (op < 95) {
          std::optional<std::string> v = t.get(k);
          if (v) {
            EXPECT_TRUE(ValueNamesKey(*v, k)) << Printable(k) << " -> " << Printable(*v);
          }
        } else {
          std::string last;
          bool first = true;
          t.scan(keys[rng() % kKeys], 1 + rng() % 64,
                 [&](std::string_view sk, std::string_view sv) {
                   EXPECT_TRUE(first || std::string(sk) > last) << "scan order";
                   EXPECT_TRUE(ValueNamesKey(sv, sk)) << Printable(sk);
                   EXPECT_TRUE(unique.count(std::string(sk))) << "unknown key " << Printable(sk);
                   first = false;
                   last = std::string(sk);
                   return true;
                 });
          scans_checked.fetch_add(1, std::memory_order_relaxed);
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  Model expect;
  for (int i = 0; i < kKeys; ++i) {
    if (model[i]) expect[keys[i]] = *model[i];
  }
  ExpectSameAsModel(t, expect);
  EXPECT_GT(scans_checked.load(), 0);
}

TYPED_TEST(MasstreeConcurrentTest, SharedKeysMatchPerKeyLockOracle) {
  RunSharedKeysOracle<TypeParam>(4, Scaled(40000));
}

// More threads than cores: threads are preempted inside critical sections and mid-descent.
TYPED_TEST(MasstreeConcurrentTest, SharedKeysOversubscribed) {
  RunSharedKeysOracle<TypeParam>(8, Scaled(15000));
}

// Readers look up keys that were inserted before they started and are never removed, while
// writers insert and remove other keys around them (splits, new layers, leaf removal): every
// lookup must succeed, and every scan must visit every stable key in its range.
TYPED_TEST(MasstreeConcurrentTest, ReadersNeverMissStableKeysDuringSplits) {
  auto& t = this->tree();
  std::vector<std::string> stable;
  for (int i = 0; i < 2000; ++i) {
    // Even numbers stable; odd numbers churn. Mixed short integer keys and long shared ones.
    stable.push_back(std::string(U64Key(2 * i).view()));
    stable.push_back("long/shared/prefix/" + std::string(U64Key(2 * i).view()) + "/tail");
  }
  for (const auto& k : stable) t.put(k, "S" + k);
  std::sort(stable.begin(), stable.end());
  std::atomic<bool> stop{false};
  std::atomic<int> writers_done{0};
  std::vector<std::thread> threads;
  for (int w = 0; w < 2; ++w) {
    threads.emplace_back([&, w] {
      std::mt19937_64 rng(77 + w);
      for (int i = 0; i < Scaled(60000); ++i) {
        const uint64_t odd = 2 * (rng() % 2000) + 1;
        const std::string k = rng() % 2 ? std::string(U64Key(odd).view())
                                        : "long/shared/prefix/" + std::string(U64Key(odd).view()) +
                                              (rng() % 2 ? "/tail" : "/other/tail/longer");
        if (rng() % 3) {
          t.put(k, "C" + k);
        } else {
          t.remove(k);
        }
      }
      writers_done.fetch_add(1);
    });
  }
  std::atomic<int64_t> lookups{0}, scans{0};
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      std::mt19937_64 rng(500 + r);
      while (writers_done.load() < 2 && !stop.load()) {
        if (rng() % 16) {
          const std::string& k = stable[rng() % stable.size()];
          std::optional<std::string> v = t.get(k);
          ASSERT_TRUE(v.has_value()) << "lost stable key " << Printable(k);
          ASSERT_EQ(*v, "S" + k);
          lookups.fetch_add(1, std::memory_order_relaxed);
        } else {
          // Every stable key from a random start must appear, in order, among the visited keys.
          size_t next = rng() % stable.size();
          const size_t start = next;
          const size_t want = std::min<size_t>(200, stable.size() - start);
          t.scan(stable[start], SIZE_MAX, [&](std::string_view k, std::string_view) {
            if (next < start + want && k == stable[next]) ++next;
            EXPECT_LE(std::string(k), next < stable.size() ? stable[next] : std::string("\xff"))
                << "skipped stable key " << Printable(stable[next]);
            return next < start + want;
          });
          EXPECT_EQ(next, start + want);
          scans.fetch_add(1, std::memory_order_relaxed);
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_GT(lookups.load(), 0);
  ASSERT_TRUE(t.CheckInvariants().ok()) << t.CheckInvariants();
  for (const auto& k : stable) ASSERT_EQ(t.get(k), "S" + k);
}

// Sparse stable keys survive while writers repeatedly fill and empty the dense ranges between
// them, so border nodes are unlinked (and separators redirected) under concurrent readers.
TYPED_TEST(MasstreeConcurrentTest, SparseStableKeysSurviveLeafRemoval) {
  auto& t = this->tree();
  constexpr uint64_t kSpacing = 64;
  constexpr uint64_t kStable = 200;
  std::vector<std::string> stable;
  for (uint64_t i = 0; i < kStable; ++i) {
    stable.push_back(std::string(U64Key(i * kSpacing).view()));
    stable.push_back("deep/prefix/shared/" + std::string(U64Key(i * kSpacing).view()));
  }
  for (const auto& k : stable) t.put(k, k);
  std::sort(stable.begin(), stable.end());
  std::atomic<int> done{0};
  std::vector<std::thread> threads;
  for (int w = 0; w < 2; ++w) {
    threads.emplace_back([&, w] {
      std::mt19937_64 rng(4242 + w);
      for (int round = 0; round < Scaled(400); ++round) {
        const uint64_t block = rng() % (kStable / 4);  // four stable gaps per block
        const bool deep = rng() % 2;
        for (int pass = 0; pass < 2; ++pass) {
          for (uint64_t g = 4 * block; g < 4 * block + 4; ++g) {
            for (uint64_t j = 1; j < kSpacing; ++j) {
              const std::string num(U64Key(g * kSpacing + j).view());
              const std::string k = deep ? "deep/prefix/shared/" + num : num;
              if (pass == 0) {
                t.put(k, k);
              } else {
                t.remove(k);
              }
            }
          }
        }
      }
      done.fetch_add(1);
    });
  }
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      std::mt19937_64 rng(99 + r);
      while (done.load() < 2) {
        const std::string& k = stable[rng() % stable.size()];
        ASSERT_EQ(t.get(k), k) << "lost stable key " << Printable(k);
        if (rng() % 8 == 0) {
          size_t next = 0;
          t.scan("", SIZE_MAX, [&](std::string_view sk, std::string_view sv) {
            EXPECT_EQ(sk, sv);
            if (next < stable.size() && sk == stable[next]) ++next;
            return true;
          });
          EXPECT_EQ(next, stable.size()) << "a full scan skipped a stable key";
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  Model expect;
  for (const auto& k : stable) expect[k] = k;
  ExpectSameAsModel(t, expect);
}

// Writers fill and empty whole key ranges (leaves unlinked, layers collected) while scanners
// check order and lookups check values; the final contents equal the writers' models.
TYPED_TEST(MasstreeConcurrentTest, RangeChurnWithScans) {
  constexpr int kWriters = 2;
  auto& t = this->tree();
  std::vector<Model> models(kWriters);
  std::atomic<int> done{0};
  std::vector<std::thread> threads;
  for (int w = 0; w < kWriters; ++w) {
    threads.emplace_back([&, w] {
      std::mt19937_64 rng(900 + w);
      Model& m = models[w];
      for (int round = 0; round < Scaled(40); ++round) {
        const uint64_t base = (rng() % 8) * 1000;
        const bool deep = rng() % 2;
        for (uint64_t i = 0; i < 600; ++i) {
          std::string k = std::string(1, static_cast<char>('a' + w)) +
                          (deep ? "/deep/deep/deep/" : "") + std::string(U64Key(base + i).view());
          if (round % 2 == 0) {
            t.put(k, k);
            m[k] = k;
          } else {
            t.remove(k);
            m.erase(k);
          }
        }
      }
      done.fetch_add(1);
    });
  }
  threads.emplace_back([&] {
    std::mt19937_64 rng(3);
    while (done.load() < kWriters) {
      std::string last;
      bool first = true;
      const std::string from(1, static_cast<char>('a' + rng() % kWriters));
      t.scan(from, 500, [&](std::string_view k, std::string_view v) {
        EXPECT_TRUE(first || std::string(k) > last);
        EXPECT_EQ(k, v);
        first = false;
        last = std::string(k);
        return true;
      });
    }
  });
  for (auto& th : threads) th.join();
  Model all;
  for (const Model& m : models) all.insert(m.begin(), m.end());
  ExpectSameAsModel(t, all);
}

// ---- Batch ------------------------------------------------------------------------------------

// Every operation of a Batch against the model, interleaved with the tree's own operations.
TYPED_TEST(MasstreeTest, BatchMatchesTheModel) {
  auto& t = this->tree();
  using Tree = std::remove_reference_t<decltype(t)>;
  Model model;
  KeyGen keys(21);
  std::mt19937_64& rng = keys.rng();
  for (int round = 0; round < 20; ++round) {
    typename Tree::Batch b(t);
    for (int i = 0; i < Scaled(300); ++i) {
      const std::string k = keys.Next();
      const std::string v = std::to_string(rng() % 100000);
      const auto it = model.find(k);
      const bool existed = it != model.end();
      switch (rng() % 8) {
        case 0: {
          std::string prev;
          ASSERT_EQ(b.put(k, v, &prev), existed ? PutResult::kUpdated : PutResult::kInserted);
          if (existed) {
            EXPECT_EQ(prev, it->second);
          }
          model[k] = v;
          break;
        }
        case 1:
          ASSERT_EQ(b.insert_if_absent(k, v),
                    existed ? InsertResult::kExists : InsertResult::kInserted);
          model.emplace(k, v);
          break;
        case 2:
          ASSERT_EQ(b.remove(k), existed);
          model.erase(k);
          break;
        case 3: {
          const std::optional<std::string> got = b.get(k);
          ASSERT_EQ(got.has_value(), existed);
          if (existed) {
            EXPECT_EQ(*got, it->second);
          }
          break;
        }
        case 4: {
          char buf[4];
          const std::optional<size_t> n = b.get(k, std::span<char>(buf));
          ASSERT_EQ(n.has_value(), existed);
          if (existed) {
            ASSERT_EQ(*n, it->second.size());
            EXPECT_EQ(std::string_view(buf, std::min<size_t>(*n, 4)),
                      std::string_view(it->second).substr(0, 4));
          }
          break;
        }
        case 5: {
          std::string seen;
          ASSERT_EQ(b.read(k, [&](std::string_view val) { seen = val; }), existed);
          if (existed) {
            EXPECT_EQ(seen, it->second);
          }
          break;
        }
        case 6: {
          auto m = model.lower_bound(k);
          b.scan(k, 5, [&](std::string_view sk, std::string_view sv) {
            EXPECT_NE(m, model.end());
            if (m == model.end()) return false;
            EXPECT_EQ(sk, m->first);
            EXPECT_EQ(sv, m->second);
            ++m;
            return true;
          });
          break;
        }
        default:
          ASSERT_EQ(t.put(k, v), existed ? PutResult::kUpdated : PutResult::kInserted);
          model[k] = v;
          break;
      }
      if (i % 50 == 0) b.quiesce();
    }
  }
  ExpectSameAsModel(t, model);
}

// A thread that holds a Batch does not hold up the transient tree's reclamation: each of its
// operations re-announces the epoch when it has moved on.
TEST(TransientMasstreeTest, BatchDoesNotHoldUpReclamation) {
  Masstree t;
  ASSERT_EQ(t.put("k", "v"), PutResult::kInserted);
  ds_internal::Ebr& ebr = ds_internal::Ebr::Global();
  ebr_freed = 0;
  std::atomic<int> requested{0}, done{0};
  std::thread reader([&] {
    Masstree::Batch b(t);
    for (int op = 1; op <= 20; ++op) {
      while (requested.load() < op) std::this_thread::yield();
      EXPECT_EQ(b.get("k"), "v");
      done = op;
    }
    while (requested.load() <= 20) std::this_thread::yield();  // still inside the batch
  });
  requested = 1;
  while (done.load() < 1) std::this_thread::yield();
  int object = 0;
  ebr.Retire(&object, &CountFree, sizeof(object));
  for (int i = 0; i < 5; ++i) ebr.Collect();
  EXPECT_EQ(ebr_freed.load(), 0) << "freed under a guard that could see it";
  int ops = 1;
  while (ebr_freed.load() == 0 && ops < 20) {
    requested = ++ops;
    while (done.load() < ops) std::this_thread::yield();
    ebr.Collect();
  }
  EXPECT_EQ(ebr_freed.load(), 1) << "the batch held up reclamation for " << ops << " operations";
  EXPECT_LE(ops, 4);
  requested = 21;
  reader.join();
}

// A boundary that starts while a thread holds a Batch waits for at most that thread's next
// operation: the operation sees the closing epoch, ends the batch's guard and runs after the
// boundary in the next epoch.
TEST(DurableMasstreeTest, BatchLetsTheBoundaryThroughAtItsNextOperation) {
  DurableRuntime rt(TempPoolPath("batchboundary"));
  ASSERT_TRUE(rt.Open().ok());  // no clock: only the Advance below
  auto t = DurableMasstree::Create(rt.pool(), rt.epochs(), rt.heap());
  ASSERT_TRUE(t.ok());
  ASSERT_EQ((*t)->put("k", "v"), PutResult::kInserted);
  ASSERT_TRUE(rt.epochs().Sync().ok());
  epoch::Manager& m = rt.epochs();
  std::atomic<int> stage{0};
  std::atomic<uint64_t> first_epoch{0}, second_epoch{0};
  std::thread worker([&] {
    DurableMasstree::Batch b(**t);
    EXPECT_EQ(b.put("k", "w"), PutResult::kUpdated);
    first_epoch = m.LocalSlot().epoch.load();
    stage = 1;
    while (stage.load() != 2) std::this_thread::yield();  // between two operations
    EXPECT_EQ(b.get("k"), "w");
    second_epoch = m.LocalSlot().epoch.load();
    stage = 3;
    while (stage.load() != 4) std::this_thread::yield();  // still inside the batch
  });
  while (stage.load() != 1) std::this_thread::yield();
  const uint64_t e = m.current();
  EXPECT_EQ(first_epoch.load(), e);
  absl::Status advanced;
  std::thread advancer([&] { advanced = m.Advance(); });
  // The advance has closed e and waits for the batch's guard.
  while (m.current() == e) std::this_thread::yield();
  EXPECT_EQ(m.completed() + 2, m.current()) << "the boundary waits for the batch";
  stage = 2;  // one operation
  advancer.join();
  EXPECT_TRUE(advanced.ok()) << advanced;
  while (stage.load() != 3) std::this_thread::yield();
  EXPECT_EQ(second_epoch.load(), e + 1) << "the operation ran after the boundary";
  EXPECT_EQ(m.completed(), e);
  // The batch keeps working across more boundaries (each waits for one of its operations).
  stage = 4;
  worker.join();
  EXPECT_FALSE(rt.pool().failed());
}

// Writes of a Batch that find the undo log full leave its guard and wait for the boundary, as
// the tree's own writes do (the tree's writes inside a caller's guard report kNoMemory).
TEST(DurableMasstreeTest, BatchWritesWaitForAFullUndoLog) {
  DurableRuntime rt(TempPoolPath("batchfulllog"), 64 << 20, 256 << 10);
  ASSERT_TRUE(rt.Open().ok());
  auto t = DurableMasstree::Create(rt.pool(), rt.epochs(), rt.heap());
  ASSERT_TRUE(t.ok());
  Model model;
  std::mt19937_64 rng(6);
  {
    DurableMasstree::Batch b(**t);
    for (int i = 0; i < 20000; ++i) {
      const std::string k(U64Key(rng()).view());
      ASSERT_EQ(b.put(k, "a"), PutResult::kInserted);
      model[k] = "a";
    }
  }
  ASSERT_TRUE(rt.epochs().Sync().ok());
  const uint64_t advances_before = rt.epochs().stats().advances;
  {
    DurableMasstree::Batch b(**t);
    int i = 0;
    for (auto it = model.begin(); it != model.end(); ++i) {
      if (i % 2 == 0) {  // removes and inserts: splits and merges of older nodes copy them
        ASSERT_TRUE(b.remove(it->first)) << i;
        it = model.erase(it);
      } else {
        const std::string k(U64Key(rng()).view());
        ASSERT_NE(b.insert_if_absent(k, "b"), InsertResult::kNoMemory) << i;
        model.emplace(k, "b");
        ++it;
      }
    }
  }
  EXPECT_GT(rt.epochs().stats().advances, advances_before) << "the log filled and was waited for";
  ExpectSameAsModel(**t, model);
}

}  // namespace
}  // namespace pmrt::ds
