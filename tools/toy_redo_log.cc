#include "tools/toy_redo_log.h"

#include <cstring>

#include "absl/strings/str_cat.h"

namespace pmrt::toy {
namespace {

constexpr Site kEntriesFlush{"toy.entries.flush"};
constexpr Site kEntriesFence{"toy.entries.fence"};
constexpr Site kCommitFlush{"toy.commit.flush"};
constexpr Site kCommitFence{"toy.commit.fence"};
constexpr Site kApplyFlush{"toy.apply.flush"};
constexpr Site kApplyFence{"toy.apply.fence"};
constexpr Site kAppliedFlush{"toy.applied.flush"};
constexpr Site kAppliedFence{"toy.applied.fence"};
constexpr Site kRecoverApplyFlush{"toy.recover.apply.flush"};
constexpr Site kRecoverApplyFence{"toy.recover.apply.fence"};
constexpr Site kRecoverAppliedFlush{"toy.recover.applied.flush"};
constexpr Site kRecoverAppliedFence{"toy.recover.applied.fence"};
// In-line store-order mutant: the commit mark stored before the inline entry.
constexpr Site kOrderHeader{"toy.order.header"};

uint64_t NextRandom(uint64_t& s) {
  s ^= s << 13;
  s ^= s >> 7;
  s ^= s << 17;
  return s;
}

}  // namespace

const char* BugName(ToyBug bug) {
  switch (bug) {
    case ToyBug::kNone:
      return "none";
    case ToyBug::kMissingFlush:
      return "missing-flush";
    case ToyBug::kMissingFence:
      return "missing-fence";
    case ToyBug::kWrongFlushAddress:
      return "wrong-flush-address";
    case ToyBug::kCommitBeforePayloadInLine:
      return "commit-before-payload-in-line";
    case ToyBug::kNonIdempotentRecovery:
      return "non-idempotent-recovery";
  }
  return "?";
}

std::vector<Site> ToyStore::Sites() {
  return {kEntriesFlush,      kEntriesFence,      kCommitFlush,         kCommitFence,
          kApplyFlush,        kApplyFence,        kAppliedFlush,        kAppliedFence,
          kRecoverApplyFlush, kRecoverApplyFence, kRecoverAppliedFlush, kRecoverAppliedFence,
          kOrderHeader};
}

uint64_t ToyStore::Commit(const std::vector<Write>& writes) {
  const uint64_t seq = l_->applied.load(std::memory_order_relaxed) + 1;
  const bool deltas = bug_ == ToyBug::kNonIdempotentRecovery;
  auto entry_of = [&](const Write& w) {
    uint64_t v = w.value;
    if (w.add && !deltas) v += l_->slots[w.slot];  // log the result, not the delta
    return ToyEntry{w.slot, w.add && deltas ? 1u : 0u, v};
  };
  // 1. Payload. Entries of a multi-write transaction go to their own line, which must be
  //    durable before the commit mark: a crash after the mark with stale entries would redo
  //    the previous transaction's writes.
  if (writes.size() > 1) {
    for (size_t i = 0; i < writes.size(); ++i) l_->entries[i] = entry_of(writes[i]);
    const void* flush_at = l_->entries;
    if (bug_ == ToyBug::kWrongFlushAddress) flush_at = &l_->applied;  // one line off
    if (bug_ != ToyBug::kMissingFlush) p_.Flush(kEntriesFlush, flush_at, sizeof(l_->entries));
    if (bug_ != ToyBug::kMissingFence) p_.Fence(kEntriesFence);
  }
  // 2. Commit mark. count and the inline entry share seq's line; PCSO persists same-line
  //    stores in program order, so storing seq last (release) means: a crash before the seq
  //    store leaves the old seq (transaction absent), after it the whole line (present).
  //    The store hints let the simulator build each intermediate state of the line.
  const bool swap = bug_ == ToyBug::kCommitBeforePayloadInLine || mutation::Swapped(kOrderHeader);
  if (swap) {
    l_->header.seq.store(seq, std::memory_order_release);
    p_.StoreHint(&l_->header, 64);
  }
  l_->header.count.store(writes.size(), std::memory_order_relaxed);
  if (writes.size() == 1) l_->header.inline_entry = entry_of(writes[0]);
  p_.StoreHint(&l_->header, 64);
  if (!swap) {
    l_->header.seq.store(seq, std::memory_order_release);  // pairs with nothing: PCSO order
    p_.StoreHint(&l_->header, 64);
  }
  p_.Flush(kCommitFlush, &l_->header, sizeof(l_->header));
  p_.Fence(kCommitFence);  // commit returns after this: the transaction is durable
  return seq;
}

void ToyStore::Apply(uint64_t seq, bool recovering) {
  const uint64_t count = l_->header.count.load(std::memory_order_relaxed);
  const ToyEntry* e = count == 1 ? &l_->header.inline_entry : l_->entries;
  // 3. Data. Durable before `applied` moves, or a crash would skip the redo of lost slots.
  for (uint64_t i = 0; i < count && i < kMaxWrites; ++i) {
    uint64_t& slot = l_->slots[e[i].slot % kSlots];
    slot = e[i].add ? slot + e[i].value : e[i].value;
    p_.Flush(recovering ? kRecoverApplyFlush : kApplyFlush, &slot, sizeof(slot));
  }
  p_.Fence(recovering ? kRecoverApplyFence : kApplyFence);
  // 4. Release the log. Durable before the next transaction overwrites the entries, or
  //    recovery would redo the old mark with the new entries.
  l_->applied.store(seq, std::memory_order_release);
  p_.Flush(recovering ? kRecoverAppliedFlush : kAppliedFlush, &l_->applied, 8);
  p_.Fence(recovering ? kRecoverAppliedFence : kAppliedFence);
}

void ToyStore::Recover() {
  const uint64_t seq = l_->header.seq.load(std::memory_order_acquire);
  if (seq == l_->applied.load(std::memory_order_relaxed) + 1) Apply(seq, /*recovering=*/true);
}

State ToyStore::Read() const {
  State s;
  std::memcpy(s.data(), l_->slots, sizeof(l_->slots));
  return s;
}

void Model::Begin(const std::vector<Write>& writes) {
  State next = states.back();
  for (const Write& w : writes) next[w.slot] = w.add ? next[w.slot] + w.value : w.value;
  states.push_back(next);
  in_flight = true;
}

absl::Status Model::Check(const State& recovered) const {
  const size_t k = committed();
  if (recovered == states[k]) return absl::OkStatus();
  if (in_flight && recovered == states[k + 1]) return absl::OkStatus();
  for (int i = 0; i < kSlots; ++i) {
    if (recovered[i] != states[k][i]) {
      return absl::DataLossError(absl::StrCat(
          "recovered slot ", i, " = ", recovered[i], ", expected ", states[k][i], " (state after ",
          k, " committed transactions",
          in_flight ? absl::StrCat(", or ", states[k + 1][i], " with the one in flight)") : ")"));
    }
  }
  return absl::DataLossError("recovered state matches no allowed state");
}

std::vector<Write> RandomTx(uint64_t& rng) {
  const int n = 1 + static_cast<int>(NextRandom(rng) % kMaxWrites);
  std::vector<Write> tx;
  for (int i = 0; i < n; ++i) {
    Write w{static_cast<uint32_t>(NextRandom(rng) % kSlots), NextRandom(rng) % 3 == 0,
            NextRandom(rng) % 1000 + 1};
    bool dup = false;
    for (const Write& o : tx) dup |= o.slot == w.slot;
    if (!dup) tx.push_back(w);
  }
  return tx;
}

}  // namespace pmrt::toy
