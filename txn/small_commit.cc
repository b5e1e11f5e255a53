// The small commit's record writers (docs/txn.md, "Transactions"). Every writer is one
// instantiation of WriteSmallCommitBody<kCrcInLoop, kStream, kOne, kLine, Ops>, so all of them
// take the same steps in the same store order; they differ in how:
//
//   writer                     checksum       the record's stores      record              Ops
//   WriteSmallCommitPortable   RecordCrc      plain, then Flush        any shape           PmemOps
//   WriteSmallCommitCrc        in the loop    plain, then Flush        any shape           PmemOps
//   WriteSmallCommitStream     in the loop    non-temporal             any shape           PmemOps
//   WriteSmallCommitStreamSim  in the loop    non-temporal             any shape           SimOps
//   CommitOneCrc               in the loop    plain, inline clwb       one entry           PmemOps
//   CommitOneLine              in the loop    plain, inline clwb       one entry, padded   PmemOps
//   CommitOneStream            in the loop    non-temporal             one entry           PmemOps
//   CommitOneSim               the three CommitOne writers above, with SimOps (crash simulator)
//
// The steps: 1. the record's shape and size, in registers (ShapeOf, LayOut); 2. its commit-order
// stamp (SmallCommitStamp) and room in the log's tail block; 3. its words after the first, by the
// writer for its shape (PutSmallRecord: PutOneEntry, StreamPairs, StreamOddPairs, PutRuns), the
// checksum alongside, then the header's first word, which holds the checksum, and the record's
// flush (FinishSmallRecord); 4. the one fence, the commit point; 5. only after it the published
// position and the index, and last the epoch guard (EndSmallCommit). Every step is inlined into
// the writers ([[gnu::always_inline]]): splitting the body into steps adds no call to a commit.
#include <cstring>
#include <type_traits>
#include <utility>

#if defined(__x86_64__)
#include <emmintrin.h>
#endif

#include "txn/internal/engine_impl.h"
#include "txn/internal/record_writer.h"

namespace pmrt::txn {

using txn_internal::kMaxLinePad;
using txn_internal::MakeEntryHead;
using txn_internal::RecordWriter;

namespace {

#if defined(__x86_64__)
// One step of the record checksum (CRC32C, 8 bytes), for code compiled for SSE 4.2
// (WriteSmallCommitCrc); the same as RecordCrc's fast path.
#pragma GCC push_options
#pragma GCC target("sse4.2")
inline uint64_t Crc8(uint64_t crc, uint64_t v) { return __builtin_ia32_crc32di(crc, v); }
#pragma GCC pop_options
#else
inline uint64_t Crc8(uint64_t crc, uint64_t) { return crc; }  // never called
#endif

}  // namespace

// WriteCommit for the common transaction: declared words only (no allocation, no free), at most
// kSmallCommitWrites declarations. The same record as the general path and one fence, written
// straight into the log (no staging buffer, no word vector, no sort), its shape found first in
// registers, and the log's room taken without a call while the tail block has it.
absl::Status Engine::Impl::WriteSmallCommitPortable(ThreadTx& t) {
  return WriteSmallCommitBody<false, false>(t);
}

#if defined(__x86_64__)
// Compiled for SSE 4.2 (its crc32 instruction inside the entry loop); called only where the
// processor has it.
[[gnu::target("sse4.2")]] absl::Status Engine::Impl::WriteSmallCommitCrc(ThreadTx& t) {
  return WriteSmallCommitBody<true, false>(t);
}
[[gnu::target("sse4.2")]] absl::Status Engine::Impl::WriteSmallCommitStream(ThreadTx& t) {
  return WriteSmallCommitBody<true, true>(t);
}
// (The body cannot fail with one declaration: true.)
[[gnu::target("sse4.2")]] bool Engine::Impl::CommitOneCrc(ThreadTx& t, uint8_t* at) {
  return WriteSmallCommitBody<true, false, true>(t, at).ok();
}
[[gnu::target("sse4.2")]] bool Engine::Impl::CommitOneLine(ThreadTx& t, uint8_t* at) {
  return WriteSmallCommitBody<true, false, true, true>(t, at).ok();
}
[[gnu::target("sse4.2")]] bool Engine::Impl::CommitOneStream(ThreadTx& t, uint8_t* at) {
  return WriteSmallCommitBody<true, true, true>(t, at).ok();
}
[[gnu::target("sse4.2")]] absl::Status Engine::Impl::WriteSmallCommitStreamSim(ThreadTx& t) {
  return WriteSmallCommitBody<true, true, false, false, SimOps>(t);
}
[[gnu::target("sse4.2")]] bool Engine::Impl::CommitOneSim(ThreadTx& t, uint8_t* at, OnePath path) {
  switch (path) {
    case OnePath::kSimStream:
      return WriteSmallCommitBody<true, true, true, false, SimOps>(t, at).ok();
    case OnePath::kSimClwbLine:
      return WriteSmallCommitBody<true, false, true, true, SimOps>(t, at).ok();
    default:
      return WriteSmallCommitBody<true, false, true, false, SimOps>(t, at).ok();
  }
}
#endif

namespace {
// Two bits of a 64-bit filter for a word (a Bloom filter with k = 2 over a multiplicative
// hash): with 16 different words, a word finds both its bits set by others with probability
// ~0.14 at most (0.9 look-ups per 16-word transaction; one bit: ~1.9).
inline uint64_t FilterBits(uint64_t word) {
  const uint64_t h = word * 0x9E3779B97F4A7C15ull;
  return uint64_t{1} << (h >> 58) | uint64_t{1} << ((h >> 52) & 63);
}

// The value of pool word `wd` now (at commit: the transaction's last).
inline uint64_t ValueOf(const uint8_t* base, uint64_t wd) {
  uint64_t value;
  std::memcpy(&value, base + wd * 8, 8);
  return value;
}

// A single-word data entry of word `wd`: its head and the word's value now (the
// transaction's last), folded into the record's checksum where it is computed as it goes.
template <bool kCrcInLoop>
[[gnu::always_inline]] inline std::pair<uint64_t, uint64_t> SingleEntry(uint64_t wd,
                                                                        const uint8_t* base,
                                                                        uint64_t& crc) {
  const uint64_t head = MakeEntryHead(EntryType::kData, 1, wd);
  const uint64_t value = ValueOf(base, wd);
  if constexpr (kCrcInLoop) crc = Crc8(Crc8(crc, head), value);
  return {head, value};
}

// Two words {lo, hi} at d (8-byte aligned) as one 16-byte store (movups on x86-64): one entry of
// the store buffer instead of two, so one store fewer for the commit's fence to hold back.
[[gnu::always_inline]] inline void Store16(uint64_t* d, uint64_t lo, uint64_t hi) {
#if defined(__x86_64__)
  _mm_storeu_si128(reinterpret_cast<__m128i*>(d),
                   _mm_set_epi64x(static_cast<long long>(hi), static_cast<long long>(lo)));
#else
  d[0] = lo;
  d[1] = hi;
#endif
}

// Puts the words of a record into the log, in order, starting with `first` at `d`: with
// kStream by non-temporal stores (Ops::Stream8; two words that fill an aligned 16 bytes go as
// one Stream16, so the fence holds back half as many stores), otherwise by plain stores
// (flushed by the caller).
template <bool kStream, class Ops>
class WordSink {
 public:
  [[gnu::always_inline]] WordSink(const Persister& p, uint64_t* d, uint64_t first) : p_(p), d_(d) {
    if constexpr (kStream) {
      if ((reinterpret_cast<uintptr_t>(d_) & 8) != 0) {
        Ops::Stream8(p_, txn_internal::kStreamRuns, d_, first);  // the second half of a pair: alone
      } else {
        pending_ = first;
      }
      ++d_;
    } else {
      *d_++ = first;
    }
  }
  [[gnu::always_inline]] void Put(uint64_t v) {
#if defined(__x86_64__)
    if constexpr (kStream) {
      if ((reinterpret_cast<uintptr_t>(d_) & 8) == 0) {
        pending_ = v;  // the first half of an aligned pair
      } else {         // the second half: the first is pending (this is not the first word)
        Ops::Stream16(p_, txn_internal::kStreamRuns, d_ - 1, pending_, v);
      }
      ++d_;
      return;
    }
#endif
    *d_++ = v;
  }
  // Puts a first half left pending.
  [[gnu::always_inline]] void End() {
    if constexpr (kStream) {
      if ((reinterpret_cast<uintptr_t>(d_) & 8) != 0) {
        Ops::Stream8(p_, txn_internal::kStreamRuns, d_ - 1, pending_);
      }
    }
  }

 private:
  const Persister& p_;
  uint64_t* d_;
  uint64_t pending_ = 0;
};
}  // namespace

// Stamps a thread takes at once for its small commits, and how far the shared counter may run
// ahead of a block's first stamp before the block is given up (below).
inline constexpr uint64_t kStampBlock = 64;
// How far ahead of its record a small commit fetches the log for writing (step 2 of
// WriteSmallCommitBody): a few records' worth (docs/txn.md, "Design notes", "Small commits").
inline constexpr size_t kLogWriteAhead = 512;
inline constexpr uint64_t kStampWindow = uint64_t{1} << 29;

// Whether the record whose index key is `key` has a smaller stamp than s, for a thread whose
// block begins at lo (lo_key = KeyOf(lo)) and has used [lo, s) (`used` = s - lo). A thread key
// gives its stamp modulo 2^31 - 1 only; d = (stamp - lo) mod that is below `used` for this
// thread's own stamps, and at least half the modulus for a stamp up to 2^30 below lo (one
// further below may answer false: a needless new block, never a wrong order). A stamp at or
// above s gives d in [used, 2^29), so false, as long as no stamp in use is more than 2^29
// above lo: SmallCommitStamp gives the block up before the shared counter gets that far. A
// cold slot answers false too.
[[gnu::always_inline]] inline bool StampPrecedes(uint32_t key, uint32_t lo_key, uint64_t used) {
  if (WordIndex::IsCompactKey(key)) return true;  // K's entries from before this open
  if (key == 0) return false;  // cold: not at commit (touch slack, fast lines' grace); safe
  constexpr uint32_t m = WordIndex::kKeyModulus;
  const uint32_t d = key >= lo_key ? key - lo_key : key + m - lo_key;
  return d < used || d >= m / 2;
}

// KeyAfter gives KeyOf of the block's later stamps (SmallCommitStamp): checked across a wrap of
// the key modulus.
constexpr bool KeyAfterIsKeyOf() {
  constexpr uint64_t m = WordIndex::kKeyModulus;
  for (const uint64_t s : {uint64_t{0}, m - kStampBlock, m - 1, 2 * m - 7, 5 * m + 3}) {
    for (uint32_t n = 0; n < kStampBlock; ++n) {
      if (WordIndex::KeyAfter(WordIndex::KeyOf(s), n) != WordIndex::KeyOf(s + n)) return false;
    }
  }
  return true;
}
static_assert(KeyAfterIsKeyOf());

// Whether no stamp has been handed out since the calling thread's block, which has a stamp left
// (docs/txn.md, "Commit order"): then every stamp in use is below the block's end, and those in
// the block that are in use are the thread's own, below its next stamp; so the newest record of
// every word is older than that stamp and the commit takes it without reading any index slot.
// The record of a declared word that another thread wrote was stamped before that thread's
// commit returned, and so before the caller's isolation (its lock) passed the word to this
// transaction: this relaxed read of the counter, after that, sees the stamp's fetch_add.
// (add() no longer reads the slot of a word in a fast line, so its acquire load is not what
// orders this read.) This transaction's own
// snapshots took stamps from the counter, so a transaction with one is not solo.
[[gnu::always_inline]] inline bool Engine::Impl::SmallCommitSolo(const ThreadTx& t) const {
  // (The mutant counts a commit as solo whatever the counter says.)
  return t.stamp_next < t.stamp_end && (next_stamp.load(std::memory_order_relaxed) == t.stamp_end ||
                                        mutation::Swapped(txn_internal::kSoloMutant));
}

// The commit order (docs/txn.md, "Commit order"): recovery replays records by stamp, so a
// record must have a larger stamp than every earlier record of each of its words, and stamps
// are unique. The shared counter hands out stamps one at a time to the general commit and to
// snapshots, and in blocks of kStampBlock here: every stamp it hands out is above every stamp
// handed out before, so only a record from a block handed out after this thread's (another
// thread's) can be newer than s. Each declared word's index slot holds the key of its newest
// record (this transaction's writes are not published until after its fence); when one is not
// provably older, the commit takes a new block, which starts above it. The slots are re-read
// with acquire (lines add() has just touched): a key seen pairs with its writer's index store,
// after that writer took its stamp, so the counter read after them is at least that stamp
// plus one, and the window test keeps every such stamp within 2^29 of lo.
// (The slots are read by the caller, in the loop that makes the record's shape: one pass over the
// declarations instead of two. `older` is only used while the block has stamps left.)
// `solo` (SmallCommitSolo) needs no slot at all: no stamp has been handed out since the block.
[[gnu::always_inline]] inline uint64_t Engine::Impl::SmallCommitStamp(ThreadTx& t, bool solo,
                                                                      bool older,
                                                                      uint32_t& stamp_key) {
  const uint64_t s = t.stamp_next;
  if (s < t.stamp_end) [[likely]] {
    const uint32_t lo_key = t.stamp_lo_key;
    const uint64_t used = s - t.stamp_lo;
    // (The mutant takes the block's next stamp whatever the slots say.)
    if (solo || ((older || mutation::Swapped(txn_internal::kStampMutant)) &&
                 next_stamp.load(std::memory_order_relaxed) - t.stamp_lo <= kStampWindow))
        [[likely]] {
      t.stamp_next = s + 1;
      stamp_key = WordIndex::KeyAfter(lo_key, static_cast<uint32_t>(used));  // used < kStampBlock
      return s;
    }
  }
  const uint64_t b = next_stamp.fetch_add(kStampBlock, std::memory_order_relaxed);
  t.stamp_lo = b;
  t.stamp_lo_key = stamp_key = WordIndex::KeyOf(b);
  t.stamp_next = b + 1;
  t.stamp_end = b + kStampBlock;
  return b;
}

}  // namespace pmrt::txn

namespace pmrt::txn_internal {

// A small commit's record: its shape and size found (ShapeOf, LayOut: step 1), placed in the log
// (step 2), then written by the writer for its shape (PutSmallRecord, step 3) and finished
// (FinishSmallRecord, Engine::Impl::EndSmallCommit: steps 3 to 5), all from this one description
// (in registers: every function that reads it is inlined into the writer). Bit i of each mask is
// the declaration wb[i]. rec_words = 4 (the header) + runs + kept words + pad_words.
struct SmallRecord {
  std::atomic<uint64_t>* slots;  // the index's slots (the first), read in step 1, stored in 5
  bool solo;                     // SmallCommitSolo: no slot need be read for the stamp
  bool older;  // else: every declared word's newest record is older than the block's next stamp
  const WriteRec* wb;  // the declarations, in order
  size_t k;            // how many: 1 to kSmallCommitWrites
  uint64_t dups;       // repeats an earlier declaration's word: dropped
  uint64_t joins;      // extends the run before it: shares the run's head
  uint64_t keep;       // the first declaration of each word: its value goes into the record
  uint64_t starts;     // those of them that start an entry
  size_t pad_words;    // kPadWord words after the entries: the record ends at its cache line
  size_t rec_words;    // the record's words, header and pad words included
  size_t bytes;        // rec_words * 8
  // Step 2:
  uint8_t* at;             // where the record goes, in the log's tail block
  uint64_t stamp;          // its commit-order stamp (header word 1)
  uint32_t stamp_key;      // WordIndex::KeyOf(stamp): what the index names its words with
  uint64_t gen;            // its block's generation (header word 3; word 2 is the epoch)
  uint64_t one_published;  // kOne: the log position to publish after the fence
  // Step 3:
  uint64_t head0;  // the header's first word with its checksum field zero
};

}  // namespace pmrt::txn_internal

namespace pmrt::txn {

using txn_internal::SmallRecord;

// ---- the record's shape and size (step 1 of WriteSmallCommitBody) ---------------------------

namespace {

// The record's size, from its shape (step 1's end): the header, a head per run, each kept word's
// value, and the pad words of a record of one declaration that ends at its cache line (kLine:
// the one-word commit's, at one_at; the general path's are added in step 2, once the record's
// address is known).
template <bool kLine>
[[gnu::always_inline]] inline void LayOut(SmallRecord& r, const uint8_t* one_at) {
  const uint64_t all = r.k == 64 ? ~uint64_t{0} : (uint64_t{1} << r.k) - 1;
  r.keep = all & ~r.dups;        // the first declaration of each word
  r.starts = r.keep & ~r.joins;  // those that start an entry
  const auto kept = static_cast<size_t>(__builtin_popcountll(r.keep));
  const auto runs = static_cast<size_t>(__builtin_popcountll(r.starts));
  static_assert(txn_internal::kSmallCommitWrites < kMaxEntryWords, "a run fits in one entry");
  // The record of one declaration ends at its cache line's end, padded with kPadWord, where the
  // engine pads (pad_ones_: a version-2 directory, records not streamed), so that the next record
  // starts on a line of its own. Unpadded, three one-word records in four write a line that the
  // previous commit has just written back, and half of them write back two lines; padded, each
  // writes back one line that no earlier commit wrote (docs/txn.md, "Line-ending records"). The
  // one-word commit's room for the pad is SmallCommitOneReady's (kLine); the general path
  // reserves room for the largest pad and takes what the record's address needs.
  r.pad_words = 0;
  if constexpr (kLine) {
    r.pad_words =
        txn_internal::LinePad(reinterpret_cast<uintptr_t>(one_at), sizeof(RecordHeader) + 16) / 8;
  }
  r.rec_words = sizeof(RecordHeader) / 8 + runs + kept + r.pad_words;
  r.bytes = r.rec_words * 8;
  static_assert(sizeof(RecordHeader) + 16 * txn_internal::kSmallCommitWrites <=
                    txn_internal::kMinBlockSize - txn_internal::kBlockPayload,
                "a small commit's record fits in any log block");
}

// Step 1 of WriteSmallCommitBody: the record's shape, in registers only (every store made here
// is one more that the previous commit's fence may hold back; docs/txn.md, "Stores after the
// fence"): which declarations repeat an earlier one's word (`dups`: dropped) and which extend a
// run of ascending consecutive words (`joins`: they share the head of the run before them, as
// ForEachRun makes them). Without joins (the common case) every entry holds a single word, in
// declaration order (streamed in pairs: StreamPairs, StreamOddPairs). A 64-bit filter with two
// bits per word (on a hash of it) sends only a word whose bits are both set already to a look-up
// among the earlier declarations.
// The same pass reads each word's index slot for the commit-order stamp (step 2): whether its
// newest record is older than the next stamp of the thread's block (`older`). Then the record's
// size (LayOut).
template <bool kOne, bool kLine>
[[gnu::always_inline]] inline SmallRecord ShapeOf(const Engine::Impl& impl, const ThreadTx& t,
                                                  const uint8_t* one_at) {
  const WriteRec* const wb = t.hot.begin;
  const size_t k = kOne ? 1 : t.writes_size();  // 1 to kSmallCommitWrites
  static_assert(txn_internal::kSmallCommitWrites <= 64, "one bit per declaration below");
  uint64_t filter = 0, dups = 0, joins = 0;
  uint64_t prev = wb[0].word - 2;  // the last kept word (this one extends nothing)
  std::atomic<uint64_t>* const slots = &impl.index->at(0);
  const uint32_t lo_key = t.stamp_lo_key;
  const uint64_t used = t.stamp_next - t.stamp_lo;
  auto precedes = [&](uint64_t wd) {
    return StampPrecedes(WordIndex::Key(slots[wd].load(std::memory_order_acquire)), lo_key, used);
  };
  // No stamp handed out since the thread's block (and the block has one left): every record of
  // every word is older than the block's next stamp, and no slot needs reading.
  const bool solo = impl.SmallCommitSolo(t);
  bool older = true;
  // The loop is written twice, with the slot reads and without (no test of `solo` per
  // declaration); one declaration repeats and extends nothing, so k = 1, the most common
  // transaction of all, skips it.
  auto shape = [&](auto solo_constant) {
    constexpr bool kSolo = decltype(solo_constant)::value;
    if (k == 1) {
      if constexpr (!kSolo) older = precedes(wb[0].word);
      return;
    }
    uint64_t bit = 1;  // the declaration's bit
    for (const WriteRec* w = wb; w != wb + k; ++w, bit <<= 1) {
      const uint64_t wd = w->word;
      const uint64_t bits = FilterBits(wd);
      if ((filter & bits) == bits) [[unlikely]] {
        bool dup = false;
        for (const WriteRec* e = wb; e != w && !dup; ++e) dup = e->word == wd;
        if (dup) {
          dups |= bit;
          continue;
        }
      }
      if constexpr (!kSolo) older &= precedes(wd);
      filter |= bits;
      if (wd == prev + 1) [[unlikely]]
        joins |= bit;
      prev = wd;
    }
  };
  if (solo) {
    shape(std::true_type{});
  } else {
    shape(std::false_type{});
  }
  SmallRecord r{};
  r.slots = slots;
  r.solo = solo;
  r.older = older;
  r.wb = wb;
  r.k = k;
  r.dups = dups;
  r.joins = joins;
  LayOut<kLine>(r, one_at);
  return r;
}

// ---- the record writers (step 3 of WriteSmallCommitBody) --------------------------------------
//
// One per record shape, behind one interface: each is given the record (SmallRecord: where it
// goes, its header's stamp and gen, which declarations give its entries), the transaction (its
// epoch, header word 2, is read from it), the pool's base (each kept word's value now, the
// transaction's last) and the checksum so far (the header's first word, its crc field taken as
// zero, then its other words, as RecordCrc computes it). It puts the record's words after the
// first into the log at r.at, in order: the header's stamp, epoch and gen, the entries, any pad
// words; folds each into the checksum where kCrcInLoop, and returns the checksum. The header's
// first word, which holds the checksum, goes after them (EndSmallCommit), except with
// PutOneEntry, which has the checksum before its first store. Before the fence the record may be
// on media whole, torn or absent in any mix of its words; only the checksum, over all of it,
// marks it committed.
//
// Single-word entries only (no run; duplicates dropped): each entry is {head, value}, so a
// streamed record goes in 16-byte pairs without a per-word test of the alignment (StreamPairs,
// StreamOddPairs); the words are those `keep` names (all when none repeats), in declaration
// order. (Their four loops are written out rather than sharing the entry's stores in a lambda,
// which GCC 12 compiles to more instructions: docs/txn.md, "Design notes", "Small commits".)

// One entry (kOne, not streamed): the checksum first, then the record's six words as three
// 16-byte stores, then its pad words (kLine).
template <bool kCrcInLoop, bool kLine>
[[gnu::always_inline]] inline uint64_t PutOneEntry(const SmallRecord& r, const ThreadTx& t,
                                                   const uint8_t* base, uint64_t crc) {
  auto* const d = reinterpret_cast<uint64_t*>(r.at);
  const auto [head, value] = SingleEntry<kCrcInLoop>(r.wb[0].word, base, crc);
  if constexpr (kLine) {
    for (size_t i = 0; i < r.pad_words; ++i) crc = Crc8(crc, txn_internal::kPadWord);
  }
  Store16(d, r.head0 | static_cast<uint64_t>(~static_cast<uint32_t>(crc)) << 32, r.stamp);
  Store16(d + 2, t.hot.epoch, r.gen);
  Store16(d + 4, head, value);
  if constexpr (kLine) {
    for (size_t i = 0; i < r.pad_words; ++i) d[6 + i] = txn_internal::kPadWord;
  }
  return crc;
}

// A 16-byte-aligned record: word 1 | words 2-3 | each entry {head, value}: aligned pairs.
template <bool kCrcInLoop, class Ops>
[[gnu::always_inline]] inline uint64_t StreamPairs(const Persister& persister, const SmallRecord& r,
                                                   const ThreadTx& t, const uint8_t* base,
                                                   uint64_t crc) {
  auto* const d = reinterpret_cast<uint64_t*>(r.at);
  Ops::Stream8(persister, txn_internal::kStreamPairs, d + 1, r.stamp);
  Ops::Stream16(persister, txn_internal::kStreamPairs, d + 2, t.hot.epoch, r.gen);
  uint64_t* e = d + sizeof(RecordHeader) / 8;
  if (r.dups == 0) {
    for (const WriteRec* w = r.wb; w != r.wb + r.k; ++w, e += 2) {
      const auto [head, value] = SingleEntry<kCrcInLoop>(w->word, base, crc);
      Ops::Stream16(persister, txn_internal::kStreamPairs, e, head, value);
    }
  } else {
    for (uint64_t m = r.keep; m != 0; m &= m - 1, e += 2) {
      const auto [head, value] = SingleEntry<kCrcInLoop>(r.wb[__builtin_ctzll(m)].word, base, crc);
      Ops::Stream16(persister, txn_internal::kStreamPairs, e, head, value);
    }
  }
  return crc;
}

// The other alignment: words 1-2 | word 3 and the first head | each value with the next head |
// the last value alone.
template <bool kCrcInLoop, class Ops>
[[gnu::always_inline]] inline uint64_t StreamOddPairs(const Persister& persister,
                                                      const SmallRecord& r, const ThreadTx& t,
                                                      const uint8_t* base, uint64_t crc) {
  auto* const d = reinterpret_cast<uint64_t*>(r.at);
  Ops::Stream16(persister, txn_internal::kStreamOdd, d + 1, r.stamp, t.hot.epoch);
  uint64_t carry = r.gen;
  uint64_t* e = d + 3;
  if (r.dups == 0) {
    for (const WriteRec* w = r.wb; w != r.wb + r.k; ++w, e += 2) {
      const auto [head, value] = SingleEntry<kCrcInLoop>(w->word, base, crc);
      Ops::Stream16(persister, txn_internal::kStreamOdd, e, carry, head);
      carry = value;
    }
  } else {
    for (uint64_t m = r.keep; m != 0; m &= m - 1, e += 2) {
      const auto [head, value] = SingleEntry<kCrcInLoop>(r.wb[__builtin_ctzll(m)].word, base, crc);
      Ops::Stream16(persister, txn_internal::kStreamOdd, e, carry, head);
      carry = value;
    }
  }
  Ops::Stream8(persister, txn_internal::kStreamOdd, e, carry);
  return crc;
}

// Any shape, runs included, word by word (WordSink: streamed, or plain stores that the caller
// flushes): a run's head, then its words' values; then the pad words (the general path's record
// of one declaration where the engine pads).
template <bool kCrcInLoop, bool kStream, class Ops>
[[gnu::always_inline]] inline uint64_t PutRuns(const Persister& persister, const SmallRecord& r,
                                               const ThreadTx& t, const uint8_t* base,
                                               uint64_t crc) {
  auto* const d = reinterpret_cast<uint64_t*>(r.at);
  const bool single = r.joins == 0;  // no run of two words or more
  WordSink<kStream, Ops> sink(persister, d + 1, r.stamp);
  sink.Put(t.hot.epoch);
  sink.Put(r.gen);
  for (uint64_t m = r.keep; m != 0; m &= m - 1) {
    const unsigned i = static_cast<unsigned>(__builtin_ctzll(m));
    const uint64_t wd = r.wb[i].word;
    if ((r.starts >> i & 1) != 0) {
      uint64_t n = 1;
      if (!single) [[unlikely]] {  // the run's length: its declarations kept up to the next
        const uint64_t after = ~uint64_t{0} << i << 1;  // declarations after i
        const uint64_t next = r.starts & after;
        const uint64_t upto = next == 0 ? ~uint64_t{0} : (next & -next) - 1;
        n += static_cast<uint64_t>(__builtin_popcountll(r.keep & after & upto));
      }
      const uint64_t head = MakeEntryHead(EntryType::kData, n, wd);
      sink.Put(head);
      if constexpr (kCrcInLoop) crc = Crc8(crc, head);
    }
    const uint64_t value = ValueOf(base, wd);
    sink.Put(value);
    if constexpr (kCrcInLoop) crc = Crc8(crc, value);
  }
  for (size_t i = 0; i < r.pad_words; ++i) {  // (pad_one)
    sink.Put(txn_internal::kPadWord);
    if constexpr (kCrcInLoop) crc = Crc8(crc, txn_internal::kPadWord);
  }
  sink.End();
  return crc;
}

// The writer of the record's shape.
template <bool kCrcInLoop, bool kStream, bool kOne, bool kLine, class Ops>
[[gnu::always_inline]] inline uint64_t PutSmallRecord(const Persister& persister,
                                                      const SmallRecord& r, const ThreadTx& t,
                                                      const uint8_t* base, uint64_t crc) {
  if constexpr (kOne && !kStream) {
    return PutOneEntry<kCrcInLoop, kLine>(r, t, base, crc);
  } else if (kStream && r.joins == 0 && (reinterpret_cast<uintptr_t>(r.at) & 8) == 0) {
    return StreamPairs<kCrcInLoop, Ops>(persister, r, t, base, crc);
  } else if (kStream && r.joins == 0) {
    return StreamOddPairs<kCrcInLoop, Ops>(persister, r, t, base, crc);
  } else {
    return PutRuns<kCrcInLoop, kStream, Ops>(persister, r, t, base, crc);
  }
}

// Step 3's end: the header's first word, which holds the checksum, at `rec` (the record's place
// in the block of `tail`), then the record's flush.
template <bool kCrcInLoop, bool kStream, bool kOne, class Ops>
[[gnu::always_inline]] inline void FinishSmallRecord(const Persister& persister,
                                                     txn_internal::LogStore& store,
                                                     const txn_internal::Chain& tail,
                                                     const SmallRecord& r, const ThreadTx& t,
                                                     uint64_t* rec, uint64_t crc) {
  if constexpr (kOne && !kStream) {
    // (stored with the rest: PutOneEntry)
  } else if constexpr (kCrcInLoop) {
    const uint64_t h0 = r.head0 | static_cast<uint64_t>(~static_cast<uint32_t>(crc)) << 32;
    if constexpr (kStream) {
      Ops::Stream8(persister, txn_internal::kStreamHead, rec, h0);
    } else {
      *rec = h0;
    }
  } else {
    RecordWriter::FinishHeader(rec, r.rec_words, RecordKind::kCommit, r.stamp, t.hot.epoch,
                               store.BlockGen(tail.tail));
  }
  if constexpr (kOne) {  // (the counters exist, no site is disabled: CommitOne)
    if constexpr (!kStream) Ops::Clwb(persister, txn_internal::kOneClwb, rec, r.bytes);
    Ops::CountFlush(persister, *epoch_internal::tls_counters, rec, r.bytes);
  } else if constexpr (kStream) {
    persister.CountStream(rec, r.bytes);
  } else {
    persister.Flush(txn_internal::kSmallFlush, rec, r.bytes);
  }
}

}  // namespace

// ---- the small commit ---------------------------------------------------------------------------

template <bool kCrcInLoop, bool kStream, bool kOne, bool kLine, class Ops>
[[gnu::always_inline]] inline absl::Status Engine::Impl::WriteSmallCommitBody(ThreadTx& t,
                                                                              uint8_t* one_at) {
  const Persister& persister = pool.persister();
  static_assert(kCrcInLoop || !kStream, "a streamed record's checksum is computed as it goes");
  static_assert(!kLine || (kOne && !kStream && kCrcInLoop), "only the clwb one-word commit pads");
  // The failed mode (an msync error: only the paths that fence with Persister::Fence can meet
  // it): nothing more can be made durable, so the transaction is rolled back.
  if constexpr (!kOne && !kStream) {
    if (persister.failed()) [[unlikely]]
      return SmallCommitFailed(t, pool.health());
  }
  // 1. The record's shape and size, in registers only (ShapeOf).
  SmallRecord r = ShapeOf<kOne, kLine>(*this, t, one_at);
  [[maybe_unused]] const bool pad_one = !kOne && !kStream && r.k == 1 && pad_ones_;
  // 2. The commit-order stamp (chosen while the caller still holds its locks, as in
  //    WriteCommit; from the thread's block, without a locked instruction, when no declared
  //    word's newest record is newer) and room in the log, taken without a call while the tail
  //    block has it.
  r.stamp = SmallCommitStamp(t, r.solo, r.older, r.stamp_key);
  txn_internal::Chain& log = store.chain(t.slot);
  r.at = kOne ? one_at : store.TryReserve(log, r.bytes + (pad_one ? kMaxLinePad : 0));
  if constexpr (!kOne) {  // (kOne: there is room, SmallCommitOneReady)
    if (r.at == nullptr) [[unlikely]] {
      absl::StatusOr<uint8_t*> at =
          store.Reserve(log, t.slot, r.bytes + (pad_one ? kMaxLinePad : 0));
      if (!at.ok()) return SmallCommitFailed(t, at.status());
      r.at = *at;
    }
    if (pad_one) {
      r.pad_words = txn_internal::LinePad(reinterpret_cast<uintptr_t>(r.at), r.bytes) / 8;
      r.rec_words += r.pad_words;
      r.bytes = r.rec_words * 8;
    }
  }
  // The log line this thread's commit writes a few commits from now (kLogWriteAhead bytes on),
  // fetched for writing while this record is built, so that a record's first store to a new
  // line does not wait for the line (our reading of the gain: a freed block comes back from the
  // reclaimer, whose core read its lines last; the floor's ring, which no other core reads, did
  // not slow down at 64 MiB instead of 1 MiB). Past the block's end it fetches
  // another block's line, or none: a hint, never a fault (docs/txn.md, "Design notes", "Write
  // prefetches", measures it with the slot's prefetch in add()).
  txn_internal::PrefetchForWrite(r.at + kLogWriteAhead);
  // (at == BlockAt(log.tail) + log.pos, as read again in EndSmallCommit; kOne keeps what it
  // needs of the chain in registers instead, the position to publish among them.)
  r.gen = store.BlockGen(log.tail);
  r.one_published = kOne ? txn_internal::LogStore::PublishedAfter(log, r.bytes) : 0;
  // 3. The record, straight into the log (the writer of its shape, PutSmallRecord), and the
  //    checksum alongside, the header's words first.
  uint64_t crc = 0xFFFFFFFFu;
  r.head0 = r.rec_words | static_cast<uint64_t>(RecordKind::kCommit) << 16;
  if constexpr (kCrcInLoop) {
    crc = Crc8(crc, r.head0);
    crc = Crc8(crc, r.stamp);
    crc = Crc8(crc, t.hot.epoch);
    crc = Crc8(crc, r.gen);
  }
  crc = PutSmallRecord<kCrcInLoop, kStream, kOne, kLine, Ops>(persister, r, t, pool.base(), crc);
  return EndSmallCommit<kCrcInLoop, kStream, kOne, Ops>(t, persister, log, r, crc);
}

template <bool kCrcInLoop, bool kStream, bool kOne, class Ops>
[[gnu::always_inline]] inline absl::Status Engine::Impl::EndSmallCommit(ThreadTx& t,
                                                                        const Persister& persister,
                                                                        txn_internal::Chain& log,
                                                                        const SmallRecord& r,
                                                                        uint64_t crc) {
  // What follows reads the log position, the block's gen and the epoch again rather than keep
  // them in registers across the loop (the stores above may alias them, so the compiler cannot
  // reuse them): spilling them would be stores too. kOne has no loop and few live values: it
  // keeps the record's address and the position to publish (bench/fence_path.sh: 454 -> 406
  // instructions from one commit's fence to the next with the other changes of that commit).
  txn_internal::Chain& tail = kOne ? log : store.chain(t.slot);
  auto* const rec = reinterpret_cast<uint64_t*>(kOne ? r.at : store.BlockAt(tail.tail) + tail.pos);
  FinishSmallRecord<kCrcInLoop, kStream, kOne, Ops>(persister, store, tail, r, t, rec, crc);
  // The transaction's volatile bookkeeping and the statistics go before the fence, where they
  // overlap the drain of the record's stores. The record is complete, so nothing below can
  // fail; the transaction ends here.
  if constexpr (kOne) {
    static_assert(sizeof(RecordHeader) + 16 == 48,
                  "stats() counts one_commits' bytes so (their line padding left out)");
    t.one_commits.Add(1);
  } else {
    t.commits.Add(1);
    t.record_bytes.Add(r.bytes - r.pad_words * 8);  // (line padding not counted: Stats)
    KickIfOverTrigger();  // (kOne: SmallCommitOneReady checked it; no block taken since)
  }
  // What the stores after the fence store, computed before it (see "Stores after the fence"
  // in docs/txn.md: the instructions after the fence wait in the reorder buffer until it
  // retires, and the fewer they are, the sooner the caller's next transaction starts its
  // misses).
  const uint64_t published =
      kOne ? r.one_published : txn_internal::LogStore::PublishedAfter(tail, r.bytes);
  const uint64_t v = WordIndex::Pack(r.stamp_key, t.hot.epoch);
  const WriteRec* const w_end = r.wb + r.k;
  epoch::ThreadSlot& guard_slot = *t.epoch_slot;
  EndKeepingGuard(t, /*small=*/true);
  // 4. The one fence, the commit point: a crash before it completes finds the record whole (the
  //    transaction counts as committed: allowed, commit has not returned), torn (bad checksum:
  //    this log ends there, the transaction is undone) or absent; after it, committed.
  //    Each fence is counted where it is issued (Ops::Fence, Persister::Fence).
  if constexpr (kOne) {
    Ops::Fence(persister, txn_internal::kOneFence, *epoch_internal::tls_counters);
  } else if constexpr (kStream) {
    Ops::Fence(persister, txn_internal::kStreamFence, epoch_internal::LocalCounters());
  } else {
    persister.Fence(txn_internal::kSmallFence);
  }
  store.PublishValue(tail, published);
  // 5. The index: the record is now the newest of each of its words (after the fence: the
  //    reclaimer may drop a word's older records once the index names a newer one). Straight
  //    from the write list (EndKeepingGuard emptied it but left its entries): a word declared
  //    twice gets the same value twice.
  for (const WriteRec* w = r.wb; w != w_end; ++w) {
    r.slots[w->word].store(v, std::memory_order_release);
  }
  // Last, the guard: the epoch cannot complete before the record is durable and published.
  epoch::Guard::Exit(guard_slot);
  // A fence that failed (the failed mode): the transaction took effect, but whether its record
  // is durable is unknown, and the caller is told so.
  if constexpr (!kOne && !kStream) {
    if (persister.failed()) [[unlikely]]
      return pool.health();
  }
  return absl::OkStatus();
}

}  // namespace pmrt::txn
