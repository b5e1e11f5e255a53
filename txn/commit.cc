// The commit: which path a transaction's commit takes and the end of the transaction after it.
// The common transaction (no allocation, no free, no logical operation, 1 to kSmallCommitWrites
// declarations) commits through WriteSmallCommit, whose record writers are in small_commit.cc;
// one declaration where the commit needs no call through CommitOne. Everything else through
// WriteCommit: the record built in a staging buffer, copied into the log and flushed, one fence
// (the commit point), then the index and the frees. Also the inline commit paths of txn.h
// (CommitFast, CommitGeneral) and Engine::Commit, in this file with the inline functions they
// expand. docs/txn.md, "Transactions", has the store orders.
#include <algorithm>
#include <cstdio>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "txn/internal/engine_impl.h"
#include "txn/internal/record_writer.h"

namespace pmrt::txn {

using txn_internal::ForEachRun;
using txn_internal::LogicalEntryBytes;
using txn_internal::RecordWriter;

[[gnu::always_inline]] inline absl::Status Engine::Impl::WriteSmallCommit(ThreadTx& t) {
#if defined(__x86_64__)
  if (txn_internal::g_crc_in_commit_loop) [[likely]] {
    if (t.writes_size() == 1 && CommitOne(t)) return absl::OkStatus();
    // (The record's largest size for its declarations: the header and a head and value each.)
    // On kPmem the streamed writer checks no site (PmemOps): with one disabled, the plain one,
    // which checks each. Under the simulator every call checks its own (SimOps).
    if (pool.persister().StreamsRecords(sizeof(RecordHeader) + 16 * t.writes_size())) {
      if (sim_seam_) [[unlikely]]
        return WriteSmallCommitStreamSim(t);
      if (!mutation::AnyDisabled()) return WriteSmallCommitStream(t);
    }
    return WriteSmallCommitCrc(t);
  }
#endif
  return WriteSmallCommitPortable(t);
}

[[gnu::always_inline]] inline bool Engine::Impl::CommitOne(ThreadTx& t) {
#if defined(__x86_64__)
  // One test of the mutation gate for all of the path's sites: with any site disabled (or a
  // mutant active), the general small commit, which checks each. Under the crash simulator
  // (kSim*) the path runs with every site checked by its own call (SimOps).
  const OnePath path = one_path_;
  if (path != OnePath::kNone && txn_internal::g_crc_in_commit_loop) [[likely]] {
    if (path < OnePath::kSimStream && !mutation::AnyDisabled()) [[likely]] {
      if (uint8_t* at = SmallCommitOneReady(t, path == OnePath::kClwbLine); at != nullptr)
          [[likely]] {
        return path == OnePath::kClwbLine ? CommitOneLine(t, at)
               : path == OnePath::kStream ? CommitOneStream(t, at)
                                          : CommitOneCrc(t, at);
      }
    } else if (path >= OnePath::kSimStream) {
      if (uint8_t* at = SmallCommitOneReady(t, path == OnePath::kSimClwbLine); at != nullptr)
        return CommitOneSim(t, at, path);
    }
  }
#else
  (void)t;
#endif
  return false;
}

[[gnu::always_inline]] inline uint8_t* Engine::Impl::SmallCommitOneReady(ThreadTx& t, bool line) {
  // The one-declaration commit makes no call (a call's return address, and the registers the
  // compiler keeps across it, are stores that the previous commit's fence holds back), so it
  // runs only where it needs none: room in the log's tail block (the record goes there), the
  // thread's persist counters made, and no reclaimer to wake (KickIfOverTrigger would call; no
  // block is taken since).
  if (epoch_internal::tls_counters == nullptr ||
      (store.blocks_in_use() >= kick_blocks_.load(std::memory_order_relaxed) &&
       !bg_kick_.load(std::memory_order_relaxed))) {
    return nullptr;
  }
  constexpr size_t kBytes = sizeof(RecordHeader) + 16;
  txn_internal::Chain& c = store.chain(t.slot);
  if (!line) return store.TryReserve(c, kBytes);
  // (Where c has no tail block, TryReserve fails whatever the size; the address is not used.)
  const uintptr_t at = reinterpret_cast<uintptr_t>(c.tail_at) + c.pos;
  return store.TryReserve(c, kBytes + txn_internal::LinePad(at, kBytes));
}

[[gnu::always_inline]] inline bool Engine::Impl::SmallCommitReady(const ThreadTx& t) const {
  // The common case: the outermost commit of a transaction on the default engine that is not
  // aborted, doomed or expired and has not allocated (each of which zeroes hot.words, as it
  // sends txn::add to its general path), with no free and 1 to kSmallCommitWrites declarations.
  return t.depth == 1 && t.hot.words.load(std::memory_order_relaxed) != 0 && t.frees.empty() &&
         t.writes_size() - 1 < txn_internal::kSmallCommitWrites;
}

[[gnu::always_inline]] inline absl::Status Engine::Impl::Commit(ThreadTx& t) {
  if (SmallCommitReady(t)) [[likely]]
    return WriteSmallCommit(t);  // it ends the transaction, committed or not
  return CommitSlow(t);
}

absl::Status Engine::Impl::EndAfterCommit(ThreadTx& t, absl::Status st) {
  if (!st.ok() && !t.aborted) {  // (an inner abort has already restored memory)
    RollBack(t);
    t.aborts.Add(1);
  }
  End(t);
  return st;
}

absl::Status Engine::Impl::CommitSlow(ThreadTx& t) {
  if (t.depth == 0) return NoTransaction("commit");
  if (t.depth > 1) {  // flat nesting: an inner commit does nothing
    --t.depth;
    return t.aborted ? absl::AbortedError("txn::commit: the transaction was aborted") : t.doom;
  }
  absl::Status st = absl::OkStatus();
  if (t.aborted) {
    st = absl::AbortedError("txn::commit: the transaction was aborted at an inner level");
  } else if (pool.failed()) {
    st = pool.health();  // the failed mode: nothing more can be made durable; rolled back
  } else if (t.Expired()) {
    st = absl::DeadlineExceededError(
        absl::StrCat("txn::commit: the transaction was open longer than ", options.max_open.count(),
                     " ms and was aborted"));
  } else if (!t.doom.ok()) {
    st = t.doom;
  } else if (t.allocs.empty() && t.frees.empty() && t.logical.empty() &&
             t.writes_size() <= txn_internal::kSmallCommitWrites) {
    if (!t.writes_empty()) [[likely]]
      return WriteSmallCommit(t);  // it ends the transaction, committed or not
  } else {
    st = WriteCommit(t);
    // Its fence failed (the failed mode): the transaction took effect, but whether its record
    // is durable is unknown, and the caller is told so (as the small commit does).
    if (st.ok() && pool.failed()) {
      (void)EndAfterCommit(t, absl::OkStatus());
      return pool.health();
    }
  }
  return EndAfterCommit(t, std::move(st));
}

namespace {

// The words of a general commit's record, into t.words: each declared word once (its value
// now, the transaction's last) and the words of the new blocks (recorded whole). Declared words
// inside blocks freed here are dropped: the free's tombstone covers them.
void CollectCommitWords(ThreadTx& t) {
  std::vector<uint64_t>& words = t.words;
  words.clear();
  if (t.allocs.empty() && t.writes_size() <= txn_internal::SmallWordSet::kMaxWords) {
    // The common case: each word once, in declaration order (a range declared in ascending
    // order still forms one run). No sort: a record's entries may come in any order.
    t.small_set.Reset();
    for (const WriteRec* w = t.hot.begin; w != t.hot.end; ++w)
      if (t.small_set.Insert(w->word)) words.push_back(w->word);
  } else {
    for (const WriteRec* w = t.hot.begin; w != t.hot.end; ++w) words.push_back(w->word);
  }
  if (!t.frees.empty()) {
    std::erase_if(words, [&](uint64_t w) {
      for (const BlockRec& f : t.frees)
        if (w >= f.offset / 8 && w < (f.offset + f.bytes) / 8) return true;
      return false;
    });
  }
  for (const BlockRec& a : t.allocs)
    for (uint64_t w = a.offset / 8; w < (a.offset + a.bytes) / 8; ++w) words.push_back(w);
  if (!t.allocs.empty() || t.writes_size() > txn_internal::SmallWordSet::kMaxWords) {
    std::sort(words.begin(), words.end());
    words.erase(std::unique(words.begin(), words.end()), words.end());
  }
}

}  // namespace

absl::Status Engine::Impl::WriteCommit(ThreadTx& t) {
  // 1. The record's entries: each declared word once (CollectCommitWords), whole new blocks,
  //    allocations and frees.
  CollectCommitWords(t);
  const std::vector<uint64_t>& words = t.words;
  size_t bytes = sizeof(RecordHeader) + 8 * (t.allocs.size() + t.frees.size());
  // (Under the gate's mutant the record leaves them out: a rolled-back epoch then loses them.)
  const bool logical = !mutation::Swapped(txn_internal::kDropLogicalMutant);
  for (const txn_internal::LogicalRec& l : t.logical)
    if (logical) bytes += LogicalEntryBytes(l.bytes.size());
  ForEachRun(words, [&](size_t a, size_t b) { bytes += 8 + 8 * (b - a); });
  if (bytes > store.max_record_bytes()) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "txn::commit: the transaction's record (", bytes, " bytes) does not fit in a log block (",
        store.max_record_bytes(), "); use smaller transactions or a larger block_size"));
  }
  // 2. The commit-order stamp. Taken while the caller still holds its locks: a conflicting
  //    transaction that commits later (after our unlock) takes a larger one.
  const uint64_t stamp = next_stamp.fetch_add(1, std::memory_order_relaxed);
  txn_internal::Chain& log = store.chain(t.slot);
  ASSIGN_OR_RETURN(uint8_t * at, store.Reserve(log, t.slot, bytes));
  // 3. Build the record in the thread's staging buffer (cached); its checksum (computed last,
  //    over everything) is the commit mark.
  const uint8_t* base = pool.base();
  if (t.stage == nullptr) t.stage = std::make_unique<uint64_t[]>(store.max_record_bytes() / 8);
  RecordWriter w(reinterpret_cast<uint8_t*>(t.stage.get()));
  ForEachRun(words, [&](size_t a, size_t b) { w.Data(words[a], b - a, base); });
  for (const BlockRec& a : t.allocs) w.Mark(EntryType::kAlloc, a.offset / 8, a.usable / 8);
  for (const BlockRec& f : t.frees) w.Mark(EntryType::kFree, f.offset / 8, f.bytes / 8);
  for (const txn_internal::LogicalRec& l : t.logical)
    if (logical) w.Logical(l.tag, l.bytes);
  const size_t written =
      w.Finish(RecordKind::kCommit, stamp, t.hot.epoch, store.BlockGen(log.tail));
  // 4. Copy the record into the log (CopyFlush: as stores + flush of its lines; non-temporal
  //    stores or stores + clwb, as the pool's record writes say; Reserve flushed a new block's
  //    header, link, head and table entry), then the one fence of the commit. Before it completes
  //    the record may be on media whole (the transaction counts as committed: allowed, commit has
  //    not returned), torn (bad checksum: recovery stops this log there) or absent. The data lines
  //    are not flushed: the record redoes them (written back when a word goes cold, or at close).
  pool.persister().CopyFlush(txn_internal::kCommitFlush, at, t.stage.get(), written);
  pool.persister().Fence(txn_internal::kCommitFence);
  store.Publish(log, written);
  // 5. The index: the record is now the newest of each of its words. A freed block's words go
  //    cold (nothing may be replayed into the block's next life: MakeFreedWordsCold).
  const uint32_t key = WordIndex::KeyOf(stamp);
  for (uint64_t wd : words) {
    index->at(wd).store(WordIndex::Pack(key, t.hot.epoch), std::memory_order_release);
  }
  MakeFreedWordsCold(t);
  // 6. The frees, epoch-scoped in this epoch like the record: if the epoch fails, the heap
  //    rolls them back and recovery replays them from the record.
  for (const BlockRec& f : t.frees) {
    if (absl::Status st = heap.Free(pool.at(f.offset)); !st.ok()) {
      std::fprintf(stderr, "pmrt txn: free at commit failed: %s\n", st.ToString().c_str());
    }
  }
  t.commits.Add(1);
  t.record_bytes.Add(written);
  KickIfOverTrigger();
  return absl::OkStatus();
}

void Engine::Impl::MakeFreedWordsCold(const ThreadTx& t) {
  // A freed block's words go cold, and each such word's line stops being fast (docs/txn.md,
  // "Fast lines"): the slot first, then the byte (kFreed), seq_cst, so that the reclaimer's
  // check of the line (kChecking, the 8 slots, then kFast by CAS) either reads the cold slot or
  // has its CAS fail on this byte. A byte that reads 0 (seq_cst, after the slot's store) needs
  // no store: a check that starts after this load reads the cold slot. No other transaction
  // declares the freed words meanwhile (they are this one's until the heap frees them in
  // WriteCommit's step 6), but one may hold another word of the line, declared on the fast
  // path: the reclaimer makes no word of a kFreed line cold before the grace period of its own
  // unmarking (ReclaimCycle::DecideOne, reclaim.cc).
  for (const BlockRec& f : t.frees) {
    uint64_t done_line = ~uint64_t{0};
    for (uint64_t wd = f.offset / 8; wd < (f.offset + f.bytes) / 8; ++wd) {
      if (index->at(wd).load(std::memory_order_relaxed) == 0) continue;
      index->at(wd).store(0, std::memory_order_seq_cst);
      if (WordIndex::LineOf(wd) == done_line) continue;
      done_line = WordIndex::LineOf(wd);
      std::atomic<uint8_t>& line = index->line(done_line);
      const uint8_t b = line.load(std::memory_order_seq_cst);
      if (b == WordIndex::kFast || b == WordIndex::kChecking)
        line.store(WordIndex::kFreed, std::memory_order_seq_cst);
    }
  }
}

absl::Status Engine::Impl::SmallCommitFailed(ThreadTx& t, absl::Status st) {
  return EndAfterCommit(t, std::move(st));
}

absl::Status Engine::Commit() { return impl_->Commit(impl_->Local()); }

}  // namespace pmrt::txn

namespace pmrt::txn_internal {

using txn::Engine;

absl::Status CommitGeneral() {
  if (Engine* e = Engine::Default(); e != nullptr) [[likely]] {
    Engine::Impl& i = *e->impl_;
    ThreadTx* t = i.LocalIfReady();
    if (t != nullptr && !t->commit_failed.ok()) [[unlikely]]  // (CommitFast's small commit)
      return std::exchange(t->commit_failed, absl::OkStatus());
    if (t != nullptr && i.SmallCommitReady(*t)) [[likely]]
      return i.WriteSmallCommit(*t);
    return e->Commit();
  }
  return NoEngine();
}

namespace {
// CommitFast's small commit of several declarations (a function of its own, so that CommitFast
// needs no stack frame on its way to the one-word commit).
[[gnu::noinline]] bool CommitSmall(Engine::Impl& i, ThreadTx& t) {
  absl::Status st = i.WriteSmallCommit(t);
  if (st.ok()) [[likely]]
    return true;
  t.commit_failed = std::move(st);
  return false;
}
}  // namespace

bool CommitFast() {
  // The common case, a small commit (SmallCommitReady), made here: true when it committed.
  // The most common transaction of all, one declaration, where the commit cannot fail and makes
  // no call (SmallCommitOneReady), is a tail call to the one-word commit, which returns true.
  // A small commit that fails (it has ended the transaction) leaves its status for
  // CommitGeneral, which txn::commit (txn.h) calls next; anything else returns false having
  // changed nothing, and CommitGeneral commits.
  if (Engine* e = Engine::Default(); e != nullptr) [[likely]] {
    Engine::Impl& i = *e->impl_;
    ThreadTx* t = i.LocalIfReady();
    if (t != nullptr && i.SmallCommitReady(*t)) [[likely]]
      return t->writes_size() == 1 ? i.CommitOne(*t) : CommitSmall(i, *t);
  }
  return false;
}
}  // namespace pmrt::txn_internal
