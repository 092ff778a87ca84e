// The compiler preload: what only a process's first compile pays (loading libnvrtc and its builtins,
// NVRTC's and ptxas's first-use set-up: 20-35 ms), paid on a background thread before that compile is
// asked for, so that the first kernel a process compiles costs what any later one does. The Python
// package starts it when the process starts CUDA through torch (a process that will launch kernels);
// a C++ program calls preload_compiler() itself.
//
// The thread also locates the CUDA toolkit, starts OpenSSL's SHA-256 and loads kjit's built-in templates
// (their headers, the 1.6 MB of CUDA's 16-bit float headers among them, read and hashed into the header
// index), so that a warm start gains too and no op's first call reads them. Its time counts in
// kjit.stats()["phase_ms"] like any other thread's. It loads NVRTC only where the process may compile (never in strict mode),
// and runs nowhere when KJIT_PRELOAD_COMPILER=0, when the settings are bad (the first real use reports
// them) or when the process may use one CPU only (the thread would slow the one that waits). Failures
// (no NVRTC here) are dropped: the first compile meets them again and raises them.
//
// Forks: a fork() taken while the thread is inside the dynamic loader or NVRTC would leave their locks
// held in the child, so a fork handler makes fork() wait for the preload to end (at most its 20-35 ms).
// kjit's own compile children are forked under the fork gate, which the preload holds around each of
// those steps, and do not wait.
#pragma once

#include <optional>

namespace kjit {

// Starts the preload once per process (later calls return at once). `sm`: the architecture the process
// will compile for (90 for sm_90), when known; 0 or one this NVRTC cannot make a cubin for: sm_90, else
// its newest. True when a thread was started by this call or an earlier one.
bool preload_compiler(int sm = 0) noexcept;

// Waits until the preload (if one was started) has ended. Python's exit hook calls it, so that no NVRTC
// call runs while the interpreter and the process's static objects are torn down; a C++ program that
// starts the preload calls it before it returns from main() (or calls exit()).
void wait_for_compiler_preload() noexcept;

// What the preload did, once it has ended; nullopt before, or when none ran.
struct CompilerPreloadReport {
  double ms = 0;          // how long it took
  bool compiled = false;  // NVRTC was loaded and its compile ran (false in strict mode, or with no NVRTC here)
};
std::optional<CompilerPreloadReport> compiler_preload_report() noexcept;

}  // namespace kjit
