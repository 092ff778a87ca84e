// RedisStore: the remote tier, a Store on a Redis server that a deployment shares (many machines, one
// cache). Entries are the disk encoding sealed with the deployment secret (entry_seal.hpp), filed under
//   kjit:v1:<target>:<key hex>
// and every value fetched is checked like a disk entry after its tag: an unsealed, forged, truncated or
// damaged value is refused (a miss, warned once per key). Compile leases for cluster-wide single flight
// (cluster_flight.hpp) live under kjit:v1:lease:<target>:<key hex>, with an expiry.
//
// Failure policy: the remote tier only saves work. A server that does not answer (refused, timed out,
// closed) makes every operation a miss / a put not kept, with one warning per outage; the store then
// backs off (no network for 1 s, doubling up to 30 s) so that a dead server costs one timeout, not one
// per lookup, and says when it answers again. Nothing here throws for a remote failure.
// Mode read (production with CI as the only writer): nothing is ever written, leases included.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstddef>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "kjit/cache/remote_config.hpp"
#include "kjit/cache/store.hpp"

namespace kjit::cache {

class RedisConnection;

class RedisStore final : public Store {
 public:
  explicit RedisStore(RemoteConfig config);
  ~RedisStore() override;

  std::optional<Entry> get(const CacheKey& key, const std::string& target) override;
  bool put(const Entry& entry) override;
  // Mode readwrite (whether the server answers is not known until it is asked).
  bool writable() const override;
  std::string describe() const override;

  const RemoteConfig& config() const noexcept { return config_; }
  // How many entries put() has kept in this process (for reports such as `kjit warm`'s).
  std::uint64_t stored() const noexcept { return stored_.load(); }

  // The Redis key of an entry, and of its compile lease.
  static std::string entry_name(const CacheKey& key, const std::string& target);
  static std::string lease_name(const CacheKey& key, const std::string& target);

  // Several lookups in one round trip (start-up prefetch): one result per request, in order.
  struct Fetched {
    std::optional<Entry> entry;
    bool refused = false;  // a value was there but refused (said by a warning)
  };
  // nullopt when the server did not answer (warned).
  std::optional<std::vector<Fetched>> get_many(const std::vector<std::pair<CacheKey, std::string>>& requests);

  // Whether the server holds a value under the entry's name (a cheap EXISTS; nullopt: no answer).
  std::optional<bool> contains(const CacheKey& key, const std::string& target);

  // Compile leases. try_lease: Taken (with `token` set), Held by another process, or Unavailable
  // (mode read, or no answer). release_lease deletes the lease only while it is still this token's.
  enum class Lease { Taken, Held, Unavailable };
  Lease try_lease(const CacheKey& key, const std::string& target, std::string* token);
  // A release that finds the server not answering is kept and made after the next operation that gets
  // an answer, so that a short outage does not leave the key blocked for the lease's whole lifetime.
  void release_lease(const CacheKey& key, const std::string& target, const std::string& token);
  // One round trip: whether the entry and the lease exist (nullopt: no answer).
  struct Watch {
    bool entry = false;
    bool lease = false;
  };
  std::optional<Watch> watch(const CacheKey& key, const std::string& target);

  // PING with a fresh connection, ignoring the back-off: for `kjit info`.
  struct Probe {
    bool answers = false;
    double ms = 0;
    std::string error;
  };
  Probe probe() const;

 private:
  class Pool;
  // Runs `fn` on a pooled connection; nullopt when the store is backing off or the server fails
  // (which starts or extends the back-off, with one warning per outage).
  template <typename Fn>
  auto with_connection(Fn&& fn) -> std::optional<decltype(fn(std::declval<RedisConnection&>()))>;
  bool backing_off();
  void failed(const std::string& why);
  void answered();
  // Releases kept by release_lease while the server did not answer.
  void release_pending();
  // Checks a fetched value; the entry, or nullopt with a warning once per key (refused).
  std::optional<Entry> accept(const CacheKey& key, const std::string& target, const std::string& value);

  RemoteConfig config_;
  std::unique_ptr<Pool> pool_;
  std::atomic<std::uint64_t> stored_{0};
  std::mutex state_mu_;
  bool down_ = false;
  std::vector<std::pair<std::string, std::string>> pending_releases_;  // (lease name, token)
  double backoff_s_ = 0;
  std::chrono::steady_clock::time_point retry_at_{};
};

}  // namespace kjit::cache
