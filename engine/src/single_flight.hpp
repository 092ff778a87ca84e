// SingleFlight: the resolutions in progress in this process, by cache key. A get() or prepare() that
// misses a key another thread is already loading or compiling waits for that result instead of
// compiling it again (between processes the stores' per-key lock and lease do this: StoreChain).
#pragma once

#include <unistd.h>

#include <condition_variable>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "kjit/cache/cache_key.hpp"
#include "kjit/cache/entry.hpp"
#include "kjit/specialized_kernel.hpp"

namespace kjit {

class SingleFlight {
 public:
  // One resolution in progress. The leader fills `entry` (key and metadata at least; the payload too when
  // the leader is a prepare()) and, when it is a get(), `loaded`; then it lands. A leader that fails shares
  // nothing: its waiters resolve on their own, each getting its own exception (one exception object
  // rethrown in many threads would be destroyed by whichever lets go last).
  struct Flight {
    pid_t leader_pid = ::getpid();  // the process whose thread leads it (see claim)
    std::mutex mu;
    std::condition_variable cv;
    bool done = false;
    bool have_entry = false;
    cache::Entry entry;
    std::shared_ptr<const SpecializedKernel> loaded;
    // Waits for the leader to land.
    void wait() {
      std::unique_lock<std::mutex> lock(mu);
      cv.wait(lock, [&] { return done; });
    }
  };
  struct Claim {
    std::shared_ptr<Flight> wait;  // another thread's resolution to wait for
    std::shared_ptr<Flight> lead;  // ours: resolve, then land()
    bool stopped = false;          // `look` found what the caller wanted: neither
  };

  // Under the flights' lock: `look()` first (the caller's last look at its table, closing the gap between
  // its first look and the claim; true stops the claim), then the flight for `id`, else (when
  // `may_lead`) a new one led by the caller. Nothing of the three: resolve without sharing. A flight led
  // in another process is a forked child's copy of its parent's: its leader, a thread of the parent, never
  // lands it here, so it is dropped (waiting for it hung the child's first call for that key).
  template <typename Look>
  Claim claim(const cache::CacheKey& id, bool may_lead, Look&& look) {
    Claim c;
    std::lock_guard<std::mutex> lock(mu_);
    if (look()) {
      c.stopped = true;
      return c;
    }
    auto it = flights_.find(id);
    if (it != flights_.end() && it->second->leader_pid != ::getpid()) {
      orphans_.push_back(std::move(it->second));
      flights_.erase(it);
      it = flights_.end();
    }
    if (it != flights_.end()) {
      c.wait = it->second;
    } else if (may_lead) {
      c.lead = std::make_shared<Flight>();
      flights_.emplace(id, c.lead);
    }
    return c;
  }

  // Ends a resolution led by this thread (after its result, if any, is published) and wakes its waiters.
  void land(const cache::CacheKey& id, Flight& flight) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      flights_.erase(id);
    }
    {
      std::lock_guard<std::mutex> lock(flight.mu);
      flight.done = true;
    }
    flight.cv.notify_all();
  }

  // Engine's fork handlers: held across a fork, so that no child gets it held by a thread it does not have.
  void lock_for_fork() noexcept { mu_.lock(); }
  void unlock_after_fork() noexcept { mu_.unlock(); }

 private:
  std::mutex mu_;  // taken before the engine's table lock where both are held
  std::unordered_map<cache::CacheKey, std::shared_ptr<Flight>, cache::CacheKeyHash> flights_;
  // A forked child's dropped copies of its parent's flights, kept as they are: the condition variable of
  // one may count waiters (threads of the parent), and destroying it would wait for them.
  std::vector<std::shared_ptr<Flight>> orphans_;
};

}  // namespace kjit
