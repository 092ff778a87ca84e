// ShapePolicy: the specialization policy against recompilation storms.
//
// A kernel may specialize on a shape parameter (a size as a template argument: one compile per
// distinct value). A workload whose sizes vary freely would then compile without end. The policy
// admits at most `max_values` distinct values per (kernel, parameter) (KJIT_MAX_SPECIALIZATIONS);
// later values get 0, which selects the kernel's generic variant (template argument 0, the size passed
// as a runtime argument), and a warning says so the first time it happens for that (kernel, parameter).
// Values already admitted stay specialized. Thread-safe; lookups allocate nothing.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_set>
#include <vector>

namespace kjit {

// What the policy did for one (kernel, parameter), for kjit.stats().
struct ShapePolicyEntry {
  std::string kernel, param;
  std::size_t specialized_values = 0;  // distinct values admitted (specialized)
  std::uint64_t generic_values = 0;    // distinct values routed to the generic variant (see below)
  bool saturated = false;              // specialized_values reached the limit: new values run generic
};

class ShapePolicy {
 public:
  // Distinct generic values are tracked exactly up to this many per (kernel, parameter); past it every
  // call with an untracked value adds one to generic_values (memory stays bounded).
  static constexpr std::size_t kMaxTrackedGenericValues = std::size_t{1} << 16;

  // `max_values` >= 1 (Settings::max_specializations); throws ValueError otherwise.
  explicit ShapePolicy(int max_values);

  // `value` when it was already admitted for (kernel, param) or fewer than max_values() values have
  // been; otherwise 0 (run the generic variant), warning the first time for (kernel, param).
  // A value of 0 (the generic variant asked for explicitly) returns 0 and counts nothing.
  std::int64_t admit(std::string_view kernel, std::string_view param, std::int64_t value);

  // Makes admit() give 0 for `value` of (kernel, param) from now on (pinned), or lifts that (benchmarks
  // and tests measure the generic variant on sizes that would be specialized). Counts nothing.
  void pin_generic(std::string_view kernel, std::string_view param, std::int64_t value, bool pinned = true);

  // Every (kernel, parameter) seen, sorted by kernel then parameter.
  std::vector<ShapePolicyEntry> report() const;
  // Forgets every admitted and generic value (and whether it warned).
  void reset();
  int max_values() const noexcept { return max_values_; }

 private:
  struct Slot {
    std::unordered_set<std::int64_t> admitted;
    std::unordered_set<std::int64_t> generic;  // at most kMaxTrackedGenericValues
    std::uint64_t generic_untracked = 0;       // calls with a value past that cap
    std::unordered_set<std::int64_t> pinned;   // values pin_generic() routes to the generic variant
    bool warned = false;
  };
  using Params = std::map<std::string, Slot, std::less<>>;

  Slot& slot(std::string_view kernel, std::string_view param);  // under mu_

  const int max_values_;
  mutable std::mutex mu_;
  std::map<std::string, Params, std::less<>> kernels_;
};

}  // namespace kjit
