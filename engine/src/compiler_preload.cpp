#include "kjit/compiler_preload.hpp"

#include <pthread.h>

#include <chrono>
#include <cstdlib>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>

#include "kjit/cache/sha256.hpp"
#include "kjit/compile_options.hpp"
#include "kjit/compile_sandbox.hpp"
#include "kjit/compiler.hpp"
#include "kjit/cuda_toolkit.hpp"
#include "kjit/nvrtc_job.hpp"
#include "kjit/nvrtc_library.hpp"
#include "kjit/settings.hpp"
#include "kjit/target.hpp"
#include "kjit/usable_cpus.hpp"

namespace kjit {
namespace {

struct Preload {
  std::mutex mu;
  std::condition_variable changed;
  bool started = false;
  bool running = false;  // the thread has not ended
  bool working = false;  // the thread holds the fork gate and works (a fork waits until it is false)
  std::optional<CompilerPreloadReport> report;  // once it ended
};

Preload& state() {
  static Preload* p = new Preload;  // never destroyed: the fork handlers and the thread use it until exit
  return *p;
}

thread_local bool on_the_preload_thread = false;

// Held by the thread that started the preload: its destructor waits for it. exit() runs the calling
// thread's thread_local destructors before any exit handler, so that wait comes before the static objects
// of every library go, those that the preload itself made included. An exit handler alone came too late:
// NVRTC, loaded on the preload thread, registers its destructors as it loads, after kjit's handler, so
// exit() ran them first, while the loader was still running NVRTC's constructors on the thread (a crash in
// _dl_init, about one exit in 200 under load). A thread that ends before the process waits here too (at
// most the preload's tens of milliseconds).
struct WaitsWhenThisThreadEnds {
  ~WaitsWhenThisThreadEnds() { wait_for_compiler_preload(); }
};

// fork() by any thread: wait until the preload is not working, and keep it from starting to work until the
// fork is made (the state's mutex stays locked across the fork; the parent and child handlers unlock it).
// A fork by kjit's own compile children holds the fork gate exclusively: the preload cannot be working then,
// and waits for the gate without the state's mutex. The preload's own thread never waits for itself.
void before_fork() {
  Preload& p = state();
  std::unique_lock<std::mutex> lock(p.mu);
  if (!on_the_preload_thread) p.changed.wait(lock, [&] { return !p.working; });
  lock.release();
}
void after_fork_in_parent() { state().mu.unlock(); }
void after_fork_in_child() {
  Preload& p = state();
  p.started = p.running = p.working = false;  // the child has no such thread
  p.mu.unlock();
}

bool run_compile(int sm) {
  // One real compile (never one of NVRTC's own cache) with the options of kjit's own kernels: NVRTC's and
  // ptxas's set-up for the target the process will compile for (sm_90 when it is not known, or unknown here).
  CompilePlan plan;
  try {
    plan = Compiler::plan(Target{sm > 0 ? sm : 90, Target::Kind::Sm});
  } catch (const std::exception&) {
    plan = Compiler::plan(Target{90, Target::Kind::Sm});
  }
  NvrtcJob job;
  job.source = "extern \"C\" __global__ void kjit_preload(float* y, float x) { y[threadIdx.x] = x; }\n";
  job.program_name = "kjit_preload.cu";
  job.name_expression = "kjit_preload";
  job.flags = CompileOptions::library().nvrtc_flags(plan.actual);
  job.flags.push_back("--no-source-include");
  job.flags = NvrtcLibrary::get().flags_for_this_version(std::move(job.flags));
  job.want_cubin = plan.output == cache::OutputKind::Cubin;
  return run_nvrtc_without_files(job, /*untrusted=*/false, "the compiler preload").ok();
}

void run(int sm, bool load_nvrtc, bool compile) {
  on_the_preload_thread = true;
  Preload& p = state();
  const auto start = std::chrono::steady_clock::now();
  {
    // The fork gate, held across all the work: no fork (another thread's or a compile child's) catches this
    // thread inside the loader, OpenSSL or NVRTC. Taken only without waiting: a compile child being forked
    // holds it, and its fork handler must not find this thread both waiting for the gate and working.
    std::unique_lock<std::mutex> lock(p.mu);
    while (!try_hold_off_forks_on_this_thread()) p.changed.wait_for(lock, std::chrono::milliseconds(1));
    p.working = true;
  }
  bool compiled = false;
  try {
    // What every template load needs: the toolkit's headers found (OpenSSL's digest was started already).
    (void)cuda_toolkit();
    if (load_nvrtc) {
      load_what_nvrtc_reads_once();  // loads NVRTC, then its builtins
      if (compile) compiled = run_compile(sm);
    }
  } catch (...) {
    // No NVRTC or toolkit here: the first compile meets the same error and reports it.
  }
  std::lock_guard<std::mutex> lock(p.mu);
  stop_holding_off_forks_on_this_thread();
  p.working = p.running = false;
  p.report = CompilerPreloadReport{
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count(), compiled};
  p.changed.notify_all();
}

}  // namespace

bool preload_compiler(int sm) noexcept {
  Preload& p = state();
  std::lock_guard<std::mutex> lock(p.mu);
  if (p.started) return true;
  try {
    const Settings& s = settings();
    if (!s.preload_compiler || usable_cpus() < 2) return false;
    const bool load_nvrtc = s.cache_mode != CacheMode::Strict;
    // KJIT_COMPILE_ISOLATION=always: every compile in a child process, this one too, so none here.
    const bool compile = s.compile_isolation != CompileIsolation::Always;
    static const bool handlers = ::pthread_atfork(&before_fork, &after_fork_in_parent, &after_fork_in_child) == 0;
    if (!handlers) return false;  // without them a fork could catch the thread inside the loader
    // At exit, the thread ends before the static objects made so far are destroyed (the ones it makes
    // itself, NVRTC's library and the toolkit, never are). OpenSSL is started here, not on the thread, so
    // that its own exit handler comes before this one and runs after it.
    (void)cache::Sha256::of("kjit");
    static const bool waits_at_exit = std::atexit([] { wait_for_compiler_preload(); }) == 0;
    (void)waits_at_exit;
    // First of all at exit() from this thread (above); the handler covers an exit() from another thread.
    static thread_local WaitsWhenThisThreadEnds waits_when_this_thread_ends;
    (void)waits_when_this_thread_ends;
    std::thread(run, sm, load_nvrtc, compile).detach();
  } catch (...) {
    return false;  // bad settings (reported by the first real use), or no thread to be had
  }
  p.started = p.running = true;
  return true;
}

void wait_for_compiler_preload() noexcept {
  Preload& p = state();
  std::unique_lock<std::mutex> lock(p.mu);
  p.changed.wait(lock, [&] { return !p.running; });
}

std::optional<CompilerPreloadReport> compiler_preload_report() noexcept {
  Preload& p = state();
  std::lock_guard<std::mutex> lock(p.mu);
  return p.report;
}

}  // namespace kjit
