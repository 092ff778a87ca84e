// The cache's configuration from the engine's settings: the cache library takes plain config structs
// and knows nothing of Settings (it sits below the engine).
#pragma once

#include "kjit/cache/choice_store.hpp"
#include "kjit/cache/disk_cache.hpp"
#include "kjit/cache/store_chain.hpp"
#include "kjit/settings.hpp"

namespace kjit {

// KJIT_CACHE_DIR, KJIT_CACHE_PATH, KJIT_CACHE_MODE, KJIT_CACHE_MAX_BYTES, KJIT_LOCK_TIMEOUT (plus, with a
// writable remote tier, the remote wait below: a key's local waiters allow for its holder's remote wait).
cache::DiskCacheConfig disk_cache_config(const Settings& s);

// The tuned-choice store of the same cache (KJIT_CACHE_DIR, KJIT_CACHE_PATH, KJIT_CACHE_MODE), its keys
// scoped by choice_tag(); Choices (choices.hpp) is its user.
cache::ChoiceStoreConfig choice_store_config(const Settings& s);

// The tag the choice store scopes keys by ("kjit <version> choices 1"): what `kjit warm` installs under.
std::string choice_tag();

// The longest a process waits for another machine's compile of a key before it compiles the key itself:
// what one compile may take (KJIT_COMPILE_TIMEOUT) plus a lease (KJIT_REMOTE_CACHE_LEASE). 0 when no
// writable remote tier is configured (no lease is ever waited for).
double remote_wait_limit_s(const Settings& s);

// The stores of the settings, in lookup order: the writable disk cache, its read-only layers (never
// backfilled: read in place), and the remote tier (KJIT_REMOTE_CACHE, by URL scheme: store_registry.hpp),
// whose hits are backfilled to the disk. Mode off means no cache at all; in every other mode the remote
// tier is read (strict included: it fetches, never compiles); modes readonly and strict write nothing
// anywhere, the remote tier included.
struct CacheStores {
  std::shared_ptr<cache::DiskCache> disk;  // for its maintenance (list, prune, clear) and `kjit info`
  cache::StoreChain chain;
};
CacheStores open_cache_stores(const Settings& s);

}  // namespace kjit
