// The DDPM sampler's step with its schedule on the device (kernel_templates/ddpm_step.cuh):
//
//   ddpm_coefficients(betas, step=1) -> [T, 5] float32: row t = (r, q, a, b, sigma) of the step from timestep t
//       to t - step, as the diffusers DDPMScheduler computes them (epsilon prediction, variance "fixed_small"):
//       with abar the cumulative product of 1 - betas, abar_prev = abar[t - step] (1 before the first):
//       r = 1 / sqrt(abar_t), q = sqrt(1 - abar_t) / sqrt(abar_t),
//       a = sqrt(abar_prev) * beta_t' / (1 - abar_t), b = sqrt(alpha_t') * (1 - abar_prev) / (1 - abar_t),
//       sigma = sqrt(max((1 - abar_prev) / (1 - abar_t) * beta_t', 1e-20)) (0 where t - step < 0),
//       where alpha_t' = abar_t / abar_prev and beta_t' = 1 - alpha_t'. Computed in float64 (one kernel).
//   ddpm_step(x, eps, noise, coefficients, t, clip_sample=True, clip_sample_range=1.0) -> x_{t - step}:
//       x0 = clamp(r x - q eps, -range, range) (where clip_sample), out = a x0 + b x + sigma noise, one kernel;
//       noise None adds none. t is a row of the table (a kernel argument): a CUDA graph of the whole loop replays
//       without host work, and the coefficients are read on the device.
// The table may be float32 or float64 (for any x). x, eps and noise share a shape and a floating dtype (any layout:
// copied contiguous where they are not); out is contiguous. Gradients flow to x, eps and noise (not to the table).
#include <ATen/TensorOperators.h>
#include <ATen/ops/mul.h>
#include <ATen/ops/where.h>
#include <ATen/ops/zeros_like.h>

#include "ops/runtime/op.hpp"

namespace kjit::ops {
namespace {

constexpr const char* kStep = "kjit.ops.ddpm_step";
constexpr const char* kCoefficients = "kjit.ops.ddpm_coefficients";

const KernelFamily& family(bool table = false) {
  static const std::shared_ptr<const Template> t = builtin_template("ddpm_step");
  static const KernelFamily step(Engine::global(), t, "ddpm_step", CompileOptions::library());
  static const KernelFamily coefficients(Engine::global(), t, "ddpm_coefficients", CompileOptions::library());
  return table ? coefficients : step;
}

// ---- the table ------------------------------------------------------------------------------------------

void check_betas(const at::Tensor& betas, std::int64_t step) {
  check_dtype(kCoefficients, "betas", betas, kFloatingTypes);
  if (betas.dim() != 1) fail_value(kCoefficients, "betas must be 1-D [T], got shape " + shape_str(betas.sym_sizes()));
  if (step < 1) fail_value(kCoefficients, "step must be at least 1, got " + std::to_string(step));
}

at::Tensor ddpm_coefficients_cuda(const at::Tensor& betas, std::int64_t step) {
  const int device = device_for(kCoefficients, {{"betas", betas}});
  check_betas(betas, step);
  at::Tensor out = new_empty({betas.size(0), 5}, betas, at::ScalarType::Float);
  if (out.numel() == 0) return out;
  LaunchContext ctx(device);
  const TemplateArg targs[] = {type_arg(betas.scalar_type())};
  const auto k = kernel_for(family(true), targs, device, ctx.compile_forbidden);
  const void* bp = betas.const_data_ptr();
  void* op = out.data_ptr();
  long long sb = betas.stride(0), n = betas.size(0), st = step;
  LaunchConfig cfg;
  cfg.grid.x = static_cast<unsigned>(cdiv(n, 128));
  cfg.block.x = 128;
  cfg.stream = ctx.stream;
  launch_kernel(*k, cfg, bp, sb, op, n, st);
  return out;
}
at::Tensor ddpm_coefficients_meta(const at::Tensor& betas, std::int64_t step) {
  check_betas(betas, step);
  return at::empty_symint({betas.sym_size(0), c10::SymInt(5)}, betas.options().dtype(at::ScalarType::Float));
}

// ---- the step -------------------------------------------------------------------------------------------

void check_step(const at::Tensor& x, const at::Tensor& eps, const std::optional<at::Tensor>& noise,
                const at::Tensor& coefficients, std::int64_t t, double clip_range) {
  check_dtype(kStep, "x", x, kFloatingTypes);
  check_same_dtype(kStep, "eps", eps, "x", x);
  check_same_shape(kStep, "eps", eps, "x", x);
  if (noise) {
    check_same_dtype(kStep, "noise", *noise, "x", x);
    check_same_shape(kStep, "noise", *noise, "x", x);
  }
  check_dtype(kStep, "coefficients", coefficients, {at::ScalarType::Float, at::ScalarType::Double});
  const auto cs = coefficients.sym_sizes();
  if (cs.size() != 2 || cs[1] != 5)
    fail_value(kStep, "coefficients must be [T, 5] (kjit.ops.ddpm_coefficients), got shape " + shape_str(cs));
  if (t < 0 || cs[0] <= t)
    fail_value(kStep, "t=" + std::to_string(t) + " is not a row of the coefficients (allowed: 0 to " +
                          c10::str(cs[0] - 1) + ")");
  if (!(clip_range > 0)) fail_value(kStep, "clip_sample_range must be positive, got " + std::to_string(clip_range));
}

at::Tensor ddpm_step_cuda(const at::Tensor& x0, const at::Tensor& eps0, const std::optional<at::Tensor>& noise0,
                          const at::Tensor& coefficients0, std::int64_t t, bool clip_sample, double clip_range) {
  const int device = device_for(
      kStep, {{"x", x0}, {"eps", eps0}, {"noise", noise0 ? *noise0 : at::Tensor()}, {"coefficients", coefficients0}});
  check_step(x0, eps0, noise0, coefficients0, t, clip_range);
  at::Tensor out = new_empty(x0.sizes(), x0);
  const std::int64_t n = x0.numel();
  if (n == 0) return out;
  const at::Tensor x = x0.contiguous(), eps = eps0.contiguous(), coefficients = coefficients0.contiguous();
  const at::Tensor noise = noise0 ? noise0->contiguous() : at::Tensor();
  LaunchContext ctx(device);
  const void* xp = x.const_data_ptr();
  const void* ep = eps.const_data_ptr();
  const void* zp = noise.defined() ? noise.const_data_ptr() : nullptr;
  void* op = out.data_ptr();
  const void* cp = coefficients.const_data_ptr();
  const int vec = pick_vec(x.element_size(), {xp, ep, zp ? zp : xp, op});
  const TemplateArg targs[] = {type_arg(x.scalar_type()), type_arg(coefficients.scalar_type()), int_arg(vec),
                               bool_arg(clip_sample), bool_arg(noise.defined())};
  const auto k = kernel_for(family(), targs, device, ctx.compile_forbidden);
  long long row = t, nn = n;
  float clip = static_cast<float>(clip_range);
  LaunchConfig cfg;
  cfg.grid = grid_1d(n / vec, device);
  cfg.block.x = 256;
  cfg.stream = ctx.stream;
  launch_kernel(*k, cfg, xp, ep, zp, op, cp, row, clip, nn);
  return out;
}
at::Tensor ddpm_step_meta(const at::Tensor& x, const at::Tensor& eps, const std::optional<at::Tensor>& noise,
                          const at::Tensor& coefficients, std::int64_t t, bool, double clip_range) {
  check_step(x, eps, noise, coefficients, t, clip_range);
  return at::empty_symint(x.sym_sizes(), x.options());
}

// The step's gradients: d/dx = a r [x0 inside the range] + b, d/deps = -a q [inside], d/dnoise = sigma, with
// the coefficients of row t (PyTorch ops on the saved inputs; the sampler itself never asks for them).
struct DdpmStepFunction : public torch::autograd::Function<DdpmStepFunction> {
  static constexpr const char* kName = "ddpm_step";
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x, const at::Tensor& eps,
                            const std::optional<at::Tensor>& noise, const at::Tensor& coefficients, std::int64_t t,
                            bool clip_sample, double clip_range) {
    ctx->saved_data["t"] = t;
    ctx->saved_data["clip"] = clip_sample;
    ctx->saved_data["range"] = clip_range;
    ctx->saved_data["has_noise"] = noise.has_value();
    ctx->save_for_backward({x, eps, coefficients});
    return call_below_autograd<&ddpm_step_cuda>(kName, x, eps, noise, coefficients, t, clip_sample, clip_range);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor& g = grads[0];
    const at::Tensor c = saved[2].select(0, ctx->saved_data["t"].toInt()).to(g.scalar_type());
    const at::Tensor r = c[0], q = c[1], a = c[2], b = c[3], sigma = c[4];
    at::Tensor ga = at::mul(g, a);  // dL/dx0 (before the clamp)
    if (ctx->saved_data["clip"].toBool()) {
      const double lim = ctx->saved_data["range"].toDouble();
      const at::Tensor x0 = saved[0] * r - saved[1] * q;
      ga = at::where((x0 >= -lim) & (x0 <= lim), ga, at::zeros_like(ga));
    }
    const bool has_noise = ctx->saved_data["has_noise"].toBool();
    // One gradient per forward input: x, eps, noise, coefficients, t, clip_sample, clip_sample_range.
    return {ga * r + g * b, -ga * q,     has_noise ? g * sigma : at::Tensor(), at::Tensor(), at::Tensor(),
            at::Tensor(),   at::Tensor()};
  }
};

}  // namespace

KJIT_OP(ddpm_coefficients, "ddpm_coefficients(Tensor betas, int step=1) -> Tensor", ddpm_coefficients_cuda,
        ddpm_coefficients_meta);
KJIT_OP(ddpm_step,
        "ddpm_step(Tensor x, Tensor eps, Tensor? noise, Tensor coefficients, int t, bool clip_sample=True, float "
        "clip_sample_range=1.0) -> Tensor",
        ddpm_step_cuda, ddpm_step_meta);
KJIT_OP_AUTOGRAD(ddpm_step, (autograd_kernel<DdpmStepFunction, &ddpm_step_cuda>))

}  // namespace kjit::ops
