// SpecializedKernel: one specialization resolved to a cache entry, the one result type of the Engine
// (get(): loaded, ready to launch; prepare(): compiled into the cache only, for a target that may not be
// this machine's). Where a resolution found it is its Origin.
#pragma once

#include <memory>
#include <string>

#include "kjit/cache/cache_key.hpp"
#include "kjit/cache/entry.hpp"
#include "kjit/module.hpp"

namespace kjit {

// Memory: this process had it (or shared another thread's resolution of it). Disk: a disk level (the
// writable cache or a read-only layer). Compiled: NVRTC, now. Remote: the remote tier (KJIT_REMOTE_CACHE),
// compiled by another process of the deployment.
enum class Origin { Memory, Disk, Compiled, Remote };
const char* to_string(Origin o) noexcept;

struct SpecializedKernel {
  std::shared_ptr<const Kernel> kernel;  // null: compiled only (Engine::prepare)
  cache::CacheKey key;
  cache::EntryMetadata meta;
  std::string log;  // NVRTC warnings, when this process compiled it
};

}  // namespace kjit
