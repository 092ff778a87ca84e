// The cache keys of a specialization: for one compile plan (key_for), and the candidates a lookup tries
// for a target before NVRTC is loaded (a cubin and a PTX key: only NVRTC decides between them).
#pragma once

#include <utility>
#include <vector>

#include "kjit/cache/cache_key.hpp"
#include "kjit/compiler.hpp"
#include "kjit/specialization.hpp"
#include "kjit/target.hpp"

namespace kjit {

using KeyCandidates = std::vector<std::pair<CompilePlan, cache::CacheKey>>;

cache::CacheKey key_for(const Specialization& spec, const CompilePlan& plan);
KeyCandidates key_candidates(const Specialization& spec, const Target& target);
std::vector<cache::CacheKey> keys_of(const KeyCandidates& cands);

}  // namespace kjit
