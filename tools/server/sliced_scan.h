// SlicedScan: the walk every whole-range read of the server uses (SCAN, KEYS, PMRT.RANGE,
// FLUSHALL, a hash's fields), a slice per epoch guard; and the quoting of error replies.
#ifndef PMRT_TOOLS_SERVER_SLICED_SCAN_H_
#define PMRT_TOOLS_SERVER_SLICED_SCAN_H_

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "ds/durable_masstree.h"

namespace pmrt::server {

// A command name or argument quoted in an error reply, cut to a readable length.
inline std::string Quote(std::string_view s) {
  constexpr size_t kMax = 128;
  std::string r = "'";
  r.append(s.substr(0, kMax));
  r.append(s.size() > kMax ? "...'" : "'");
  return r;
}

// The error of a read whose value fails its checksum (--verify-reads).
inline absl::Status CorruptValue(std::string_view key) {
  return absl::DataLossError(
      absl::StrCat("the value of key ", Quote(key), " fails its checksum: the pool is damaged"));
}

// A slice of a scan: at most kSliceKeys pairs and (past the first) kSliceBytes bytes, read
// under one epoch guard (one tree scan) and copied out of the tree.
inline constexpr size_t kSliceKeys = 256;
inline constexpr size_t kSliceBytes = 1 << 20;

// Visits the pairs with key >= from (and < end, unless end is empty), in ascending order, while
// `visit(key, value)` returns true, a slice at a time: each slice is copied under its own guard,
// and `visit` runs after that guard has ended. So no request holds an epoch guard for more than
// one slice, whatever it does per key (a MATCH pattern) or however many keys it reads; a key
// inserted or removed between slices is seen in either state, as by one concurrent scan.
// `values`: copy the values too (else visit gets empty ones); `verify`: compare each copied
// value with its checksum first. Returns kDataLoss naming the first key whose value fails (the
// pairs before it were visited), else OK.
template <class Visit>
absl::Status SlicedScan(const ds::DurableMasstree& tree, std::string from, std::string_view end,
                        bool values, bool verify, Visit&& visit) {
  std::vector<std::pair<std::string, std::string>> slice;
  for (;;) {
    slice.clear();
    size_t bytes = 0;
    bool at_end = false;
    std::optional<std::string> corrupt;
    tree.scan(from, kSliceKeys, [&](std::string_view k, std::string_view v) {
      if (!end.empty() && k >= end) {
        at_end = true;
        return false;
      }
      if (values && verify && !tree.value_intact(k, v)) {
        corrupt = std::string(k);
        return false;
      }
      slice.emplace_back(std::string(k), values ? std::string(v) : std::string());
      bytes += k.size() + (values ? v.size() : 0);
      return bytes < kSliceBytes;
    });
    for (auto& [k, v] : slice) {
      if (!visit(std::string_view(k), std::string_view(v))) return absl::OkStatus();
    }
    if (corrupt.has_value()) return CorruptValue(*corrupt);
    if (at_end || slice.empty() || (slice.size() < kSliceKeys && bytes < kSliceBytes)) {
      return absl::OkStatus();
    }
    from = std::move(slice.back().first);
    from.push_back('\0');  // the smallest key after the last one
  }
}

}  // namespace pmrt::server

#endif  // PMRT_TOOLS_SERVER_SLICED_SCAN_H_
