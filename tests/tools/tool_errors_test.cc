// The error cases of the pool subcommands (info, check, dump, bench): a wrong path, a pool of
// another layout, a newer format, a corrupt header, a pool in use. Each gets one line on stderr
// naming the file, a non-zero exit status, and leaves the file byte-identical.
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/crc32c.h"
#include "epoch/pool.h"
#include "epoch/pool_layout.h"
#include "gtest/gtest.h"
#include "tests/tools/tool_test_util.h"
#include "tests/util/test_util.h"

namespace pmrt::testing {
namespace {

using ::testing::HasSubstr;

const std::vector<std::string> kCommands = {"info", "check", "dump"};

// Runs every pool subcommand on `path`; each must print one error line naming the file and
// containing `what`, exit with `status`, and leave the file as it was.
void ExpectRefused(const std::string& path, int status, const std::string& what) {
  const std::optional<std::string> before = ReadFile(path);
  for (const std::string& cmd : kCommands) {
    const ToolResult r = RunTool({cmd, path});
    EXPECT_EQ(r.status, status) << cmd << ": " << r.err;
    EXPECT_EQ(r.out, "") << cmd;
    EXPECT_EQ(Lines(r.err).size(), 1u) << cmd << ": " << r.err;
    EXPECT_THAT(r.err, HasSubstr(path)) << cmd;
    EXPECT_THAT(r.err, HasSubstr(what)) << cmd;
    EXPECT_EQ(ReadFile(path), before) << cmd << " changed the file";
  }
}

TEST(ToolErrorsTest, MissingFile) {
  TempDir dir;
  const std::string path = dir.File("nope.pool");
  ExpectRefused(path, 3, "no such pool file");
  EXPECT_FALSE(ReadFile(path).has_value()) << "nothing was created";
}

TEST(ToolErrorsTest, NotAPool) {
  TempDir dir;
  const std::string path = dir.File("text.pool");
  FILE* f = std::fopen(path.c_str(), "w");
  ASSERT_NE(f, nullptr);
  std::fclose(f);
  WriteFileAt(path, 0, std::string(8192, 'z'));
  const ToolResult r = RunTool({"info", path});
  EXPECT_NE(r.status, 0);
  EXPECT_EQ(Lines(r.err).size(), 1u) << r.err;
  EXPECT_THAT(r.err, HasSubstr(path));
  EXPECT_EQ(ReadFile(path), std::string(8192, 'z'));
}

TEST(ToolErrorsTest, OtherLayout) {
  TempDir dir;
  const std::string path = dir.File("other.pool");
  ASSERT_OK(Pool::Create(path, 4 << 20, "someone-else"));
  ExpectRefused(path, 3, "someone-else");
  // With its layout named, info and check open it (dump says it is not a key-value pool).
  EXPECT_EQ(RunTool({"info", path, "--layout", "someone-else"}).status, 0);
  EXPECT_EQ(RunTool({"check", path, "--layout", "someone-else"}).status, 0);
  const ToolResult d = RunTool({"dump", path, "--layout", "someone-else"});
  EXPECT_EQ(d.status, 1);
  EXPECT_THAT(d.err, HasSubstr("not a key-value pool"));
}

TEST(ToolErrorsTest, NewerFormat) {
  TempDir dir;
  const std::string path = dir.File("newer.pool");
  PutKv(path, {{"k", "v"}});
  // Major version 2 with a correct checksum: a pool a later pmrt wrote.
  std::string header = ReadFile(path)->substr(0, kPoolHeaderSize);
  const uint16_t major = 2;
  std::memcpy(header.data() + 8, &major, 2);
  const uint32_t crc = Crc32c(header.data(), 4088);
  std::memcpy(header.data() + 4088, &crc, 4);
  WriteFileAt(path, 0, header);
  ExpectRefused(path, 3, "version");
}

TEST(ToolErrorsTest, CorruptHeader) {
  TempDir dir;
  const std::string path = dir.File("corrupt.pool");
  PutKv(path, {{"k", "v"}});
  WriteFileAt(path, 100, "\x01");  // layout padding: covered by the checksum
  ExpectRefused(path, 1, "checksum");
}

// A key-value pool at `path` holding one key, and its header.
PoolHeader KvPoolWithOneKey(const std::string& path) {
  PutKv(path, {{"k", "v"}});
  const std::optional<std::string> image = ReadFile(path);
  PoolHeader h{};
  EXPECT_TRUE(image.has_value());
  if (image.has_value()) std::memcpy(&h, image->data(), sizeof(h));
  return h;
}

// A layer below the tree refuses the pool: nothing is written before that refusal, the pool's
// own open count included (PoolOptions::defer_attach), so the file stays byte-identical.
TEST(ToolErrorsTest, CorruptHeapHeader) {
  TempDir dir;
  const std::string path = dir.File("heap.pool");
  const PoolHeader h = KvPoolWithOneKey(path);
  WriteFileAt(path, h.heap.offset + 8, "\x7f");  // inside the checksummed heap header
  ExpectRefused(path, 1, absl::StrCat("heap header at offset ", h.heap.offset));
}

TEST(ToolErrorsTest, MalformedFailedEpochRange) {
  TempDir dir;
  const std::string path = dir.File("epochs.pool");
  const PoolHeader h = KvPoolWithOneKey(path);
  // One range with lo > hi, and a count that names it.
  const uint64_t range[2] = {9, 3}, count = 1;
  WriteFileAt(path, h.epoch.offset + 192, std::string(reinterpret_cast<const char*>(range), 16));
  WriteFileAt(path, h.epoch.offset + 128, std::string(reinterpret_cast<const char*>(&count), 8));
  ExpectRefused(path, 1, "failed-epoch range 0 is malformed");
}

TEST(ToolErrorsTest, PoolInUse) {
  TempDir dir;
  const std::string path = dir.File("busy.pool");
  PutKv(path, {{"k", "v"}});
  auto holder = Pool::Open(path, "pmrt");  // this process holds the pool's lock
  ASSERT_OK(holder);
  ExpectRefused(path, 3, "in use");
  ASSERT_OK((*holder)->Close());
  EXPECT_EQ(RunTool({"check", path}).status, 0) << "usable again once released";
}

TEST(ToolErrorsTest, BenchNeverReplacesAnExistingFile) {
  TempDir dir;
  const std::string path = dir.File("data.pool");
  PutKv(path, {{"k", "v"}});
  const std::optional<std::string> before = ReadFile(path);
  const ToolResult r = RunTool({"bench", "--pool", path, "--keys", "10", "--ops", "10"});
  EXPECT_EQ(r.status, 1);
  EXPECT_EQ(Lines(r.err).size(), 1u) << r.err;
  EXPECT_THAT(r.err, HasSubstr(path));
  EXPECT_THAT(r.err, HasSubstr("file exists"));
  EXPECT_EQ(ReadFile(path), before);
}

}  // namespace
}  // namespace pmrt::testing
