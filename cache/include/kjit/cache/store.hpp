// Store: the contract of a store of cache entries by (key, target): the writable disk cache
// (disk_cache.hpp), a read-only layer of it (read_only_layer.hpp), later a remote tier. The Engine
// consults them in order through a StoreChain (store_chain.hpp).
//
// The contract is entries in, entries out; maintenance (list, prune, clear of a directory) is not part
// of it: it belongs to the store that has files (DiskCache).
#pragma once

#include <optional>
#include <string>

#include "kjit/cache/cache_key.hpp"
#include "kjit/cache/entry.hpp"

namespace kjit::cache {

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

  // Keeps `entry` under (entry.key, filed_target(entry.meta)). Returns whether it was kept: false, never
  // an exception for I/O, when the store is not writable or failed to keep it (said by the store).
  virtual bool put(const Entry& entry) = 0;

  // Whether put() keeps entries now (a writable store can stop being one: a full disk).
  virtual bool writable() const = 0;

  // One line saying what the store is and in which state (for `kjit info` and messages).
  virtual std::string describe() const = 0;
};

}  // namespace kjit::cache
