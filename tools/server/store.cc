#include "tools/server/store.h"

#include <sys/stat.h>

#include <cerrno>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"

namespace pmrt::server {
namespace {

// The key of index db0.meta that a FLUSHALL holds while it runs.
constexpr char kFlushMark[] = "flushall";

}  // namespace

std::string HashFieldPrefix(std::string_view key) {
  // Each 0x00 byte of the key becomes 0x00 0xff, and 0x00 0x01 ends it: no prefix of one key's
  // encoding is another's, and the encodings sort as the keys do.
  std::string p;
  p.reserve(key.size() + 2);
  for (char c : key) {
    p.push_back(c);
    if (c == '\0') p.push_back('\xff');
  }
  p.append("\0\x01", 2);
  return p;
}

std::string HashFieldKey(std::string_view key, std::string_view field) {
  std::string k = HashFieldPrefix(key);
  k.append(field);
  return k;
}

absl::StatusOr<std::unique_ptr<Store>> Store::Open(const std::string& path,
                                                   const StoreOptions& options) {
  const auto start = std::chrono::steady_clock::now();
  struct stat sb;
  const bool create = options.create_size != 0 && stat(path.c_str(), &sb) != 0 && errno == ENOENT;
  if (options.trial_open && !create) {
    // The same open in memory, replay and check included; it ends (pool closed, lock released)
    // before the real one.
    auto trial = OpenOnce(path, options, /*trial=*/true);
    if (!trial.ok()) return trial.status();
    if (absl::Status st = (*trial)->Close(); !st.ok()) return st;
  }
  auto store = OpenOnce(path, options, /*trial=*/false);
  if (store.ok()) (*store)->open_time_ = std::chrono::steady_clock::now() - start;
  return store;
}

absl::StatusOr<std::unique_ptr<Store>> Store::OpenOnce(const std::string& path,
                                                       const StoreOptions& options, bool trial) {
  std::unique_ptr<Store> s(new Store());
  struct stat sb;
  s->created_ =
      !trial && options.create_size != 0 && stat(path.c_str(), &sb) != 0 && errno == ENOENT;
  RuntimeOptions ro;
  ro.create_size = trial ? 0 : options.create_size;
  ro.pool = options.pool;
  ro.epochs = options.epochs;
  ro.txn = options.txn;
  ro.trial_open = false;  // this class runs its own trial, the tree's check included
  // The server reads and writes the tree directly: every entry of a restart's replay is
  // applied below, before the first client.
  ro.background_replay = false;
  if (trial) {
    ro.pool.private_mapping = true;
    ro.epochs.interval = std::chrono::milliseconds(0);  // no advancer thread for the trial
    ro.txn.background = false;
  }
  auto rt = Runtime::Open(path, std::move(ro));
  if (!rt.ok()) {
    if (rt.status().code() == absl::StatusCode::kInvalidArgument &&
        rt.status().message().find("pool layout is") != std::string_view::npos) {
      return absl::InvalidArgumentError(
          absl::StrCat(rt.status().message(), " (`pmrt serve` serves runtime pools, layout \"",
                       kRuntimeLayout, "\": give it a new path and it creates one)"));
    }
    return rt.status();
  }
  if (absl::Status st = s->Bind(std::move(*rt), path, options); !st.ok()) return st;
  return s;
}

absl::StatusOr<std::unique_ptr<Store>> Store::Attach(std::unique_ptr<Pool> pool,
                                                     const StoreOptions& options) {
  RuntimeOptions ro;
  ro.epochs = options.epochs;
  ro.txn = options.txn;
  ro.background_replay = false;
  const std::string path = pool->path();
  auto rt = Runtime::Attach(std::move(pool), std::move(ro));
  if (!rt.ok()) return rt.status();
  std::unique_ptr<Store> s(new Store());
  if (absl::Status st = s->Bind(std::move(*rt), path, options); !st.ok()) return st;
  return s;
}

absl::Status Store::Bind(std::unique_ptr<Runtime> rt, const std::string& path,
                         const StoreOptions& options) {
  rt_ = std::move(rt);
  if (absl::Status st = rt_->finish_replay(); !st.ok()) {
    return absl::Status(st.code(), absl::StrCat(path,
                                                ": applying the index operations of the "
                                                "transactions a crash interrupted: ",
                                                st.message()));
  }
  auto db = rt_->index(kDbIndex);
  if (!db.ok()) return db.status();
  db_ = *db;
  for (auto [name, index] : {std::pair{kExpiresIndex, &expires_}, std::pair{kHashesIndex, &hashes_},
                             std::pair{kFieldsIndex, &fields_}, std::pair{kMetaIndex, &meta_}}) {
    auto found = rt_->index(name);
    if (!found.ok()) return found.status();
    *index = *found;
  }
  if (options.check_tree) {
    for (Index* index : {db_, expires_, hashes_, fields_}) {
      if (absl::Status st = index->tree().CheckInvariants(nullptr, nullptr, /*values=*/false);
          !st.ok()) {
        return absl::DataLossError(absl::StrCat(path, ": index ", index->name(),
                                                " fails its check (`pmrt check ", path,
                                                "` lists the damage): ", st.message()));
      }
    }
  }
  if (meta_->tree().get(kFlushMark).has_value()) {
    // A FLUSHALL a crash interrupted: its mark is durable, so it is finished now.
    if (absl::Status st = FlushAll(); !st.ok()) {
      return absl::Status(st.code(), absl::StrCat(path,
                                                  ": finishing the FLUSHALL a crash "
                                                  "interrupted: ",
                                                  st.message()));
    }
  }
  return absl::OkStatus();
}

absl::Status Store::RemoveEverything() {
  constexpr size_t kSlice = 256, kSlicesPerEpoch = 16;
  size_t slices = 0;
  for (Index* index : {db_, expires_, hashes_, fields_}) {
    for (;;) {
      // A slice of keys copied under one scan; removed outside it (each removal its own guard).
      std::vector<std::string> keys;
      index->tree().scan("", kSlice, [&](std::string_view k, std::string_view) {
        keys.emplace_back(k);
        return true;
      });
      if (keys.empty()) break;
      for (const std::string& k : keys) {
        if (absl::StatusOr<bool> r = index->remove(k); !r.ok()) return r.status();
      }
      if (++slices % kSlicesPerEpoch == 0) RETURN_IF_ERROR(rt_->epochs().Advance());
    }
  }
  return absl::OkStatus();
}

absl::Status Store::FlushAll() {
  // The mark, durable before the first removal: a crash from here on finishes the flush.
  txn::Engine& engine = rt_->engine();
  RETURN_IF_ERROR(engine.Begin());
  if (absl::StatusOr<ds::PutResult> r = meta_->put(kFlushMark, ""); !r.ok()) {
    (void)engine.Abort();
    return r.status();
  }
  RETURN_IF_ERROR(engine.Commit());
  absl::Status st = RemoveEverything();
  // The removals durable before the mark goes (and no epoch-scoped write of them left for a
  // crash to roll back beneath the transaction that removes it).
  if (st.ok()) st = rt_->epochs().Sync();
  if (st.ok()) st = engine.Begin();
  if (st.ok()) {
    if (absl::StatusOr<bool> r = meta_->remove(kFlushMark); !r.ok()) {
      (void)engine.Abort();
      st = r.status();
    } else {
      st = engine.Commit();
    }
  }
  if (!st.ok()) {
    // The mark is durable: the next open finishes the flush, and would take with it whatever
    // was written from now on. So nothing more is written in this run.
    rt_->pool().health_state().Fail(absl::StrCat("a FLUSHALL failed after its durable mark (",
                                                 st.message(),
                                                 "); the next open of the pool finishes it"));
  }
  return st;
}

absl::Status Store::Close() {
  db_ = expires_ = hashes_ = fields_ = meta_ = nullptr;
  if (rt_ == nullptr) return absl::OkStatus();
  absl::Status st = rt_->Close();
  rt_.reset();
  return st;
}

Store::~Store() { Close().IgnoreError(); }

}  // namespace pmrt::server
