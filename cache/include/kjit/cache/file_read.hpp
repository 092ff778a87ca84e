// Reading one entry file in a single open + fstat + read, keeping the descriptor for the caller
// (to refresh the mtime of a hit, or to check the inode before removing a damaged file).
#pragma once

#include <sys/stat.h>

#include <cstdint>
#include <filesystem>
#include <string>

#include "kjit/cache/unique_fd.hpp"

namespace kjit::cache {

struct FileRead {
  UniqueFd fd;           // open (read-only) when the file could be opened
  struct stat st {};     // fstat of fd
  std::string bytes;
  bool absent = false;   // ENOENT / ENOTDIR: simply not there
  std::string error;     // non-empty when it could not be read (absent or not)
  bool ok() const noexcept { return error.empty(); }
};

// Files larger than `max_size` are not read (error says so): no entry is that big.
FileRead read_regular_file(const std::filesystem::path& path, std::uint64_t max_size);

}  // namespace kjit::cache
