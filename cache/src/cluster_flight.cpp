#include "kjit/cache/cluster_flight.hpp"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "kjit/log.hpp"

namespace kjit::cache {
namespace {

using Clock = std::chrono::steady_clock;

// Keeps a lease alive while its holder compiles (a compile may outlast one lease): every third of the
// lease it is extended, while it is still this token's.
class LeaseKeeper {
 public:
  LeaseKeeper(CompileLeases& remote, const CacheKey& key, const std::string& target, const std::string& token)
      : thread_([this, &remote, &key, &target, &token] {
          const auto period = std::chrono::duration<double>(remote.lease_s() / 3);
          std::unique_lock<std::mutex> lock(mu_);
          while (!cv_.wait_for(lock, period, [this] { return done_; })) {
            lock.unlock();
            const bool ours = remote.renew_lease(key, target, token);
            lock.lock();
            if (!ours) break;  // taken over or no answer: nothing left to keep
          }
        }) {}
  ~LeaseKeeper() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      done_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  LeaseKeeper(const LeaseKeeper&) = delete;
  LeaseKeeper& operator=(const LeaseKeeper&) = delete;

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  std::thread thread_;  // last: started once the rest is ready
};

using MaybeProduce = std::function<std::optional<Entry>()>;

// An entry produced here (not taken from the remote tier), or nothing when the producer declined.
std::optional<FlightResult> made_here(std::optional<Entry> e) {
  if (!e) return std::nullopt;
  return FlightResult{std::move(*e), false};
}

// Produces and publishes under a lease this process holds; the lease goes whatever happens, and when no
// entry was published (the producer threw or declined, or the store refused it) the waiters are told to
// stop waiting.
std::optional<Entry> produce_and_publish(Store& store, CompileLeases& remote, const CacheKey& key,
                                         const std::string& target, const std::string& token,
                                         const MaybeProduce& produce) {
  bool published = false;
  struct Release {
    CompileLeases& remote;
    const CacheKey& key;
    const std::string& target;
    const std::string& token;
    const bool& published;
    ~Release() {
      if (!published) remote.mark_unpublished(key, target);
      remote.release_lease(key, target, token);
    }
  } release{remote, key, target, token, published};
  std::optional<Entry> e = [&] {
    LeaseKeeper keeper(remote, key, target, token);
    return produce();
  }();
  if (e) published = store.put(*e);  // a put not kept is said by the store; the entry is used all the same
  return e;
}

}  // namespace

FlightResult produce_once(Store& store, const CacheKey& key, const std::string& target,
                          const std::function<Entry()>& produce) {
  // A producer that never declines: there is always a result.
  return std::move(*try_produce_once(store, key, target, [&]() -> std::optional<Entry> { return produce(); }));
}

std::optional<FlightResult> try_produce_once(Store& store, const CacheKey& key, const std::string& target,
                                             const MaybeProduce& produce) {
  CompileLeases* leases = store.leases();
  if (!leases) return made_here(produce());
  CompileLeases& remote = *leases;
  auto delay = std::chrono::milliseconds(10);
  const auto max_delay = std::chrono::milliseconds(250);
  const auto give_up =
      Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(remote.wait_limit_s()));
  for (;;) {
    std::string token;
    switch (remote.try_lease(key, target, &token)) {
      case CompileLeases::Lease::Unavailable: return made_here(produce());
      case CompileLeases::Lease::Taken:
        // Someone may have finished between our lookup and the lease: take theirs rather than redo it.
        if (auto e = store.get(key, target)) {
          remote.release_lease(key, target, token);
          return FlightResult{std::move(*e), true};
        }
        return made_here(produce_and_publish(store, remote, key, target, token, produce));
      case CompileLeases::Lease::Held: break;
    }
    // Another process compiles it: wait for its entry, or for its lease to end without one.
    for (;;) {
      std::this_thread::sleep_for(delay);
      delay = std::min(max_delay, delay * 3 / 2);
      const auto w = remote.watch(key, target);
      if (!w) return made_here(produce());  // the remote tier stopped answering
      if (w->entry) {
        if (auto e = store.get(key, target)) return FlightResult{std::move(*e), true};
        if (!w->lease) break;  // a refused value and nobody at work: compile it (and replace it)
      }
      if (w->unpublished) return made_here(produce());  // its compile failed, or Redis refused its entry
      if (!w->lease) break;                             // its holder died: try for the lease again
      if (!w->lease_expires || Clock::now() >= give_up) {
        log::warn_once("remote-wait:" + target + ":" + key.hex(),
                       "kjit " + store.describe() + ": " +
                           (w->lease_expires ? "waited " + std::to_string(static_cast<long>(remote.wait_limit_s())) +
                                                   " s for another process to compile key " + key.hex().substr(0, 16) +
                                                   " for " + target + "; compiling it here"
                                             : "the lease of key " + key.hex().substr(0, 16) + " for " + target +
                                                   " has no expiry, so kjit did not write it; compiling here") +
                           " (said once per key)");
        return made_here(produce());
      }
    }
  }
}

}  // namespace kjit::cache
