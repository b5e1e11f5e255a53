// API misuse is an error naming the pool, never a hang or a damaged pool: a second epoch
// manager, heap or transaction engine on one pool; Sync, Advance or Reclaim while the calling
// thread holds an epoch guard (its own guard would keep the boundary waiting forever); the
// engine opened after something allocated; layers torn down in the wrong order.
#include <string>

#include "epoch/epoch.h"
#include "gtest/gtest.h"
#include "tests/txn/txn_runtime.h"
#include "tests/util/test_util.h"
#include "txn/txn.h"

namespace pmrt::txn {
namespace {

constexpr size_t kPoolSize = 8 << 20;

struct Root {
  uint64_t word;
};

class MisuseTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto rt = testing::OpenMemory(buffer_.data(), kPoolSize, PoolOptions{}, Options{},
                                  /*create=*/true);
    ASSERT_OK(rt);
    rt_ = std::move(*rt);
  }

  void ExpectPrecondition(const absl::Status& st, const std::string& what) {
    EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition) << st;
    EXPECT_NE(st.message().find(rt_.pool->path()), std::string::npos) << st;
    EXPECT_NE(st.message().find(what), std::string::npos) << st;
  }

  testing::Buffer buffer_{kPoolSize};
  testing::Runtime rt_;
};

TEST_F(MisuseTest, ASecondLayerOnOnePoolIsRefused) {
  ExpectPrecondition(epoch::Manager::Open(*rt_.pool, testing::ManualEpochs()).status(),
                     "an epoch manager is already open");
  ExpectPrecondition(alloc::Heap::Open(*rt_.pool, *rt_.epochs).status(), "a heap is already open");
  ExpectPrecondition(Engine::Open(*rt_.pool, *rt_.epochs, *rt_.heap).status(),
                     "a transaction engine is already open");
  // The first ones are unharmed.
  Root* root = *rt_.pool->root<Root>();
  ASSERT_OK(txn::Run([&] { return txn::write(&root->word, uint64_t{5}); }));
  EXPECT_OK(rt_.epochs->Sync());
  EXPECT_EQ(root->word, 5u);
  // Once closed, the layer opens again.
  rt_.engine.reset();
  auto again = Engine::Open(*rt_.pool, *rt_.epochs, *rt_.heap);
  ASSERT_OK(again);
  rt_.engine = std::move(*again);
}

TEST_F(MisuseTest, SyncInsideAGuardOrATransactionIsAnError) {
  {
    epoch::Guard g(*rt_.epochs);
    ExpectPrecondition(rt_.epochs->Sync(), "holds an epoch guard");
    ExpectPrecondition(rt_.epochs->Advance(), "holds an epoch guard");
  }
  Root* root = *rt_.pool->root<Root>();
  ASSERT_OK(begin());
  ASSERT_OK(add(&root->word, 8));
  root->word = 7;
  ExpectPrecondition(rt_.epochs->Sync(), "holds an epoch guard");
  ExpectPrecondition(rt_.engine->Reclaim(), "inside a transaction");
  ASSERT_OK(commit());
  // Outside, both work, and the pool is healthy.
  EXPECT_OK(rt_.epochs->Sync());
  EXPECT_OK(rt_.engine->Reclaim());
  EXPECT_TRUE(rt_.pool->health().ok());
  EXPECT_EQ(root->word, 7u);
}

TEST_F(MisuseTest, TheEngineOpensOnlyBeforeAnythingAllocates) {
  Root* root = *rt_.pool->root<Root>();
  ASSERT_OK(txn::Run([&] { return txn::write(&root->word, uint64_t{9}); }));
  // A crash image (every store kept), opened without the engine: an allocation, then the
  // engine, whose recovery could re-mark that very block, is refused.
  testing::Buffer image(kPoolSize);
  image.CopyFrom(buffer_.data());
  auto pool = Pool::OpenInMemory(image.data(), kPoolSize, "txn-test", PoolOptions{}, "image");
  ASSERT_OK(pool);
  alloc::test_runtime::HeapRuntime layers;
  ASSERT_OK(alloc::test_runtime::OpenHeapLayers(std::move(*pool), layers));
  {
    epoch::Guard g(*layers.epochs);
    ASSERT_NE(layers.heap->Allocate(64), nullptr);
  }
  auto e = Engine::Open(*layers.pool, *layers.epochs, *layers.heap);
  EXPECT_EQ(e.status().code(), absl::StatusCode::kFailedPrecondition) << e.status();
  EXPECT_NE(e.status().message().find("before anything allocates"), std::string::npos)
      << e.status();
}

// A wrong teardown order (a lower layer destroyed while one above it is open) is reported and
// stops the process, instead of leaving the layer above to use what was torn down.
TEST_F(MisuseTest, AWrongTeardownOrderIsDetected) {
  EXPECT_DEATH(rt_.epochs.reset(), "epoch::Manager destroyed while a txn::Engine");
  EXPECT_DEATH(rt_.heap.reset(), "alloc::Heap destroyed while a txn::Engine");
  rt_.engine.reset();
  EXPECT_DEATH(rt_.epochs.reset(), "epoch::Manager destroyed while an alloc::Heap");
}

}  // namespace
}  // namespace pmrt::txn
