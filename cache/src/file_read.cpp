#include "kjit/cache/file_read.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>

#include "kjit/cache/posix_error.hpp"

namespace kjit::cache {

namespace {

// What a non-regular file is, for the message.
const char* file_type_text(mode_t mode) {
  if (S_ISFIFO(mode)) return "a FIFO (named pipe)";
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

}  // namespace

FileRead read_regular_file(const std::filesystem::path& path, std::uint64_t max_size, Links links) {
  FileRead r;
  // O_NONBLOCK: opening a FIFO for reading blocks until a writer opens it, and a device may block
  // too; nothing but a regular file is read below, so no open may wait.
  int flags = O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK;
  if (links == Links::Refuse) flags |= O_NOFOLLOW;
  int fd;
  do fd = ::open(path.c_str(), flags);
  while (fd < 0 && errno == EINTR);
  if (fd < 0) {
    const int err = errno;
    r.absent = err == ENOENT || err == ENOTDIR;
    r.denied = err == EACCES || err == EPERM;
    if (r.denied)
      r.error = "not readable by you (uid " + std::to_string(::geteuid()) + "): " + errno_text(err);
    else if (err == ELOOP && links == Links::Refuse)
      r.error = "it is a symbolic link, which is not followed here";
    else
      r.error = "cannot open: " + errno_text(err);
    return r;
  }
  r.fd.reset(fd);
  if (::fstat(fd, &r.st) != 0) {
    r.error = "cannot stat: " + errno_text(errno);
    return r;
  }
  if (!S_ISREG(r.st.st_mode)) {
    r.error = std::string("not a regular file: it is ") + file_type_text(r.st.st_mode);
    return r;
  }
  // A regular file never blocks; clear the flag anyway so that reads behave as ordinary reads.
  const int fl = ::fcntl(fd, F_GETFL);
  if (fl < 0 || ::fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) != 0) {
    r.error = "cannot set the file to blocking reads: " + errno_text(errno);
    return r;
  }
  const auto size = static_cast<std::uint64_t>(r.st.st_size);
  if (size > max_size) {
    r.error = "file is " + std::to_string(size) + " bytes, larger than the " + std::to_string(max_size) +
              " bytes that such a file can be";
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
