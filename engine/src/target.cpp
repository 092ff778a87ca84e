#include "kjit/target.hpp"

#include <regex>

#include "kjit/driver_library.hpp"
#include "kjit/error.hpp"

namespace kjit {

Target Target::parse(const std::string& text) {
  static const std::regex sm(R"((sm|compute)_(\d{2,3})(a?))");
  static const std::regex digits(R"((\d{1,2})\.?(\d))");
  std::smatch m;
  Target t;
  if (std::regex_match(text, m, sm)) {
    t.arch = std::stoi(m[2]);
    bool a = m[3].length() > 0;
    if (m[1] == "compute") {
      if (a) throw ValueError("target '" + text + "' is not valid: PTX targets take no 'a' suffix; use compute_" +
                              std::string(m[2]) + " or sm_" + std::string(m[2]) + "a");
      t.kind = Kind::Compute;
    } else {
      t.kind = a ? Kind::SmArchSpecific : Kind::Sm;
    }
  } else if (std::regex_match(text, m, digits)) {
    t.arch = std::stoi(m[1]) * 10 + std::stoi(m[2]);
  } else {
    throw ValueError("target '" + text +
                     "' is not valid: allowed sm_XY (cubin), sm_XYa (arch-specific cubin), compute_XY (PTX) "
                     "or a compute capability such as 9.0; for example sm_90");
  }
  if (t.arch < 50)
    throw ValueError("target '" + text + "' is older than anything CUDA 12+ supports (sm_50 and newer)");
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

}  // namespace kjit
