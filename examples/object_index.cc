// An index of persistent objects on pmrt::Runtime: each key of the index "items" names an Item
// allocated with pnew; transactions create items, update them in place, and delete them
// (pdelete), always together with the index.
//
//   pmrt-example-object-index POOL run [N]   # N transactions (default: until killed)
//   pmrt-example-object-index POOL check     # the invariants; exit 0 when they hold
//
// Invariants, whatever moment the process is killed at: every key names a live Item whose id is
// the key's and whose checksum matches its fields; the root's count equals the index's size;
// the heap is consistent.
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "runtime/runtime.h"

namespace {

constexpr uint64_t kKeys = 512;

struct Item {
  uint64_t id, version, value, checksum;  // checksum = id ^ version ^ value
};
struct Root {
  uint64_t items;  // the index's size, kept by the same transactions
};

// Creates, updates or deletes item `id`, and its key in `items`, in one transaction.
absl::Status Touch(Root* root, pmrt::Index* items, uint64_t id, uint64_t value, bool erase) {
  const std::string key = absl::StrCat("item:", id);
  return pmrt::txn::Run([&]() -> absl::Status {
    std::optional<std::string> ref = items->get(key);
    Item* it = ref ? items->Deref<Item>(*ref) : nullptr;
    if (it == nullptr) {  // create it
      it = pmrt::alloc::pnew<Item>(Item{id, 1, value, id ^ 1 ^ value});
      if (it == nullptr) return absl::ResourceExhaustedError("pnew");
      RETURN_IF_ERROR(items->put(key, items->Ref(it)).status());
      return pmrt::txn::write(&root->items, root->items + 1);
    }
    if (erase) {  // delete it
      RETURN_IF_ERROR(items->remove(key).status());
      RETURN_IF_ERROR(pmrt::alloc::pdelete(it));
      return pmrt::txn::write(&root->items, root->items - 1);
    }
    RETURN_IF_ERROR(pmrt::txn::write(&it->version, it->version + 1));  // update in place
    RETURN_IF_ERROR(pmrt::txn::write(&it->value, value));
    return pmrt::txn::write(&it->checksum, id ^ it->version ^ value);
  });
}

int Check(pmrt::Runtime& rt, Root* root, pmrt::Index* items) {
  uint64_t n = 0, bad = 0;
  items->scan("", ~size_t{0}, [&](std::string_view k, std::string_view v) {
    const Item* it = items->Deref<Item>(v);
    ++n;
    if (it == nullptr || k != absl::StrCat("item:", it->id) ||
        it->checksum != (it->id ^ it->version ^ it->value)) {
      ++bad;
    }
    return true;
  });
  const absl::Status heap = rt.heap().Check();
  const bool ok = bad == 0 && n == root->items && heap.ok();
  std::printf("object-index: %lu items (root says %lu), %lu bad, heap %s: %s\n",
              static_cast<unsigned long>(n), static_cast<unsigned long>(root->items),
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
  options.create_size = 64 << 20;  // created at the first run
  if (std::string(argv[2]) == "check") {
    // The heap's deep check needs a quiet heap: no epoch boundary (which returns empty chunks),
    // reclaimer or background replay beside it.
    options.epochs.interval = std::chrono::milliseconds(0);
    options.txn.background = false;
    options.background_replay = false;
  }
  auto rt = pmrt::Runtime::Open(argv[1], options);
  if (!rt.ok()) {
    std::fprintf(stderr, "object-index: %s\n", rt.status().ToString().c_str());
    return 2;
  }
  Root* root = *(*rt)->root<Root>();
  auto items = (*rt)->index("items");
  if (!items.ok()) {
    std::fprintf(stderr, "object-index: %s\n", items.status().ToString().c_str());
    return 2;
  }
  if (std::string(argv[2]) == "check") return Check(**rt, root, *items);
  const uint64_t n = argc > 3 ? std::strtoull(argv[3], nullptr, 10) : ~uint64_t{0};
  uint64_t rng = static_cast<uint64_t>(getpid()) * 2654435761u + 7;
  for (uint64_t i = 0; i < n; ++i) {
    rng = rng * 6364136223846793005u + 1442695040888963407u;
    if (absl::Status st = Touch(root, *items, (rng >> 33) % kKeys, rng >> 20, (rng >> 60) < 4);
        !st.ok()) {
      std::fprintf(stderr, "object-index: %s\n", st.ToString().c_str());
      return 1;
    }
  }
  return Check(**rt, root, *items);
}
