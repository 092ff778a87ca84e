// Strict cache mode's miss: the warning event and the CacheMissError that says how to produce the entry.
#pragma once

#include <string>

#include "kjit/cache/cache_key.hpp"
#include "kjit/specialization.hpp"
#include "kjit/target.hpp"

namespace kjit {

// Emits the "strict_miss" log event and throws CacheMissError naming the specialization, the key, the
// cache (`cache_described`) and the commands that produce the entry (compile_command.hpp).
[[noreturn]] void raise_strict_miss(const Specialization& spec, const Target& target, const cache::CacheKey& key,
                                    const std::string& cache_described);

}  // namespace kjit
