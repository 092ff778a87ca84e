// Target: what a compilation is for. sm_XY (cubin), sm_XYa (cubin with arch-specific features),
// compute_XY (PTX, JIT-compiled by the driver).
#pragma once

#include <optional>
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

// The target a manifest record is compiled for when `requested` is asked (`kjit warm`, `kjit export`,
// `kjit prefetch` --arch), or why none: the one place this rule lives.
//  - a plain record: `requested` as is;
//  - an arch-specific record (cache::ManifestRecord::arch_specific, KernelFamily's arch_specific: the sm_90
//    GEMM's wgmma) recorded for sm_XYa (`recorded_arch` XY): sm_XYa when sm_XY or sm_XYa is asked, the entry
//    its family looks up; skipped for any other architecture (only an sm_XY GPU runs that kernel; another
//    GPU runs another kernel for the same op, which a workload recorded there names) and for compute_XY
//    (arch-specific features have no PTX form). A record from before "arch" was written (`recorded_arch` 0)
//    is the sm_90 GEMM's, kjit's only arch-specific kernel then.
struct WarmTarget {
  std::optional<Target> target;  // none: the job is skipped
  std::string skipped_because;   // why, when skipped
};
WarmTarget warm_target(const Target& requested, bool arch_specific, int recorded_arch);

}  // namespace kjit
