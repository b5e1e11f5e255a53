// Value objects and ValueRef, the 8-byte link from a border node slot to its value.
//
// A value object is allocated separately (NodeAllocator::AllocateValue) and never changes after
// it is published; an update installs a new object and retires the old one. It also carries the
// key's suffix (the bytes after the slot's slice) when the key is longer than the slice, so a
// lookup checks the suffix with the same dereference that fetches the value. Three forms, one
// per tree (ValueForm; the durable tree's layout version picks it):
//
//   plain (transient trees, durable layout 1), and trailer (durable layout 2):
//   +-----------+------------+------------------+-----------------+--------------------+
//   | value_len | suffix_len | suffix bytes ... | value bytes ... | checksum (trailer) |
//   |  uint32   |   uint32   |  suffix_len      |  value_len      |  uint32            |
//   +-----------+------------+------------------+-----------------+--------------------+
//
//   inline (durable layout 3, the default): the checksum sits right before the value bytes, and
//   a key without a suffix stores it in place of suffix_len, so a small object keeps the size of
//   the plain form (8-byte header + value):
//   +------------------+----------+-----------------+
//   | value_len | kInl | checksum | value bytes ... |                              no suffix
//   +------------------+----------+-----------------+
//   +------------------------+------------+------------------+----------+-----------------+
//   | value_len | kInl | kSfx | suffix_len | suffix bytes ... | checksum | value bytes ... |
//   +------------------------+------------+------------------+----------+-----------------+
//
// The inline form marks itself in the top two bits of its first word (kInlineBit, kSuffixBit),
// so every accessor below reads any form without knowing the tree's; plain and trailer objects
// never set kInlineBit (their values are below 2^31 bytes). The check (tree_check.cc) compares
// each object's form against its tree's before trusting any length.
//
// The checksum (trees of layout 2 and 3; ValueChecksum below) is the CRC32C of the key's length,
// the whole key (every layer's slice and the suffix) and the value. It is set before the object
// is published and never changes, so it covers the key bytes in the border node's slot (slice,
// length class) and the link to the object as well as the value: a changed key, a link to a
// different object or a changed value all fail the comparison. Moving a key into a new layer
// moves its object's bytes with the same full key, hence the same checksum. A (key, value view)
// pair and the tree's form are all a check needs: the checksum is just before the view
// (inline) or just after it (trailer).
//
// ValueRef is what the slot stores: the object's address in the transient tree, its 8-byte pool
// offset in the durable one (DESIGN.md: no raw pointer on media), encoded and decoded against the
// tree policy's base like every other link (node_layout.h). InCLL's packed value log
// (docs/masstree.md) needs the low 4 bits free, so value objects are 16-byte aligned, and a
// durable reference fits in 48 bits.
#ifndef PMRT_DS_INTERNAL_VALUE_REF_H_
#define PMRT_DS_INTERNAL_VALUE_REF_H_

#include <cstdint>
#include <cstring>
#include <string_view>
#include <type_traits>

#include "base/crc32c.h"

namespace pmrt::ds_internal {

// The checksum a value object of `key` holding `value` carries (see above).
inline uint32_t ValueChecksum(std::string_view key, std::string_view value) {
  const uint32_t n = static_cast<uint32_t>(key.size());
  uint32_t crc = Crc32c(&n, sizeof(n));
  crc = Crc32c(key.data(), key.size(), crc);
  return Crc32c(value.data(), value.size(), crc);
}
inline constexpr size_t kValueChecksumBytes = sizeof(uint32_t);

// The value object form a tree writes (see above).
enum class ValueForm : uint8_t { kPlain, kTrailer, kInline };

struct ValueObject {
  uint32_t len_word;  // value bytes; in the inline form also kInlineBit and kSuffixBit
  uint32_t word2;     // suffix bytes; the checksum in the inline form without a suffix

  static constexpr size_t kAlign = 16;
  static constexpr uint32_t kInlineBit = 1u << 31;
  static constexpr uint32_t kSuffixBit = 1u << 30;
  // The longest value any form holds (the inline form's length field has 30 bits).
  static constexpr size_t kMaxValueBytes = kSuffixBit - 1;
  // The longest key suffix (a 32-bit length).
  static constexpr size_t kMaxSuffixBytes = UINT32_MAX;

  // Bytes of an object of `form` with these lengths.
  static size_t SizeFor(ValueForm form, size_t suffix_len, size_t value_len) {
    switch (form) {
      case ValueForm::kPlain:
        return sizeof(ValueObject) + suffix_len + value_len;
      case ValueForm::kTrailer:
        return sizeof(ValueObject) + suffix_len + value_len + kValueChecksumBytes;
      case ValueForm::kInline:
        break;
    }
    return sizeof(ValueObject) + value_len + (suffix_len == 0 ? 0 : suffix_len + sizeof(uint32_t));
  }
  // Bytes of this object. `tree_form` is its tree's form: it tells a trailer object from a
  // plain one (an inline object marks itself).
  size_t size(ValueForm tree_form) const {
    return SizeFor(
        is_inline() ? ValueForm::kInline
                    : (tree_form == ValueForm::kTrailer ? ValueForm::kTrailer : ValueForm::kPlain),
        suffix_len(), value_len());
  }

  // Builds an object of `form` in `mem` (SizeFor(form, suffix.size(), value.size()) bytes);
  // `crc` is its checksum (ignored by the plain form). REQUIRES: value.size() <= kMaxValueBytes,
  // suffix.size() <= kMaxSuffixBytes.
  static ValueObject* Init(void* mem, ValueForm form, std::string_view suffix,
                           std::string_view value, uint32_t crc) {
    auto* v = static_cast<ValueObject*>(mem);
    char* data = reinterpret_cast<char*>(v + 1);
    const auto value_len = static_cast<uint32_t>(value.size());
    const auto suffix_len = static_cast<uint32_t>(suffix.size());
    if (!suffix.empty()) std::memcpy(data, suffix.data(), suffix.size());
    char* at = data + suffix.size();
    if (form == ValueForm::kInline) {
      v->len_word = value_len | kInlineBit | (suffix.empty() ? 0 : kSuffixBit);
      if (suffix.empty()) {
        v->word2 = crc;
      } else {
        v->word2 = suffix_len;
        std::memcpy(at, &crc, sizeof(crc));
        at += sizeof(crc);
      }
    } else {
      v->len_word = value_len;
      v->word2 = suffix_len;
      if (form == ValueForm::kTrailer) std::memcpy(at + value.size(), &crc, sizeof(crc));
    }
    if (!value.empty()) std::memcpy(at, value.data(), value.size());
    return v;
  }

  bool is_inline() const { return (len_word & kInlineBit) != 0; }
  uint32_t value_len() const { return is_inline() ? len_word & kMaxValueBytes : len_word; }
  uint32_t suffix_len() const {
    return (len_word & (kInlineBit | kSuffixBit)) == kInlineBit ? 0 : word2;
  }
  std::string_view suffix() const {
    return {reinterpret_cast<const char*>(this + 1), suffix_len()};
  }
  std::string_view value() const {
    const uint32_t s = suffix_len();
    const size_t skip = s == 0 ? 0 : s + (is_inline() ? sizeof(uint32_t) : 0);
    return {reinterpret_cast<const char*>(this + 1) + skip, value_len()};
  }
  // The checksum. REQUIRES: the object was built with one (the trailer or inline form).
  uint32_t checksum() const {
    return LoadChecksum(is_inline() ? ValueForm::kInline : ValueForm::kTrailer, value());
  }
  // The checksum of the object of form `form` whose value() is `value`.
  static uint32_t LoadChecksum(ValueForm form, std::string_view value) {
    uint32_t crc;
    std::memcpy(
        &crc, form == ValueForm::kInline ? value.data() - sizeof(crc) : value.data() + value.size(),
        sizeof(crc));
    return crc;
  }
};
static_assert(sizeof(ValueObject) == 8 && std::is_trivially_copyable_v<ValueObject>);

// Bytes of a value object of a tree with policy P.
template <class P>
size_t ValueBytes(const P& p, const ValueObject* v) {
  return v->size(p.value_form());
}

class ValueRef {
 public:
  constexpr ValueRef() = default;
  // P is the tree policy (P::kDurable, p.base()).
  template <class P>
  static ValueRef FromObject(const P& p, const ValueObject* v) {
    if constexpr (P::kDurable) {
      return ValueRef(v == nullptr ? 0 : reinterpret_cast<uintptr_t>(v) - p.base());
    } else {
      return ValueRef(reinterpret_cast<uintptr_t>(v));
    }
  }
  static constexpr ValueRef FromBits(uint64_t bits) { return ValueRef(bits); }

  constexpr uint64_t bits() const { return bits_; }
  constexpr bool is_null() const { return bits_ == 0; }
  template <class P>
  ValueObject* get(const P& p) const {
    if constexpr (P::kDurable) {
      return bits_ == 0 ? nullptr : reinterpret_cast<ValueObject*>(p.base() + bits_);
    } else {
      return reinterpret_cast<ValueObject*>(static_cast<uintptr_t>(bits_));
    }
  }

 private:
  constexpr explicit ValueRef(uint64_t bits) : bits_(bits) {}
  uint64_t bits_ = 0;
};
static_assert(sizeof(ValueRef) == 8 && std::is_trivially_copyable_v<ValueRef>);

}  // namespace pmrt::ds_internal

#endif  // PMRT_DS_INTERNAL_VALUE_REF_H_
