// The one way to define a built-in op (torch.ops.kjit.<name> and kjit.ops.<name>); see docs/adding-an-op.md.
//
//   KJIT_OP(softmax, "softmax(Tensor x, int dim=-1) -> Tensor", softmax_cuda, softmax_meta)
//   KJIT_OP_AUTOGRAD(softmax, (autograd_kernel<SoftmaxFunction, &softmax_cuda>))
//
// KJIT_OP registers, from one schema and two C++ functions of the same signature:
//   - the schema in the `kjit` namespace;
//   - `cuda` as the CUDA kernel, and also as the CPU kernel so that CPU tensors get kjit's message
//     ("expected all tensors on one CUDA device, got cpu (x); move them with .to('cuda')") instead of
//     the dispatcher's; kjit errors surface in Python as kjit.* exceptions (kjit_errors);
//   - `meta` as the Meta kernel (fake tensors, torch.compile): shapes only, with the CUDA kernel's checks;
//   - the direct entry kjit.ops.<name> (direct.hpp): a C function that calls `cuda` itself when nothing
//     needs the dispatcher, and the registered op otherwise.
// KJIT_OP_AUTOGRAD adds the Autograd kernel: autograd_kernel<Function, &cuda> calls the op below autograd
// when no input needs a gradient and Function::apply (a torch::autograd::Function) otherwise.
//
// An op's file (python/src/ops/<family>.cpp) includes this header and, for row kernels, rows.hpp: it brings
// the op runtime (ops/runtime/): argument checks, launch geometry, kernel lookup, kernel arguments, launch.
#pragma once

#include <ATen/core/LegacyTypeDispatch.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/library.h>

#include <optional>
#include <tuple>
#include <utility>

#include "ops/runtime/checks.hpp"
#include "ops/runtime/direct.hpp"
#include "ops/runtime/geometry.hpp"
#include "ops/runtime/kernels.hpp"
#include "ops/runtime/launch_kernel.hpp"
#include "ops/runtime/scalars.hpp"
#include "ops/runtime/tensors.hpp"
#include "ops/runtime/launch_context.hpp"

namespace kjit::ops {

// The dispatcher's handle of kjit::<name> with the C++ signature of the function F.
template <auto F>
struct OpHandle;
template <class R, class... A, R (*F)(A...)>
struct OpHandle<F> {
  static const c10::TypedOperatorHandle<R(A...)>& get(const char* name) {
    static const auto h = c10::Dispatcher::singleton()
                              .findSchemaOrThrow((std::string("kjit::") + name).c_str(), "")
                              .template typed<R(A...)>();
    return h;
  }
};

// The name and schema of the op whose kernel is F (set when KJIT_OP registers it): for messages.
template <auto F>
struct OpInfo {
  static inline const char* name = nullptr;
  static inline const char* schema = nullptr;
  static bool set(const char* n, const char* s) {
    name = n;
    schema = s;
    return true;
  }
};

// TypeError "kjit.ops.<name>: <argument #index of schema> must be a torch.Tensor, got NoneType".
[[noreturn]] void throw_not_a_tensor(const char* name, const char* schema, std::size_t index);

template <auto F>
void require_defined(const at::Tensor& t, std::size_t index) {
  if (!t.defined()) throw_not_a_tensor(OpInfo<F>::name, OpInfo<F>::schema, index);
}
template <auto F, class T>
void require_defined(const T&, std::size_t) {}

// The kernel KJIT_OP registers for F: None where a Tensor goes is kjit's TypeError naming the argument
// (the dispatcher passes it on as an undefined tensor, or finds no tensor at all and calls the
// CompositeExplicitAutograd kernel), and kjit errors surface in Python as kjit.* exceptions.
template <auto F>
struct Registered;
template <class R, class... A, R (*F)(A...)>
struct Registered<F> {
  static R checked(A... a) {
    std::size_t i = 0;
    (require_defined<F>(a, i++), ...);
    return F(a...);
  }
  static constexpr auto kernel = kjit_errors<&checked>;
};

// Whether an argument asks autograd to record the call (a tensor that requires grad).
inline bool requires_grad(const at::Tensor& t) { return t.defined() && t.requires_grad(); }
inline bool requires_grad(const std::optional<at::Tensor>& t) { return t && requires_grad(*t); }
template <class T>
bool requires_grad(const T&) {
  return false;
}

// Calls kjit::<name> below the autograd keys (what an Autograd kernel does when no gradient is needed,
// and what a Function's forward does).
template <auto F, class... A>
decltype(auto) call_below_autograd(const char* name, A&&... a) {
  at::AutoDispatchBelowADInplaceOrView guard;
  return OpHandle<F>::get(name).call(std::forward<A>(a)...);
}

// A Function's outputs as the op's result: a Tensor as it is; a variable_list (what a Function returns
// for several outputs) as the op's tuple of tensors.
template <class R>
struct FunctionResult {
  static R from(R r) { return r; }
};
template <class... T>
struct FunctionResult<std::tuple<T...>> {
  static std::tuple<T...> from(const torch::autograd::variable_list& v) {
    return from(v, std::index_sequence_for<T...>{});
  }
  template <std::size_t... I>
  static std::tuple<T...> from(const torch::autograd::variable_list& v, std::index_sequence<I...>) {
    return {v[I]...};
  }
};

// The Autograd kernel of an op whose CUDA function is F: Function::apply(args...) when grad mode is on
// and an input requires grad, else the op below autograd. Function::kName names the op.
template <class Function, auto F>
struct AutogradKernel;
template <class Function, class R, class... A, R (*F)(A...)>
struct AutogradKernel<Function, F> {
  static R call(A... a) {
    if (!(c10::GradMode::is_enabled() && (... || requires_grad(a))))
      return call_below_autograd<F>(Function::kName, a...);
    return FunctionResult<R>::from(Function::apply(a...));
  }
};
template <class Function, auto F>
inline constexpr auto autograd_kernel = &AutogradKernel<Function, F>::call;

}  // namespace kjit::ops

#define KJIT_OP_CONCAT_(a, b) a##b
#define KJIT_OP_CONCAT(a, b) KJIT_OP_CONCAT_(a, b)

// The dispatcher's part of KJIT_OP alone (an op without a direct entry: kjit::elementwise, whose
// functions are called directly as objects).
// CompositeExplicitAutograd takes calls without any tensor (None for every Tensor argument) and tensors
// of other backends: the CUDA function's checks name what is wrong.
#define KJIT_OP_KERNELS(name, schema, cuda_fn, meta_fn)                                                                \
  TORCH_LIBRARY_FRAGMENT(kjit, m) { m.def(schema); }                                                                   \
  TORCH_LIBRARY_IMPL(kjit, CUDA, m) { m.impl(#name, ::kjit::ops::Registered<&cuda_fn>::kernel); }                      \
  TORCH_LIBRARY_IMPL(kjit, CPU, m) { m.impl(#name, ::kjit::ops::Registered<&cuda_fn>::kernel); }                       \
  TORCH_LIBRARY_IMPL(kjit, CompositeExplicitAutograd, m) { m.impl(#name, ::kjit::ops::Registered<&cuda_fn>::kernel); } \
  TORCH_LIBRARY_IMPL(kjit, Meta, m) { m.impl(#name, ::kjit::ops::Registered<&meta_fn>::kernel); }                      \
  static const bool KJIT_OP_CONCAT(kjit_op_info_, name) =                                                              \
      ::kjit::ops::OpInfo<&cuda_fn>::set(#name, schema) && ::kjit::ops::OpInfo<&meta_fn>::set(#name, schema)

#define KJIT_OP(name, schema, cuda_fn, meta_fn)                     \
  KJIT_OP_KERNELS(name, schema, cuda_fn, meta_fn);                  \
  static const bool KJIT_OP_CONCAT(kjit_direct_registered_, name) = \
      ::kjit::ops::register_direct<&cuda_fn>(#name, schema)

#define KJIT_OP_AUTOGRAD(name, kernel) \
  TORCH_LIBRARY_IMPL(kjit, Autograd, m) { m.impl(#name, kernel); }
