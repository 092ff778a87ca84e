#include "kjit/target.hpp"

#include <string_view>

#include "kjit/driver_library.hpp"
#include "kjit/error.hpp"
#include "text_scan.hpp"

namespace kjit {

Target Target::parse(const std::string& text) {
  auto bad = [&]() {
    return ValueError("target '" + text +
                      "' is not valid: allowed sm_XY (cubin), sm_XYa (arch-specific cubin), compute_XY (PTX) "
                      "or a compute capability such as 9.0; for example sm_90");
  };
  Target t;
  std::string_view s = text;
  bool compute = text::starts_with(s, "compute_");
  if (compute || text::starts_with(s, "sm_")) {
    s.remove_prefix(compute ? 8 : 3);
    bool a = !s.empty() && s.back() == 'a';
    if (a) s.remove_suffix(1);
    if (s.size() < 2 || s.size() > 3 || !text::all_digits(s)) throw bad();
    t.arch = *text::small_int(s);
    if (compute && a)
      throw ValueError("target '" + text + "' is not valid: PTX targets take no 'a' suffix; use compute_" +
                       std::string(s) + " or sm_" + std::string(s) + "a");
    t.kind = compute ? Kind::Compute : (a ? Kind::SmArchSpecific : Kind::Sm);
  } else {
    // "9.0", "90", "100": major (1-2 digits), optional dot, minor (1 digit).
    std::string digits;
    for (char c : s)
      if (c != '.') digits += c;
    std::size_t dot = s.find('.');
    bool ok =
        text::all_digits(digits) && digits.size() >= 2 && digits.size() <= 3 &&
        (dot == std::string_view::npos || (dot == s.size() - 2 && s.find('.', dot + 1) == std::string_view::npos));
    if (!ok) throw bad();
    t.arch = *text::small_int(digits);
  }
  if (t.arch < 50) throw ValueError("target '" + text + "' is older than anything CUDA 12+ supports (sm_50 and newer)");
  return t;
}

Target Target::for_device(int device) {
  ComputeCapability cc = device_compute_capability(device);
  Target t;
  t.arch = cc.major * 10 + cc.minor;
  return t;
}

std::string Target::str() const {
  std::string n = std::to_string(arch);
  switch (kind) {
    case Kind::Sm: return "sm_" + n;
    case Kind::SmArchSpecific: return "sm_" + n + "a";
    case Kind::Compute: return "compute_" + n;
  }
  return "?";
}

std::string Target::nvrtc_flag() const { return "--gpu-architecture=" + str(); }

WarmTarget warm_target(const Target& requested, bool arch_specific, int recorded_arch) {
  if (!arch_specific) return {requested, {}};
  const int arch = recorded_arch > 0 ? recorded_arch : 90;
  const std::string made_for = "sm_" + std::to_string(arch) + "a";
  if (requested.is_ptx())
    return {std::nullopt, "an arch-specific kernel (recorded for " + made_for + ") has no PTX form; ask for sm_" +
                              std::to_string(arch) + " to warm it"};
  if (requested.arch != arch)
    return {std::nullopt, "an arch-specific kernel recorded for " + made_for + ", which only an sm_" +
                              std::to_string(arch) + " GPU runs; on " + requested.str() +
                              " the same op runs another kernel: record the workload on that GPU (KJIT_RECORD) "
                              "and warm that manifest too"};
  return {Target{arch, Target::Kind::SmArchSpecific}, {}};
}

}  // namespace kjit
