#include "kjit/cache_config.hpp"

#include "kjit/choices.hpp"

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

cache::ChoiceStoreConfig choice_store_config(const Settings& s) {
  cache::ChoiceStoreConfig c;
  c.root = s.cache_dir;
  c.layers = s.cache_layers;
  c.mode = s.cache_mode;
  c.tag = choice_tag();
  return c;
}

double remote_wait_limit_s(const Settings& s) {
  const bool leases = s.remote_cache && s.remote_cache->mode == cache::RemoteMode::ReadWrite &&
                      s.cache_mode == CacheMode::ReadWrite;
  return leases ? s.compile_timeout_s + s.remote_cache->lease_s : 0.0;
}

}  // namespace kjit
