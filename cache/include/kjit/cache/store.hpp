// Store: the contract of a store of cache entries by (key, target): the writable disk cache
// (disk_cache.hpp), a read-only layer of it (read_only_layer.hpp), a remote tier (redis_store.hpp, or any
// store registered by URL scheme: store_registry.hpp). The Engine reads and writes them through a
// StoreChain (store_chain.hpp), which is the only place that knows their order.
//
// The contract is entries in, entries out, plus two capabilities a store may have:
//  - KeyLocks: one process of this machine at a time produces a key (the disk's per-key flock);
//  - CompileLeases: one process of the deployment at a time produces a key (a remote tier's lease).
// Maintenance (list, prune, clear of a directory) is not part of it: it belongs to the store that has
// files (DiskCache).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "kjit/cache/cache_key.hpp"
#include "kjit/cache/entry.hpp"

namespace kjit::cache {

// A per-key lock held by this process; destroying it lets the key go.
class KeyLock {
 public:
  virtual ~KeyLock() = default;
};

// The capability of a store whose producers on one machine take turns per key.
class KeyLocks {
 public:
  virtual ~KeyLocks() = default;
  // Blocks until this process holds the key's lock (or the store's time limit passes: kjit::Error).
  // nullptr when the store cannot lock now (said by the store, e.g. an unusable directory): the caller
  // then produces without the lock.
  virtual std::unique_ptr<KeyLock> lock(const CacheKey& key, const std::string& target) = 0;
};

// The capability of a store shared by several machines: compile leases with an expiry, so that the
// processes of a deployment that miss one key produce it once (cluster_flight.hpp drives them).
class CompileLeases {
 public:
  enum class Lease { Taken, Held, Unavailable };
  // One round trip: whether the entry and the lease exist.
  struct Watch {
    bool entry = false;
    bool lease = false;
    bool lease_expires = true;  // false: a lease without an expiry (not one kjit wrote)
    bool unpublished = false;   // mark_unpublished() was said for the key
  };
  virtual ~CompileLeases() = default;
  // Taken (with `token` set), Held by another process, or Unavailable (read-only, or no answer).
  virtual Lease try_lease(const CacheKey& key, const std::string& target, std::string* token) = 0;
  // Extends this token's lease to a full lease_s() again; false when it is not ours any more or no answer.
  virtual bool renew_lease(const CacheKey& key, const std::string& target, const std::string& token) = 0;
  // Deletes the lease while it is still this token's.
  virtual void release_lease(const CacheKey& key, const std::string& target, const std::string& token) = 0;
  // Says, for a while, that the holder ended without publishing an entry: waiters then produce at once.
  virtual void mark_unpublished(const CacheKey& key, const std::string& target) = 0;
  // nullopt: no answer.
  virtual std::optional<Watch> watch(const CacheKey& key, const std::string& target) = 0;
  virtual double lease_s() const = 0;
  // The longest a process waits for another's compile before it produces on its own.
  virtual double wait_limit_s() const = 0;
};

// Several lookups at once (a start-up prefetch): one result per request, in order.
struct Fetched {
  std::optional<Entry> entry;
  bool refused = false;  // a value was there but refused (said by a warning)
};
struct FetchedMany {
  std::vector<Fetched> results;  // one per request, in order; empty unless ok()
  bool answered = true;          // false: the store did not answer (warned by the store)
  // It answered, but not with one value per key (an error reply, a reply of another shape): what it said
  // and what to do; not warned (the caller reports it: nothing was looked up).
  std::string error;
  bool ok() const noexcept { return answered && error.empty(); }
};

class Store {
 public:
  virtual ~Store() = default;

  // The entry filed under (key, target), or nullopt: a miss. An entry returned has passed the
  // validation of a disk entry, check_entry_bytes (entry_check.hpp), on the bytes this store holds, and
  // whatever trust rule the store has: a damaged, untrusted or unreadable entry is a miss (a warning
  // once, as the store sees fit), never an entry. A store that cannot answer (I/O, network) is a miss
  // too, not an error: a cache only saves work. Thread-safe.
  // Returning the decoded entry rather than its bytes keeps one validation per hit: the checksum of a
  // multi-megabyte payload is not computed twice on the disk-hit path.
  virtual std::optional<Entry> get(const CacheKey& key, const std::string& target) = 0;

  // get() for each request; a remote store answers them in one round trip.
  virtual FetchedMany get_many(const std::vector<std::pair<CacheKey, std::string>>& requests);

  // Keeps `entry` under (entry.key, filed_target(entry.meta)). Returns whether it was kept: false, never
  // an exception for I/O, when the store is not writable or failed to keep it (said by the store).
  virtual bool put(const Entry& entry) = 0;

  // Whether put() keeps entries now (a writable store can stop being one: a full disk).
  virtual bool writable() const = 0;

  // One line saying what the store is and in which state (for `kjit info` and messages).
  virtual std::string describe() const = 0;

  // How many entries put() has kept in this process, where the store counts them (0 otherwise).
  virtual std::uint64_t stored() const { return 0; }

  // Whether the store answers now and how fast (`kjit info`), for a store that answers over a network;
  // nullopt for the others.
  struct Probe {
    bool answers = false;
    double ms = 0;
    std::string error;
  };
  virtual std::optional<Probe> probe() const { return std::nullopt; }

  // The capabilities (null: the store has none).
  virtual KeyLocks* key_locks() { return nullptr; }
  virtual CompileLeases* leases() { return nullptr; }
};

}  // namespace kjit::cache
