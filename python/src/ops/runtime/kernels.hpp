// How an op finds its kernels: template arguments, the kernel of a family for them on a device (a memory
// hit on the hot path; the GIL released on a miss), the built-in templates, and the backward's kernels
// compiled ahead while a forward misses.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/ScalarType.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <utility>

#include "kjit/kernel_family.hpp"
#include "kjit/template.hpp"
#include "ops/runtime/tensors.hpp"

namespace kjit::ops {

// Template arguments, short: a dtype, an integer, a bool.
inline TemplateArg type_arg(at::ScalarType t) { return TemplateArg::type(to_dtype(t)); }
inline TemplateArg int_arg(std::int64_t v) { return TemplateArg::integer(v); }
inline TemplateArg bool_arg(bool v) { return TemplateArg::boolean(v); }

// A size for a template parameter (a row length D, a GEMM's N or K) through the Engine's ShapePolicy: the
// size itself, or 0 (the kernel's generic variant, which takes the size as an argument) once `kernel` has
// seen KJIT_MAX_SPECIALIZATIONS distinct values of it. `kernel` names the counter ("softmax_forward", "gemm.N").
std::int64_t specialized_d(const char* kernel, std::int64_t d);

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

}  // namespace kjit::ops
