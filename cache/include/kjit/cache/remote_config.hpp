// The remote tier's configuration (a store shared by a deployment, Redis for kjit's own scheme): where
// it is (a URL whose scheme picks the store: store_registry.hpp), whether this process may write to it,
// the deployment secret that seals entries, and its time limits. Plain data: the engine fills it from its
// settings (kjit/cache_config.hpp, KJIT_REMOTE_CACHE*).
#pragma once

#include <string>

namespace kjit::cache {

enum class RemoteMode { ReadWrite, Read };
const char* to_string(RemoteMode mode) noexcept;

// redis://[user:password@]host[:port][/db]
struct RedisEndpoint {
  std::string host;
  int port = 6379;
  int db = 0;
  std::string user;      // empty: AUTH with the password alone (Redis < 6 style), or no AUTH
  std::string password;  // empty: no AUTH
  // The URL with the password replaced by "***" (for messages and `kjit info`).
  std::string display() const;
};

// Parses a redis:// URL. Throws kjit::ValueError saying what is wrong and what is allowed (the caller
// names the setting it came from); the message never holds the URL's password.
RedisEndpoint parse_redis_url(const std::string& url);

// The smallest deployment secret accepted, in bytes.
inline constexpr std::size_t kMinRemoteSecretBytes = 16;

// Any URL with the password of its user part replaced by "***" (for messages and `kjit info`).
std::string display_url(const std::string& url);

struct RemoteConfig {
  std::string url;  // scheme://...: which store (store_registry.hpp) and where
  RemoteMode mode = RemoteMode::ReadWrite;
  std::string secret;      // HMAC-SHA256 key of every entry (entry_seal.hpp); never printed
  double timeout_s = 1.0;  // each whole request: connecting (with AUTH / SELECT), or a command and its whole
                           // reply (name resolution is the system resolver's own)
  double lease_s = 60.0;   // lifetime of a compile lease, renewed while the compile runs (cluster_flight.hpp)
  // The longest a process waits for another's compile before compiling on its own (a lease that is
  // renewed forever, a paused server that keeps a lease alive): never a hang.
  double wait_limit_s = 360.0;
  // How long the remote tier is left alone after a failure (its lookups are misses meanwhile); each retry
  // that fails doubles it, up to kMaxBackoffFactor times this first back-off.
  double backoff_s = 1.0;
};

// The longest back-off, as a multiple of RemoteConfig::backoff_s (30 s for the default 1 s).
inline constexpr double kMaxBackoffFactor = 30.0;

// The shortest lease accepted (Redis counts leases in milliseconds; renewal runs every third of it).
inline constexpr double kMinLeaseSeconds = 1.0;

}  // namespace kjit::cache
