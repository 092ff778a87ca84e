#include "kjit/cache/export_lock.hpp"

#include <sys/stat.h>

#include <algorithm>
#include <set>

#include "kjit/cache/choice_store.hpp"
#include "kjit/cache/entry_check.hpp"
#include "kjit/cache/file_read.hpp"
#include "kjit/cache/header_index.hpp"
#include "kjit/cache/layer_scan.hpp"
#include "kjit/cache/layout.hpp"
#include "kjit/cache/sha256.hpp"
#include "kjit/error.hpp"

namespace kjit::cache {
namespace {

namespace fs = std::filesystem;

std::string relative_text(const fs::path& file, const fs::path& root) {
  return file.lexically_relative(root).generic_string();
}

// Why the entry bytes at `rel` (relative to the root) are not a valid entry filed where they lie;
// empty when they are.
std::string entry_problem(const std::string& rel, const std::string& bytes) {
  const fs::path path(rel);
  if (path.extension() == kChoiceSuffix) return choice_file_problem(rel, bytes);  // a tuned choice (choice_store.hpp)
  // The header index: its learned include directives key the templates that learned them (header_index.hpp).
  if (path == layout::header_index_path(fs::path()).relative_path()) return HeaderIndex::file_problem(bytes);
  const layout::FileName name = layout::classify(path.filename().string());
  if (name.kind != layout::FileKind::Entry) return "not a cache entry file name (<key>.kjit)";
  const std::string target = path.parent_path().parent_path().filename().string();
  try {
    const DecodeResult d = check_entry_bytes(bytes, CacheKey::from_hex(name.key), target);
    return d.entry ? std::string() : d.error;
  } catch (const Error& e) {
    return e.what();
  }
}

// The first symbolic link on the way from `root` to root/rel (rel's own components only: the root is
// the caller's to name), relative to the root; empty when there is none. lstat, so nothing is followed.
std::string link_on_the_way(const fs::path& root, const std::string& rel) {
  fs::path at = root;
  fs::path walked;
  for (const auto& part : fs::path(rel)) {
    at /= part;
    walked /= part;
    struct stat st{};
    if (::lstat(at.c_str(), &st) != 0) return {};  // not there: reading it says so
    if (S_ISLNK(st.st_mode)) return walked.generic_string();
  }
  return {};
}

}  // namespace

std::vector<LockedFile> lock_entries(const fs::path& root) {
  std::vector<fs::path> files;
  for (const ScannedFile& f : scan_layer(root))
    if (f.name.kind == layout::FileKind::Entry) files.push_back(f.path);
  for (const fs::path& f : choice_files(root)) files.push_back(f);
  std::error_code ec;
  if (fs::is_regular_file(layout::header_index_path(root), ec)) files.push_back(layout::header_index_path(root));
  return lock_entries(root, files);
}

std::vector<LockedFile> lock_entries(const fs::path& root, const std::vector<fs::path>& files) {
  std::vector<LockedFile> out;
  for (const fs::path& file : files) {
    const std::string rel = relative_text(file, root);
    if (!layout::stays_inside(rel)) throw Error("cannot lock " + file.string() + ": it is not under " + root.string());
    FileRead r = read_regular_file(file, kMaxEntryFileBytes);
    if (!r.ok()) throw Error("cannot read " + file.string() + " to lock it: " + r.error);
    // Only a valid entry is vouched for: the lock is what every user of the layer will trust.
    const std::string problem = entry_problem(rel, r.bytes);
    if (!problem.empty()) throw Error("cannot lock " + file.string() + ": it is not a valid entry: " + problem);
    out.push_back({rel, to_hex(Sha256::of(r.bytes))});
  }
  std::sort(out.begin(), out.end(), [](const LockedFile& a, const LockedFile& b) { return a.path < b.path; });
  return out;
}

void write_lock(const fs::path& root, const fs::path& lock_file) { write_lock(lock_file, lock_entries(root)); }

std::vector<std::string> verify_lock(const fs::path& root, const std::vector<LockedFile>& locked) {
  std::vector<std::string> problems;
  std::set<std::string> expected, links;
  const std::string not_followed =
      ": a symbolic link, not followed (an export holds only regular files and directories; a link could "
      "make the check read, and vouch for, a file outside " +
      root.string() + ")";
  for (const auto& f : locked) expected.insert(f.path);
  for (const auto& f : locked) {
    // A link on the way is reported, never read through: what it reaches is outside the export.
    std::string link = link_on_the_way(root, f.path);
    if (!link.empty()) {
      if (links.insert(link).second) problems.push_back("symbolic link: " + link + not_followed);
      problems.push_back("not verified: " + f.path + ": its path goes through the symbolic link " + link);
      continue;
    }
    const fs::path file = root / f.path;
    FileRead r = read_regular_file(file, kMaxEntryFileBytes);
    if (!r.ok()) {
      problems.push_back(std::string(r.absent ? "missing: " : "unreadable: ") + f.path + ": " + r.error);
      continue;
    }
    // A link swapped in between the walk and the open: the file opened is not the one that lies there.
    struct stat there{};
    link = link_on_the_way(root, f.path);
    if (!link.empty() || ::lstat(file.c_str(), &there) != 0 || there.st_dev != r.st.st_dev ||
        there.st_ino != r.st.st_ino) {
      problems.push_back("not verified: " + f.path + ": it changed while being read (a symbolic link?)");
      continue;
    }
    const std::string actual = to_hex(Sha256::of(r.bytes));
    if (actual != f.sha256) {
      problems.push_back("modified: " + f.path + ": SHA-256 " + actual + ", the lock says " + f.sha256);
      continue;
    }
    const std::string problem = entry_problem(f.path, r.bytes);
    if (!problem.empty()) problems.push_back("invalid: " + f.path + ": " + problem);
  }
  for (const ScannedFile& f : scan_layer(root))
    if (f.name.kind == layout::FileKind::Entry && !expected.count(relative_text(f.path, root)))
      problems.push_back("unlisted: " + relative_text(f.path, root) + ": an entry the lock does not list");
  for (const fs::path& f : choice_files(root))
    if (!expected.count(relative_text(f, root)))
      problems.push_back("unlisted: " + relative_text(f, root) + ": a tuned choice the lock does not list");
  // Links anywhere else in the export (scan_layer skips them): reported, not followed.
  std::error_code ec;
  for (fs::recursive_directory_iterator it(root, ec), end; !ec && it != end; it.increment(ec)) {
    std::error_code sec;
    if (it->symlink_status(sec).type() != fs::file_type::symlink) continue;
    const std::string rel = relative_text(it->path(), root);
    if (links.insert(rel).second) problems.push_back("symbolic link: " + rel + not_followed);
  }
  return problems;
}

}  // namespace kjit::cache
