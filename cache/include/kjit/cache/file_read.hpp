// Reading one cache file (an entry, a layer's kjit.lock) in a single open + fstat + read, keeping the
// descriptor for the caller (to refresh the mtime of a hit, or to check the inode before removing a
// damaged file).
//
// Never blocks on something that is not a regular file: the open is non-blocking (a FIFO planted at
// an entry's path or as a layer's kjit.lock would otherwise block the open until a writer comes, i.e.
// forever), and anything but a regular file is refused after the fstat, before any read.
#pragma once

#include <sys/stat.h>

#include <cstdint>
#include <filesystem>
#include <string>

#include "kjit/cache/unique_fd.hpp"

namespace kjit::cache {

struct FileRead {
  UniqueFd fd;       // open (read-only) when the file could be opened
  struct stat st{};  // fstat of fd
  std::string bytes;
  bool absent = false;  // ENOENT / ENOTDIR: simply not there
  bool denied = false;  // EACCES / EPERM: there (or maybe there), but not readable by this user
  std::string error;    // non-empty when it could not be read (absent or not)
  bool ok() const noexcept { return error.empty(); }
};

// Whether the last component of the path may be a symbolic link. Entries and locks of a layer may be
// (a layer assembled from links is read like any other: trust is judged on what was read); a caller
// that must not leave a folder through a link refuses them.
enum class Links { Follow, Refuse };

// Files larger than `max_size` are not read (error says so): no entry is that big.
FileRead read_regular_file(const std::filesystem::path& path, std::uint64_t max_size, Links links = Links::Follow);

}  // namespace kjit::cache
