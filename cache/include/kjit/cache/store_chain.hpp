// StoreChain: stores consulted in order (the local writable disk, the read-only layers, a remote tier);
// the first valid hit wins, and a hit in a level marked `backfill` is copied into the earlier levels that
// are writable, so that the next lookup stops sooner (a remote hit lands on the local disk).
//
// Writes go through the chain too: get_or_produce() runs a producer (a compile) for a key no level has,
// once per key on this machine (the KeyLocks of the first writable level that has them: the disk's
// flock) and once per key in the deployment (the CompileLeases of a writable level that has them: the
// remote tier's lease), and puts the entry into every writable level. prefetch() fills the local levels
// from the remote ones ahead of use. The engine knows no store type: only this chain.
//
// Failure policy: a lookup never fails because a store did. A level that throws is a miss (warned once
// per level), and so is a level that answers with an entry for another key or target (a store bug
// must not load the wrong kernel). A backfill that fails is said by the store and changes nothing.
// Only a bad request is an error: a target that cannot be a directory name (kjit::ValueError).
#pragma once

#include <cstddef>
#include <functional>
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
    std::size_t level = 0;  // index in levels() of the store that had it (produced: levels().size())
    bool produced = false;  // get_or_produce ran the producer in this process
    // It came from a level marked backfill (a remote tier): found there, or produced by another process
    // of the deployment and taken from there.
    bool remote = false;
  };

  // What prefetch() did, job by job (a job: the candidate keys of one specialization for one target).
  struct PrefetchReport {
    std::size_t jobs = 0;
    std::size_t on_disk = 0;   // already in a local level: not asked for
    std::size_t fetched = 0;   // taken from a remote level and put into the local writable levels
    std::size_t not_kept = 0;  // taken from a remote level, but no local level kept it (warned by them)
    std::size_t missing = 0;   // not in the remote levels (or not looked up: the lookup failed)
    std::size_t refused = 0;   // in a remote level but refused (said by a warning)
    bool answered = true;      // false: the remote level did not answer (warned); nothing was fetched
    // The remote level answered the lookup with an error or with a reply of another shape: what it said
    // and what to do (not warned); nothing was fetched.
    std::string lookup_error;
    bool looked_up() const noexcept { return answered && lookup_error.empty(); }
  };
  struct PrefetchJob {
    std::vector<CacheKey> keys;  // any of them will do (a cubin and a PTX key, say)
    std::string target;
  };

  StoreChain() = default;
  // Throws kjit::ValueError for a level without a store.
  explicit StoreChain(std::vector<Level> levels);

  // The first valid entry for (key, target), level by level; nullopt when none has it.
  // Throws kjit::ValueError when `target` cannot be a directory name (before consulting any level).
  std::optional<Hit> get(const CacheKey& key, const std::string& target) const;
  // The first valid entry for any of `keys`, in one pass over the levels: a level is asked for every key
  // before the next level is (a local PTX entry beats a round trip for a remote cubin one).
  std::optional<Hit> get_any(const std::vector<CacheKey>& keys, const std::string& target) const;

  // For a key no level had a moment ago (call get/get_any first): under the first writable level's
  // KeyLock, looks in the levels that are not remote again (another process of this machine may have
  // produced it while this one waited), then produces it, through the CompileLeases of the first
  // writable level that has them when `share` (so that another machine's compile of the key is waited
  // for and taken instead), else here; puts the entry into every writable level (the leasing level has
  // it already). Exceptions of `produce` propagate, every lock and lease let go. `produce` must return an
  // entry with `key` and filed_target(meta) == target, else kjit::Error. Log events of the produce and
  // the puts are emitted once the lock is let go (a log sink may block).
  Hit get_or_produce(const CacheKey& key, const std::string& target, const std::function<Entry()>& produce,
                     bool share = true) const;
  // get_or_produce for a producer that may find, once it ran, that what it made is not the entry of
  // `key` (a compile that learned a header: its template keys otherwise). It then answers nullopt, and
  // so does this: nothing is put, every lock and lease is let go as after a produce that threw (the
  // deployment's waiters produce on their own), and the caller asks again under the other key.
  std::optional<Hit> get_or_try_produce(const CacheKey& key, const std::string& target,
                                        const std::function<std::optional<Entry>()>& produce, bool share = true) const;

  // Start-up: the entries of `jobs` that no local level has, asked of the first remote level (marked
  // backfill) in one round trip, and put into the local writable levels. Throws kjit::Error when the
  // chain has no remote level or no writable local level (nothing fetched could be kept): the caller
  // says what to set.
  PrefetchReport prefetch(const std::vector<PrefetchJob>& jobs) const;
  // The first level marked backfill (the remote tier), or null.
  Store* remote() const noexcept;
  // The first writable level that is not remote (the disk), or null.
  Store* local_writable() const noexcept;

  const std::vector<Level>& levels() const noexcept { return levels_; }

 private:
  // Puts `entry` in every writable level before `hit_level`.
  void backfill(const Entry& entry, std::size_t hit_level) const;

  std::vector<Level> levels_;
};

}  // namespace kjit::cache
