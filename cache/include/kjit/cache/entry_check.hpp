// Full validation of an entry file found on disk: its encoding (entry.hpp) and its place in the
// layout (the key in the file name, the <target> directory).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "kjit/cache/entry.hpp"

namespace kjit::cache {

// No entry is larger than this (cubins are megabytes); bigger files are rejected without reading.
inline constexpr std::uint64_t kMaxEntryFileBytes = 1ull << 30;

// Decodes `bytes` expecting `key`, and checks that the entry is filed under `target_dir`
// (filed_target(meta) == target_dir).
DecodeResult check_entry_bytes(std::string_view bytes, const CacheKey& key, const std::string& target_dir);

}  // namespace kjit::cache
