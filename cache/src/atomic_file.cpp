#include "kjit/cache/atomic_file.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>

#include "kjit/cache/layout.hpp"
#include "kjit/cache/posix_error.hpp"
#include "kjit/cache/unique_fd.hpp"

namespace kjit::cache {
namespace fs = std::filesystem;

std::string PublishFailure::message() const { return step + " " + path.string() + ": " + errno_text(err); }

namespace {

std::atomic<BeforeRenameHook> before_rename_hook{nullptr};

// Removes the temp file unless it was renamed into place.
class TempFileGuard {
 public:
  explicit TempFileGuard(fs::path p) : path_(std::move(p)) {}
  ~TempFileGuard() {
    if (armed_) ::unlink(path_.c_str());
  }
  void disarm() { armed_ = false; }
  TempFileGuard(const TempFileGuard&) = delete;
  TempFileGuard& operator=(const TempFileGuard&) = delete;

 private:
  fs::path path_;
  bool armed_ = true;
};

bool write_all(int fd, std::string_view bytes) {
  std::size_t done = 0;
  while (done < bytes.size()) {
    ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    if (n == 0) {
      errno = EIO;
      return false;
    }
    done += static_cast<std::size_t>(n);
  }
  return true;
}

}  // namespace

std::optional<PublishFailure> publish_atomically(const fs::path& final_path, std::string_view bytes) {
  const fs::path dir = final_path.parent_path();
  fs::path tmp;
  UniqueFd fd;
  UniqueFd held;  // a second descriptor of the temp file: its flock outlives the checked close of `fd`
  for (int attempt = 0; attempt < 8 && !fd; ++attempt) {
    tmp = dir / layout::temp_name(final_path.filename().string());
    int raw;
    do raw = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOCTTY, 0600);
    while (raw < 0 && errno == EINTR);
    if (raw < 0) {
      if (errno != EEXIST) return PublishFailure{"create", errno, tmp};
      continue;
    }
    fd.reset(raw);
    int rc;
    do rc = ::flock(raw, LOCK_EX | LOCK_NB);
    while (rc != 0 && errno == EINTR);
    // EWOULDBLOCK: a `clear` or `prune` took the new file's lock before we did, and will remove it:
    // start on another name. Any other error (a file system without flock): write unlocked, as before
    // locks existed; if the file is removed meanwhile, the rename fails with ENOENT and the caller
    // publishes again.
    if (rc != 0 && errno == EWOULDBLOCK) {
      fd.reset();
      continue;
    }
    held.reset(::fcntl(raw, F_DUPFD_CLOEXEC, 0));
  }
  if (!fd) return PublishFailure{"create", EEXIST, tmp};
  TempFileGuard guard(tmp);

  if (!write_all(fd.get(), bytes)) return PublishFailure{"write", errno, tmp};
  if (::fsync(fd.get()) != 0) return PublishFailure{"fsync", errno, tmp};
  if (fd.close_checked() != 0) return PublishFailure{"close", errno, tmp};
  if (BeforeRenameHook hook = before_rename_hook.load(std::memory_order_relaxed)) hook(tmp);
  if (::rename(tmp.c_str(), final_path.c_str()) != 0) return PublishFailure{"rename", errno, tmp};
  guard.disarm();
  held.reset();  // the temp file is the entry now: nothing left to protect

  // Make the rename itself durable. Some file systems refuse fsync on a directory; the entry is
  // complete and visible either way, so this is best effort.
  UniqueFd dfd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (dfd) ::fsync(dfd.get());
  return std::nullopt;
}

void set_before_rename_hook(BeforeRenameHook hook) noexcept {
  before_rename_hook.store(hook, std::memory_order_relaxed);
}

}  // namespace kjit::cache
