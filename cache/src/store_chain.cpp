#include "kjit/cache/store_chain.hpp"

#include <exception>
#include <utility>

#include "kjit/cache/cluster_flight.hpp"
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

// One level's answer for (key, target): its valid entry, or nullopt (a miss, a failure, a wrong entry:
// the last two warned).
std::optional<Entry> level_get(Store& store, const CacheKey& key, const std::string& target) {
  std::optional<Entry> entry;
  try {
    entry = store.get(key, target);
  } catch (...) {
    warn_level(store, "failed",
               store.describe() + " failed to look up an entry (" + what_of(std::current_exception()) +
                   "); its lookups are misses while it fails, and the next store is consulted");
    return std::nullopt;
  }
  if (entry && (entry->key != key || filed_target(entry->meta) != target)) {
    warn_level(store, "mismatch",
               store.describe() + " answered a lookup of key " + key.hex() + " for '" + target +
                   "' with the entry of key " + entry->key.hex() + " for '" + filed_target(entry->meta).substr(0, 64) +
                   "'; it is ignored (a miss) and the next store is consulted");
    return std::nullopt;
  }
  return entry;
}

std::optional<StoreChain::Hit> StoreChain::get(const CacheKey& key, const std::string& target) const {
  return get_any({key}, target);
}

std::optional<StoreChain::Hit> StoreChain::get_any(const std::vector<CacheKey>& keys, const std::string& target) const {
  layout::check_target(target);  // a bad request is the caller's error, not a level's failure
  for (std::size_t i = 0; i < levels_.size(); ++i) {
    for (const CacheKey& key : keys) {
      std::optional<Entry> entry = level_get(*levels_[i].store, key, target);
      if (!entry) continue;
      if (levels_[i].backfill) backfill(*entry, i);
      return Hit{std::move(*entry), i, false, levels_[i].backfill};
    }
  }
  return std::nullopt;
}

StoreChain::Hit StoreChain::get_or_produce(const CacheKey& key, const std::string& target,
                                           const std::function<Entry()>& produce, bool share) const {
  // A producer that never declines: there is always a hit.
  return std::move(*get_or_try_produce(key, target, [&]() -> std::optional<Entry> { return produce(); }, share));
}

std::optional<StoreChain::Hit> StoreChain::get_or_try_produce(const CacheKey& key, const std::string& target,
                                                              const std::function<std::optional<Entry>()>& produce,
                                                              bool share) const {
  layout::check_target(target);
  // Warnings and log events of the produce and the puts wait until the key's lock is let go: a log sink
  // may block (Python's takes the GIL) and must not do so while other processes wait on this lock.
  log::Deferred deferred;
  std::unique_ptr<KeyLock> lock;
  for (const Level& l : levels_) {
    if (l.backfill || !l.store->writable()) continue;
    if (KeyLocks* locks = l.store->key_locks()) {
      lock = locks->lock(key, target);  // may throw (a wait past the store's limit)
      break;
    }
  }
  if (lock) {  // someone of this machine may have produced it while we waited
    for (std::size_t i = 0; i < levels_.size(); ++i)
      if (!levels_[i].backfill)
        if (auto entry = level_get(*levels_[i].store, key, target)) return Hit{std::move(*entry), i, false, false};
  }
  std::size_t leasing = levels_.size();
  if (share)
    for (std::size_t i = 0; i < levels_.size() && leasing == levels_.size(); ++i)
      if (levels_[i].store->writable() && levels_[i].store->leases()) leasing = i;
  bool produced = false;
  auto run = [&]() -> std::optional<Entry> {
    std::optional<Entry> e = produce();
    if (!e) return std::nullopt;  // declined: nothing of this key to keep
    produced = true;
    if (e->key != key || filed_target(e->meta) != target)
      throw Error("kjit cache: the compiled entry does not match its request (asked for key " + key.hex() +
                  " target '" + target + "', produced key " + e->key.hex() + " requested_target '" +
                  filed_target(e->meta) +
                  "'); the producer must return the key it was called for and set meta.requested_target (or "
                  "meta.target) to the target it was called for, else the entry could never be found again");
    return e;
  };
  Hit hit;
  if (leasing < levels_.size()) {
    std::optional<FlightResult> r = try_produce_once(*levels_[leasing].store, key, target, run);
    if (!r) return std::nullopt;  // `lock` lets the key go, then `deferred` emits
    hit.entry = std::move(r->entry);
    hit.remote = r->fetched;
  } else {
    std::optional<Entry> e = run();
    if (!e) return std::nullopt;
    hit.entry = std::move(*e);
  }
  hit.produced = produced && !hit.remote;
  hit.level = hit.remote ? leasing : levels_.size();
  for (std::size_t i = 0; i < levels_.size(); ++i) {
    if (i == leasing) continue;  // produce_once published there (or took it from there)
    Store& store = *levels_[i].store;
    try {
      if (store.writable()) store.put(hit.entry);  // a put that fails is said by the store
    } catch (...) {
      warn_level(store, "put",
                 store.describe() + " failed to keep a compiled entry (" + what_of(std::current_exception()) +
                     "); the entry is used all the same");
    }
  }
  return hit;  // `lock` lets the key go after the puts, then `deferred` emits
}

Store* StoreChain::remote() const noexcept {
  for (const Level& l : levels_)
    if (l.backfill) return l.store.get();
  return nullptr;
}

Store* StoreChain::local_writable() const noexcept {
  for (const Level& l : levels_)
    if (!l.backfill && l.store->writable()) return l.store.get();
  return nullptr;
}

StoreChain::PrefetchReport StoreChain::prefetch(const std::vector<PrefetchJob>& jobs) const {
  Store* remote_store = remote();
  if (!remote_store) throw Error("there is no remote cache tier to prefetch from");
  if (!local_writable()) throw Error("no local cache level is writable, so nothing fetched could be kept");
  PrefetchReport r;
  r.jobs = jobs.size();
  // The local levels first (no round trip for what is here), then every candidate key of the others at once.
  std::vector<std::pair<CacheKey, std::string>> asks;
  std::vector<std::pair<std::size_t, std::size_t>> ask_range;  // per job not local: [first, last) in asks
  for (const PrefetchJob& job : jobs) {
    layout::check_target(job.target);
    bool local = false;
    for (const Level& l : levels_)
      for (const CacheKey& key : job.keys)
        local = local || (!l.backfill && level_get(*l.store, key, job.target).has_value());
    if (local) {
      ++r.on_disk;
      continue;
    }
    const std::size_t first = asks.size();
    for (const CacheKey& key : job.keys) asks.emplace_back(key, job.target);
    ask_range.emplace_back(first, asks.size());
  }
  if (asks.empty()) return r;
  const FetchedMany got = remote_store->get_many(asks);
  if (!got.ok()) {
    r.answered = got.answered;
    r.lookup_error = got.error;
    r.missing = ask_range.size();
    return r;
  }
  for (const auto& [first, last] : ask_range) {
    const Entry* found = nullptr;
    bool refused = false;
    for (std::size_t i = first; i < last && !found; ++i) {
      if (got.results[i].entry) found = &*got.results[i].entry;
      refused = refused || got.results[i].refused;
    }
    if (!found) {
      ++(refused ? r.refused : r.missing);
      continue;
    }
    bool kept = false;
    for (const Level& l : levels_)
      if (!l.backfill && l.store->writable()) kept = l.store->put(*found) || kept;  // a put not kept is said
    ++(kept ? r.fetched : r.not_kept);
  }
  return r;
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
