#include "kjit/cache/trust.hpp"

#include <cerrno>
#include <cstdio>

#include "kjit/cache/export_lock_file.hpp"
#include "kjit/cache/file_read.hpp"
#include "kjit/cache/layout.hpp"
#include "kjit/cache/posix_error.hpp"
#include "kjit/cache/sha256.hpp"
#include "kjit/error.hpp"

namespace kjit::cache {
namespace fs = std::filesystem;

namespace {

std::string mode_text(mode_t mode) {
  char buf[8];
  std::snprintf(buf, sizeof buf, "%04o", static_cast<unsigned>(mode & 07777));
  return buf;
}

std::string writable_by_others(const fs::path& path, const struct stat& st) {
  const bool group = st.st_mode & S_IWGRP, others = st.st_mode & S_IWOTH;
  if (!group && !others) return {};
  return path.string() + " is writable by " +
         (group && others ? "group and others"
          : group         ? "group"
                          : "others") +
         " (mode " + mode_text(st.st_mode) + ")";
}

}  // namespace

std::string ownership_problem(const fs::path& path, const struct stat& st, uid_t uid) {
  if (st.st_uid != uid)
    return path.string() + " belongs to uid " + std::to_string(st.st_uid) + ", not to you (uid " + std::to_string(uid) +
           ")";
  return writable_by_others(path, st);
}

std::string owned_path_problem(const fs::path& root, const fs::path& file, const struct stat& file_st, uid_t uid) {
  std::string why = ownership_problem(file, file_st, uid);
  if (!why.empty()) return why;
  const fs::path rel = file.lexically_relative(root);
  if (!layout::stays_inside(rel)) return file.string() + " is not under " + root.string();
  fs::path dir = root;
  auto check_dir = [&](const fs::path& d) {
    struct stat st{};
    if (::stat(d.c_str(), &st) != 0) return "cannot stat " + d.string() + ": " + errno_text(errno);
    return ownership_problem(d, st, uid);
  };
  why = check_dir(dir);
  for (auto it = rel.begin(); why.empty() && it != rel.end(); ++it) {
    if (std::next(it) == rel.end()) break;  // the file itself: checked above (fstat of what was read)
    dir /= *it;
    why = check_dir(dir);
  }
  return why;
}

namespace {

// Who may vouch for a layer: the user or root, and nobody else able to rewrite it.
std::string guardian_problem(const fs::path& path, const struct stat& st, uid_t uid) {
  if (st.st_uid != uid && st.st_uid != 0)
    return path.string() + " belongs to uid " + std::to_string(st.st_uid) + ", neither you (uid " +
           std::to_string(uid) + ") nor root";
  return writable_by_others(path, st);
}

}  // namespace

LayerLock LayerLock::read(const fs::path& layer_root, uid_t uid) {
  LayerLock lock;
  const fs::path file = layer_root / kLockFileName;
  // One open: the bytes parsed are those of the file whose owner and mode are checked.
  FileRead r = read_regular_file(file, 1ull << 30);
  if (r.absent) {
    lock.problem_ = "the layer has no " + std::string(kLockFileName);
    return lock;
  }
  if (r.fd) {
    lock.absent_ = false;
    lock.dev_ = r.st.st_dev;
    lock.ino_ = r.st.st_ino;
    lock.size_ = r.st.st_size;
    lock.mtime_ = r.st.st_mtim;
  }
  if (!r.ok()) {
    lock.problem_ = "cannot read " + file.string() + ": " + r.error;
    return lock;
  }
  struct stat root_st{};
  if (::stat(layer_root.c_str(), &root_st) != 0) {
    lock.problem_ = "cannot stat " + layer_root.string() + ": " + errno_text(errno);
    return lock;
  }
  for (const auto& [path, st] : {std::pair{file, r.st}, std::pair{layer_root, root_st}}) {
    std::string why = guardian_problem(path, st, uid);
    if (!why.empty()) {
      lock.problem_ = "its lock cannot be trusted: " + why;
      return lock;
    }
  }
  try {
    for (auto& f : parse_lock(r.bytes, file.string())) lock.sha256_by_path_[f.path] = std::move(f.sha256);
  } catch (const Error& e) {
    lock.problem_ = e.what();
  }
  return lock;
}

bool LayerLock::current(const fs::path& layer_root) const {
  struct stat st{};
  if (::stat((layer_root / kLockFileName).c_str(), &st) != 0) return absent_ && errno == ENOENT;
  return !absent_ && st.st_dev == dev_ && st.st_ino == ino_ && st.st_size == size_ &&
         st.st_mtim.tv_sec == mtime_.tv_sec && st.st_mtim.tv_nsec == mtime_.tv_nsec;
}

std::string LayerLock::vouches_for(const std::string& relative, std::string_view bytes) const {
  if (!problem_.empty()) return problem_;
  auto it = sha256_by_path_.find(relative);
  if (it == sha256_by_path_.end()) return "the layer's " + std::string(kLockFileName) + " does not list " + relative;
  const std::string actual = to_hex(Sha256::of(bytes));
  if (actual != it->second)
    return "its SHA-256 " + actual + " is not the one the layer's " + std::string(kLockFileName) + " lists (" +
           it->second + ")";
  return {};
}

}  // namespace kjit::cache
