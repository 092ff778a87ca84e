// DType: the element types a template can be specialized on, and the C++ type each renders to.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

namespace kjit {

enum class DType : unsigned char {
  Float32,
  Float64,
  Float16,
  BFloat16,
  Int8,
  Int16,
  Int32,
  Int64,
  UInt8,
  UInt16,
  UInt32,
  UInt64,
  Bool,
};

inline constexpr int kNumDTypes = 13;

const char* dtype_name(DType t) noexcept;  // "float32", "bfloat16", ...
const char* dtype_cpp(DType t) noexcept;   // "float", "__nv_bfloat16", "signed char", ...
std::size_t dtype_size(DType t) noexcept;
bool dtype_is_floating(DType t) noexcept;
bool dtype_is_signed(DType t) noexcept;
// Accepts the names above and common aliases ("float", "half", "bf16", "int", "long", "uint8", ...).
std::optional<DType> dtype_from_name(std::string_view name) noexcept;
// Every accepted canonical name, comma-separated (for error messages).
std::string dtype_names();

}  // namespace kjit
