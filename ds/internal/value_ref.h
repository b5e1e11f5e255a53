// Value objects and ValueRef, the 8-byte link from a border node slot to its value.
//
// A value object is allocated separately (NodeAllocator::AllocateValue) and never changes after
// it is published; an update installs a new object and retires the old one. It also carries the
// key's suffix (the bytes after the slot's slice) when the key is longer than the slice, so a
// lookup checks the suffix with the same dereference that fetches the value:
//
//   +-----------+------------+------------------+-----------------+----------+
//   | value_len | suffix_len | suffix bytes ... | value bytes ... | checksum |
//   |  uint32   |   uint32   |  suffix_len      |  value_len      |  uint32  |
//   +-----------+------------+------------------+-----------------+----------+
//
// The checksum trailer is written by trees whose policy keeps value checksums (the durable tree,
// from layout version 2; ValueChecksums below): the CRC32C of the key's length, the whole key
// (every layer's slice and the suffix) and the value. It is set before the object is published
// and never changes, so it covers the key bytes in the border node's slot (slice, length class)
// and the link to the object as well as the value: a changed key, a link to a different object
// or a changed value all fail the comparison. Moving a key into a new layer moves its object's
// bytes with the same full key, hence the same checksum. The trailer sits right after the value
// bytes, so a (key, value view) pair is all a check needs.
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

#include "epoch/crc32c.h"

namespace pmrt::ds_internal {

// The checksum a value object of `key` holding `value` carries (see above).
inline uint32_t ValueChecksum(std::string_view key, std::string_view value) {
  const uint32_t n = static_cast<uint32_t>(key.size());
  uint32_t crc = Crc32c(&n, sizeof(n));
  crc = Crc32c(key.data(), key.size(), crc);
  return Crc32c(value.data(), value.size(), crc);
}
inline constexpr size_t kValueChecksumBytes = sizeof(uint32_t);

struct ValueObject {
  uint32_t value_len;   // bytes of value
  uint32_t suffix_len;  // bytes of key suffix stored before the value

  static constexpr size_t kAlign = 16;

  static size_t SizeFor(size_t suffix_len, size_t value_len, bool checksum = false) {
    return sizeof(ValueObject) + suffix_len + value_len + (checksum ? kValueChecksumBytes : 0);
  }
  // Bytes of the object; `checksum` says whether its tree writes the trailer.
  size_t size(bool checksum = false) const { return SizeFor(suffix_len, value_len, checksum); }

  // Builds an object in `mem` (SizeFor(suffix.size(), value.size()) bytes).
  static ValueObject* Init(void* mem, std::string_view suffix, std::string_view value) {
    auto* v = static_cast<ValueObject*>(mem);
    v->value_len = static_cast<uint32_t>(value.size());
    v->suffix_len = static_cast<uint32_t>(suffix.size());
    char* data = reinterpret_cast<char*>(v + 1);
    if (!suffix.empty()) std::memcpy(data, suffix.data(), suffix.size());
    if (!value.empty()) std::memcpy(data + suffix.size(), value.data(), value.size());
    return v;
  }

  std::string_view suffix() const { return {reinterpret_cast<const char*>(this + 1), suffix_len}; }
  std::string_view value() const {
    return {reinterpret_cast<const char*>(this + 1) + suffix_len, value_len};
  }
  // The checksum trailer. REQUIRES: the object was built with one (SizeFor(..., true) bytes).
  uint32_t checksum() const { return LoadChecksum(value()); }
  void set_checksum(uint32_t crc) {
    std::memcpy(reinterpret_cast<char*>(this + 1) + suffix_len + value_len, &crc, sizeof(crc));
  }
  // The trailer of the object whose value() is `value`.
  static uint32_t LoadChecksum(std::string_view value) {
    uint32_t crc;
    std::memcpy(&crc, value.data() + value.size(), sizeof(crc));
    return crc;
  }
};
static_assert(sizeof(ValueObject) == 8 && std::is_trivially_copyable_v<ValueObject>);

// Bytes of a value object of a tree with policy P (the trailer included where it keeps one).
template <class P>
size_t ValueBytes(const P& p, const ValueObject* v) {
  return v->size(p.value_checksums());
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
