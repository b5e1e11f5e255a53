// A bank on pmrt::Runtime: accounts are persistent objects named in an index, each transfer is a
// transaction that moves money, allocates a journal entry (pnew) and names it in a second index,
// and a transfer that would overdraw is aborted by the program. The journal keeps the last
// kJournal entries: the transfer that adds one beyond that frees the oldest (pdelete) in the
// same transaction.
//
//   pmrt-example-bank POOL run [N]   # N transfers (default: until killed)
//   pmrt-example-bank POOL check     # the invariants; exit 0 when they hold
//
// Invariants, whatever moment the process is killed at: the money is conserved; the journal
// holds exactly the last min(transfers, kJournal) transfers, each naming a live entry; the heap
// is consistent (tests/examples/examples_kill_test.sh kills `run` and runs `check`).
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "runtime/runtime.h"

namespace {

constexpr int kAccounts = 16;
constexpr uint64_t kInitial = 1000;
constexpr uint64_t kJournal = 256;

// [readme:bank-types]
struct Account {
  uint64_t balance;
};
struct JournalEntry {
  uint64_t seq, from, to, amount;
};
struct Root {
  uint64_t opened;     // 1 once the accounts exist
  uint64_t transfers;  // committed transfers so far
};
// [/readme]

std::string AccountKey(uint64_t i) { return absl::StrCat("acct:", i / 10, i % 10); }
std::string SeqKey(uint64_t seq) { return std::string(pmrt::ds::U64Key(seq).view()); }

absl::Status Setup(Root* root, pmrt::Index* accounts) {
  return pmrt::txn::Run([&]() -> absl::Status {
    for (uint64_t i = 0; i < kAccounts; ++i) {
      Account* a = pmrt::alloc::pnew<Account>(Account{kInitial});
      if (a == nullptr) return absl::ResourceExhaustedError("pnew");
      if (auto r = accounts->put(AccountKey(i), accounts->Ref(a)); !r.ok()) return r.status();
    }
    return pmrt::txn::write(&root->opened, uint64_t{1});
  });
}

// [readme:bank-transfer]
// Moves `amount` from one account to another and journals it, all or nothing.
absl::Status Transfer(Root* root, pmrt::Index* accounts, pmrt::Index* journal, uint64_t from,
                      uint64_t to, uint64_t amount) {
  return pmrt::txn::Run([&]() -> absl::Status {
    Account* a = accounts->Deref<Account>(*accounts->get(AccountKey(from)));
    Account* b = accounts->Deref<Account>(*accounts->get(AccountKey(to)));
    if (a->balance < amount) return absl::FailedPreconditionError("insufficient funds");
    RETURN_IF_ERROR(pmrt::txn::write(&a->balance, a->balance - amount));
    RETURN_IF_ERROR(pmrt::txn::write(&b->balance, b->balance + amount));
    const uint64_t seq = root->transfers + 1;
    JournalEntry* e = pmrt::alloc::pnew<JournalEntry>(JournalEntry{seq, from, to, amount});
    if (e == nullptr) return absl::ResourceExhaustedError("pnew");
    RETURN_IF_ERROR(journal->put(SeqKey(seq), journal->Ref(e)).status());
    if (seq > kJournal) {  // keep the last kJournal entries
      auto old = journal->Deref<JournalEntry>(*journal->get(SeqKey(seq - kJournal)));
      RETURN_IF_ERROR(journal->remove(SeqKey(seq - kJournal)).status());
      RETURN_IF_ERROR(pmrt::alloc::pdelete(old));
    }
    return pmrt::txn::write(&root->transfers, seq);
  });
}
// [/readme]

int Check(pmrt::Runtime& rt, Root* root, pmrt::Index* accounts, pmrt::Index* journal) {
  if (root->opened == 0) {
    std::printf("bank: not set up yet (killed during its setup): ok\n");
    return accounts->size() == 0 && journal->size() == 0 ? 0 : 1;
  }
  uint64_t total = 0;
  for (uint64_t i = 0; i < kAccounts; ++i) {
    auto v = accounts->get(AccountKey(i));
    const Account* a = v ? accounts->Deref<Account>(*v) : nullptr;
    if (a == nullptr) {
      std::printf("bank: account %lu is missing\n", static_cast<unsigned long>(i));
      return 1;
    }
    total += a->balance;
  }
  const uint64_t n = root->transfers;
  const uint64_t kept = n < kJournal ? n : kJournal;
  bool ok = total == kAccounts * kInitial && journal->size() == kept;
  for (uint64_t seq = n - kept + 1; ok && seq <= n; ++seq) {
    auto v = journal->get(SeqKey(seq));
    const JournalEntry* e = v ? journal->Deref<JournalEntry>(*v) : nullptr;
    ok = e != nullptr && e->seq == seq && e->from != e->to && e->amount > 0;
  }
  const absl::Status heap = rt.heap().Check();
  std::printf(
      "bank: %lu transfers, total %lu (want %lu), journal %zu entries (want %lu), "
      "heap %s: %s\n",
      static_cast<unsigned long>(n), static_cast<unsigned long>(total),
      static_cast<unsigned long>(kAccounts * kInitial), journal->size(),
      static_cast<unsigned long>(kept), heap.ok() ? "ok" : heap.ToString().c_str(),
      ok && heap.ok() ? "ok" : "BROKEN");
  return ok && heap.ok() ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s POOL run [N] | check\n", argv[0]);
    return 2;
  }
  const std::string mode = argv[2];
  pmrt::RuntimeOptions options;
  options.create_size = 64 << 20;  // created at the first run
  if (mode == "check") {
    // The heap's deep check needs a quiet heap: no epoch boundary (which returns empty chunks),
    // reclaimer or background replay beside it.
    options.epochs.interval = std::chrono::milliseconds(0);
    options.txn.background = false;
    options.background_replay = false;
  }
  auto rt = pmrt::Runtime::Open(argv[1], options);
  if (!rt.ok()) {
    std::fprintf(stderr, "bank: %s\n", rt.status().ToString().c_str());
    return 2;
  }
  Root* root = *(*rt)->root<Root>();
  auto accounts = (*rt)->index("accounts");
  auto journal = (*rt)->index("journal");
  if (!accounts.ok() || !journal.ok()) {
    std::fprintf(stderr, "bank: %s\n",
                 (accounts.ok() ? journal.status() : accounts.status()).ToString().c_str());
    return 2;
  }
  if (mode == "check") return Check(**rt, root, *accounts, *journal);
  if (root->opened == 0) {
    if (auto st = Setup(root, *accounts); !st.ok()) {
      std::fprintf(stderr, "bank: setup: %s\n", st.ToString().c_str());
      return 1;
    }
  }
  const uint64_t n = argc > 3 ? std::strtoull(argv[3], nullptr, 10) : ~uint64_t{0};
  uint64_t rng = root->transfers * 2654435761u + 1;
  for (uint64_t i = 0; i < n; ++i) {
    rng = rng * 6364136223846793005u + 1442695040888963407u;
    const uint64_t from = (rng >> 33) % kAccounts, to = (from + 1 + (rng >> 40) % 15) % kAccounts;
    const uint64_t amount = 1 + (rng >> 50) % 400;
    absl::Status st = Transfer(root, *accounts, *journal, from, to, amount);
    if (!st.ok() && st.code() != absl::StatusCode::kFailedPrecondition) {
      std::fprintf(stderr, "bank: transfer: %s\n", st.ToString().c_str());
      return 1;
    }
  }
  return Check(**rt, root, *accounts, *journal);
}
