// NvrtcLibrary: the NVRTC entry points, dlopen'ed from the toolkit that cuda_toolkit() found,
// on first use only (strict mode and cache commands never load it).
#pragma once

#include <nvrtc.h>

#include <string>
#include <vector>

#include "kjit/dynamic_library.hpp"

namespace kjit {

// What NvrtcLibrary::flags_for_this_version() does, for NVRTC major.minor.
std::vector<std::string> nvrtc_flags_for_version(int major, int minor, std::vector<std::string> flags);

class NvrtcLibrary {
 public:
  // Loads the library on first call; throws kjit::Error saying where it looked and what to set.
  static const NvrtcLibrary& get();
  // True if get() has loaded it in this process (never loads).
  static bool loaded();

#define KJIT_NVRTC_FN(name) decltype(&::name) name = nullptr
  KJIT_NVRTC_FN(nvrtcVersion);
  KJIT_NVRTC_FN(nvrtcGetErrorString);
  KJIT_NVRTC_FN(nvrtcGetNumSupportedArchs);
  KJIT_NVRTC_FN(nvrtcGetSupportedArchs);
  KJIT_NVRTC_FN(nvrtcCreateProgram);
  KJIT_NVRTC_FN(nvrtcDestroyProgram);
  KJIT_NVRTC_FN(nvrtcCompileProgram);
  KJIT_NVRTC_FN(nvrtcGetPTXSize);
  KJIT_NVRTC_FN(nvrtcGetPTX);
  KJIT_NVRTC_FN(nvrtcGetCUBINSize);
  KJIT_NVRTC_FN(nvrtcGetCUBIN);
  KJIT_NVRTC_FN(nvrtcGetProgramLogSize);
  KJIT_NVRTC_FN(nvrtcGetProgramLog);
  KJIT_NVRTC_FN(nvrtcAddNameExpression);
  KJIT_NVRTC_FN(nvrtcGetLoweredName);
  // NVRTC 12.8+ (null before): the precompiled header's heap and creation status.
  KJIT_NVRTC_FN(nvrtcSetPCHHeapSize);
  KJIT_NVRTC_FN(nvrtcGetPCHCreateStatus);
  KJIT_NVRTC_FN(nvrtcGetPCHHeapSizeRequired);
#undef KJIT_NVRTC_FN

  // Read from NVRTC once, when get() loads it: after that, kjit calls into NVRTC only to compile, and
  // only where no compile child can be forked meanwhile (the fork gate, fork_gate.hpp). A fork while
  // another thread is inside NVRTC would hand the child NVRTC mid-call (test_fork_safety).
  std::string version() const { return std::to_string(major_) + "." + std::to_string(minor_); }  // "13.0"
  int major() const { return major_; }
  int minor() const { return minor_; }
  const std::vector<int>& supported_archs() const { return archs_; }  // e.g. {75, 80, 86, 89, 90, 100, 120}
  // The flags of a compile as this NVRTC takes them: --no-cache added from 12.9 (NVRTC 12.9+ keeps a compile
  // cache of its own, in the driver's JIT cache; kjit caches binaries itself, and a compile it counts and
  // times must be a real one), and
  // --Ofast-compile (a compile-speed hint, NVRTC 12.8+) left out before 12.8. The key hashes the options
  // and NVRTC's version, so the same options give one binary per version either way.
  std::vector<std::string> flags_for_this_version(std::vector<std::string> flags) const {
    return nvrtc_flags_for_version(major_, minor_, std::move(flags));
  }
  std::string path() const { return lib_.path().string(); }
  // Whether this NVRTC has the automatic precompiled header (--pch, --pch-dir: 12.8+).
  bool has_pch() const { return nvrtcGetPCHCreateStatus != nullptr; }

  // Throws kjit::Error "<call> failed: <nvrtc error string>" when r != NVRTC_SUCCESS.
  void check(nvrtcResult r, const char* call) const;

 private:
  NvrtcLibrary() = default;
  DynamicLibrary lib_;
  int major_ = 0, minor_ = 0;
  std::vector<int> archs_;
};

}  // namespace kjit
