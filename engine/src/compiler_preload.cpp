#include "kjit/compiler_preload.hpp"

#include <pthread.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>

#include "kjit/cache/sha256.hpp"
#include "kjit/compile_options.hpp"
#include "kjit/compile_sandbox.hpp"
#include "kjit/cuda_toolkit.hpp"
#include "kjit/nvrtc_job.hpp"
#include "kjit/nvrtc_library.hpp"
#include "kjit/settings.hpp"
#include "kjit/target.hpp"
#include "kjit/template.hpp"
#include "kjit/usable_cpus.hpp"

namespace kjit {
namespace {

struct Preload {
  std::mutex mu;
  std::condition_variable ended;
  bool started = false;
  bool running = false;
  std::optional<CompilerPreloadReport> report;  // once it ended
};

Preload& state() {
  static Preload* p = new Preload;  // never destroyed: a fork handler and the thread may use it until exit
  return *p;
}

thread_local bool on_the_preload_thread = false;

void wait_unless_forking_a_compile_child() {
  // kjit's own fork holds the fork gate, which the preload takes around each of its steps: it waits for
  // those steps already, and waiting here would deadlock with one that waits for the gate. Nor may the
  // preload's own thread wait for itself, should anything it calls ever fork.
  if (!this_thread_forks_a_compile_child() && !on_the_preload_thread) wait_for_compiler_preload();
}

// A cubin for `sm` when this NVRTC makes one, else for the newest architecture it knows: the set-up a
// first compile pays is mostly NVRTC's and ptxas's own, whatever the target.
Target preload_target(int sm) {
  const std::vector<int>& archs = NvrtcLibrary::get().supported_archs();
  if (std::find(archs.begin(), archs.end(), sm) != archs.end()) return Target{sm, Target::Kind::Sm};
  if (std::find(archs.begin(), archs.end(), 90) != archs.end()) return Target{90, Target::Kind::Sm};
  return Target{archs.empty() ? 90 : *std::max_element(archs.begin(), archs.end()), Target::Kind::Sm};
}

void run(int sm, bool load_nvrtc) {
  on_the_preload_thread = true;
  const auto start = std::chrono::steady_clock::now();
  bool compiled = false;
  try {
    // What every template load needs: the toolkit's headers found, OpenSSL's digest started.
    (void)cuda_toolkit();
    (void)cache::Sha256::of("kjit");
    // kjit's built-in templates read and hashed, with the CUDA headers they include (1.6 MB of 16-bit float
    // headers), into the header index: the first call of each op then reads its own file only.
    for (const auto& name : Template::builtin_names()) {
      try {
        (void)Template::builtin(name);
      } catch (...) {
      }
    }
    if (load_nvrtc) {
      {
        auto gate = hold_off_forks();  // no compile child forked while the loader is busy
        (void)NvrtcLibrary::get();
      }
      load_what_nvrtc_reads_once();
      // One real compile (not one of NVRTC's own cache): its front end, NVVM and ptxas set up.
      NvrtcJob job;
      job.source = "extern \"C\" __global__ void kjit_preload(float* y, float x) { y[threadIdx.x] = x; }\n";
      job.program_name = "kjit_preload.cu";
      job.name_expression = "kjit_preload";
      job.flags = CompileOptions{}.nvrtc_flags(preload_target(sm));
      job.flags.push_back("--no-source-include");
      if (NvrtcLibrary::get().caches_compiles()) job.flags.push_back("--no-cache");
      compiled = run_nvrtc_without_files(job, /*untrusted=*/false, "the compiler preload").ok();
    }
  } catch (...) {
    // No NVRTC or toolkit here: the first compile meets the same error and reports it.
  }
  Preload& p = state();
  std::lock_guard<std::mutex> lock(p.mu);
  p.running = false;
  p.report = CompilerPreloadReport{
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count(), compiled};
  p.ended.notify_all();
}

}  // namespace

bool preload_compiler(int sm) noexcept {
  Preload& p = state();
  std::lock_guard<std::mutex> lock(p.mu);
  if (p.started) return true;
  bool load_nvrtc = false;
  try {
    const Settings& s = settings();
    if (!s.preload_compiler || usable_cpus() < 2) return false;
    load_nvrtc = s.cache_mode != CacheMode::Strict;
    static const bool handler = ::pthread_atfork(&wait_unless_forking_a_compile_child, nullptr, nullptr) == 0;
    if (!handler) return false;  // without it a fork could catch the thread inside the loader
    std::thread(run, sm, load_nvrtc).detach();
  } catch (...) {
    return false;  // bad settings (reported by the first real use), or no thread to be had
  }
  p.started = p.running = true;
  return true;
}

void wait_for_compiler_preload() noexcept {
  Preload& p = state();
  std::unique_lock<std::mutex> lock(p.mu);
  p.ended.wait(lock, [&] { return !p.running; });
}

std::optional<CompilerPreloadReport> compiler_preload_report() noexcept {
  Preload& p = state();
  std::lock_guard<std::mutex> lock(p.mu);
  return p.report;
}

}  // namespace kjit
