#include "txn/internal/log_store.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <functional>

#include "absl/strings/str_cat.h"
#include "base/crc32c.h"
#include "base/status_macros.h"

namespace pmrt::txn_internal {
namespace {

uint32_t HeaderCrc(const DirectoryHeader& h) { return Crc32c(&h, offsetof(DirectoryHeader, crc)); }
uint32_t BlockCrc(const BlockHeader& h) { return Crc32c(&h, offsetof(BlockHeader, crc)); }
uint32_t LinkCrc(const BlockLink& l) { return Crc32c(&l, offsetof(BlockLink, crc)); }

bool ValidBlockSize(size_t s) {
  return s >= kMinBlockSize && s <= kMaxBlockSize && (s & (s - 1)) == 0;
}

}  // namespace

#if defined(__x86_64__)
namespace {
// The same CRC32C as RecordCrcReference, 8 bytes per crc32 instruction and no calls: the first
// word is {words, kind} with the crc field as zero.
__attribute__((target("sse4.2"))) uint32_t RecordCrcSse42(const RecordHeader* h) {
  const auto* p = reinterpret_cast<const uint8_t*>(h);
  uint64_t v;
  std::memcpy(&v, p, 8);
  uint64_t c = __builtin_ia32_crc32di(0xFFFFFFFFu, v & 0xFFFFFFFFu);
  for (size_t i = 1, n = h->words; i < n; ++i) {
    std::memcpy(&v, p + 8 * i, 8);
    c = __builtin_ia32_crc32di(c, v);
  }
  return ~static_cast<uint32_t>(c);
}
const bool kHasSse42 = (__builtin_cpu_init(), __builtin_cpu_supports("sse4.2"));
}  // namespace
bool g_crc_in_commit_loop = kHasSse42;
#else
bool g_crc_in_commit_loop = false;
#endif

uint32_t RecordCrc(const RecordHeader* h) {
  static_assert(std::endian::native == std::endian::little, "the crc field is bytes 4..7");
#if defined(__x86_64__)
  if (kHasSse42) return RecordCrcSse42(h);
#endif
  return RecordCrcReference(h);
}

uint32_t RecordCrcReference(const RecordHeader* h) {
  static constexpr uint8_t kZero[4] = {};
  const auto* b = reinterpret_cast<const uint8_t*>(h);
  uint32_t c = Crc32c(b, 4);
  c = Crc32c(kZero, 4, c);
  return Crc32c(b + 8, size_t{h->words} * 8 - 8, c);
}

const RecordHeader* ValidRecord(const uint8_t* block, size_t block_size, uint64_t gen, size_t pos) {
  if (pos % 8 != 0 || pos + sizeof(RecordHeader) > block_size) return nullptr;
  const auto* h = reinterpret_cast<const RecordHeader*>(block + pos);
  const size_t bytes = size_t{h->words} * 8;
  if (bytes < sizeof(RecordHeader) || pos + bytes > block_size || h->gen != gen) return nullptr;
  if (h->kind < static_cast<uint16_t>(RecordKind::kCommit) ||
      h->kind > static_cast<uint16_t>(RecordKind::kCompact)) {
    return nullptr;
  }
  if (RecordCrc(h) != h->crc) return nullptr;
  // The entries must tile the record exactly (a valid checksum makes this a formality, but the
  // readers rely on it).
  const auto* p = reinterpret_cast<const uint64_t*>(h + 1);
  const auto* end = reinterpret_cast<const uint64_t*>(h) + h->words;
  while (p < end) {
    const uint64_t head = *p++;
    if (head == kPadWord) continue;  // padding (version 2; never written into a version-1 log)
    const EntryType t = EntryTypeOf(head);
    if (t == EntryType::kData) {
      const uint64_t n = EntryWords(head);
      if (n == 0 || n > static_cast<uint64_t>(end - p)) return nullptr;
      p += n;
    } else if (t == EntryType::kLogical) {
      const uint64_t n = EntryWords(head);
      if (n == 0 || n > static_cast<uint64_t>(end - p) || p[0] > 8 * (n - 1)) return nullptr;
      p += n;
    } else if (t != EntryType::kAlloc && t != EntryType::kFree) {
      return nullptr;
    }
  }
  return h;
}

LogStore::LogStore(Pool& pool, epoch::Manager& epochs, alloc::Heap& heap)
    : pool_(pool), epochs_(epochs), heap_(heap), blocks_(new BlockState[kTableCapacity]) {
  for (auto& c : chains_) c = std::make_unique<Chain>();
  compact_ = std::make_unique<Chain>();
}

absl::Status LogStore::Create(size_t block_size) {
  // Epoch-scoped, like any allocation outside a transaction: the block's content (zeroed, the
  // header) is written back by the boundary that completes this epoch, as every fresh block's
  // is (the heap registers it). The state word is undo-logged before it is written (Snapshot
  // also registers it dirty): a crash before the boundary rolls the allocation back and the
  // word back to 0 together. Without the undo copy the word could reach media alone, and the
  // next open would take it for a log to recover while the runtime's catalog, created again
  // before the engine opens, allocates (Engine::Open refuses that).
  epoch::Guard g(epochs_);
  auto& line = pool_.state().txn_directory.value;
  if (!mutation::Swapped(kUnloggedDirectoryLink)) {
    std::atomic<uint64_t> logged{0};  // the word is written once per pool: no mark of its own
    RETURN_IF_ERROR(epochs_.log().Snapshot(&line, sizeof(line), &logged));
  }
  void* p = heap_.Allocate(kDirectorySize, 64);
  if (p == nullptr) {
    return absl::ResourceExhaustedError(
        absl::StrCat(pool_.path(), ": no room for the transaction directory (", kDirectorySize,
                     " bytes): ", alloc::AllocErrorName(alloc::Heap::LastError())));
  }
  std::memset(p, 0, kDirectorySize);
  auto* h = static_cast<DirectoryHeader*>(p);
  h->magic = kDirectoryMagic;
  h->version = kDirectoryVersion;
  h->block_size = static_cast<uint32_t>(block_size);
  h->crc = HeaderCrc(*h);
  line.store(pool_.offset_of(p), std::memory_order_release);
  if (mutation::Swapped(kUnloggedDirectoryLink)) epochs_.RecordDirty(&line, sizeof(line));
  return absl::OkStatus();
}

absl::Status LogStore::Open(size_t block_size, bool* created) {
  if (!ValidBlockSize(block_size)) {
    return absl::InvalidArgumentError(absl::StrCat("txn: block size ", block_size,
                                                   " is not a power of two in [", kMinBlockSize,
                                                   ", ", kMaxBlockSize, "]"));
  }
  const uint64_t off = pool_.state().txn_directory.value.load(std::memory_order_acquire);
  void* p = off == 0 ? nullptr : pool_.at(off);
  // A directory whose allocation was rolled back (its creating epoch failed) is no directory.
  const bool usable =
      p != nullptr && pool_.contains(p, kDirectorySize) && heap_.UsableSize(p) >= kDirectorySize;
  *created = !usable;
  if (!usable) {
    RETURN_IF_ERROR(Create(block_size));
    p = pool_.at(pool_.state().txn_directory.value.load(std::memory_order_acquire));
  }
  dir_ = static_cast<DirectoryLayout*>(p);
  const DirectoryHeader& h = dir_->header;
  const std::string where =
      absl::StrCat(pool_.path(), ": transaction directory at offset ", pool_.offset_of(p));
  if (h.magic != kDirectoryMagic || h.crc != HeaderCrc(h)) {
    return absl::DataLossError(absl::StrCat(where, " has a bad magic or checksum"));
  }
  if (h.version > kDirectoryVersion || h.version == 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        where, ": version ", h.version, h.version == 0 ? " is invalid" : " is newer than supported",
        " (this build reads versions 1 to ", kDirectoryVersion, ")"));
  }
  version_ = h.version;
  if (!ValidBlockSize(h.block_size)) {
    return absl::DataLossError(absl::StrCat(where, ": bad block size ", h.block_size));
  }
  block_size_ = h.block_size;
  table_ = reinterpret_cast<uint64_t*>(reinterpret_cast<uint8_t*>(dir_) + kTableOffset);
  // The table: every nonzero entry is a block of the layer. Entries are appended in order; a
  // zero below a nonzero one is an entry whose epoch failed before it was durable (its block's
  // allocation was rolled back with it), left as a hole.
  uint32_t count = 0;
  const RegionDesc heap = pool_.region(PoolRegion::kHeap);
  for (uint32_t i = 0; i < kTableCapacity; ++i) {
    const uint64_t b = table_[i];
    if (b == 0) continue;
    if (b < heap.offset || b + block_size_ > heap.offset + heap.size || b % block_size_ != 0 ||
        by_offset_.count(b) != 0) {
      return absl::DataLossError(
          absl::StrCat(where, ": table entry ", i, " (offset ", b, ") is not a log block"));
    }
    blocks_[i] = {b, 0};
    by_offset_[b] = i;
    count = i + 1;
  }
  count_.store(count, std::memory_order_release);
  for (uint32_t i = count; i > 0; --i)
    if (table_[i - 1] == 0) holes_.push_back(i - 1);  // lowest last: reused first
  next_gen_.store(0);
  return absl::OkStatus();
}

uint32_t LogStore::IndexOf(uint64_t off) const {
  std::lock_guard<std::mutex> l(mu_);
  auto it = by_offset_.find(off);
  return it == by_offset_.end() ? kNoBlock : it->second;
}

std::vector<uint64_t> LogStore::OwnedOffsets() const {
  std::lock_guard<std::mutex> l(mu_);
  std::vector<uint64_t> out{pool_.offset_of(dir_)};
  for (const auto& [off, b] : by_offset_) out.push_back(off);
  return out;
}

uint64_t LogStore::blocks_owned() const {
  std::lock_guard<std::mutex> l(mu_);
  return by_offset_.size();
}

bool LogStore::HeaderValid(uint32_t b, uint32_t slot) const {
  BlockHeader h;
  std::memcpy(&h, BlockAt(b), sizeof(h));
  return h.magic == kBlockMagic && h.crc == BlockCrc(h) && h.slot == slot && h.gen != 0;
}

void LogStore::WalkChain(uint64_t head, uint32_t slot, Chain& into,
                         const std::function<void(const RecordRef&)>& fn) {
  uint32_t b = head == 0 ? kNoBlock : IndexOf(head);
  uint64_t expected_gen = 0;  // the head block's gen is whatever its valid header says
  uint64_t last = kNothingPublished;
  std::vector<bool> seen(BlockCount(), false);
  while (b != kNoBlock && !seen[b] && HeaderValid(b, slot)) {
    seen[b] = true;
    const uint8_t* base = BlockAt(b);
    const uint64_t gen = reinterpret_cast<const BlockHeader*>(base)->gen;
    if (expected_gen != 0 && gen != expected_gen) break;  // reused since it was linked
    blocks_[b].gen = gen;
    into.blocks.push_back(b);
    size_t pos = kBlockPayload;
    while (const RecordHeader* h = ValidRecord(base, block_size_, gen, pos)) {
      fn({h, b, static_cast<uint32_t>(pos)});
      pos += size_t{h->words} * 8;
    }
    last = uint64_t{b} << 32 | pos;
    blocks_[b].end = static_cast<uint32_t>(pos);
    BlockLink l;
    std::memcpy(&l, base + sizeof(BlockHeader), sizeof(l));
    if (l.gen != gen || l.crc != LinkCrc(l)) break;  // never linked in this incarnation
    b = IndexOf(l.next);
    expected_gen = l.next_gen;
  }
  into.published.store(last, std::memory_order_release);
}

absl::Status LogStore::MarkTableAllocated() {
  for (uint32_t i = 0, n = BlockCount(); i < n; ++i) {
    if (blocks_[i].offset == 0) continue;
    RETURN_IF_ERROR(heap_.MarkAllocated(blocks_[i].offset, block_size_));
  }
  return absl::OkStatus();
}

void LogStore::BuildFreePool() {
  std::vector<bool> used(BlockCount(), false);
  auto mark = [&](Chain& c) {
    std::lock_guard<std::mutex> l(c.mu);
    for (uint32_t b : c.blocks) used[b] = true;
  };
  for (auto& c : chains_) mark(*c);
  mark(*compact_);
  std::lock_guard<std::mutex> l(mu_);
  free_.clear();
  uint64_t in_use = 0;
  for (uint32_t i = 0; i < used.size(); ++i) {
    if (blocks_[i].offset == 0) continue;
    if (used[i]) {
      ++in_use;
    } else {
      free_.push_back(i);
    }
  }
  in_use_.store(in_use);
  peak_.store(in_use);
}

absl::StatusOr<uint32_t> LogStore::Grow(uint32_t slot) {
  // REQUIRES: mu_, and the caller's Guard. The new block's table entry is flushed here and
  // registered dirty in the guard's epoch, the epoch of the heap allocation: the boundary that
  // completes that epoch (and so makes the allocation durable) writes the entry back first and
  // fences it on the advancing thread, so a crash never leaks the block, whatever the caller
  // fences and whenever its guard ends. (A transaction's record or snapshot fence, in the same
  // guard, makes it durable sooner; the reclaimer ends its guard right after taking a block. A
  // fence orders only its own thread's flushes, so the reclaimer's later fence could come after
  // the boundary.) A crash before the boundary fails the epoch: the allocation is rolled back; a
  // durable entry then names an unallocated block, which MarkTableAllocated re-marks at the
  // next open.
  // The lowest hole (a block given back to the heap, ReturnFree, or an entry whose epoch failed),
  // else the next entry; never in a table line that ReturnFree undo-logged in this epoch: a
  // failure of the epoch restores that line, and with it would erase this entry, whose block may
  // hold records of committed transactions (they outlive the epoch). Entries skipped that way
  // stay holes.
  const uint64_t e = epochs_.LocalSlot().epoch.load(std::memory_order_relaxed);
  auto blocked = [&](uint32_t i) {
    return e == return_epoch_ && return_lines_.count(i / 8) != 0 &&
           !mutation::Swapped(kReturnLineMutant);
  };
  uint32_t b = kNoBlock;
  for (size_t k = holes_.size(); k-- > 0;) {
    if (!blocked(holes_[k])) {
      b = holes_[k];
      holes_.erase(holes_.begin() + static_cast<ptrdiff_t>(k));
      break;
    }
  }
  if (b == kNoBlock) {
    b = count_.load(std::memory_order_relaxed);
    for (; b < kTableCapacity && blocked(b); ++b) holes_.push_back(b);
    if (b > count_.load(std::memory_order_relaxed)) {
      std::sort(holes_.begin(), holes_.end(), std::greater<uint32_t>());
      count_.store(b, std::memory_order_release);  // the skipped entries are holes below it
    }
  }
  if ((slot != kCompactSlot && by_offset_.size() >= limit_blocks()) || b >= kTableCapacity) {
    if (b < count_.load(std::memory_order_relaxed)) holes_.push_back(b);
    return absl::ResourceExhaustedError(
        absl::StrCat(pool_.path(), ": transaction log limit reached (", by_offset_.size(),
                     " blocks of ", block_size_, " bytes)"));
  }
  void* p = heap_.Allocate(block_size_, 64);
  if (p == nullptr) {
    if (b < count_.load(std::memory_order_relaxed)) holes_.push_back(b);
    return absl::ResourceExhaustedError(
        absl::StrCat(pool_.path(), ": no heap room for a transaction log block: ",
                     alloc::AllocErrorName(alloc::Heap::LastError())));
  }
  const uint64_t off = pool_.offset_of(p);
  table_[b] = off;
  pool_.persister().Flush(kTableFlush, &table_[b], sizeof(uint64_t));
  if (!mutation::Swapped(kDirtyTable)) epochs_.RecordDirty(&table_[b], sizeof(uint64_t));
  blocks_[b] = {off, 0};
  by_offset_[off] = b;
  if (b >= count_.load(std::memory_order_relaxed)) count_.store(b + 1, std::memory_order_release);
  return b;
}

absl::StatusOr<uint32_t> LogStore::Acquire(uint32_t slot) {
  uint32_t b = kNoBlock;
  {
    std::lock_guard<std::mutex> l(mu_);
    if (!free_.empty()) {
      b = free_.back();
      free_.pop_back();
    } else {
      ASSIGN_OR_RETURN(b, Grow(slot));
    }
  }
  const uint64_t now = in_use_.fetch_add(1, std::memory_order_relaxed) + 1;
  uint64_t peak = peak_.load(std::memory_order_relaxed);
  while (now > peak && !peak_.compare_exchange_weak(peak, now, std::memory_order_relaxed)) {
  }
  InitHeader(b, slot);
  return b;
}

void LogStore::InitHeader(uint32_t b, uint32_t slot) {
  // A new incarnation: a gen never used before by any block of this pool (the open count,
  // durable before this run wrote anything, and a per-run counter). Records left from earlier
  // incarnations carry other gens and fail validation; so does the block's old link.
  // Flushed, not fenced: the caller's record fence covers it. Until then the old header (whose
  // records are never reached: no durable link or head names this block before that fence, and
  // the block was unreachable when it was freed) or a torn one (bad crc: the walk stops) is
  // harmless.
  BlockHeader h{};
  h.magic = kBlockMagic;
  h.gen = pool_.open_count() << 32 | (next_gen_.fetch_add(1, std::memory_order_relaxed) + 1);
  h.slot = slot;
  h.crc = BlockCrc(h);
  std::memcpy(BlockAt(b), &h, sizeof(h));
  pool_.persister().Flush(kBlockFlush, BlockAt(b), sizeof(h));
  blocks_[b].gen = h.gen;
  blocks_[b].end = kBlockPayload;
}

void LogStore::Link(uint32_t from, uint32_t to) {
  // The link is written once per incarnation of `from`, after from's last record. Flushed with
  // the first record of `to` and fenced with it: before that fence the link may or may not be
  // on media, and `to` holds nothing committed yet.
  BlockLink l{};
  l.next = blocks_[to].offset;
  l.next_gen = blocks_[to].gen;
  l.gen = blocks_[from].gen;
  l.crc = LinkCrc(l);
  uint8_t* at = BlockAt(from) + sizeof(BlockHeader);
  std::memcpy(at, &l, sizeof(l));
  pool_.persister().Flush(kLinkFlush, at, sizeof(l));
}

absl::StatusOr<uint8_t*> LogStore::Reserve(Chain& c, uint32_t slot, size_t bytes) {
  if (bytes > max_record_bytes()) {
    return absl::InvalidArgumentError(absl::StrCat("txn: a record of ", bytes,
                                                   " bytes does not fit in a log block (at most ",
                                                   max_record_bytes(), "); split the transaction"));
  }
  if (uint8_t* at = TryReserve(c, bytes)) return at;
  ASSIGN_OR_RETURN(const uint32_t b, Acquire(slot));
  Leave(c);  // before any record of b is published
  {
    std::lock_guard<std::mutex> l(c.mu);
    if (!c.blocks.empty()) {
      Link(c.blocks.back(), b);
    } else if (slot != kCompactSlot) {
      // The log's first block (the compacted log's head is in the descriptor instead). An
      // aligned 8-byte store: media holds the old head (the log had no valid block) or this.
      dir_->heads[slot].store(blocks_[b].offset, std::memory_order_release);
      pool_.persister().Flush(kHeadFlush, &dir_->heads[slot], sizeof(uint64_t));
    }
    c.blocks.push_back(b);
  }
  c.tail = b;
  c.tail_at = BlockAt(b);
  c.pos = kBlockPayload;
  return c.tail_at + c.pos;
}

void LogStore::Release(const std::vector<uint32_t>& blocks) {
  if (blocks.empty()) return;
  std::lock_guard<std::mutex> l(mu_);
  free_.insert(free_.end(), blocks.begin(), blocks.end());
  in_use_.fetch_sub(blocks.size(), std::memory_order_relaxed);
}

uint64_t LogStore::ReturnFree(size_t keep) {
  std::lock_guard<std::mutex> l(mu_);
  if (free_.size() <= keep) return 0;
  const uint64_t e = epochs_.LocalSlot().epoch.load(std::memory_order_relaxed);
  if (e != return_epoch_) {  // Grow avoids the lines logged in return_epoch_ (see there)
    return_epoch_ = e;
    return_lines_.clear();
  }
  // The oldest free blocks (the front: Acquire reuses the back first), grouped by table line.
  std::vector<uint32_t> give(free_.begin(), free_.end() - static_cast<ptrdiff_t>(keep));
  std::sort(give.begin(), give.end());
  uint64_t returned = 0;
  std::vector<uint32_t> kept;
  for (size_t i = 0; i < give.size();) {
    const uint32_t line = give[i] / 8;
    size_t j = i;
    while (j < give.size() && give[j] / 8 == line) ++j;
    // The line's old entries go to the external undo log first (durable in Snapshot): a failed
    // epoch restores them, and the heap's frees of this epoch are rolled back with it. Once per
    // line per epoch (its mark): a second snapshot in the same epoch would hold the entries the
    // first return zeroed, and restoring it would leave that return's blocks allocated in the
    // heap and in no table.
    uint64_t* entries = &table_[line * 8];
    if (!epochs_.log().Snapshot(entries, 64, &line_marks_[line]).ok()) {
      kept.insert(kept.end(), give.begin() + static_cast<ptrdiff_t>(i), give.end());
      break;
    }
    return_lines_.insert(line);
    for (size_t k = i; k < j; ++k) {
      const uint32_t b = give[k];
      void* block = BlockAt(b);
      table_[b] = 0;  // registered dirty by Snapshot: written back by the epoch's boundary
      by_offset_.erase(blocks_[b].offset);
      blocks_[b] = {};
      holes_.push_back(b);
      (void)heap_.Free(block);  // a live block of this heap: cannot fail
      ++returned;
    }
    i = j;
  }
  std::vector<uint32_t> rest(free_.end() - static_cast<ptrdiff_t>(keep), free_.end());
  free_ = std::move(kept);
  free_.insert(free_.end(), rest.begin(), rest.end());
  // Reused lowest first (Grow pops the back).
  std::sort(holes_.begin(), holes_.end(), std::greater<uint32_t>());
  return returned;
}

}  // namespace pmrt::txn_internal
