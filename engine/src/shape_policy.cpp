#include "kjit/shape_policy.hpp"

#include <utility>

#include "kjit/error.hpp"
#include "kjit/log.hpp"

namespace kjit {
namespace {

std::string saturation_message(std::string_view kernel, std::string_view param, int max_values) {
  const std::string p(param), n = std::to_string(max_values);
  return "kernel '" + std::string(kernel) + "' has been specialized on " + n + " distinct values of " + p +
         " (KJIT_MAX_SPECIALIZATIONS=" + n + "); further values run its generic variant (" + p +
         " as a runtime argument). Raise KJIT_MAX_SPECIALIZATIONS to specialize more.";
}

}  // namespace

ShapePolicy::ShapePolicy(int max_values) : max_values_(max_values) {
  if (max_values < 1)
    throw ValueError("ShapePolicy: max_values must be >= 1 (KJIT_MAX_SPECIALIZATIONS), got " +
                     std::to_string(max_values) + ".");
}

std::int64_t ShapePolicy::admit(std::string_view kernel, std::string_view param, std::int64_t value) {
  if (value == 0) return 0;  // the generic variant, asked for explicitly
  {
    std::lock_guard<std::mutex> lock(mu_);
    Slot& slot = this->slot(kernel, param);
    if (!slot.pinned.empty() && slot.pinned.count(value)) return 0;
    if (slot.admitted.count(value)) return value;
    if (slot.admitted.size() < static_cast<std::size_t>(max_values_)) {
      slot.admitted.insert(value);
      return value;
    }
    if (!slot.generic.count(value)) {
      if (slot.generic.size() < kMaxTrackedGenericValues) {
        slot.generic.insert(value);
      } else {
        ++slot.generic_untracked;
      }
    }
    if (slot.warned) return 0;
    slot.warned = true;
  }
  // Outside the lock: the sink may call into Python (and take the GIL).
  log::warn(saturation_message(kernel, param, max_values_));
  return 0;
}

ShapePolicy::Slot& ShapePolicy::slot(std::string_view kernel, std::string_view param) {
  auto k = kernels_.find(kernel);
  if (k == kernels_.end()) k = kernels_.emplace(std::string(kernel), Params{}).first;
  auto p = k->second.find(param);
  if (p == k->second.end()) p = k->second.emplace(std::string(param), Slot{}).first;
  return p->second;
}

void ShapePolicy::pin_generic(std::string_view kernel, std::string_view param, std::int64_t value, bool pinned) {
  std::lock_guard<std::mutex> lock(mu_);
  Slot& s = slot(kernel, param);
  if (pinned)
    s.pinned.insert(value);
  else
    s.pinned.erase(value);
}

std::vector<ShapePolicyEntry> ShapePolicy::report() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<ShapePolicyEntry> out;
  for (const auto& [kernel, params] : kernels_) {
    for (const auto& [param, slot] : params) {
      ShapePolicyEntry e;
      e.kernel = kernel;
      e.param = param;
      e.specialized_values = slot.admitted.size();
      e.generic_values = slot.generic.size() + slot.generic_untracked;
      e.saturated = slot.admitted.size() >= static_cast<std::size_t>(max_values_);
      out.push_back(std::move(e));
    }
  }
  return out;  // std::map iteration: sorted by kernel, then parameter
}

void ShapePolicy::reset() {
  std::lock_guard<std::mutex> lock(mu_);
  kernels_.clear();
}

}  // namespace kjit
