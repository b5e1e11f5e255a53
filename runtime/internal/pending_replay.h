// Runtime's lazy replay state (runtime/lazy_replay.cc): the journal's entries still to apply,
// found by index and key. Every field is guarded by `mu`, except `stop`.
#ifndef PMRT_RUNTIME_INTERNAL_PENDING_REPLAY_H_
#define PMRT_RUNTIME_INTERNAL_PENDING_REPLAY_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string_view>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "runtime/internal/replay_journal.h"
#include "runtime/runtime.h"

namespace pmrt {

// An entry's state: kPending (to apply), kApplying (claimed by a thread: others that need it
// applied wait), kApplied (in its tree; its key no longer in by_key).
enum class EntryState : uint8_t { kPending, kApplying, kApplied };

struct Runtime::PendingReplay {
  std::mutex mu;                      // by_key, left, retire_due, error, journal at retirement
  runtime_internal::Journal journal;  // the pool's journal (offset 0: none)
  size_t count = 0;                   // its entries
  std::unique_ptr<std::atomic<EntryState>[]> state;  // per entry (immutable count once built)
  // Index id -> (key -> entry), for the entries not applied; the keys view the journal.
  absl::flat_hash_map<uint64_t, absl::flat_hash_map<std::string_view, uint32_t>> by_key;
  absl::flat_hash_map<uint64_t, Index*> index_of;  // set at open, then read-only
  std::atomic<size_t> next{0};                     // the next entry to claim, in journal order
  size_t left = 0;                                 // entries not applied
  bool retire_due = false;                         // every entry applied: the journal may be freed
  std::thread applier;
  std::atomic<bool> stop{false};
  absl::Status error;  // the background applier's, when it stopped on one
};

}  // namespace pmrt

#endif  // PMRT_RUNTIME_INTERNAL_PENDING_REPLAY_H_
