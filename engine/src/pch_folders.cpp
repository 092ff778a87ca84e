#include "kjit/pch_folders.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <mutex>

#include "kjit/cache/unique_fd.hpp"
#include "kjit/log.hpp"

namespace kjit {
namespace fs = std::filesystem;

namespace {

constexpr const char* kRootPrefix = "kjit-pch-";
constexpr const char* kLockName = "owner.lock";

struct State {
  std::mutex mu;
  pid_t owner = 0;                   // the process whose root `root` is (a forked child makes its own)
  std::string root;                  // "" until made, or when it could not be made
  int lock_fd = -1;                  // owner.lock, flocked for the process's life
  std::vector<std::string> domains;  // folders under root, least recently used first
};

State& state() {
  static State* s = new State();  // never destroyed: used from an exit handler
  return *s;
}

bool is_root_name(const std::string& name) {
  return name.size() > std::strlen(kRootPrefix) && name.rfind(kRootPrefix, 0) == 0;
}

bool is_domain_name(const std::string& d) {
  if (d.empty() || d.size() > 128) return false;
  for (char c : d)
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  return true;
}

std::uint64_t bytes_under(const fs::path& dir) {
  std::uint64_t n = 0;
  std::error_code ec;
  for (fs::recursive_directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    struct stat st{};
    if (::lstat(it->path().c_str(), &st) == 0 && S_ISREG(st.st_mode)) n += static_cast<std::uint64_t>(st.st_size);
  }
  return n;
}

// A root made now: mkdtemp (0700), then owner.lock made under a temporary name, flocked, and renamed, so
// that a sweeping process never finds the lock file unlocked while its process lives.
bool make_root(State& s, std::string& why) {
  const fs::path parent = pch_parent_dir();
  std::string pattern = (parent / (std::string(kRootPrefix) + "XXXXXX")).string();
  if (!::mkdtemp(pattern.data())) {
    why = "cannot make a folder in " + parent.string() + ": " + std::strerror(errno);
    return false;
  }
  const std::string staged = pattern + "/" + kLockName + ".new";
  const int fd = ::open(staged.c_str(), O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0 || ::flock(fd, LOCK_EX | LOCK_NB) != 0 ||
      ::rename(staged.c_str(), (pattern + "/" + kLockName).c_str()) != 0) {
    why = "cannot make its lock file " + staged + ": " + std::strerror(errno);
    if (fd >= 0) ::close(fd);
    std::error_code ec;
    fs::remove_all(pattern, ec);
    return false;
  }
  s.root = pattern;
  s.lock_fd = fd;
  return true;
}

void remove_own_root_at_exit() {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  if (s.owner != ::getpid() || s.root.empty()) return;
  std::error_code ec;
  fs::remove_all(s.root, ec);
  s.root.clear();
}

}  // namespace

fs::path pch_parent_dir() {
  const char* tmp = std::getenv("TMPDIR");
  return fs::path(tmp && *tmp == '/' ? tmp : "/tmp");
}

PchFolders& PchFolders::process() {
  static PchFolders* p = new PchFolders();
  return *p;
}

std::string PchFolders::root() const {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  return s.owner == ::getpid() ? s.root : std::string();
}

std::string PchFolders::folder_for(const std::string& domain) {
  if (!is_domain_name(domain)) return {};
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  struct stat root_st{};
  if (s.owner == ::getpid() && !s.root.empty() && ::lstat(s.root.c_str(), &root_st) != 0) {
    // Removed under this process (a /tmp cleaner, a user's rm): a new one, as at first use.
    s.owner = 0;
  }
  if (s.owner != ::getpid()) {
    // First use, or a forked child: a root of its own (the parent's stays the parent's).
    if (s.lock_fd >= 0) ::close(s.lock_fd);
    s.lock_fd = -1;
    s.root.clear();
    s.domains.clear();
    s.owner = ::getpid();
    (void)remove_abandoned_pch_roots(pch_parent_dir());
    std::string why;
    if (!make_root(s, why)) {
      log::warn_once("pch-root", "NVRTC's precompiled headers are off in this process: " + why +
                                     ". Set TMPDIR to a writable folder with room for them (about 200 MB), or "
                                     "KJIT_PCH=off to silence this.");
      return {};
    }
    static bool registered = false;
    if (!registered) {
      registered = true;
      std::atexit(remove_own_root_at_exit);
    }
  }
  if (s.root.empty()) return {};
  const fs::path dir = fs::path(s.root) / domain;
  auto it = std::find(s.domains.begin(), s.domains.end(), domain);
  if (it != s.domains.end()) s.domains.erase(it);
  if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) return {};
  s.domains.push_back(domain);
  while (s.domains.size() > kKeptDomains) {
    std::error_code ec;
    fs::remove_all(fs::path(s.root) / s.domains.front(), ec);
    s.domains.erase(s.domains.begin());
  }
  return dir.string();
}

void PchFolders::drop(const std::string& domain) {
  if (!is_domain_name(domain)) return;
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  if (s.owner != ::getpid() || s.root.empty()) return;
  std::error_code ec;
  fs::remove_all(fs::path(s.root) / domain, ec);
  s.domains.erase(std::remove(s.domains.begin(), s.domains.end(), domain), s.domains.end());
}

std::vector<RemovedPchRoot> remove_abandoned_pch_roots(const fs::path& parent, double legacy_age_s) {
  std::vector<RemovedPchRoot> out;
  std::error_code ec;
  for (fs::directory_iterator it(parent, ec), end; !ec && it != end; it.increment(ec)) {
    const fs::path root = it->path();
    if (!is_root_name(root.filename().string())) continue;
    struct stat st{};
    if (::lstat(root.c_str(), &st) != 0 || !S_ISDIR(st.st_mode) || st.st_uid != ::geteuid()) continue;
    const cache::UniqueFd fd(::open((root / kLockName).c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC));
    if (!fd) {
      // No lock: a root being made right now, or one of a kjit from before the lock: gone once old.
      if (errno != ENOENT || std::difftime(std::time(nullptr), st.st_mtime) < legacy_age_s) continue;
    } else if (::flock(fd.get(), LOCK_EX | LOCK_NB) != 0) {
      continue;  // its process lives
    }
    const std::uint64_t bytes = bytes_under(root);
    std::error_code rm;
    fs::remove_all(root, rm);
    if (!rm) out.push_back({root, bytes});
  }
  return out;
}

}  // namespace kjit
