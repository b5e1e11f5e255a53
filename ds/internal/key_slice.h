// Key slicing: how a byte-string key maps onto Masstree's layers of 8-byte slices.
//
// Layer d looks at bytes [8d, 8d+8) of the key. A slice is those bytes read big-endian and
// zero-padded, so comparing slices as integers compares the bytes. Zero padding makes "a" and
// "a\0" share a slice; the key's length class breaks the tie:
//
//   class 0..8   the key ends inside this slice, with that many bytes in it
//   class 9      the key continues past this slice (kept as a suffix, or in a deeper layer)
//
// (slice, class) orders keys exactly as byte-wise comparison does, and identifies at most one
// entry of a layer: all keys that continue past the same slice share one class-9 entry.
#ifndef PMRT_DS_INTERNAL_KEY_SLICE_H_
#define PMRT_DS_INTERNAL_KEY_SLICE_H_

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

namespace pmrt::ds_internal {

inline constexpr int kSliceBytes = 8;
inline constexpr uint8_t kClassSuffix = 9;  // the key continues past this slice

// Reads up to 8 bytes big-endian, zero-padded.
inline uint64_t MakeSlice(const char* p, size_t n) {
  if (n >= 8) {
    uint64_t v;
    std::memcpy(&v, p, 8);
    return __builtin_bswap64(v);
  }
  uint64_t v = 0;
  for (size_t i = 0; i < n; ++i) v |= uint64_t{static_cast<unsigned char>(p[i])} << (56 - 8 * i);
  return v;
}

// Appends the first `n` (<= 8) bytes of a slice.
inline void AppendSliceBytes(std::string& out, uint64_t slice, int n) {
  for (int i = 0; i < n; ++i) out.push_back(static_cast<char>(slice >> (56 - 8 * i)));
}

// A key's position within a layer: compared lexicographically.
struct KeyPos {
  uint64_t slice;
  uint8_t cls;  // 0..8, or kClassSuffix
  friend constexpr bool operator==(KeyPos a, KeyPos b) = default;
  friend constexpr bool operator<(KeyPos a, KeyPos b) {
    return a.slice < b.slice || (a.slice == b.slice && a.cls < b.cls);
  }
};

// A key being walked down the layers. Cheap to copy; does not own the bytes.
class KeyCursor {
 public:
  explicit KeyCursor(std::string_view key) : key_(key) {}

  uint64_t slice() const { return MakeSlice(key_.data() + offset_, remaining()); }
  size_t remaining() const { return key_.size() - offset_; }
  uint8_t cls() const { return remaining() > 8 ? kClassSuffix : static_cast<uint8_t>(remaining()); }
  KeyPos pos() const { return {slice(), cls()}; }
  // The bytes after this layer's slice. REQUIRES: cls() == kClassSuffix.
  std::string_view suffix() const { return key_.substr(offset_ + kSliceBytes); }
  // Bytes of the key consumed by the layers above this one.
  size_t offset() const { return offset_; }
  int depth() const { return static_cast<int>(offset_ / kSliceBytes); }
  std::string_view full() const { return key_; }

  // Moves to the next layer. REQUIRES: cls() == kClassSuffix.
  void Descend() { offset_ += kSliceBytes; }
  // Moves back to the layer above. REQUIRES: depth() > 0.
  void Ascend() { offset_ -= kSliceBytes; }
  void Reset() { offset_ = 0; }

 private:
  std::string_view key_;
  size_t offset_ = 0;
};

}  // namespace pmrt::ds_internal

#endif  // PMRT_DS_INTERNAL_KEY_SLICE_H_
