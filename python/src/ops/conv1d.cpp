// kjit::causal_conv1d(x, weight, bias, initial_state, activation): the causal depthwise conv1d of Mamba
// blocks (kernel_templates/conv1d.cuh), with backward:
//
//   y = act(F.conv1d(x, weight.unsqueeze(1), bias, padding=W-1, groups=D)[..., :L])
//
// with the W-1 zeros of the padding replaced by initial_state when given (a decoding step), and
// final_state = the last W-1 inputs (counting the initial state when L < W-1). x: [B, D, L] or [D, L],
// unit stride along L and any batch / channel strides (Mamba's in_proj output viewed as [B, D, L] needs no
// copy); other layouts are copied once. weight: [D, W] or nn.Conv1d's [D, 1, W], 2 <= W <= 4; bias [D];
// initial_state [..., D, W-1]; all of x's dtype. activation: None or 'silu'. y and final_state are
// contiguous. The width, the activation and the vector width are specialized; B, D and L are not.
//
// The backward recomputes the pre-activation; dweight and dbias are per-row partial sums added over the
// batch (no atomics: deterministic).
#include <ATen/ops/empty.h>
#include <ATen/ops/zeros_like.h>

#include <algorithm>
#include <numeric>
#include <tuple>

#include "ops/runtime/op.hpp"
#include "ops/reduce.hpp"

namespace kjit::ops {
namespace {

constexpr unsigned kBlock = 256;  // 8 warps: one row each
constexpr const char* kForward = "kjit.ops.causal_conv1d";
constexpr const char* kBackward = "kjit.ops.causal_conv1d_backward";

const KernelFamily& family(bool backward) {
  static const std::shared_ptr<const Template> t = builtin_template("conv1d");
  static const KernelFamily fwd(Engine::global(), t, "causal_conv1d_forward", CompileOptions::library());
  static const KernelFamily bwd(Engine::global(), t, "causal_conv1d_backward", CompileOptions::library());
  return backward ? bwd : fwd;
}

bool parse_silu(const char* op, const std::optional<c10::string_view>& activation) {
  if (!activation || *activation == "none") return false;
  if (*activation == "silu") return true;
  fail_value(op, "activation must be None or 'silu', got '" + std::string(*activation) +
                     "'; apply other activations to the output");
}

// The width, and the states' shape: x's with W-1 for L (symbolic under Meta).
struct Shape {
  std::int64_t W;
  std::vector<c10::SymInt> state;
};

Shape check_inputs(const char* op, const at::Tensor& x, const at::Tensor& weight, const std::optional<at::Tensor>& bias,
                   const std::optional<at::Tensor>& initial_state) {
  check_dtype(op, "x", x, kFloatingTypes);
  const c10::SymIntArrayRef xs = x.sym_sizes();
  if (xs.size() != 2 && xs.size() != 3)
    fail_value(op, "x must be [batch, channels, length] or [channels, length], got shape " + shape_str(xs));
  const c10::SymInt D = xs[xs.size() - 2];
  check_dtype(op, "weight", weight, kFloatingTypes);
  check_same_dtype(op, "weight", weight, "x", x);
  const c10::SymIntArrayRef ws = weight.sym_sizes();
  const bool conv_layout = ws.size() == 3 && ws[1] == 1;  // nn.Conv1d(D, D, W, groups=D).weight
  if ((ws.size() != 2 && !conv_layout) || ws[0] != D)
    fail_value(op, "weight must be [channels, width] (or nn.Conv1d's [channels, 1, width]) with channels = " +
                       c10::str(D) + " (x's dim -2), got shape " + shape_str(ws));
  Shape s;
  s.W = ws[ws.size() - 1].guard_int(__FILE__, __LINE__);
  if (s.W < 2 || s.W > 4)
    fail_value(op, "the filter width must be 2, 3 or 4 (weight's last dim), got " + std::to_string(s.W) +
                       "; use torch.nn.functional.conv1d(x, weight, bias, padding=width-1, groups=channels)[..., :L] "
                       "for other widths");
  if (bias) check_like(op, "bias", *bias, "x", x, c10::SymIntArrayRef(&D, 1));
  s.state.assign(xs.begin(), xs.end() - 1);
  s.state.push_back(c10::SymInt(s.W - 1));
  if (initial_state) check_like(op, "initial_state", *initial_state, "x", x, c10::SymIntArrayRef(s.state));
  return s;
}

// The states' shape of a real x.
std::vector<std::int64_t> state_sizes(const at::Tensor& x, std::int64_t W) {
  std::vector<std::int64_t> v(x.sizes().begin(), x.sizes().end() - 1);
  v.push_back(W - 1);
  return v;
}

// x's rows as the kernels read them: unit stride along L (else a contiguous copy), batch / channel strides
// (0 for a dim of size 1, whose stride is meaningless).
struct Strided {
  at::Tensor x;
  std::int64_t rows, D, L, stride_b, stride_d;
};
Strided strided(const at::Tensor& x) {
  Strided s;
  s.x = x.stride(-1) == 1 || x.size(-1) <= 1 ? x : x.contiguous();
  s.L = x.size(-1);
  s.D = x.size(-2);
  s.rows = x.numel() / std::max<std::int64_t>(1, s.L);
  if (s.L == 0) s.rows = s.D * (x.dim() == 3 ? x.size(0) : 1);
  s.stride_d = s.D > 1 ? s.x.stride(-2) : 0;
  s.stride_b = x.dim() == 3 && x.size(0) > 1 ? s.x.stride(0) : 0;
  return s;
}

// Vector width (dividing L and the row strides, every row aligned) and vectors per lane per chunk.
struct Geometry {
  int vec;
  int items;
};
Geometry geometry(const Strided& s, std::initializer_list<const at::Tensor*> dense) {
  Access acc[6];
  std::size_t n = 0;
  acc[n++] = {s.x.const_data_ptr(), static_cast<std::size_t>(s.x.element_size())};
  for (const at::Tensor* t : dense)
    if (n < 6) acc[n++] = {t->const_data_ptr(), static_cast<std::size_t>(t->element_size())};
  const std::int64_t divides = std::gcd(s.L, std::gcd(s.stride_b, s.stride_d));
  const int vec = vector_width(acc, n, divides);
  // 32 bytes per lane per chunk (two 16-byte loads in flight: a 16-bit row at one vector per lane ran at 65%
  // of copy on the H200, float32 at two at 90%), at most 4 vectors.
  return {vec, std::clamp(32 / (vec * static_cast<int>(s.x.element_size())), 1, 4)};
}

Dim3 grid(std::int64_t rows) {
  Dim3 g;
  g.x = static_cast<unsigned>(std::clamp<std::int64_t>(cdiv(rows, kBlock / 32), 1, 1 << 30));
  return g;
}

std::shared_ptr<const SpecializedKernel> conv_kernel(bool backward, at::ScalarType dtype, std::int64_t W,
                                                     const Geometry& g, bool silu, int device,
                                                     const char* compile_forbidden) {
  const TemplateArg targs[] = {type_arg(dtype), int_arg(W), int_arg(g.vec), int_arg(g.items), bool_arg(silu)};
  return kernel_for(family(backward), targs, device, compile_forbidden);
}

const void* data_or_null(const at::Tensor& t) { return t.defined() ? t.const_data_ptr() : nullptr; }
at::Tensor contiguous_or_none(const std::optional<at::Tensor>& t) { return t ? t->contiguous() : at::Tensor(); }

using Pair = std::tuple<at::Tensor, at::Tensor>;
using Grads = std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor>;

Pair causal_conv1d_cuda(const at::Tensor& x, const at::Tensor& weight, const std::optional<at::Tensor>& bias,
                        const std::optional<at::Tensor>& initial_state, std::optional<c10::string_view> activation) {
  const int device = device_for(kForward, {{"x", x},
                                           {"weight", weight},
                                           {"bias", bias ? *bias : at::Tensor()},
                                           {"initial_state", initial_state ? *initial_state : at::Tensor()}});
  const Shape sh = check_inputs(kForward, x, weight, bias, initial_state);
  const bool silu = parse_silu(kForward, activation);
  const Strided s = strided(x);
  at::Tensor y = new_empty(x.sizes(), x);
  at::Tensor final_state = new_empty(state_sizes(x, sh.W), x);
  if (s.rows == 0) return {std::move(y), std::move(final_state)};
  const at::Tensor w = weight.contiguous(), b = contiguous_or_none(bias), init = contiguous_or_none(initial_state);
  const Geometry g = geometry(s, {&y});
  LaunchContext ctx(device);
  const auto k = conv_kernel(false, x.scalar_type(), sh.W, g, silu, device, ctx.compile_forbidden);
  const void* xp = s.x.const_data_ptr();
  const void* wp = w.const_data_ptr();
  const void* bp = data_or_null(b);
  const void* ip = data_or_null(init);
  void* yp = y.data_ptr();
  void* fp = final_state.data_ptr();
  long long rows = s.rows, D = s.D, L = s.L, sb = s.stride_b, sd = s.stride_d;
  LaunchConfig cfg;
  cfg.grid = grid(s.rows);
  cfg.block.x = kBlock;
  cfg.stream = ctx.stream;
  launch_kernel(*k, cfg, xp, wp, bp, ip, yp, fp, rows, D, L, sb, sd);
  return {std::move(y), std::move(final_state)};
}

Pair causal_conv1d_meta(const at::Tensor& x, const at::Tensor& weight, const std::optional<at::Tensor>& bias,
                        const std::optional<at::Tensor>& initial_state, std::optional<c10::string_view> activation) {
  const Shape sh = check_inputs(kForward, x, weight, bias, initial_state);
  parse_silu(kForward, activation);
  const auto options = x.options().memory_format(c10::MemoryFormat::Contiguous);
  return {at::empty_symint(x.sym_sizes(), options), at::empty_symint(c10::SymIntArrayRef(sh.state), options)};
}

Shape check_backward(const at::Tensor& grad, const std::optional<at::Tensor>& grad_final_state, const at::Tensor& x,
                     const at::Tensor& weight, const std::optional<at::Tensor>& bias,
                     const std::optional<at::Tensor>& initial_state,
                     const std::optional<c10::string_view>& activation) {
  Shape sh = check_inputs(kBackward, x, weight, bias, initial_state);
  parse_silu(kBackward, activation);
  check_like(kBackward, "grad", grad, "x", x, x.sym_sizes());
  if (grad_final_state)
    check_like(kBackward, "grad_final_state", *grad_final_state, "x", x, c10::SymIntArrayRef(sh.state));
  return sh;
}

// (dx, dweight, dbias, dinitial_state); dbias / dinitial_state are empty tensors [0] without a bias /
// an initial state.
Grads causal_conv1d_backward_cuda(const at::Tensor& grad, const std::optional<at::Tensor>& grad_final_state,
                                  const at::Tensor& x, const at::Tensor& weight, const std::optional<at::Tensor>& bias,
                                  const std::optional<at::Tensor>& initial_state,
                                  std::optional<c10::string_view> activation) {
  const int device = device_for(kBackward, {{"grad", grad},
                                            {"grad_final_state", grad_final_state ? *grad_final_state : at::Tensor()},
                                            {"x", x},
                                            {"weight", weight},
                                            {"bias", bias ? *bias : at::Tensor()},
                                            {"initial_state", initial_state ? *initial_state : at::Tensor()}});
  const Shape sh = check_backward(grad, grad_final_state, x, weight, bias, initial_state, activation);
  const bool silu = parse_silu(kBackward, activation);
  const Strided s = strided(x);
  const at::ScalarType dt = x.scalar_type();
  at::Tensor dx = new_empty(x.sizes(), x);
  at::Tensor dinit = initial_state ? new_empty(state_sizes(x, sh.W), x) : new_empty({0}, x);
  at::Tensor dw = new_empty(weight.sizes(), weight);
  at::Tensor db = bias ? new_empty(bias->sizes(), x) : new_empty({0}, x);
  if (s.rows == 0) {  // no rows: no gradient flows into the weight and the bias
    dw.zero_();
    db.zero_();
  } else {
    at::Tensor partial = new_empty({s.rows, sh.W + 1}, x, acc_dtype(dt));
    const at::Tensor dy = grad.contiguous(), w = weight.contiguous(), b = contiguous_or_none(bias),
                     init = contiguous_or_none(initial_state), dfinal = contiguous_or_none(grad_final_state);
    const Geometry g = geometry(s, {&dy, &dx});
    LaunchContext ctx(device);
    const auto k = conv_kernel(true, dt, sh.W, g, silu, device, ctx.compile_forbidden);
    const void* dyp = dy.const_data_ptr();
    const void* dfp = data_or_null(dfinal);
    const void* xp = s.x.const_data_ptr();
    const void* wp = w.const_data_ptr();
    const void* bp = data_or_null(b);
    const void* ip = data_or_null(init);
    void* dxp = dx.data_ptr();
    void* pp = partial.data_ptr();
    void* dip = initial_state ? dinit.data_ptr() : nullptr;
    long long rows = s.rows, D = s.D, L = s.L, sb = s.stride_b, sd = s.stride_d;
    LaunchConfig cfg;
    cfg.grid = grid(s.rows);
    cfg.block.x = kBlock;
    cfg.stream = ctx.stream;
    launch_kernel(*k, cfg, dyp, dfp, xp, wp, bp, ip, dxp, pp, dip, rows, D, L, sb, sd);
    // Rows are (batch, channel): the partial sums of one channel are D apart.
    const at::Tensor sums = sum_to_dtype(partial.view({s.rows / s.D, s.D * (sh.W + 1)}), 0, dt).view({s.D, sh.W + 1});
    dw.view({s.D, sh.W}).copy_(sums.narrow(1, 0, sh.W));
    if (bias) db.copy_(sums.select(1, sh.W));
  }
  return {std::move(dx), std::move(dw), std::move(db), std::move(dinit)};
}

Grads causal_conv1d_backward_meta(const at::Tensor& grad, const std::optional<at::Tensor>& grad_final_state,
                                  const at::Tensor& x, const at::Tensor& weight, const std::optional<at::Tensor>& bias,
                                  const std::optional<at::Tensor>& initial_state,
                                  std::optional<c10::string_view> activation) {
  const Shape sh = check_backward(grad, grad_final_state, x, weight, bias, initial_state, activation);
  const auto options = x.options().memory_format(c10::MemoryFormat::Contiguous);
  const c10::SymInt zero(0);
  const c10::SymIntArrayRef empty(&zero, 1);
  return {at::empty_symint(x.sym_sizes(), options), at::empty_symint(weight.sym_sizes(), options),
          bias ? at::empty_symint(bias->sym_sizes(), options) : at::empty_symint(empty, options),
          initial_state ? at::empty_symint(c10::SymIntArrayRef(sh.state), options) : at::empty_symint(empty, options)};
}

// The backward's kernels, compiled ahead at the forward's first compile (CompileAheadOnMiss): the
// backward kernel at x's geometry (the gradient and dx are fresh, aligned tensors) and the batch sum of
// the weight's partial sums.
void prepare_backward_ahead(const at::Tensor& x, std::int64_t W, bool silu) {
  const Strided s = strided(x);
  if (!s.rows || !s.L) return;
  const Geometry g = geometry(s, {});
  const TemplateArg targs[] = {type_arg(x.scalar_type()), int_arg(W), int_arg(g.vec), int_arg(g.items), bool_arg(silu)};
  const int device = x.get_device();
  family(true).prepare_ahead(targs, 5, device);
  prepare_sum_rows_ahead(std::max<std::int64_t>(1, s.rows / s.D), s.D * (W + 1), acc_dtype(x.scalar_type()),
                         x.scalar_type(), device);
}

struct CausalConv1dFunction : public torch::autograd::Function<CausalConv1dFunction> {
  static constexpr const char* kName = "causal_conv1d";
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x,
                                                const at::Tensor& weight, const std::optional<at::Tensor>& bias,
                                                const std::optional<at::Tensor>& initial_state,
                                                std::optional<c10::string_view> activation) {
    ctx->set_materialize_grads(false);
    const bool silu = parse_silu(kForward, activation);
    ctx->saved_data["silu"] = silu;
    ctx->saved_data["has_bias"] = bias.has_value();
    ctx->saved_data["has_state"] = initial_state.has_value();
    ctx->save_for_backward({x, weight, bias ? *bias : at::Tensor(), initial_state ? *initial_state : at::Tensor()});
    const std::int64_t W = weight.dim() ? weight.size(-1) : 0;
    const auto predict = [&] { prepare_backward_ahead(x, W, silu); };
    const CompileAheadOnMiss ahead(x, predict);
    auto [y, final_state] = call_below_autograd<&causal_conv1d_cuda>(kName, x, weight, bias, initial_state, activation);
    return {y, final_state};
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const bool has_bias = ctx->saved_data["has_bias"].toBool(), has_state = ctx->saved_data["has_state"].toBool();
    const at::Tensor& dy = grads[0];
    const at::Tensor& dfinal = grads[1];
    if (!dy.defined() && !dfinal.defined())
      return {at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
    const at::Tensor& x = saved[0];
    // The kernel reads dy: a final state's gradient alone comes with zeros for y's.
    const at::Tensor g = dy.defined() ? dy : at::zeros_like(x, at::MemoryFormat::Contiguous);
    const auto opt = [](const at::Tensor& t) { return t.defined() ? std::optional<at::Tensor>(t) : std::nullopt; };
    const std::optional<c10::string_view> act =
        ctx->saved_data["silu"].toBool() ? std::optional<c10::string_view>("silu") : std::nullopt;
    auto [dx, dw, db, dinit] = OpHandle<&causal_conv1d_backward_cuda>::get("causal_conv1d_backward")
                                   .call(g, opt(dfinal), x, saved[1], has_bias ? opt(saved[2]) : std::nullopt,
                                         has_state ? opt(saved[3]) : std::nullopt, act);
    return {dx, dw, has_bias ? db : at::Tensor(), has_state ? dinit : at::Tensor(), at::Tensor()};
  }
};

}  // namespace

KJIT_OP(causal_conv1d,
        "causal_conv1d(Tensor x, Tensor weight, Tensor? bias=None, Tensor? initial_state=None, str? activation=None) "
        "-> (Tensor, Tensor)",
        causal_conv1d_cuda, causal_conv1d_meta);
KJIT_OP(causal_conv1d_backward,
        "causal_conv1d_backward(Tensor grad, Tensor? grad_final_state, Tensor x, Tensor weight, Tensor? bias=None, "
        "Tensor? initial_state=None, str? activation=None) -> (Tensor, Tensor, Tensor, Tensor)",
        causal_conv1d_backward_cuda, causal_conv1d_backward_meta);
KJIT_OP_AUTOGRAD(causal_conv1d, (autograd_kernel<CausalConv1dFunction, &causal_conv1d_cuda>))

}  // namespace kjit::ops
