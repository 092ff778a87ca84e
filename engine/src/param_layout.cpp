#include "kjit/param_layout.hpp"

#include <cctype>
#include <charconv>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>

#include "kjit/error.hpp"

namespace kjit {
namespace {

// ---- host floating conversions -------------------------------------------------------------------

// Rounds `v` to the binary format with E exponent bits and M stored mantissa bits, to nearest, ties
// to even, straight from the double's bits (so there is no double rounding).
template <int E, int M>
std::uint64_t round_double_to(double v) noexcept {
  std::uint64_t bits;
  std::memcpy(&bits, &v, sizeof bits);
  const std::uint64_t sign = (bits >> 63) << (E + M);
  const int exp = static_cast<int>((bits >> 52) & 0x7ff);
  const std::uint64_t mant = bits & ((1ull << 52) - 1);
  const std::uint64_t exp_all_ones = (1ull << E) - 1;
  const std::uint64_t inf = exp_all_ones << M;
  if (exp == 0x7ff) {
    if (mant == 0) return sign | inf;
    // NaN: keep the sign and the top payload bits, force the quiet bit.
    return sign | inf | (mant >> (52 - M)) | (1ull << (M - 1));
  }
  // Zero, or a double subnormal (< 2^-1022): far below the smallest subnormal of every target format.
  if (exp == 0) return sign;
  const int bias = (1 << (E - 1)) - 1;
  const int e = exp - 1023;
  if (e > bias) return sign | inf;
  const int emin = 1 - bias;
  const std::uint64_t sig = (1ull << 52) | mant;  // 53 significant bits
  int shift = 52 - M;
  if (e < emin) shift += emin - e;  // a subnormal of the target
  if (shift >= 63) return sign;     // below a quarter of the smallest subnormal
  std::uint64_t q = sig >> shift;
  const std::uint64_t rem = sig & ((1ull << shift) - 1);
  const std::uint64_t half = 1ull << (shift - 1);
  if (rem > half || (rem == half && (q & 1))) ++q;
  std::uint64_t out;
  if (e < emin) {
    out = q;  // a carry into bit M gives the smallest normal, which is right
  } else {
    // q holds the implicit bit at position M; adding it to (biased - 1) << M sets the exponent field,
    // and a rounding carry moves to the next binade by itself.
    out = (static_cast<std::uint64_t>(e + bias - 1) << M) + q;
    if ((out >> M) >= exp_all_ones) return sign | inf;
  }
  return sign | out;
}

// ---- type text -----------------------------------------------------------------------------------

// Identifiers, "::", and single punctuation characters of a C++ type.
std::vector<std::string> type_tokens(const std::string& s) {
  std::vector<std::string> out;
  std::size_t i = 0, n = s.size();
  while (i < n) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    if (std::isspace(c)) {
      ++i;
    } else if (std::isalpha(c) || c == '_') {
      std::size_t j = i;
      while (j < n && (std::isalnum(static_cast<unsigned char>(s[j])) || s[j] == '_')) ++j;
      out.push_back(s.substr(i, j - i));
      i = j;
    } else if (std::isdigit(c)) {
      std::size_t j = i;
      while (j < n && (std::isalnum(static_cast<unsigned char>(s[j])) || s[j] == '.')) ++j;
      out.push_back(s.substr(i, j - i));
      i = j;
    } else if (c == ':' && i + 1 < n && s[i + 1] == ':') {
      out.emplace_back("::");
      i += 2;
    } else {
      out.emplace_back(1, s[i]);
      ++i;
    }
  }
  return out;
}

bool is_ident(const std::string& t) {
  return !t.empty() && (std::isalpha(static_cast<unsigned char>(t[0])) || t[0] == '_');
}

// Joins tokens the way declarations are usually written: "const float* __restrict__".
std::string join_type(const std::vector<std::string>& t) {
  std::string out;
  for (const auto& x : t) {
    bool glue = !out.empty() && (x == "*" || x == "&" || x == "::" || x == "," || x == ">" || x == "[" || x == "]" ||
                                 x == "<" || out.back() == ':' || out.back() == '<' || out.back() == '[');
    if (!out.empty() && !glue) out += ' ';
    out += x;
  }
  return out;
}

bool is_qualifier(const std::string& t) {
  return t == "const" || t == "volatile" || t == "__restrict__" || t == "__restrict" || t == "restrict" ||
         t == "struct";
}

// A scalar type from its words (qualifiers and std:: already removed).
std::optional<DType> scalar_from_words(const std::vector<std::string>& w) {
  if (w.empty()) return std::nullopt;
  if (w.size() == 1) {
    static const std::map<std::string, DType> named = {
        {"bool", DType::Bool},
        {"float", DType::Float32},
        {"double", DType::Float64},
        {"__half", DType::Float16},
        {"half", DType::Float16},
        {"__nv_half", DType::Float16},
        {"__nv_bfloat16", DType::BFloat16},
        {"nv_bfloat16", DType::BFloat16},
        {"int8_t", DType::Int8},
        {"int16_t", DType::Int16},
        {"int32_t", DType::Int32},
        {"int64_t", DType::Int64},
        {"uint8_t", DType::UInt8},
        {"uint16_t", DType::UInt16},
        {"uint32_t", DType::UInt32},
        {"uint64_t", DType::UInt64},
        {"size_t", DType::UInt64},
        {"ptrdiff_t", DType::Int64},
        {"intptr_t", DType::Int64},
        {"uintptr_t", DType::UInt64},
        {"ssize_t", DType::Int64},
        {"char", DType::Int8},
        {"short", DType::Int16},
        {"int", DType::Int32},
        {"long", DType::Int64},
        {"unsigned", DType::UInt32},
        {"signed", DType::Int32},
    };
    auto it = named.find(w[0]);
    if (it != named.end()) return it->second;
    return std::nullopt;
  }
  int n_long = 0, n_unsigned = 0, n_signed = 0, n_short = 0, n_char = 0, n_int = 0;
  for (const auto& x : w) {
    if (x == "long")
      ++n_long;
    else if (x == "unsigned")
      ++n_unsigned;
    else if (x == "signed")
      ++n_signed;
    else if (x == "short")
      ++n_short;
    else if (x == "char")
      ++n_char;
    else if (x == "int")
      ++n_int;
    else
      return std::nullopt;  // "long double", typedef names mixed with keywords, ...
  }
  if (n_unsigned + n_signed > 1 || n_int > 1 || n_long > 2 || n_short > 1 || n_char > 1) return std::nullopt;
  if (n_char && (n_int || n_long || n_short)) return std::nullopt;
  if (n_short && n_long) return std::nullopt;
  const bool u = n_unsigned > 0;
  if (n_char) return u ? DType::UInt8 : DType::Int8;  // plain char is signed on every CUDA host
  if (n_short) return u ? DType::UInt16 : DType::Int16;
  if (n_long) return u ? DType::UInt64 : DType::Int64;  // LP64: long is 64 bits
  return u ? DType::UInt32 : DType::Int32;
}

// Words of a type without qualifiers and std:: / :: prefixes; nullopt when something else is in it.
std::optional<std::vector<std::string>> plain_words(const std::vector<std::string>& t) {
  std::vector<std::string> w;
  for (std::size_t i = 0; i < t.size(); ++i) {
    const std::string& x = t[i];
    if (is_qualifier(x)) continue;
    if (x == "::") continue;
    if (x == "std" && i + 1 < t.size() && t[i + 1] == "::") continue;
    if (!is_ident(x)) return std::nullopt;
    w.push_back(x);
  }
  return w;
}

struct IntRange {
  std::int64_t lo;
  std::uint64_t hi;
};

IntRange int_range(DType t) {
  switch (t) {
    case DType::Int8: return {-128, 127};
    case DType::Int16: return {-32768, 32767};
    case DType::Int32: return {std::numeric_limits<std::int32_t>::min(), 2147483647ull};
    case DType::Int64: return {std::numeric_limits<std::int64_t>::min(), 9223372036854775807ull};
    case DType::UInt8: return {0, 255};
    case DType::UInt16: return {0, 65535};
    case DType::UInt32: return {0, 4294967295ull};
    case DType::UInt64: return {0, std::numeric_limits<std::uint64_t>::max()};
    case DType::Bool: return {0, 1};
    default: return {0, 0};
  }
}

bool is_integer(DType t) { return !dtype_is_floating(t) && t != DType::Bool; }

std::string format_double(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  // The shortest text that reads back as v, spelled like Python's repr: fixed notation for
  // 1e-4 <= |v| < 1e16, else scientific; "2" becomes "2.0".
  char buf[400];
  const double a = std::fabs(v);
  const bool fixed = a == 0 || (a >= 1e-4 && a < 1e16);
  auto r = std::to_chars(buf, buf + sizeof buf, v, fixed ? std::chars_format::fixed : std::chars_format::scientific);
  std::string s(buf, r.ptr);
  if (s.find_first_of(".eEn") == std::string::npos) s += ".0";
  return s;
}

const char* largest_finite(DType t) {
  switch (t) {
    case DType::Float16: return "65504";
    case DType::BFloat16: return "3.3895313892515355e+38";
    case DType::Float32: return "3.4028234663852886e+38";
    default: return "";
  }
}

template <typename T>
void put(ArgSlot& out, T v) noexcept {
  std::memset(out.bytes, 0, sizeof out.bytes);
  std::memcpy(out.bytes, &v, sizeof v);
}

}  // namespace

std::uint16_t double_to_half_bits(double v) noexcept { return static_cast<std::uint16_t>(round_double_to<5, 10>(v)); }
std::uint16_t double_to_bfloat16_bits(double v) noexcept {
  return static_cast<std::uint16_t>(round_double_to<8, 7>(v));
}
std::uint32_t double_to_float_bits(double v) noexcept { return static_cast<std::uint32_t>(round_double_to<8, 23>(v)); }

const char* to_string(LaunchParam::Kind kind) noexcept {
  switch (kind) {
    case LaunchParam::Kind::Pointer: return "pointer";
    case LaunchParam::Kind::Scalar: return "scalar";
    case LaunchParam::Kind::Unsupported: return "unsupported";
  }
  return "?";
}

std::string LaunchParam::describe() const {
  switch (kind) {
    case Kind::Pointer: return "a pointer (" + type + ")";
    case Kind::Scalar: {
      const char* n = dtype_name(scalar);
      return std::string(n[0] == 'i' ? "an " : "a ") + n + " scalar (" + type + ")";
    }
    case Kind::Unsupported: return "of type '" + type + "'";
  }
  return "?";
}

LaunchParam classify_param_type(const std::string& type) {
  LaunchParam p;
  p.type = type;
  const std::vector<std::string> t = type_tokens(type);
  std::size_t stars = 0, first_star = t.size();
  bool has_ref = false, has_template = false, has_array = false;
  for (std::size_t i = 0; i < t.size(); ++i) {
    if (t[i] == "*") {
      if (!stars) first_star = i;
      ++stars;
    }
    if (t[i] == "&") has_ref = true;
    if (t[i] == "<") has_template = true;
    if (t[i] == "[") has_array = true;
  }
  if (has_ref) return p;  // kernels cannot take references
  if (stars || has_array) {
    p.kind = LaunchParam::Kind::Pointer;
    p.size = sizeof(void*);
    if (stars == 1 && !has_template) {
      std::vector<std::string> head(t.begin(), t.begin() + static_cast<std::ptrdiff_t>(first_star));
      if (auto w = plain_words(head)) {
        if (w->size() == 1 && (*w)[0] == "void") return p;
        p.pointee = scalar_from_words(*w);
      }
    } else if (has_array && !stars && !has_template) {
      std::vector<std::string> head;
      for (const auto& x : t) {
        if (x == "[") break;
        head.push_back(x);
      }
      if (auto w = plain_words(head)) p.pointee = scalar_from_words(*w);
    }
    return p;
  }
  if (has_template) return p;
  auto w = plain_words(t);
  if (!w) return p;
  if (auto s = scalar_from_words(*w)) {
    p.kind = LaunchParam::Kind::Scalar;
    p.scalar = *s;
    p.size = dtype_size(*s);
  }
  return p;
}

ParamLayout::ParamLayout(const KernelDecl& decl, const std::vector<std::pair<std::string, TemplateArg>>& args,
                         std::string kernel_display)
    : kernel_(std::move(kernel_display)) {
  build(decl, args);
}

ParamLayout::ParamLayout(const KernelDecl& decl, const TemplateArg* args, std::size_t n, std::string kernel_display)
    : kernel_(std::move(kernel_display)) {
  std::vector<std::pair<std::string, TemplateArg>> named;
  for (std::size_t i = 0; i < n && i < decl.template_params.size(); ++i)
    named.emplace_back(decl.template_params[i].name, args[i]);
  build(decl, named);
}

void ParamLayout::build(const KernelDecl& decl, const std::vector<std::pair<std::string, TemplateArg>>& args) {
  if (kernel_.empty()) kernel_ = decl.name;
  // What each type template parameter stands for: the bound dtype, else its default's text.
  std::map<std::string, std::vector<std::string>> subst;
  for (const auto& p : decl.template_params) {
    if (p.kind != TemplateParam::Kind::Type || p.name.empty()) continue;
    const TemplateArg* bound = nullptr;
    for (const auto& a : args)
      if (a.first == p.name && a.second.kind() != TemplateArg::Kind::Default) bound = &a.second;
    if (bound && bound->kind() == TemplateArg::Kind::Type)
      subst[p.name] = type_tokens(dtype_cpp(bound->dtype()));
    else if (!bound && p.default_value)
      subst[p.name] = type_tokens(*p.default_value);
  }
  params_.clear();
  params_.reserve(decl.params.size());
  for (std::size_t i = 0; i < decl.params.size(); ++i) {
    const FunctionParam& fp = decl.params[i];
    std::vector<std::string> t = type_tokens(fp.type);
    // A default may name an earlier parameter (typename U = T): substitute a few rounds.
    for (int round = 0; round < 4; ++round) {
      bool changed = false;
      std::vector<std::string> next;
      for (std::size_t k = 0; k < t.size(); ++k) {
        auto it = subst.find(t[k]);
        bool member = k > 0 && (t[k - 1] == "::" || t[k - 1] == "." || t[k - 1] == "->");
        if (it != subst.end() && !member) {
          next.insert(next.end(), it->second.begin(), it->second.end());
          changed = true;
        } else {
          next.push_back(t[k]);
        }
      }
      t = std::move(next);
      if (!changed) break;
    }
    LaunchParam p = classify_param_type(join_type(t));
    if (fp.is_pointer && p.kind != LaunchParam::Kind::Pointer) {
      p.kind = LaunchParam::Kind::Pointer;
      p.size = sizeof(void*);
    }
    p.name = fp.name.empty() ? "#" + std::to_string(i + 1) : fp.name;
    p.declared = fp.type;
    params_.push_back(std::move(p));
  }
}

std::string ParamLayout::signature() const {
  std::string out = "(";
  for (std::size_t i = 0; i < params_.size(); ++i) out += (i ? ", " : "") + params_[i].name;
  return out + ")";
}

void ParamLayout::check_count(std::size_t n) const {
  if (n == params_.size()) return;
  throw TypeError("kernel " + kernel_ + " takes " + std::to_string(params_.size()) + " argument" +
                  (params_.size() == 1 ? "" : "s") + " " + signature() + ", got " + std::to_string(n));
}

void ParamLayout::check_sizes(const std::vector<std::size_t>& sizes) const {
  if (sizes.size() != params_.size())
    throw LaunchError("kernel " + kernel_ + ": kjit read " + std::to_string(params_.size()) + " parameters " +
                      signature() + " from the template, but the compiled kernel has " + std::to_string(sizes.size()) +
                      "; the declaration is not what NVRTC compiled (macros in the parameter list?). "
                      "Write the __global__ signature without macros.");
  for (std::size_t i = 0; i < params_.size(); ++i) {
    const LaunchParam& p = params_[i];
    if (p.kind == LaunchParam::Kind::Unsupported || p.size == sizes[i]) continue;
    throw LaunchError("parameter '" + p.name + "' of kernel " + kernel_ + " is read as " + p.describe() + ", " +
                      std::to_string(p.size) + " bytes, but the compiled kernel takes " + std::to_string(sizes[i]) +
                      " bytes there; the declaration '" + p.declared +
                      "' is not what NVRTC compiled. Write the parameter type without macros or typedefs.");
  }
}

std::string ParamLayout::allowed(std::size_t i) const {
  const LaunchParam& p = params_[i];
  switch (p.kind) {
    case LaunchParam::Kind::Pointer: return "a CUDA tensor or None";
    case LaunchParam::Kind::Unsupported: return "nothing (kjit cannot pass this type)";
    case LaunchParam::Kind::Scalar:
      if (p.scalar == DType::Bool) return "a bool";
      if (dtype_is_floating(p.scalar)) return "a float or an int";
      return "an int";
  }
  return "?";
}

std::string ParamLayout::arg_prefix(std::size_t i) const {
  return "argument '" + params_[i].name + "' of " + kernel_ + " is " + params_[i].describe();
}

void ParamLayout::reject(std::size_t i, const std::string& got) const {
  const LaunchParam& p = params_[i];
  if (p.kind == LaunchParam::Kind::Unsupported)
    throw TypeError("argument '" + p.name + "' of " + kernel_ + " has type '" + p.type +
                    "', which a launch cannot pass (supported: pointers, and scalars of type bool, "
                    "(unsigned) char/short/int/long/long long, the <cstdint> types, float, double, __half and "
                    "__nv_bfloat16); wrap the kernel in one that takes supported parameters");
  throw TypeError(arg_prefix(i) + ": pass " + allowed(i) + ", got " + got);
}

void ParamLayout::reject_range(std::size_t i, const std::string& value_text) const {
  const LaunchParam& p = params_[i];
  if (p.kind != LaunchParam::Kind::Scalar || !is_integer(p.scalar)) reject(i, "the int " + value_text);
  IntRange r = int_range(p.scalar);
  throw ValueError(arg_prefix(i) + ": the value " + value_text + " is out of its range [" + std::to_string(r.lo) +
                   ", " + std::to_string(r.hi) + "]");
}

void ParamLayout::pack_float(std::size_t i, double v, ArgSlot& out) const {
  const LaunchParam& p = params_[i];
  if (p.kind != LaunchParam::Kind::Scalar || !dtype_is_floating(p.scalar)) reject(i, "the float " + format_double(v));
  switch (p.scalar) {
    case DType::Float64: put(out, v); return;
    case DType::Float32: {
      std::uint32_t b = double_to_float_bits(v);
      if (std::isfinite(v) && (b & 0x7fffffffu) == 0x7f800000u) break;
      put(out, b);
      return;
    }
    case DType::Float16: {
      std::uint16_t b = double_to_half_bits(v);
      if (std::isfinite(v) && (b & 0x7fffu) == 0x7c00u) break;
      put(out, b);
      return;
    }
    case DType::BFloat16: {
      std::uint16_t b = double_to_bfloat16_bits(v);
      if (std::isfinite(v) && (b & 0x7fffu) == 0x7f80u) break;
      put(out, b);
      return;
    }
    default: break;
  }
  throw ValueError(arg_prefix(i) + ": the value " + format_double(v) + " overflows it (largest finite " +
                   dtype_name(p.scalar) + ": " + largest_finite(p.scalar) +
                   "); pass a smaller value or declare the parameter with a wider type");
}

void ParamLayout::pack_int(std::size_t i, std::int64_t v, ArgSlot& out) const {
  const LaunchParam& p = params_[i];
  if (p.kind != LaunchParam::Kind::Scalar || p.scalar == DType::Bool) reject(i, "the int " + std::to_string(v));
  if (dtype_is_floating(p.scalar)) {
    const double d = static_cast<double>(v);
    if (p.scalar == DType::Float64) {
      put(out, d);
      return;
    }
    // Integers convert like Python's float(): then the float rules (overflow is an error).
    try {
      pack_float(i, d, out);
    } catch (const ValueError&) {
      throw ValueError(arg_prefix(i) + ": the value " + std::to_string(v) + " overflows it (largest finite " +
                       dtype_name(p.scalar) + ": " + largest_finite(p.scalar) + ")");
    }
    return;
  }
  IntRange r = int_range(p.scalar);
  if (v < r.lo || (v > 0 && static_cast<std::uint64_t>(v) > r.hi)) reject_range(i, std::to_string(v));
  switch (p.scalar) {
    case DType::Int8: put(out, static_cast<std::int8_t>(v)); return;
    case DType::Int16: put(out, static_cast<std::int16_t>(v)); return;
    case DType::Int32: put(out, static_cast<std::int32_t>(v)); return;
    case DType::Int64: put(out, v); return;
    case DType::UInt8: put(out, static_cast<std::uint8_t>(v)); return;
    case DType::UInt16: put(out, static_cast<std::uint16_t>(v)); return;
    case DType::UInt32: put(out, static_cast<std::uint32_t>(v)); return;
    case DType::UInt64: put(out, static_cast<std::uint64_t>(v)); return;
    default: reject(i, "the int " + std::to_string(v));
  }
}

void ParamLayout::pack_uint(std::size_t i, std::uint64_t v, ArgSlot& out) const {
  if (v <= static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) {
    pack_int(i, static_cast<std::int64_t>(v), out);
    return;
  }
  const LaunchParam& p = params_[i];
  if (p.kind != LaunchParam::Kind::Scalar || p.scalar == DType::Bool) reject(i, "the int " + std::to_string(v));
  if (dtype_is_floating(p.scalar)) {
    if (p.scalar == DType::Float64) {
      put(out, static_cast<double>(v));
      return;
    }
    try {
      pack_float(i, static_cast<double>(v), out);
    } catch (const ValueError&) {
      throw ValueError(arg_prefix(i) + ": the value " + std::to_string(v) + " overflows it (largest finite " +
                       dtype_name(p.scalar) + ": " + largest_finite(p.scalar) + ")");
    }
    return;
  }
  if (p.scalar != DType::UInt64) reject_range(i, std::to_string(v));
  put(out, v);
}

void ParamLayout::pack_bool(std::size_t i, bool v, ArgSlot& out) const {
  const LaunchParam& p = params_[i];
  if (p.kind != LaunchParam::Kind::Scalar || p.scalar != DType::Bool)
    reject(i, std::string("the bool ") + (v ? "True" : "False"));
  put(out, static_cast<unsigned char>(v ? 1 : 0));
}

void ParamLayout::pack_pointer(std::size_t i, const void* v, ArgSlot& out) const {
  if (params_[i].kind != LaunchParam::Kind::Pointer) reject(i, v ? "a pointer" : "None");
  put(out, v);
}

ArgBuffer::ArgBuffer(std::size_t n) : n_(n) {
  if (n <= kInline) {
    slots_ = inline_slots_;
    ptrs_ = inline_ptrs_;
  } else {
    heap_slots_.reset(new ArgSlot[n]);
    heap_ptrs_.reset(new void*[n]);
    slots_ = heap_slots_.get();
    ptrs_ = heap_ptrs_.get();
  }
  for (std::size_t i = 0; i < n; ++i) ptrs_[i] = &slots_[i];
}

}  // namespace kjit
