// Permuter: the 64-bit permutation word of a Masstree border node.
//
// A border node stores its keys in slots in arrival order; the permutation lists the slots in
// key order, so an insert writes a free slot and then publishes the key with one 8-byte store.
//
//   bits 0-3                      size n (live keys)
//   bits 4+4i .. 7+4i, i < width  the slot at sorted position i
//
// Positions [0, n) hold the live slots in ascending key order; positions [n, width) hold the
// free slots, the next one to use first. Every slot in [0, width) appears exactly once. With
// width 14 the 15th nibble (position 14) is unused and kept zero.
//
// Removal moves the freed slot to the back of the free list, so a slot freed in an epoch is the
// last one reused (the durable leaf may reuse such a slot only after logging the node).
#ifndef PMRT_DS_INTERNAL_PERMUTER_H_
#define PMRT_DS_INTERNAL_PERMUTER_H_

#include <cstdint>

namespace pmrt::ds_internal {

template <int kWidth>
class Permuter {
  static_assert(kWidth >= 1 && kWidth <= 15, "4-bit slots and a 4-bit size");

 public:
  static constexpr int kMaxSize = kWidth;

  constexpr Permuter() : value_(Identity(0).value_) {}
  constexpr explicit Permuter(uint64_t value) : value_(value) {}

  // The permutation of `n` live keys in slots 0..n-1 (in order), the rest free in order.
  static constexpr Permuter Identity(int n) {
    uint64_t v = static_cast<uint64_t>(n);
    for (int i = 0; i < kWidth; ++i) v |= static_cast<uint64_t>(i) << Shift(i);
    return Permuter(v);
  }

  constexpr uint64_t value() const { return value_; }
  constexpr int size() const { return static_cast<int>(value_ & 0xf); }
  // The slot at sorted position `pos`. REQUIRES: 0 <= pos < kWidth.
  constexpr int operator[](int pos) const { return static_cast<int>((value_ >> Shift(pos)) & 0xf); }
  // The slot the next InsertAt() will use. REQUIRES: size() < kWidth.
  constexpr int NextFreeSlot() const { return (*this)[size()]; }

  // Makes the next free slot live at sorted position `pos`; returns that slot.
  // REQUIRES: 0 <= pos <= size() < kWidth.
  // Post: positions [0, pos) unchanged; position pos holds the old NextFreeSlot(); old positions
  // [pos, n) move to [pos+1, n+1); free positions after n unchanged; size() grows by one.
  int InsertAt(int pos) {
    const int n = size();
    const int slot = (*this)[n];
    const uint64_t below = value_ & NibbleMask(0, pos);         // positions [0, pos)
    const uint64_t moved = (value_ & NibbleMask(pos, n)) << 4;  // [pos, n) -> [pos+1, n+1)
    const uint64_t above = value_ & NibbleMask(n + 1, kWidth);  // free slots after the taken one
    value_ = below | moved | above | (static_cast<uint64_t>(slot) << Shift(pos)) |
             static_cast<uint64_t>(n + 1);
    return slot;
  }

  // Frees the slot at sorted position `pos` and returns it. REQUIRES: 0 <= pos < size().
  // Post: positions [pos+1, kWidth) move down by one; the freed slot goes to position
  // kWidth-1 (back of the free list); size() shrinks by one.
  int RemoveAt(int pos) {
    const int n = size();
    const int slot = (*this)[pos];
    const uint64_t below = value_ & NibbleMask(0, pos);
    const uint64_t moved = (value_ & NibbleMask(pos + 1, kWidth)) >> 4;
    value_ = below | moved | (static_cast<uint64_t>(slot) << Shift(kWidth - 1)) |
             static_cast<uint64_t>(n - 1);
    return slot;
  }

  // Keeps the first `n` live keys; positions [n, old size) become the first free slots.
  // REQUIRES: 0 <= n <= size().
  void Truncate(int n) { value_ = (value_ & ~uint64_t{0xf}) | static_cast<uint64_t>(n); }

  // True when every slot in [0, kWidth) appears exactly once, size() <= kWidth, and unused
  // nibbles are zero.
  bool IsValid() const {
    if (size() > kWidth) return false;
    unsigned seen = 0;
    for (int i = 0; i < kWidth; ++i) {
      const int s = (*this)[i];
      if (s >= kWidth || (seen & (1u << s))) return false;
      seen |= 1u << s;
    }
    return (value_ & NibbleMask(kWidth, 15)) == 0;
  }

  friend bool operator==(Permuter a, Permuter b) { return a.value_ == b.value_; }

 private:
  static constexpr int Shift(int pos) { return 4 + 4 * pos; }
  // Bits of positions [lo, hi).
  static constexpr uint64_t NibbleMask(int lo, int hi) {
    if (hi <= lo) return 0;
    const uint64_t upto_hi = hi >= 15 ? ~uint64_t{0} : (uint64_t{1} << Shift(hi)) - 1;
    const uint64_t upto_lo = (uint64_t{1} << Shift(lo)) - 1;
    return upto_hi & ~upto_lo;
  }

  uint64_t value_;
};

}  // namespace pmrt::ds_internal

#endif  // PMRT_DS_INTERNAL_PERMUTER_H_
