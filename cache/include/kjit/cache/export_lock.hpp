// The lock file of an exported cache (`kjit export` writes DIR/kjit.lock, `kjit verify --dir --lock`
// checks it): every entry's path relative to the cache root and the SHA-256 of its file bytes; tuned
// choices (v1/choices/<name>.choice, choice_store.hpp) are listed as entries are.
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

// Every entry file (*.kjit) and tuned choice under `root`, sorted by path, with its hash.
std::vector<LockedFile> lock_entries(const std::filesystem::path& root);
// Just these entry (or tuned choice) files under `root` (what an export wrote), sorted by path, with their
// hashes. Each must read and decode as a valid entry (or choice) filed where it lies: else kjit::Error naming it.
std::vector<LockedFile> lock_entries(const std::filesystem::path& root,
                                     const std::vector<std::filesystem::path>& files);
// Writes a lock listing `locked` to `lock_file` atomically. Throws kjit::Error when it cannot.
void write_lock(const std::filesystem::path& lock_file, const std::vector<LockedFile>& locked);
// Writes the lock of every entry under `root` (lock_entries(root)) to `lock_file`.
void write_lock(const std::filesystem::path& root, const std::filesystem::path& lock_file);
// Throws kjit::ValueError naming the file and what is wrong.
std::vector<LockedFile> read_lock(const std::filesystem::path& lock_file);
// The same for the lock's text; `origin` names it in errors. Listed paths must stay under the root.
std::vector<LockedFile> parse_lock(std::string_view text, const std::string& origin);

// Checks `root` against the lock: every listed file exists with that hash and decodes as a valid entry
// filed where it lies; no entry is there that the lock does not list; no symbolic link is anywhere
// under `root` (links are reported, never followed: the check reads nothing outside `root`). Returns one
// line per problem (empty: all good).
std::vector<std::string> verify_lock(const std::filesystem::path& root, const std::vector<LockedFile>& locked);

}  // namespace kjit::cache
