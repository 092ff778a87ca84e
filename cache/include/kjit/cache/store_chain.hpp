// StoreChain: stores consulted in order (the local writable disk, the read-only layers, later a remote
// tier); the first valid hit wins, and a hit in a level marked `backfill` is copied into the earlier
// levels that are writable, so that the next lookup stops sooner (a remote hit lands on the local disk).
//
// Failure policy: a lookup never fails because a store did. A level that throws is a miss (warned once
// per level), and so is a level that answers with an entry for another key or target (a store bug
// must not load the wrong kernel). A backfill that fails is said by the store and changes nothing.
// Only a bad request is an error: a target that cannot be a directory name (kjit::ValueError).
#pragma once

#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kjit/cache/store.hpp"

namespace kjit::cache {

class StoreChain {
 public:
  struct Level {
    std::shared_ptr<Store> store;
    // Copy a hit here into the earlier writable levels. Off for read-only layers: they are deployment
    // artifacts, read in place, and copying them would only double the disk they take. On for a remote
    // tier, whose hits cost a round trip.
    bool backfill = false;
  };

  struct Hit {
    Entry entry;
    std::size_t level = 0;  // index in levels() of the store that had it
  };

  StoreChain() = default;
  // Throws kjit::ValueError for a level without a store.
  explicit StoreChain(std::vector<Level> levels);

  // The first valid entry for (key, target), level by level; nullopt when none has it.
  // Throws kjit::ValueError when `target` cannot be a directory name (before consulting any level).
  std::optional<Hit> get(const CacheKey& key, const std::string& target) const;

  const std::vector<Level>& levels() const noexcept { return levels_; }

 private:
  // Puts `entry` in every writable level before `hit_level`.
  void backfill(const Entry& entry, std::size_t hit_level) const;

  std::vector<Level> levels_;
};

}  // namespace kjit::cache
