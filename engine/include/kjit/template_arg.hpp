// TemplateArg: one typed template argument (a dtype, an integer, a floating constant or a bool),
// never a string spliced into source. Rendered against the declared parameter it binds to.
#pragma once

#include <cstdint>
#include <string>

#include "kjit/dtype.hpp"
#include "kjit/kernel_decl.hpp"

namespace kjit {

class TemplateArg {
 public:
  // Default: no value; the parameter takes its declared default (front ends pass it for a parameter left
  // out before one that is given, so that argument arrays stay in parameter order).
  enum class Kind : unsigned char { Type, Integer, Float, Bool, Default };

  static TemplateArg type(DType t) { return TemplateArg(Kind::Type, t, 0, 0, false); }
  static TemplateArg integer(std::int64_t v) { return TemplateArg(Kind::Integer, DType::Int64, v, 0, false); }
  // Any value of [0, 2^64): those from 2^63 up (for unsigned 64-bit parameters) do not fit `integer`.
  static TemplateArg unsigned_integer(std::uint64_t v) {
    TemplateArg a = integer(static_cast<std::int64_t>(v));
    a.above_int64_ = v > static_cast<std::uint64_t>(INT64_MAX);
    return a;
  }
  static TemplateArg floating(double v) { return TemplateArg(Kind::Float, DType::Float64, 0, v, false); }
  static TemplateArg boolean(bool v) { return TemplateArg(Kind::Bool, DType::Bool, 0, 0, v); }
  static TemplateArg defaulted() { return TemplateArg(Kind::Default, DType::Bool, 0, 0, false); }

  Kind kind() const noexcept { return kind_; }
  DType dtype() const noexcept { return dtype_; }
  // An integer is int_value() unless above_int64(), then uint_value() (from 2^63 up).
  std::int64_t int_value() const noexcept { return i_; }
  std::uint64_t uint_value() const noexcept { return static_cast<std::uint64_t>(i_); }
  bool above_int64() const noexcept { return above_int64_; }
  double float_value() const noexcept { return f_; }
  bool bool_value() const noexcept { return b_; }

  // The C++ text for parameter `p` of `kernel`; throws TypeError / ValueError when the argument does
  // not fit the parameter (kind, range, NaN), naming the kernel, the parameter and what is allowed.
  // Not for Default (Specialization resolves defaults).
  std::string render(const TemplateParam& p, const std::string& kernel) const;
  // A 64-bit word identifying the value (for fixed-size in-memory lookup keys).
  std::uint64_t word() const noexcept;
  std::string describe() const;  // "float32", "4", "1.5", "true", "default"

  bool operator==(const TemplateArg& o) const noexcept;

 private:
  TemplateArg(Kind k, DType t, std::int64_t i, double f, bool b) : kind_(k), dtype_(t), b_(b), i_(i), f_(f) {}
  Kind kind_;
  DType dtype_;
  bool b_;
  bool above_int64_ = false;  // i_ holds the bits of a value in [2^63, 2^64)
  std::int64_t i_;
  double f_;
};

}  // namespace kjit
