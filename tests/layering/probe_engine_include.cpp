// Must NOT compile: a cache-layer source (kjit_cache's include directories) that reaches for an engine
// header. ctest's layering.cache_build builds it and expects the compiler to miss the header.
#include "kjit/cache/entry.hpp"
#include "kjit/settings.hpp"

int kjit_layering_probe() { return 0; }
