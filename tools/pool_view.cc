#include "tools/pool_view.h"

#include <algorithm>
#include <chrono>
#include <string_view>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "epoch/epoch_layout.h"
#include "runtime/runtime.h"
#include "tools/bytes_format.h"
#include "tools/kv_store.h"

namespace pmrt::tools {
namespace {

// At most this many findings of one kind are listed; the rest are counted.
constexpr size_t kMaxListed = 20;

// Adds findings of one kind to a report, listing the first kMaxListed.
class Findings {
 public:
  Findings(std::vector<std::string>& out, std::string kind) : out_(out), kind_(std::move(kind)) {}
  ~Findings() {
    if (count_ > kMaxListed) {
      out_.push_back(absl::StrCat(kind_, ": ... and ", count_ - kMaxListed, " more"));
    }
  }
  void Add(const std::string& what) {
    if (++count_ <= kMaxListed) out_.push_back(what);
  }
  size_t count() const { return count_; }

 private:
  std::vector<std::string>& out_;
  std::string kind_;
  size_t count_ = 0;
};

// Every object the tree links to, by pool offset, with what reached it (TreeVisitor).
struct TreeObject {
  enum Kind : uint8_t { kDescriptor, kInterior, kLeaf, kValue } kind;
  int layer_or_slot;    // the node's layer; a value's slot
  uint64_t bytes;       // size of the object
  uint64_t holder = 0;  // a value's border node
};

const char* KindName(TreeObject::Kind k) {
  switch (k) {
    case TreeObject::kDescriptor:
      return "tree descriptor";
    case TreeObject::kInterior:
      return "interior node";
    case TreeObject::kLeaf:
      return "border node";
    case TreeObject::kValue:
      return "value object";
  }
  return "object";
}

// Records the objects a tree check reaches, and stops the check at one reached twice. With
// `values` false it records nodes only (what `info` needs to stay safe on a corrupt tree: only
// nodes can form a cycle).
class ObjectCollector : public ds::TreeVisitor {
 public:
  ObjectCollector(const Pool& pool, bool values) : pool_(pool), values_(values) {}

  absl::Status Node(const void* node, size_t bytes, bool leaf, int layer) override {
    return Add(node, TreeObject{leaf ? TreeObject::kLeaf : TreeObject::kInterior, layer, bytes});
  }
  absl::Status Value(const void* value, size_t bytes, const void* leaf, int slot) override {
    if (!values_) return absl::OkStatus();
    return Add(value, TreeObject{TreeObject::kValue, slot, bytes, pool_.offset_of(leaf)});
  }
  absl::Status Add(const void* p, TreeObject o) {
    const uint64_t off = pool_.offset_of(p);
    auto [it, inserted] = objects_.emplace(off, o);
    if (!inserted) {
      // A node or value linked from two places (or a cycle): following on could loop forever.
      return absl::DataLossError(absl::StrCat(KindName(o.kind), " at offset ", off,
                                              " is reached twice (first as a ",
                                              KindName(it->second.kind), ")"));
    }
    return absl::OkStatus();
  }
  const absl::flat_hash_map<uint64_t, TreeObject>& objects() const { return objects_; }

 private:
  const Pool& pool_;
  const bool values_;
  absl::flat_hash_map<uint64_t, TreeObject> objects_;
};

}  // namespace

int ExitStatusForOpenError(const absl::Status& st) {
  return st.code() == absl::StatusCode::kDataLoss || st.code() == absl::StatusCode::kInternal
             ? kExitFailed
             : kExitCannotOpen;
}

absl::StatusOr<std::unique_ptr<PoolView>> PoolView::Open(const std::string& path,
                                                         const std::string& layout,
                                                         const std::string& index, bool writable) {
  if (writable) {
    // The trial, ended (lock released) before the writing open.
    auto trial = Open(path, layout, index, /*writable=*/false);
    if (!trial.ok()) return trial.status();
    if (absl::Status st = (*trial)->Close(); !st.ok()) return st;
  }
  std::unique_ptr<PoolView> v(new PoolView());
  // A private mapping (a writable view: shared, once the trial above passed): every layer's
  // recovery runs in this process's memory and nothing reaches the file, so inspecting leaves
  // the pool byte-identical whether it opens, fails to, or needs recovery (the next program
  // that writes it recovers it for real).
  PoolOptions po;
  po.private_mapping = !writable;
  po.defer_attach = true;
  auto pool = Pool::Open(path, layout, po);
  if (!pool.ok()) return pool.status();
  v->pool_ = std::move(*pool);
  v->open_count_ = v->pool_->open_count();  // before this view's own (in memory only)
  v->kv_ = layout == kKvLayout;
  v->runtime_ = layout == kRuntimeLayout;
  v->index_ = index;
  if (absl::Status st = v->OpenLayers(); !st.ok()) return st;
  return v;
}

absl::Status PoolView::OpenLayers() {
  // 1. The epoch layer, if the pool has one (magic 0: no Manager ever attached). What is on
  //    media before recovery is kept for the report: recovery moves `completed` and may add
  //    failed ranges.
  const auto* area =
      static_cast<const epoch::EpochAreaLayout*>(pool_->region_base(PoolRegion::kEpoch));
  if (area->header.magic == 0) return absl::OkStatus();
  completed_before_ = area->completed.load(std::memory_order_relaxed);
  // A damaged heap header is refused before the manager's recovery writes anything.
  if (absl::Status st = alloc::Heap::ValidateHeader(*pool_); !st.ok()) return st;
  auto epochs = epoch::Manager::Open(*pool_, {.interval = std::chrono::milliseconds(0)});
  if (!epochs.ok()) return epochs.status();
  epochs_ = std::move(*epochs);

  // 2. The heap, if its region is formatted (its header's first word is the magic, 0 before
  //    the first Heap::Open): Heap::Open would format an unformatted region.
  if (*static_cast<const uint64_t*>(pool_->region_base(PoolRegion::kHeap)) == 0) {
    return absl::OkStatus();
  }
  auto heap = alloc::Heap::Open(*pool_, *epochs_);
  if (!heap.ok()) return heap.status();
  heap_ = std::move(*heap);

  // 3. Transactions, if the pool has a directory (0: no Engine ever attached; opening one would
  //    create it): committed transactions are replayed right after the heap's rollback, before
  //    anything allocates, as Engine::Open requires.
  if (runtime_) return OpenRuntime();
  if (pool_->state().txn_directory.value.load(std::memory_order_relaxed) != 0) {
    auto engine = txn::Engine::Open(*pool_, *epochs_, *heap_);
    if (!engine.ok()) return engine.status();
    txn_ = std::move(*engine);
  }
  return kv_ ? OpenTree() : absl::OkStatus();
}

absl::Status PoolView::OpenTree() {
  // A root never bound (root_type_size 0) holds no tree; binding it would write the pool.
  if (pool_->state().root_type_size.value.load(std::memory_order_relaxed) == 0) {
    return absl::OkStatus();
  }
  auto root = pool_->root<KvRoot>();
  if (!root.ok()) {
    return absl::Status(root.status().code(),
                        absl::StrCat(pool_->path(), ": not a key-value pool (root object): ",
                                     root.status().message()));
  }
  const KvRoot* r = *root;
  if (r->magic == 0 && r->tree == 0) return absl::OkStatus();  // no tree yet
  if (r->magic != KvRoot::kMagic || r->tree == 0) {
    return absl::DataLossError(absl::StrCat(pool_->path(), ": root object at offset ",
                                            pool_->offset_of(r),
                                            " is not a key-value root (bad magic)"));
  }
  auto tree = ds::DurableMasstree::Open(*pool_, *epochs_, *heap_, r->tree);
  if (!tree.ok()) return tree.status();
  tree_ = std::move(*tree);
  return absl::OkStatus();
}

absl::Status PoolView::OpenRuntime() {
  // A root never bound holds no runtime header yet (binding it would write the pool).
  const RuntimeHeader* h = nullptr;
  if (pool_->state().root_type_size.value.load(std::memory_order_relaxed) != 0) {
    h = static_cast<const RuntimeHeader*>(pool_->region_base(PoolRegion::kRoot));
    if (h->magic != RuntimeHeader::kMagic) {
      return absl::DataLossError(absl::StrCat(pool_->path(), ": the root region at offset ",
                                              pool_->offset_of(h),
                                              " holds no runtime header (bad magic)"));
    }
    auto catalog = ds::DurableMasstree::Open(*pool_, *epochs_, *heap_, h->catalog);
    if (!catalog.ok()) return catalog.status();
    catalog_ = std::move(*catalog);
    // Nothing reads the catalog (or, below, an index a replay writes) through links that were
    // not checked.
    if (absl::Status st = catalog_->CheckInvariants(nullptr, nullptr, /*values=*/false); !st.ok()) {
      return absl::DataLossError(absl::StrCat(pool_->path(), ": the catalog of indexes (at offset ",
                                              h->catalog, ") fails its check: ", st.message()));
    }
  }
  if (pool_->state().txn_directory.value.load(std::memory_order_relaxed) != 0) {
    txn::Options o;
    o.background = false;
    o.replay_logical = [this](const std::vector<txn::LogicalOp>& ops) -> absl::Status {
      if (catalog_ == nullptr) {
        return absl::DataLossError(
            absl::StrCat(pool_->path(), ": index operations to replay, and no catalog of indexes"));
      }
      for (const auto& e : ReadCatalog(*catalog_)) {
        if (e.descriptor == 0) continue;
        auto tree = ds::DurableMasstree::Open(*pool_, *epochs_, *heap_, e.descriptor);
        if (!tree.ok()) return tree.status();
        if (absl::Status st = (*tree)->CheckInvariants(nullptr, nullptr, /*values=*/false);
            !st.ok()) {
          return absl::DataLossError(absl::StrCat(pool_->path(), ": index '", EscapeBytes(e.name),
                                                  "' fails its check: ", st.message()));
        }
      }
      uint64_t applied = 0;
      return ReplayIndexOps(*pool_, *epochs_, *heap_, *catalog_, ops, &applied);
    };
    auto engine = txn::Engine::Open(*pool_, *epochs_, *heap_, o);
    if (!engine.ok()) return engine.status();
    txn_ = std::move(*engine);
  }
  if (catalog_ == nullptr) {
    if (!index_.empty()) {
      return absl::NotFoundError(absl::StrCat(pool_->path(), ": no index named '", index_,
                                              "' (the pool holds no index yet)"));
    }
    return absl::OkStatus();
  }
  const auto entries = ReadCatalog(*catalog_);
  if (index_.empty() && entries.size() == 1) index_ = entries[0].name;
  if (index_.empty()) return absl::OkStatus();
  for (const auto& e : entries) {
    if (e.name != index_) continue;
    auto tree = ds::DurableMasstree::Open(*pool_, *epochs_, *heap_, e.descriptor);
    if (!tree.ok()) {
      return absl::Status(tree.status().code(),
                          absl::StrCat(pool_->path(), ": index '", index_,
                                       "': ", std::string(tree.status().message())));
    }
    tree_ = std::move(*tree);
    return absl::OkStatus();
  }
  return absl::NotFoundError(absl::StrCat(pool_->path(), ": no index named '", index_, "'"));
}

absl::Status PoolView::Close() {
  tree_.reset();
  catalog_.reset();
  txn_.reset();
  heap_.reset();
  epochs_.reset();
  if (pool_ == nullptr) return absl::OkStatus();
  absl::Status st = pool_->Close();
  pool_.reset();
  return st;
}

PoolView::~PoolView() { Close().IgnoreError(); }

PoolReport PoolView::Report() const {
  PoolReport r;
  const PoolHeader& h = pool_->header();
  r.path = pool_->path();
  r.layout = std::string(pool_->layout());
  for (const uint8_t b : h.uuid) absl::StrAppendFormat(&r.uuid, "%02x", b);
  r.backend = std::string(BackendName(pool_->writing_backend()));
  r.format_major = h.major;
  r.format_minor = h.minor;
  r.size = pool_->size();
  r.created_size = h.pool_size;
  r.create_time_ns = h.create_time_ns;
  r.open_count = open_count_;
  r.clean_shutdown = pool_->was_clean_shutdown();
  const char* names[] = {"root", "epoch", "log", "heap"};
  for (int i = 0; i < 4; ++i) {
    const RegionDesc d = pool_->region(static_cast<PoolRegion>(i));
    r.regions.push_back({names[i], d.offset, d.size});
  }
  if (epochs_ != nullptr) {
    r.has_epochs = true;
    r.completed_before = completed_before_;
    r.current = epochs_->current();
    r.completed = epochs_->completed();
    r.execution_first = epochs_->execution_first();
    r.failed = epochs_->failed_ranges();
    // Manager::Recover records c+1..c+2 (c: the completed epoch on media) after a crash.
    if (!r.clean_shutdown)
      r.failed_at_open.emplace_back(completed_before_ + 1, completed_before_ + 2);
    r.log_entries_replayed = epochs_->stats().log_entries_replayed;
    r.log_blocks_total = epochs_->log().blocks_total();
    r.log_blocks_free = epochs_->log().blocks_free();
    r.log_block_size = epoch::kLogBlockSize;
  }
  if (heap_ != nullptr) {
    r.has_heap = true;
    r.heap = heap_->Stats();
  }
  if (txn_ != nullptr) {
    r.has_txn = true;
    r.txn_directory = pool_->state().txn_directory.value.load(std::memory_order_relaxed);
  }
  r.kv = kv_;
  r.runtime = runtime_;
  r.index = index_;
  if (catalog_ != nullptr) {
    for (const auto& e : ReadCatalog(*catalog_)) {
      uint64_t keys = 0;
      if (e.descriptor != 0) {
        auto tree = ds::DurableMasstree::Open(*pool_, *epochs_, *heap_, e.descriptor);
        ds::TreeShape shape;
        // The check counts the keys (a walk bounded whatever the pool holds).
        absl::Status st =
            tree.ok() ? (*tree)->CheckInvariants(&shape, nullptr, /*values=*/false) : tree.status();
        if (st.ok()) {
          keys = shape.keys;
        } else if (r.tree_error.empty()) {
          r.tree_error = absl::StrCat("index '", EscapeBytes(e.name), "': ", st.message());
        }
      }
      r.indexes.emplace_back(e.name, keys);
    }
  }
  if (tree_ != nullptr) {
    r.has_tree = true;
    r.tree_descriptor = tree_->descriptor();
    ObjectCollector nodes(*pool_, /*values=*/false);
    if (absl::Status st = tree_->CheckInvariants(&r.shape, &nodes); !st.ok()) {
      r.tree_error = std::string(st.message());
    }
    r.keys = r.shape.keys;
  }
  return r;
}

CheckReport PoolView::Check() const {
  CheckReport r;
  r.passed.push_back("header and state page: magic, version, layout, regions, checksum");
  if (epochs_ == nullptr) {
    r.skipped.push_back("epoch area, heap, tree: not initialized (no epoch layer in this pool)");
    return r;
  }
  CheckEpochs(r);
  if (heap_ == nullptr) {
    r.skipped.push_back("heap, tree: not formatted (no heap in this pool)");
    return r;
  }
  CheckHeapAndTree(r);
  return r;
}

void PoolView::CheckEpochs(CheckReport& r) const {
  // Manager::Open validated the area's header checksum and loaded the failed set; here: the
  // set is ordered and disjoint, and every failed epoch precedes this execution.
  const EpochRanges failed = epochs_->failed_ranges();
  Findings f(r.problems, "epoch area");
  for (size_t i = 0; i < failed.size(); ++i) {
    const auto [lo, hi] = failed[i];
    if (lo > hi || lo == 0 || (i > 0 && lo <= failed[i - 1].second)) {
      f.Add(absl::StrCat("epoch area: failed range ", i, " [", lo, ", ", hi,
                         "] is empty, zero or not after the previous range"));
    }
    if (hi >= epochs_->execution_first()) {
      f.Add(absl::StrCat("epoch area: failed range ", i, " [", lo, ", ", hi,
                         "] reaches this execution's first epoch ", epochs_->execution_first()));
    }
  }
  if (epochs_->completed() + 1 < epochs_->execution_first()) {
    f.Add(absl::StrCat("epoch area: completed epoch ", epochs_->completed(),
                       " is behind this execution's first epoch ", epochs_->execution_first()));
  }
  if (f.count() == 0) {
    r.passed.push_back(absl::StrCat("epoch area: checksum, completed epoch ", epochs_->completed(),
                                    ", ", failed.size(), " failed range(s), ordered and disjoint"));
  }
}

void PoolView::CheckHeapAndTree(CheckReport& r) const {
  // 1. Heap metadata (chunk states, extent runs, bitmaps), then the blocks it yields: each
  //    inside the heap region, in address order, none overlapping the next.
  if (absl::Status st = heap_->Check(); !st.ok()) {
    r.problems.push_back(absl::StrCat("heap: ", st.message()));
  } else {
    r.passed.push_back("heap metadata: chunk states, extent runs, bitmaps");
  }
  std::vector<alloc::BlockInfo> blocks;
  if (absl::Status st = heap_->Walk([&](const alloc::BlockInfo& b) { blocks.push_back(b); });
      !st.ok()) {
    r.problems.push_back(absl::StrCat("heap walk: ", st.message()));
    return;
  }
  const RegionDesc heap_region = pool_->region(PoolRegion::kHeap);
  {
    Findings f(r.problems, "heap blocks");
    for (size_t i = 0; i < blocks.size(); ++i) {
      const alloc::BlockInfo& b = blocks[i];
      if (b.offset < heap_region.offset || b.size > heap_region.offset + heap_region.size ||
          b.offset > heap_region.offset + heap_region.size - b.size) {
        f.Add(absl::StrCat("heap: block at offset ", b.offset, " (", b.size,
                           " bytes) lies outside the heap region"));
      }
      if (i > 0 && blocks[i - 1].offset + blocks[i - 1].size > b.offset) {
        f.Add(absl::StrCat("heap: block at offset ", blocks[i - 1].offset, " (", blocks[i - 1].size,
                           " bytes) overlaps the block at offset ", b.offset));
      }
    }
    if (f.count() == 0) {
      r.passed.push_back(
          absl::StrCat("heap walk: ", blocks.size(), " live blocks, in the region, no overlaps"));
    }
  }
  if (runtime_) {
    CheckIndexes(r);
    return;
  }
  if (!kv_) {
    r.skipped.push_back("tree, reachability: not a key-value pool");
    return;
  }
  if (tree_ == nullptr) {
    // A key-value pool without a tree owns no heap blocks.
    Findings f(r.problems, "leaks");
    for (const alloc::BlockInfo& b : blocks) {
      f.Add(absl::StrCat("leak: live heap block at offset ", b.offset, " (", b.size,
                         " bytes), and the pool holds no tree"));
    }
    return;
  }

  // 2. The tree's structure, collecting every object it links to.
  ObjectCollector objects(*pool_, /*values=*/true);
  if (absl::Status st = objects.Add(
          tree_->policy().descriptor(),
          TreeObject{TreeObject::kDescriptor, 0, ds::DurableMasstree::kDescriptorBytes});
      !st.ok()) {
    r.problems.push_back(absl::StrCat("tree: ", st.message()));
    return;
  }
  ds::TreeShape shape;
  if (absl::Status st = tree_->CheckInvariants(&shape, &objects);
      st.code() == absl::StatusCode::kDataLoss) {
    // The structure holds; values fail their checksums: each named, and the walk goes on.
    r.problems.push_back(absl::StrCat("tree (descriptor at offset ", tree_->descriptor(),
                                      "): ", shape.bad_checksums, " of ", shape.checksummed_values,
                                      " values fail their checksum"));
    for (const std::string& f : shape.checksum_failures) {
      r.problems.push_back(absl::StrCat("value: ", f));
    }
  } else if (!st.ok()) {
    r.problems.push_back(
        absl::StrCat("tree (descriptor at offset ", tree_->descriptor(), "): ", st.message()));
    r.skipped.push_back("reachability: not checked (the tree is not intact)");
    return;
  }
  r.passed.push_back(absl::StrCat(
      "tree: ", shape.keys, " keys, height ", shape.height, ", ", shape.leaves, " border and ",
      shape.interiors, " interior nodes in ", shape.layers, " layers: structural invariants hold"));

  // 3. Reachability: every object of the tree is a live block at least its size, and every
  //    live block is an object of the tree (nothing else in a key-value pool allocates).
  std::vector<uint64_t> bad_values;  // value objects that are not live blocks: keys named below
  {
    Findings f(r.problems, "tree objects");
    for (const auto& [off, o] : objects.objects()) {
      auto it =
          std::lower_bound(blocks.begin(), blocks.end(), off,
                           [](const alloc::BlockInfo& b, uint64_t x) { return b.offset < x; });
      const bool live = it != blocks.end() && it->offset == off;
      if (live && it->size >= o.bytes) continue;
      std::string where =
          o.kind == TreeObject::kValue
              ? absl::StrCat(" (slot ", o.layer_or_slot, " of the border node at ", o.holder, ")")
          : o.kind == TreeObject::kDescriptor ? std::string()
                                              : absl::StrCat(" (layer ", o.layer_or_slot, ")");
      f.Add(absl::StrCat("heap/tree: ", KindName(o.kind), " at offset ", off, where, " of ",
                         o.bytes, " bytes ",
                         live ? absl::StrCat("lies in a live block of only ", it->size, " bytes")
                              : std::string("is not a live heap block")));
      if (o.kind == TreeObject::kValue) bad_values.push_back(off);
    }
  }
  {
    Findings f(r.problems, "leaks");
    for (const alloc::BlockInfo& b : blocks) {
      if (!objects.objects().contains(b.offset)) {
        f.Add(absl::StrCat("leak: live heap block at offset ", b.offset, " (", b.size,
                           " bytes) is not reachable from the tree"));
      }
    }
  }
  if (!bad_values.empty()) {
    // The structure is intact (checked above), so a scan is safe: name the keys. A scan's value
    // view starts after the object's header, its key suffix and, in the inline form, its
    // checksum (DurableMasstree::kMaxValueHeaderBytes); the suffix is at most the key's length.
    std::sort(bad_values.begin(), bad_values.end());
    if (bad_values.size() > kMaxListed) bad_values.resize(kMaxListed);
    std::sort(bad_values.begin(), bad_values.end());
    constexpr uint64_t kHeader = ds::DurableMasstree::kMaxValueHeaderBytes;
    tree_->scan("", SIZE_MAX, [&](std::string_view key, std::string_view value) {
      const uint64_t data = pool_->offset_of(value.data());
      const uint64_t lo = data < kHeader + key.size() ? 0 : data - kHeader - key.size();
      for (auto it = std::lower_bound(bad_values.begin(), bad_values.end(), lo);
           it != bad_values.end() && *it < data; ++it) {
        if (tree_->ValueOfObject(*it).data() != value.data()) continue;
        r.problems.push_back(absl::StrCat("heap/tree: the value object at offset ", *it,
                                          " holds the value of key \"", EscapeBytes(key), "\""));
      }
      return true;
    });
  }
  if (r.problems.empty()) {
    r.passed.push_back(absl::StrCat("reachability: ", objects.objects().size(),
                                    " tree objects are live heap blocks, and all ", blocks.size(),
                                    " live blocks are reachable (no leaks)"));
  }
}

void PoolView::CheckIndexes(CheckReport& r) const {
  // A runtime's pool: the catalog and every index tree pass their structural checks, and every
  // object they link to is a live heap block. Leaks are not looked for: the program's own
  // objects (pnew) are reachable only through its own pointers, which the tool cannot follow.
  r.skipped.push_back(
      "leaks: a runtime's pool holds the program's objects, reachable only through its pointers");
  if (catalog_ == nullptr) {
    r.skipped.push_back("indexes: the pool holds no catalog yet");
    return;
  }
  std::vector<std::pair<std::string, const ds::DurableMasstree*>> trees = {
      {"catalog", catalog_.get()}};
  std::vector<std::unique_ptr<ds::DurableMasstree>> opened;
  for (const auto& e : ReadCatalog(*catalog_)) {
    if (e.descriptor == 0) {
      r.problems.push_back(
          absl::StrCat("catalog: the entry of index '", EscapeBytes(e.name), "' is not 16 bytes"));
      continue;
    }
    auto tree = ds::DurableMasstree::Open(*pool_, *epochs_, *heap_, e.descriptor);
    if (!tree.ok()) {
      r.problems.push_back(absl::StrCat("index '", EscapeBytes(e.name),
                                        "': ", std::string(tree.status().message())));
      continue;
    }
    opened.push_back(std::move(*tree));
    trees.emplace_back(absl::StrCat("index '", EscapeBytes(e.name), "'"), opened.back().get());
  }
  for (const auto& [name, tree] : trees) {
    ObjectCollector objects(*pool_, /*values=*/true);
    ds::TreeShape shape;
    if (absl::Status st = tree->CheckInvariants(&shape, &objects); !st.ok()) {
      r.problems.push_back(
          absl::StrCat(name, " (descriptor at offset ", tree->descriptor(), "): ", st.message()));
      continue;
    }
    Findings f(r.problems, name);
    for (const auto& [off, o] : objects.objects()) {
      if (heap_->UsableSize(pool_->at(off)) < o.bytes) {
        f.Add(absl::StrCat(name, ": ", KindName(o.kind), " at offset ", off, " of ", o.bytes,
                           " bytes is not a live heap block of that size"));
      }
    }
    if (f.count() == 0) {
      r.passed.push_back(absl::StrCat(name, ": ", shape.keys, " keys, height ", shape.height,
                                      ": structural invariants hold, every object is live"));
    }
  }
}

}  // namespace pmrt::tools
