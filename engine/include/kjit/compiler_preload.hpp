// The compiler preload: what only a process's first compile pays (loading libnvrtc and its builtins,
// NVRTC's and ptxas's first-use set-up: 15-35 ms), paid on a background thread before that compile is
// asked for, so that the first kernel a process compiles costs what any later one does. The Python
// package starts it when the process starts CUDA through torch (a process that will launch kernels);
// a C++ program calls preload_compiler() itself (after any register_toolkit_root()).
//
// The thread also locates the CUDA toolkit, which template loads need (and the call starts OpenSSL's SHA-256,
// about a millisecond where the process has not started OpenSSL yet), so a warm start gains too. It writes
// nothing to disk and counts in no kjit.stats() figure. It loads NVRTC only where the process may compile
// (never in strict mode), and compiles nothing under KJIT_COMPILE_ISOLATION=always (where every compile
// runs in a child process). It runs nowhere when KJIT_PRELOAD_COMPILER=0, when the settings are bad (the
// first real use reports them) or when the process may use one CPU only (the thread would slow the one
// that waits). Failures (no NVRTC here) are dropped: the first compile meets them again and raises them.
//
// Forks: the thread holds the fork gate (fork_gate.hpp) across its work, so no compile child is forked
// meanwhile, and fork handlers make any other fork() wait until it is done (at most its 15-35 ms), so that
// no child inherits it inside the loader or NVRTC. It takes the gate only without waiting for it,
// so a fork never waits for a thread that waits for the fork. A forked child has no preload (it may start
// its own).
#pragma once

#include <optional>

namespace kjit {

// Starts the preload once per process (later calls return at once). `sm`: the architecture the process
// will compile for (90 for sm_90; 0: unknown, then sm_90), planned as kjit's compiles plan it (a cubin, or
// PTX for a GPU newer than this NVRTC). True when a thread was started by this call or an earlier one.
bool preload_compiler(int sm = 0) noexcept;

// Waits until the preload (if one was started) has ended. Python's exit hook calls it (before the
// interpreter finalizes), and so does exit() itself: first of all on the thread that started the preload
// (before any exit handler or static destructor runs), and from an exit handler that preload_compiler()
// registers where another thread calls exit().
void wait_for_compiler_preload() noexcept;

// What the preload did, once it has ended; nullopt before, or when none ran.
struct CompilerPreloadReport {
  double ms = 0;          // how long it took
  bool compiled = false;  // NVRTC was loaded and its compile ran (false in strict mode, under
                          // KJIT_COMPILE_ISOLATION=always, or with no NVRTC here)
};
std::optional<CompilerPreloadReport> compiler_preload_report() noexcept;

}  // namespace kjit
