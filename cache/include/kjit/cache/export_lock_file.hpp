// The lock file of an exported cache (kjit.lock, which `kjit export` writes at the root of the folder it
// fills): its name, its format, and reading and writing it. What an export lists in it and the check of
// a folder against it are export_lock.hpp's; the trust of read-only layers (trust.hpp) reads it too.
//
//   {"kjit_lock": 1, "entries": [{"path": "v1/sm_90/ab/<key>.kjit", "sha256": "<hex>"}, ...]}
#pragma once

#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

namespace kjit::cache {

inline constexpr int kLockVersion = 1;
inline constexpr const char* kLockFileName = "kjit.lock";

struct LockedFile {
  std::string path;    // relative to the cache root, '/'-separated
  std::string sha256;  // hex
};

// Writes a lock listing `locked` to `lock_file` atomically. Throws kjit::Error when it cannot.
void write_lock(const std::filesystem::path& lock_file, const std::vector<LockedFile>& locked);
// Throws kjit::ValueError naming the file and what is wrong.
std::vector<LockedFile> read_lock(const std::filesystem::path& lock_file);
// The same for the lock's text; `origin` names it in errors. Listed paths must stay under the root.
std::vector<LockedFile> parse_lock(std::string_view text, const std::string& origin);

}  // namespace kjit::cache
