// `pmrt bench`: tiny runs of the YCSB driver through the tool, on a non-terminal stdout.
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/tools/tool_test_util.h"
#include "tests/util/test_util.h"

namespace pmrt::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

TEST(BenchCmdTest, BothVariantsWithJson) {
  TempDir dir;
  const std::string pool = dir.File("bench.pool"), json = dir.File("out.json");
  const ToolResult r =
      RunTool({"bench", "--keys", "3000", "--ops", "30000", "--threads", "2", "--variant", "both",
               "--rounds", "2", "--backend", "msync", "--pool", pool, "--json", json});
  ASSERT_EQ(r.status, 0) << r.out << r.err;
  EXPECT_THAT(r.out, HasSubstr("ycsb-a uniform transient threads=2 keys=3000 ops=30000"));
  EXPECT_THAT(r.out, HasSubstr("ycsb-a uniform durable   threads=2 keys=3000 ops=30000"));
  EXPECT_THAT(r.out, HasSubstr("durable/transient"));
  EXPECT_THAT(r.out, Not(HasSubstr("\r"))) << "no in-place progress line off a terminal";
  EXPECT_FALSE(ReadFile(pool).has_value()) << "the pool is removed without --keep-pool";

  // The two loads (transient first), then the run of each tree.
  const std::vector<std::string> lines = Lines(ReadFile(json).value_or(""));
  ASSERT_EQ(lines.size(), 4u);
  for (int i = 0; i < 2; ++i) {
    const auto load = ParseJson(lines[i]);
    ASSERT_TRUE(load.has_value()) << lines[i];
    EXPECT_EQ(load->at("mode"), "load");
    EXPECT_EQ(load->at("variant"), i == 0 ? "transient" : "durable");
    EXPECT_EQ(load->at("keys"), "3000");
    EXPECT_EQ(load->at("guards"), "batch");
    EXPECT_GT(std::stod(load->at("ops_per_sec")), 0);
  }
  EXPECT_THAT(r.out, HasSubstr("load transient 3000 keys, 2 threads:"));
  const auto t = ParseJson(lines[2]), d = ParseJson(lines[3]);
  ASSERT_TRUE(t.has_value() && d.has_value()) << lines[2] << "\n" << lines[3];
  EXPECT_EQ(t->at("variant"), "transient");
  EXPECT_EQ(d->at("variant"), "durable");
  for (const auto* j : {&*t, &*d}) {
    EXPECT_EQ(j->at("workload"), "a");
    EXPECT_EQ(j->at("keys"), "3000");
    EXPECT_EQ(j->at("ops"), "30000");
    EXPECT_EQ(j->at("threads"), "2");
    EXPECT_GT(std::stod(j->at("ops_per_sec")), 0);
  }
  EXPECT_EQ(d->at("backend"), "msync");
  EXPECT_EQ(t->at("run"), d->at("run"));
  // The boundary's share of a 64 ms epoch, from its time per epoch (both rounded to 0.001).
  EXPECT_NEAR(std::stod(d->at("boundary_share_pct")),
              std::stod(d->at("boundary_ms_per_epoch")) / 64 * 100, 0.01);
}

TEST(BenchCmdTest, KeptPoolIsAHealthyKeyValuePool) {
  TempDir dir;
  const std::string pool = dir.File("bench.pool");
  const ToolResult r =
      RunTool({"bench", "--keys", "2000", "--ops", "20000", "--threads", "1", "--workload", "a,e",
               "--backend", "msync", "--pool", pool, "--keep-pool"});
  ASSERT_EQ(r.status, 0) << r.out << r.err;
  EXPECT_THAT(r.out, HasSubstr("ycsb-a"));
  EXPECT_THAT(r.out, HasSubstr("ycsb-e"));
  const ToolResult c = RunTool({"check", pool});
  EXPECT_EQ(c.status, 0) << c.out << c.err;
  const auto info = ParseJson(RunTool({"info", pool, "--json"}).out);
  ASSERT_TRUE(info.has_value());
  EXPECT_EQ(info->at("tree.keys"), "2000");
  EXPECT_EQ(Lines(RunTool({"dump", pool, "--limit", "5", "--hex"}).out).size(), 5u);
}

TEST(BenchCmdTest, SecondsInsteadOfOps) {
  TempDir dir;
  const std::string json = dir.File("out.json");
  const ToolResult r = RunTool({"bench", "--keys", "1000", "--seconds", "0.3", "--threads", "1",
                                "--variant", "transient", "--workload", "c", "--json", json});
  ASSERT_EQ(r.status, 0) << r.out << r.err;
  const auto j = ParseJson(Lines(ReadFile(json).value_or("")).at(1));  // after the load's
  ASSERT_TRUE(j.has_value());
  EXPECT_GT(std::stoull(j->at("ops")), 0u);
  EXPECT_EQ(j->at("workload"), "c");
}

TEST(BenchCmdTest, PerOperationGuards) {
  TempDir dir;
  const std::string json = dir.File("out.json");
  const ToolResult r = RunTool({"bench", "--keys", "1000", "--ops", "5000", "--threads", "2",
                                "--variant", "transient", "--per-op-guards", "--json", json});
  ASSERT_EQ(r.status, 0) << r.out << r.err;
  for (const std::string& line : Lines(ReadFile(json).value_or(""))) {
    const auto j = ParseJson(line);
    ASSERT_TRUE(j.has_value()) << line;
    EXPECT_EQ(j->at("guards"), "per-op");
  }
}

TEST(BenchCmdTest, UsageErrors) {
  for (const std::vector<std::string>& args :
       std::vector<std::vector<std::string>>{{"bench", "--workload", "z"},
                                             {"bench", "--keys"},
                                             {"bench", "--threads", "x"},
                                             {"bench", "--seconds", "-1"},
                                             {"bench", "--frobnicate"}}) {
    const ToolResult r = RunTool(args);
    EXPECT_EQ(r.status, 2) << args[1];
    EXPECT_THAT(r.err, HasSubstr("pmrt bench: "));
    EXPECT_THAT(r.err, HasSubstr("usage"));
  }
  const ToolResult help = RunTool({"bench", "--help"});
  EXPECT_EQ(help.status, 0);
  EXPECT_THAT(help.out, HasSubstr("--workload"));
}

}  // namespace
}  // namespace pmrt::testing
