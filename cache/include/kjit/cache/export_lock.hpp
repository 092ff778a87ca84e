// The lock of an exported cache (`kjit export` writes DIR/kjit.lock, `kjit verify --dir --lock` checks
// it): every entry's path relative to the cache root and the SHA-256 of its file bytes; tuned choices
// (v1/choices/<name>.choice, choice_store.hpp) and the header index are listed as entries are. The file
// itself (its name and format) is export_lock_file.hpp's.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "kjit/cache/export_lock_file.hpp"

namespace kjit::cache {

// Every entry file (*.kjit) and tuned choice under `root`, sorted by path, with its hash.
std::vector<LockedFile> lock_entries(const std::filesystem::path& root);
// Just these entry (or tuned choice) files under `root` (what an export wrote), sorted by path, with their
// hashes. Each must read and decode as a valid entry (or choice) filed where it lies: else kjit::Error naming it.
std::vector<LockedFile> lock_entries(const std::filesystem::path& root,
                                     const std::vector<std::filesystem::path>& files);
// Writes the lock of every entry under `root` (lock_entries(root)) to `lock_file`.
void write_lock(const std::filesystem::path& root, const std::filesystem::path& lock_file);

// Checks `root` against the lock: every listed file exists with that hash and decodes as a valid entry
// filed where it lies; no entry is there that the lock does not list; no symbolic link is anywhere
// under `root` (links are reported, never followed: the check reads nothing outside `root`). Returns one
// line per problem (empty: all good).
std::vector<std::string> verify_lock(const std::filesystem::path& root, const std::vector<LockedFile>& locked);

}  // namespace kjit::cache
