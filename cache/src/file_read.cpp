#include "kjit/cache/file_read.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>

#include "kjit/cache/posix_error.hpp"

namespace kjit::cache {

FileRead read_regular_file(const std::filesystem::path& path, std::uint64_t max_size) {
  FileRead r;
  int fd;
  do fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY);
  while (fd < 0 && errno == EINTR);
  if (fd < 0) {
    int err = errno;
    r.absent = err == ENOENT || err == ENOTDIR;
    r.error = "cannot open: " + errno_text(err);
    return r;
  }
  r.fd.reset(fd);
  if (::fstat(fd, &r.st) != 0) {
    r.error = "cannot stat: " + errno_text(errno);
    return r;
  }
  if (!S_ISREG(r.st.st_mode)) {
    r.error = "not a regular file";
    return r;
  }
  const auto size = static_cast<std::uint64_t>(r.st.st_size);
  if (size > max_size) {
    r.error = "file is " + std::to_string(size) + " bytes, more than any kjit entry can be (" +
              std::to_string(max_size) + ")";
    return r;
  }
  r.bytes.resize(size);
  std::size_t done = 0;
  while (done < size) {
    ssize_t n = ::read(fd, &r.bytes[done], size - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      r.error = "read failed: " + errno_text(errno);
      return r;
    }
    if (n == 0) break;
    done += static_cast<std::size_t>(n);
  }
  // Published entries are never modified in place (they are replaced by rename), so one read of
  // st_size bytes is the whole file; a short read means it was truncated under us.
  r.bytes.resize(done);
  return r;
}

}  // namespace kjit::cache
