#include "kjit/cache/export_dir.hpp"

#include <sys/stat.h>

#include <cerrno>
#include <cstdio>
#include <string>
#include <system_error>
#include <vector>

#include "kjit/cache/posix_error.hpp"
#include "kjit/error.hpp"

namespace kjit::cache {
namespace fs = std::filesystem;

namespace {

constexpr mode_t kExportDirMode = 0755;
constexpr mode_t kExportFileMode = 0644;

void set_mode(const fs::path& path, mode_t mode) {
  if (::chmod(path.c_str(), mode) != 0) {
    const int err = errno;
    char octal[8];
    std::snprintf(octal, sizeof octal, "%04o", static_cast<unsigned>(mode));
    throw Error("cannot make the export readable by other users: chmod " + std::string(octal) + " " + path.string() +
                ": " + errno_text(err));
  }
}

}  // namespace

void prepare_export_dir(const fs::path& dir) {
  std::error_code ec;
  const fs::file_status st = fs::status(dir, ec);
  if (st.type() == fs::file_type::not_found) {
    fs::create_directories(dir, ec);
    if (ec) throw Error("cannot create the export directory " + dir.string() + ": " + ec.message());
    // Not what the umask gave: a group-writable root is one the cache refuses to write (trust.hpp).
    set_mode(dir, kExportDirMode);
    return;
  }
  if (ec) throw Error("cannot use " + dir.string() + " as the export directory: " + ec.message());
  if (st.type() != fs::file_type::directory)
    throw ValueError("--out " + dir.string() + " exists and is not a directory; give a new or empty directory");
  std::vector<std::string> names;
  std::size_t count = 0;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec))
    if (++count <= 3) names.push_back("'" + it->path().filename().string() + "'");
  if (ec) throw Error("cannot read the export directory " + dir.string() + ": " + ec.message());
  if (count == 0) {
    set_mode(dir, kExportDirMode);
    return;
  }
  std::string held;
  for (std::size_t i = 0; i < names.size(); ++i) held += (i ? ", " : "") + names[i];
  if (count > names.size()) held += " and " + std::to_string(count - names.size()) + " more";
  throw ValueError("--out " + dir.string() + " is not empty (it holds " + held +
                   "). `kjit export` writes a fresh cache whose kjit.lock vouches for every entry in it, so it "
                   "does not add to a directory holding files it did not write. Give a new or empty directory, "
                   "or remove this one first (e.g. rm -r " +
                   dir.string() + ")");
}

void make_export_readable(const fs::path& dir) {
  set_mode(dir, kExportDirMode);
  std::error_code ec;
  // The iterator does not descend into symbolic links to directories (no follow_directory_symlink).
  for (fs::recursive_directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const fs::file_type type = it->symlink_status(ec).type();
    if (ec) break;
    if (type == fs::file_type::directory)
      set_mode(it->path(), kExportDirMode);
    else if (type == fs::file_type::regular)
      set_mode(it->path(), kExportFileMode);
  }
  if (ec)
    throw Error("cannot make the export readable by other users: cannot list " + dir.string() + ": " + ec.message());
}

}  // namespace kjit::cache
