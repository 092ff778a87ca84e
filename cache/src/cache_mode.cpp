#include "kjit/cache/cache_mode.hpp"

namespace kjit::cache {

const char* to_string(CacheMode mode) noexcept {
  switch (mode) {
    case CacheMode::ReadWrite: return "readwrite";
    case CacheMode::ReadOnly: return "readonly";
    case CacheMode::Strict: return "strict";
    case CacheMode::Off: return "off";
  }
  return "?";
}

}  // namespace kjit::cache
