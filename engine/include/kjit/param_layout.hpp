// ParamLayout: the launch-time view of a specialized kernel's function parameters. Every parameter's
// declared type has the bound type template arguments substituted ("const T* __restrict__" with
// T=float16 -> "const __half* __restrict__") and is classified as a pointer, a scalar of one of the
// DType types, or unsupported. The packer turns a host value (double / int64 / uint64 / bool / pointer)
// into the exact bytes of the parameter's type, rejecting values that do not fit, so that a launch
// from a dynamic language can never pass a wrongly sized or silently truncated argument.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "kjit/dtype.hpp"
#include "kjit/kernel_decl.hpp"
#include "kjit/template_arg.hpp"

namespace kjit {

struct LaunchParam {
  enum class Kind : unsigned char { Pointer, Scalar, Unsupported };

  std::string name;      // as declared; "#3" (1-based) when the declaration names none
  std::string declared;  // type as written: "const T* __restrict__"
  std::string type;      // type with the template arguments substituted: "const float* __restrict__"
  Kind kind = Kind::Unsupported;
  DType scalar = DType::Float32;  // Kind::Scalar: the type passed
  std::optional<DType> pointee;   // Kind::Pointer: the element type, when it is one of the DTypes
  std::size_t size = 0;           // bytes passed: 8 for pointers, the scalar's size, 0 when unsupported

  // "a pointer (const float* __restrict__)", "a float32 scalar (float)", "of type 'Params'".
  std::string describe() const;
};

const char* to_string(LaunchParam::Kind kind) noexcept;

// The bytes of one argument: large and aligned enough for every supported parameter type.
struct alignas(8) ArgSlot {
  unsigned char bytes[8];
};

class ParamLayout {
 public:
  ParamLayout() = default;
  // `args`: template arguments bound by name (as in Specialization::args()); a type parameter not
  // bound is read from its default. `kernel_display` names the kernel in messages
  // ("add_constant<float, 4>").
  ParamLayout(const KernelDecl& decl, const std::vector<std::pair<std::string, TemplateArg>>& args,
              std::string kernel_display);
  // The same from positional arguments: args[i] binds the i-th template parameter.
  ParamLayout(const KernelDecl& decl, const TemplateArg* args, std::size_t n, std::string kernel_display);

  std::size_t size() const noexcept { return params_.size(); }
  const LaunchParam& operator[](std::size_t i) const noexcept { return params_[i]; }
  const std::vector<LaunchParam>& params() const noexcept { return params_; }
  const std::string& kernel() const noexcept { return kernel_; }
  // "(x, y, c, n)"
  std::string signature() const;

  // TypeError "kernel add_constant<float, 4> takes 4 arguments (x, y, c, n), got 3" unless n == size().
  void check_count(std::size_t n) const;
  // Compares with the driver's parameter sizes (Kernel::param_sizes()); a mismatch is a LaunchError
  // naming the parameter (the declaration kjit parsed is not what NVRTC compiled).
  void check_sizes(const std::vector<std::size_t>& driver_sizes) const;

  // Write parameter i's bytes into `out`. A value of the wrong kind is a TypeError (a float for an
  // integer or bool parameter, an integer for a bool, any number for a pointer); a value outside the
  // parameter type's range is a ValueError (integers out of range, finite floats that overflow).
  // NaN and infinities pass to floating parameters unchanged (NaN stays NaN, with its sign).
  void pack_float(std::size_t i, double value, ArgSlot& out) const;
  void pack_int(std::size_t i, std::int64_t value, ArgSlot& out) const;
  void pack_uint(std::size_t i, std::uint64_t value, ArgSlot& out) const;  // for values above INT64_MAX
  void pack_bool(std::size_t i, bool value, ArgSlot& out) const;
  void pack_pointer(std::size_t i, const void* value, ArgSlot& out) const;
  // TypeError "argument 'x' of K is <describe()>: pass <what is allowed>, got <got>" (for values a
  // caller cannot convert at all: a tensor for a scalar, a string, ...).
  [[noreturn]] void reject(std::size_t i, const std::string& got) const;
  // ValueError: `value_text` is outside the range of integer parameter i (for integers wider than 64 bits).
  [[noreturn]] void reject_range(std::size_t i, const std::string& value_text) const;
  // What parameter i accepts, for messages ("a CUDA tensor or None", "an int", "a float or an int", "a bool").
  std::string allowed(std::size_t i) const;

 private:
  void build(const KernelDecl& decl, const std::vector<std::pair<std::string, TemplateArg>>& args);
  std::string arg_prefix(std::size_t i) const;  // "argument 'x' of add_constant<float, 4> is a pointer (...)"
  std::vector<LaunchParam> params_;
  std::string kernel_;
};

// Reads a (substituted) C++ type as a parameter type. Exposed for tests.
LaunchParam classify_param_type(const std::string& type);

// Argument storage for one launch: `pointers()` is the void** that Kernel::launch takes, each entry
// pointing at its slot. Up to kInline arguments live inside the object (no heap allocation).
class ArgBuffer {
 public:
  static constexpr std::size_t kInline = 16;
  explicit ArgBuffer(std::size_t n);
  ArgBuffer(const ArgBuffer&) = delete;
  ArgBuffer& operator=(const ArgBuffer&) = delete;

  std::size_t size() const noexcept { return n_; }
  ArgSlot& slot(std::size_t i) noexcept { return slots_[i]; }
  void** pointers() noexcept { return ptrs_; }

 private:
  std::size_t n_;
  ArgSlot inline_slots_[kInline];
  void* inline_ptrs_[kInline];
  std::unique_ptr<ArgSlot[]> heap_slots_;
  std::unique_ptr<void*[]> heap_ptrs_;
  ArgSlot* slots_;
  void** ptrs_;
};

// Host conversions with round-to-nearest-even, exact for every double (no double rounding through
// float); overflow gives an infinity; NaN stays NaN (quiet, sign and top payload bits kept).
std::uint16_t double_to_half_bits(double v) noexcept;
std::uint16_t double_to_bfloat16_bits(double v) noexcept;
std::uint32_t double_to_float_bits(double v) noexcept;

}  // namespace kjit
