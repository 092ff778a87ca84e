#include "kjit/dtype.hpp"

#include <array>

namespace kjit {
namespace {
struct Row {
  DType t;
  const char* name;
  const char* cpp;
  std::size_t size;
  bool floating, is_signed;
};
constexpr std::array<Row, kNumDTypes> kRows{{
    {DType::Float32, "float32", "float", 4, true, true},
    {DType::Float64, "float64", "double", 8, true, true},
    {DType::Float16, "float16", "__half", 2, true, true},
    {DType::BFloat16, "bfloat16", "__nv_bfloat16", 2, true, true},
    {DType::Int8, "int8", "signed char", 1, false, true},
    {DType::Int16, "int16", "short", 2, false, true},
    {DType::Int32, "int32", "int", 4, false, true},
    {DType::Int64, "int64", "long long", 8, false, true},
    {DType::UInt8, "uint8", "unsigned char", 1, false, false},
    {DType::UInt16, "uint16", "unsigned short", 2, false, false},
    {DType::UInt32, "uint32", "unsigned int", 4, false, false},
    {DType::UInt64, "uint64", "unsigned long long", 8, false, false},
    {DType::Bool, "bool", "bool", 1, false, false},
}};
const Row& row(DType t) { return kRows[static_cast<std::size_t>(t)]; }
}  // namespace

const char* dtype_name(DType t) noexcept { return row(t).name; }
const char* dtype_cpp(DType t) noexcept { return row(t).cpp; }
std::size_t dtype_size(DType t) noexcept { return row(t).size; }
bool dtype_is_floating(DType t) noexcept { return row(t).floating; }
bool dtype_is_signed(DType t) noexcept { return row(t).is_signed; }

std::optional<DType> dtype_from_name(std::string_view n) noexcept {
  for (const auto& r : kRows)
    if (n == r.name) return r.t;
  struct Alias {
    const char* name;
    DType t;
  };
  static constexpr Alias aliases[] = {
      {"float", DType::Float32},   {"f32", DType::Float32},         {"double", DType::Float64},
      {"f64", DType::Float64},     {"half", DType::Float16},        {"f16", DType::Float16},
      {"__half", DType::Float16},  {"bf16", DType::BFloat16},       {"__nv_bfloat16", DType::BFloat16},
      {"int", DType::Int32},       {"long", DType::Int64},          {"short", DType::Int16},
      {"char", DType::Int8},       {"byte", DType::UInt8},          {"unsigned char", DType::UInt8},
      {"long long", DType::Int64}, {"unsigned int", DType::UInt32},
  };
  for (const auto& a : aliases)
    if (n == a.name) return a.t;
  return std::nullopt;
}

std::string dtype_names() {
  std::string out;
  for (const auto& r : kRows) {
    if (!out.empty()) out += ", ";
    out += r.name;
  }
  return out;
}

}  // namespace kjit
