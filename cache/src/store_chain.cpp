#include "kjit/cache/store_chain.hpp"

#include <exception>
#include <utility>

#include "kjit/cache/layout.hpp"
#include "kjit/error.hpp"
#include "kjit/log.hpp"

namespace kjit::cache {

namespace {

// What a level's exception says, for the warning.
std::string what_of(std::exception_ptr e) {
  try {
    std::rethrow_exception(e);
  } catch (const std::exception& ex) {
    return ex.what();
  } catch (...) {
    return "an exception that is not a std::exception";
  }
}

// Warns once per store and failure kind; the level's failure is not the caller's.
void warn_level(const Store& store, const std::string& kind, const std::string& message) {
  log::warn_once("cache-store-" + kind + ":" + store.describe(),
                 "kjit cache: " + message + " (said once for this store).");
}

}  // namespace

StoreChain::StoreChain(std::vector<Level> levels) : levels_(std::move(levels)) {
  for (std::size_t i = 0; i < levels_.size(); ++i)
    if (!levels_[i].store)
      throw ValueError("kjit cache: level " + std::to_string(i) +
                       " of a StoreChain has no store; every level needs one");
}

std::optional<StoreChain::Hit> StoreChain::get(const CacheKey& key, const std::string& target) const {
  layout::check_target(target);  // a bad request is the caller's error, not a level's failure
  for (std::size_t i = 0; i < levels_.size(); ++i) {
    Store& store = *levels_[i].store;
    std::optional<Entry> entry;
    try {
      entry = store.get(key, target);
    } catch (...) {
      warn_level(store, "failed",
                 store.describe() + " failed to look up an entry (" + what_of(std::current_exception()) +
                     "); its lookups are misses while it fails, and the next store is consulted");
      continue;
    }
    if (!entry) continue;
    if (entry->key != key || filed_target(entry->meta) != target) {
      warn_level(store, "mismatch",
                 store.describe() + " answered a lookup of key " + key.hex() + " for '" + target +
                     "' with the entry of key " + entry->key.hex() + " for '" +
                     filed_target(entry->meta).substr(0, 64) +
                     "'; it is ignored (a miss) and the next store is consulted");
      continue;
    }
    if (levels_[i].backfill) backfill(*entry, i);
    return Hit{std::move(*entry), i};
  }
  return std::nullopt;
}

void StoreChain::backfill(const Entry& entry, std::size_t hit_level) const {
  for (std::size_t j = 0; j < hit_level; ++j) {
    Store& store = *levels_[j].store;
    try {
      if (store.writable()) store.put(entry);  // a put that fails is said by the store
    } catch (...) {
      warn_level(store, "backfill",
                 store.describe() + " failed to keep an entry found further down the chain (" +
                     what_of(std::current_exception()) + "); the entry is used all the same");
    }
  }
}

}  // namespace kjit::cache
