// Runtime's lazy replay of a crash's index operations (runtime/internal/replay_journal.h says
// the journal's persistence order; docs/durability.md, "Restart").
#include <chrono>
#include <cstdio>
#include <thread>
#include <utility>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "runtime/internal/pending_replay.h"
#include "runtime/internal/replay_journal.h"
#include "runtime/runtime.h"

namespace pmrt {

using runtime_internal::IndexOp;

absl::Status Runtime::ReadJournalAtOpen() {
  const uint64_t offset = header().journal;
  if (offset == 0) return absl::OkStatus();
  auto journal = runtime_internal::ReadJournal(*pool_, *heap_, offset);
  if (!journal.ok()) return journal.status();
  pending_->journal = std::move(*journal);
  return absl::OkStatus();
}

absl::Status Runtime::Replay(const std::vector<txn::LogicalOp>& ops) {
  const auto start = std::chrono::steady_clock::now();
  absl::Cleanup timed = [&] {
    replay_ms_ +=
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  };
  std::vector<uint64_t> ids;
  for (const CatalogEntry& e : ReadCatalog(*catalog_))
    if (e.descriptor != 0) ids.push_back(e.id);
  std::sort(ids.begin(), ids.end());
  runtime_internal::Journal& old = pending_->journal;
  uint64_t stamp_hi = 0;
  auto plan =
      runtime_internal::PlanReplay(*epochs_, old.offset != 0 ? &old : nullptr, ops, ids, &stamp_hi);
  if (!plan.ok()) return plan.status();
  replayed_ = plan->size();
  // The trial open only validates: nothing is written on its private mapping.
  if (trial_ || stamp_hi == old.stamp_hi) return absl::OkStatus();  // nothing newer than old
  // The new journal (the old one's entries not applied, then the newer operations) replaces the
  // old in the engine's recovery epoch (this runs inside its guard), where the engine also
  // records the transactions as replayed: its Sync makes both durable, and a crash before keeps
  // the old journal and the log.
  epoch::Guard g(*epochs_);
  auto offset = runtime_internal::WriteJournal(*pool_, *heap_, *plan, stamp_hi);
  if (!offset.ok()) return offset.status();
  RuntimeHeader& h = header();
  RETURN_IF_ERROR(epochs_->log().Snapshot(&h, sizeof(h), &h.logged_epoch));
  const uint64_t previous = h.journal;
  h.journal = *offset;
  if (previous != 0) RETURN_IF_ERROR(heap_->Free(pool_->at(previous)));
  auto journal = runtime_internal::ReadJournal(*pool_, *heap_, *offset);
  if (!journal.ok()) return journal.status();
  old = std::move(*journal);
  return absl::OkStatus();
}

absl::Status Runtime::StartPendingReplay(bool background) {
  PendingReplay& p = *pending_;
  if (trial_ || p.journal.offset == 0) return absl::OkStatus();
  std::lock_guard<std::mutex> l(mu_);
  std::lock_guard<std::mutex> pl(p.mu);
  std::map<uint64_t, std::string> names;
  for (CatalogEntry& e : ReadCatalog(*catalog_))
    if (e.descriptor != 0) names[e.id] = std::move(e.name);
  p.count = p.journal.entries.size();
  p.state = std::make_unique<std::atomic<EntryState>[]>(p.count);
  for (size_t i = 0; i < p.count; ++i) {
    const IndexOp& e = p.journal.entries[i];
    auto name = names.find(e.id);
    if (name == names.end() || runtime_internal::AppliedDurably(*epochs_, *e.mark)) {
      p.state[i].store(EntryState::kApplied, std::memory_order_relaxed);
      continue;
    }
    if (!p.index_of.contains(e.id)) {
      auto index = FindLocked(name->second);
      if (!index.ok()) return index.status();
      p.index_of[e.id] = *index;
    }
    p.by_key[e.id][e.key] = static_cast<uint32_t>(i);
    p.state[i].store(EntryState::kPending, std::memory_order_relaxed);
    ++p.left;
  }
  if (p.left == 0) {
    p.retire_due = true;
    return absl::OkStatus();
  }
  replaying_.store(true, std::memory_order_release);
  if (background) {
    p.applier = std::thread([this] {
      size_t left = 1;
      while (left != 0 && !pending_->stop.load(std::memory_order_relaxed)) {
        if (absl::Status st = ApplyPending(64, &left); !st.ok()) {
          std::fprintf(stderr, "pmrt: %s: the background index replay stopped: %s\n",
                       pool_->path().c_str(), st.ToString().c_str());
          std::lock_guard<std::mutex> el(pending_->mu);
          pending_->error = st;
          return;
        }
      }
      if (left == 0) (void)RetireJournal();
    });
  }
  return absl::OkStatus();
}

// Applies entry i unless another thread has or is: the tree's change and the entry's mark in
// one guard, so that both are durable with the same epoch. Returns once the entry is applied
// (by whichever thread claimed it). No lock is held across the tree operation: readers keep
// answering from the journal meanwhile, and the key leaves by_key only once the tree holds it.
// A claim is held only across that one operation (never across a wait for a boundary), so a
// thread waiting for another's claim, even inside its own guard, waits a bounded time.
absl::Status Runtime::ApplyEntry(size_t i) {
  PendingReplay& p = *pending_;
  const IndexOp& e = p.journal.entries[i];
  Index* index = p.index_of.at(e.id);
  for (int attempt = 0;; ++attempt) {
    EntryState expected = EntryState::kPending;
    if (!p.state[i].compare_exchange_strong(expected, EntryState::kApplying,
                                            std::memory_order_acquire)) {
      while (p.state[i].load(std::memory_order_acquire) == EntryState::kApplying) {
        std::this_thread::yield();  // the claimer's one tree operation
      }
      if (p.state[i].load(std::memory_order_acquire) == EntryState::kApplied) {
        return absl::OkStatus();
      }
      continue;  // the claimer found no room and gave the entry back: try here
    }
    if (TryApplyClaimed(i)) return absl::OkStatus();
    p.state[i].store(EntryState::kPending, std::memory_order_release);
    // Room comes back at the next boundaries, which a thread inside its own guard cannot wait
    // for (nor can a full pool be helped by them for long).
    if (epochs_->LocalSlot().depth > 0 || attempt == 2 || !epochs_->Sync().ok()) {
      return absl::ResourceExhaustedError(
          absl::StrCat("index ", index->name(), ": the replay of a ", e.remove ? "remove" : "put",
                       " found no room (the pool or the undo log is full); it stays pending"));
    }
  }
}

bool Runtime::TryApplyClaimed(size_t i) {
  PendingReplay& p = *pending_;
  const IndexOp& e = p.journal.entries[i];
  {
    epoch::Guard g(*epochs_);
    ds::DurableMasstree& tree = p.index_of.at(e.id)->tree();
    // Under this guard a write cannot wait for room: a full undo log or heap fails it with the
    // tree unchanged (a remove then returns false too, hence the lookup: only an absent key is
    // the same end state).
    const bool done = e.remove ? !tree.get(e.key).has_value() || tree.remove(e.key)
                               : tree.put(e.key, e.value) != ds::PutResult::kNoMemory;
    if (!done) return false;
    *e.mark = g.epoch();
    if (!mutation::Swapped(runtime_internal::kUnrecordedMarkMutant)) {
      epochs_->RecordDirty(e.mark, sizeof(uint64_t));
    }
  }
  {
    std::lock_guard<std::mutex> l(p.mu);
    p.by_key[e.id].erase(e.key);
    if (--p.left == 0) {
      p.retire_due = true;
      replaying_.store(false, std::memory_order_release);
    }
  }
  p.state[i].store(EntryState::kApplied, std::memory_order_release);
  return true;
}

bool Runtime::PendingGet(uint64_t id, std::string_view key, std::optional<std::string>* value) {
  PendingReplay& p = *pending_;
  std::lock_guard<std::mutex> l(p.mu);
  auto index = p.by_key.find(id);
  if (index == p.by_key.end()) return false;
  auto it = index->second.find(key);
  if (it == index->second.end()) return false;
  const IndexOp& e = p.journal.entries[it->second];
  if (e.remove) {
    value->reset();
  } else {
    value->emplace(e.value);
  }
  return true;
}

absl::Status Runtime::Materialize(uint64_t id, std::string_view key) {
  PendingReplay& p = *pending_;
  size_t i;
  {
    std::lock_guard<std::mutex> l(p.mu);
    auto index = p.by_key.find(id);
    if (index == p.by_key.end()) return absl::OkStatus();
    auto it = index->second.find(key);
    if (it == index->second.end()) return absl::OkStatus();
    i = it->second;
  }
  return ApplyEntry(i);
}

absl::Status Runtime::ApplyPending(size_t max_entries, size_t* left) {
  PendingReplay& p = *pending_;
  while (max_entries > 0) {
    const size_t i = p.next.fetch_add(1, std::memory_order_relaxed);
    if (i >= p.count) break;
    if (p.state[i].load(std::memory_order_acquire) != EntryState::kPending) continue;
    if (absl::Status st = ApplyEntry(i); !st.ok()) {
      p.next.store(i, std::memory_order_relaxed);  // (retried by the next call)
      return st;
    }
    --max_entries;
  }
  if (max_entries > 0) {
    // The cursor is past the end: what is left is claimed by other threads (wait for them) or
    // was given back by a failed application.
    for (size_t i = 0; i < p.count; ++i) {
      if (p.state[i].load(std::memory_order_acquire) != EntryState::kApplied) {
        RETURN_IF_ERROR(ApplyEntry(i));
      }
    }
  }
  std::lock_guard<std::mutex> l(p.mu);
  *left = p.left;
  return absl::OkStatus();
}

absl::Status Runtime::finish_replay() {
  size_t left = replaying() ? 1 : 0;
  while (left != 0) RETURN_IF_ERROR(ApplyPending(256, &left));
  return absl::OkStatus();
}

uint64_t Runtime::pending_index_ops() {
  std::lock_guard<std::mutex> l(pending_->mu);
  return pending_->left;
}

void Runtime::FinishReplayForRead() {
  if (absl::Status st = finish_replay(); !st.ok()) {
    std::fprintf(stderr, "pmrt: %s: a read could not apply the pending index replay: %s\n",
                 pool_->path().c_str(), st.ToString().c_str());
  }
}

absl::Status Runtime::RetireJournal() {
  std::lock_guard<std::mutex> l(mu_);
  PendingReplay& p = *pending_;
  std::lock_guard<std::mutex> pl(p.mu);
  if (!p.retire_due) return absl::OkStatus();
  // Every entry is applied. One epoch clears the header and frees the block; it is the epoch of
  // the last marks or a later one, so it is durable only after them: a crash before it
  // completes finds the journal again, each entry marked or not as its tree change survived.
  epoch::Guard g(*epochs_);
  RuntimeHeader& h = header();
  RETURN_IF_ERROR(epochs_->log().Snapshot(&h, sizeof(h), &h.logged_epoch));
  const uint64_t offset = h.journal;
  h.journal = 0;
  if (offset != 0) RETURN_IF_ERROR(heap_->Free(pool_->at(offset)));
  // The entries' DRAM records stay until the runtime closes: a thread that found an entry in
  // by_key before this may still be about to see it applied (ApplyEntry reads it unlocked);
  // their views of the freed block are never read again (every state is kApplied).
  p.journal.offset = 0;
  p.retire_due = false;
  return absl::OkStatus();
}

void Runtime::StopReplay() {
  if (pending_ == nullptr) return;
  pending_->stop.store(true, std::memory_order_relaxed);
  if (pending_->applier.joinable()) pending_->applier.join();
}

absl::Status Runtime::sync() {
  bool due;
  {
    std::lock_guard<std::mutex> l(pending_->mu);
    due = pending_->retire_due;
  }
  if (due) RETURN_IF_ERROR(RetireJournal());
  return epochs_->Sync();
}

}  // namespace pmrt
