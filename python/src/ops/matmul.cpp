// The matrix ops, on kjit's GEMM kernels (gemm.hpp: kernel_templates/gemm_sm90.cuh on sm_90,
// kernel_templates/gemm.cuh elsewhere and for M <= 16), bfloat16 and float16 with float32 accumulation, and
// float32 as TF32 where torch.backends.cuda.matmul.allow_tf32 allows it (refused otherwise, saying so):
//
//   linear(x, weight, bias=None, activation=None, scale=1.0, residual=None)
//       = activation(scale * (x @ weight.T) + bias) + residual        (F.linear's layout: weight [N, K])
//   linear_swiglu(x, w_gate_up, residual=None) = silu(x @ w_gate.T) * (x @ w_up.T) (+ residual),
//       w_gate_up = cat([w_gate, w_up]) of shape [2F, K]: one kernel, one read of x, no intermediate
//   matmul(a, b): a [..., M, K] @ b [K, N];   bmm(a, b): [B, M, K] @ [B, K, N]
//
// The epilogue runs in the GEMM's registers. For the backward, the forward of a call that wants gradients
// also writes the pre-activation (linear_aux / linear_swiglu_aux: the GEMM's AUX output), from which the
// backward ops take PyTorch's own activation derivatives; dX and dW are GEMMs on the same kernels, which on
// sm_90 read their transposed operands (W for dX, dY and X for dW) in place, M- / N-major (gemm.hpp).
//
// Operands the kernels cannot read directly (K not a multiple of 8, rows not 16-byte aligned, neither dim
// contiguous, or a transpose's view where the kernel reads K-major operands only) are copied into one they
// can (K-major, K padded with zeros): correct for every view.
#include <ATen/Context.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/mul.h>
#include <ATen/ops/zeros.h>
#include <ATen/ops/zeros_like.h>
#include <c10/util/accumulate.h>
#include <ATen/ops/constant_pad_nd.h>
#include <ATen/ops/gelu_backward.h>
#include <ATen/ops/silu.h>
#include <ATen/ops/silu_backward.h>
#include <ATen/ops/sum.h>
#include <ATen/ops/threshold_backward.h>

#include <tuple>

#include "ops/runtime/gemm.hpp"
#include "ops/runtime/op.hpp"

namespace kjit::ops {
namespace {

// M as the GEMM has it: the rows of x (or a), the product of every dim but the last.
template <class Sizes>
c10::SymInt rows_of(const Sizes& s) {
  c10::SymInt m = 1;
  for (std::size_t i = 0; i + 1 < s.size(); ++i) m = m * c10::SymInt(s[i]);
  return m;
}

// The GEMM sizes of linear and its backward (check_gemm_sizes): x [..., K], weight [N, K] (w_gate_up [2F, K]).
template <class Sizes>
void check_linear_sizes(const char* op, const Sizes& xs, const Sizes& ws) {
  if (!xs.empty() && !ws.empty()) check_gemm_sizes(op, rows_of(xs), ws[0], xs[xs.size() - 1]);
}

// ---- linear and linear_swiglu ---------------------------------------------------------------------------

// Shape and dtype rules of linear (CUDA and Meta): x [..., K], weight [N, K] ([2F, K] for SwiGLU), bias [N],
// residual shaped like the output. Returns the output's shape.
template <class Sizes>
std::vector<typename Sizes::value_type> linear_shape(const char* op, const at::Tensor& x, const at::Tensor& weight,
                                                     const std::optional<at::Tensor>& bias,
                                                     const std::optional<at::Tensor>& residual, bool swiglu,
                                                     const Sizes& xs, const Sizes& ws) {
  check_matrix_dtype(op, "x", x);
  check_same_dtype(op, swiglu ? "w_gate_up" : "weight", weight, "x", x);
  if (xs.size() < 1) fail_value(op, "x must have at least one dim (the features), got a 0-dim tensor");
  const char* wname = swiglu ? "w_gate_up" : "weight";
  if (ws.size() != 2)
    fail_value(op, std::string(wname) + " must be 2-D [" + (swiglu ? "2F" : "N") + ", K], got shape " + shape_str(ws));
  if (ws[1] != xs[xs.size() - 1])
    fail_value(op, "x has shape " + shape_str(xs) + " and " + wname + " has shape " + shape_str(ws) +
                       ": x's last dim must equal " + wname + "'s second (K)");
  auto n = ws[0];
  if (swiglu) {
    if (n % 2 != 0)
      fail_value(op, "w_gate_up has shape " + shape_str(ws) +
                         ": its first dim must be even (the gate rows, then as many up rows)");
    n = n / 2;
  }
  std::vector<typename Sizes::value_type> out(xs.begin(), xs.end());
  out.back() = n;
  if (bias) {
    check_same_dtype(op, "bias", *bias, "x", x);
    const auto bs = [&] {
      if constexpr (std::is_same_v<Sizes, c10::SymIntArrayRef>)
        return bias->sym_sizes();
      else
        return bias->sizes();
    }();
    if (bs.size() != 1 || bs[0] != n)
      fail_value(op, "bias has shape " + shape_str(bs) + " but must have shape [" + c10::str(n) + "] (N)");
  }
  if (residual) {
    check_same_dtype(op, "residual", *residual, "x", x);
    const auto rs = [&] {
      if constexpr (std::is_same_v<Sizes, c10::SymIntArrayRef>)
        return residual->sym_sizes();
      else
        return residual->sizes();
    }();
    if (std::vector<typename Sizes::value_type>(rs.begin(), rs.end()) != out)
      fail_value(op, "residual has shape " + shape_str(rs) + " but must have the output's shape " + shape_str(out));
  }
  check_linear_sizes(op, xs, ws);
  return out;
}

// The forward of linear / linear_swiglu; `aux` also returns the pre-activation ([..., N], [..., 2F] for SwiGLU).
std::tuple<at::Tensor, at::Tensor> linear_impl(const char* op, const at::Tensor& x, const at::Tensor& weight,
                                               const std::optional<at::Tensor>& bias, Activation act, double scale,
                                               const std::optional<at::Tensor>& residual, bool swiglu, bool aux) {
  const int device = device_for(op, {{"x", x},
                                     {swiglu ? "w_gate_up" : "weight", weight},
                                     {"bias", bias ? *bias : at::Tensor()},
                                     {"residual", residual ? *residual : at::Tensor()}});
  const auto out_shape = linear_shape(op, x, weight, bias, residual, swiglu, x.sizes(), weight.sizes());
  at::Tensor y = new_empty(out_shape, x);
  std::vector<std::int64_t> aux_shape = out_shape;
  aux_shape.back() = weight.size(0);
  at::Tensor z = aux ? new_empty(aux_shape, x) : at::Tensor();  // undefined without aux: its callers drop it
  const std::int64_t kdim = x.size(-1), n = out_shape.back();
  const std::int64_t m = kdim ? x.numel() / kdim : (n ? y.numel() / n : 0);
  if (y.numel() == 0) return {y, z};
  const std::optional<at::Tensor> b = bias ? std::optional<at::Tensor>(bias->contiguous()) : std::nullopt;
  const std::optional<at::Tensor> r = residual ? std::optional<at::Tensor>(residual->contiguous()) : std::nullopt;
  Gemm g;
  g.dtype = x.scalar_type();
  g.m = m;
  g.n = n;
  g.k = padded_k(kdim);
  g.k_rows = kdim;
  g.swiglu = swiglu;
  at::Tensor x_held, w_held;
  g.a = gemm_operand(g, device, x.reshape({m, kdim}), x_held);
  g.b = gemm_operand(g, device, weight, w_held);
  g.c = {y.const_data_ptr(), n, 0};
  if (r) g.residual = {r->const_data_ptr(), n, 0};
  if (aux) g.aux = {z.const_data_ptr(), weight.size(0), 0};
  g.bias = b ? b->const_data_ptr() : nullptr;
  g.act = act;
  g.scale = static_cast<float>(scale);
  LaunchContext ctx(device);
  run_gemm(op, g, device, ctx);
  return {y, z};
}

at::Tensor linear_cuda(const at::Tensor& x, const at::Tensor& weight, const std::optional<at::Tensor>& bias,
                       std::optional<c10::string_view> activation, double scale,
                       const std::optional<at::Tensor>& residual) {
  constexpr const char* op = "kjit.ops.linear";
  return std::get<0>(linear_impl(op, x, weight, bias, parse_activation(op, activation), scale, residual, false, false));
}
at::Tensor linear_meta(const at::Tensor& x, const at::Tensor& weight, const std::optional<at::Tensor>& bias,
                       std::optional<c10::string_view> activation, double, const std::optional<at::Tensor>& residual) {
  constexpr const char* op = "kjit.ops.linear";
  parse_activation(op, activation);
  return at::empty_symint(linear_shape(op, x, weight, bias, residual, false, x.sym_sizes(), weight.sym_sizes()),
                          x.options());
}

std::tuple<at::Tensor, at::Tensor> linear_aux_cuda(const at::Tensor& x, const at::Tensor& weight,
                                                   const std::optional<at::Tensor>& bias,
                                                   std::optional<c10::string_view> activation, double scale,
                                                   const std::optional<at::Tensor>& residual) {
  constexpr const char* op = "kjit.ops.linear_aux";
  return linear_impl(op, x, weight, bias, parse_activation(op, activation), scale, residual, false, true);
}
std::tuple<at::Tensor, at::Tensor> linear_aux_meta(const at::Tensor& x, const at::Tensor& weight,
                                                   const std::optional<at::Tensor>& bias,
                                                   std::optional<c10::string_view> activation, double,
                                                   const std::optional<at::Tensor>& residual) {
  constexpr const char* op = "kjit.ops.linear_aux";
  parse_activation(op, activation);
  const auto shape = linear_shape(op, x, weight, bias, residual, false, x.sym_sizes(), weight.sym_sizes());
  return {at::empty_symint(shape, x.options()), at::empty_symint(shape, x.options())};
}

at::Tensor linear_swiglu_cuda(const at::Tensor& x, const at::Tensor& w_gate_up,
                              const std::optional<at::Tensor>& residual) {
  return std::get<0>(
      linear_impl("kjit.ops.linear_swiglu", x, w_gate_up, std::nullopt, Activation::None, 1.0, residual, true, false));
}
at::Tensor linear_swiglu_meta(const at::Tensor& x, const at::Tensor& w_gate_up,
                              const std::optional<at::Tensor>& residual) {
  return at::empty_symint(linear_shape("kjit.ops.linear_swiglu", x, w_gate_up, std::nullopt, residual, true,
                                       x.sym_sizes(), w_gate_up.sym_sizes()),
                          x.options());
}
std::tuple<at::Tensor, at::Tensor> linear_swiglu_aux_cuda(const at::Tensor& x, const at::Tensor& w_gate_up,
                                                          const std::optional<at::Tensor>& residual) {
  return linear_impl("kjit.ops.linear_swiglu_aux", x, w_gate_up, std::nullopt, Activation::None, 1.0, residual, true,
                     true);
}
std::tuple<at::Tensor, at::Tensor> linear_swiglu_aux_meta(const at::Tensor& x, const at::Tensor& w_gate_up,
                                                          const std::optional<at::Tensor>& residual) {
  auto shape = linear_shape("kjit.ops.linear_swiglu_aux", x, w_gate_up, std::nullopt, residual, true, x.sym_sizes(),
                            w_gate_up.sym_sizes());
  at::Tensor y = at::empty_symint(shape, x.options());
  shape.back() = w_gate_up.sym_size(0);
  return {y, at::empty_symint(shape, x.options())};
}

// ---- backward ---------------------------------------------------------------------------------------------

using Grads3 = std::tuple<at::Tensor, at::Tensor, at::Tensor>;

// dX = dZ @ W and dW = dZ^T @ X for dZ [M, N], X [M, K], W [N, K].
std::pair<at::Tensor, at::Tensor> linear_input_grads(const char* op, const at::Tensor& dz, const at::Tensor& x2,
                                                     const at::Tensor& weight, int device) {
  LaunchContext ctx(device);
  at::Tensor dx = mm_tn(op, dz, weight.t(), device, ctx);
  at::Tensor dw = mm_tn(op, dz.t(), x2.t(), device, ctx);
  return {dx, dw};
}

Grads3 linear_backward_cuda(const at::Tensor& grad, const at::Tensor& x, const at::Tensor& weight,
                            const std::optional<at::Tensor>& preactivation, std::optional<c10::string_view> activation,
                            double scale, bool has_bias) {
  constexpr const char* op = "kjit.ops.linear_backward";
  const Activation act = parse_activation(op, activation);
  const int device = device_for(
      op,
      {{"grad", grad}, {"x", x}, {"weight", weight}, {"preactivation", preactivation ? *preactivation : at::Tensor()}});
  check_matrix_dtype(op, "x", x);
  check_same_dtype(op, "grad", grad, "x", x);
  check_same_dtype(op, "weight", weight, "x", x);
  if (preactivation) check_same_dtype(op, "preactivation", *preactivation, "x", x);
  if (act != Activation::None && !preactivation)
    fail_value(op, std::string("activation '") + activation_name(act) + "' needs the forward's pre-activation");
  check_linear_sizes(op, x.sizes(), weight.sizes());
  const std::int64_t kdim = x.size(-1), n = weight.size(0);
  const std::int64_t m = kdim ? x.numel() / kdim : grad.numel() / std::max<std::int64_t>(n, 1);
  at::Tensor dz = grad.reshape({m, n});
  if (act != Activation::None) {
    const at::Tensor z = preactivation->reshape({m, n});
    switch (act) {
      case Activation::Relu: dz = at::threshold_backward(dz, z, 0); break;
      case Activation::Gelu: dz = at::gelu_backward(dz, z, "none"); break;
      case Activation::GeluTanh: dz = at::gelu_backward(dz, z, "tanh"); break;
      case Activation::Silu: dz = at::silu_backward(dz, z); break;
      case Activation::None: break;
    }
  }
  // z = scale * (x @ W^T) + bias: the bias's gradient is dL/dz, the product's scale * dL/dz.
  at::Tensor db = has_bias ? at::sum(dz, {0}, false, dz.scalar_type()) : new_empty({0}, x);
  if (scale != 1.0) dz = at::mul(dz, at::Scalar(scale));
  if (m == 0 || n == 0 || kdim == 0)
    return {at::zeros_like(x), at::zeros_like(weight), has_bias ? db : new_empty({0}, x)};
  auto [dx, dw] = linear_input_grads(op, dz, x.reshape({m, kdim}), weight, device);
  return {dx.view(x.sizes()), dw, db};
}
Grads3 linear_backward_meta(const at::Tensor& grad, const at::Tensor& x, const at::Tensor& weight,
                            const std::optional<at::Tensor>&, std::optional<c10::string_view> activation, double,
                            bool has_bias) {
  constexpr const char* op = "kjit.ops.linear_backward";
  parse_activation(op, activation);
  check_matrix_dtype(op, "x", x);
  check_same_dtype(op, "grad", grad, "x", x);
  check_linear_sizes(op, x.sym_sizes(), weight.sym_sizes());
  const c10::SymInt zero(0);
  return {at::empty_symint(x.sym_sizes(), x.options()), at::empty_symint(weight.sym_sizes(), weight.options()),
          at::empty_symint({has_bias ? weight.sym_size(0) : zero}, x.options())};
}

std::tuple<at::Tensor, at::Tensor> linear_swiglu_backward_cuda(const at::Tensor& grad, const at::Tensor& x,
                                                               const at::Tensor& w_gate_up,
                                                               const at::Tensor& preactivation) {
  constexpr const char* op = "kjit.ops.linear_swiglu_backward";
  const int device =
      device_for(op, {{"grad", grad}, {"x", x}, {"w_gate_up", w_gate_up}, {"preactivation", preactivation}});
  check_matrix_dtype(op, "x", x);
  check_same_dtype(op, "grad", grad, "x", x);
  check_same_dtype(op, "w_gate_up", w_gate_up, "x", x);
  check_same_dtype(op, "preactivation", preactivation, "x", x);
  check_linear_sizes(op, x.sizes(), w_gate_up.sizes());
  const std::int64_t kdim = x.size(-1), f = w_gate_up.size(0) / 2;
  const std::int64_t m = kdim ? x.numel() / kdim : grad.numel() / std::max<std::int64_t>(f, 1);
  if (m == 0 || f == 0 || kdim == 0) return {at::zeros_like(x), at::zeros_like(w_gate_up)};
  const at::Tensor gu = preactivation.reshape({m, 2 * f}).to(at::ScalarType::Float);
  const at::Tensor gate = gu.narrow(1, 0, f), up = gu.narrow(1, f, f);
  const at::Tensor dy = grad.reshape({m, f}).to(at::ScalarType::Float);
  const at::Tensor dgate = at::silu_backward(at::mul(dy, up), gate), dup = at::mul(dy, at::silu(gate));
  const at::Tensor dgu = at::cat(at::TensorList({dgate, dup}), 1).to(x.scalar_type());
  auto [dx, dw] = linear_input_grads(op, dgu, x.reshape({m, kdim}), w_gate_up, device);
  return {dx.view(x.sizes()), dw};
}
std::tuple<at::Tensor, at::Tensor> linear_swiglu_backward_meta(const at::Tensor& grad, const at::Tensor& x,
                                                               const at::Tensor& w_gate_up, const at::Tensor&) {
  constexpr const char* op = "kjit.ops.linear_swiglu_backward";
  check_matrix_dtype(op, "x", x);
  check_same_dtype(op, "grad", grad, "x", x);
  check_linear_sizes(op, x.sym_sizes(), w_gate_up.sym_sizes());
  return {at::empty_symint(x.sym_sizes(), x.options()), at::empty_symint(w_gate_up.sym_sizes(), w_gate_up.options())};
}

struct LinearFunction : public torch::autograd::Function<LinearFunction> {
  static constexpr const char* kName = "linear";
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x, const at::Tensor& weight,
                            const std::optional<at::Tensor>& bias, std::optional<c10::string_view> activation,
                            double scale, const std::optional<at::Tensor>& residual) {
    // The public op's checks first: a bad call names kjit.ops.linear even where linear_aux runs it.
    constexpr const char* op = "kjit.ops.linear";
    Activation act = Activation::None;
    try {
      act = parse_activation(op, activation);
      device_for(op, {{"x", x},
                      {"weight", weight},
                      {"bias", bias ? *bias : at::Tensor()},
                      {"residual", residual ? *residual : at::Tensor()}});
      linear_shape(op, x, weight, bias, residual, false, x.sym_sizes(), weight.sym_sizes());
    } catch (const Error&) {
      rethrow_for_python(std::current_exception());  // kjit's error classes, as from the op's own kernels
    }
    at::Tensor y, z;
    if (act == Activation::None) {
      y = call_below_autograd<&linear_cuda>(kName, x, weight, bias, activation, scale, residual);
    } else {
      std::tie(y, z) =
          call_below_autograd<&linear_aux_cuda>("linear_aux", x, weight, bias, activation, scale, residual);
    }
    ctx->saved_data["act"] = std::string(activation_name(act));
    ctx->saved_data["scale"] = scale;
    ctx->saved_data["has_bias"] = bias.has_value();
    ctx->saved_data["has_residual"] = residual.has_value();
    ctx->save_for_backward({x, weight, z});
    return y;
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const std::string act = ctx->saved_data["act"].toStringRef();
    const bool has_bias = ctx->saved_data["has_bias"].toBool();
    const std::optional<at::Tensor> z = saved[2].defined() ? std::optional<at::Tensor>(saved[2]) : std::nullopt;
    auto [dx, dw, db] = OpHandle<&linear_backward_cuda>::get("linear_backward")
                            .call(grads[0], saved[0], saved[1], z, c10::string_view(act),
                                  ctx->saved_data["scale"].toDouble(), has_bias);
    return {dx,           dw,           has_bias ? db : at::Tensor(),
            at::Tensor(), at::Tensor(), ctx->saved_data["has_residual"].toBool() ? grads[0] : at::Tensor()};
  }
};

struct LinearSwigluFunction : public torch::autograd::Function<LinearSwigluFunction> {
  static constexpr const char* kName = "linear_swiglu";
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x, const at::Tensor& w_gate_up,
                            const std::optional<at::Tensor>& residual) {
    constexpr const char* op = "kjit.ops.linear_swiglu";  // named in errors, though linear_swiglu_aux runs it
    try {
      device_for(op, {{"x", x}, {"w_gate_up", w_gate_up}, {"residual", residual ? *residual : at::Tensor()}});
      linear_shape(op, x, w_gate_up, std::nullopt, residual, true, x.sym_sizes(), w_gate_up.sym_sizes());
    } catch (const Error&) {
      rethrow_for_python(std::current_exception());  // kjit's error classes, as from the op's own kernels
    }
    auto [y, gu] = call_below_autograd<&linear_swiglu_aux_cuda>("linear_swiglu_aux", x, w_gate_up, residual);
    ctx->saved_data["has_residual"] = residual.has_value();
    ctx->save_for_backward({x, w_gate_up, gu});
    return y;
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    auto [dx, dw] = OpHandle<&linear_swiglu_backward_cuda>::get("linear_swiglu_backward")
                        .call(grads[0], saved[0], saved[1], saved[2]);
    return {dx, dw, ctx->saved_data["has_residual"].toBool() ? grads[0] : at::Tensor()};
  }
};

// ---- matmul and bmm -------------------------------------------------------------------------------------

template <class Sizes>
std::vector<typename Sizes::value_type> matmul_shape(const char* op, const at::Tensor& a, const at::Tensor& b,
                                                     bool batched, const Sizes& as, const Sizes& bs) {
  check_matrix_dtype(op, "a", a);
  check_same_dtype(op, "b", b, "a", a);
  if (batched) {
    if (as.size() != 3 || bs.size() != 3 || as[0] != bs[0] || as[2] != bs[1])
      fail_value(op, "a has shape " + shape_str(as) + " and b has shape " + shape_str(bs) +
                         ": expected a [B, M, K] and b [B, K, N]");
    check_gemm_sizes(op, as[1], bs[2], as[2], as[0]);
    return {as[0], as[1], bs[2]};
  }
  if (as.size() < 2 || bs.size() != 2 || as[as.size() - 1] != bs[0])
    fail_value(op, "a has shape " + shape_str(as) + " and b has shape " + shape_str(bs) +
                       ": expected a [..., M, K] and b [K, N] (for batched b use kjit.ops.bmm, for other shapes "
                       "torch.matmul)");
  check_gemm_sizes(op, rows_of(as), bs[1], bs[0]);
  std::vector<typename Sizes::value_type> out(as.begin(), as.end());
  out.back() = bs[1];
  return out;
}

at::Tensor matmul_impl(const char* op, const at::Tensor& a, const at::Tensor& b, bool batched) {
  const int device = device_for(op, {{"a", a}, {"b", b}});
  const auto shape = matmul_shape(op, a, b, batched, a.sizes(), b.sizes());
  if (c10::multiply_integers(shape) == 0) return new_empty(shape, a);
  if (a.size(-1) == 0) return at::zeros(shape, a.options());
  LaunchContext ctx(device);
  if (batched) return mm_tn(op, a, b.transpose(1, 2), device, ctx);
  const std::int64_t kdim = a.size(-1);
  return mm_tn(op, a.reshape({-1, kdim}), b.t(), device, ctx).view(shape);
}

at::Tensor matmul_cuda(const at::Tensor& a, const at::Tensor& b) { return matmul_impl("kjit.ops.matmul", a, b, false); }
at::Tensor matmul_meta(const at::Tensor& a, const at::Tensor& b) {
  return at::empty_symint(matmul_shape("kjit.ops.matmul", a, b, false, a.sym_sizes(), b.sym_sizes()), a.options());
}
at::Tensor bmm_cuda(const at::Tensor& a, const at::Tensor& b) { return matmul_impl("kjit.ops.bmm", a, b, true); }
at::Tensor bmm_meta(const at::Tensor& a, const at::Tensor& b) {
  return at::empty_symint(matmul_shape("kjit.ops.bmm", a, b, true, a.sym_sizes(), b.sym_sizes()), a.options());
}

// da = grad @ b^T, db = a^T @ grad (per batch for bmm).
std::tuple<at::Tensor, at::Tensor> matmul_backward_impl(const char* op, const at::Tensor& grad, const at::Tensor& a,
                                                        const at::Tensor& b, bool batched) {
  const int device = device_for(op, {{"grad", grad}, {"a", a}, {"b", b}});
  matmul_shape(op, a, b, batched, a.sizes(), b.sizes());
  check_same_dtype(op, "grad", grad, "a", a);
  if (a.numel() == 0 || b.numel() == 0 || grad.numel() == 0) return {at::zeros_like(a), at::zeros_like(b)};
  LaunchContext ctx(device);
  if (batched)
    return {mm_tn(op, grad, b, device, ctx), mm_tn(op, a.transpose(1, 2), grad.transpose(1, 2), device, ctx)};
  const std::int64_t kdim = a.size(-1), n = b.size(1);
  const at::Tensor g2 = grad.reshape({-1, n}), a2 = a.reshape({-1, kdim});
  return {mm_tn(op, g2, b, device, ctx).view(a.sizes()), mm_tn(op, a2.t(), g2.t(), device, ctx)};
}
std::tuple<at::Tensor, at::Tensor> matmul_backward_cuda(const at::Tensor& grad, const at::Tensor& a,
                                                        const at::Tensor& b) {
  return matmul_backward_impl("kjit.ops.matmul_backward", grad, a, b, false);
}
std::tuple<at::Tensor, at::Tensor> bmm_backward_cuda(const at::Tensor& grad, const at::Tensor& a, const at::Tensor& b) {
  return matmul_backward_impl("kjit.ops.bmm_backward", grad, a, b, true);
}
template <bool Batched>
std::tuple<at::Tensor, at::Tensor> matmul_backward_meta(const at::Tensor& grad, const at::Tensor& a,
                                                        const at::Tensor& b) {
  const char* op = Batched ? "kjit.ops.bmm_backward" : "kjit.ops.matmul_backward";
  matmul_shape(op, a, b, Batched, a.sym_sizes(), b.sym_sizes());
  check_same_dtype(op, "grad", grad, "a", a);
  return {at::empty_symint(a.sym_sizes(), a.options()), at::empty_symint(b.sym_sizes(), b.options())};
}

template <bool Batched>
struct MatmulFunction : public torch::autograd::Function<MatmulFunction<Batched>> {
  static constexpr const char* kName = Batched ? "bmm" : "matmul";
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& a, const at::Tensor& b) {
    ctx->save_for_backward({a, b});
    if constexpr (Batched)
      return call_below_autograd<&bmm_cuda>(kName, a, b);
    else
      return call_below_autograd<&matmul_cuda>(kName, a, b);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    if constexpr (Batched) {
      auto [da, db] = OpHandle<&bmm_backward_cuda>::get("bmm_backward").call(grads[0], saved[0], saved[1]);
      return {da, db};
    } else {
      auto [da, db] = OpHandle<&matmul_backward_cuda>::get("matmul_backward").call(grads[0], saved[0], saved[1]);
      return {da, db};
    }
  }
};

}  // namespace

KJIT_OP(linear,
        "linear(Tensor x, Tensor weight, Tensor? bias=None, str? activation=None, float scale=1.0, "
        "Tensor? residual=None) -> Tensor",
        linear_cuda, linear_meta);
KJIT_OP(linear_aux,
        "linear_aux(Tensor x, Tensor weight, Tensor? bias=None, str? activation=None, float scale=1.0, "
        "Tensor? residual=None) -> (Tensor, Tensor)",
        linear_aux_cuda, linear_aux_meta);
KJIT_OP(linear_backward,
        "linear_backward(Tensor grad, Tensor x, Tensor weight, Tensor? preactivation, str? activation, float scale, "
        "bool has_bias) -> (Tensor, Tensor, Tensor)",
        linear_backward_cuda, linear_backward_meta);
KJIT_OP(linear_swiglu, "linear_swiglu(Tensor x, Tensor w_gate_up, Tensor? residual=None) -> Tensor", linear_swiglu_cuda,
        linear_swiglu_meta);
KJIT_OP(linear_swiglu_aux, "linear_swiglu_aux(Tensor x, Tensor w_gate_up, Tensor? residual=None) -> (Tensor, Tensor)",
        linear_swiglu_aux_cuda, linear_swiglu_aux_meta);
KJIT_OP(linear_swiglu_backward,
        "linear_swiglu_backward(Tensor grad, Tensor x, Tensor w_gate_up, Tensor preactivation) -> (Tensor, Tensor)",
        linear_swiglu_backward_cuda, linear_swiglu_backward_meta);
KJIT_OP(matmul, "matmul(Tensor a, Tensor b) -> Tensor", matmul_cuda, matmul_meta);
KJIT_OP(matmul_backward, "matmul_backward(Tensor grad, Tensor a, Tensor b) -> (Tensor, Tensor)", matmul_backward_cuda,
        matmul_backward_meta<false>);
KJIT_OP(bmm, "bmm(Tensor a, Tensor b) -> Tensor", bmm_cuda, bmm_meta);
KJIT_OP(bmm_backward, "bmm_backward(Tensor grad, Tensor a, Tensor b) -> (Tensor, Tensor)", bmm_backward_cuda,
        matmul_backward_meta<true>);
KJIT_OP_AUTOGRAD(linear, (autograd_kernel<LinearFunction, &linear_cuda>))
KJIT_OP_AUTOGRAD(linear_swiglu, (autograd_kernel<LinearSwigluFunction, &linear_swiglu_cuda>))
KJIT_OP_AUTOGRAD(matmul, (autograd_kernel<MatmulFunction<false>, &matmul_cuda>))
KJIT_OP_AUTOGRAD(bmm, (autograd_kernel<MatmulFunction<true>, &bmm_cuda>))

}  // namespace kjit::ops
