// kjit::add_constant(Tensor x, float c) -> Tensor: y = x + c (kernel_templates/add_constant.cuh).
// c is a runtime kernel argument: changing it never recompiles. Specialized on (dtype, VEC).
#include <ATen/core/LegacyTypeDispatch.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/ops/empty.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/library.h>

#include "common.hpp"

namespace kjit::ops {
namespace {

constexpr const char* kOp = "kjit.ops.add_constant";

const KernelFamily& family() {
  static const KernelFamily f(Engine::global(), Template::builtin("add_constant"), "add_constant");
  return f;
}

at::Tensor add_constant_cuda(const at::Tensor& x, double c) {
  const int device = device_for(kOp, {{"x", x}});
  check_input(kOp, "x", x, kFloatingTypes);
  at::Tensor y = at::empty(x.sizes(), x.options());
  const std::int64_t n = x.numel();
  if (n == 0) return y;
  LaunchContext ctx(device);
  const at::ScalarType dt = x.scalar_type();
  const int vec = pick_vec(x.element_size(), {x.const_data_ptr(), y.const_data_ptr()});
  const auto k = typed_kernel(family(), dt, vec, device, ctx.compile_forbidden);

  const void* xp = x.const_data_ptr();
  void* yp = y.data_ptr();
  ElementScalar cv(c, dt);
  long long nn = n;
  void* args[] = {&xp, &yp, cv.ptr(), &nn};
  LaunchConfig cfg;
  cfg.grid = grid_1d(n / vec, device);
  cfg.block.x = 256;
  cfg.stream = ctx.stream;
  k->kernel->launch(cfg, args);
  return y;
}

at::Tensor add_constant_meta(const at::Tensor& x, double) {
  check_dtype(kOp, "x", x, kFloatingTypes);
  return at::empty_symint(x.sym_sizes(), x.options());
}

const c10::TypedOperatorHandle<at::Tensor(const at::Tensor&, double)>& op() {
  static const auto h = c10::Dispatcher::singleton()
                            .findSchemaOrThrow("kjit::add_constant", "")
                            .typed<at::Tensor(const at::Tensor&, double)>();
  return h;
}

class AddConstantFunction : public torch::autograd::Function<AddConstantFunction> {
 public:
  static at::Tensor forward(torch::autograd::AutogradContext*, const at::Tensor& x, double c) {
    at::AutoDispatchBelowADInplaceOrView guard;
    return op().call(x, c);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext*,
                                                 torch::autograd::variable_list grads) {
    return {grads[0], at::Tensor()};  // d(x + c)/dx = 1; c is not a tensor
  }
};

at::Tensor add_constant_autograd(const at::Tensor& x, double c) {
  if (!needs_grad(x)) {
    at::AutoDispatchBelowADInplaceOrView guard;
    return op().call(x, c);
  }
  return AddConstantFunction::apply(x, c);
}

}  // namespace

TORCH_LIBRARY_IMPL(kjit, CUDA, m) { m.impl("add_constant", kjit_errors<&add_constant_cuda>); }
// CPU tensors reach the same function, whose checks reject them with a message saying to move them
// to CUDA (instead of the dispatcher's "could not run with arguments from the CPU backend").
TORCH_LIBRARY_IMPL(kjit, CPU, m) {
  m.impl("add_constant", kjit_errors<&add_constant_cuda>);
}
TORCH_LIBRARY_IMPL(kjit, Meta, m) { m.impl("add_constant", kjit_errors<&add_constant_meta>); }
TORCH_LIBRARY_IMPL(kjit, Autograd, m) { m.impl("add_constant", &add_constant_autograd); }

}  // namespace kjit::ops
