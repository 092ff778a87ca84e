// What the cache may do (KJIT_CACHE_MODE, read by the engine's settings).
#pragma once

namespace kjit::cache {

// readwrite: use and fill the cache · readonly: use entries, never write · strict: use entries, a miss
// is an error (the engine never compiles) · off: no disk cache.
enum class CacheMode { ReadWrite, ReadOnly, Strict, Off };

// "readwrite", "readonly", "strict", "off": the KJIT_CACHE_MODE spelling.
const char* to_string(CacheMode mode) noexcept;

}  // namespace kjit::cache
