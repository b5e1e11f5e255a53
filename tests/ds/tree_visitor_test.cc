// ds::TreeVisitor: CheckInvariants shows every node and value object once, in both trees.
#include <set>
#include <string>

#include "absl/strings/str_cat.h"
#include "ds/durable_masstree.h"
#include "ds/masstree.h"
#include "gtest/gtest.h"
#include "tests/util/test_util.h"

namespace pmrt::ds {
namespace {

class Recorder : public TreeVisitor {
 public:
  absl::Status Node(const void* node, size_t bytes, bool leaf, int layer) override {
    EXPECT_TRUE(seen.insert(node).second) << "node reached twice";
    EXPECT_GT(bytes, 0u);
    (leaf ? leaves : interiors)++;
    max_layer = std::max(max_layer, layer);
    return absl::OkStatus();
  }
  absl::Status Value(const void* value, size_t bytes, const void* leaf, int slot) override {
    EXPECT_TRUE(seen.insert(value).second) << "value reached twice";
    EXPECT_TRUE(seen.contains(leaf)) << "a value's border node is reached before it";
    EXPECT_GE(bytes, 8u);
    EXPECT_GE(slot, 0);
    ++values;
    if (stop_after > 0 && values == stop_after) return absl::AbortedError("enough");
    return absl::OkStatus();
  }
  std::set<const void*> seen;
  size_t leaves = 0, interiors = 0, values = 0, stop_after = 0;
  int max_layer = 0;
};

template <class Tree>
void Fill(Tree& t) {
  for (int i = 0; i < 2000; ++i) {
    ASSERT_NE(t.put(absl::StrCat("k", i), absl::StrCat("v", i)), PutResult::kNoMemory);
    // Keys longer than a slice, sharing it: a deeper layer.
    ASSERT_NE(t.put(absl::StrCat("a-long-shared-prefix", i), "x"), PutResult::kNoMemory);
  }
}

TEST(TreeVisitorTest, TransientTreeShowsEveryObjectOnce) {
  Masstree t;
  Fill(t);
  Recorder r;
  TreeShape shape;
  ASSERT_OK(t.CheckInvariants(&shape, &r));
  EXPECT_EQ(r.values, shape.keys);
  EXPECT_EQ(r.values, 4000u);
  EXPECT_EQ(r.leaves, shape.leaves);
  EXPECT_EQ(r.interiors, shape.interiors);
  EXPECT_GE(r.max_layer, 1);
}

TEST(TreeVisitorTest, VisitorErrorStopsTheCheck) {
  Masstree t;
  Fill(t);
  Recorder r;
  r.stop_after = 10;
  EXPECT_THAT(t.CheckInvariants(nullptr, &r),
              testing::StatusIs(absl::StatusCode::kAborted, "enough"));
  EXPECT_EQ(r.values, 10u);
}

TEST(TreeVisitorTest, DurableTreeObjectsAreLiveHeapBlocks) {
  testing::TempDir dir;
  auto pool = Pool::Create(dir.File("t.pool"), 32 << 20, "visit");
  ASSERT_OK(pool);
  auto epochs = epoch::Manager::Open(**pool, {.interval = std::chrono::milliseconds(0)});
  ASSERT_OK(epochs);
  auto heap = alloc::Heap::Open(**pool, **epochs);
  ASSERT_OK(heap);
  auto tree = DurableMasstree::Create(**pool, **epochs, **heap);
  ASSERT_OK(tree);
  Fill(**tree);
  Recorder r;
  TreeShape shape;
  ASSERT_OK((*tree)->CheckInvariants(&shape, &r));
  EXPECT_EQ(r.values, 4000u);
  size_t live_blocks = 0;
  ASSERT_OK((*heap)->Walk([&](const alloc::BlockInfo&) { ++live_blocks; }));
  EXPECT_EQ(live_blocks, r.seen.size() + 1) << "everything but the descriptor is visited";
  for (const void* p : r.seen) EXPECT_GT((*heap)->UsableSize(p), 0u);
}

}  // namespace
}  // namespace pmrt::ds
