// A stand-in libnvrtc.so for test_fork_safety (loaded through KJIT_NVRTC_LIBRARY): every NVRTC entry point
// kjit loads forwards to the real library (KJIT_TEST_REAL_NVRTC), and a fork handler counts each fork()
// made while another thread of the process was inside one of them. Such a fork hands the compile child a
// copy of NVRTC's internal state mid-call (a lock held, an initialization half done), and the child's own
// compile can then wait forever. test_fork_safety reads the count back (kjit_test_forks_inside_nvrtc).
// A thread that compiled is inside NVRTC once more when it ends: the real library's pthread key destructors
// lock two of its mutexes then (seen in gdb: __nptl_deallocate_tsd -> libnvrtc -> pthread_mutex_lock, the
// mutexes a hung fork child waited on). The stand-in has such a destructor too, counted the same way.
#include <dlfcn.h>
#include <nvrtc.h>
#include <pthread.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>

namespace {
std::atomic<int> inside{0};       // threads inside an NVRTC call right now
std::atomic<int> overlapping{0};  // forks made while inside > 0
std::mutex last_mu;
std::string last_call;  // the call one of those threads was in (the last one seen)
std::atomic<const char*> any_current{nullptr};
std::atomic<int> forks_begun{0};  // every fork, counted by the prepare handler
std::atomic<int> in_exit{0};      // threads inside the thread-exit clean-up right now
pthread_key_t exit_key;           // set on each thread that compiled, as the real NVRTC does

struct Inside {
  explicit Inside(const char* name) {
    inside.fetch_add(1);
    any_current.store(name);
  }
  ~Inside() { inside.fetch_sub(1); }
};

// The stand-in's share of NVRTC's thread-exit clean-up. With KJIT_TEST_NVRTC_EXIT_WAITS_FOR_A_FORK set, it
// waits (at most 2 s) for a fork to begin: a fork that does not wait for the clean-up lands inside it.
void thread_exit_clean_up(void*) {
  Inside in("NVRTC's thread-exit clean-up (a pthread key destructor of a thread that compiled)");
  in_exit.fetch_add(1);
  if (std::getenv("KJIT_TEST_NVRTC_EXIT_WAITS_FOR_A_FORK")) {
    const int seen = forks_begun.load();
    for (int ms = 0; ms < 2000 && forks_begun.load() == seen; ++ms) ::usleep(1000);
  }
  in_exit.fetch_sub(1);
}

void* real() {
  static void* handle = [] {
    const char* path = std::getenv("KJIT_TEST_REAL_NVRTC");
    void* h = path ? ::dlopen(path, RTLD_NOW | RTLD_LOCAL) : nullptr;
    if (!h) {
      std::fprintf(stderr, "nvrtc_fork_watch: cannot load KJIT_TEST_REAL_NVRTC (%s)\n", path ? path : "unset");
      std::abort();
    }
    if (pthread_key_create(&exit_key, &thread_exit_clean_up) != 0) std::abort();
    pthread_atfork(
        [] {
          forks_begun.fetch_add(1);
          if (inside.load() > 0) {
            overlapping.fetch_add(1);
            std::lock_guard<std::mutex> lock(last_mu);
            const char* c = any_current.load();
            last_call = c ? c : "?";
          }
        },
        nullptr, nullptr);
    return h;
  }();
  return handle;
}

template <typename Fn>
Fn lookup(const char* name) {
  void* f = ::dlsym(real(), name);
  if (!f) {
    std::fprintf(stderr, "nvrtc_fork_watch: the real NVRTC has no %s\n", name);
    std::abort();
  }
  return reinterpret_cast<Fn>(f);
}
}  // namespace

// Each forwarder: count the thread in, call the real entry point, count it out.
#define KJIT_FORWARD(ret, name, params, args)                \
  extern "C" ret name params {                               \
    static const auto fn = lookup<decltype(&::name)>(#name); \
    Inside in(#name);                                        \
    return fn args;                                          \
  }

KJIT_FORWARD(nvrtcResult, nvrtcVersion, (int* major, int* minor), (major, minor))
KJIT_FORWARD(const char*, nvrtcGetErrorString, (nvrtcResult r), (r))
KJIT_FORWARD(nvrtcResult, nvrtcGetNumSupportedArchs, (int* n), (n))
KJIT_FORWARD(nvrtcResult, nvrtcGetSupportedArchs, (int* archs), (archs))
KJIT_FORWARD(nvrtcResult, nvrtcCreateProgram,
             (nvrtcProgram * prog, const char* src, const char* name, int n, const char* const* headers,
              const char* const* names),
             (prog, src, name, n, headers, names))
KJIT_FORWARD(nvrtcResult, nvrtcDestroyProgram, (nvrtcProgram * prog), (prog))
// With KJIT_TEST_NVRTC_COMPILE_PIDS set, also writes "kjit-test-compile-pid <pid>" to stderr: which
// process compiled (this one, or a compile child, which can open no file but keeps stderr).
extern "C" nvrtcResult nvrtcCompileProgram(nvrtcProgram prog, int n, const char* const* options) {
  static const auto fn = lookup<decltype(&::nvrtcCompileProgram)>("nvrtcCompileProgram");
  if (std::getenv("KJIT_TEST_NVRTC_COMPILE_PIDS")) {
    const std::string line = "kjit-test-compile-pid " + std::to_string(::getpid()) + "\n";
    (void)!::write(2, line.data(), line.size());
  }
  Inside in("nvrtcCompileProgram");
  (void)pthread_setspecific(exit_key, &exit_key);  // any value but null: the destructor runs at thread exit
  return fn(prog, n, options);
}
KJIT_FORWARD(nvrtcResult, nvrtcGetPTXSize, (nvrtcProgram prog, size_t* size), (prog, size))
KJIT_FORWARD(nvrtcResult, nvrtcGetPTX, (nvrtcProgram prog, char* ptx), (prog, ptx))
KJIT_FORWARD(nvrtcResult, nvrtcGetCUBINSize, (nvrtcProgram prog, size_t* size), (prog, size))
KJIT_FORWARD(nvrtcResult, nvrtcGetCUBIN, (nvrtcProgram prog, char* cubin), (prog, cubin))
KJIT_FORWARD(nvrtcResult, nvrtcGetProgramLogSize, (nvrtcProgram prog, size_t* size), (prog, size))
KJIT_FORWARD(nvrtcResult, nvrtcGetProgramLog, (nvrtcProgram prog, char* log), (prog, log))
KJIT_FORWARD(nvrtcResult, nvrtcAddNameExpression, (nvrtcProgram prog, const char* expr), (prog, expr))
KJIT_FORWARD(nvrtcResult, nvrtcGetLoweredName, (nvrtcProgram prog, const char* expr, const char** lowered),
             (prog, expr, lowered))
#undef KJIT_FORWARD

extern "C" int kjit_test_forks_inside_nvrtc(char* last, int size) {
  std::lock_guard<std::mutex> lock(last_mu);
  if (last && size > 0) std::snprintf(last, static_cast<std::size_t>(size), "%s", last_call.c_str());
  return overlapping.load();
}

// Threads inside the stand-in's thread-exit clean-up now.
extern "C" int kjit_test_threads_in_nvrtc_exit() { return in_exit.load(); }
