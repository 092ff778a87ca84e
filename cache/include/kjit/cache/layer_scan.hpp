// Listing the files of one cache layer (for list, prune and clear; never on the load/store path).
#pragma once

#include <sys/stat.h>

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "kjit/cache/layout.hpp"

namespace kjit::cache {

struct ScannedFile {
  std::filesystem::path path;
  layout::FileName name;  // kind, key part, temp file pid
  std::string target;     // the <target> directory it is in
  std::string shard;      // the <key[0:2]> directory it is in
  std::uint64_t size = 0;
  struct timespec mtime{};
};

// Every regular file (symbolic links are not followed) at depth <root>/v1/<target>/<shard>/<file>.
// Missing or unreadable directories contribute nothing. Sorted by path.
std::vector<ScannedFile> scan_layer(const std::filesystem::path& root);

// Lists the directories <root>/v1/<target>/<shard> (for removing empty ones after clear).
std::vector<std::filesystem::path> shard_dirs(const std::filesystem::path& root);

}  // namespace kjit::cache
