#include "kjit/cache/private_dir.hpp"

#include <sys/stat.h>

#include <cerrno>

#include "kjit/cache/posix_error.hpp"

namespace kjit::cache {
namespace fs = std::filesystem;

namespace {

std::string existing_dir_or_error(const fs::path& dir) {
  struct stat st{};
  if (::stat(dir.c_str(), &st) != 0) return "cannot create " + dir.string() + ": " + errno_text(errno);
  if (!S_ISDIR(st.st_mode)) return "cannot create " + dir.string() + ": it exists and is not a directory";
  return {};
}

// mkdir + chmod 0700; "" when the directory exists afterwards.
std::string make_one(const fs::path& dir, int* err_out) {
  *err_out = 0;
  if (::mkdir(dir.c_str(), 0700) == 0) {
    if (::chmod(dir.c_str(), 0700) != 0) return "cannot set mode 0700 on " + dir.string() + ": " + errno_text(errno);
    return {};
  }
  *err_out = errno;
  if (*err_out == EEXIST) return existing_dir_or_error(dir);  // possibly created concurrently
  return "cannot create " + dir.string() + ": " + errno_text(*err_out);
}

}  // namespace

std::string make_private_dirs(const fs::path& requested) {
  fs::path dir = requested;
  while (!dir.has_filename() && dir.has_parent_path() && dir != dir.root_path())
    dir = dir.parent_path();  // "a/b/" -> "a/b"
  if (dir.empty()) return "cannot create a directory with an empty path";

  int err = 0;
  std::string why = make_one(dir, &err);
  if (err != ENOENT) return why;
  const fs::path parent = dir.parent_path();
  if (parent.empty() || parent == dir) return why;
  std::string parent_why = make_private_dirs(parent);
  if (!parent_why.empty()) return parent_why;
  return make_one(dir, &err);
}

}  // namespace kjit::cache
