// Running test code in a forked child process and getting its verdict back.
//
// GoogleTest assertions do nothing useful in a forked child (its failures die with it), so a child
// body reports through ChildChecks: failed checks and a skip reason travel back over a pipe, and
// run_in_child() turns them into test failures (or a skip) in the parent. A child never runs the
// test framework's teardown: it leaves with _exit.
#pragma once

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

namespace kjit::testing {

// Whether some process holds the flock on `path` (one non-blocking attempt from a new open file).
inline bool lock_is_held(const std::filesystem::path& path) {
  const int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) return false;
  const bool held = ::flock(fd, LOCK_EX | LOCK_NB) != 0 && errno == EWOULDBLOCK;
  ::close(fd);
  return held;
}

// The exit code of a reaped child; -1 when it could not be waited for, -2 when a signal ended it.
inline int wait_exit_code(pid_t pid) {
  int status = 0;
  pid_t r;
  do r = ::waitpid(pid, &status, 0);
  while (r < 0 && errno == EINTR);
  if (r != pid) return -1;
  if (!WIFEXITED(status)) return -2;
  return WEXITSTATUS(status);
}

// Kills (SIGKILL) and reaps a child still running when it leaves the scope, so that a failed ASSERT
// never leaves a process behind.
class ChildGuard {
 public:
  explicit ChildGuard(pid_t pid = -1) : pid_(pid) {}
  ~ChildGuard() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      wait_exit_code(pid_);
    }
  }
  ChildGuard(const ChildGuard&) = delete;
  ChildGuard& operator=(const ChildGuard&) = delete;
  pid_t pid() const { return pid_; }
  // Kills it now (if `kill`) and reaps it; the exit code as wait_exit_code gives it.
  int finish(bool kill) {
    if (kill) ::kill(pid_, SIGKILL);
    const int code = wait_exit_code(pid_);
    pid_ = -1;
    return code;
  }

 private:
  pid_t pid_;
};

// What a child body reports with.
class ChildChecks {
 public:
  // Records a failure (with `what`) unless `ok`; returns `ok`.
  bool check(bool ok, const std::string& what) {
    if (!ok) failures_.push_back(what);
    return ok;
  }
  void fail(const std::string& what) { failures_.push_back(what); }
  // Ends the child: the parent's test is skipped with `reason`.
  [[noreturn]] void skip(const std::string& reason) {
    send("S" + reason);
    ::_exit(0);
  }

 private:
  friend struct ChildRun;
  void send(const std::string& record) {
    // Records are "<kind><text>\0"; one write each (the parent reads until end of file).
    std::string r = record;
    r.push_back('\0');
    std::size_t done = 0;
    while (done < r.size()) {
      ssize_t n = ::write(fd_, r.data() + done, r.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return;
      done += static_cast<std::size_t>(n);
    }
  }
  int fd_ = -1;
  std::vector<std::string> failures_;
};

struct ChildResult {
  int exit_code = -1;                 // as wait_exit_code
  std::vector<std::string> failures;  // checks that failed in the child, and how it ended if not well
  std::string skip_reason;            // non-empty when the child asked for a skip
};

struct ChildRun {
  // Runs `body` in a forked child and waits for it. An exception escaping `body` is a failure.
  static ChildResult run(const std::function<void(ChildChecks&)>& body) {
    ChildResult result;
    int fds[2];
    if (::pipe(fds) != 0) {
      result.failures.push_back("pipe() failed");
      return result;
    }
    const pid_t pid = ::fork();
    if (pid < 0) {
      ::close(fds[0]);
      ::close(fds[1]);
      result.failures.push_back("fork() failed");
      return result;
    }
    if (pid == 0) {
      ::close(fds[0]);
      ChildChecks checks;
      checks.fd_ = fds[1];
      try {
        body(checks);
      } catch (const std::exception& e) {
        checks.fail(std::string("exception escaped the child: ") + e.what());
      } catch (...) {
        checks.fail("unknown exception escaped the child");
      }
      for (const auto& f : checks.failures_) checks.send("F" + f);
      ::_exit(checks.failures_.empty() ? 0 : 1);
    }
    ChildGuard child(pid);
    ::close(fds[1]);
    std::string all;
    char buf[4096];
    for (;;) {
      ssize_t n = ::read(fds[0], buf, sizeof buf);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      all.append(buf, static_cast<std::size_t>(n));
    }
    ::close(fds[0]);
    result.exit_code = child.finish(/*kill=*/false);
    std::size_t start = 0;
    while (start < all.size()) {
      std::size_t end = all.find('\0', start);
      if (end == std::string::npos) end = all.size();
      const std::string record = all.substr(start, end - start);
      if (!record.empty() && record[0] == 'S')
        result.skip_reason = record.substr(1);
      else if (!record.empty() && record[0] == 'F')
        result.failures.push_back(record.substr(1));
      start = end + 1;
    }
    if (result.exit_code != 0 && result.failures.empty())
      result.failures.push_back(
          "the child ended with " +
          std::string(result.exit_code == -2 ? "a signal" : "exit code " + std::to_string(result.exit_code)));
    return result;
  }
};

// Forks a child that runs `body(say_ready)` and exits with what `body` returns (2 when it throws); in the
// child, say_ready() tells the parent that it got where the test wants it (false when it cannot: the
// child should then _exit). Returns the child's pid once it has said so, or -1 when it could not be forked
// or ended (or failed to say so) first, then reaped.
inline pid_t fork_until_ready(const std::function<int(const std::function<bool()>& say_ready)>& body) {
  int fds[2];
  if (::pipe(fds) != 0) return -1;
  const pid_t pid = ::fork();
  if (pid < 0) {
    ::close(fds[0]);
    ::close(fds[1]);
    return -1;
  }
  if (pid == 0) {
    ::close(fds[0]);
    const int fd = fds[1];
    int code = 2;
    try {
      code = body([fd] {
        const char x = 'R';
        return ::write(fd, &x, 1) == 1;
      });
    } catch (...) {
    }
    ::_exit(code);
  }
  ::close(fds[1]);
  char x = 0;
  ssize_t n;
  do n = ::read(fds[0], &x, 1);
  while (n < 0 && errno == EINTR);
  ::close(fds[0]);
  if (n != 1) {
    ::kill(pid, SIGKILL);
    wait_exit_code(pid);
    return -1;
  }
  return pid;
}

// Forks `n` children at once, child i running `body(i)` and exiting with what it returns (2 when it throws,
// with the exception's message on stderr), and waits for them all: a failure of the calling test for each
// child that did not exit with 0, and when a fork fails (no more are forked then).
inline void run_children(int n, const std::function<int(int)>& body) {
  std::vector<pid_t> children;
  for (int i = 0; i < n; ++i) {
    const pid_t pid = ::fork();
    if (pid < 0) {
      ADD_FAILURE() << "fork() failed for child " << i;
      break;
    }
    if (pid == 0) {
      int code = 2;
      try {
        code = body(i);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "child %d: %s\n", i, e.what());
      } catch (...) {
        std::fprintf(stderr, "child %d: an unknown exception\n", i);
      }
      ::_exit(code);  // never run the test framework's teardown in a child
    }
    children.push_back(pid);
  }
  for (std::size_t i = 0; i < children.size(); ++i) EXPECT_EQ(wait_exit_code(children[i]), 0) << "child " << i;
}

// Runs this test binary (`binary`, as its argv[0]) again in a child process, only the test `test` (a
// --gtest_filter), with `var`=`value` in its environment; the child's exit code as wait_exit_code gives it
// (-1 when it could not be forked, 127 when it could not be executed).
inline int rerun_this_test(const char* binary, const std::string& test, const char* var, const std::string& value) {
  const std::string filter = "--gtest_filter=" + test;
  const pid_t pid = ::fork();
  if (pid < 0) return -1;
  if (pid == 0) {
    ::setenv(var, value.c_str(), 1);
    ::execl("/proc/self/exe", binary, filter.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  return wait_exit_code(pid);
}

// Runs `body` in a forked child; its failed checks become failures of the calling test.
// Use as: KJIT_RUN_IN_CHILD([&](ChildChecks& c) { ... });  (a macro so that a skip skips the caller).
#define KJIT_RUN_IN_CHILD(...)                                                                            \
  do {                                                                                                    \
    const ::kjit::testing::ChildResult kjit_child_result_ = ::kjit::testing::ChildRun::run(__VA_ARGS__);  \
    for (const auto& kjit_f_ : kjit_child_result_.failures) ADD_FAILURE() << "in the child: " << kjit_f_; \
    if (!kjit_child_result_.skip_reason.empty()) GTEST_SKIP() << kjit_child_result_.skip_reason;          \
  } while (0)

}  // namespace kjit::testing
