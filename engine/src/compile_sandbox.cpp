#include "kjit/compile_sandbox.hpp"

#include <fcntl.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <new>
#include <vector>

#include <nvrtc.h>

#include "kjit/error.hpp"

namespace kjit {
namespace {

std::shared_mutex& fork_gate() {
  static std::shared_mutex m;
  return m;
}

constexpr int kOutOfMemoryExit = 86;  // the child's operator new failed
constexpr int kCrashExit = 87;        // the child threw something unexpected

#if defined(__x86_64__)
constexpr std::uint32_t kAuditArch = AUDIT_ARCH_X86_64;
#elif defined(__aarch64__)
constexpr std::uint32_t kAuditArch = AUDIT_ARCH_AARCH64;
#else
constexpr std::uint32_t kAuditArch = 0;  // no filter: the compile runs bounded, with a note
#endif

// Every syscall that takes a path (or a handle standing for one) answers ENOENT, exec answers EPERM.
// What NVRTC does with files afterwards: nothing; its headers are in memory.
std::vector<sock_filter> no_files_filter() {
  std::vector<sock_filter> f;
  auto ret = [&](std::uint32_t v) { f.push_back(BPF_STMT(BPF_RET | BPF_K, v)); };
  f.push_back(BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, arch)));
  f.push_back(BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, kAuditArch, 1, 0));
  ret(SECCOMP_RET_KILL_PROCESS);  // another ABI (x86 int 0x80): nothing NVRTC does
  f.push_back(BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, nr)));
#if defined(__x86_64__)
  f.push_back(BPF_JUMP(BPF_JMP | BPF_JGE | BPF_K, 0x40000000u, 0, 1));  // the x32 ABI
  ret(SECCOMP_RET_ERRNO | EPERM);
#endif
  const long no_entry[] = {
#ifdef __NR_open
      __NR_open,
#endif
#ifdef __NR_creat
      __NR_creat,
#endif
#ifdef __NR_stat
      __NR_stat,
#endif
#ifdef __NR_lstat
      __NR_lstat,
#endif
#ifdef __NR_access
      __NR_access,
#endif
#ifdef __NR_readlink
      __NR_readlink,
#endif
#ifdef __NR_uselib
      __NR_uselib,
#endif
#ifdef __NR_newfstatat
      __NR_newfstatat,
#endif
#ifdef __NR_openat2
      __NR_openat2,
#endif
#ifdef __NR_faccessat2
      __NR_faccessat2,
#endif
      __NR_openat, __NR_statx, __NR_faccessat, __NR_readlinkat, __NR_name_to_handle_at, __NR_open_by_handle_at,
      __NR_chdir, __NR_fchdir, __NR_getxattr, __NR_lgetxattr, __NR_listxattr, __NR_llistxattr,
  };
  const long refused[] = {__NR_execve, __NR_execveat, __NR_socket, __NR_connect};
  for (long nr : no_entry) {
    f.push_back(BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, static_cast<std::uint32_t>(nr), 0, 1));
    ret(SECCOMP_RET_ERRNO | ENOENT);
  }
  for (long nr : refused) {
    f.push_back(BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, static_cast<std::uint32_t>(nr), 0, 1));
    ret(SECCOMP_RET_ERRNO | EPERM);
  }
  ret(SECCOMP_RET_ALLOW);
  return f;
}

// Installs the filter on the calling (single-threaded child) process; "" or why it could not.
std::string forbid_files(std::vector<sock_filter>& filter) {
  if (kAuditArch == 0) return "no seccomp filter for this CPU architecture";
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) return std::string("prctl(NO_NEW_PRIVS): ") + std::strerror(errno);
  sock_fprog prog{static_cast<unsigned short>(filter.size()), filter.data()};
  if (syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &prog) != 0)
    return std::string("seccomp: ") + std::strerror(errno);
  return "";
}

std::uint64_t address_space_bytes() {
  // /proc/self/statm: total program size in pages, first.
  FILE* f = std::fopen("/proc/self/statm", "r");
  unsigned long long pages = 0;
  if (f) {
    if (std::fscanf(f, "%llu", &pages) != 1) pages = 0;
    std::fclose(f);
  }
  return static_cast<std::uint64_t>(pages) * static_cast<std::uint64_t>(sysconf(_SC_PAGESIZE));
}

void write_all(int fd, const std::string& bytes) {
  std::size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) _exit(kCrashExit);
    done += static_cast<std::size_t>(n);
  }
}

[[noreturn]] void child_main(int out_fd, const NvrtcJob& job, const CompileBounds& bounds,
                             std::vector<sock_filter>& filter) noexcept {
  // Keep only stdin/out/err and the result pipe (as fd 3): an inherited descriptor would keep another
  // compile's pipe open (its reader would wait for this child) or a key's flock held past its release.
  if (out_fd != 3) {
    if (::dup2(out_fd, 3) != 3) _exit(kCrashExit);
    out_fd = 3;
  }
  if (syscall(SYS_close_range, 4u, ~0u, 0u) != 0) {
    const long most = std::min<long>(sysconf(_SC_OPEN_MAX), 1 << 16);
    for (int fd = 4; fd < most; ++fd) ::close(fd);
  }
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
  signal(SIGALRM, SIG_DFL);
  prctl(PR_SET_PDEATHSIG, SIGKILL);  // a parent that dies takes its compile with it
  rlimit no_core{0, 0};
  setrlimit(RLIMIT_CORE, &no_core);
  rlimit as{};
  if (getrlimit(RLIMIT_AS, &as) == 0) {
    // What the child already maps (all of the parent: CUDA and torch reserve a lot) plus the limit.
    const std::uint64_t want = address_space_bytes() + bounds.memory_bytes;
    if (as.rlim_max == RLIM_INFINITY || want < as.rlim_max) as.rlim_cur = static_cast<rlim_t>(want);
    setrlimit(RLIMIT_AS, &as);
  }
  itimerval timer{};
  const double whole = std::floor(bounds.timeout_s);
  timer.it_value.tv_sec = static_cast<time_t>(whole);
  timer.it_value.tv_usec = static_cast<suseconds_t>((bounds.timeout_s - whole) * 1e6);
  if (timer.it_value.tv_sec == 0 && timer.it_value.tv_usec == 0) timer.it_value.tv_usec = 1;
  setitimer(ITIMER_REAL, &timer, nullptr);  // SIGALRM, default action: the child ends
  std::set_new_handler([] { _exit(kOutOfMemoryExit); });
  std::string note;
  if (bounds.no_files) note = forbid_files(filter);
  try {
    NvrtcOutcome out = run_nvrtc(job);
    out.sandbox_note = note;
    write_all(out_fd, encode(out));
  } catch (const std::bad_alloc&) {
    _exit(kOutOfMemoryExit);
  } catch (...) {
    _exit(kCrashExit);
  }
  _exit(0);
}

std::string mib(std::uint64_t bytes) { return std::to_string(bytes >> 20) + " MiB"; }

std::string seconds(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g s", s);
  return buf;
}

}  // namespace

std::shared_lock<std::shared_mutex> hold_off_forks() { return std::shared_lock<std::shared_mutex>(fork_gate()); }

NvrtcOutcome run_nvrtc_in_child(const NvrtcJob& job, const CompileBounds& bounds, const std::string& what) {
  // NVRTC loads its builtins library and whatever else it reads once on its first compile: do that
  // here, in this process, so that the child (which may open no file) finds them loaded.
  static std::once_flag first_compile;
  std::call_once(first_compile, [] {
    NvrtcJob warm;
    warm.source = "__global__ void kjit_warm_up() {}\n";
    warm.program_name = "kjit_warm_up.cu";
    warm.name_expression = "kjit_warm_up";
    warm.want_cubin = false;
    auto gate = hold_off_forks();
    run_nvrtc(warm);
  });
  std::vector<sock_filter> filter = no_files_filter();
  int fds[2];
  pid_t pid = -1;
  int fork_errno = 0;
  {
    // The pipe is made, forked and its write end closed here under the gate, so that no other
    // compile's child is forked holding this write end (its reader would wait for that child too).
    std::unique_lock<std::shared_mutex> gate(fork_gate());
    if (pipe2(fds, O_CLOEXEC) != 0)
      throw Error("cannot start the compiler process for " + what + ": pipe: " + std::strerror(errno));
    pid = fork();
    if (pid == 0) {
      ::close(fds[0]);
      child_main(fds[1], job, bounds, filter);
    }
    fork_errno = errno;
    ::close(fds[1]);
  }
  if (pid < 0) {
    ::close(fds[0]);
    throw Error("cannot start the compiler process for " + what + ": fork: " + std::strerror(fork_errno) +
                ". Free memory, or set KJIT_COMPILE_ISOLATION=untrusted so that your own templates compile in-process.");
  }
  // Read until the child closes the pipe; a child past its timer plus a grace period is killed.
  std::string bytes;
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::milliseconds(static_cast<long long>(bounds.timeout_s * 1000) + 10000);
  bool killed = false;
  char buf[65536];
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      ::kill(pid, SIGKILL);
      killed = true;
      break;
    }
    pollfd p{fds[0], POLLIN, 0};
    const int r = ::poll(&p, 1, static_cast<int>(std::min<long long>(left.count(), 1000)));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) continue;
    const ssize_t n = ::read(fds[0], buf, sizeof buf);
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (n <= 0) break;
    bytes.append(buf, static_cast<std::size_t>(n));
  }
  ::close(fds[0]);
  int status = 0;
  pid_t w;
  do w = ::waitpid(pid, &status, 0);
  while (w < 0 && errno == EINTR);
  const bool reaped = w == pid;

  NvrtcOutcome out;
  const bool complete = decode(bytes, out);
  const std::string raise_time = " If this kernel needs longer, raise KJIT_COMPILE_TIMEOUT (seconds).";
  const std::string raise_memory = " If this kernel needs more, raise KJIT_COMPILE_MEMORY (e.g. 16G).";
  const std::string limit_note =
      " (kjit bounds each compile so that a template, e.g. from an untrusted manifest, cannot exhaust the machine.)";
  const bool timed_out = killed || (reaped && WIFSIGNALED(status) && WTERMSIG(status) == SIGALRM);
  if (timed_out)
    throw CompileError("compiling " + what + " took longer than kjit's limit of " + seconds(bounds.timeout_s) +
                           " and was stopped." + raise_time + limit_note,
                       "", job.name_expression, job.flags, "");
  const bool out_of_memory = (reaped && WIFEXITED(status) && WEXITSTATUS(status) == kOutOfMemoryExit) ||
                             (complete && (out.status == NVRTC_ERROR_OUT_OF_MEMORY ||
                                           out.log.find("catastrophic error: out of memory") != std::string::npos));
  if (out_of_memory)
    throw CompileError("compiling " + what + " needed more than kjit's memory limit of " + mib(bounds.memory_bytes) +
                           " and was stopped." + raise_memory + limit_note,
                       out.log, job.name_expression, job.flags, "");
  if (complete) return out;
  std::string how = "ended without a result";
  if (reaped && WIFSIGNALED(status))
    how = std::string("was killed by signal ") + std::to_string(WTERMSIG(status)) + " (" + strsignal(WTERMSIG(status)) + ")";
  else if (reaped && WIFEXITED(status))
    how = "exited with status " + std::to_string(WEXITSTATUS(status));
  throw CompileError("the compiler process for " + what + " " + how + "; with kjit's memory limit of " +
                         mib(bounds.memory_bytes) + " per compile, that is most often the limit." + raise_memory,
                     "", job.name_expression, job.flags, "");
}

}  // namespace kjit
