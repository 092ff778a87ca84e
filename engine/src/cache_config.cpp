#include "kjit/cache_config.hpp"

#include "kjit/cache/store_registry.hpp"

namespace kjit {

cache::DiskCacheConfig disk_cache_config(const Settings& s) {
  cache::DiskCacheConfig c;
  c.root = s.cache_dir;
  c.layers = s.cache_layers;
  c.mode = s.cache_mode;
  c.max_bytes = s.cache_max_bytes;
  c.lock_timeout_s = s.lock_timeout_s;
  c.holder_remote_wait_s = remote_wait_limit_s(s);
  return c;
}

std::string choice_tag() {
  return std::string("kjit ") + KJIT_VERSION + " choices " + std::to_string(cache::kChoiceFormat);
}

cache::ChoiceStoreConfig choice_store_config(const Settings& s) {
  cache::ChoiceStoreConfig c;
  c.root = s.cache_dir;
  c.layers = s.cache_layers;
  c.mode = s.cache_mode;
  c.tag = choice_tag();
  return c;
}

double remote_wait_limit_s(const Settings& s) {
  const bool leases =
      s.remote_cache && s.remote_cache->mode == cache::RemoteMode::ReadWrite && s.cache_mode == CacheMode::ReadWrite;
  return leases ? s.compile_timeout_s + s.remote_cache->lease_s : 0.0;
}

CacheStores open_cache_stores(const Settings& s) {
  CacheStores out;
  out.disk = std::make_shared<cache::DiskCache>(disk_cache_config(s));
  std::vector<cache::StoreChain::Level> levels{{out.disk, false}};
  for (const auto& layer : out.disk->layers()) levels.push_back({layer, false});
  if (s.remote_cache && s.cache_mode != CacheMode::Off) {
    cache::RemoteConfig remote = *s.remote_cache;
    if (s.cache_mode != CacheMode::ReadWrite) remote.mode = cache::RemoteMode::Read;
    // A waiter gives up on another process's compile after what one compile may take, plus a lease
    // (the disk's lock waiters allow for this wait: disk_cache_config).
    remote.wait_limit_s = remote_wait_limit_s(s);
    levels.push_back({cache::make_remote_store(remote), true});
  }
  out.chain = cache::StoreChain(std::move(levels));
  return out;
}

}  // namespace kjit
