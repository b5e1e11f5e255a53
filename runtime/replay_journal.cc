#include "runtime/internal/replay_journal.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "base/crc32c.h"
#include "epoch/persist.h"
#include "runtime/runtime.h"

namespace pmrt::runtime_internal {
namespace {

constexpr size_t kEntryHead = 16;  // tag, key length, value length

size_t Padded(size_t n) { return (n + 7) & ~size_t{7}; }

uint32_t JournalCrc(const JournalHeader& h, const uint8_t* payload) {
  uint32_t crc = Crc32c(&h.count, 3 * sizeof(uint64_t));
  return Crc32c(payload, h.payload_bytes, crc);
}

}  // namespace

bool DecodeLoggedOp(std::string_view bytes, std::string_view* key, std::string_view* value) {
  if (bytes.size() < 4) return false;
  uint32_t n;
  std::memcpy(&n, bytes.data(), 4);
  if (n > bytes.size() - 4) return false;
  *key = bytes.substr(4, n);
  *value = bytes.substr(4 + n);
  return true;
}

absl::StatusOr<Journal> ReadJournal(Pool& pool, const alloc::Heap& heap, uint64_t offset) {
  auto bad = [&](std::string_view what) {
    return absl::DataLossError(absl::StrCat(pool.path(), ": the index replay journal at offset ",
                                            offset, " ", std::string(what)));
  };
  if (!pool.contains_offset(offset, sizeof(JournalHeader)) || offset % 8 != 0) {
    return bad("lies outside the pool");
  }
  auto* base = static_cast<uint8_t*>(pool.at(offset));
  const size_t usable = heap.UsableSize(base);
  if (usable < sizeof(JournalHeader)) return bad("is not a live heap block");
  const auto* h = reinterpret_cast<const JournalHeader*>(base);
  if (h->magic != JournalHeader::kMagic) return bad("has a bad magic number");
  if (h->count > usable / 8 || h->payload_bytes > usable ||
      sizeof(JournalHeader) + h->count * 8 + h->payload_bytes > usable) {
    return bad(absl::StrCat("claims ", h->count, " entries and ", h->payload_bytes,
                            " payload bytes, more than its ", usable, "-byte block"));
  }
  auto* marks = reinterpret_cast<uint64_t*>(base + sizeof(JournalHeader));
  const uint8_t* payload = base + sizeof(JournalHeader) + h->count * 8;
  if (JournalCrc(*h, payload) != h->crc) return bad("fails its checksum");
  Journal j;
  j.offset = offset;
  j.stamp_hi = h->stamp_hi;
  j.entries.reserve(h->count);
  size_t at = 0;
  for (uint64_t i = 0; i < h->count; ++i) {
    if (h->payload_bytes - at < kEntryHead) return bad(absl::StrCat("entry ", i, " is cut off"));
    uint64_t tag;
    uint32_t klen, vlen;
    std::memcpy(&tag, payload + at, 8);
    std::memcpy(&klen, payload + at + 8, 4);
    std::memcpy(&vlen, payload + at + 12, 4);
    const size_t len = Padded(size_t{klen} + vlen);
    if (h->payload_bytes - at - kEntryHead < len) {
      return bad(absl::StrCat("entry ", i, " is cut off"));
    }
    const auto* bytes = reinterpret_cast<const char*>(payload + at + kEntryHead);
    j.entries.push_back({tag >> 1, (tag & 1) != 0, std::string_view(bytes, klen),
                         std::string_view(bytes + klen, vlen), &marks[i]});
    at += kEntryHead + len;
  }
  return j;
}

bool AppliedDurably(const epoch::Manager& epochs, uint64_t mark) {
  return mark != 0 && epochs.PredatesExecution(mark) && !epochs.IsFailed(mark);
}

absl::StatusOr<std::vector<IndexOp>> PlanReplay(const epoch::Manager& epochs, const Journal* old,
                                                const std::vector<txn::LogicalOp>& logged,
                                                const std::vector<uint64_t>& ids,
                                                uint64_t* stamp_hi) {
  std::vector<IndexOp> last;
  *stamp_hi = old != nullptr ? old->stamp_hi : 0;
  if (mutation::Swapped(kSkipReplayMutant)) return last;
  const uint64_t newer_than = *stamp_hi;
  // Only the last operation on each key of each index decides its final state, and nothing
  // observes the ones before (keys of an epoch's hot set are written many times): newest first,
  // the logged operations newer than the journal, then the journal's entries not applied.
  const size_t most = logged.size() + (old != nullptr ? old->entries.size() : 0);
  last.reserve(most);
  absl::flat_hash_set<std::pair<uint64_t, std::string_view>> seen;
  seen.reserve(most);
  auto take = [&](const IndexOp& o) {
    if (!std::binary_search(ids.begin(), ids.end(), o.id)) return;  // dropped since
    if (seen.insert({o.id, o.key}).second) last.push_back(o);
  };
  for (auto it = logged.rbegin(); it != logged.rend(); ++it) {
    // Operations at or below the journal's stamp are in it already (the engine hands them again
    // when a crash came before it recorded them as replayed).
    if (it->stamp <= newer_than) continue;
    IndexOp o{it->tag >> 1, (it->tag & 1) != 0, {}, {}, nullptr};
    if (!DecodeLoggedOp(it->bytes, &o.key, &o.value)) {
      return absl::DataLossError(absl::StrCat("a logged operation of index ", o.id, " (",
                                              it->bytes.size(), " bytes, commit stamp ", it->stamp,
                                              ") does not decode"));
    }
    *stamp_hi = std::max(*stamp_hi, it->stamp);
    take(o);
  }
  if (old != nullptr) {
    for (auto it = old->entries.rbegin(); it != old->entries.rend(); ++it)
      if (!AppliedDurably(epochs, *it->mark)) take(*it);
  }
  std::reverse(last.begin(), last.end());
  // The gate's mutant: the oldest operation of each key wins.
  if (mutation::Swapped(kReplayOrderMutant)) {
    std::vector<IndexOp> first;
    seen.clear();
    if (old != nullptr) {
      for (const IndexOp& e : old->entries)
        if (!AppliedDurably(epochs, *e.mark) && seen.insert({e.id, e.key}).second)
          first.push_back(e);
    }
    for (const txn::LogicalOp& op : logged) {
      IndexOp o{op.tag >> 1, (op.tag & 1) != 0, {}, {}, nullptr};
      if (op.stamp > newer_than && DecodeLoggedOp(op.bytes, &o.key, &o.value) &&
          std::binary_search(ids.begin(), ids.end(), o.id) && seen.insert({o.id, o.key}).second)
        first.push_back(o);
    }
    return first;
  }
  return last;
}

absl::StatusOr<uint64_t> WriteJournal(Pool& pool, alloc::Heap& heap,
                                      const std::vector<IndexOp>& ops, uint64_t stamp_hi) {
  size_t payload = 0;
  for (const IndexOp& o : ops) payload += kEntryHead + Padded(o.key.size() + o.value.size());
  const size_t bytes = sizeof(JournalHeader) + ops.size() * 8 + payload;
  auto block = heap.TryAllocate(bytes, 64);
  if (!block.ok()) {
    return absl::Status(block.status().code(),
                        absl::StrCat("the index replay journal (", ops.size(),
                                     " operations): ", std::string(block.status().message())));
  }
  auto* base = static_cast<uint8_t*>(*block);
  auto* h = reinterpret_cast<JournalHeader*>(base);
  std::memset(base, 0, sizeof(JournalHeader) + ops.size() * 8);
  uint8_t* p = base + sizeof(JournalHeader) + ops.size() * 8;
  for (const IndexOp& o : ops) {
    const uint64_t tag = o.id << 1 | (o.remove ? 1 : 0);
    const auto klen = static_cast<uint32_t>(o.key.size());
    const auto vlen = static_cast<uint32_t>(o.value.size());
    std::memcpy(p, &tag, 8);
    std::memcpy(p + 8, &klen, 4);
    std::memcpy(p + 12, &vlen, 4);
    // (An empty view's data may be null, which memcpy may not be given even for 0 bytes.)
    if (klen > 0) std::memcpy(p + kEntryHead, o.key.data(), klen);
    if (vlen > 0) std::memcpy(p + kEntryHead + klen, o.value.data(), vlen);
    const size_t len = Padded(size_t{klen} + vlen);
    std::memset(p + kEntryHead + klen + vlen, 0, len - klen - vlen);
    p += kEntryHead + len;
  }
  h->magic = JournalHeader::kMagic;
  h->count = ops.size();
  h->stamp_hi = stamp_hi;
  h->payload_bytes = payload;
  h->crc = JournalCrc(*h, base + sizeof(JournalHeader) + ops.size() * 8);
  // A fresh block of this epoch: the heap writes its bytes back with its allocation at the
  // epoch's boundary (no registration here), and a crash before rolls the allocation back
  // (nothing points to it yet). Blocks are reused only once their free is durable, so a fresh
  // block always reads free on media and the heap always counts it fresh.
  return pool.offset_of(base);
}

}  // namespace pmrt::runtime_internal
