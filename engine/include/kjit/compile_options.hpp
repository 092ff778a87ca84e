// CompileOptions: typed NVRTC options. Every option is one row of the field table
// (compile_option_fields.hpp), from which validation, the canonical list (what the cache key hashes; it
// holds no absolute paths), the NVRTC flags, manifest JSON, the CLI's flags, the Python keywords and the
// strict-miss hint derive: a new option is a member here plus one row there (docs/compile-options.md).
#pragma once

#include <map>
#include <optional>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "kjit/target.hpp"

namespace kjit {

// The value of one option, in its field's kind (CompileOptionField::Kind, in this order): a bool, an
// integer or unset, a string (one of a list, or free), macro definitions NAME -> VALUE.
using OptionValue = std::variant<bool, std::optional<int>, std::string, std::map<std::string, std::string>>;

struct CompileOptions {
  std::string std = "c++20";  // c++17 or c++20 (C++20 allows floating template arguments)
  bool fast_math = false;     // --use_fast_math
  bool line_info = false;     // --generate-line-info
  bool device_debug = false;  // --device-debug (-G)
  // --minimal: NVRTC's lean front end. It leaves out texture and surface functions and types, the
  // device-side CUDA runtime (cudaMalloc, ... from device code), launches from device code and the
  // runtime API's types and macros (cudaError_t, ...), and saves 3-14 ms of a compile (its share of
  // NVRTC's built-in header). The binary of a kernel that uses none of them is the same byte for byte.
  // kjit's own kernels (library()) compile with it; a template of yours opts in.
  bool minimal = false;
  // -default-device (--device-as-default-execution-space): a function with no __host__/__device__ is a
  // __device__ one, as NVRTC's JIT mode cannot compile host functions. CuTe and CUTLASS need it (their
  // unannotated constexpr helpers); a template of yours that has none does not.
  bool default_device = false;
  // --Ofast-compile=LEVEL (NVRTC 12.8+, left out before): "off" (NVVM and ptxas optimize fully), "min",
  // "mid" or "max": less optimization for a faster compile, and a slower binary (on an H200, mid compiled
  // kjit's row kernels 20-30% faster and ran them 2.2-14x slower (elementwise kernels 1.5-2.5x)). kjit's own kernels:
  // KJIT_LIBRARY_FAST_COMPILE.
  std::string fast_compile = "off";
  std::optional<int> max_registers;            // --maxrregcount=N
  std::map<std::string, std::string> defines;  // -DNAME=VALUE (sorted by name)
  // Values of fields added to the table at run time (add_compile_option_field: a field with no member
  // here), by field name; a field at its default has no entry. Read and write them through the table.
  std::map<std::string, OptionValue> added;

  // The options kjit's own kernels compile with (kjit.ops, kjit.elementwise, in C++ and Python alike):
  // the lean front end, which none of them needs more than, and the fast-compile level of the setting
  // KJIT_LIBRARY_FAST_COMPILE (read once per process, by the first call).
  static CompileOptions library();
  // The levels fast_compile takes, for error messages and front ends, and whether `level` is one of them.
  static const std::vector<std::string>& fast_compile_levels();
  static bool is_fast_compile_level(const std::string& level);

  // Every one of these goes through the field table.
  // Throws ValueError on a bad value (unknown standard, bad macro name, registers out of range).
  void validate() const;
  // Canonical option list, hashed into cache keys: each field's NVRTC flag, in table order, left out at
  // its default (but --std=, which every key has).
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
