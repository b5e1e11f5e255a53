// PerThread<T>: one T per (thread, owner object), found without locking after first use, and
// recycled for another thread when its thread exits. Used for the epoch manager's guard slots
// and the allocator's thread caches.
//
//   PerThread<Cache> caches;
//   Cache& mine = caches.Local();              // created on first use by this thread
//   caches.ForEach([](Cache& c) { ... });      // every slot, live or released (under a lock)
//
// Thread safety: Local() is safe from any thread; a slot is used only by the thread it was
// handed to (and by ForEach callers, who must synchronize with it by their own protocol).
// A slot released at thread exit keeps its contents; the next thread that needs a slot may
// adopt it as is, so T must be valid to hand over (its owner protocol drains it anyway). A T
// with a member `void OnThreadExit()` has it called on the exiting thread first, while every
// slot of that thread (of any owner) is still its own.
#ifndef PMRT_EPOCH_PER_THREAD_H_
#define PMRT_EPOCH_PER_THREAD_H_

#include <algorithm>
#include <cstdint>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

namespace pmrt {

namespace epoch_internal {

class Owner {
 public:
  // At the exit of a thread, on that thread: first ThreadExit for every slot it holds (all of
  // its slots still in use, so a hook may use another owner's slot), then Release for each.
  virtual void ThreadExit(void* slot) = 0;
  virtual void Release(void* slot) = 0;

 protected:
  ~Owner() = default;
};

// Registers/unregisters owners so a thread exiting after its owner died touches nothing.
uint64_t Register(Owner* owner);
void Unregister(uint64_t id);
// The calling thread's (owner id, slot) pairs.
std::vector<std::pair<uint64_t, void*>>& LocalEntries();
void ForgetLocal(uint64_t id);

}  // namespace epoch_internal

template <class T>
class PerThread final : private epoch_internal::Owner {
 public:
  PerThread() : id_(epoch_internal::Register(this)) {}
  ~PerThread() {
    epoch_internal::Unregister(id_);
    epoch_internal::ForgetLocal(id_);
  }
  PerThread(const PerThread&) = delete;
  PerThread& operator=(const PerThread&) = delete;

  // The calling thread's slot when it is the one Local() returned last on this thread (two
  // loads, no call), else null: for hot paths that fall back to Local() out of line.
  T* LocalIfCached() const { return tls_last_id_ == id_ ? &tls_last_slot_->value : nullptr; }
  T& Local() {
    // One-entry cache per T: the common case (one owner of each kind) is two loads.
    if (tls_last_id_ == id_) return tls_last_slot_->value;
    for (auto& [id, slot] : epoch_internal::LocalEntries()) {
      if (id == id_) {
        tls_last_id_ = id_;
        tls_last_slot_ = static_cast<Slot*>(slot);
        return tls_last_slot_->value;
      }
    }
    return Adopt();
  }

  template <class F>
  void ForEach(F&& f) {
    std::lock_guard<std::mutex> l(mu_);
    for (auto& s : slots_) f(s->value);
  }

 private:
  struct Slot {
    T value;
    bool in_use = true;
  };

  T& Adopt() {
    Slot* slot = nullptr;
    {
      std::lock_guard<std::mutex> l(mu_);
      auto it = std::find_if(slots_.begin(), slots_.end(), [](auto& s) { return !s->in_use; });
      if (it != slots_.end()) {
        slot = it->get();
      } else {
        slots_.push_back(std::make_unique<Slot>());
        slot = slots_.back().get();
      }
      slot->in_use = true;
    }
    epoch_internal::LocalEntries().emplace_back(id_, slot);
    return slot->value;
  }

  void ThreadExit(void* slot) override {
    if constexpr (requires(T & v) { v.OnThreadExit(); })
      static_cast<Slot*>(slot)->value.OnThreadExit();
  }

  void Release(void* slot) override {
    std::lock_guard<std::mutex> l(mu_);
    static_cast<Slot*>(slot)->in_use = false;
  }

  static inline thread_local uint64_t tls_last_id_ = 0;  // ids start at 1 and never repeat
  static inline thread_local Slot* tls_last_slot_ = nullptr;

  const uint64_t id_;
  std::mutex mu_;
  std::vector<std::unique_ptr<Slot>> slots_;
};

}  // namespace pmrt

#endif  // PMRT_EPOCH_PER_THREAD_H_
