// Cluster-wide single flight: processes on different machines that miss the same (key, target) compile
// it once. The first takes the compile lease in the remote tier (CompileLeases::try_lease, with an expiry,
// renewed while it compiles), produces the entry, stores it there and lets the lease go; the others wait
// for the entry and take it.
//  - A lease whose holder died expires, and a waiter takes it over.
//  - A holder that publishes no entry (its produce() throws or declines, or Redis refuses the entry)
//    says so (mark_unpublished) and lets the lease go: the waiters then produce on their own at once,
//    each getting its own error, rather than one after another.
//  - A waiter waits at most wait_limit_s, and not at all on a lease without an expiry (not kjit's).
//  - When the remote tier does not answer, or is read-only, the entry is produced here, unshared: a
//    remote tier never stops a process from compiling.
//
// Within one machine the disk cache's per-key lock already lets one process through (StoreChain::
// get_or_produce calls this under that lock), so each machine sends at most one process per key here.
#pragma once

#include <functional>
#include <optional>
#include <string>

#include "kjit/cache/entry.hpp"
#include "kjit/cache/store.hpp"

namespace kjit::cache {

struct FlightResult {
  Entry entry;
  bool fetched = false;  // true: another process produced it (taken from the remote tier)
};

// `remote` is the shared store; without the CompileLeases capability (remote.leases() null: read-only,
// or a store that has none) the entry is produced here, unshared.
FlightResult produce_once(Store& remote, const CacheKey& key, const std::string& target,
                          const std::function<Entry()>& produce);

// produce_once for a producer that may decline once it ran (nullopt: what it made is not the entry of
// `key`, StoreChain::get_or_try_produce). A decline under the lease is what a produce() that throws is:
// nothing is published, the waiters are told so and the lease goes; the result is nullopt.
std::optional<FlightResult> try_produce_once(Store& remote, const CacheKey& key, const std::string& target,
                                             const std::function<std::optional<Entry>()>& produce);

}  // namespace kjit::cache
