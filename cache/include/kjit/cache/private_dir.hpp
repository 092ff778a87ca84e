// Creating the cache's directories: owner-only (0700) whatever the umask.
#pragma once

#include <filesystem>
#include <string>

namespace kjit::cache {

// Creates `dir` and its missing parents. Each directory this call creates gets mode 0700 (chmod after
// mkdir, so the umask does not matter); directories that already exist are left as they are.
// Returns an empty string on success, else what failed, e.g. "cannot create /a/b: Permission denied".
std::string make_private_dirs(const std::filesystem::path& dir);

}  // namespace kjit::cache
