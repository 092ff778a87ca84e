// The compile sandbox: NVRTC with no file access at all (every header is handed to it in memory), in
// this process on a filtered thread, or in a child process with a wall-clock and a memory limit (for
// templates that may come from anyone: rebuilt from a manifest).
//
// NVRTC cannot be interrupted or capped inside a process, and its preprocessor opens whatever an
// #include or __has_include names, in whatever spelling (macros, digraphs, comments, line splices).
// So the child: sets RLIMIT_AS to what it has plus the memory limit, arms a timer that kills it at the
// time limit, and installs a seccomp filter that answers every path-taking file syscall
// (open, stat, access, readlink, exec...) with ENOENT, after which NVRTC can open or probe no file:
// it sees only the headers handed to it in memory. The result comes back on a pipe.
//
// The child is forked (no helper binary to find), under the fork gate (fork_gate.hpp), so no thread is
// inside NVRTC when a child is made. The job goes to the child
// on a socket and the result comes back on it; a child serves jobs until its socket closes, so a thread
// that compiles many kernels (`kjit warm -j N`) can keep one child (CompileChildren) instead of forking
// one per compile, and pays NVRTC's per-process start-up once.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include "kjit/fork_gate.hpp"
#include "kjit/nvrtc_job.hpp"

namespace kjit {

struct CompileBounds {
  double timeout_s = 300;                   // KJIT_COMPILE_TIMEOUT
  std::uint64_t memory_bytes = 8ull << 30;  // KJIT_COMPILE_MEMORY
  bool untrusted = false;                   // from a manifest: never compiled without the file filter
};

// Runs `job` in a child process under `bounds`. Throws CompileError naming the limit (and the setting
// that raises it) when the child exceeds one, Error when no child can be made or it dies otherwise.
// The child always installs the file filter; with bounds.untrusted and no way to install it here (no seccomp, another
// CPU), the compile is refused (Error): a template from a manifest is never compiled with file access. `lineage` names
// whose code the job is (the template's digest and its compile options, macro text included): a kept child
// (CompileChildren) compiles only jobs of one lineage, so that a job that subverted its compiler reaches no other
// code's binaries, only those of the same source and options with other typed template arguments.
NvrtcOutcome run_nvrtc_in_child(const NvrtcJob& job, const CompileBounds& bounds, const std::string& what,
                                const std::string& lineage);

// While one lives on a thread, that thread's run_nvrtc_in_child keeps its child after a compile and
// sends it the thread's next job of the same lineage and memory limit (a child serves one lineage for
// life; a job of another ends it and forks a fresh one). A child that failed a job (time or memory limit,
// a crash) is never reused; a job that ran out of memory in a kept child (whose address space still
// holds what earlier compiles left) is tried once more in a fresh one. The destructor ends the kept child. Used by
// `kjit warm`/`export` with -j > 1: every worker thread holds one, so each of the N children pays NVRTC's first-compile
// cost once, not once per kernel. Nests: the innermost on a thread is used. Neither copyable nor movable (it is
// registered).
class CompileChildren {
 public:
  CompileChildren();
  ~CompileChildren();
  CompileChildren(const CompileChildren&) = delete;
  CompileChildren& operator=(const CompileChildren&) = delete;
  // Children forked for this thread while this one was in use.
  std::size_t started() const noexcept { return started_; }

  struct Kept;  // the idle child (compile_sandbox.cpp)

 private:
  friend NvrtcOutcome run_nvrtc_in_child(const NvrtcJob&, const CompileBounds&, const std::string&, const std::string&);
  std::unique_ptr<Kept> kept_;
  CompileChildren* outer_;
  std::size_t started_ = 0;
};

// Runs `job` in this process, on a fresh thread whose seccomp filter answers every file syscall ENOENT:
// NVRTC reads nothing but the headers handed to it (so nothing kjit did not hash). Where the filter
// cannot be installed, the compile runs unfiltered and outcome.sandbox_note says why.
// With `untrusted` (a template from a manifest) and no filter, it is refused (Error), not compiled.
NvrtcOutcome run_nvrtc_without_files(const NvrtcJob& job, bool untrusted, const std::string& what);

// False in a sanitizer build: ASan/TSan runtimes keep locks that a fork from a multithreaded process can
// leave held in the child (and ASan reserves its heap up front, so RLIMIT_AS bounds nothing). There,
// compiles meant for a child run in-process on the filtered thread: no file access, but no time or
// memory bound.
bool compile_children_are_safe() noexcept;

// Loads what NVRTC would open on its first compile (its builtins library), once per process, under the
// fork gate (loads NVRTC itself first). Every compile that may open no file calls it first.
void load_what_nvrtc_reads_once();

}  // namespace kjit
