// Target: what a compilation is for. sm_XY (cubin), sm_XYa (cubin with arch-specific features),
// compute_XY (PTX, JIT-compiled by the driver).
#pragma once

#include <string>

namespace kjit {

struct Target {
  enum class Kind { Sm, SmArchSpecific, Compute };
  int arch = 0;  // 90 for sm_90, 100 for sm_100
  Kind kind = Kind::Sm;

  // Parses "sm_90", "sm_90a", "compute_90"; also "90", "9.0". Throws ValueError saying what is allowed.
  static Target parse(const std::string& text);
  static Target for_device(int device);  // sm_XY of a device (needs the driver)

  std::string str() const;  // canonical text
  bool is_ptx() const noexcept { return kind == Kind::Compute; }
  // The NVRTC option selecting it: "--gpu-architecture=sm_90a".
  std::string nvrtc_flag() const;
  bool operator==(const Target& o) const noexcept { return arch == o.arch && kind == o.kind; }
  bool operator!=(const Target& o) const noexcept { return !(*this == o); }
};

}  // namespace kjit
