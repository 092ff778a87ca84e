// CompileOptions: typed NVRTC options, translated to flags in one place. The canonical list (what
// the cache key hashes) holds no absolute paths.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "kjit/target.hpp"

namespace kjit {

struct CompileOptions {
  std::string std = "c++20";   // c++17 or c++20 (C++20 allows floating template arguments)
  bool fast_math = false;       // --use_fast_math
  bool line_info = false;       // --generate-line-info
  bool device_debug = false;    // --device-debug (-G)
  // --minimal: NVRTC's lean front end. It leaves out texture and surface functions and types, the
  // device-side CUDA runtime (cudaMalloc, ... from device code), launches from device code and the
  // runtime API's types and macros (cudaError_t, ...), and saves 3-14 ms of a compile (its share of
  // NVRTC's built-in header). The binary of a kernel that uses none of them is the same byte for byte.
  // kjit's own kernels (library()) compile with it; a template of yours opts in.
  bool minimal = false;
  std::optional<int> max_registers;          // --maxrregcount=N
  std::map<std::string, std::string> defines;  // -DNAME=VALUE (sorted by name)

  // The options kjit's own kernels compile with (kjit.ops, kjit.elementwise, in C++ and Python alike):
  // the lean front end, which none of them needs more than.
  static CompileOptions library();

  // Throws ValueError on a bad value (unknown standard, bad macro name, registers out of range).
  void validate() const;
  // Canonical option list, hashed into cache keys.
  std::vector<std::string> canonical() const;
  // Everything passed to nvrtcCompileProgram for `target` (canonical + target + include dirs).
  std::vector<std::string> nvrtc_flags(const Target& target) const;
  bool operator==(const CompileOptions& o) const;
};

// One define as text, "NAME" or "NAME=VALUE", read as nvcc reads -D: a bare NAME is NAME=1. Every front
// end (the CLI's --define, Python's defines=[...]) reads them here, so the same text gives the same key.
// Throws ValueError for a text with no name.
std::pair<std::string, std::string> parse_define(const std::string& text);

}  // namespace kjit
