// KeyLocks: the striped locks that make each write command of `pmrt serve` atomic against every
// other write to the same key. The tree makes each single operation atomic; a command that reads
// a value and writes one computed from it (INCR, APPEND, SET ... GET) is two operations, and a
// write of the same key between them would be lost. Every write command holds the stripes of
// its keys for its whole run; reads take none (each sees the value of one tree operation).
//
//   KeyLocks locks;
//   {
//     KeyLocks::Held held = locks.Lock(argv, /*first=*/1, /*step=*/1);  // DEL k1 k2 ...
//     ... read, compute, write ...
//   }  // released
//
// Invariants:
//   1. A thread holds the stripes of one command at a time, taken in ascending index order,
//      each once: two commands never each hold a stripe the other waits for.
//   2. No stripe is taken inside an epoch guard (the tree's operations take and end their own
//      guards): a writer waiting for a stripe never delays an epoch boundary, so a tree
//      operation that waits for the next boundary under a held stripe always returns.
//
// Thread safety: Lock may be called from any number of threads.
#ifndef PMRT_TOOLS_SERVER_KEY_LOCKS_H_
#define PMRT_TOOLS_SERVER_KEY_LOCKS_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/inlined_vector.h"

namespace pmrt::server {

class KeyLocks {
 public:
  static constexpr size_t kStripes = 1024;

  // The stripes one command holds; released when destroyed.
  class Held {
   public:
    Held(Held&& o) noexcept : locks_(o.locks_), stripes_(std::move(o.stripes_)) {
      o.stripes_.clear();
    }
    Held(const Held&) = delete;
    Held& operator=(const Held&) = delete;
    Held& operator=(Held&&) = delete;
    ~Held();

   private:
    friend class KeyLocks;
    explicit Held(KeyLocks* locks) : locks_(locks) {}
    KeyLocks* locks_;
    absl::InlinedVector<uint16_t, 4> stripes_;  // ascending, distinct; all locked
  };

  // Locks the stripes of argv[first], argv[first + step], ... (those that exist).
  // REQUIRES: step >= 1; the calling thread holds no stripe.
  Held Lock(const std::vector<std::string>& argv, size_t first, size_t step);
  // Locks the stripes of `keys`. REQUIRES: as Lock.
  Held LockKeys(const std::vector<std::string_view>& keys);
  // Locks the stripe of one key. REQUIRES: the calling thread holds no stripe.
  Held LockOne(std::string_view key);
  // Locks the stripes of two keys (one when they share it). REQUIRES: as LockOne.
  Held LockTwo(std::string_view a, std::string_view b);
  // Locks every stripe (FLUSHALL: no write runs meanwhile). REQUIRES: as LockOne.
  Held LockAll();

  static size_t StripeOf(std::string_view key);

 private:
  // Sorts, dedups and locks held.stripes_.
  void LockHeld(Held& held);
  struct alignas(64) Stripe {  // one per cache line: stripes of unrelated keys do not contend
    std::mutex mu;
  };
  std::array<Stripe, kStripes> stripes_;
};

}  // namespace pmrt::server

#endif  // PMRT_TOOLS_SERVER_KEY_LOCKS_H_
