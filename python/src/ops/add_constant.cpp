// kjit::add_constant(Tensor x, float c) -> Tensor: y = x + c (kernel_templates/add_constant.cuh).
// c is a runtime kernel argument: changing it never recompiles. Specialized on (dtype, VEC).
#include <ATen/ops/empty.h>

#include "ops/runtime/op.hpp"

namespace kjit::ops {
namespace {

constexpr const char* kOp = "kjit.ops.add_constant";

const KernelFamily& family() {
  static const KernelFamily f(Engine::global(), Template::builtin("add_constant"), "add_constant",
                              CompileOptions::library());
  return f;
}

at::Tensor add_constant_cuda(const at::Tensor& x, double c) {
  const int device = device_for(kOp, {{"x", x}});
  check_input(kOp, "x", x, kFloatingTypes);
  at::Tensor y = new_empty(x.sizes(), x);
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
  LaunchConfig cfg;
  cfg.grid = grid_1d(n / vec, device);
  cfg.block.x = 256;
  cfg.stream = ctx.stream;
  launch_kernel(*k, cfg, xp, yp, cv, nn);
  return y;
}

at::Tensor add_constant_meta(const at::Tensor& x, double) {
  check_dtype(kOp, "x", x, kFloatingTypes);
  return at::empty_symint(x.sym_sizes(), x.options());
}

class AddConstantFunction : public torch::autograd::Function<AddConstantFunction> {
 public:
  static constexpr const char* kName = "add_constant";
  static at::Tensor forward(torch::autograd::AutogradContext*, const at::Tensor& x, double c) {
    return call_below_autograd<&add_constant_cuda>(kName, x, c);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext*,
                                                 torch::autograd::variable_list grads) {
    return {grads[0], at::Tensor()};  // d(x + c)/dx = 1; c is not a tensor
  }
};

}  // namespace

KJIT_OP(add_constant, "add_constant(Tensor x, float c) -> Tensor", add_constant_cuda, add_constant_meta);
KJIT_OP_AUTOGRAD(add_constant, (autograd_kernel<AddConstantFunction, &add_constant_cuda>))

}  // namespace kjit::ops
