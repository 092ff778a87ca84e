// Trust: which cache files kjit may load, and which directory it may write to.
//
// A cached kernel binary runs with the rights of the process that loads it, so the cache loads only
// what the running (effective) user wrote, or what an explicitly configured read-only layer vouches for:
//  - a file is *owned* when it and every directory from its layer root down to it belong to the
//    effective user and none of them is writable by group or others;
//  - the writable root must be owned: otherwise nothing is written (memory only, warned once);
//  - an entry that is not owned is loaded only from a read-only layer (a KJIT_CACHE_PATH layer, or the
//    root in readonly / strict mode) whose kjit.lock (written by `kjit export`) lists it with the
//    SHA-256 of the very bytes read; the lock file and the layer root must belong to the user or to
//    root and not be writable by group or others (whoever could rewrite them could vouch for anything).
// The directories above a layer root are not checked (as ssh's StrictModes checks from $HOME down).
#pragma once

#include <sys/stat.h>
#include <sys/types.h>

#include <filesystem>
#include <map>
#include <string>
#include <string_view>

namespace kjit::cache {

// "" when `st` (the stat of `path`) belongs to `uid` and is not writable by group or others;
// otherwise why not, e.g. "/c/v1 is writable by group (mode 0770)".
std::string ownership_problem(const std::filesystem::path& path, const struct stat& st, uid_t uid);

// Checks `file` (whose fstat is `file_st`) and each directory from `root` down to `file`'s parent.
// "" when all are owned (see above); otherwise the first problem found.
std::string owned_path_problem(const std::filesystem::path& root, const std::filesystem::path& file,
                               const struct stat& file_st, uid_t uid);

// The kjit.lock of a read-only layer, as read at one time: the entries it vouches for.
class LayerLock {
 public:
  // Never throws: a missing, unreadable, malformed or unprotected lock vouches for nothing and
  // problem() says why. `uid`: the effective user (the lock must be theirs or root's).
  static LayerLock read(const std::filesystem::path& layer_root, uid_t uid);
  // Whether the layer's lock file is still the one read (or still absent): same device, inode, size
  // and modification time. A re-exported layer is read again.
  bool current(const std::filesystem::path& layer_root) const;

  // "" when the lock lists `relative` (a generic path under the layer root) with the SHA-256 of
  // `bytes`; otherwise why it does not vouch for them.
  std::string vouches_for(const std::string& relative, std::string_view bytes) const;
  const std::string& problem() const noexcept { return problem_; }

 private:
  std::map<std::string, std::string> sha256_by_path_;
  std::string problem_;
  bool absent_ = true;  // no lock file when read; otherwise its identity:
  dev_t dev_ = 0;
  ino_t ino_ = 0;
  off_t size_ = 0;
  struct timespec mtime_{};
};

}  // namespace kjit::cache
