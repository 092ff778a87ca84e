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
  enum class Kind : unsigned char { Type, Integer, Float, Bool };

  static TemplateArg type(DType t) { return TemplateArg(Kind::Type, t, 0, 0, false); }
  static TemplateArg integer(std::int64_t v) { return TemplateArg(Kind::Integer, DType::Int64, v, 0, false); }
  static TemplateArg floating(double v) { return TemplateArg(Kind::Float, DType::Float64, 0, v, false); }
  static TemplateArg boolean(bool v) { return TemplateArg(Kind::Bool, DType::Bool, 0, 0, v); }

  Kind kind() const noexcept { return kind_; }
  DType dtype() const noexcept { return dtype_; }
  std::int64_t int_value() const noexcept { return i_; }
  double float_value() const noexcept { return f_; }
  bool bool_value() const noexcept { return b_; }

  // The C++ text for parameter `p` of `kernel`; throws TypeError / ValueError when the argument does
  // not fit the parameter (kind, range, NaN), naming the kernel, the parameter and what is allowed.
  std::string render(const TemplateParam& p, const std::string& kernel) const;
  // A 64-bit word identifying the value (for fixed-size in-memory lookup keys).
  std::uint64_t word() const noexcept;
  std::string describe() const;  // "float32", "4", "1.5", "true"

  bool operator==(const TemplateArg& o) const noexcept;

 private:
  TemplateArg(Kind k, DType t, std::int64_t i, double f, bool b) : kind_(k), dtype_(t), b_(b), i_(i), f_(f) {}
  Kind kind_;
  DType dtype_;
  bool b_;
  std::int64_t i_;
  double f_;
};

}  // namespace kjit
