#include "kjit/phase_time.hpp"

#include <atomic>
#include <cstdint>

namespace kjit {
namespace {
std::array<std::atomic<std::int64_t>, kPhaseCount>& totals_ns() {
  static std::array<std::atomic<std::int64_t>, kPhaseCount> t{};
  return t;
}
}  // namespace

const char* phase_name(Phase p) noexcept {
  switch (p) {
    case Phase::Template: return "template";
    case Phase::Key: return "key";
    case Phase::Store: return "store";
    case Phase::Compile: return "compile";
    case Phase::ModuleLoad: return "module_load";
  }
  return "?";
}

void add_phase_time(Phase p, std::chrono::steady_clock::duration d) noexcept {
  totals_ns()[static_cast<std::size_t>(p)].fetch_add(std::chrono::duration_cast<std::chrono::nanoseconds>(d).count(),
                                                     std::memory_order_relaxed);
}

std::array<double, kPhaseCount> phase_times_ms() noexcept {
  std::array<double, kPhaseCount> out{};
  for (std::size_t i = 0; i < kPhaseCount; ++i)
    out[i] = static_cast<double>(totals_ns()[i].load(std::memory_order_relaxed)) / 1e6;
  return out;
}

void reset_phase_times() noexcept {
  for (auto& t : totals_ns()) t.store(0, std::memory_order_relaxed);
}

}  // namespace kjit
