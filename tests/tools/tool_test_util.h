// Helpers for the tests of the `pmrt` tool: run the built binary and capture its output, fill
// a key-value pool, and read back JSON the tool printed.
#ifndef PMRT_TESTS_TOOLS_TOOL_TEST_UTIL_H_
#define PMRT_TESTS_TOOLS_TOOL_TEST_UTIL_H_

#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace pmrt::testing {

struct ToolResult {
  int status = -1;  // exit status; -1 if killed by a signal
  std::string out, err;
};

// Runs the pmrt binary (PMRT_TOOL_PATH) with `args` (each shell-quoted), stdin from /dev/null,
// stdout and stderr captured (stdout is a pipe: not a terminal).
ToolResult RunTool(const std::vector<std::string>& args);

// A JSON text flattened to path -> scalar: {"a":{"b":[1,"x"]}} gives "a.b.0" -> "1" and
// "a.b.1" -> "x" (strings unescaped, \u00HH as the byte HH; other scalars as written), and each
// container's path -> "{}" or "[]". nullopt if the text is not exactly one valid JSON value.
std::optional<std::map<std::string, std::string>> ParseJson(const std::string& text);

// Creates (or reopens) the key-value pool at `path` (16 MiB when new) and puts `pairs` into its
// tree; returns with everything durable and the pool closed. Fails the test on an error.
void PutKv(const std::string& path, const std::vector<std::pair<std::string, std::string>>& pairs);

// Lines of `text`, without the newlines.
std::vector<std::string> Lines(const std::string& text);

}  // namespace pmrt::testing

#endif  // PMRT_TESTS_TOOLS_TOOL_TEST_UTIL_H_
