// RedisStore: the remote tier, a Store on a Redis server that a deployment shares (many machines, one
// cache). Entries are the disk encoding sealed with the deployment secret (entry_seal.hpp), filed under
//   kjit:v1:<target>:<key hex>
// and every value fetched is checked like a disk entry after its tag: an unsealed, forged, truncated or
// damaged value is refused (a miss, warned once per key). Compile leases for cluster-wide single flight
// (cluster_flight.hpp) live under kjit:v1:lease:<target>:<key hex>, with an expiry.
//
// Failure policy: the remote tier only saves work. A server that does not answer (refused, timed out:
// KJIT_REMOTE_CACHE_TIMEOUT bounds each whole request, closed) or answers what kjit refuses (a value
// longer than any entry, a malformed reply: redis_connection.hpp) makes every operation a miss / a put
// not kept, with one warning per outage; the store then backs off (no network for 1 s, doubling up to
// 30 s) so that a dead server costs one timeout, not one per lookup, and says when it answers again.
// Nothing here throws for a remote failure.
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
struct RedisReply;

class RedisStore final : public Store, public CompileLeases {
 public:
  // Throws kjit::ValueError when config.url is not a redis:// URL (parse_redis_url).
  explicit RedisStore(RemoteConfig config);
  ~RedisStore() override;

  std::optional<Entry> get(const CacheKey& key, const std::string& target) override;
  // Several lookups in one round trip (MGET). An error reply (NOPERM for an ACL user without +mget,
  // LOADING, OOM) or a reply of another shape is FetchedMany::error.
  FetchedMany get_many(const std::vector<std::pair<CacheKey, std::string>>& requests) override;
  bool put(const Entry& entry) override;
  // Mode readwrite (whether the server answers is not known until it is asked).
  bool writable() const override;
  std::string describe() const override;
  std::uint64_t stored() const override { return stored_.load(); }
  // PING with a fresh connection, ignoring the back-off: for `kjit info`.
  std::optional<Probe> probe() const override;
  // Leases are a capability of a writable tier only (mode read writes nothing, leases included).
  CompileLeases* leases() override { return writable() ? this : nullptr; }

  const RemoteConfig& config() const noexcept { return config_; }
  const RedisEndpoint& endpoint() const noexcept { return endpoint_; }

  // The Redis key of an entry, and of its compile lease.
  static std::string entry_name(const CacheKey& key, const std::string& target);
  static std::string lease_name(const CacheKey& key, const std::string& target);
  static std::string unpublished_name(const CacheKey& key, const std::string& target);

  // Whether the server holds a value under the entry's name (a cheap EXISTS; nullopt: no answer).
  std::optional<bool> contains(const CacheKey& key, const std::string& target);

  // CompileLeases. A release that finds the server not answering is kept and made after the next
  // operation that gets an answer, so that a short outage does not leave the key blocked for the lease's
  // whole lifetime.
  Lease try_lease(const CacheKey& key, const std::string& target, std::string* token) override;
  bool renew_lease(const CacheKey& key, const std::string& target, const std::string& token) override;
  void mark_unpublished(const CacheKey& key, const std::string& target) override;
  void release_lease(const CacheKey& key, const std::string& target, const std::string& token) override;
  std::optional<Watch> watch(const CacheKey& key, const std::string& target) override;
  double lease_s() const override { return config_.lease_s; }
  double wait_limit_s() const override { return config_.wait_limit_s; }

 private:
  class Pool;
  friend class ForkGuard;  // locks every store's mutexes around fork() (redis_store.cpp)
  // Runs `fn` on a pooled connection; nullopt when the store is backing off or the server fails
  // (which starts or extends the back-off, with one warning per outage).
  template <typename Fn>
  auto with_connection(Fn&& fn) -> std::optional<decltype(fn(std::declval<RedisConnection&>()))>;
  // The outage count when an operation may start, nullopt while backing off.
  std::optional<std::uint64_t> begin_operation();
  // An operation begun at outage count `began` failed / got an answer. Only operations begun in the
  // current state change it: one under way when an outage began neither extends the back-off nor ends it.
  void failed(const std::string& why, std::uint64_t began);
  void answered(std::uint64_t began);
  // false (and a warning once per command and error) for an error reply.
  bool reply_ok(const RedisReply& reply, const char* command) const;
  // Releases kept by release_lease while the server did not answer.
  void release_pending();
  // Checks a fetched value; the entry, or nullopt with a warning once per key (refused).
  std::optional<Entry> accept(const CacheKey& key, const std::string& target, const std::string& value);

  RemoteConfig config_;
  RedisEndpoint endpoint_;  // parsed from config_.url
  std::unique_ptr<Pool> pool_;
  std::atomic<std::uint64_t> stored_{0};
  std::mutex state_mu_;
  bool down_ = false;
  std::uint64_t outages_ = 0;                                          // failures that started or extended an outage
  std::vector<std::pair<std::string, std::string>> pending_releases_;  // (lease name, token)
  double backoff_s_ = 0;
  std::chrono::steady_clock::time_point retry_at_{};
};

}  // namespace kjit::cache
