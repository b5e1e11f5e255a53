// A tiny redo-logged store, the protocol that proves the crash simulator (tests/epoch/sim_test.cc
// and kill_test.cc). It lives in a pool's heap region:
//
//   line 0   header   {seq, count, inline entry}   seq is the commit mark, stored last
//   line 1   entries  up to 4 x {slot, op, value}  used when count > 1
//   line 2   applied  {applied_seq}
//   line 3.. slots    256 x uint64_t
//
// Commit(tx) for transaction number s = applied + 1:
//   1. write entries (count > 1), flush, fence             -> payload durable before the mark
//   2. write count (+ inline entry), then seq = s, in one line (PCSO order), flush, fence
//                                                           -> committed: recovery redoes it
//   3. apply to slots, flush, fence                         -> data durable
//   4. applied = s, flush, fence                            -> log may be reused
// Recover(): if header.seq == applied + 1, redo steps 3 and 4. Idempotent: entries hold the
// resulting values, never deltas.
//
// `ToyBug` plants one classic bug for the negative controls.
#ifndef PMRT_TOOLS_TOY_REDO_LOG_H_
#define PMRT_TOOLS_TOY_REDO_LOG_H_

#include <array>
#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "epoch/persist.h"

namespace pmrt::toy {

inline constexpr int kSlots = 256;
inline constexpr int kMaxWrites = 4;

enum class ToyBug {
  kNone,
  kMissingFlush,               // entries never flushed
  kMissingFence,               // no fence between the entries and the commit mark
  kWrongFlushAddress,          // entries flushed one line off
  kCommitBeforePayloadInLine,  // seq stored before the inline entry in the header line
  kNonIdempotentRecovery,      // entries hold deltas; recovery adds them again
};
const char* BugName(ToyBug bug);

struct Write {
  uint32_t slot;
  bool add;  // add `value` to the slot instead of setting it
  uint64_t value;
};

struct ToyEntry {
  uint32_t slot;
  uint32_t add;
  uint64_t value;
};
struct alignas(64) ToyHeader {
  std::atomic<uint64_t> seq;    // commit mark: the transaction number, stored last
  std::atomic<uint64_t> count;  // writes in the transaction
  ToyEntry inline_entry;        // count == 1: the write itself, same line as seq
};
struct ToyLayout {
  ToyHeader header;
  alignas(64) ToyEntry entries[kMaxWrites];
  alignas(64) std::atomic<uint64_t> applied;
  alignas(64) uint64_t slots[kSlots];
};
static_assert(sizeof(ToyHeader) == 64, "header, count and inline entry share one line");
static_assert(offsetof(ToyLayout, entries) == 64 && offsetof(ToyLayout, applied) == 128);

using State = std::array<uint64_t, kSlots>;

class ToyStore {
 public:
  ToyStore(void* area, const Persister& persister, ToyBug bug = ToyBug::kNone)
      : l_(static_cast<ToyLayout*>(area)), p_(persister), bug_(bug) {}
  // Steps 1-2: returns once the transaction is durable (its number is returned).
  uint64_t Commit(const std::vector<Write>& writes);
  // Steps 3-4 for the transaction Commit returned.
  void Apply(uint64_t seq) { Apply(seq, /*recovering=*/false); }
  void Recover();
  State Read() const;

  // Every persistence site of the toy (for the mutation gate).
  static std::vector<Site> Sites();

 private:
  void Apply(uint64_t seq, bool recovering);
  ToyLayout* l_;
  Persister p_;
  ToyBug bug_;
};

// The states a recovered store may be in: the state after the last transaction whose commit
// returned, or (while one is in flight) the state after that one too.
struct Model {
  std::vector<State> states{State{}};  // states[k] = after k committed transactions
  bool in_flight = false;
  // Applies `writes` to the newest state and returns the new state (not yet committed).
  void Begin(const std::vector<Write>& writes);
  void End() { in_flight = false; }
  absl::Status Check(const State& recovered) const;
  size_t committed() const { return states.size() - 1 - (in_flight ? 1 : 0); }
};

std::vector<Write> RandomTx(uint64_t& rng_state);

}  // namespace pmrt::toy

#endif  // PMRT_TOOLS_TOY_REDO_LOG_H_
