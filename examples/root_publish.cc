// The root-publish idiom on pmrt::Runtime, on the epoch scope (no transaction): a new object is
// allocated and filled, then published in the root by a store undo-logged first; both belong to
// the same epoch, so a crash keeps both or neither. Here a persistent stack: push allocates a
// node and makes it the root's head; pop unlinks the head and frees it.
//
//   pmrt-example-root-publish POOL run [N]   # N pushes and pops (default: until killed)
//   pmrt-example-root-publish POOL check     # the invariants; exit 0 when they hold
//
// Invariants, whatever moment the process is killed at: every node reachable from the head is
// a live block whose checksum matches, the depth recorded in the root equals the chain's
// length, and the heap is consistent.
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "runtime/runtime.h"

namespace {

// [readme:root-publish]
struct Node {
  uint64_t next;  // pool offset of the next node, 0 at the bottom
  uint64_t value, checksum;
};
struct Root {
  uint64_t head;  // pool offset of the top node
  uint64_t depth;
};

// Pushes `value`: the node is allocated and filled in this epoch, the root is undo-logged before
// it changes, so after a crash the root names the node only if the node survived with it.
absl::Status Push(pmrt::Runtime& rt, Root* root, uint64_t value) {
  pmrt::epoch::Guard g(rt.epochs());
  Node* n = pmrt::alloc::pnew<Node>(Node{root->head, value, value ^ root->head});
  if (n == nullptr) return absl::ResourceExhaustedError("pnew");
  if (absl::Status st = rt.log_root(g); !st.ok()) return st;  // before the stores below
  root->head = rt.pool().offset_of(n);
  root->depth += 1;
  return absl::OkStatus();  // durable once this epoch completes (rt.sync() to wait for it)
}
// [/readme]

absl::Status Pop(pmrt::Runtime& rt, Root* root) {
  pmrt::epoch::Guard g(rt.epochs());
  if (root->head == 0) return absl::OkStatus();
  auto* n = static_cast<Node*>(rt.pool().at(root->head));
  if (absl::Status st = rt.log_root(g); !st.ok()) return st;
  root->head = n->next;
  root->depth -= 1;
  return pmrt::alloc::pdelete(n);  // freed with this epoch: a crash rolls the free back too
}

int Check(pmrt::Runtime& rt, Root* root) {
  uint64_t n = 0, bad = 0;
  for (uint64_t at = root->head; at != 0 && n <= root->depth; ++n) {
    if (!rt.pool().contains_offset(at, sizeof(Node)) ||
        rt.heap().UsableSize(rt.pool().at(at)) == 0) {
      ++bad;
      break;
    }
    const auto* node = static_cast<const Node*>(rt.pool().at(at));
    if (node->checksum != (node->value ^ node->next)) ++bad;
    at = node->next;
  }
  const absl::Status heap = rt.heap().Check();
  const bool ok = bad == 0 && n == root->depth && heap.ok();
  std::printf("root-publish: %lu nodes (root says %lu), %lu bad, heap %s: %s\n",
              static_cast<unsigned long>(n), static_cast<unsigned long>(root->depth),
              static_cast<unsigned long>(bad), heap.ok() ? "ok" : heap.ToString().c_str(),
              ok ? "ok" : "BROKEN");
  return ok ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s POOL run [N] | check\n", argv[0]);
    return 2;
  }
  pmrt::RuntimeOptions options;
  options.create_size = 64 << 20;
  options.epochs.interval = std::chrono::milliseconds(5);  // many epochs per run
  if (std::string(argv[2]) == "check") {
    // The heap's deep check needs a quiet heap: no epoch boundary (which returns empty chunks),
    // reclaimer or background replay beside it.
    options.epochs.interval = std::chrono::milliseconds(0);
    options.txn.background = false;
    options.background_replay = false;
  }
  auto rt = pmrt::Runtime::Open(argv[1], options);
  if (!rt.ok()) {
    std::fprintf(stderr, "root-publish: %s\n", rt.status().ToString().c_str());
    return 2;
  }
  Root* root = *(*rt)->root<Root>();
  if (std::string(argv[2]) == "check") return Check(**rt, root);
  const uint64_t n = argc > 3 ? std::strtoull(argv[3], nullptr, 10) : ~uint64_t{0};
  uint64_t rng = static_cast<uint64_t>(getpid()) * 2654435761u + 3;
  for (uint64_t i = 0; i < n; ++i) {
    rng = rng * 6364136223846793005u + 1442695040888963407u;
    // Pushes a little more often than pops: the stack grows slowly, up to ~1000 nodes.
    const bool push = root->depth < 1000 && (rng >> 60) < 9;
    absl::Status st = push ? Push(**rt, root, rng >> 8) : Pop(**rt, root);
    if (!st.ok()) {
      std::fprintf(stderr, "root-publish: %s\n", st.ToString().c_str());
      return 1;
    }
  }
  return Check(**rt, root);
}
