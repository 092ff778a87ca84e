#include "kjit/cache_config.hpp"

namespace kjit {

cache::DiskCacheConfig disk_cache_config(const Settings& s) {
  cache::DiskCacheConfig c;
  c.root = s.cache_dir;
  c.layers = s.cache_layers;
  c.mode = s.cache_mode;
  c.max_bytes = s.cache_max_bytes;
  c.lock_timeout_s = s.lock_timeout_s;
  return c;
}

}  // namespace kjit
