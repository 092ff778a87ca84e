// The cache entry of a compile: the binary and the metadata block every entry carries (DESIGN section 4).
#pragma once

#include "kjit/cache/entry.hpp"
#include "kjit/compiler.hpp"
#include "kjit/specialization.hpp"

namespace kjit {

// `bin`'s payload is moved into the entry.
cache::Entry compiled_entry(const Specialization& spec, const CompilePlan& plan, CompiledBinary& bin,
                            const cache::CacheKey& key);

}  // namespace kjit
