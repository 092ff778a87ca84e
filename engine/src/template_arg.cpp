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
  std::int64_t lo;
  std::uint64_t hi;
  const char* suffix;
};

// Range and literal suffix of a declared integral type (the parser accepts only integral words, so a
// type is recognised by them: "unsigned long long", "std::uint16_t", "signed char", "size_t").
// `char` is signed, as NVRTC has it on every host it runs on; `long` is 64-bit (LP64).
IntRange range_of(const std::string& cpp) {
  auto has = [&](const char* w) { return cpp.find(w) != std::string::npos; };
  const bool is_unsigned = has("unsigned") || has("uint") || has("size_t");
  if (has("char") || has("int8_t")) return is_unsigned ? IntRange{0, UINT8_MAX, ""} : IntRange{INT8_MIN, INT8_MAX, ""};
  if (has("short") || has("int16_t"))
    return is_unsigned ? IntRange{0, UINT16_MAX, ""} : IntRange{INT16_MIN, INT16_MAX, ""};
  if (has("long") || has("int64_t") || has("size_t") || has("ptrdiff_t"))
    return is_unsigned ? IntRange{0, UINT64_MAX, "ull"} : IntRange{INT64_MIN, INT64_MAX, "ll"};
  return is_unsigned ? IntRange{0, UINT32_MAX, "u"} : IntRange{INT32_MIN, INT32_MAX, ""};
}

std::string hexfloat(double v, bool single) {
  char buf[64];
  if (single)
    std::snprintf(buf, sizeof buf, "%af", static_cast<double>(static_cast<float>(v)));
  else
    std::snprintf(buf, sizeof buf, "%a", v);
  return buf;
}

}  // namespace

std::string TemplateArg::describe() const {
  switch (kind_) {
    case Kind::Type: return dtype_name(dtype_);
    case Kind::Integer: return above_int64_ ? std::to_string(uint_value()) : std::to_string(i_);
    case Kind::Float: {
      std::ostringstream os;
      os.precision(17);
      os << f_;
      return os.str();
    }
    case Kind::Bool: return b_ ? "true" : "false";
    case Kind::Default: return "default";
  }
  return "?";
}

std::string TemplateArg::render(const TemplateParam& p, const std::string& kernel) const {
  auto mismatch = [&](const char* wants) {
    return TypeError("template parameter '" + p.name + "' of kernel '" + kernel + "' is " + wants + ", got " +
                     (kind_ == Kind::Type ? "the dtype " : "the value ") + describe() + ".");
  };
  if (kind_ == Kind::Default)
    throw Error("internal: the default of template parameter '" + p.name + "' of kernel '" + kernel +
                "' was rendered as an argument; Specialization resolves defaults");
  switch (p.kind) {
    case TemplateParam::Kind::Type:
      if (kind_ != Kind::Type) throw mismatch("a type: pass a dtype (e.g. float32, bfloat16, int64)");
      return dtype_cpp(dtype_);
    case TemplateParam::Kind::Bool:
      if (kind_ != Kind::Bool) throw mismatch("a bool: pass true or false");
      return b_ ? "true" : "false";
    case TemplateParam::Kind::Integral: {
      if (kind_ != Kind::Integer) throw mismatch(("an integer (" + p.cpp_type + "): pass an integer").c_str());
      const IntRange r = range_of(p.cpp_type);
      const bool fits =
          above_int64_ ? uint_value() <= r.hi : i_ >= r.lo && (i_ < 0 || static_cast<std::uint64_t>(i_) <= r.hi);
      if (!fits)
        throw ValueError("template parameter '" + p.name + "' of kernel '" + kernel + "' is " + p.cpp_type +
                         ": the value " + describe() + " is out of its range [" + std::to_string(r.lo) + ", " +
                         std::to_string(r.hi) +
                         "]. Declare it with a wider type (e.g. long long, or unsigned long "
                         "long for values from 2^63 up) or pass a value in that range.");
      if (above_int64_) return std::to_string(uint_value()) + r.suffix;
      if (i_ == std::numeric_limits<std::int64_t>::min()) return "(-9223372036854775807ll - 1)";
      return std::to_string(i_) + r.suffix;
    }
    case TemplateParam::Kind::Floating: {
      double v;
      if (kind_ == Kind::Float)
        v = f_;
      else if (kind_ == Kind::Integer)
        v = above_int64_ ? static_cast<double>(uint_value()) : static_cast<double>(i_);
      else
        throw mismatch(("a floating constant (" + p.cpp_type + "): pass a number").c_str());
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
    // A value from 2^63 up shares its word with a negative one: no parameter takes both (no integral
    // type holds both, and floating parameters get floats from every front end), so no key mixes them.
    case Kind::Integer: return static_cast<std::uint64_t>(i_) ^ tag;
    case Kind::Float: {
      std::uint64_t bits;
      std::memcpy(&bits, &f_, sizeof bits);
      return bits ^ tag;
    }
    case Kind::Bool: return tag | (b_ ? 1 : 0);
    case Kind::Default: return ~std::uint64_t{0} >> 2;  // the Type tag (0) with a value no dtype has
  }
  return 0;
}

bool TemplateArg::operator==(const TemplateArg& o) const noexcept {
  if (kind_ != o.kind_) return false;
  switch (kind_) {
    case Kind::Type: return dtype_ == o.dtype_;
    case Kind::Integer: return i_ == o.i_ && above_int64_ == o.above_int64_;
    case Kind::Float: return std::memcmp(&f_, &o.f_, sizeof f_) == 0;
    case Kind::Bool: return b_ == o.b_;
    case Kind::Default: return true;
  }
  return false;
}

}  // namespace kjit
