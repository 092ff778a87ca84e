// The remote stores kjit can build from a URL, by scheme: redis:// (RedisStore) is built in; a program
// (or a test) registers another scheme with register_remote_store, and KJIT_REMOTE_CACHE=<scheme>://...
// then makes that store the remote level of the chain. The engine names no store type: it asks here.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "kjit/cache/remote_config.hpp"
#include "kjit/cache/store.hpp"

namespace kjit::cache {

struct RemoteStoreScheme {
  std::string scheme;  // "redis": URLs that start with "redis://"
  std::string form;    // the URL's form, for messages: "redis://[user:password@]host[:port][/db]"
  // Throws kjit::ValueError saying what is wrong with the URL and what is allowed (no password in it).
  std::function<void(const std::string& url)> check;
  // The store for `config` (config.url has this scheme and passed check()).
  std::function<std::shared_ptr<Store>(const RemoteConfig& config)> make;
};

// Adds (or replaces) a scheme. Throws kjit::ValueError for an empty scheme name or a missing function.
void register_remote_store(RemoteStoreScheme scheme);

// The schemes known now, the built-in ones first.
std::vector<std::string> remote_store_schemes();

// Checks `url` against its scheme's rules. Throws kjit::ValueError for a URL without a known scheme
// (naming those known) or one its scheme refuses.
void check_remote_url(const std::string& url);

// The store for config.url's scheme (check_remote_url first).
std::shared_ptr<Store> make_remote_store(const RemoteConfig& config);

}  // namespace kjit::cache
