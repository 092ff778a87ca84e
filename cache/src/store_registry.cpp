#include "kjit/cache/store_registry.hpp"

#include <mutex>
#include <utility>

#include "kjit/cache/redis_store.hpp"
#include "kjit/error.hpp"

namespace kjit::cache {
namespace {

struct Registry {
  std::mutex mu;
  std::vector<RemoteStoreScheme> schemes;
  Registry() {
    schemes.push_back(
        {"redis", "redis://[user:password@]host[:port][/db]",
         [](const std::string& url) { (void)parse_redis_url(url); },
         [](const RemoteConfig& c) -> std::shared_ptr<Store> { return std::make_shared<RedisStore>(c); }});
  }
};

Registry& registry() {
  static Registry* r = new Registry();  // never destroyed: stores may be made during exit
  return *r;
}

std::string scheme_of(const std::string& url) {
  const auto colon = url.find("://");
  return colon == std::string::npos ? std::string() : url.substr(0, colon);
}

std::string known_text(const std::vector<RemoteStoreScheme>& schemes) {
  std::string out;
  for (const auto& s : schemes) out += (out.empty() ? "" : ", ") + s.form;
  return out;
}

// The scheme entry for `url` (a copy: the registry may change after the lock is let go).
RemoteStoreScheme find_scheme(const std::string& url) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  const std::string scheme = scheme_of(url);
  for (const auto& s : r.schemes)
    if (s.scheme == scheme) return s;
  throw ValueError("'" + display_url(url) + "' names no remote store kjit knows: " +
                   (scheme.empty() ? std::string("it has no scheme") : "the scheme '" + scheme + "' is not one") +
                   "; allowed " + known_text(r.schemes) + ", e.g. redis://10.0.0.5:6379/0");
}

}  // namespace

void register_remote_store(RemoteStoreScheme scheme) {
  if (scheme.scheme.empty() || scheme.scheme.find(':') != std::string::npos ||
      scheme.scheme.find('/') != std::string::npos || scheme.form.empty())
    throw ValueError(
        "a remote store scheme needs a non-empty name without ':' or '/' (e.g. \"redis\") and the form "
        "of its URLs for messages; got '" +
        scheme.scheme + "' with form '" + scheme.form + "'");
  if (!scheme.check || !scheme.make)
    throw ValueError("the remote store scheme '" + scheme.scheme + "' needs both a check and a make function");
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  for (auto& s : r.schemes)
    if (s.scheme == scheme.scheme) {
      s = std::move(scheme);
      return;
    }
  r.schemes.push_back(std::move(scheme));
}

std::vector<std::string> remote_store_schemes() {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  std::vector<std::string> out;
  for (const auto& s : r.schemes) out.push_back(s.scheme);
  return out;
}

void check_remote_url(const std::string& url) { find_scheme(url).check(url); }

std::shared_ptr<Store> make_remote_store(const RemoteConfig& config) {
  const RemoteStoreScheme s = find_scheme(config.url);
  s.check(config.url);
  return s.make(config);
}

}  // namespace kjit::cache
