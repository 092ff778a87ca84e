#include "kjit/cache/redis_store.hpp"

#include <pthread.h>
#include <unistd.h>

#include <algorithm>
#include <random>

#include "kjit/cache/entry_check.hpp"
#include "kjit/cache/entry_seal.hpp"
#include "kjit/cache/redis_connection.hpp"
#include "kjit/log.hpp"

namespace kjit::cache {
namespace {

using Clock = std::chrono::steady_clock;
constexpr std::size_t kMaxIdleConnections = 8;

// Deletes the lease only while it holds our token (another process may have taken it over after expiry).
constexpr std::string_view kReleaseScript =
    "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) else return 0 end";

// Extends the lease only while it holds our token.
constexpr std::string_view kRenewScript =
    "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('pexpire', KEYS[1], ARGV[2]) else return 0 end";

std::string new_token() {
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  std::random_device rd;
  const unsigned long long r = (static_cast<unsigned long long>(rd()) << 32) ^ rd();
  return std::string(host) + ":" + std::to_string(::getpid()) + ":" + std::to_string(r);
}

std::string ms_text(double s) { return std::to_string(static_cast<long long>(s * 1000 + 0.5)); }

}  // namespace

// Idle connections, reused by the next operation; a connection that failed is dropped, not returned.
// A forked child (a DataLoader worker, a multiprocessing fork) must not talk on its parent's sockets:
// their replies would interleave. It drops the inherited connections (closing its copies of the
// descriptors leaves the parent's connections open) and opens its own.
class RedisStore::Pool {
  friend class ForkGuard;

 public:
  std::unique_ptr<RedisConnection> take() {
    std::lock_guard<std::mutex> lock(mu_);
    if (owner_ != ::getpid()) {
      idle_.clear();
      owner_ = ::getpid();
    }
    if (idle_.empty()) return nullptr;
    auto c = std::move(idle_.back());
    idle_.pop_back();
    return c;
  }
  void give_back(std::unique_ptr<RedisConnection> c) {
    std::lock_guard<std::mutex> lock(mu_);
    if (owner_ == ::getpid() && idle_.size() < kMaxIdleConnections) idle_.push_back(std::move(c));
  }
  void clear() {
    std::vector<std::unique_ptr<RedisConnection>> drop;
    std::lock_guard<std::mutex> lock(mu_);
    drop.swap(idle_);
  }

 private:
  std::mutex mu_;
  pid_t owner_ = ::getpid();
  std::vector<std::unique_ptr<RedisConnection>> idle_;
};

// fork() from a thread while another holds a store's mutex would leave it locked forever in the child
// (a DataLoader worker that then looks up a kernel would hang): around every fork, the forking thread
// takes every live store's mutexes (prepare) and lets them go on both sides.
class ForkGuard {
 public:
  static void add(RedisStore* s) {
    install();
    std::lock_guard<std::mutex> lock(mu());
    stores().push_back(s);
  }
  static void remove(RedisStore* s) {
    std::lock_guard<std::mutex> lock(mu());
    auto& v = stores();
    v.erase(std::remove(v.begin(), v.end(), s), v.end());
  }

 private:
  static std::mutex& mu() {
    static std::mutex m;
    return m;
  }
  static std::vector<RedisStore*>& stores() {
    static std::vector<RedisStore*> v;
    return v;
  }
  static void install() {
    static const bool installed = [] {
      ::pthread_atfork(&prepare, &release, &release);
      return true;
    }();
    (void)installed;
  }
  static void prepare() {
    mu().lock();
    for (RedisStore* s : stores()) {
      s->pool_->mu_.lock();
      s->state_mu_.lock();
    }
  }
  static void release() {
    for (RedisStore* s : stores()) {
      s->state_mu_.unlock();
      s->pool_->mu_.unlock();
    }
    mu().unlock();
  }
};

RedisStore::RedisStore(RemoteConfig config)
    : config_(std::move(config)), endpoint_(parse_redis_url(config_.url)), pool_(std::make_unique<Pool>()) {
  ForkGuard::add(this);
}

RedisStore::~RedisStore() { ForkGuard::remove(this); }

std::string RedisStore::entry_name(const CacheKey& key, const std::string& target) {
  return "kjit:v1:" + target + ":" + key.hex();
}

std::string RedisStore::lease_name(const CacheKey& key, const std::string& target) {
  return "kjit:v1:lease:" + target + ":" + key.hex();
}

std::string RedisStore::unpublished_name(const CacheKey& key, const std::string& target) {
  return "kjit:v1:unpublished:" + target + ":" + key.hex();
}

bool RedisStore::writable() const { return config_.mode == RemoteMode::ReadWrite; }

std::string RedisStore::describe() const {
  return "remote cache " + endpoint_.display() + " (" + to_string(config_.mode) + ")";
}

std::optional<std::uint64_t> RedisStore::begin_operation() {
  std::lock_guard<std::mutex> lock(state_mu_);
  if (down_ && Clock::now() < retry_at_) return std::nullopt;
  return outages_;
}

void RedisStore::failed(const std::string& why, std::uint64_t began) {
  pool_->clear();  // connections opened before the failure are likely dead too
  bool first;
  double backoff;
  {
    std::lock_guard<std::mutex> lock(state_mu_);
    // An operation begun before the last failure was counted with it: a retry that fails (begun in
    // the current state, after retry_at_) lengthens the back-off, nothing else does.
    if (began != outages_) return;
    first = !down_;
    backoff_s_ = first ? config_.backoff_s : std::min(backoff_s_ * 2, config_.backoff_s * kMaxBackoffFactor);
    down_ = true;
    ++outages_;
    retry_at_ = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(backoff_s_));
    backoff = backoff_s_;
  }
  if (first) {
    log::Event e;
    e.level = log::Level::Warning;
    e.kind = "remote_down";
    e.message = "kjit " + describe() + " does not answer (" + why +
                "): its lookups are misses and compiles stay local until it answers again (next try in " +
                ms_text(backoff) + " ms, then less often; said once per outage)";
    log::warn(std::move(e));
  }
}

void RedisStore::answered(std::uint64_t began) {
  bool was_down, pending;
  {
    std::lock_guard<std::mutex> lock(state_mu_);
    if (began != outages_) return;  // under way when an outage began: says nothing about now
    was_down = down_;
    down_ = false;
    backoff_s_ = 0;
    pending = !pending_releases_.empty();
  }
  if (was_down) log::info(1, "kjit " + describe() + " answers again");
  if (pending) release_pending();
}

namespace {

// What to change, for an error reply's code (its first word).
std::string error_hint(const std::string& code) {
  if (code == "NOAUTH" || code == "WRONGPASS")
    return "give the user and password in the URL: redis://user:password@host:port";
  if (code == "NOPERM")
    return "kjit's ACL user needs +get +set +mget +exists +eval +del +pexpire +pttl +ping (and +select for a "
           "database other than 0) on ~kjit:*";
  if (code == "READONLY")
    return "this is a replica: point KJIT_REMOTE_CACHE at the primary, or use KJIT_REMOTE_CACHE_MODE=read";
  if (code == "MOVED" || code == "ASK" || code == "CLUSTERDOWN" || code == "CROSSSLOT")
    return "Redis Cluster is not supported: use a standalone Redis (or one behind a proxy)";
  if (code == "OOM") return "Redis is full: give it maxmemory-policy allkeys-lru so that old entries make room";
  if (code == "LOADING") return "Redis is loading its data set after a restart; it answers soon";
  return "";
}

std::string error_code(const RedisReply& r) { return r.str.substr(0, r.str.find(' ')); }

const char* type_name(RedisReply::Type t) {
  switch (t) {
    case RedisReply::Type::Nil: return "a nil";
    case RedisReply::Type::String: return "a string";
    case RedisReply::Type::Status: return "a status";
    case RedisReply::Type::Integer: return "an integer";
    case RedisReply::Type::Error: return "an error";
    case RedisReply::Type::Array: return "an array";
  }
  return "a reply";
}

}  // namespace

bool RedisStore::reply_ok(const RedisReply& r, const char* command) const {
  if (r.type != RedisReply::Type::Error) return true;
  const std::string code = error_code(r);
  const std::string hint = error_hint(code);
  log::warn_once("remote-reply:" + endpoint_.display() + ":" + command + ":" + code,
                 "kjit " + describe() + " answered " + command + " with an error: " + r.str.substr(0, 200) +
                     (hint.empty() ? "" : "; " + hint) + " (a miss; said once per command and error)");
  return false;
}

void RedisStore::release_pending() {
  std::vector<std::pair<std::string, std::string>> todo;
  {
    std::lock_guard<std::mutex> lock(state_mu_);
    todo.swap(pending_releases_);
  }
  if (todo.empty()) return;
  std::vector<RedisConnection::Command> commands;
  for (const auto& [name, token] : todo) commands.push_back({"EVAL", kReleaseScript, "1", name, token});
  auto r = with_connection([&](RedisConnection& c) { return c.pipeline(commands); });
  if (r)
    for (const auto& reply : *r) reply_ok(reply, "EVAL (lease release)");
  if (!r) {
    std::lock_guard<std::mutex> lock(state_mu_);
    pending_releases_.insert(pending_releases_.end(), todo.begin(), todo.end());
  }
}

template <typename Fn>
auto RedisStore::with_connection(Fn&& fn) -> std::optional<decltype(fn(std::declval<RedisConnection&>()))> {
  const std::optional<std::uint64_t> began = begin_operation();
  if (!began) return std::nullopt;
  std::unique_ptr<RedisConnection> c = pool_->take();
  const bool pooled = c != nullptr;
  for (int attempt = 0;; ++attempt) {
    try {
      if (!c) c = std::make_unique<RedisConnection>(endpoint_, config_.timeout_s);
      auto result = fn(*c);
      pool_->give_back(std::move(c));
      answered(*began);
      return result;
    } catch (const RemoteError& e) {
      c.reset();
      // An idle pooled connection that the server closed (a restart, its idle timeout, a proxy) is not
      // an outage: one more try on a new connection.
      if (pooled && attempt == 0 && e.connection_lost()) continue;
      failed(e.what(), *began);
      return std::nullopt;
    }
  }
}

std::optional<Entry> RedisStore::accept(const CacheKey& key, const std::string& target, const std::string& value) {
  const std::string name = entry_name(key, target);
  const Unsealed u = unseal_entry(config_.secret, name, value);
  std::string error = u.error;
  if (error.empty()) {
    DecodeResult d = check_entry_bytes(u.entry, key, target);
    if (d.entry) return std::move(d.entry);
    error = "its entry is damaged (" + d.error + ")";
  }
  log::Event e;
  e.level = log::Level::Warning;
  e.kind = "remote_refused";
  e.key = key.hex();
  e.target = target;
  e.message = "kjit " + describe() + ": refused the value of " + name + " (" + std::to_string(value.size()) +
              " bytes): " + error + "; it is a miss" + (writable() ? ", and the entry compiled here replaces it" : "") +
              ". If this repeats, check that every writer uses the same KJIT_REMOTE_CACHE_SECRET and that "
              "nothing else writes kjit:* keys (said once per key)";
  log::warn_once("remote-refused:" + name, std::move(e));
  return std::nullopt;
}

std::optional<Entry> RedisStore::get(const CacheKey& key, const std::string& target) {
  const std::string name = entry_name(key, target);
  auto reply = with_connection([&](RedisConnection& c) { return c.command({"GET", name}); });
  if (!reply || !reply_ok(*reply, "GET") || reply->type != RedisReply::Type::String) return std::nullopt;
  return accept(key, target, reply->str);
}

bool RedisStore::put(const Entry& entry) {
  if (!writable()) return false;
  const std::string target = filed_target(entry.meta);
  const std::string name = entry_name(entry.key, target);
  std::string value;
  try {
    value = seal_entry(config_.secret, name, encode_entry(entry));
  } catch (const std::exception& ex) {  // OpenSSL failing: the entry stays local, said once
    log::warn_once("remote-seal-failed", "kjit " + describe() + ": cannot seal an entry (" + ex.what() +
                                             "); entries compiled here stay local (said once)");
    return false;
  }
  auto reply = with_connection([&](RedisConnection& c) { return c.command({"SET", name, value}); });
  if (!reply || !reply_ok(*reply, "SET")) return false;
  stored_.fetch_add(1);
  log::Event e;
  e.kind = "remote_store";
  e.key = entry.key.hex();
  e.template_name = entry.meta.template_name;
  e.kernel = entry.meta.name_expression;
  e.target = target;
  e.message = "stored " + entry.meta.name_expression + " for " + target + " in the " + describe();
  log::emit(std::move(e));
  return true;
}

FetchedMany RedisStore::get_many(const std::vector<std::pair<CacheKey, std::string>>& requests) {
  FetchedMany out;
  if (requests.empty()) return out;
  std::vector<std::string> names;
  names.reserve(requests.size());
  for (const auto& [key, target] : requests) names.push_back(entry_name(key, target));
  auto reply = with_connection([&](RedisConnection& c) {
    RedisConnection::Command mget{"MGET"};
    for (const auto& n : names) mget.push_back(n);
    return c.command(mget);
  });
  if (!reply) {
    out.answered = false;
    return out;
  }
  const std::string asked = std::to_string(requests.size()) + (requests.size() == 1 ? " key" : " keys");
  if (reply->type == RedisReply::Type::Error) {
    const std::string hint = error_hint(error_code(*reply));
    out.error = "it answered MGET with an error: " + reply->str.substr(0, 200) + (hint.empty() ? "" : "; " + hint);
    return out;
  }
  if (reply->type != RedisReply::Type::Array || reply->elements.size() != requests.size()) {
    out.error = std::string("it answered MGET of ") + asked + " with " +
                (reply->type == RedisReply::Type::Array
                     ? "an array of " + std::to_string(reply->elements.size()) + " values"
                     : std::string(type_name(reply->type)) + " instead of an array of values") +
                ": not Redis, or a proxy that does not pass MGET through";
    return out;
  }
  for (std::size_t i = 0; i < requests.size(); ++i) {
    const RedisReply::Type t = reply->elements[i].type;
    if (t != RedisReply::Type::String && t != RedisReply::Type::Nil) {
      out.error = std::string("it answered MGET of ") + asked + " with " + type_name(t) + " as value " +
                  std::to_string(i + 1) +
                  " (a string or nil expected): not Redis, or a proxy that does not "
                  "pass MGET through";
      return out;
    }
  }
  out.results.resize(requests.size());
  for (std::size_t i = 0; i < requests.size(); ++i) {
    const RedisReply& r = reply->elements[i];
    if (r.type != RedisReply::Type::String) continue;
    out.results[i].entry = accept(requests[i].first, requests[i].second, r.str);
    out.results[i].refused = !out.results[i].entry;
  }
  return out;
}

std::optional<bool> RedisStore::contains(const CacheKey& key, const std::string& target) {
  const std::string name = entry_name(key, target);
  auto r = with_connection([&](RedisConnection& c) { return c.command({"EXISTS", name}); });
  if (!r || !reply_ok(*r, "EXISTS")) return std::nullopt;
  return r->type == RedisReply::Type::Integer && r->integer > 0;
}

RedisStore::Lease RedisStore::try_lease(const CacheKey& key, const std::string& target, std::string* token) {
  if (!writable()) return Lease::Unavailable;
  const std::string name = lease_name(key, target);
  std::string mine;
  try {
    mine = new_token();
  } catch (const std::exception&) {  // no entropy source: no lease, a local compile
    return Lease::Unavailable;
  }
  const std::string px = ms_text(config_.lease_s);
  auto r = with_connection([&](RedisConnection& c) { return c.command({"SET", name, mine, "NX", "PX", px}); });
  if (!r || !reply_ok(*r, "SET NX (lease)")) return Lease::Unavailable;
  if (r->type == RedisReply::Type::Nil) return Lease::Held;
  *token = mine;
  return Lease::Taken;
}

void RedisStore::release_lease(const CacheKey& key, const std::string& target, const std::string& token) {
  const std::string name = lease_name(key, target);
  auto r = with_connection([&](RedisConnection& c) { return c.command({"EVAL", kReleaseScript, "1", name, token}); });
  if (!r) {
    std::lock_guard<std::mutex> lock(state_mu_);
    pending_releases_.emplace_back(name, token);
    return;
  }
  reply_ok(*r, "EVAL (lease release)");
}

bool RedisStore::renew_lease(const CacheKey& key, const std::string& target, const std::string& token) {
  const std::string name = lease_name(key, target), px = ms_text(config_.lease_s);
  auto r = with_connection([&](RedisConnection& c) { return c.command({"EVAL", kRenewScript, "1", name, token, px}); });
  return r && reply_ok(*r, "EVAL (lease renewal)") && r->type == RedisReply::Type::Integer && r->integer == 1;
}

void RedisStore::mark_unpublished(const CacheKey& key, const std::string& target) {
  if (!writable()) return;
  const std::string name = unpublished_name(key, target), px = ms_text(config_.lease_s);
  auto r = with_connection([&](RedisConnection& c) { return c.command({"SET", name, "1", "PX", px}); });
  if (r) reply_ok(*r, "SET (unpublished)");
}

std::optional<CompileLeases::Watch> RedisStore::watch(const CacheKey& key, const std::string& target) {
  const std::string entry = entry_name(key, target), lease = lease_name(key, target),
                    unpublished = unpublished_name(key, target);
  auto r = with_connection(
      [&](RedisConnection& c) { return c.pipeline({{"EXISTS", entry}, {"PTTL", lease}, {"EXISTS", unpublished}}); });
  if (!r || r->size() != 3) return std::nullopt;
  for (const auto& reply : *r)
    if (!reply_ok(reply, "EXISTS / PTTL") || reply.type != RedisReply::Type::Integer) return std::nullopt;
  Watch w;
  w.entry = (*r)[0].integer > 0;
  w.lease = (*r)[1].integer != -2;          // -2: no such key
  w.lease_expires = (*r)[1].integer != -1;  // -1: a key without an expiry
  w.unpublished = (*r)[2].integer > 0;
  return w;
}

std::optional<Store::Probe> RedisStore::probe() const {
  Probe p;
  const auto t0 = Clock::now();
  try {
    RedisConnection c(endpoint_, config_.timeout_s);
    const RedisReply r = c.command({"PING"});
    if (r.type == RedisReply::Type::Error) {
      p.error = "PING answered " + r.str;
    } else {
      p.answers = true;
    }
  } catch (const RemoteError& e) {
    p.error = e.what();
  }
  p.ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  return p;
}

}  // namespace kjit::cache
