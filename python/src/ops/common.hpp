// Shared pieces of the built-in ops (python/src/ops/*.cpp): argument checks with messages that say
// what was received, what is allowed and what to do; at::ScalarType -> kjit::DType; the vector width
// from pointer alignment; grid sizing; scalar kernel arguments packed with the kernel's exact C++ type.
// Everything here is hot-path safe: no allocation, no hashing, no Python.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/GradMode.h>
#include <c10/core/ScalarType.h>
#include <c10/util/StringUtil.h>

#include <array>
#include <cstdint>
#include <exception>
#include <initializer_list>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "kjit/dtype.hpp"
#include "kjit/engine.hpp"
#include "kjit/error.hpp"
#include "kjit/kernel_family.hpp"
#include "kjit/launch_config.hpp"
#include "launch_kernel.hpp"
#include "torch/launch.hpp"

namespace kjit::ops {

// The element types of the floating-point ops (add_constant, outer, outer_backward, fused_update).
inline constexpr std::initializer_list<at::ScalarType> kFloatingTypes = {
    at::ScalarType::Float, at::ScalarType::Half, at::ScalarType::BFloat16, at::ScalarType::Double};

// kjit's DType of a torch dtype; throws TypeError for one kjit cannot specialize on.
DType to_dtype(at::ScalarType t);

// Argument checks. `op` is the user-facing name ("kjit.ops.outer"), `arg` the argument's name.
// The CUDA device every tensor is on (kjit::device_of, its ValueError prefixed with `op`): CPU tensors
// and tensors on different devices are rejected with the devices named and a `.to(...)` to fix it.
int device_for(const char* op, std::initializer_list<NamedTensor> tensors);
// One of `allowed` (TypeError listing them and saying how to convert).
void check_dtype(const char* op, const char* arg, const at::Tensor& t, std::initializer_list<at::ScalarType> allowed);
// Contiguous (ValueError with shape and strides: "call .contiguous()").
void check_contiguous(const char* op, const char* arg, const at::Tensor& t);
// One of `allowed` and contiguous.
inline void check_input(const char* op, const char* arg, const at::Tensor& t,
                        std::initializer_list<at::ScalarType> allowed) {
  check_dtype(op, arg, t, allowed);
  check_contiguous(op, arg, t);
}
// `t` has the same dtype as `ref` (TypeError naming both).
void check_same_dtype(const char* op, const char* arg, const at::Tensor& t, const char* ref_arg, const at::Tensor& ref);
// `t` has exactly the shape of `ref` (ValueError naming both shapes).
void check_same_shape(const char* op, const char* arg, const at::Tensor& t, const char* ref_arg, const at::Tensor& ref);
// Cold path: rethrows a kjit::Error thrown inside an op so that a Python caller (through torch.ops)
// gets the kjit exception class with its message and data, not a RuntimeError; C++ callers (no
// interpreter) get the original exception. See python_errors.cpp.
[[noreturn]] void rethrow_for_python(std::exception_ptr error);

// An op implementation whose kjit errors surface in Python as kjit.* exceptions:
// m.impl("outer", kjit_errors<&outer_cuda>).
template <auto F>
struct WithKjitErrors;
template <class R, class... A, R (*F)(A...)>
struct WithKjitErrors<F> {
  static R call(A... args) {
    try {
      return F(std::forward<A>(args)...);
    } catch (const Error&) {
      rethrow_for_python(std::current_exception());
    }
  }
};
template <auto F>
inline constexpr auto kjit_errors = &WithKjitErrors<F>::call;

// "[2, 3, 4]" for messages: IntArrayRef, SymIntArrayRef or a vector of integers.
template <class Sizes>
std::string shape_str(const Sizes& sizes) {
  std::string out = "[";
  for (std::size_t i = 0; i < sizes.size(); ++i) out += (i ? ", " : "") + c10::str(sizes[i]);
  return out + "]";
}

// Throws ValueError "<op>: <message>".
[[noreturn]] void fail_value(const char* op, const std::string& message);

// The one rule for the vector width of every op. An access: a pointer and its element size.
struct Access {
  const void* ptr;
  std::size_t elem_size;
};
// Elements per vector access: the largest power of two up to 16 bytes / the widest element such that
// every pointer is aligned to its elem_size * VEC bytes and `divides` (when > 0) is a multiple of VEC.
// 1 for misaligned views.
int vector_width(const Access* accesses, std::size_t n, std::int64_t divides = 0);
// The same for pointers of one element size.
int pick_vec(std::size_t elem_size, std::initializer_list<const void*> ptrs, std::int64_t divides = 0);

// Multiprocessors of a device (read from the driver once per device).
int sm_count(int device);
// Tests: from now on sm_count(device) is `count` (0: the device's own again), as on a GPU of the same
// architecture with another count (an H100 PCIe after an H100 SXM, a MIG slice). kjit._C._override_sm_count.
void override_sm_count(int device, int count);
// Resident blocks of 256 threads a grid-stride launch fills: 8 per multiprocessor.
inline std::int64_t max_blocks(int device) { return static_cast<std::int64_t>(sm_count(device)) * 8; }

inline std::int64_t cdiv(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }

// A 1-D grid-stride launch over `n_vec` work items with `block` threads per block:
// min(cdiv(n_vec, block), SMs * 8) blocks, at least one (the scalar tail needs a thread).
Dim3 grid_1d(std::int64_t n_vec, int device, unsigned block = 256);

// Template arguments, short: a dtype, an integer, a bool.
inline TemplateArg type_arg(at::ScalarType t) { return TemplateArg::type(to_dtype(t)); }
inline TemplateArg int_arg(std::int64_t v) { return TemplateArg::integer(v); }
inline TemplateArg bool_arg(bool v) { return TemplateArg::boolean(v); }

// N template arguments to be overwritten (TemplateArg has no default value): for argument lists whose
// length depends on the call.
template <std::size_t... I>
std::array<TemplateArg, sizeof...(I)> template_arg_slots(std::index_sequence<I...>) {
  return {((void)I, TemplateArg::boolean(false))...};
}
template <std::size_t N>
std::array<TemplateArg, N> template_arg_slots() {
  return template_arg_slots(std::make_index_sequence<N>{});
}

// While one lives on a thread, the first kernel_for() there whose kernel is not in memory (about to be
// loaded or compiled) runs `predict` first, once: an autograd forward that wants gradients hands its
// backward's kernels to KernelFamily::prepare_ahead this way, so that they compile beside its own kernel.
// A forward whose kernel is in memory pays for this object alone; by the time `predict` runs, the forward
// has passed its own checks. Armed only for a real CUDA input with elements (never a fake, functional or
// traced one, whose sizes may be symbolic) and never under a TorchDispatchMode (whose handler runs between
// this forward and its kernel, and may call other ops first); an object that is not armed still hides
// the ones outside it. An exception out of `predict` is dropped: the backward meets it again and reports it.
class CompileAheadOnMiss {
 public:
  template <class Predict>
  CompileAheadOnMiss(const at::Tensor& x, const Predict& predict) noexcept
      : CompileAheadOnMiss(x, &predict, [](const void* p) { (*static_cast<const Predict*>(p))(); }) {}
  // `predict` is called later, by address: a named object that outlives this one, never a temporary.
  template <class Predict>
  CompileAheadOnMiss(const at::Tensor& x, const Predict&& predict) = delete;
  ~CompileAheadOnMiss();
  CompileAheadOnMiss(const CompileAheadOnMiss&) = delete;
  CompileAheadOnMiss& operator=(const CompileAheadOnMiss&) = delete;
  // kernel_for's miss: runs this thread's innermost armed prediction, if it has not run yet.
  static void run_pending() noexcept;

 private:
  CompileAheadOnMiss(const at::Tensor& x, const void* predict, void (*call)(const void*)) noexcept;
  const void* predict_;
  void (*call_)(const void*) = nullptr;  // null once run, or when not armed
  CompileAheadOnMiss* outer_;
};

// The kernel of `family` for these template arguments (in the kernel's parameter order) on `device`:
// a memory hit on the hot path; on a miss (a disk load or a compile) the GIL is released while it waits,
// when this thread holds it. `compile_forbidden` as in KernelFamily::get (non-null during CUDA graph capture).
std::shared_ptr<const SpecializedKernel> kernel_for(const KernelFamily& family, const TemplateArg* args, std::size_t n,
                                                    int device, const char* compile_forbidden);
template <std::size_t N>
std::shared_ptr<const SpecializedKernel> kernel_for(const KernelFamily& family, const TemplateArg (&args)[N],
                                                    int device, const char* compile_forbidden) {
  return kernel_for(family, args, N, device, compile_forbidden);
}

// The kernel of `family` specialized on (T = dtype, VEC = vec) for `device`.
std::shared_ptr<const SpecializedKernel> typed_kernel(const KernelFamily& family, at::ScalarType dtype, int vec,
                                                      int device, const char* compile_forbidden);

// A family of a built-in template (kernel_templates/<tmpl>.cuh), made once per process by the caller's
// function-local static.
std::shared_ptr<const Template> builtin_template(const char* name);

// An uninitialized contiguous CUDA tensor of `like`'s dtype and device (without the dispatcher).
at::Tensor new_empty(c10::IntArrayRef sizes, const at::Tensor& like, std::optional<at::ScalarType> dtype = {});

// The accumulation dtype of the kernels (kjit_detail::acc_t): float64 for float64, float32 otherwise.
inline at::ScalarType acc_dtype(at::ScalarType t) {
  return t == at::ScalarType::Double ? at::ScalarType::Double : at::ScalarType::Float;
}

// `dim` of a tensor of `ndim` dims made non-negative (a 0-dim tensor has one dim for this purpose);
// ValueError naming the allowed range otherwise.
std::int64_t normalize_dim(const char* op, std::int64_t dim, std::int64_t ndim);

// `t` has `ref`'s dtype (TypeError) and the shape `shape` (ValueError): the checks of an op's second tensor.
template <class Sizes>
void check_like(const char* op, const char* arg, const at::Tensor& t, const char* ref_arg, const at::Tensor& ref,
                const Sizes& shape) {
  check_dtype(op, arg, t, kFloatingTypes);
  check_same_dtype(op, arg, t, ref_arg, ref);
  if (t.sym_sizes() != c10::SymIntArrayRef(shape))
    fail_value(
        op, std::string(arg) + " has shape " + shape_str(t.sym_sizes()) + " but must have shape " + shape_str(shape));
}

// Whether an autograd kernel must record a graph node (otherwise it calls the op below autograd).
template <class... Ts>
bool needs_grad(const Ts&... ts) {
  return c10::GradMode::is_enabled() && (... || ts.requires_grad());
}

// A kernel argument of type T (the element type) holding `value`: float, double, or the bits of a
// __half / __nv_bfloat16. An argument of launch_kernel (arg_data / arg_size).
class ElementScalar {
 public:
  ElementScalar(double value, at::ScalarType dtype);
  const void* arg_data() const noexcept { return bytes_; }
  std::size_t arg_size() const noexcept { return size_; }

 private:
  alignas(8) unsigned char bytes_[8] = {};
  std::size_t size_ = 0;
};

// A kernel argument of the arithmetic type kjit_detail::acc_t<T> (detail/numeric.cuh): double for
// float64 elements, float for the others. An argument of launch_kernel (arg_data / arg_size).
class AccScalar {
 public:
  AccScalar(double value, at::ScalarType dtype)
      : d_(value), f_(static_cast<float>(value)), double_(dtype == at::ScalarType::Double) {}
  const void* arg_data() const noexcept {
    return double_ ? static_cast<const void*>(&d_) : static_cast<const void*>(&f_);
  }
  std::size_t arg_size() const noexcept { return double_ ? sizeof(d_) : sizeof(f_); }

 private:
  double d_;
  float f_;
  bool double_;
};

}  // namespace kjit::ops
