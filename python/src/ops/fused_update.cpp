// kjit::fused_update(x, model_out, noise, float a, float b, float c) -> Tensor:
// a * x + b * model_out + c * noise in one kernel (kernel_templates/fused_update.cuh). a, b, c are
// runtime kernel arguments (float, double for float64 tensors): changing them never recompiles.
// Specialized on (dtype, VEC).
#include <ATen/ops/empty.h>
#include <ATen/ops/mul.h>

#include "ops/runtime/op.hpp"

namespace kjit::ops {
namespace {

constexpr const char* kOp = "kjit.ops.fused_update";

const KernelFamily& family() {
  static const KernelFamily f(Engine::global(), Template::builtin("fused_update"), "fused_update",
                              CompileOptions::library());
  return f;
}

void check_like_x(const at::Tensor& x, const char* arg, const at::Tensor& t) {
  check_input(kOp, arg, t, kFloatingTypes);
  check_same_dtype(kOp, arg, t, "x", x);
  check_same_shape(kOp, arg, t, "x", x);
}

at::Tensor fused_update_cuda(const at::Tensor& x, const at::Tensor& model_out, const at::Tensor& noise, double a,
                             double b, double c) {
  const int device = device_for(kOp, {{"x", x}, {"model_out", model_out}, {"noise", noise}});
  check_input(kOp, "x", x, kFloatingTypes);
  check_like_x(x, "model_out", model_out);
  check_like_x(x, "noise", noise);
  at::Tensor out = new_empty(x.sizes(), x);
  const std::int64_t n = x.numel();
  if (n == 0) return out;
  LaunchContext ctx(device);
  const void* xp = x.const_data_ptr();
  const void* mp = model_out.const_data_ptr();
  const void* zp = noise.const_data_ptr();
  void* op = out.data_ptr();
  const int vec = pick_vec(x.element_size(), {xp, mp, zp, op});
  const auto k = typed_kernel(family(), x.scalar_type(), vec, device, ctx.compile_forbidden);

  AccScalar ca(a, x.scalar_type()), cb(b, x.scalar_type()), cc(c, x.scalar_type());
  long long nn = n;
  LaunchConfig cfg;
  cfg.grid = grid_1d(n / vec, device);
  cfg.block.x = 256;
  cfg.stream = ctx.stream;
  launch_kernel(*k, cfg, xp, mp, zp, op, ca, cb, cc, nn);
  return out;
}

at::Tensor fused_update_meta(const at::Tensor& x, const at::Tensor& model_out, const at::Tensor& noise, double, double,
                             double) {
  check_dtype(kOp, "x", x, kFloatingTypes);
  check_same_dtype(kOp, "model_out", model_out, "x", x);
  check_same_dtype(kOp, "noise", noise, "x", x);
  if (x.sym_sizes() != model_out.sym_sizes() || x.sym_sizes() != noise.sym_sizes())
    fail_value(kOp, "x, model_out and noise must have the same shape (kjit ops do not broadcast)");
  return at::empty_symint(x.sym_sizes(), x.options());
}

class FusedUpdateFunction : public torch::autograd::Function<FusedUpdateFunction> {
 public:
  static constexpr const char* kName = "fused_update";
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x, const at::Tensor& model_out,
                            const at::Tensor& noise, double a, double b, double c) {
    ctx->saved_data["a"] = a;
    ctx->saved_data["b"] = b;
    ctx->saved_data["c"] = c;
    return call_below_autograd<&fused_update_cuda>(kName, x, model_out, noise, a, b, c);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const at::Tensor& g = grads[0];
    auto scaled = [&](int input, const char* coef) {
      return ctx->needs_input_grad(input) ? at::mul(g, ctx->saved_data[coef].toDouble()) : at::Tensor();
    };
    return {scaled(0, "a"), scaled(1, "b"), scaled(2, "c"), at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

}  // namespace

KJIT_OP(fused_update, "fused_update(Tensor x, Tensor model_out, Tensor noise, float a, float b, float c) -> Tensor",
        fused_update_cuda, fused_update_meta);
KJIT_OP_AUTOGRAD(fused_update, (autograd_kernel<FusedUpdateFunction, &fused_update_cuda>))

}  // namespace kjit::ops
