// Where this process's cold start went: the total wall time of each step that turns a call into a
// loaded kernel, summed over threads (kjit.stats()["phase_ms"], the bench's first-call breakdown).
//   template      reading a template and every header it includes, scanning and hashing them
//   key           computing cache keys (the specialization's text, options and digests, SHA-256)
//   store         looking entries up in the stores: read and validate on disk, the remote tier
//   compile       NVRTC: loading it (once per process), nvrtcCompileProgram and its outputs, in-process
//                 or in a compile child
//   module_load   cuLibraryLoadData (and the kernel lookup) of a compiled or stored binary
// Counted on every path, a few nanoseconds each (two clock reads and an atomic add).
#pragma once

#include <array>
#include <chrono>
#include <cstddef>

namespace kjit {

enum class Phase : std::size_t { Template, Key, Store, Compile, ModuleLoad };
inline constexpr std::size_t kPhaseCount = 5;

const char* phase_name(Phase p) noexcept;
void add_phase_time(Phase p, std::chrono::steady_clock::duration d) noexcept;
// Milliseconds per phase since the start of the process (or the last reset), indexed by Phase.
std::array<double, kPhaseCount> phase_times_ms() noexcept;
void reset_phase_times() noexcept;

// Adds the time from its construction to its destruction to `p`.
class PhaseTimer {
 public:
  explicit PhaseTimer(Phase p) noexcept : phase_(p), start_(std::chrono::steady_clock::now()) {}
  ~PhaseTimer() { add_phase_time(phase_, std::chrono::steady_clock::now() - start_); }
  PhaseTimer(const PhaseTimer&) = delete;
  PhaseTimer& operator=(const PhaseTimer&) = delete;

 private:
  Phase phase_;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace kjit
