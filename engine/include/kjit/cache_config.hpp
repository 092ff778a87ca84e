// The cache's configuration from the engine's settings: the cache library takes plain config structs
// and knows nothing of Settings (it sits below the engine).
#pragma once

#include "kjit/cache/disk_cache.hpp"
#include "kjit/settings.hpp"

namespace kjit {

// KJIT_CACHE_DIR, KJIT_CACHE_PATH, KJIT_CACHE_MODE, KJIT_CACHE_MAX_BYTES, KJIT_LOCK_TIMEOUT.
cache::DiskCacheConfig disk_cache_config(const Settings& s);

}  // namespace kjit
