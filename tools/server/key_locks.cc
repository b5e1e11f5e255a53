#include "tools/server/key_locks.h"

#include <algorithm>
#include <functional>
#include <utility>

namespace pmrt::server {

KeyLocks::Held::~Held() {
  for (auto it = stripes_.rbegin(); it != stripes_.rend(); ++it) locks_->stripes_[*it].mu.unlock();
}

size_t KeyLocks::StripeOf(std::string_view key) {
  return std::hash<std::string_view>{}(key) % kStripes;
}

KeyLocks::Held KeyLocks::Lock(const std::vector<std::string>& argv, size_t first, size_t step) {
  Held held(this);
  for (size_t i = first; i < argv.size(); i += step) {
    held.stripes_.push_back(static_cast<uint16_t>(StripeOf(argv[i])));
  }
  LockHeld(held);
  return held;
}

KeyLocks::Held KeyLocks::LockKeys(const std::vector<std::string_view>& keys) {
  Held held(this);
  for (std::string_view k : keys) held.stripes_.push_back(static_cast<uint16_t>(StripeOf(k)));
  LockHeld(held);
  return held;
}

void KeyLocks::LockHeld(Held& held) {
  // Ascending and distinct (invariant 1): a key named twice, or two keys on one stripe, lock it
  // once, and every command takes its stripes in the same order.
  std::sort(held.stripes_.begin(), held.stripes_.end());
  held.stripes_.erase(std::unique(held.stripes_.begin(), held.stripes_.end()), held.stripes_.end());
  for (uint16_t s : held.stripes_) stripes_[s].mu.lock();
}

KeyLocks::Held KeyLocks::LockOne(std::string_view key) {
  Held held(this);
  held.stripes_.push_back(static_cast<uint16_t>(StripeOf(key)));
  stripes_[held.stripes_[0]].mu.lock();
  return held;
}

KeyLocks::Held KeyLocks::LockAll() {
  Held held(this);
  for (size_t s = 0; s < kStripes; ++s) held.stripes_.push_back(static_cast<uint16_t>(s));
  for (uint16_t s : held.stripes_) stripes_[s].mu.lock();  // ascending (invariant 1)
  return held;
}

KeyLocks::Held KeyLocks::LockTwo(std::string_view a, std::string_view b) {
  Held held(this);
  uint16_t x = static_cast<uint16_t>(StripeOf(a)), y = static_cast<uint16_t>(StripeOf(b));
  if (x > y) std::swap(x, y);
  held.stripes_.push_back(x);  // ascending and distinct (invariant 1)
  if (y != x) held.stripes_.push_back(y);
  for (uint16_t s : held.stripes_) stripes_[s].mu.lock();
  return held;
}

}  // namespace pmrt::server
