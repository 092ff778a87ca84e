#include "kjit/compile_sandbox.hpp"

#include <fcntl.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <dlfcn.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cmath>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <exception>
#include <filesystem>
#include <memory>
#include <mutex>
#include <thread>
#include <new>
#include <vector>

#include <nvrtc.h>

#include "kjit/cache/unique_fd.hpp"
#include "kjit/cuda_toolkit.hpp"
#include "kjit/error.hpp"
#include "kjit/nvrtc_library.hpp"

namespace kjit {
namespace fs = std::filesystem;
namespace {

constexpr int kOutOfMemoryExit = 86;                    // the child's operator new failed
constexpr int kCrashExit = 87;                          // the child threw something unexpected
constexpr std::size_t kMaxLogBytes = 4u << 20;          // a longer compile log is cut (in the child)
constexpr std::uint64_t kMaxResultBytes = 2ull << 30;   // a cubin and a log: more is not a compile result
constexpr std::uint64_t kMaxRequestBytes = 4ull << 30;  // a source and its headers: more is not a job

#if defined(__x86_64__)
constexpr std::uint32_t kAuditArch = AUDIT_ARCH_X86_64;
#elif defined(__aarch64__)
constexpr std::uint32_t kAuditArch = AUDIT_ARCH_AARCH64;
#else
constexpr std::uint32_t kAuditArch = 0;  // no filter: the compile runs bounded, with a note
#endif

// The path-taking syscalls whose path is argument `path_arg` (and, for the *at ones, a folder descriptor
// argument 0): with `ask` (NVRTC's precompiled header), the supervisor sees them (pch_supervise) and lets
// through only those inside the PCH folder; every other one answers ENOENT.
struct PathSyscall {
  long nr;
  int path_arg;
};
const std::vector<PathSyscall>& checked_path_syscalls() {
  static const std::vector<PathSyscall> list = {
#ifdef __NR_open
      {__NR_open, 0},
#endif
#ifdef __NR_stat
      {__NR_stat, 0},
#endif
#ifdef __NR_lstat
      {__NR_lstat, 0},
#endif
#ifdef __NR_access
      {__NR_access, 0},
#endif
#ifdef __NR_newfstatat
      {__NR_newfstatat, 1},
#endif
#ifdef __NR_openat2
      {__NR_openat2, 1},
#endif
#ifdef __NR_faccessat2
      {__NR_faccessat2, 1},
#endif
      {__NR_openat, 1},     {__NR_statx, 1}, {__NR_faccessat, 1},
  };
  return list;
}

// Every syscall that takes a path (or a handle standing for one) answers ENOENT, exec answers EPERM.
// What NVRTC does with files afterwards: nothing; its headers are in memory. With `ask_for_paths`, the
// syscalls of checked_path_syscalls() go to a supervisor instead (SECCOMP_RET_USER_NOTIF).
std::vector<sock_filter> no_files_filter(bool ask_for_paths = false) {
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
      __NR_openat,     __NR_statx,  __NR_faccessat, __NR_readlinkat, __NR_name_to_handle_at, __NR_open_by_handle_at,
      __NR_chdir,      __NR_fchdir, __NR_getxattr,  __NR_lgetxattr,  __NR_listxattr,         __NR_llistxattr,
  };
  const long refused[] = {__NR_execve, __NR_execveat, __NR_socket, __NR_connect};
  if (ask_for_paths)
    for (const PathSyscall& c : checked_path_syscalls()) {
      f.push_back(BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, static_cast<std::uint32_t>(c.nr), 0, 1));
      ret(SECCOMP_RET_USER_NOTIF);
    }
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

// Installs the filter on the calling (single-threaded child) process; "" or why it could not. With
// `listener`, the filter asks a supervisor (SECCOMP_FILTER_FLAG_NEW_LISTENER): *listener is its descriptor.
std::string forbid_files(std::vector<sock_filter>& filter, int* listener = nullptr) {
  if (kAuditArch == 0) return "no seccomp filter for this CPU architecture";
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) return std::string("prctl(NO_NEW_PRIVS): ") + std::strerror(errno);
  sock_fprog prog{static_cast<unsigned short>(filter.size()), filter.data()};
  const long r = syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, listener ? SECCOMP_FILTER_FLAG_NEW_LISTENER : 0, &prog);
  if (r < 0) return std::string("seccomp: ") + std::strerror(errno);
  if (listener) *listener = static_cast<int>(r);
  return "";
}

// Whether `path` lies in `dir` (an absolute folder with no trailing '/'): absolute, no "." or ".."
// part, no empty part.
bool inside_folder(const std::string& path, const std::string& dir) {
  if (path != dir && path.rfind(dir + "/", 0) != 0) return false;
  for (std::size_t at = 0; at < path.size();) {
    const std::size_t next = path.find('/', at + 1);
    const std::string part = path.substr(at + 1, (next == std::string::npos ? path.size() : next) - at - 1);
    if (part.empty() || part == "." || part == "..") return false;
    at = next == std::string::npos ? path.size() : next;
  }
  return true;
}

// Whether a request is NVRTC's front end creating its scratch file: open/openat with O_CREAT of a name
// "edg<digits>_<digits>" (in $TMPDIR).
bool creates_scratch_file(const seccomp_notif& req, const std::string& path) {
  long flags = -1;
#ifdef __NR_open
  if (req.data.nr == __NR_open) flags = static_cast<long>(req.data.args[1]);
#endif
  if (req.data.nr == __NR_openat) flags = static_cast<long>(req.data.args[2]);
  if (flags < 0 || !(flags & O_CREAT)) return false;
  const std::string name = fs::path(path).filename().string();
  const std::size_t bar = name.find('_');
  if (name.rfind("edg", 0) != 0 || bar == std::string::npos || bar == 3 || bar + 1 == name.size()) return false;
  for (std::size_t i = 3; i < name.size(); ++i)
    if (i != bar && (name[i] < '0' || name[i] > '9')) return false;
  return true;
}

// fstat() as glibc makes it: fstatat(fd, "", AT_EMPTY_PATH) (or statx): a descriptor the thread holds,
// no path (one inside the PCH folder: no other open succeeds).
bool names_its_descriptor(const seccomp_notif& req, const std::string& path) {
  if (!path.empty()) return false;
  int flags_arg = -1;
#ifdef __NR_newfstatat
  if (req.data.nr == __NR_newfstatat) flags_arg = 3;
#endif
  if (req.data.nr == __NR_statx) flags_arg = 2;
  return flags_arg >= 0 && (req.data.args[flags_arg] & AT_EMPTY_PATH) != 0;
}

// Answers the path syscalls of a compile thread filtered with no_files_filter(true) until `stop` is
// readable: those inside `dir` (NVRTC's precompiled header files) go on, every other one answers
// ENOENT, as without a supervisor. The path is read from this process's memory (the thread that asked
// waits in its syscall) with process_vm_readv, which fails instead of faulting on a bad pointer.
void pch_supervise(int listener, int stop, const std::string& dir) {
  seccomp_notif_sizes sizes{};
  if (syscall(SYS_seccomp, SECCOMP_GET_NOTIF_SIZES, 0, &sizes) != 0)
    sizes = {sizeof(seccomp_notif), sizeof(seccomp_notif_resp), 0};
  std::vector<char> req_bytes(std::max<std::size_t>(sizes.seccomp_notif, sizeof(seccomp_notif)));
  std::vector<char> resp_bytes(std::max<std::size_t>(sizes.seccomp_notif_resp, sizeof(seccomp_notif_resp)));
  auto* req = reinterpret_cast<seccomp_notif*>(req_bytes.data());
  auto* resp = reinterpret_cast<seccomp_notif_resp*>(resp_bytes.data());
  for (;;) {
    pollfd fds[2] = {{listener, POLLIN, 0}, {stop, POLLIN, 0}};
    if (::poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      return;
    }
    if (fds[1].revents) return;
    if (fds[0].revents & (POLLHUP | POLLERR | POLLNVAL)) return;
    if (!(fds[0].revents & POLLIN)) continue;
    std::memset(req_bytes.data(), 0, req_bytes.size());
    if (::ioctl(listener, SECCOMP_IOCTL_NOTIF_RECV, req) != 0) continue;  // the thread's syscall ended meanwhile
    int path_arg = -1;
    for (const PathSyscall& c : checked_path_syscalls())
      if (c.nr == req->data.nr) path_arg = c.path_arg;
    std::string path;
    if (path_arg >= 0) {
      char buf[4096];
      iovec local{buf, sizeof buf - 1}, remote{reinterpret_cast<void*>(req->data.args[path_arg]), sizeof buf - 1};
      const ssize_t n = ::process_vm_readv(::getpid(), &local, 1, &remote, 1, 0);
      if (n > 0) path.assign(buf, strnlen(buf, static_cast<std::size_t>(n)));
    }
    std::memset(resp_bytes.data(), 0, resp_bytes.size());
    resp->id = req->id;
    if (creates_scratch_file(*req, path)) {
      // NVRTC's front end makes a scratch file in $TMPDIR (created, then unlinked at once): it gets a
      // memory file instead, through the descriptor the supervisor adds to it (Linux 5.9+).
      const int mem = static_cast<int>(::syscall(SYS_memfd_create, "kjit-nvrtc-scratch", 0u));
      if (mem >= 0) {
        seccomp_notif_addfd add{};
        add.id = req->id;
        add.srcfd = static_cast<std::uint32_t>(mem);
        const int fd = ::ioctl(listener, SECCOMP_IOCTL_NOTIF_ADDFD, &add);
        ::close(mem);
        if (fd >= 0) {
          resp->val = fd;
          if (::ioctl(listener, SECCOMP_IOCTL_NOTIF_SEND, resp) == 0) continue;
        }
      }
    }
    if ((!path.empty() && inside_folder(path, dir)) || names_its_descriptor(*req, path)) {
      resp->flags = SECCOMP_USER_NOTIF_FLAG_CONTINUE;
      if (::ioctl(listener, SECCOMP_IOCTL_NOTIF_SEND, resp) == 0) continue;
      resp->flags = 0;  // a kernel without CONTINUE (before 5.5): no PCH file, the compile goes on
    }
    resp->error = -ENOENT;
    (void)::ioctl(listener, SECCOMP_IOCTL_NOTIF_SEND, resp);
  }
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

// Every message on a child's socket is its length (8 bytes), then its bytes, so that each side knows
// when it has all of one without waiting for an end of file that an inherited descriptor could hold back.
std::string framed(const std::string& body) {
  const std::uint64_t n = body.size();
  return std::string(reinterpret_cast<const char*>(&n), sizeof n) + body;
}

// A job as the child receives it: its time limit and whether it may compile without the filter.
struct Request {
  double timeout_s = 0;
  bool untrusted = false;
  NvrtcJob job;
};

std::string request_bytes(const NvrtcJob& job, const CompileBounds& bounds) {
  std::string body(reinterpret_cast<const char*>(&bounds.timeout_s), sizeof bounds.timeout_s);
  body += bounds.untrusted ? '1' : '0';
  return framed(body + encode(job));
}

bool decode_request(const std::string& body, Request& r) {
  if (body.size() < sizeof r.timeout_s + 1) return false;
  std::memcpy(&r.timeout_s, body.data(), sizeof r.timeout_s);
  const char untrusted = body[sizeof r.timeout_s];
  if (!(r.timeout_s > 0) || (untrusted != '0' && untrusted != '1')) return false;
  r.untrusted = untrusted == '1';
  return decode(body.substr(sizeof r.timeout_s + 1), r.job);
}

// Reads exactly `n` bytes (the child, blocking); false at the end of the file or on an error.
bool read_exact(int fd, char* at, std::size_t n) {
  while (n > 0) {
    const ssize_t got = ::read(fd, at, n);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) return false;
    at += got;
    n -= static_cast<std::size_t>(got);
  }
  return true;
}

// The result on the socket: encode(outcome), framed, with an over-long log cut first.
void write_result(int fd, NvrtcOutcome& out) {
  if (out.log.size() > kMaxLogBytes) {
    const std::size_t total = out.log.size();
    out.log.resize(kMaxLogBytes);
    out.log += "\n[kjit: the log was cut here, at " + std::to_string(kMaxLogBytes >> 20) + " MiB of " +
               std::to_string(total) + " bytes]\n";
  }
  write_all(fd, framed(encode(out)));
}

void arm_timer(double s) {
  itimerval timer{};
  const double whole = std::floor(s);
  timer.it_value.tv_sec = static_cast<time_t>(whole);
  timer.it_value.tv_usec = static_cast<suseconds_t>((s - whole) * 1e6);
  if (timer.it_value.tv_sec == 0 && timer.it_value.tv_usec == 0) timer.it_value.tv_usec = 1;
  setitimer(ITIMER_REAL, &timer, nullptr);  // SIGALRM, default action: the child ends
}

void disarm_timer() {
  itimerval none{};
  setitimer(ITIMER_REAL, &none, nullptr);
}

// The child: bounds itself, installs the filter, then compiles each job its socket brings (each under
// the job's time limit) and answers it, until the parent closes the socket.
[[noreturn]] void child_main(int sock, pid_t parent, std::uint64_t memory_bytes,
                             std::vector<sock_filter>& filter) noexcept {
  // Keep only stdin/out/err and the socket (as fd 3): an inherited descriptor would keep another
  // child's socket open (its reader would wait for this child) or a key's flock held past its release.
  if (sock != 3) {
    if (::dup2(sock, 3) != 3) _exit(kCrashExit);
    sock = 3;
  }
  if (syscall(SYS_close_range, 4u, ~0u, 0u) != 0) {
    const long most = std::min<long>(sysconf(_SC_OPEN_MAX), 1 << 16);
    for (int fd = 4; fd < most; ++fd) ::close(fd);
  }
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
  signal(SIGALRM, SIG_DFL);
  prctl(PR_SET_PDEATHSIG, SIGKILL);              // the thread that forked it ending takes its compile with it
  if (::getppid() != parent) _exit(kCrashExit);  // it died before the line above
  rlimit no_core{0, 0};
  setrlimit(RLIMIT_CORE, &no_core);
  rlimit as{};
  if (getrlimit(RLIMIT_AS, &as) == 0) {
    // What the child already maps (all of the parent: CUDA and torch reserve a lot) plus the limit.
    const std::uint64_t have = address_space_bytes();
    const std::uint64_t want = memory_bytes > UINT64_MAX - have ? UINT64_MAX : have + memory_bytes;
    if (as.rlim_max == RLIM_INFINITY || want < as.rlim_max) as.rlim_cur = static_cast<rlim_t>(want);
    setrlimit(RLIMIT_AS, &as);
  }
  std::set_new_handler([] { _exit(kOutOfMemoryExit); });
  try {
    const std::string note = forbid_files(filter);
    for (;;) {
      std::uint64_t n = 0;
      if (!read_exact(sock, reinterpret_cast<char*>(&n), sizeof n)) _exit(0);  // closed: no more jobs
      if (n > kMaxRequestBytes) _exit(kCrashExit);
      std::string body(static_cast<std::size_t>(n), '\0');
      Request r;
      if (!read_exact(sock, body.data(), body.size()) || !decode_request(body, r)) _exit(kCrashExit);
      body = std::string();
      arm_timer(r.timeout_s);
      NvrtcOutcome out;
      // Without the filter, a template that may come from anyone is not compiled at all (fail closed).
      if (note.empty() || !r.untrusted) out = run_nvrtc(r.job);
      out.sandbox_note = note;
      disarm_timer();
      write_result(sock, out);
    }
  } catch (const std::bad_alloc&) {
    _exit(kOutOfMemoryExit);
  } catch (...) {
    _exit(kCrashExit);
  }
}

std::string mib(std::uint64_t bytes) { return std::to_string(bytes >> 20) + " MiB"; }

std::string seconds(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g s", s);
  return buf;
}

}  // namespace

// NVRTC dlopens its builtins library on its first compile: load it (by the same name, so NVRTC's own
// dlopen finds it loaded) before any compile that may open no file. Failing that, one compile here.
void load_what_nvrtc_reads_once() {
  static std::once_flag once;
  // No compile child forked mid-dlopen or mid-compile. Held before call_once, not in it: a thread that waits
  // there for a fork would keep every other caller waiting in call_once, the compiler preload among them,
  // which holds the gate already, and the fork waits for the preload.
  auto gate = hold_off_forks();
  std::call_once(once, [&gate] {
    const std::string name = "libnvrtc-builtins.so." + NvrtcLibrary::get().version();
    if (::dlopen(name.c_str(), RTLD_NOW | RTLD_GLOBAL | RTLD_NODELETE)) return;
    const fs::path beside = cuda_toolkit().nvrtc_library.parent_path() / name;
    if (::dlopen(beside.c_str(), RTLD_NOW | RTLD_GLOBAL | RTLD_NODELETE)) return;
    NvrtcJob warm;
    warm.source = "__global__ void kjit_warm_up() {}\n";
    warm.program_name = "kjit_warm_up.cu";
    warm.name_expression = "kjit_warm_up";
    warm.want_cubin = false;
    // On a thread of its own, joined under the gate: a thread that compiled runs NVRTC's thread-exit
    // clean-up when it ends (see run_nvrtc_without_files), and this caller may end at any later time,
    // holding nothing. The thread holds the gate lent by this one's, as a compile's worker does.
    std::exception_ptr error;
    std::thread([&] {
      try {
        auto held = hold_off_forks_beside(gate);
        run_nvrtc(warm);
      } catch (...) {
        error = std::current_exception();
      }
    }).join();
    if (error) std::rethrow_exception(error);
  });
}

namespace {

[[noreturn]] void refuse_unfiltered(const std::string& what, const std::string& why) {
  throw Error("kjit will not compile " + what +
              ": it comes from a manifest (anyone may have written it), and "
              "kjit cannot stop NVRTC from reading files here (" +
              why +
              "). Warm manifests on a Linux x86_64 "
              "or aarch64 machine with seccomp (any machine will do: no GPU is needed).");
}

// A forked compile child that serves jobs on its socket: killed and reaped when dropped (it is idle
// then, or failed), reaped once.
class Child {
 public:
  // Forks one bounded by `memory_bytes`. Throws Error when none can be made.
  static std::unique_ptr<Child> start(std::uint64_t memory_bytes, const std::string& lineage, const std::string& what) {
    std::vector<sock_filter> filter = no_files_filter();
    int fds[2];
    pid_t pid = -1;
    int fork_errno = 0;
    const pid_t parent = ::getpid();
    {
      // The socket is made, forked and its child end closed here under the gate, so that no other
      // compile's child is forked holding this child's end.
      ForkGateExclusive gate;
      if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0)
        throw Error("cannot start the compiler process for " + what + ": socketpair: " + std::strerror(errno));
      pid = fork();
      if (pid == 0) {
        ::close(fds[0]);
        child_main(fds[1], parent, memory_bytes, filter);
      }
      fork_errno = errno;
      ::close(fds[1]);
    }
    if (pid < 0) {
      ::close(fds[0]);
      throw Error(
          "cannot start the compiler process for " + what + ": fork: " + std::strerror(fork_errno) +
          ". Free memory; where it is your own templates that compile in children, unset KJIT_COMPILE_ISOLATION=always "
          "or run `kjit warm` / `kjit export` with -j 1 (more jobs compile in child processes) so that they "
          "compile in-process.");
    }
    try {
      return std::unique_ptr<Child>(new Child(pid, fds[0], memory_bytes, lineage));
    } catch (...) {  // no memory for the handle: the child goes
      ::close(fds[0]);
      ::kill(pid, SIGKILL);
      while (::waitpid(pid, nullptr, 0) < 0 && errno == EINTR) {
      }
      throw;
    }
  }
  ~Child() {
    if (fd_ >= 0) ::close(fd_);
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      wait();
    }
  }
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;
  int fd() const { return fd_; }
  std::uint64_t memory_bytes() const { return memory_bytes_; }
  const std::string& lineage() const { return lineage_; }
  // Sends all of `bytes`; false when the child is gone (its end closed) or the socket failed.
  // Sends all of `bytes` by `deadline`; false when the child is gone (its end closed), the socket
  // failed, or the child stopped reading (a job larger than the socket's buffer waits for it).
  bool send(const std::string& bytes, std::chrono::steady_clock::time_point deadline) {
    std::size_t done = 0;
    while (done < bytes.size()) {
      const ssize_t n = ::send(fd_, bytes.data() + done, bytes.size() - done, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n > 0) {
        done += static_cast<std::size_t>(n);
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK)) return false;
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) return false;
      pollfd p{fd_, POLLOUT, 0};
      ::poll(&p, 1, static_cast<int>(std::min<long long>(left.count(), 1000)));
    }
    return true;
  }
  // An idle child writes nothing: a socket that is readable or hung up means it has ended.
  bool ended_while_idle() const {
    pollfd p{fd_, POLLIN, 0};
    return ::poll(&p, 1, 0) != 0;
  }
  void close_socket() {
    ::close(fd_);
    fd_ = -1;
  }
  // Reaps the child; false when someone else did (SIGCHLD ignored, a host's waitpid(-1)).
  bool wait(int* status = nullptr) {
    int st = 0;
    pid_t w;
    do w = ::waitpid(pid_, &st, 0);
    while (w < 0 && errno == EINTR);
    pid_ = -1;
    if (status) *status = st;
    return w > 0;
  }
  void kill() { ::kill(pid_, SIGKILL); }

 private:
  Child(pid_t pid, int fd, std::uint64_t memory_bytes, std::string lineage)
      : pid_(pid), fd_(fd), memory_bytes_(memory_bytes), lineage_(std::move(lineage)) {}
  pid_t pid_;
  int fd_;
  std::uint64_t memory_bytes_;
  std::string lineage_;
};

// How one exchange with a child ended, for the error when it brought no result.
struct Reply {
  std::string bytes;  // the frame: its length, then encode(outcome)
  bool complete = false, killed = false, too_big = false;
  NvrtcOutcome out;
};

// Reads the child's framed answer; a child past its timer plus a grace period is killed.
// The time one exchange with a child may take: its compile's limit (the child's own timer) plus a grace
// period for sending the job and reading the result.
std::chrono::steady_clock::time_point exchange_deadline(const CompileBounds& bounds) {
  return std::chrono::steady_clock::now() +
         std::chrono::milliseconds(static_cast<long long>(bounds.timeout_s * 1000) + 10000);
}

Reply read_reply(Child& child, std::chrono::steady_clock::time_point deadline) {
  Reply r;
  std::uint64_t want = 0;
  char buf[65536];
  for (;;) {
    if (r.bytes.size() >= sizeof want) {
      std::memcpy(&want, r.bytes.data(), sizeof want);
      if (want > kMaxResultBytes) {
        r.too_big = true;
        child.kill();
        break;
      }
      if (r.bytes.size() - sizeof want >= want) break;
    }
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      child.kill();
      r.killed = true;
      break;
    }
    pollfd p{child.fd(), POLLIN, 0};
    const int n = ::poll(&p, 1, static_cast<int>(std::min<long long>(left.count(), 1000)));
    if (n <= 0) continue;
    const ssize_t got = ::read(child.fd(), buf, sizeof buf);
    if (got < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (got <= 0) break;  // the child is gone
    r.bytes.append(buf, static_cast<std::size_t>(got));
  }
  r.complete = r.bytes.size() >= sizeof want && r.bytes.size() - sizeof want == want && !r.too_big &&
               decode(r.bytes.substr(sizeof want), r.out);
  return r;
}

thread_local CompileChildren* this_threads_children = nullptr;

}  // namespace

struct CompileChildren::Kept {
  std::unique_ptr<Child> child;
};

CompileChildren::CompileChildren() : outer_(this_threads_children) { this_threads_children = this; }

CompileChildren::~CompileChildren() {
  this_threads_children = outer_;
  kept_.reset();  // kills and reaps the idle child
}

NvrtcOutcome run_nvrtc_in_child(const NvrtcJob& job, const CompileBounds& bounds, const std::string& what,
                                const std::string& lineage) {
  load_what_nvrtc_reads_once();
  CompileChildren* keeper = this_threads_children;
  std::unique_ptr<Child> child;
  bool reused = false;
  if (keeper && keeper->kept_) {
    // A kept child serves its own lineage under its own memory limit only; any other ends here.
    std::unique_ptr<Child> kept = std::move(keeper->kept_->child);
    keeper->kept_.reset();
    if (kept->lineage() == lineage && kept->memory_bytes() == bounds.memory_bytes && !kept->ended_while_idle()) {
      child = std::move(kept);
      reused = true;
    }
  }
  auto fresh = [&] {
    child = Child::start(bounds.memory_bytes, lineage, what);
    reused = false;
    if (keeper) ++keeper->started_;
  };
  // A kept child's address space still holds what earlier compiles left: a job that ran out of memory
  // there gets one fresh child, with the whole limit, before it is called too big.
  auto out_of_memory = [&](const Reply& r, int status, bool reaped) {
    if (r.complete)
      return !r.out.ok() && (r.out.status == NVRTC_ERROR_OUT_OF_MEMORY ||
                             r.out.log.find("catastrophic error: out of memory") != std::string::npos);
    return reaped && WIFEXITED(status) && WEXITSTATUS(status) == kOutOfMemoryExit;
  };
  const std::string request = request_bytes(job, bounds);
  Reply reply;
  int status = 0;
  bool sent = false, reaped = false;
  double elapsed_s = 0;
  // One exchange per attempt, each with its own deadline. A second attempt, in a fresh child, only after
  // a kept child refused the job (it ended while idle: the OOM killer, a signal) or ran out of memory.
  for (;;) {
    if (!child) fresh();
    const auto start = std::chrono::steady_clock::now();
    const auto deadline = exchange_deadline(bounds);
    sent = child->send(request, deadline);
    reply = sent ? read_reply(*child, deadline) : Reply{};
    status = 0;
    reaped = false;
    if (!reply.complete) {  // no result: the child is stopped (if it is not already) and reaped
      child->close_socket();
      child->kill();
      reaped = child->wait(&status);
    }
    elapsed_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (!(reused && (!sent || out_of_memory(reply, status, reaped)))) break;
    child.reset();
  }

  const std::string raise_time = " If this kernel needs longer, raise KJIT_COMPILE_TIMEOUT (seconds).";
  const std::string raise_memory = " If this kernel needs more, raise KJIT_COMPILE_MEMORY (e.g. 16G).";
  const std::string limit_note =
      " (kjit bounds each compile so that a template, e.g. from an untrusted manifest, cannot exhaust the machine.)";
  if (reply.complete) {
    NvrtcOutcome& out = reply.out;
    if (out_of_memory(reply, status,
                      reaped))  // the child is dropped (killed): one that ran out of memory is not reused
      throw CompileError("compiling " + what + " needed more than kjit's memory limit of " + mib(bounds.memory_bytes) +
                             " and was stopped." + raise_memory + limit_note,
                         out.log, job.name_expression, job.flags, "");
    if (keeper) keeper->kept_.reset(new CompileChildren::Kept{std::move(child)});
    if (bounds.untrusted && !out.sandbox_note.empty()) refuse_unfiltered(what, out.sandbox_note);
    return std::move(out);
  }
  // No result: why the child ended (it was reaped above). Without its status (reaped by someone else),
  // the clock says.
  const bool timed_out = reply.killed || (reaped && WIFSIGNALED(status) && WTERMSIG(status) == SIGALRM) ||
                         ((!reaped || !sent) && elapsed_s >= bounds.timeout_s);
  if (timed_out)
    throw CompileError("compiling " + what + " took longer than kjit's limit of " + seconds(bounds.timeout_s) +
                           " and was stopped." + raise_time + limit_note,
                       "", job.name_expression, job.flags, "");
  if (reply.too_big)
    throw CompileError("compiling " + what + " produced more than " + std::to_string(kMaxResultBytes >> 30) +
                           " GiB of output and was stopped.",
                       "", job.name_expression, job.flags, "");
  if (reaped && WIFEXITED(status) && WEXITSTATUS(status) == kOutOfMemoryExit)
    throw CompileError("compiling " + what + " needed more than kjit's memory limit of " + mib(bounds.memory_bytes) +
                           " and was stopped." + raise_memory + limit_note,
                       "", job.name_expression, job.flags, "");
  std::string how = "ended without a result";
  if (reaped && WIFSIGNALED(status))
    how = std::string("was killed by signal ") + std::to_string(WTERMSIG(status)) + " (" + strsignal(WTERMSIG(status)) +
          ")";
  else if (reaped && WIFEXITED(status))
    how = "exited with status " + std::to_string(WEXITSTATUS(status));
  throw CompileError("the compiler process for " + what + " " + how + "; with kjit's memory limit of " +
                         mib(bounds.memory_bytes) + " per compile, that is most often the limit." + raise_memory,
                     "", job.name_expression, job.flags, "");
}

NvrtcOutcome run_nvrtc_without_files(const NvrtcJob& job, bool untrusted, const std::string& what) {
  // NVRTC's precompiled header is a file in job.pch_dir: only there may NVRTC open files, through a
  // supervisor on this thread (pch_supervise). Never for a template from a manifest.
  const bool pch = !job.pch_dir.empty() && !untrusted;
  std::vector<sock_filter> filter = no_files_filter(pch);
  std::vector<sock_filter> plain = pch ? no_files_filter(false) : std::vector<sock_filter>{};
  NvrtcOutcome out;
  std::exception_ptr error;
  // The fork gate is held from before the worker starts until it has been joined, not only around its
  // NVRTC calls: a thread that compiled runs NVRTC's thread-exit clean-up when it ends (pthread key
  // destructors that lock two of NVRTC's own mutexes), after run_nvrtc has returned. A fork made then
  // handed the child those mutexes held by a thread it does not have, and the child's first compile waited
  // on them forever (ForkSafety.AForkWhileAnotherThreadCompilesInProcessMakesAChildThatCompiles, 9 runs in
  // 75 on a loaded machine). join() returns only once the worker has run them.
  auto no_fork_until_joined = hold_off_forks();
  load_what_nvrtc_reads_once();
  // The worker's end of the compile wakes the supervisor; the pipe is closed however this ends (a thread
  // that cannot be started included).
  int pipe_fds[2] = {-1, -1};
  if (pch && ::pipe2(pipe_fds, O_CLOEXEC) != 0) pipe_fds[0] = pipe_fds[1] = -1;
  const cache::UniqueFd stop_read(pipe_fds[0]), stop_write(pipe_fds[1]);
  std::mutex mu;
  std::condition_variable cv;
  int listener = -2;  // -2: not known yet; -1: no supervisor (the compile runs without the PCH)
  // A filter installed on a thread binds that thread only (and its children): a fresh one per compile.
  std::thread worker([&] {
    try {
      int fd = -1;
      std::string note;
      NvrtcJob without_pch;
      const NvrtcJob* run = &job;
      const bool supervised = pch && stop_read && forbid_files(filter, &fd).empty();
      if (!supervised) {
        if (pch) {  // no supervisor: the plain filter, and NVRTC is not asked for a PCH it could not write
          without_pch = job.without_pch();
          run = &without_pch;
          fd = -1;
        }
        note = forbid_files(pch ? plain : filter);
      }
      if (pch) {
        std::lock_guard<std::mutex> lock(mu);
        listener = fd;
        cv.notify_one();
      }
      if (!note.empty() && untrusted) {  // fail closed: never compiled with file access
        out.sandbox_note = note;
        return;
      }
      // The worker's own hold too, lent by its caller's (a waiting fork waits for this thread): a fork that
      // NVRTC made on this thread would otherwise wait for that hold, which waits for this thread, until
      // KJIT_COMPILE_TIMEOUT.
      auto no_fork_now = hold_off_forks_beside(no_fork_until_joined);
      out = run_nvrtc(*run);
      out.sandbox_note = note;
    } catch (...) {
      error = std::current_exception();
    }
    if (pch) {
      {
        std::lock_guard<std::mutex> lock(mu);
        if (listener == -2) listener = -1;
        cv.notify_one();
      }
      if (stop_write) (void)::write(stop_write.get(), "x", 1);
    }
  });
  std::exception_ptr supervisor_error;  // kept until the worker is joined (a joinable thread must not be dropped)
  if (pch) {
    int fd;
    {
      std::unique_lock<std::mutex> lock(mu);
      cv.wait(lock, [&] { return listener != -2; });
      fd = listener;
    }
    if (fd >= 0) {
      const cache::UniqueFd listening(fd);  // closed first: the worker's file requests then fail, not wait
      try {
        pch_supervise(fd, stop_read.get(), job.pch_dir);
      } catch (...) {
        supervisor_error = std::current_exception();
      }
    }
  }
  worker.join();
  if (supervisor_error) std::rethrow_exception(supervisor_error);
  if (error) std::rethrow_exception(error);
  if (untrusted && !out.sandbox_note.empty()) refuse_unfiltered(what, out.sandbox_note);
  return out;
}

bool compile_children_are_safe() noexcept {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  return false;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
  return false;
#else
  return true;
#endif
#else
  return true;
#endif
}

}  // namespace kjit
