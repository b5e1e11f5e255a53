// `pmrt check`: healthy pools (after many operations, after a SIGKILL mid-write) and corrupt
// ones (a flipped heap bitmap bit, a scribbled border node, a wild value link, a leaked block, a
// bad header), each reported with what and where.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "alloc/internal/heap_layout.h"
#include "ds/internal/node_layout.h"
#include "gtest/gtest.h"
#include "tests/tools/tool_test_util.h"
#include "tests/util/test_util.h"
#include "tools/kv_store.h"
#include "tools/pool_view.h"

namespace pmrt::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

std::string Key(int i) { return absl::StrCat("key", 1000 + i); }

// Every node and value of a tree, by pool offset.
class Collect : public ds::TreeVisitor {
 public:
  explicit Collect(const Pool& pool) : pool_(pool) {}
  absl::Status Node(const void* node, size_t, bool leaf, int) override {
    (leaf ? leaves : interiors).push_back(pool_.offset_of(node));
    return absl::OkStatus();
  }
  absl::Status Value(const void* value, size_t, const void*, int) override {
    values.push_back(pool_.offset_of(value));
    return absl::OkStatus();
  }
  std::vector<uint64_t> leaves, interiors, values;

 private:
  const Pool& pool_;
};

// A pool of 400 numbered keys, and what a PoolView sees of it.
class CheckTest : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = dir_.File("kv.pool");
    std::vector<std::pair<std::string, std::string>> kv;
    for (int i = 0; i < 400; ++i) kv.emplace_back(Key(i), absl::StrCat("value-", i));
    PutKv(path_, kv);
  }

  ToolResult Check() { return RunTool({"check", path_}); }

  TempDir dir_;
  std::string path_;
};

TEST_F(CheckTest, HealthyPoolPassesEveryCheck) {
  const ToolResult r = Check();
  ASSERT_EQ(r.status, 0) << r.out << r.err;
  EXPECT_THAT(r.out, HasSubstr(": healthy"));
  EXPECT_THAT(r.out, HasSubstr("tree: 400 keys"));
  EXPECT_THAT(r.out, HasSubstr("are reachable (no leaks)"));
  EXPECT_THAT(r.out, Not(HasSubstr("problem")));
}

TEST_F(CheckTest, HealthyAfterManyOperations) {
  {
    auto kv = tools::KvStore::Open(path_);
    ASSERT_OK(kv);
    ds::DurableMasstree& t = (*kv)->tree();
    std::mt19937_64 rng(7);
    for (int i = 0; i < 6000; ++i) {
      const int k = static_cast<int>(rng() % 900);
      // Long keys with shared prefixes make deeper layers; large values are extents.
      const std::string key = k % 3 == 0 ? absl::StrCat("shared-prefix-of-many-keys/", k) : Key(k);
      switch (rng() % 4) {
        case 0:
          t.remove(key);
          break;
        case 1:
          ASSERT_NE(t.put(key, std::string(k % 50 == 0 ? 40000 : 100, 'v')),
                    ds::PutResult::kNoMemory);
          break;
        default:
          ASSERT_NE(t.put(key, absl::StrCat(i)), ds::PutResult::kNoMemory);
      }
    }
    ASSERT_OK((*kv)->Close());
  }
  const ToolResult r = Check();
  ASSERT_EQ(r.status, 0) << r.out << r.err;
  EXPECT_THAT(r.out, HasSubstr(": healthy"));
}

// The child writes until killed; the parent kills it mid-write (after it has done enough to
// have completed some epochs) and checks a copy of the crashed file.
TEST_F(CheckTest, HealthyAfterSigkillMidWrite) {
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    close(fds[0]);
    auto kv = tools::KvStore::Open(path_);  // the background advancer runs (64 ms epochs)
    if (!kv.ok()) _exit(2);
    ds::DurableMasstree& t = (*kv)->tree();
    for (uint64_t i = 0;; ++i) {
      const std::string key = Key(static_cast<int>(i % 3000));
      if (i % 7 == 3) {
        t.remove(key);
      } else if (t.put(key, std::string(8 + i % 200, 'x')) == ds::PutResult::kNoMemory) {
        _exit(3);
      }
      if (i == 30000 && (!(*kv)->epochs().Sync().ok() || write(fds[1], "x", 1) != 1)) _exit(4);
    }
  }
  close(fds[1]);
  char c;
  ASSERT_EQ(read(fds[0], &c, 1), 1) << "the writer died early";
  close(fds[0]);
  ASSERT_EQ(kill(pid, SIGKILL), 0);
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFSIGNALED(status));

  // Two copies of the crash image: one for check, one for info.
  const std::optional<std::string> image = ReadFile(path_);
  ASSERT_TRUE(image.has_value());
  const std::string copy = dir_.File("copy.pool");
  FILE* f = std::fopen(copy.c_str(), "w");
  ASSERT_NE(f, nullptr);
  std::fclose(f);
  WriteFileAt(copy, 0, *image);

  const ToolResult r = Check();
  ASSERT_EQ(r.status, 0) << r.out << r.err;
  EXPECT_THAT(r.out, HasSubstr(": healthy"));

  const ToolResult info = RunTool({"info", copy, "--json"});
  ASSERT_EQ(info.status, 0) << info.err;
  const auto j = ParseJson(info.out);
  ASSERT_TRUE(j.has_value()) << info.out;
  EXPECT_EQ(j->at("clean_shutdown"), "false");
  EXPECT_TRUE(j->contains("epochs.failed_at_open.0.1")) << info.out;  // [lo, hi] recorded
  EXPECT_EQ(j->at("tree.check_error"), "null");
  // The tools recover in memory only: the second info sees the same crash, both files are
  // still the crash image.
  const ToolResult text = RunTool({"info", copy});
  EXPECT_THAT(text.out, HasSubstr("last shutdown   CRASH (recovered in memory by this view)"));
  EXPECT_EQ(ReadFile(copy), image);
  EXPECT_EQ(ReadFile(path_), image);
}

TEST_F(CheckTest, LeakedBlockIsNamed) {
  uint64_t leak = 0;
  {
    auto kv = tools::KvStore::Open(path_);
    ASSERT_OK(kv);
    {
      epoch::Guard g((*kv)->epochs());
      void* p = (*kv)->heap().Allocate(100);
      ASSERT_NE(p, nullptr);
      leak = (*kv)->pool().offset_of(p);
    }
    ASSERT_OK((*kv)->Close());
  }
  const ToolResult r = Check();
  EXPECT_EQ(r.status, 1);
  EXPECT_THAT(r.out, HasSubstr("UNHEALTHY, 1 problem"));
  EXPECT_THAT(r.out, HasSubstr(absl::StrCat("leak: live heap block at offset ", leak,
                                            " (112 bytes) is not reachable from the tree")));
}

// Finds, with the pool open, what the corruption tests scribble on.
struct Targets {
  uint64_t leaf = 0;         // a border node with at least two keys
  uint64_t ikey_offset = 0;  // of ikey[0] inside a border node
  uint64_t lv_offset = 0;    // of lv[0]
  int first_slot = 0;        // a live slot of `leaf`
  uint64_t value = 0;        // a value object
  uint64_t value_block = 0;  // the size of its heap block
  uint64_t heap_offset = 0, data_offset = 0, chunk_count = 0;
  uint32_t heap_version = 0;
  std::vector<alloc::BlockInfo> blocks;
};

Targets Find(const std::string& path) {
  Targets t;
  auto view = tools::PoolView::Open(path, tools::kKvLayout);
  EXPECT_OK(view);
  if (!view.ok()) return t;
  Pool& pool = (*view)->pool();
  Collect c(pool);
  EXPECT_OK((*view)->tree()->CheckInvariants(nullptr, &c));
  for (const uint64_t off : c.leaves) {
    auto* leaf = static_cast<ds_internal::LeafNode*>(pool.at(off));
    if (leaf->perm().size() >= 2) {
      t.leaf = off;
      t.first_slot = leaf->perm()[0];
      t.ikey_offset = static_cast<uint64_t>(reinterpret_cast<const char*>(&leaf->ikey[0]) -
                                            reinterpret_cast<const char*>(leaf));
      t.lv_offset = static_cast<uint64_t>(reinterpret_cast<const char*>(&leaf->lv[0]) -
                                          reinterpret_cast<const char*>(leaf));
      break;
    }
  }
  t.value = c.values.at(0);
  t.heap_offset = pool.region(PoolRegion::kHeap).offset;
  const auto* hh =
      static_cast<const alloc_internal::HeapHeader*>(pool.region_base(PoolRegion::kHeap));
  t.data_offset = hh->data_offset;
  t.chunk_count = hh->chunk_count;
  t.heap_version = hh->version;
  EXPECT_OK((*view)->heap()->Walk([&](const alloc::BlockInfo& b) { t.blocks.push_back(b); }));
  for (const alloc::BlockInfo& b : t.blocks) {
    if (b.offset == t.value) t.value_block = b.size;
  }
  EXPECT_OK((*view)->Close());
  return t;
}

TEST_F(CheckTest, ScribbledBorderNodeIsNamed) {
  const Targets t = Find(path_);
  ASSERT_NE(t.leaf, 0u);
  // Every key slice of the node all-ones: the keys are no longer strictly ascending.
  WriteFileAt(path_, t.leaf + t.ikey_offset, std::string(8 * ds_internal::kLeafWidth, '\xff'));
  const ToolResult r = Check();
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_THAT(r.out, HasSubstr("UNHEALTHY"));
  EXPECT_THAT(r.out, HasSubstr(absl::StrCat("node at offset ", t.leaf, " in layer 0")));
  EXPECT_THAT(r.out, HasSubstr("reachability: not checked"));
  // info shows the failed check and exits with the corrupt pool's status.
  const ToolResult info = RunTool({"info", path_});
  EXPECT_EQ(info.status, 1) << info.out << info.err;
  EXPECT_THAT(info.out, HasSubstr("tree check      FAILED"));
}

TEST_F(CheckTest, WildValueLinkIsReportedNotFollowed) {
  const Targets t = Find(path_);
  ASSERT_NE(t.leaf, 0u);
  const uint64_t wild = uint64_t{1} << 40;  // far outside the 16 MiB pool
  std::string bytes(8, '\0');
  std::memcpy(bytes.data(), &wild, 8);
  WriteFileAt(path_, t.leaf + t.lv_offset + 8 * static_cast<uint64_t>(t.first_slot), bytes);
  const ToolResult r = Check();
  EXPECT_EQ(r.status, 1) << r.out << r.err;
  EXPECT_THAT(r.out, HasSubstr(absl::StrCat("node at offset ", t.leaf,
                                            " in layer 0: value link "
                                            "to offset ",
                                            wild)));
}

TEST_F(CheckTest, AChangedValueByteFailsItsChecksum) {
  const Targets t = Find(path_);
  ASSERT_NE(t.value, 0u);
  // The first byte of the value ("value-..."): the structure is intact, the bytes are not.
  WriteFileAt(path_, t.value + sizeof(ds_internal::ValueObject), "V");
  const ToolResult r = Check();
  EXPECT_EQ(r.status, 1) << r.out << r.err;
  EXPECT_THAT(r.out, HasSubstr(absl::StrCat("the value object at offset ", t.value)));
  EXPECT_THAT(r.out, HasSubstr("1 of 400 values fail their checksum"));
  // dump names the key instead of printing the changed bytes as its value.
  const ToolResult dump = RunTool({"dump", path_});
  EXPECT_EQ(dump.status, 1) << dump.out << dump.err;
  EXPECT_THAT(dump.out, Not(HasSubstr("Value-")));
  EXPECT_THAT(dump.err, HasSubstr("fails its checksum"));
}

TEST_F(CheckTest, TwoSwappedValueLinksFailTheirChecksums) {
  const Targets t = Find(path_);
  ASSERT_NE(t.leaf, 0u);
  // Two slots of one border node trade values: every key still links a well-formed object,
  // each one written for the other key.
  const std::optional<std::string> image = ReadFile(path_);
  ASSERT_TRUE(image.has_value());
  const uint64_t lv = t.leaf + t.lv_offset;
  const auto* leaf = reinterpret_cast<const ds_internal::LeafNode*>(image->data() + t.leaf);
  const int a = leaf->perm()[0], b = leaf->perm()[1];
  WriteFileAt(path_, lv + 8 * static_cast<uint64_t>(a), image->substr(lv + 8 * b, 8));
  WriteFileAt(path_, lv + 8 * static_cast<uint64_t>(b), image->substr(lv + 8 * a, 8));
  const ToolResult r = Check();
  EXPECT_EQ(r.status, 1) << r.out << r.err;
  EXPECT_THAT(r.out, HasSubstr("2 of 400 values fail their checksum"));
  EXPECT_THAT(r.out, HasSubstr(absl::StrCat("node at offset ", t.leaf, " in layer 0: slot ")));
}

TEST_F(CheckTest, FlippedHeapBitmapBitIsALeakAtItsOffset) {
  const Targets t = Find(path_);
  // A free block in the value's chunk: its bit set makes a live block nothing links to.
  const uint64_t data = t.heap_offset + t.data_offset;
  const uint64_t chunk = (t.value - data) >> alloc_internal::kChunkShift;
  const uint64_t chunk_start = data + (chunk << alloc_internal::kChunkShift);
  auto live = [&](uint64_t off) {
    for (const alloc::BlockInfo& b : t.blocks)
      if (b.offset == off) return true;
    return false;
  };
  ASSERT_NE(t.value_block, 0u);
  const uint64_t blocks = alloc_internal::kChunkSize / t.value_block;
  uint64_t block = blocks;
  for (uint64_t j = blocks; j-- > 0;) {
    if (!live(chunk_start + t.value_block * j)) {
      block = j;
      break;
    }
  }
  ASSERT_LT(block, blocks) << "the value's chunk is full";
  // Heap version 2 (alloc/internal/heap_layout.h): every chunk's header line, then every
  // chunk's kBitmapLines bitmap lines.
  ASSERT_EQ(t.heap_version, 2u);
  constexpr uint64_t kLine = sizeof(alloc_internal::LoggedLine);
  const uint64_t word_at =
      t.heap_offset + alloc_internal::kMetaOffset + t.chunk_count * kLine +
      (chunk * alloc_internal::kBitmapLines + block / alloc_internal::kBitsPerLine) * kLine +
      8 * ((block % alloc_internal::kBitsPerLine) / 64);
  const std::optional<std::string> image = ReadFile(path_);
  ASSERT_TRUE(image.has_value());
  uint64_t word;
  std::memcpy(&word, image->data() + word_at, 8);
  ASSERT_EQ(word & (uint64_t{1} << (block % 64)), 0u);
  word |= uint64_t{1} << (block % 64);
  std::string bytes(8, '\0');
  std::memcpy(bytes.data(), &word, 8);
  WriteFileAt(path_, word_at, bytes);

  const ToolResult r = Check();
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_THAT(r.out, HasSubstr(absl::StrCat("leak: live heap block at offset ",
                                            chunk_start + t.value_block * block, " (",
                                            t.value_block, " bytes)")));
}

TEST_F(CheckTest, CorruptHeaderIsUnhealthyAndUntouched) {
  WriteFileAt(path_, 60, "X");  // inside the layout name's padding: covered by the checksum
  const std::optional<std::string> before = ReadFile(path_);
  const ToolResult r = Check();
  EXPECT_EQ(r.status, 1);
  EXPECT_THAT(r.err, HasSubstr(path_));
  EXPECT_THAT(r.err, HasSubstr("checksum"));
  EXPECT_EQ(Lines(r.err).size(), 1u) << r.err;
  EXPECT_EQ(ReadFile(path_), before);
}

}  // namespace
}  // namespace pmrt::testing
