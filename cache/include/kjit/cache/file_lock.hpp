// FileLock: the per-key advisory lock that makes N processes (or threads) missing the same key
// compile it once.
//
// Protocol (no lock file is ever waited on by polling its existence):
//  - acquire: open(O_CREAT, 0600) the lock file, poll flock(LOCK_EX|LOCK_NB) with short sleeps up to
//    the timeout; once locked, check that the path still names the locked inode (fstat vs stat),
//    else the holder before us has unlinked it: close and start over on the new file.
//  - release: unlink the file while still holding the lock, then close (which unlocks).
// A process that dies while holding the lock releases it (the kernel drops flocks on close); its
// lock file stays until the next holder or `prune` removes it.
#pragma once

#include <filesystem>
#include <string>

#include "kjit/cache/unique_fd.hpp"

namespace kjit::cache {

class FileLock {
 public:
  FileLock() = default;
  ~FileLock() { release(); }
  FileLock(FileLock&&) noexcept = default;
  FileLock& operator=(FileLock&& o) noexcept {
    if (this != &o) {
      release();
      path_ = std::move(o.path_);
      fd_ = std::move(o.fd_);
    }
    return *this;
  }
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;

  // Waits up to `timeout_s` seconds. Throws kjit::Error on timeout (naming the lock file, the wait
  // and KJIT_LOCK_TIMEOUT). When the lock file cannot be created or locked at all (permissions,
  // file system without flock), returns an unlocked FileLock and sets `*error`.
  static FileLock acquire(const std::filesystem::path& path, double timeout_s, std::string* error);

  // One non-blocking attempt on an existing lock file (never creates one); unlocked when it is
  // held by someone else or is not there. Used to clean up abandoned lock files.
  static FileLock try_acquire_existing(const std::filesystem::path& path);

  bool locked() const noexcept { return static_cast<bool>(fd_); }
  const std::filesystem::path& path() const noexcept { return path_; }

  // Unlinks the lock file while still holding it, then unlocks. Does nothing when not locked.
  void release() noexcept;

 private:
  FileLock(std::filesystem::path p, UniqueFd fd) : path_(std::move(p)), fd_(std::move(fd)) {}
  std::filesystem::path path_;
  UniqueFd fd_;
};

}  // namespace kjit::cache
