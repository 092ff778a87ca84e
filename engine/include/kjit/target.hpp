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
// `kjit prefetch` --arch): the record of an arch-specific kernel (cache::ManifestRecord::arch_specific,
// KernelFamily's arch_specific) for sm_XYa whether sm_XY or sm_XYa is asked, the entry its family looks
// up; none for compute_XY (arch-specific features have no PTX form: the job is skipped, see
// kWarmNoPtxReason); any other record for `requested` as is. The one place this rule lives.
std::optional<Target> warm_target(const Target& requested, bool arch_specific);
// Why warm_target gives no target (for the line saying a job was skipped).
inline constexpr const char* kWarmNoPtxReason =
    "an arch-specific kernel (recorded for sm_XYa) has no PTX form; ask for sm_XY or sm_XYa to warm it";

}  // namespace kjit
