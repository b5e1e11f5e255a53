// The crash stage of `pmrt demo` (tools/demo_internal.h, CrashAndRecover).
//
// A child process opens the loaded pool (every original key at version 0) and runs
// DemoOptions::threads writers, each following its own deterministic WriterSequence: updates
// of its original keys to their next version, and inserts of new keys. The child's main thread
// repeatedly reads how many operations each writer has completed, calls Manager::Sync, and then
// publishes those counts as synced. All counters live in a MAP_SHARED | MAP_ANONYMOUS page that
// the parent keeps after the child's death. The parent SIGKILLs the child mid-workload (a few
// ms after a Sync returned, while the writers run in a fresh epoch), reopens the pool (timing
// each step), and checks every key against this oracle, per writer t with S = synced and
// A = attempted (operations begun) at the kill:
//
//   * Replaying t's sequence gives, for each of its keys, lo = the version after S operations
//     and hi = the version after A operations (0 = the loaded value for an original key, absent
//     for a new key). A key must hold a well-formed value of its own (8 bytes, its tag) with
//     lo <= version <= hi. Below lo (or absent when lo says present) is LOST: a write that Sync
//     reported durable is gone. A bad tag or length, or a version above hi, is CORRUPT: the
//     tree holds something no completed write produced. Keys beyond what the writers created
//     (the tree's size against the keys found) count as corrupt too.
//   * Stronger, the epoch contract: the pool reopens as it was when the failed epoch began, so
//     each writer's keys together must show the state after one prefix of its sequence, of
//     length P with S <= P <= A. Each key narrows the range of P (the write that produced its
//     version is in the prefix; the next write of that key is not); an empty range is counted
//     as INCONSISTENT.
//
// Why the counters are safe to trust after SIGKILL: `attempted` is stored before the tree call
// of an operation and `done` after it; an operation's effect survives recovery only if its
// epoch completed, and the epoch completes only after the writer left the operation's guard, so
// the attempted store happened before (it is visible in the shared page). `synced` is published
// after a Sync that started after the counted operations returned: their epochs are <= the
// epoch Sync waited for.
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <new>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "ds/durable_masstree.h"
#include "tools/demo_internal.h"
#include "tools/kv_store.h"

namespace pmrt::tools::demo_internal {
namespace {

// ---- the writers' sequences -----------------------------------------------------------------

// The deterministic write sequence of writer t of T (`threads`) over `keys` original items.
// Writer t owns the original items k*T + t and the new items keys + m*T + t (m = 0, 1, ...).
// Each operation is, with probability 4/5 or once the writer has inserted keys/T new items, an
// update of a uniformly chosen owned original item to its next version; otherwise the insert of
// the writer's next new item at version 1. The child runs it; the parent replays it.
class WriterSequence {
 public:
  struct Op {
    uint64_t item;
    uint32_t version;  // the version this operation writes
    bool insert;
  };

  WriterSequence(uint64_t keys, int threads, int t)
      : keys_(keys),
        threads_(static_cast<uint64_t>(threads)),
        t_(static_cast<uint64_t>(t)),
        rng_{0xC0FFEEull * 977 + static_cast<uint64_t>(t)},
        versions_((keys - t_ + threads_ - 1) / threads_, 0),
        max_inserts_(keys / threads_) {}

  Op Next() {
    const uint64_t r = rng_.Next();
    if (r % 5 == 0 && inserts_ < max_inserts_) return {NewItem(inserts_++), 1, true};
    const uint64_t k = (r >> 8) % versions_.size();
    return {OwnedItem(k), ++versions_[k], false};
  }

  uint64_t owned() const { return versions_.size(); }
  uint64_t OwnedItem(uint64_t k) const { return k * threads_ + t_; }
  // The version of owned item k after the operations so far.
  uint32_t version(uint64_t k) const { return versions_[k]; }
  const std::vector<uint32_t>& versions() const { return versions_; }
  // New items inserted so far; the m-th is NewItem(m).
  uint64_t inserts() const { return inserts_; }
  uint64_t NewItem(uint64_t m) const { return keys_ + m * threads_ + t_; }

 private:
  const uint64_t keys_, threads_, t_;
  Rng rng_;
  std::vector<uint32_t> versions_;  // per owned original item
  const uint64_t max_inserts_;
  uint64_t inserts_ = 0;
};

// The child pauses kSyncPauseMs between Syncs; the parent kills it kKillAfterSyncUs after one.
constexpr int kSyncPauseMs = 10;
constexpr int kKillAfterSyncUs = 4000;

// ---- the shared page ------------------------------------------------------------------------

// Lives in a MAP_SHARED | MAP_ANONYMOUS mapping made before fork: the child writes it, the
// parent reads it, also after the child's SIGKILL. Counters are lock-free atomics, which work
// across processes on one mapping.
struct CrashShared {
  enum State : uint32_t { kStarting = 0, kRunning = 1, kFailed = 2 };
  struct alignas(64) Writer {
    std::atomic<uint64_t> attempted{0};  // operations begun (stored before the tree call)
    std::atomic<uint64_t> done{0};       // operations whose tree call returned
    std::atomic<uint64_t> synced{0};     // operations done before a Sync that returned
  };
  Writer writers[kMaxThreads];
  std::atomic<uint64_t> syncs{0};
  std::atomic<uint32_t> state{kStarting};
  char error[512] = {};  // the child's failure, when state is kFailed
};
static_assert(std::atomic<uint64_t>::is_always_lock_free);
static_assert(std::atomic<uint32_t>::is_always_lock_free);

// Records the child's failure for the parent and exits (no destructors: the parent reports).
[[noreturn]] void ChildFail(CrashShared* shared, const std::string& what) {
  std::snprintf(shared->error, sizeof(shared->error), "%s", what.c_str());
  shared->state.store(CrashShared::kFailed, std::memory_order_release);
  _exit(3);
}

// Writer t of the child: its sequence, forever (until SIGKILL).
void ChildWriter(const DemoOptions& o, int t, ds::DurableMasstree& tree, CrashShared* shared) {
  WriterSequence seq(o.keys, o.threads, t);
  CrashShared::Writer& w = shared->writers[t];
  for (uint64_t j = 0;; ++j) {
    const WriterSequence::Op op = seq.Next();
    // Release: orders the previous operation's `done` before; see the file comment for why a
    // later recovery cannot show this operation without this store.
    w.attempted.store(j + 1, std::memory_order_release);
    const uint64_t value = ValueOf(op.item, op.version);
    if (op.insert) {
      if (tree.insert_if_absent(KeyOf(op.item),
                                std::string_view(reinterpret_cast<const char*>(&value), 8)) !=
          ds::InsertResult::kInserted) {
        ChildFail(shared, absl::StrCat("writer ", t, ": insert of new item ", op.item,
                                       " did not insert (out of memory or key present)"));
      }
    } else if (tree.put_as(KeyOf(op.item), value) != ds::PutResult::kUpdated) {
      ChildFail(shared, absl::StrCat("writer ", t, ": update of item ", op.item,
                                     " did not find the key (or out of memory)"));
    }
    // Release: pairs with the syncing thread's acquire load; the operation returned.
    w.done.store(j + 1, std::memory_order_release);
  }
}

// The child: opens the pool, starts the writers, and syncs in a loop until killed.
[[noreturn]] void RunChild(const DemoOptions& o, CrashShared* shared) {
  RuntimeOptions ko;
  ko.pool.backend = o.backend;
  auto kv = DemoStore::Open(o.pool, ko);
  if (!kv.ok()) ChildFail(shared, "child: " + kv.status().ToString());
  std::vector<std::thread> writers;
  for (int t = 0; t < o.threads; ++t) {
    writers.emplace_back([&, t] { ChildWriter(o, t, kv->tree(), shared); });
  }
  shared->state.store(CrashShared::kRunning, std::memory_order_release);
  uint64_t done[kMaxThreads];
  for (;;) {
    // Acquire: pairs with the writers' release of `done`; these operations have returned, so
    // they ran in epochs <= the current one, which Sync makes durable.
    for (int t = 0; t < o.threads; ++t) {
      done[t] = shared->writers[t].done.load(std::memory_order_acquire);
    }
    if (auto st = kv->epochs().Sync(); !st.ok()) ChildFail(shared, "child Sync: " + st.ToString());
    for (int t = 0; t < o.threads; ++t) {
      shared->writers[t].synced.store(done[t], std::memory_order_release);
    }
    shared->syncs.fetch_add(1, std::memory_order_relaxed);
    std::this_thread::sleep_for(std::chrono::milliseconds(kSyncPauseMs));
  }
}

// ---- the parent: kill, reopen, verify -------------------------------------------------------

// What the verification of one writer's keys found.
struct WriterCheck {
  uint64_t verified = 0, present = 0, lost = 0, corrupt = 0;
  uint64_t prefix_lo = 0, prefix_hi = 0;  // the prefix lengths every key agrees with
  std::string first_problem;              // names the first lost or corrupt key
};

// The oracle for one writer's keys (the file comment): replays the writer's sequence to
// `synced` and to `attempted` operations, then checks each of its keys in a tree, narrowing the
// range of prefix lengths that every key agrees with.
class WriterOracle {
 public:
  WriterOracle(const DemoOptions& o, int t, uint64_t synced, uint64_t attempted);
  // Checks the writer's original keys (all must be present), then the new keys it began to
  // insert. REQUIRES: no writer runs on `tree`.
  WriterCheck Check(const ds::DurableMasstree& tree);

 private:
  enum class Found { kAbsent, kPresent, kMalformed };
  // Reads `item`'s value; its version in *version. A malformed value is counted as corrupt.
  Found Read(const ds::DurableMasstree& tree, uint64_t item, uint32_t* version);
  // Checks a key found at version `found` (0 is absent for a new key) against [lo, hi], and
  // narrows the prefix range with the window's writes of the key.
  void CheckVersion(uint64_t item, bool present, uint32_t found, uint32_t lo, uint32_t hi);
  void Problem(uint64_t item, const std::string& what);

  const int t_;
  WriterSequence seq_;                 // replayed to `attempted` operations
  std::vector<uint32_t> lo_versions_;  // versions of the owned originals after `synced` ops
  uint64_t lo_inserts_ = 0;            // new items inserted by the first `synced` ops
  // The operations in [synced, attempted) that wrote each item, ascending: the i-th wrote
  // version lo + i + 1.
  std::unordered_map<uint64_t, std::vector<uint64_t>> window_;
  WriterCheck c_;
  std::string value_;  // read buffer
};

WriterOracle::WriterOracle(const DemoOptions& o, int t, uint64_t synced, uint64_t attempted)
    : t_(t), seq_(o.keys, o.threads, t) {
  for (uint64_t j = 0; j < synced; ++j) seq_.Next();
  lo_versions_ = seq_.versions();
  lo_inserts_ = seq_.inserts();
  for (uint64_t j = synced; j < attempted; ++j) window_[seq_.Next().item].push_back(j);
  c_.prefix_lo = synced;
  c_.prefix_hi = attempted;
}

WriterCheck WriterOracle::Check(const ds::DurableMasstree& tree) {
  uint32_t version;
  for (uint64_t k = 0; k < seq_.owned(); ++k) {
    const uint64_t item = seq_.OwnedItem(k);
    const Found f = Read(tree, item, &version);
    if (f == Found::kPresent) {
      CheckVersion(item, true, version, lo_versions_[k], seq_.version(k));
    } else if (f == Found::kAbsent) {
      ++c_.verified;
      ++c_.lost;
      Problem(item, "original key missing");
    }
  }
  for (uint64_t m = 0; m < seq_.inserts(); ++m) {
    const uint64_t item = seq_.NewItem(m);
    const Found f = Read(tree, item, &version);
    if (f != Found::kMalformed) {
      CheckVersion(item, f == Found::kPresent, version, m < lo_inserts_ ? 1 : 0, 1);
    }
  }
  return c_;
}

WriterOracle::Found WriterOracle::Read(const ds::DurableMasstree& tree, uint64_t item,
                                       uint32_t* version) {
  *version = 0;
  if (!tree.get(KeyOf(item), &value_)) return Found::kAbsent;
  uint64_t v = 0;
  if (value_.size() == sizeof(v)) std::memcpy(&v, value_.data(), sizeof(v));
  if (value_.size() != sizeof(v) || !TagMatches(item, v)) {
    ++c_.verified;
    ++c_.corrupt;
    ++c_.present;
    Problem(item, absl::StrCat("holds a value of ", value_.size(), " bytes not written for it"));
    return Found::kMalformed;
  }
  *version = VersionOf(v);
  return Found::kPresent;
}

void WriterOracle::CheckVersion(uint64_t item, bool present, uint32_t found, uint32_t lo,
                                uint32_t hi) {
  ++c_.verified;
  if (found < lo) {
    ++c_.lost;
    return Problem(item, absl::StrCat("holds version ", found, ", synced version ", lo));
  }
  if (found > hi) {
    ++c_.corrupt;
    return Problem(item, absl::StrCat("holds version ", found, ", never written (last ", hi, ")"));
  }
  c_.present += present ? 1 : 0;
  if (lo == hi) return;
  // The write that produced `found` is in the prefix; the key's next write is not.
  const std::vector<uint64_t>& writes = window_[item];
  if (found > lo) c_.prefix_lo = std::max(c_.prefix_lo, writes[found - lo - 1] + 1);
  if (found < hi) c_.prefix_hi = std::min(c_.prefix_hi, writes[found - lo]);
}

void WriterOracle::Problem(uint64_t item, const std::string& what) {
  if (c_.first_problem.empty()) {
    c_.first_problem = absl::StrCat("writer ", t_, ", item ", item, ": ", what);
  }
}

// Forks the child, lets it write for o.crash_after seconds, and SIGKILLs it. Fills the
// counters read from the shared page after its death.
absl::Status RunAndKill(const DemoOptions& o, CrashShared* shared, uint64_t* synced,
                        uint64_t* attempted, uint64_t* done, uint64_t* syncs, double* ran_s) {
  std::fflush(nullptr);  // the child must not inherit unwritten output
  const pid_t pid = fork();
  if (pid < 0) return absl::InternalError(absl::StrCat("fork: ", std::strerror(errno)));
  if (pid == 0) RunChild(o, shared);

  // Wait for the child to open the pool and start writing (or to fail).
  int status = 0;
  const auto start = Clock::now();
  while (shared->state.load(std::memory_order_acquire) == CrashShared::kStarting) {
    if (waitpid(pid, &status, WNOHANG) == pid) {
      return absl::InternalError(absl::StrCat(
          "the writing child ended while opening the pool (wait status ", status, ")",
          shared->state.load() == CrashShared::kFailed ? absl::StrCat(": ", shared->error) : ""));
    }
    if (MsSince(start) > 60000) break;  // killed below; reported as not started
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  const auto run_start = Clock::now();
  while (MsSince(run_start) < o.crash_after * 1000 &&
         shared->state.load(std::memory_order_acquire) == CrashShared::kRunning) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  // Aim the kill mid-workload rather than into a boundary (where the writers wait): just after
  // a Sync returned, in the child's pause between Syncs, while the writers run freely in the
  // new epoch. (The background advancer may still be at a boundary then; either case is valid.)
  const uint64_t syncs_seen = shared->syncs.load(std::memory_order_acquire);
  const auto aim_start = Clock::now();
  while (shared->syncs.load(std::memory_order_acquire) == syncs_seen && MsSince(aim_start) < 1000 &&
         shared->state.load(std::memory_order_acquire) == CrashShared::kRunning) {
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  std::this_thread::sleep_for(std::chrono::microseconds(kKillAfterSyncUs));
  kill(pid, SIGKILL);  // not yet reaped: the pid is still the child's
  *ran_s = MsSince(run_start) / 1000;
  if (waitpid(pid, &status, 0) != pid) {
    return absl::InternalError(absl::StrCat("waitpid(", pid, "): ", std::strerror(errno)));
  }
  if (shared->state.load() == CrashShared::kStarting) {
    return absl::DeadlineExceededError("the writing child did not open the pool within 60 s");
  }
  if (shared->state.load() == CrashShared::kFailed) {
    return absl::InternalError(absl::StrCat("the writing child failed: ", shared->error));
  }
  if (!WIFSIGNALED(status) || WTERMSIG(status) != SIGKILL) {
    return absl::InternalError(
        absl::StrCat("the writing child ended before the kill (wait status ", status, ")"));
  }
  for (int t = 0; t < o.threads; ++t) {
    synced[t] = shared->writers[t].synced.load();
    attempted[t] = shared->writers[t].attempted.load();
    done[t] = shared->writers[t].done.load();
  }
  *syncs = shared->syncs.load();
  return absl::OkStatus();
}

double Ms(std::chrono::nanoseconds ns) {
  return std::chrono::duration<double, std::milli>(ns).count();
}

// The pool reopened after the kill, and how long it took.
struct Reopened {
  std::optional<DemoStore> kv;
  double open_ms = 0;       // Runtime::Open
  double first_get_ms = 0;  // from the start of the open to the first get's answer
  bool first_found = false;
};

// Reopens the pool after the kill, timing each step and the first get; prints the times.
absl::StatusOr<Reopened> ReopenTimed(const DemoOptions& o) {
  // The background advancer stays off while we verify: Heap::Check needs a heap that nothing
  // changes concurrently. It changes nothing in what Open does.
  RuntimeOptions ko;
  ko.pool.backend = o.backend;
  ko.epochs.interval = std::chrono::milliseconds(0);
  Reopened r;
  const auto start = Clock::now();
  auto kv = DemoStore::Open(o.pool, ko);
  if (!kv.ok()) return kv.status();
  r.open_ms = MsSince(start);
  r.first_found = kv->tree().get(KeyOf(0)).has_value();
  r.first_get_ms = MsSince(start);
  r.kv = std::move(*kv);
  const Runtime::OpenTimes& ot = r.kv->rt->open_times();
  std::printf(
      "  reopened in %.2f ms: pool %.2f, epochs + undo-log replay %.2f (%lu entries), "
      "heap %.2f, indexes %.3f, transactions %.3f; last shutdown %s\n",
      r.open_ms, Ms(ot.pool), Ms(ot.epochs),
      static_cast<unsigned long>(r.kv->epochs().stats().log_entries_replayed), Ms(ot.heap),
      Ms(ot.catalog), Ms(ot.engine), r.kv->pool().was_clean_shutdown() ? "clean" : "CRASH");
  std::printf("  first get answered %.2f ms after the open began (key %s)\n", r.first_get_ms,
              r.first_found ? "found" : "MISSING");
  return r;
}

// Checks every key, one oracle per writer, in parallel; prints each writer's prefix. The sum
// of the writers' checks (keys the tree holds beyond theirs count as corrupt); *inconsistent
// counts the writers whose keys fit no single prefix.
WriterCheck VerifyKeys(const DemoStore& kv, const DemoOptions& o, const uint64_t* synced,
                       const uint64_t* attempted, uint64_t* inconsistent) {
  std::vector<WriterCheck> checks(o.threads);
  {
    std::vector<std::thread> verifiers;
    for (int t = 0; t < o.threads; ++t) {
      verifiers.emplace_back(
          [&, t] { checks[t] = WriterOracle(o, t, synced[t], attempted[t]).Check(kv.tree()); });
    }
    for (auto& v : verifiers) v.join();
  }
  WriterCheck total;
  *inconsistent = 0;
  for (int t = 0; t < o.threads; ++t) {
    const WriterCheck& c = checks[t];
    total.verified += c.verified;
    total.present += c.present;
    total.lost += c.lost;
    total.corrupt += c.corrupt;
    if (total.first_problem.empty()) total.first_problem = c.first_problem;
    const bool consistent = c.prefix_lo <= c.prefix_hi;
    *inconsistent += consistent ? 0 : 1;
    std::printf(
        "  writer %d: %lu writes synced, %lu begun; its keys all show its state after "
        "write %lu%s%s\n",
        t, static_cast<unsigned long>(synced[t]), static_cast<unsigned long>(attempted[t]),
        static_cast<unsigned long>(c.prefix_lo),
        c.prefix_hi > c.prefix_lo ? absl::StrCat("..", c.prefix_hi).c_str() : "",
        consistent ? ", where the interrupted epoch began"
                   : "  INCONSISTENT: no single point fits every key");
  }
  const size_t size = kv.tree().size();
  if (size != total.present) {
    total.corrupt += size > total.present ? size - total.present : total.present - size;
    if (total.first_problem.empty()) {
      total.first_problem =
          absl::StrCat("the tree holds ", size, " keys, the writers account for ", total.present);
    }
  }
  return total;
}

// Reopens the pool after the kill and verifies it; prints as it goes.
absl::Status Recover(const DemoOptions& o, const uint64_t* synced, const uint64_t* attempted) {
  auto r = ReopenTimed(o);
  if (!r.ok()) return r.status();
  DemoStore& kv = *r->kv;
  const auto verify_start = Clock::now();
  uint64_t inconsistent = 0;
  const WriterCheck total = VerifyKeys(kv, o, synced, attempted, &inconsistent);
  const double verify_ms = MsSince(verify_start);

  ds::TreeShape shape;
  const absl::Status tree_ok = kv.tree().CheckInvariants(&shape);
  const absl::Status heap_ok = kv.heap().Check();
  const ds::DurableStats ds = kv.tree().durable_stats();
  std::printf(
      "  verified in %.0f ms; leaves repaired lazily on first access: %lu (%lu values, %lu "
      "permutations rolled back)\n",
      verify_ms, static_cast<unsigned long>(ds.leaves_recovered),
      static_cast<unsigned long>(ds.values_rolled_back),
      static_cast<unsigned long>(ds.perms_rolled_back));
  std::printf("  tree invariants: %s (%zu keys, %zu leaves, height %d); heap check: %s\n",
              tree_ok.ok() ? "ok" : tree_ok.ToString().c_str(), shape.keys, shape.leaves,
              shape.height, heap_ok.ok() ? "ok" : heap_ok.ToString().c_str());
  std::printf(
      "recovered in %.2f ms; first get after %.2f ms; %lu keys verified, %lu lost, %lu "
      "corrupt\n",
      r->open_ms, r->first_get_ms, static_cast<unsigned long>(total.verified),
      static_cast<unsigned long>(total.lost), static_cast<unsigned long>(total.corrupt));
  if (!r->first_found || total.lost + total.corrupt + inconsistent != 0) {
    return absl::DataLossError(absl::StrCat(o.pool, ": after the crash ", total.lost, " lost, ",
                                            total.corrupt, " corrupt, ", inconsistent,
                                            " writers inconsistent; first: ", total.first_problem));
  }
  if (!tree_ok.ok()) return tree_ok;
  if (!heap_ok.ok()) return heap_ok;
  return kv.Close();
}

}  // namespace

absl::Status CrashAndRecover(const DemoOptions& o) {
  if (o.keys < static_cast<uint64_t>(o.threads)) {
    return absl::InvalidArgumentError("crash stage: needs at least one key per writer thread");
  }
  std::printf("\n== crash: a child process writes, SIGKILLed mid-workload; reopen and verify ==\n");
  std::printf(
      "  %d writers: 80%% updates (each write a key's next version), 20%% inserts of new "
      "keys; the child Syncs every ~%d ms and records what is durable\n",
      o.threads, kSyncPauseMs);
  void* page =
      mmap(nullptr, sizeof(CrashShared), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (page == MAP_FAILED) {
    return absl::ResourceExhaustedError(
        absl::StrCat("mmap of the shared page: ", std::strerror(errno)));
  }
  auto* shared = new (page) CrashShared();
  uint64_t synced[kMaxThreads], attempted[kMaxThreads], done[kMaxThreads], syncs = 0;
  double ran_s = 0;
  absl::Status st = RunAndKill(o, shared, synced, attempted, done, &syncs, &ran_s);
  shared->~CrashShared();
  munmap(page, sizeof(CrashShared));
  if (!st.ok()) return st;
  uint64_t sum_synced = 0, sum_attempted = 0, sum_done = 0;
  for (int t = 0; t < o.threads; ++t) {
    sum_synced += synced[t];
    sum_attempted += attempted[t];
    sum_done += done[t];
  }
  std::printf(
      "  SIGKILL after %.2f s, %.0f ms after a Sync returned: %lu writes begun, %lu returned, "
      "%lu synced (%lu Syncs)\n",
      ran_s, kKillAfterSyncUs / 1000.0, static_cast<unsigned long>(sum_attempted),
      static_cast<unsigned long>(sum_done), static_cast<unsigned long>(sum_synced),
      static_cast<unsigned long>(syncs));
  return Recover(o, synced, attempted);
}

}  // namespace pmrt::tools::demo_internal
