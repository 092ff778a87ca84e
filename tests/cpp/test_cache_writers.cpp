// A live writer's temp file: `clear` and `prune` (in this process, another one, or another PID
// namespace such as a sidecar container on a shared volume) never remove it, because the writer holds
// an flock on it from creation to rename; and a temp file taken away anyway (by an older kjit, or by
// `rm`) makes the store write again, not give up the disk for the rest of the process.
//
// A writer child is paused between writing its temp file and renaming it (publish_atomically's test
// seam), while the parent (or a process in a new PID namespace) runs `clear` / `prune`.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <sched.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <ctime>

#include "cache_test_helpers.hpp"
#include "child_process.hpp"
#include "kjit/cache/atomic_file.hpp"
#include "kjit/cache/disk_cache.hpp"
#include "test_support.hpp"

using namespace kjit::cache;
using namespace kjit::testing;
namespace fs = std::filesystem;

namespace {

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// The pipes of a writer paused before its rename: it sends one byte on `paused`, then waits for one
// on `resume`. Globals: the seam is a plain function pointer.
int g_paused_fd = -1, g_resume_fd = -1;

void pause_before_rename(const fs::path&) {
  char b = 'p';
  (void)!::write(g_paused_fd, &b, 1);
  while (::read(g_resume_fd, &b, 1) < 0 && errno == EINTR) {
  }
}

// Waits up to `seconds` for one byte on `fd`; false on timeout or end of file.
bool wait_byte(int fd, int seconds) {
  struct pollfd p{fd, POLLIN, 0};
  if (::poll(&p, 1, seconds * 1000) != 1) return false;
  char b;
  return ::read(fd, &b, 1) == 1;
}

// Exit codes of the writer child: which of its checks failed.
constexpr int kFirstStoreFailed = 1, kNotWritableAfter = 2, kSecondStoreFailed = 4, kWarned = 8;

// A child that stores `first` (pausing before the rename until resumed), then `second`, in a cache
// at `root`; exits with the kFirst... bits of what went wrong (0: both stored, no warning).
class PausedWriter {
 public:
  PausedWriter(const fs::path& root, const Entry& first, const Entry& second) {
    int paused[2], resume[2];
    if (::pipe(paused) != 0 || ::pipe(resume) != 0) return;
    const pid_t pid = ::fork();
    if (pid == 0) {
      ::alarm(60);  // never outlive a failed test
      ::close(paused[0]);
      ::close(resume[1]);
      g_paused_fd = paused[1];
      g_resume_fd = resume[0];
      WarningCapture warnings;
      DiskCache c(cache_config(root));
      set_before_rename_hook(pause_before_rename);
      int code = 0;
      if (!c.store(first)) code |= kFirstStoreFailed;
      set_before_rename_hook(nullptr);
      if (!c.writable()) code |= kNotWritableAfter;
      if (!c.store(second)) code |= kSecondStoreFailed;
      if (warnings.count() != 0) code |= kWarned;
      ::_exit(code);
    }
    ::close(paused[1]);
    ::close(resume[0]);
    paused_fd_ = paused[0];
    resume_fd_ = resume[1];
    child_ = std::make_unique<ChildGuard>(pid);
  }
  ~PausedWriter() {
    if (paused_fd_ >= 0) ::close(paused_fd_);
    if (resume_fd_ >= 0) ::close(resume_fd_);
  }
  bool started() const { return child_ && child_->pid() > 0; }
  bool wait_paused() { return wait_byte(paused_fd_, 30); }
  int resume_and_finish() {
    char b = 'r';
    (void)!::write(resume_fd_, &b, 1);
    return child_->finish(/*kill=*/false);
  }

 private:
  int paused_fd_ = -1, resume_fd_ = -1;
  std::unique_ptr<ChildGuard> child_;
};

std::string what_failed(int code) {
  if (code < 0) return "the writer did not end normally (" + std::to_string(code) + ")";
  std::string out;
  if (code & kFirstStoreFailed) out += "the paused store failed; ";
  if (code & kNotWritableAfter) out += "the cache went memory-only; ";
  if (code & kSecondStoreFailed) out += "the next store failed; ";
  if (code & kWarned) out += "it warned; ";
  return out.empty() ? "nothing" : out;
}

}  // namespace

TEST(CacheWriters, ClearLeavesAnotherProcesssTempFileAndItsStoreLands) {
  TempDir dir;
  const Entry first = make_entry("writers-clear-first"), second = make_entry("writers-clear-second");
  DiskCache c(cache_config(dir.path()));
  ASSERT_TRUE(c.store(make_entry("writers-clear-old")));
  PausedWriter writer(dir.path(), first, second);
  ASSERT_TRUE(writer.started());
  ASSERT_TRUE(writer.wait_paused()) << "the writer did not reach its rename";
  ASSERT_EQ(files_named(dir.path(), ".tmp.").size(), 1u);

  EXPECT_EQ(c.clear(), 1u) << "the finished entry is cleared";
  EXPECT_EQ(files_named(dir.path(), ".tmp.").size(), 1u) << "a live writer's temp file is left to it";

  const int code = writer.resume_and_finish();
  EXPECT_EQ(code, 0) << what_failed(code);
  EXPECT_TRUE(c.load(first.key, "sm_90").has_value()) << "the paused store landed";
  EXPECT_TRUE(c.load(second.key, "sm_90").has_value()) << "and the writer still stores to disk";
  EXPECT_TRUE(files_named(dir.path(), ".tmp.").empty());
}

TEST(CacheWriters, PruneInAnotherPidNamespaceLeavesALiveWritersTempFile) {
  // A sidecar container sharing the cache volume: the writer's pid means nothing there.
  TempDir dir;
  const Entry first = make_entry("writers-prune-first"), second = make_entry("writers-prune-second");
  PausedWriter writer(dir.path(), first, second);
  ASSERT_TRUE(writer.started());
  ASSERT_TRUE(writer.wait_paused()) << "the writer did not reach its rename";

  const pid_t outer = ::fork();
  if (outer == 0) {
    ::alarm(60);
    if (::unshare(CLONE_NEWPID) != 0) ::_exit(100);  // no right to make a PID namespace: skip
    const pid_t inner = ::fork();                    // pid 1 of the new namespace
    if (inner == 0) {
      const PruneReport r = DiskCache(cache_config(dir.path())).prune();
      ::_exit(static_cast<int>(std::min<std::size_t>(r.removed_temp_files, 50)));
    }
    ::_exit(kjit::testing::wait_exit_code(inner));
  }
  const int removed = ChildGuard(outer).finish(/*kill=*/false);
  const int code = writer.resume_and_finish();
  if (removed == 100) GTEST_SKIP() << "unshare(CLONE_NEWPID) is not permitted here";
  EXPECT_EQ(removed, 0) << "prune removed a live writer's temp file";
  EXPECT_EQ(code, 0) << what_failed(code);
  DiskCache c(cache_config(dir.path()));
  EXPECT_TRUE(c.load(first.key, "sm_90").has_value());
  EXPECT_TRUE(c.load(second.key, "sm_90").has_value());
}

TEST(CacheWriters, ATempFileNobodyHoldsIsRemovedWhateverItsNameSays) {
  // Judged by its flock alone: a leftover named after a live pid (this process) goes, a held one
  // stays however old it is.
  TempDir dir;
  const Entry e = make_entry("writers-leftover");
  DiskCache c(cache_config(dir.path()));
  const std::string base = c.entry_path(e.key, "sm_90").string() + ".tmp.";
  const fs::path leftover = base + std::to_string(::getpid()) + ".00000000000000aa";
  const fs::path held = base + "1.00000000000000bb";
  write_file(leftover, "half an entry");
  write_file(held, "being written");
  struct timespec old[2] = {{std::time(nullptr) - 86400, 0}, {std::time(nullptr) - 86400, 0}};
  ASSERT_EQ(::utimensat(AT_FDCWD, held.c_str(), old, 0), 0);
  const int fd = ::open(held.c_str(), O_RDONLY | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::flock(fd, LOCK_EX), 0);

  EXPECT_EQ(c.prune().removed_temp_files, 1u);
  EXPECT_FALSE(fs::exists(leftover));
  EXPECT_TRUE(fs::exists(held));
  c.clear();
  EXPECT_TRUE(fs::exists(held));
  ::close(fd);
  EXPECT_EQ(c.prune().removed_temp_files, 1u);
  EXPECT_FALSE(fs::exists(held));
}

TEST(CacheWriters, ATempFileTakenAwayBeforeTheRenameIsWrittenAgain) {
  // An older kjit's `clear`, or an `rm`, removes the temp file of a store in progress: the store
  // writes it again, and the cache keeps storing to disk.
  TempDir dir;
  const Entry first = make_entry("writers-vanished-first"), second = make_entry("writers-vanished-second");
  WarningCapture warnings;
  DiskCache c(cache_config(dir.path()));
  static int calls;
  calls = 0;
  set_before_rename_hook([](const fs::path& temp) {
    if (calls++ == 0) fs::remove(temp);
  });
  const bool stored = c.store(first);
  set_before_rename_hook(nullptr);
  EXPECT_TRUE(stored);
  EXPECT_EQ(calls, 2) << "written twice";
  EXPECT_TRUE(c.writable()) << c.describe();
  EXPECT_TRUE(c.store(second));
  EXPECT_TRUE(c.load(first.key, "sm_90").has_value());
  EXPECT_TRUE(c.load(second.key, "sm_90").has_value());
  EXPECT_EQ(warnings.count(), 0u) << warnings.all();
}

TEST(CacheWriters, AStoreWhoseTempFileKeepsVanishingIsSkippedNotADowngrade) {
  TempDir dir;
  WarningCapture warnings;
  DiskCache c(cache_config(dir.path()));
  set_before_rename_hook([](const fs::path& temp) { fs::remove(temp); });
  const Entry first = make_entry("writers-always-vanishing");
  const bool stored = c.store(first);
  set_before_rename_hook(nullptr);
  EXPECT_FALSE(stored);
  ASSERT_EQ(warnings.count(), 1u) << warnings.all();
  EXPECT_TRUE(contains(warnings.all(), "was removed")) << warnings.all();
  EXPECT_TRUE(contains(warnings.all(), c.entry_path(first.key, "sm_90").string())) << warnings.all();
  EXPECT_TRUE(c.writable()) << "not memory-only: " << c.describe();
  const Entry second = make_entry("writers-after-vanishing");
  EXPECT_TRUE(c.store(second));
  EXPECT_TRUE(c.load(second.key, "sm_90").has_value());
}
