#include "epoch/per_thread.h"

#include <map>

namespace pmrt::epoch_internal {
namespace {

std::mutex g_mu;
std::map<uint64_t, Owner*>& Live() {
  static auto* m = new std::map<uint64_t, Owner*>;  // never destroyed: threads outlive main
  return *m;
}
uint64_t g_next_id = 1;

// At thread exit, hand each slot back to its owner if the owner still exists. Holding g_mu
// keeps the owner alive during ThreadExit and Release (its destructor unregisters under the same
// lock). Every exit hook runs before the first release: a hook may use the thread's other slots
// (a transaction's abort releases its guard on the epoch manager's slot) and must not find one
// already handed to another thread. By index: a hook may add an entry (its first use of an
// owner), which the second pass then releases.
struct Entries {
  std::vector<std::pair<uint64_t, void*>> v;
  ~Entries() {
    std::lock_guard<std::mutex> l(g_mu);
    for (size_t i = 0; i < v.size(); ++i) {
      auto it = Live().find(v[i].first);
      if (it != Live().end()) it->second->ThreadExit(v[i].second);
    }
    for (size_t i = 0; i < v.size(); ++i) {
      auto it = Live().find(v[i].first);
      if (it != Live().end()) it->second->Release(v[i].second);
    }
  }
};
thread_local Entries tls_entries;

}  // namespace

uint64_t Register(Owner* owner) {
  std::lock_guard<std::mutex> l(g_mu);
  uint64_t id = g_next_id++;
  Live()[id] = owner;
  return id;
}

void Unregister(uint64_t id) {
  std::lock_guard<std::mutex> l(g_mu);
  Live().erase(id);
}

std::vector<std::pair<uint64_t, void*>>& LocalEntries() { return tls_entries.v; }

void ForgetLocal(uint64_t id) {
  std::erase_if(tls_entries.v, [id](const auto& e) { return e.first == id; });
}

}  // namespace pmrt::epoch_internal
