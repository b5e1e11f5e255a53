// Structural checker for a quiescent Masstree (no concurrent writers).
#ifndef PMRT_DS_INTERNAL_TREE_CHECK_H_
#define PMRT_DS_INTERNAL_TREE_CHECK_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "ds/internal/tree_core.h"

namespace pmrt::ds_internal {

// What a check found.
struct TreeShape {
  size_t keys = 0;          // live keys, all layers
  size_t layers = 0;        // layer 0 included
  size_t leaves = 0;        // border nodes
  size_t empty_leaves = 0;  // border nodes without keys
  size_t interiors = 0;     // interior nodes
  int height = 0;           // levels of layer 0 (1: a single border node)
  // Trees that keep value checksums (value_ref.h): values compared, and those that failed.
  size_t checksummed_values = 0;
  size_t bad_checksums = 0;
  static constexpr size_t kMaxListedFailures = 8;
  std::vector<std::string> checksum_failures;  // the first kMaxListedFailures, named
};

// Receives every object a checked tree links to, each time the checker reaches it, after the
// checker has read it (for the durable tree, once the link is known to lie inside the pool): for
// tools that cross-check the tree against its allocator (`pmrt check`: every node and value is
// a live heap block, every live block is reachable). Nodes are reached before their children,
// layers in key order. A visitor that returns an error stops the check with that error (for
// example on an object reached twice: a corrupt tree may link a node from two places, or in a
// cycle that the structural checks alone would follow forever).
class TreeVisitor {
 public:
  // A node: an interior or a border node of layer `layer` (0 is the top), `bytes` long.
  virtual absl::Status Node(const void* node, size_t bytes, bool leaf, int layer) = 0;
  // A value object (its size() bytes) in slot `slot` of border node `leaf`.
  virtual absl::Status Value(const void* value, size_t bytes, const void* leaf, int slot) = 0;
  virtual ~TreeVisitor() = default;
};

// Checks, for every layer: root flags and parent links; interior separators strictly ascending
// and inside the range the parent gives; children non-null exactly up to nkeys; all leaves at
// one depth; every border node's permutation valid, its keys strictly ascending and inside its
// range, its low bound equal to the range's start; the leaf chain (next/prev) equal to the
// in-order leaves; no version word locked, dirty or deleted; layer links and value objects
// consistent with keylenx (suffix present exactly for class-9 keys). Fills *shape (may be
// null). Returns kInternal with the first violation found. Where the tree keeps value
// checksums, every value's trailer is compared with the full key its slot spells (the layers'
// slices, the length class, the suffix) and its bytes; when the structure holds but values fail,
// the result is kDataLoss naming how many and the first (*shape lists up to eight).
// The durable tree adds, per border node: the node epoch is not ahead of the current epoch,
// perm_log is a valid permutation, and each valid value log names a slot of its own line.
// The durable tree also checks that every link it follows (child, layer, value, leaf chain) lies
// inside the pool, 64-byte aligned for nodes, before reading through it, and names nodes by
// pool offset in its errors ("node at offset N"); the transient tree names them by address.
// `visitor` (may be null) sees every node and value object reached (see TreeVisitor).
// The walk is bounded whatever the tree holds: a node reached a second time (two links to it, or
// a cycle) fails the check before it is walked again, and so do a layer deeper than
// kMaxCheckedLayers and a layer taller than kMaxLevels (tree_split.h: more than any tree holds).
// `values` false skips the value checksums (the structure alone, reading no value bytes past each
// object's header). REQUIRES: no thread modifies the tree during the call; inside a Guard (the
// durable tree repairs nodes on first access). Instantiated in tree_check.cc for both policies.
template <class P>
absl::Status CheckTree(const TreeCore<P>& tree, TreeShape* shape, TreeVisitor* visitor = nullptr,
                       bool values = true);

// The check's bound on layers: keys that share prefixes of 64 KiB.
inline constexpr int kMaxCheckedLayers = 8192;

}  // namespace pmrt::ds_internal

#endif  // PMRT_DS_INTERNAL_TREE_CHECK_H_
