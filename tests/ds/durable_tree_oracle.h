// Checks shared by the durable Masstree's crash-simulator and process-kill tests: the tree's
// contents by a full scan, and the heap oracle (the heap's live blocks are exactly the blocks
// the tree reaches: its nodes in every layer, its value objects and its descriptor).
#ifndef PMRT_TESTS_DS_DURABLE_TREE_ORACLE_H_
#define PMRT_TESTS_DS_DURABLE_TREE_ORACLE_H_

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "alloc/allocator.h"
#include "ds/durable_masstree.h"
#include "ds/internal/durable_policy.h"
#include "ds/internal/node_layout.h"
#include "epoch/epoch.h"

namespace pmrt::ds::oracle {

using Contents = std::map<std::string, std::string>;

inline Contents Scan(const DurableMasstree& t) {
  Contents c;
  t.scan("", SIZE_MAX, [&](std::string_view k, std::string_view v) {
    c.emplace(std::string(k), std::string(v));
    return true;
  });
  return c;
}

inline std::string Printable(std::string_view s) {
  std::string out;
  for (unsigned char c : s) {
    if (c >= 0x20 && c < 0x7f) {
      out.push_back(static_cast<char>(c));
    } else {
      out += absl::StrCat("\\x", absl::Hex(c, absl::kZeroPad2));
    }
  }
  return out;
}

// The first difference between two contents, for error messages.
inline std::string Diff(const Contents& got, const Contents& want) {
  for (const auto& [k, v] : got) {
    auto it = want.find(k);
    if (it == want.end()) return absl::StrCat("key ", Printable(k), " should be absent");
    if (it->second != v) {
      return absl::StrCat("key ", Printable(k), " = ", Printable(v), ", expected ",
                          Printable(it->second));
    }
  }
  for (const auto& [k, v] : want) {
    if (!got.count(k)) return absl::StrCat("key ", Printable(k), " is missing");
  }
  return "equal";
}

// Every block the subtree at `n` reaches. REQUIRES: inside a guard; no writer runs.
inline void Reach(const ds_internal::DurablePolicy& p, ds_internal::NodeHeader* n,
                  std::set<uint64_t>& out) {
  using namespace ds_internal;
  p.Ready(n);
  out.insert(EncodeLink(p, n));
  if (!NodeVersion::IsLeaf(n->version.Load())) {
    InteriorNode* in = AsInterior(n);
    for (int i = 0; i <= in->size(); ++i) {
      Reach(p, in->child[i].Load(p, std::memory_order_relaxed), out);
    }
    return;
  }
  LeafNode* leaf = AsLeaf(n);
  const LeafPermuter perm = leaf->perm();
  for (int i = 0; i < perm.size(); ++i) {
    const uint64_t bits = leaf->lv[perm[i]].load(std::memory_order_relaxed);
    if (leaf->keylenx[perm[i]].load(std::memory_order_relaxed) != kKeyLenLayer) {
      out.insert(bits);
      continue;
    }
    NodeHeader* sub = DecodeLink<NodeHeader>(p, bits);
    p.Ready(sub);
    while (!NodeVersion::IsRoot(sub->version.Load())) {
      sub = HeaderOf(ParentOf(p, sub));
      p.Ready(sub);
    }
    Reach(p, sub, out);
  }
}

// The heap's live blocks are exactly what the tree reaches, and the heap's metadata checks.
// REQUIRES: no writer runs.
inline absl::Status CheckHeapMatchesTree(const DurableMasstree& tree, epoch::Manager& epochs,
                                         const alloc::Heap& heap) {
  const ds_internal::DurablePolicy& p = tree.policy();
  std::set<uint64_t> reached;
  {
    epoch::Guard g(epochs);
    reached.insert(tree.descriptor());
    Reach(p, ds_internal::DecodeLink<ds_internal::NodeHeader>(p, p.descriptor()->root.load()),
          reached);
  }
  std::set<uint64_t> live;
  if (auto st = heap.Walk([&](const alloc::BlockInfo& b) { live.insert(b.offset); }); !st.ok()) {
    return st;
  }
  for (uint64_t off : live) {
    if (!reached.count(off)) {
      return absl::DataLossError(absl::StrCat("leak: heap block at ", off, " is unreachable"));
    }
  }
  for (uint64_t off : reached) {
    if (!live.count(off)) {
      return absl::DataLossError(
          absl::StrCat("the tree reaches offset ", off, ", which is not a live heap block"));
    }
  }
  return heap.Check();
}

}  // namespace pmrt::ds::oracle

#endif  // PMRT_TESTS_DS_DURABLE_TREE_ORACLE_H_
