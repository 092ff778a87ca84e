#include "kjit/cache/cluster_flight.hpp"

#include <algorithm>
#include <chrono>
#include <thread>

namespace kjit::cache {
namespace {

// Produces and publishes under a lease this process holds; the lease goes whatever happens.
Entry produce_and_publish(RedisStore& remote, const CacheKey& key, const std::string& target,
                          const std::string& token, const std::function<Entry()>& produce) {
  struct Release {
    RedisStore& remote;
    const CacheKey& key;
    const std::string& target;
    const std::string& token;
    ~Release() { remote.release_lease(key, target, token); }
  } release{remote, key, target, token};
  Entry e = produce();
  remote.put(e);  // a put not kept is said by the store; the entry is used all the same
  return e;
}

}  // namespace

FlightResult produce_once(RedisStore& remote, const CacheKey& key, const std::string& target,
                          const std::function<Entry()>& produce) {
  auto delay = std::chrono::milliseconds(10);
  const auto max_delay = std::chrono::milliseconds(250);
  for (;;) {
    std::string token;
    switch (remote.try_lease(key, target, &token)) {
      case RedisStore::Lease::Unavailable:
        return {produce(), false};
      case RedisStore::Lease::Taken:
        // Someone may have finished between our lookup and the lease: take theirs rather than redo it.
        if (auto e = remote.get(key, target)) {
          remote.release_lease(key, target, token);
          return {std::move(*e), true};
        }
        return {produce_and_publish(remote, key, target, token, produce), false};
      case RedisStore::Lease::Held:
        break;
    }
    // Another process compiles it: wait for its entry, or for its lease to end without one.
    for (;;) {
      std::this_thread::sleep_for(delay);
      delay = std::min(max_delay, delay * 3 / 2);
      const auto w = remote.watch(key, target);
      if (!w) return {produce(), false};  // the remote tier stopped answering
      if (w->entry) {
        if (auto e = remote.get(key, target)) return {std::move(*e), true};
        if (!w->lease) break;  // a refused value and nobody at work: compile it (and replace it)
        continue;
      }
      if (!w->lease) break;  // its holder failed or died: try for the lease again
    }
  }
}

}  // namespace kjit::cache
