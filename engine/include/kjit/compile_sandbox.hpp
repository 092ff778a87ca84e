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
// The child is forked (no helper binary to find). In-process compiles hold the fork gate shared, and a
// fork holds it exclusively, so no thread is inside NVRTC when a child is made.
#pragma once

#include <cstdint>
#include <mutex>
#include <shared_mutex>
#include <string>

#include "kjit/nvrtc_job.hpp"

namespace kjit {

struct CompileBounds {
  double timeout_s = 300;                    // KJIT_COMPILE_TIMEOUT
  std::uint64_t memory_bytes = 8ull << 30;   // KJIT_COMPILE_MEMORY
  bool untrusted = false;                    // from a manifest: never compiled without the file filter
};

// Runs `job` in a child process under `bounds`. Throws CompileError naming the limit (and the setting
// that raises it) when the child exceeds one, Error when no child can be made or it dies otherwise.
// The child always installs the file filter; with bounds.untrusted and no way to install it here (no seccomp, another CPU), the compile
// is refused (Error): a template from a manifest is never compiled with file access.
NvrtcOutcome run_nvrtc_in_child(const NvrtcJob& job, const CompileBounds& bounds, const std::string& what);

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

// Held (shared) around every in-process NVRTC call, so that no fork happens while one runs.
std::shared_lock<std::shared_mutex> hold_off_forks();

}  // namespace kjit
