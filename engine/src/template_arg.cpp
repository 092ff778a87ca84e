#include "kjit/template_arg.hpp"

#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <sstream>

#include "kjit/error.hpp"

namespace kjit {
namespace {

struct IntRange {
  long double lo, hi;
  const char* suffix;
};

// Range and literal suffix of a declared integral type.
IntRange range_of(const std::string& cpp) {
  auto has = [&](const char* w) { return cpp.find(w) != std::string::npos; };
  bool is_unsigned = has("unsigned") || has("uint") || has("size_t");
  if (has("char") || has("int8_t"))
    return is_unsigned ? IntRange{0, 255, ""} : IntRange{-128, 127, ""};
  if (has("short") || has("int16_t"))
    return is_unsigned ? IntRange{0, 65535, ""} : IntRange{-32768, 32767, ""};
  if (has("long") || has("int64_t") || has("size_t") || has("ptrdiff_t"))
    return is_unsigned ? IntRange{0, 18446744073709551615.0L, "ull"}
                       : IntRange{-9223372036854775808.0L, 9223372036854775807.0L, "ll"};
  return is_unsigned ? IntRange{0, 4294967295.0L, "u"} : IntRange{-2147483648.0L, 2147483647.0L, ""};
}

std::string hexfloat(double v, bool single) {
  char buf[64];
  if (single) std::snprintf(buf, sizeof buf, "%af", static_cast<double>(static_cast<float>(v)));
  else std::snprintf(buf, sizeof buf, "%a", v);
  return buf;
}

}  // namespace

std::string TemplateArg::describe() const {
  switch (kind_) {
    case Kind::Type: return dtype_name(dtype_);
    case Kind::Integer: return std::to_string(i_);
    case Kind::Float: {
      std::ostringstream os;
      os.precision(17);
      os << f_;
      return os.str();
    }
    case Kind::Bool: return b_ ? "true" : "false";
  }
  return "?";
}

std::string TemplateArg::render(const TemplateParam& p, const std::string& kernel) const {
  auto mismatch = [&](const char* wants) {
    return TypeError("template parameter '" + p.name + "' of kernel '" + kernel + "' is " + wants +
                     ", got " + (kind_ == Kind::Type ? "the dtype " : "the value ") + describe() + ".");
  };
  switch (p.kind) {
    case TemplateParam::Kind::Type:
      if (kind_ != Kind::Type) throw mismatch("a type: pass a dtype (e.g. float32, bfloat16, int64)");
      return dtype_cpp(dtype_);
    case TemplateParam::Kind::Bool:
      if (kind_ != Kind::Bool) throw mismatch("a bool: pass true or false");
      return b_ ? "true" : "false";
    case TemplateParam::Kind::Integral: {
      if (kind_ != Kind::Integer)
        throw mismatch(("an integer (" + p.cpp_type + "): pass an integer").c_str());
      IntRange r = range_of(p.cpp_type);
      if (static_cast<long double>(i_) < r.lo || static_cast<long double>(i_) > r.hi) {
        std::ostringstream os;
        os << "template parameter '" << p.name << "' of kernel '" << kernel << "' is " << p.cpp_type
           << ": the value " << i_ << " is out of its range [" << static_cast<long long>(r.lo) << ", "
           << (r.hi > 9.3e18L ? std::string("2^64-1") : std::to_string(static_cast<long long>(r.hi)))
           << "]. Declare it with a wider type (e.g. long long) or pass a smaller value.";
        throw ValueError(os.str());
      }
      if (i_ == std::numeric_limits<std::int64_t>::min()) return "(-9223372036854775807ll - 1)";
      return std::to_string(i_) + r.suffix;
    }
    case TemplateParam::Kind::Floating: {
      double v;
      if (kind_ == Kind::Float) v = f_;
      else if (kind_ == Kind::Integer) v = static_cast<double>(i_);
      else throw mismatch(("a floating constant (" + p.cpp_type + "): pass a number").c_str());
      bool single = p.cpp_type.find("float") != std::string::npos;
      if (!std::isfinite(v) || (single && !std::isfinite(static_cast<float>(v))))
        throw ValueError("template parameter '" + p.name + "' of kernel '" + kernel + "' is " + p.cpp_type +
                         ": the value " + describe() + " is not a finite " + p.cpp_type +
                         "; pass it as a runtime argument instead.");
      return hexfloat(v, single);
    }
    case TemplateParam::Kind::Unsupported:
      throw TypeError("template parameter '" + p.name + "' of kernel '" + kernel +
                      "' has a kind kjit cannot specialize (template template, pack or '" + p.cpp_type +
                      "'); give it a default or use typename/integer/float/bool parameters.");
  }
  return "";
}

std::uint64_t TemplateArg::word() const noexcept {
  std::uint64_t tag = static_cast<std::uint64_t>(kind_) << 62;
  switch (kind_) {
    case Kind::Type: return tag | static_cast<std::uint64_t>(dtype_);
    case Kind::Integer: return static_cast<std::uint64_t>(i_) ^ tag;
    case Kind::Float: {
      std::uint64_t bits;
      std::memcpy(&bits, &f_, sizeof bits);
      return bits ^ tag;
    }
    case Kind::Bool: return tag | (b_ ? 1 : 0);
  }
  return 0;
}

bool TemplateArg::operator==(const TemplateArg& o) const noexcept {
  if (kind_ != o.kind_) return false;
  switch (kind_) {
    case Kind::Type: return dtype_ == o.dtype_;
    case Kind::Integer: return i_ == o.i_;
    case Kind::Float: return std::memcmp(&f_, &o.f_, sizeof f_) == 0;
    case Kind::Bool: return b_ == o.b_;
  }
  return false;
}

}  // namespace kjit
