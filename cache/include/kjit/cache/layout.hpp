// Where things live in a cache root, and what a file name found there is.
//   <root>/v1/<target>/<key[0:2]>/<key>.kjit                       an entry
//   <root>/v1/<target>/<key[0:2]>/<key>.kjit.tmp.<pid>.<random>    an entry being written
//   <root>/v1/<target>/<key[0:2]>/<key>.lock                       the per-key compile lock
//   <root>/v1/header-index.json                                      the header index (header_index.hpp)
#pragma once

#include <filesystem>
#include <string>

#include "kjit/cache/cache_key.hpp"

namespace kjit::cache::layout {

inline constexpr const char* kVersionDir = "v1";
inline constexpr const char* kEntrySuffix = ".kjit";
inline constexpr const char* kTempInfix = ".kjit.tmp.";
inline constexpr const char* kLockSuffix = ".lock";

// Throws kjit::ValueError unless `target` is usable as one directory name (letters, digits, '_',
// '-', '.', at most 64 characters, not "." or ".."), e.g. "sm_90a" or "compute_90".
void check_target(const std::string& target);

std::filesystem::path entry_dir(const std::filesystem::path& root, const CacheKey& key, const std::string& target);
std::filesystem::path entry_path(const std::filesystem::path& root, const CacheKey& key, const std::string& target);
std::filesystem::path lock_path(const std::filesystem::path& root, const CacheKey& key, const std::string& target);

std::filesystem::path header_index_path(const std::filesystem::path& root);

enum class FileKind { Entry, Temp, Lock, Other };

struct FileName {
  FileKind kind = FileKind::Other;
  std::string key;  // the name's key part (not necessarily valid hex)
  long pid = 0;     // Temp: the writer's pid (0 when unreadable)
};
FileName classify(const std::string& filename);

// "<key>.kjit.tmp.<pid>.<16 random hex digits>"
std::string temp_name(const std::string& entry_filename);
// Whether `name` is a temp file of `final_filename` (what temp_name(final_filename) makes).
bool is_temp_of(const std::string& name, const std::string& final_filename);

// Whether `p` names something inside the folder it is resolved against: not empty, not absolute, no ".."
// part (a lock's entry paths, include names, a file under a layer root).
bool stays_inside(const std::filesystem::path& p);

}  // namespace kjit::cache::layout
