#include "kjit/cache/file_lock.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <thread>

#include "kjit/cache/posix_error.hpp"
#include "kjit/error.hpp"

namespace kjit::cache {
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

// True when `path` currently names the file open as `fd`.
bool still_names(const fs::path& path, int fd) {
  struct stat by_fd{}, by_path{};
  if (::fstat(fd, &by_fd) != 0 || ::stat(path.c_str(), &by_path) != 0) return false;
  return by_fd.st_dev == by_path.st_dev && by_fd.st_ino == by_path.st_ino;
}

int flock_nb(int fd) {
  int rc;
  do rc = ::flock(fd, LOCK_EX | LOCK_NB);
  while (rc != 0 && errno == EINTR);
  return rc;
}

std::string seconds_text(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3g s", s);
  return buf;
}

}  // namespace

FileLock FileLock::acquire(const fs::path& path, double timeout_s, std::string* error) {
  const auto start = Clock::now();
  const auto deadline = start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(timeout_s));
  auto pause = std::chrono::milliseconds(1);
  for (;;) {
    int raw;
    do raw = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOCTTY, 0600);
    while (raw < 0 && errno == EINTR);
    if (raw < 0) {
      if (error) *error = "cannot open the lock file " + path.string() + ": " + errno_text(errno);
      return {};
    }
    UniqueFd fd(raw);

    while (flock_nb(fd.get()) != 0) {
      if (errno != EWOULDBLOCK) {
        if (error) *error = "cannot lock " + path.string() + ": " + errno_text(errno);
        return {};
      }
      if (Clock::now() >= deadline) {
        const double waited = std::chrono::duration<double>(Clock::now() - start).count();
        throw Error("timed out after " + seconds_text(waited) + " waiting for the kjit cache lock " + path.string() +
                    ": another process or thread is compiling the same kernel and has not "
                    "finished. A holder that died releases the lock by itself; if one is stuck, "
                    "stop it. To wait longer, raise KJIT_LOCK_TIMEOUT (this wait allowed " +
                    seconds_text(timeout_s) + ").");
      }
      std::this_thread::sleep_for(std::min<Clock::duration>(pause, deadline - Clock::now()));
      pause = std::min(pause * 2, std::chrono::milliseconds(25));
    }
    // The previous holder unlinks the file before releasing: if ours is no longer the one at
    // `path`, locking it proves nothing. Start over on the current file.
    if (still_names(path, fd.get())) return FileLock(path, std::move(fd));
  }
}

FileLock FileLock::try_acquire_existing(const fs::path& path) {
  UniqueFd fd(::open(path.c_str(), O_RDWR | O_CLOEXEC | O_NOCTTY | O_NOFOLLOW));
  if (!fd || flock_nb(fd.get()) != 0 || !still_names(path, fd.get())) return {};
  return FileLock(path, std::move(fd));
}

void FileLock::release() noexcept {
  if (!fd_) return;
  ::unlink(path_.c_str());  // while still holding: waiters on this inode will see it is gone
  fd_.reset();
}

}  // namespace kjit::cache
