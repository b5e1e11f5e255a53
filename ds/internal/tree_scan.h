// Ordered scans over the Masstree's layers.
//
// A scan walks the border nodes of a layer left to right, taking a validated snapshot of each
// (the same optimistic protocol as a lookup), and recurses into a deeper layer where a slot links
// one. It remembers the last position it finished in each layer, so when a node it stands on is
// split or removed it restarts the descent from that position and skips what it already visited:
// every key is visited at most once and in ascending order. Keys inserted or removed while the
// scan runs may or may not be visited; keys present throughout are visited.
#ifndef PMRT_DS_INTERNAL_TREE_SCAN_H_
#define PMRT_DS_INTERNAL_TREE_SCAN_H_

#include <string_view>

#include "absl/functional/function_ref.h"
#include "ds/internal/tree_core.h"
#include "ds/internal/value_ref.h"

namespace pmrt::ds_internal {

// Returns false to stop the scan.
using ScanVisitor = absl::FunctionRef<bool(std::string_view key, const ValueObject& value)>;

// Visits the keys >= `from` (> when !inclusive) in ascending order until `visit` returns false.
// REQUIRES: inside a Guard; the key and value views are valid until the Guard ends (the key only
// during the call). Instantiated in tree_scan.cc for both policies.
template <class P>
void ScanTree(const TreeCore<P>& tree, std::string_view from, bool inclusive, ScanVisitor visit);

}  // namespace pmrt::ds_internal

#endif  // PMRT_DS_INTERNAL_TREE_SCAN_H_
