// Pool growth (Pool::Grow, PoolOptions::grow_by) with the heap on top: a file pool grows in
// place (its base address and every block stay), the heap serves the new space (any size, a
// large extent included), the pool reopens at its new size with every block; automatic growth
// serves allocations that a full heap cannot, from the heap, from transactions and from an
// index; misuse is refused and changes nothing; an interrupted growth leaves the old size and
// the next growth reuses the file's tail. The crash simulator's growth suite is in
// alloc_crash_test.cc (AllocCrashTest.GrowthIsCrashAtomic), the pool's own persistence order
// in pool_test.cc, a SIGKILL loop in alloc_kill_test.cc.
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <set>
#include <string>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "alloc/allocator.h"
#include "alloc/size_class.h"
#include "epoch/epoch.h"
#include "epoch/pool.h"
#include "gtest/gtest.h"
#include "runtime/runtime.h"
#include "tests/alloc/heap_runtime.h"
#include "tests/util/test_util.h"
#include "txn/txn.h"

namespace pmrt::alloc {
namespace {

using pmrt::testing::StatusIs;
using test_runtime::HeapRuntime;
using test_runtime::OpenHeapLayers;
constexpr std::string_view kLayout = "grow-test";

uint64_t FileSize(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0 ? static_cast<uint64_t>(st.st_size) : 0;
}

std::unique_ptr<HeapRuntime> OpenLayers(absl::StatusOr<std::unique_ptr<Pool>> pool) {
  EXPECT_OK(pool);
  if (!pool.ok()) return nullptr;
  auto r = std::make_unique<HeapRuntime>();
  const absl::Status st = OpenHeapLayers(std::move(*pool), *r);
  EXPECT_OK(st);
  return st.ok() ? std::move(r) : nullptr;
}

// What a block at pool offset `off` holds in its first and last words.
uint64_t Stamp(uint64_t off) { return off * 0x9E3779B97F4A7C15ull | 1; }

void* AllocateStamped(Heap& heap, size_t size, std::map<uint64_t, uint64_t>& live) {
  void* p = heap.Allocate(size);
  if (p == nullptr) return nullptr;
  const uint64_t off = heap.pool().offset_of(p);
  const size_t usable = heap.UsableSize(p);
  const uint64_t stamp = Stamp(off);
  std::memcpy(p, &stamp, 8);
  std::memcpy(static_cast<uint8_t*>(p) + usable - 8, &stamp, 8);
  live[off] = usable;
  return p;
}

// Every block of `live` is live in `heap` with its stamps, and no other block is.
void ExpectBlocks(const Heap& heap, const std::map<uint64_t, uint64_t>& live) {
  std::map<uint64_t, uint64_t> got;
  ASSERT_OK(heap.Walk([&](const BlockInfo& b) { got[b.offset] = b.size; }));
  EXPECT_EQ(got.size(), live.size());
  EXPECT_TRUE(got == live) << "the heap's blocks differ from the ones allocated";
  for (const auto& [off, size] : live) {
    uint64_t first, last;
    std::memcpy(&first, heap.pool().at(off), 8);
    std::memcpy(&last, static_cast<const uint8_t*>(heap.pool().at(off)) + size - 8, 8);
    ASSERT_EQ(first, Stamp(off)) << "block at " << off;
    ASSERT_EQ(last, Stamp(off)) << "block at " << off;
  }
  EXPECT_OK(heap.Check());
}

class GrowTest : public ::testing::Test {
 protected:
  pmrt::testing::TempDir dir_;
  std::string path_ = dir_.File("grow.pool");
};

TEST_F(GrowTest, AFilePoolGrowsInPlaceKeepsItsBlocksAndReopensAtTheNewSize) {
  constexpr size_t kSize = 4 << 20, kGrown = 12 << 20;
  std::map<uint64_t, uint64_t> live;
  {
    auto r = OpenLayers(Pool::Create(path_, kSize, kLayout));
    ASSERT_NE(r, nullptr);
    while (AllocateStamped(*r->heap, 1000, live) != nullptr) {
    }
    EXPECT_EQ(Heap::LastError(), AllocError::kPoolFullCannotWait) << "epochs advanced by hand";
    EXPECT_EQ(r->heap->Allocate(5 << 20), nullptr);
    uint8_t* const base = r->pool->base();
    const uint64_t capacity = r->heap->capacity();

    ASSERT_OK(r->pool->Grow(kGrown));
    EXPECT_EQ(r->pool->base(), base) << "the mapping moved";
    EXPECT_EQ(r->pool->size(), kGrown);
    EXPECT_EQ(FileSize(path_), kGrown);
    EXPECT_EQ(r->pool->growths(), 1u);
    EXPECT_GT(r->heap->capacity(), capacity + (7 << 20));
    const HeapStats st = r->heap->Stats();
    EXPECT_EQ(st.segments, 2u);
    EXPECT_EQ(st.heap_bytes, r->heap->capacity());
    EXPECT_GE(st.largest_free_extent, 7u << 20);
    ExpectBlocks(*r->heap, live);

    // The new space serves small blocks and an extent larger than the whole old pool.
    ASSERT_NE(AllocateStamped(*r->heap, 5 << 20, live), nullptr);
    for (int i = 0; i < 100; ++i) ASSERT_NE(AllocateStamped(*r->heap, 48 + i, live), nullptr);
    ExpectBlocks(*r->heap, live);
    ASSERT_OK(r->epochs->Advance());
    ASSERT_OK(r->epochs->Advance());
  }
  auto r = OpenLayers(Pool::Open(path_, kLayout));
  ASSERT_NE(r, nullptr);
  EXPECT_EQ(r->pool->size(), kGrown);
  EXPECT_TRUE(r->pool->was_clean_shutdown());
  EXPECT_EQ(r->heap->Stats().segments, 2u);
  ExpectBlocks(*r->heap, live);
  // And it grows again, a second segment after the first.
  ASSERT_OK(r->pool->Grow(kGrown + (2 << 20)));
  EXPECT_EQ(r->heap->Stats().segments, 3u);
  ASSERT_NE(AllocateStamped(*r->heap, 1 << 20, live), nullptr);
  ExpectBlocks(*r->heap, live);
}

TEST_F(GrowTest, AutomaticGrowthServesEveryAllocation) {
  PoolOptions po;
  po.grow_by = 1 << 20;
  std::map<uint64_t, uint64_t> live;
  uint64_t rng = 42, bytes = 0;
  {
    auto r = OpenLayers(Pool::Create(path_, 2 << 20, kLayout, po));
    ASSERT_NE(r, nullptr);
    // Random sizes from 16 B to 1 MiB, a quarter of them freed again: 24 MiB live in the end.
    while (bytes < (24 << 20)) {
      const uint64_t x = pmrt::testing::Next(rng);
      const size_t size = x % 8 == 0 ? 16 + x % (1 << 20) : 16 + x % 2000;
      void* p = AllocateStamped(*r->heap, size, live);
      ASSERT_NE(p, nullptr) << "allocation of " << size << " bytes with " << bytes
                            << " live: " << AllocErrorName(Heap::LastError());
      bytes += size;
      if (x % 4 == 0) {
        ASSERT_OK(r->heap->FreeUnshared(p));
        live.erase(r->pool->offset_of(p));
      }
      if (x % 64 == 0) {
        ASSERT_OK(r->epochs->Advance());
      }
    }
    EXPECT_GE(r->pool->growths(), 10u);
    EXPECT_EQ(FileSize(path_), r->pool->size());
    const HeapStats st = r->heap->Stats();
    uint64_t used = 0;
    for (const auto& [off, size] : live) used += size;
    EXPECT_EQ(st.used_bytes, used);
    EXPECT_EQ(st.free_bytes, st.heap_bytes - used);
    EXPECT_EQ(st.segments, 1 + r->pool->growths());
    ExpectBlocks(*r->heap, live);
    ASSERT_OK(r->epochs->Advance());
    ASSERT_OK(r->epochs->Advance());
  }
  auto r = OpenLayers(Pool::Open(path_, kLayout));
  ASSERT_NE(r, nullptr);
  ExpectBlocks(*r->heap, live);
}

TEST_F(GrowTest, MisuseIsRefusedNamingThePoolAndChangesNothing) {
  using C = absl::StatusCode;
  constexpr size_t kSize = 2 << 20;
  PoolOptions po;
  po.max_size = 4 << 20;
  {
    // Without a heap there is nothing to lay the new space out.
    auto pool = Pool::Create(path_, kSize, kLayout, po);
    ASSERT_OK(pool);
    EXPECT_THAT((*pool)->Grow(3 << 20), StatusIs(C::kFailedPrecondition, "alloc::Heap"));
    EXPECT_EQ((*pool)->size(), kSize);
  }
  EXPECT_EQ(FileSize(path_), kSize);
  auto r = OpenLayers(Pool::Open(path_, kLayout, po));
  ASSERT_NE(r, nullptr);
  EXPECT_EQ(r->pool->max_size(), 4u << 20);
  EXPECT_THAT(r->pool->Grow(kSize - 4096), StatusIs(C::kInvalidArgument, path_));
  EXPECT_THAT(r->pool->Grow(kSize + 4096), StatusIs(C::kInvalidArgument, "at least"));
  EXPECT_THAT(r->pool->Grow(8 << 20), StatusIs(C::kResourceExhausted, "max_size"));
  EXPECT_EQ(r->pool->size(), kSize);
  EXPECT_EQ(FileSize(path_), kSize);
  EXPECT_EQ(r->pool->growths(), 0u);
  EXPECT_EQ(r->heap->Stats().segments, 1u);
  EXPECT_OK(r->heap->Check());

  // Automatic growth past max_size: the allocation fails and says why.
  r->pool->set_grow_by(1 << 20);
  std::map<uint64_t, uint64_t> live;
  auto big = r->heap->TryAllocate(3 << 20);
  EXPECT_THAT(big, StatusIs(C::kResourceExhausted, "growing the pool failed"));
  EXPECT_THAT(big, StatusIs(C::kResourceExhausted, "max_size"));
  // ... while what fits still grows the pool.
  ASSERT_NE(AllocateStamped(*r->heap, 1792 << 10, live), nullptr)
      << r->heap->TryAllocate(1792 << 10).status();
  EXPECT_EQ(r->pool->growths(), 1u);
  ExpectBlocks(*r->heap, live);
}

TEST_F(GrowTest, AnInterruptedGrowthLeavesTheOldSizeAndTheNextGrowthReusesTheTail) {
  constexpr size_t kSize = 2 << 20;
  std::map<uint64_t, uint64_t> live;
  {
    auto r = OpenLayers(Pool::Create(path_, kSize, kLayout));
    ASSERT_NE(r, nullptr);
    for (int i = 0; i < 50; ++i) ASSERT_NE(AllocateStamped(*r->heap, 4000, live), nullptr);
    ASSERT_OK(r->epochs->Advance());
    ASSERT_OK(r->epochs->Advance());
  }
  // A growth that extended the file and wrote into it, but never committed its size: the tail
  // holds anything (here a pattern, and a segment header-sized run of 0xFF at the heap's end).
  ASSERT_EQ(truncate(path_.c_str(), kSize + (1 << 20)), 0);
  {
    std::string junk(1 << 20, '\x5A');
    pmrt::testing::WriteFileAt(path_, kSize, junk);
    pmrt::testing::WriteFileAt(path_, kSize - 4096, std::string(4096, '\xFF'));
  }
  auto r = OpenLayers(Pool::Open(path_, kLayout));
  ASSERT_NE(r, nullptr);
  EXPECT_EQ(r->pool->size(), kSize);
  ExpectBlocks(*r->heap, live);
  ASSERT_OK(r->pool->Grow(kSize + (4 << 20)));
  EXPECT_EQ(FileSize(path_), kSize + (4 << 20));
  ASSERT_NE(AllocateStamped(*r->heap, 3 << 20, live), nullptr);
  ExpectBlocks(*r->heap, live);
  ASSERT_OK(r->epochs->Advance());
  ASSERT_OK(r->epochs->Advance());
  r.reset();
  r = OpenLayers(Pool::Open(path_, kLayout));
  ASSERT_NE(r, nullptr);
  ExpectBlocks(*r->heap, live);
}

// Fill to full on every file backend, small pools (8 and 32 MiB): random sizes from 16 B to
// 1 MiB, a fifth of them freed again, allocations inside transactions too, the epochs on the
// background advancer; until an allocation outside any guard fails (after its wait for the
// frees). Then: Check() passes, the stats add up (used = the usable bytes of the blocks held,
// free = heap - used), and the pool serves a final allocation of its largest free run and of
// every size class whose chunks have room, up to the fragmentation the stats report. Then the
// same pool, reopened, grows and serves more.
class FillTest : public GrowTest,
                 public ::testing::WithParamInterface<std::tuple<BackendKind, size_t>> {};

// Every block of `stamped` is live with its stamps, and so is every block of `other`; the
// heap's stats add up with its walk.
void ExpectHeld(const Heap& heap, const std::map<uint64_t, uint64_t>& stamped,
                const std::set<uint64_t>& other) {
  std::map<uint64_t, uint64_t> got;
  ASSERT_OK(heap.Walk([&](const BlockInfo& b) { got[b.offset] = b.size; }));
  for (const auto& [off, size] : stamped) {
    ASSERT_EQ(got.count(off), 1u) << "block at " << off << " is gone";
    ASSERT_EQ(got[off], size);
    uint64_t first, last;
    std::memcpy(&first, heap.pool().at(off), 8);
    std::memcpy(&last, static_cast<const uint8_t*>(heap.pool().at(off)) + size - 8, 8);
    ASSERT_EQ(first, Stamp(off)) << "block at " << off;
    ASSERT_EQ(last, Stamp(off)) << "block at " << off;
  }
  for (uint64_t off : other) ASSERT_EQ(got.count(off), 1u) << "block at " << off << " is gone";
  const HeapStats st = heap.Stats();
  uint64_t used = 0;
  for (const auto& [off, size] : got) used += size;
  EXPECT_EQ(st.used_bytes, used);
  EXPECT_EQ(st.live_blocks, got.size());
  EXPECT_EQ(st.free_bytes, st.heap_bytes - st.used_bytes);
  EXPECT_EQ(st.free_bytes, st.free_chunks * 65536 + st.free_in_small_chunks);
  EXPECT_OK(heap.Check());
}

TEST_P(FillTest, AFullPoolIsConsistentAndServesWhatItsFreeBytesAllow) {
  const auto [backend, size] = GetParam();
  RuntimeOptions o;
  o.create_size = size;
  o.pool.backend = backend;
  std::map<uint64_t, uint64_t> live;  // stamped blocks
  std::set<uint64_t> txn_blocks;      // allocated in transactions
  {
    auto rt = Runtime::Open(path_, o);
    ASSERT_OK(rt);
    Heap& heap = (*rt)->heap();
    uint64_t rng = size + static_cast<uint64_t>(backend);
    for (int i = 0;; ++i) {
      ASSERT_LT(i, 10000000) << "never full";
      const uint64_t x = pmrt::testing::Next(rng);
      const size_t bytes = x % 16 == 0 ? 16 + x % (1 << 20) : 16 + x % 4000;
      if (x % 5 == 1) {  // in a transaction (its record must fit a log block: small ones)
        uint8_t* p = nullptr;
        absl::Status st = txn::Run([&]() -> absl::Status {
          p = alloc::pnew_array<uint8_t>(std::min<size_t>(bytes, 2000));
          return p != nullptr ? absl::OkStatus() : absl::ResourceExhaustedError("full");
        });
        if (st.ok()) txn_blocks.insert(heap.pool().offset_of(p));
        continue;
      }
      void* p = AllocateStamped(heap, bytes, live);
      if (p == nullptr) break;  // full, after waiting for the frees
      if (x % 5 == 3) {
        ASSERT_OK(heap.FreeUnshared(p));
        live.erase(heap.pool().offset_of(p));
      }
    }
    ASSERT_GT(live.size(), 100u);
    ASSERT_OK((*rt)->sync());
    ASSERT_OK((*rt)->sync());
    ExpectHeld(heap, live, txn_blocks);
    const HeapStats st = heap.Stats();
    // What the free bytes allow: the largest free run, whole ...
    if (st.largest_free_extent > 0) {
      EXPECT_NE(AllocateStamped(heap, st.largest_free_extent, live), nullptr)
          << st.largest_free_extent << " bytes: " << AllocErrorName(Heap::LastError());
    }
    // ... and a block of each class whose chunks are not full: those free bytes inside its
    // chunks (the fragmentation the stats report) serve that class.
    for (int c = 0; c < SizeClasses::kCount; ++c) {
      const uint64_t held = st.live_per_class[c];
      if (held == 0 || held % SizeClasses::BlocksPerChunk(c) == 0) continue;
      EXPECT_NE(AllocateStamped(heap, SizeClasses::Size(c), live), nullptr)
          << "class of " << SizeClasses::Size(c) << " bytes";
    }
    ExpectHeld(heap, live, txn_blocks);
    ASSERT_OK((*rt)->Close());
  }
  // Reopened with growth: everything is there, and the full pool grows and serves more.
  o.create_size = 0;
  o.pool.grow_by = 4 << 20;
  auto rt = Runtime::Open(path_, o);
  ASSERT_OK(rt);
  ExpectHeld((*rt)->heap(), live, txn_blocks);
  ASSERT_NE(AllocateStamped((*rt)->heap(), 3 << 20, live), nullptr);
  EXPECT_GE((*rt)->pool().growths(), 1u);
  ExpectHeld((*rt)->heap(), live, txn_blocks);
}

INSTANTIATE_TEST_SUITE_P(Backends, FillTest,
                         ::testing::Combine(::testing::Values(BackendKind::kMsync,
                                                              BackendKind::kPmem,
                                                              BackendKind::kEadr),
                                            ::testing::Values(size_t{8} << 20, size_t{32} << 20)),
                         [](const auto& tp) {
                           return std::string(BackendName(std::get<0>(tp.param))) +
                                  std::to_string(std::get<1>(tp.param) >> 20) + "MiB";
                         });

// Transactions and an index over a pool that starts small: every write lands, some of them in
// grown space (the transaction layer's word index covers every word the pool can grow to), and
// all of it is there after a reopen.
TEST_F(GrowTest, TransactionsAndAnIndexRunInAPoolThatGrows) {
  RuntimeOptions o;
  o.create_size = 8 << 20;
  o.pool.grow_by = 4 << 20;
  const std::string value(2000, 'v');
  {
    auto rt = Runtime::Open(path_, o);
    ASSERT_OK(rt);
    Index* kv = *(*rt)->index("kv");
    for (int i = 0; i < 20000; ++i) {
      ASSERT_OK(txn::Run([&]() -> absl::Status {
        auto r = kv->put(absl::StrCat("key", i), value);
        return r.ok() ? absl::OkStatus() : r.status();
      })) << "transaction "
          << i;
    }
    EXPECT_GE((*rt)->pool().growths(), 5u);
    ASSERT_OK((*rt)->sync());
    EXPECT_OK((*rt)->heap().Check());
    ASSERT_OK((*rt)->Close());
  }
  auto rt = Runtime::Open(path_, RuntimeOptions{});
  ASSERT_OK(rt);
  EXPECT_GT((*rt)->pool().size(), 40u << 20);
  Index* kv = *(*rt)->find_index("kv");
  EXPECT_EQ(kv->size(), 20000u);
  for (int i = 0; i < 20000; i += 997) EXPECT_EQ(kv->get(absl::StrCat("key", i)), value) << i;
  EXPECT_OK((*rt)->heap().Check());
}

}  // namespace
}  // namespace pmrt::alloc
