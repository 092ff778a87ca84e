// kjit::group_norm(x, num_groups, weight, bias, eps, activation, scale, shift, residual) over [B, C, *]
// (kernel_templates/group_norm.cuh), with the blocks of a diffusion U-Net fused after the norm:
//
//   y = act(F.group_norm(x, num_groups, weight, bias, eps)) * scale + shift + residual
//
// act: None, 'silu' or 'mish'; scale / shift: per-(batch, channel) FiLM terms of shape [B, C] (or
// [B, C, 1, ...]: one 1 per dim of x after C), read at any batch stride with unit channel stride (the two
// halves of one [B, 2, C, 1] embedding need no copy); residual: x's shape. All of x's dtype; x and the
// residual are read contiguous (other layouts copied once). y is contiguous.
//
// group_norm_forward takes the same arguments and also returns the group statistics mean and rstd
// ([B, num_groups], float32, float64 for float64 inputs), as aten's native_group_norm does: what the
// backward reads. kjit.ops.group_norm computes no statistics when no gradient is wanted; its autograd
// forward is group_norm_forward's.
//
// group_norm_backward(grad, x, mean, rstd, num_groups, weight, bias, activation, scale, has_shift) returns
// (dx, dweight, dbias, dscale, dshift): dweight / dbias [C] where weight / bias are given, dscale where
// scale is, dshift when has_shift ([B, C] both), empty tensors [0] otherwise. The residual's gradient is
// grad itself. The kernel writes the per-(batch, channel) sums, which the sum reduction adds over the
// batch (deterministic: no atomics).
#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>

#include <algorithm>
#include <limits>
#include <array>
#include <tuple>
#include <vector>

#include "ops/reduce.hpp"
#include "ops/runtime/op.hpp"

namespace kjit::ops {
namespace {

constexpr const char* kForward = "kjit.ops.group_norm";
constexpr const char* kForwardStats = "kjit.ops.group_norm_forward";
constexpr const char* kBackward = "kjit.ops.group_norm_backward";

const KernelFamily& family(bool backward) {
  static const std::shared_ptr<const Template> t = builtin_template("group_norm");
  static const KernelFamily fwd(Engine::global(), t, "group_norm_forward", CompileOptions::library());
  static const KernelFamily bwd(Engine::global(), t, "group_norm_backward", CompileOptions::library());
  return backward ? bwd : fwd;
}

// The kernels' ACT: 0 none, 1 silu, 2 mish.
int parse_activation(const char* op, const std::optional<c10::string_view>& activation) {
  if (!activation || *activation == "none") return 0;
  if (*activation == "silu") return 1;
  if (*activation == "mish") return 2;
  fail_value(op, "activation must be None, 'silu' or 'mish', got '" + std::string(*activation) +
                     "'; apply other activations to the output");
}

// x's batch, channels, groups and the elements per channel (the product of the dims after C).
template <class Int>
struct Dims {
  Int B, C, L;
  std::int64_t G;
};

template <class Int>
Dims<Int> dims_of(const char* op, const at::Tensor& x, std::int64_t num_groups) {
  check_dtype(op, "x", x, kFloatingTypes);
  if (x.dim() < 2)
    fail_value(op, "x must be [batch, channels, *] (at least 2 dims), got shape " + shape_str(x.sym_sizes()));
  if (num_groups <= 0) fail_value(op, "num_groups must be positive, got " + std::to_string(num_groups));
  const c10::SymIntArrayRef s = x.sym_sizes();
  c10::SymInt L = 1;
  for (std::size_t i = 2; i < s.size(); ++i) L = L * s[i];
  if ((s[1] % num_groups) != 0)
    fail_value(op, "x has " + c10::str(s[1]) + " channels, which " + std::to_string(num_groups) +
                       " groups do not divide; num_groups must divide the channels (dim 1 of x)");
  if constexpr (std::is_same_v<Int, c10::SymInt>) {
    return {s[0], s[1], L, num_groups};
  } else {
    return {s[0].expect_int(), s[1].expect_int(), L.expect_int(), num_groups};
  }
}

// A FiLM term: x's dtype, shape [B, C] or [B, C, 1, ...] (x's dims, 1 after C).
void check_film(const char* op, const char* arg, const at::Tensor& t, const at::Tensor& x) {
  check_dtype(op, arg, t, kFloatingTypes);
  check_same_dtype(op, arg, t, "x", x);
  const c10::SymIntArrayRef ts = t.sym_sizes(), xs = x.sym_sizes();
  bool ok = ts.size() >= 2 && ts[0] == xs[0] && ts[1] == xs[1] && (ts.size() == 2 || ts.size() == xs.size());
  for (std::size_t i = 2; ok && i < ts.size(); ++i) ok = ts[i] == 1;
  if (!ok) {
    std::vector<c10::SymInt> ones(xs.begin(), xs.end());
    for (std::size_t i = 2; i < ones.size(); ++i) ones[i] = 1;
    fail_value(op, std::string(arg) + " has shape " + shape_str(ts) + " but must have shape " +
                       shape_str(c10::SymIntArrayRef(xs.data(), 2)) + " or " + shape_str(ones) +
                       " (one value per batch and channel of x)");
  }
}

// Every check of the forward (CUDA and Meta).
template <class Int>
Dims<Int> check_forward(const char* op, const at::Tensor& x, std::int64_t num_groups,
                        const std::optional<at::Tensor>& weight, const std::optional<at::Tensor>& bias,
                        const std::optional<c10::string_view>& activation, const std::optional<at::Tensor>& scale,
                        const std::optional<at::Tensor>& shift, const std::optional<at::Tensor>& residual) {
  const Dims<Int> d = dims_of<Int>(op, x, num_groups);
  const c10::SymInt C = x.sym_size(1);
  if (weight) check_like(op, "weight", *weight, "x", x, c10::SymIntArrayRef(&C, 1));
  if (bias) check_like(op, "bias", *bias, "x", x, c10::SymIntArrayRef(&C, 1));
  parse_activation(op, activation);
  if (scale) check_film(op, "scale", *scale, x);
  if (shift) check_film(op, "shift", *shift, x);
  if (residual) check_like(op, "residual", *residual, "x", x, x.sym_sizes());
  return d;
}

// The FiLM terms as the kernel reads them: unit channel stride, one batch stride for both (film_ld).
struct Film {
  at::Tensor scale, shift;
  long long ld = 0;
};
Film film_of(const std::optional<at::Tensor>& scale, const std::optional<at::Tensor>& shift, std::int64_t C) {
  // A term's [B, C] view and whether its channels are adjacent.
  const auto as_bc = [](const at::Tensor& t) { return t.dim() == 2 ? t : t.flatten(1); };
  Film f;
  if (scale) f.scale = as_bc(*scale);
  if (shift) f.shift = as_bc(*shift);
  const auto unit = [&](const at::Tensor& t) { return !t.defined() || C == 1 || t.stride(1) == 1; };
  const at::Tensor& first = f.scale.defined() ? f.scale : f.shift;
  if (!first.defined()) return f;
  bool one_ld = unit(f.scale) && unit(f.shift);
  if (one_ld && f.scale.defined() && f.shift.defined() && f.scale.size(0) > 1)
    one_ld = f.scale.stride(0) == f.shift.stride(0);
  if (!one_ld) {
    if (f.scale.defined()) f.scale = f.scale.contiguous();
    if (f.shift.defined()) f.shift = f.shift.contiguous();
  }
  f.ld = first.size(0) > 1 ? first.stride(0) : 0;
  return f;
}

const void* data_or_null(const at::Tensor& t) { return t.defined() ? t.const_data_ptr() : nullptr; }
at::Tensor contiguous_or_none(const std::optional<at::Tensor>& t) { return t ? t->contiguous() : at::Tensor(); }

std::int64_t pow2_at_least(std::int64_t n) {
  std::int64_t p = 1;
  while (p < n) p <<= 1;
  return p;
}

// Both kernels: blocks loop over the B * G groups, a few blocks per multiprocessor at most.
unsigned grid_of(std::int64_t groups, unsigned threads, int device) {
  const std::int64_t resident = static_cast<std::int64_t>(sm_count(device)) * std::max<std::int64_t>(1, 2048 / threads);
  return static_cast<unsigned>(std::min(groups, resident));
}

// The forward's block: a thread per two vectors of the group, 32 to 512 threads.
unsigned forward_threads(std::int64_t group_elems, int vec) {
  return static_cast<unsigned>(std::clamp<std::int64_t>(pow2_at_least(cdiv(group_elems, 2 * vec)), 32, 512));
}
// The backward's block: a warp per channel of the group, up to 16 warps.
unsigned backward_threads(std::int64_t cg) {
  return static_cast<unsigned>(32 * std::clamp<std::int64_t>(pow2_at_least(cg), 1, 16));
}

struct Stats {
  at::Tensor mean, rstd;
};

// The forward on checked inputs (on `device`) into a new y; Stats: the group statistics too.
std::tuple<at::Tensor, Stats> forward_impl(int device, const Dims<std::int64_t>& d, const at::Tensor& x0,
                                           const std::optional<at::Tensor>& weight,
                                           const std::optional<at::Tensor>& bias, double eps, int act,
                                           const std::optional<at::Tensor>& scale,
                                           const std::optional<at::Tensor>& shift,
                                           const std::optional<at::Tensor>& residual, bool stats) {
  at::Tensor y = new_empty(x0.sizes(), x0);
  Stats st;
  const at::ScalarType acc = acc_dtype(x0.scalar_type());
  if (stats) {
    st.mean = new_empty({d.B, d.G}, x0, acc);
    st.rstd = new_empty({d.B, d.G}, x0, acc);
  }
  if (d.B == 0 || d.C == 0) return {std::move(y), std::move(st)};
  if (d.L == 0) {  // groups of no elements: no statistics (NaN, as the mean of nothing)
    if (stats) {
      st.mean.fill_(std::numeric_limits<double>::quiet_NaN());
      st.rstd.fill_(std::numeric_limits<double>::quiet_NaN());
    }
    return {std::move(y), std::move(st)};
  }
  const at::Tensor x = x0.contiguous(), res = contiguous_or_none(residual);
  const at::Tensor w = contiguous_or_none(weight), b = contiguous_or_none(bias);
  const Film film = film_of(scale, shift, d.C);
  const int cg = static_cast<int>(d.C / d.G);
  const void* xp = x.const_data_ptr();
  const void* rp = data_or_null(res);
  void* yp = y.data_ptr();
  const int vec = pick_vec(x.element_size(), {xp, yp, rp ? rp : xp}, d.L);
  const unsigned threads = forward_threads(static_cast<std::int64_t>(cg) * d.L, vec);
  LaunchContext ctx(device);
  const TemplateArg targs[] = {type_arg(x.scalar_type()),
                               int_arg(threads),
                               int_arg(vec),
                               int_arg(act),
                               bool_arg(w.defined()),
                               bool_arg(b.defined()),
                               bool_arg(film.scale.defined()),
                               bool_arg(film.shift.defined()),
                               bool_arg(res.defined()),
                               bool_arg(stats)};
  const auto k = kernel_for(family(false), targs, device, ctx.compile_forbidden);
  const void* wp = data_or_null(w);
  const void* bp = data_or_null(b);
  const void* sp = data_or_null(film.scale);
  const void* hp = data_or_null(film.shift);
  long long ld = film.ld;
  void* mp = stats ? st.mean.data_ptr() : nullptr;
  void* rsp = stats ? st.rstd.data_ptr() : nullptr;
  long long groups = d.B * d.G, L = d.L;
  int num_groups = static_cast<int>(d.G);
  LaunchConfig cfg;
  cfg.grid.x = grid_of(groups, threads, device);
  cfg.block.x = threads;
  cfg.stream = ctx.stream;
  launch_kernel(*k, cfg, xp, wp, bp, sp, hp, ld, rp, yp, mp, rsp, groups, num_groups, cg, L, eps);
  return {std::move(y), std::move(st)};
}

// An optional tensor for device_for (None: undefined).
const at::Tensor& or_none(const std::optional<at::Tensor>& t) {
  static const at::Tensor none;
  return t ? *t : none;
}

int forward_device(const char* op, const at::Tensor& x, const std::optional<at::Tensor>& weight,
                   const std::optional<at::Tensor>& bias, const std::optional<at::Tensor>& scale,
                   const std::optional<at::Tensor>& shift, const std::optional<at::Tensor>& residual) {
  return device_for(op, {{"x", x},
                         {"weight", or_none(weight)},
                         {"bias", or_none(bias)},
                         {"scale", or_none(scale)},
                         {"shift", or_none(shift)},
                         {"residual", or_none(residual)}});
}

template <bool Stats>
auto forward(const char* op, const at::Tensor& x, std::int64_t num_groups, const std::optional<at::Tensor>& weight,
             const std::optional<at::Tensor>& bias, double eps, const std::optional<c10::string_view>& activation,
             const std::optional<at::Tensor>& scale, const std::optional<at::Tensor>& shift,
             const std::optional<at::Tensor>& residual) {
  const int device = forward_device(op, x, weight, bias, scale, shift, residual);
  const Dims<std::int64_t> d =
      check_forward<std::int64_t>(op, x, num_groups, weight, bias, activation, scale, shift, residual);
  auto [y, st] =
      forward_impl(device, d, x, weight, bias, eps, parse_activation(op, activation), scale, shift, residual, Stats);
  if constexpr (Stats)
    return std::tuple<at::Tensor, at::Tensor, at::Tensor>{std::move(y), std::move(st.mean), std::move(st.rstd)};
  else
    return y;
}

using Triple = std::tuple<at::Tensor, at::Tensor, at::Tensor>;

at::Tensor group_norm_cuda(const at::Tensor& x, std::int64_t num_groups, const std::optional<at::Tensor>& weight,
                           const std::optional<at::Tensor>& bias, double eps,
                           std::optional<c10::string_view> activation, const std::optional<at::Tensor>& scale,
                           const std::optional<at::Tensor>& shift, const std::optional<at::Tensor>& residual) {
  return forward<false>(kForward, x, num_groups, weight, bias, eps, activation, scale, shift, residual);
}
Triple group_norm_forward_cuda(const at::Tensor& x, std::int64_t num_groups, const std::optional<at::Tensor>& weight,
                               const std::optional<at::Tensor>& bias, double eps,
                               std::optional<c10::string_view> activation, const std::optional<at::Tensor>& scale,
                               const std::optional<at::Tensor>& shift, const std::optional<at::Tensor>& residual) {
  return forward<true>(kForwardStats, x, num_groups, weight, bias, eps, activation, scale, shift, residual);
}

at::TensorOptions contiguous_like(const at::Tensor& x) {
  return x.options().memory_format(c10::MemoryFormat::Contiguous);
}

at::Tensor group_norm_meta(const at::Tensor& x, std::int64_t num_groups, const std::optional<at::Tensor>& weight,
                           const std::optional<at::Tensor>& bias, double, std::optional<c10::string_view> activation,
                           const std::optional<at::Tensor>& scale, const std::optional<at::Tensor>& shift,
                           const std::optional<at::Tensor>& residual) {
  check_forward<c10::SymInt>(kForward, x, num_groups, weight, bias, activation, scale, shift, residual);
  return at::empty_symint(x.sym_sizes(), contiguous_like(x));
}
Triple group_norm_forward_meta(const at::Tensor& x, std::int64_t num_groups, const std::optional<at::Tensor>& weight,
                               const std::optional<at::Tensor>& bias, double,
                               std::optional<c10::string_view> activation, const std::optional<at::Tensor>& scale,
                               const std::optional<at::Tensor>& shift, const std::optional<at::Tensor>& residual) {
  const auto d =
      check_forward<c10::SymInt>(kForwardStats, x, num_groups, weight, bias, activation, scale, shift, residual);
  const std::array<c10::SymInt, 2> bg{d.B, c10::SymInt(d.G)};
  const auto stats = x.options().dtype(acc_dtype(x.scalar_type()));
  return {at::empty_symint(x.sym_sizes(), contiguous_like(x)), at::empty_symint(bg, stats),
          at::empty_symint(bg, stats)};
}

// ---- backward ----------------------------------------------------------------------------------------------

using Grads = std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor>;

template <class Int>
Dims<Int> check_backward(const at::Tensor& grad, const at::Tensor& x, const at::Tensor& mean, const at::Tensor& rstd,
                         std::int64_t num_groups, const std::optional<at::Tensor>& weight,
                         const std::optional<at::Tensor>& bias, const std::optional<c10::string_view>& activation,
                         const std::optional<at::Tensor>& scale) {
  const Dims<Int> d =
      check_forward<Int>(kBackward, x, num_groups, weight, bias, activation, scale, std::nullopt, std::nullopt);
  check_like(kBackward, "grad", grad, "x", x, x.sym_sizes());
  const std::array<c10::SymInt, 2> bg{x.sym_size(0), c10::SymInt(num_groups)};
  const at::ScalarType acc = acc_dtype(x.scalar_type());
  for (const auto& [name, t] : {std::pair<const char*, const at::Tensor&>{"mean", mean}, {"rstd", rstd}}) {
    if (t.scalar_type() != acc)
      fail_value(kBackward, std::string(name) + " has dtype " + std::string(c10::toString(t.scalar_type())) +
                                " but must have dtype " + c10::toString(acc) + " for x of dtype " +
                                c10::toString(x.scalar_type()) + " (the statistics group_norm_forward returns)");
    if (t.sym_sizes() != c10::SymIntArrayRef(bg))
      fail_value(kBackward, std::string(name) + " has shape " + shape_str(t.sym_sizes()) + " but must have shape " +
                                shape_str(bg) + " ([batch, num_groups]: the statistics group_norm_forward returns)");
  }
  return d;
}

// The backward kernel's template arguments: one list for the backward and for the compile ahead.
std::array<TemplateArg, 7> backward_args(at::ScalarType dtype, unsigned threads, int vec, int act, bool w, bool b,
                                         bool scale) {
  return {type_arg(dtype), int_arg(threads), int_arg(vec), int_arg(act), bool_arg(w), bool_arg(b), bool_arg(scale)};
}

Grads group_norm_backward_cuda(const at::Tensor& grad, const at::Tensor& x0, const at::Tensor& mean0,
                               const at::Tensor& rstd0, std::int64_t num_groups,
                               const std::optional<at::Tensor>& weight, const std::optional<at::Tensor>& bias,
                               std::optional<c10::string_view> activation, const std::optional<at::Tensor>& scale,
                               bool has_shift) {
  const int device = device_for(kBackward, {{"grad", grad},
                                            {"x", x0},
                                            {"mean", mean0},
                                            {"rstd", rstd0},
                                            {"weight", or_none(weight)},
                                            {"bias", or_none(bias)},
                                            {"scale", or_none(scale)}});
  const Dims<std::int64_t> d =
      check_backward<std::int64_t>(grad, x0, mean0, rstd0, num_groups, weight, bias, activation, scale);
  const int act = parse_activation(kBackward, activation);
  const at::ScalarType dt = x0.scalar_type(), acc = acc_dtype(dt);
  at::Tensor dx = new_empty(x0.sizes(), x0);
  // The per-(batch, channel) sums the kernel writes; absent ones are not written.
  const auto bc = [&](bool wanted) { return wanted ? new_empty({d.B, d.C}, x0, acc) : at::Tensor(); };
  at::Tensor dw_bc = bc(weight.has_value()), db_bc = bc(bias.has_value()), ds_bc = bc(scale.has_value()),
             dh_bc = bc(has_shift);
  const bool any = d.B > 0 && d.C > 0 && d.L > 0;
  if (any) {
    const at::Tensor x = x0.contiguous(), dy = grad.contiguous(), mean = mean0.contiguous(), rstd = rstd0.contiguous();
    const at::Tensor w = contiguous_or_none(weight), b = contiguous_or_none(bias);
    const Film film = film_of(scale, std::nullopt, d.C);
    const int cg = static_cast<int>(d.C / d.G);
    const void* dyp = dy.const_data_ptr();
    const void* xp = x.const_data_ptr();
    void* dxp = dx.data_ptr();
    const int vec = pick_vec(x.element_size(), {xp, dyp, dxp}, d.L);
    const unsigned threads = backward_threads(cg);
    LaunchContext ctx(device);
    const auto targs = backward_args(dt, threads, vec, act, w.defined(), b.defined(), film.scale.defined());
    const auto k = kernel_for(family(true), targs.data(), targs.size(), device, ctx.compile_forbidden);
    const void* mp = mean.const_data_ptr();
    const void* rp = rstd.const_data_ptr();
    const void* wp = data_or_null(w);
    const void* bp = data_or_null(b);
    const void* sp = data_or_null(film.scale);
    long long ld = film.ld;
    const auto ptr = [](at::Tensor& t) -> void* { return t.defined() ? t.data_ptr() : nullptr; };
    void* dwp = ptr(dw_bc);
    void* dbp = ptr(db_bc);
    void* dsp = ptr(ds_bc);
    void* dhp = ptr(dh_bc);
    long long groups = d.B * d.G, L = d.L;
    int num_groups_i = static_cast<int>(d.G);
    LaunchConfig cfg;
    cfg.grid.x = grid_of(groups, threads, device);
    cfg.block.x = threads;
    cfg.stream = ctx.stream;
    launch_kernel(*k, cfg, dyp, xp, mp, rp, wp, bp, sp, ld, dxp, dwp, dbp, dsp, dhp, groups, num_groups_i, cg, L);
  }
  // dweight / dbias: the batch's sums (zeros for no elements); dscale / dshift: the sums in x's dtype.
  const auto over_batch = [&](const at::Tensor& t) {
    if (!t.defined()) return new_empty({0}, x0);
    if (!any) return at::zeros({d.C}, x0.options());
    return sum_to_dtype(t, 0, dt);
  };
  const auto per_bc = [&](at::Tensor& t) {
    if (!t.defined()) return new_empty({0}, x0);
    if (!any) t.zero_();
    return t.scalar_type() == dt ? t : t.to(dt);
  };
  return {std::move(dx), over_batch(dw_bc), over_batch(db_bc), per_bc(ds_bc), per_bc(dh_bc)};
}

Grads group_norm_backward_meta(const at::Tensor& grad, const at::Tensor& x, const at::Tensor& mean,
                               const at::Tensor& rstd, std::int64_t num_groups, const std::optional<at::Tensor>& weight,
                               const std::optional<at::Tensor>& bias, std::optional<c10::string_view> activation,
                               const std::optional<at::Tensor>& scale, bool has_shift) {
  const auto d = check_backward<c10::SymInt>(grad, x, mean, rstd, num_groups, weight, bias, activation, scale);
  const auto options = contiguous_like(x);
  const c10::SymInt zero(0);
  const std::array<c10::SymInt, 2> bcs{d.B, d.C};
  const auto per_c = [&](bool wanted) {
    return wanted ? at::empty_symint(c10::SymIntArrayRef(&d.C, 1), options)
                  : at::empty_symint(c10::SymIntArrayRef(&zero, 1), options);
  };
  const auto per_bc = [&](bool wanted) {
    return wanted ? at::empty_symint(bcs, options) : at::empty_symint(c10::SymIntArrayRef(&zero, 1), options);
  };
  return {at::empty_symint(x.sym_sizes(), options), per_c(weight.has_value()), per_c(bias.has_value()),
          per_bc(scale.has_value()), per_bc(has_shift)};
}

// The backward's kernels, compiled ahead at the forward's first compile (CompileAheadOnMiss): the backward
// kernel at x's geometry (the gradient and dx are most often fresh, aligned tensors) and the batch sum of
// dweight's partials.
void prepare_backward_ahead(const at::Tensor& x, std::int64_t num_groups, bool w, bool b, int act, bool scale) {
  const std::int64_t B = x.size(0), C = x.size(1), L = x.numel() / std::max<std::int64_t>(1, B * C);
  if (!B || !C || !L || C % num_groups) return;
  const int device = x.get_device();
  const int vec = pick_vec(x.element_size(), {x.const_data_ptr()}, L);
  const auto args = backward_args(x.scalar_type(), backward_threads(C / num_groups), vec, act, w, b, scale);
  family(true).prepare_ahead(args.data(), args.size(), device);
  if (w || b) prepare_sum_rows_ahead(B, C, acc_dtype(x.scalar_type()), x.scalar_type(), device);
}

// A gradient for a FiLM term of the forward: the kernel's [B, C] sums in the term's shape.
at::Tensor film_grad(const at::Tensor& g, const at::Tensor& term) { return g.view(term.sizes()); }

// group_norm_forward's autograd: outputs (y, mean, rstd), the statistics not differentiable.
struct GroupNormFunction : public torch::autograd::Function<GroupNormFunction> {
  static constexpr const char* kName = "group_norm_forward";
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x,
                                                std::int64_t num_groups, const std::optional<at::Tensor>& weight,
                                                const std::optional<at::Tensor>& bias, double eps,
                                                std::optional<c10::string_view> activation,
                                                const std::optional<at::Tensor>& scale,
                                                const std::optional<at::Tensor>& shift,
                                                const std::optional<at::Tensor>& residual) {
    ctx->saved_data["num_groups"] = num_groups;
    ctx->saved_data["activation"] = activation ? std::string(*activation) : std::string("none");
    ctx->saved_data["has_w"] = weight.has_value();
    ctx->saved_data["has_b"] = bias.has_value();
    ctx->saved_data["has_scale"] = scale.has_value();
    ctx->saved_data["has_shift"] = shift.has_value();
    ctx->saved_data["has_residual"] = residual.has_value();
    const auto predict = [&] {  // after the forward's checks: the activation is valid
      prepare_backward_ahead(x, num_groups, weight.has_value(), bias.has_value(),
                             parse_activation(kForwardStats, activation), scale.has_value());
    };
    const CompileAheadOnMiss ahead(x, predict);
    auto [y, mean, rstd] = call_below_autograd<&group_norm_forward_cuda>(kName, x, num_groups, weight, bias, eps,
                                                                         activation, scale, shift, residual);
    ctx->mark_non_differentiable({mean, rstd});
    ctx->save_for_backward({x, weight ? *weight : at::Tensor(), bias ? *bias : at::Tensor(),
                            scale ? *scale : at::Tensor(), shift ? *shift : at::Tensor(), mean, rstd});
    return {y, mean, rstd};
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const auto opt = [](bool has, const at::Tensor& t) { return has ? std::optional<at::Tensor>(t) : std::nullopt; };
    const bool has_w = ctx->saved_data["has_w"].toBool(), has_b = ctx->saved_data["has_b"].toBool();
    const bool has_scale = ctx->saved_data["has_scale"].toBool(), has_shift = ctx->saved_data["has_shift"].toBool();
    const std::optional<c10::string_view> activation(ctx->saved_data["activation"].toStringRef());
    auto [dx, dw, db, dscale, dshift] =
        OpHandle<&group_norm_backward_cuda>::get("group_norm_backward")
            .call(grads[0], saved[0], saved[5], saved[6], ctx->saved_data["num_groups"].toInt(), opt(has_w, saved[1]),
                  opt(has_b, saved[2]), activation, opt(has_scale, saved[3]), has_shift);
    // One gradient per forward input: x, num_groups, weight, bias, eps, activation, scale, shift, residual.
    return {dx,
            at::Tensor(),
            has_w ? dw : at::Tensor(),
            has_b ? db : at::Tensor(),
            at::Tensor(),
            at::Tensor(),
            has_scale ? film_grad(dscale, saved[3]) : at::Tensor(),
            has_shift ? film_grad(dshift, saved[4]) : at::Tensor(),
            ctx->saved_data["has_residual"].toBool() ? grads[0] : at::Tensor()};
  }
};

// group_norm's autograd: the op below autograd (no statistics) when no gradient is wanted, else
// GroupNormFunction's y.
at::Tensor group_norm_autograd(const at::Tensor& x, std::int64_t num_groups, const std::optional<at::Tensor>& weight,
                               const std::optional<at::Tensor>& bias, double eps,
                               std::optional<c10::string_view> activation, const std::optional<at::Tensor>& scale,
                               const std::optional<at::Tensor>& shift, const std::optional<at::Tensor>& residual) {
  if (!(c10::GradMode::is_enabled() && (requires_grad(x) || requires_grad(weight) || requires_grad(bias) ||
                                        requires_grad(scale) || requires_grad(shift) || requires_grad(residual))))
    return call_below_autograd<&group_norm_cuda>("group_norm", x, num_groups, weight, bias, eps, activation, scale,
                                                 shift, residual);
  // The public op's checks first: a bad call names kjit.ops.group_norm even where group_norm_forward runs it.
  try {
    forward_device(kForward, x, weight, bias, scale, shift, residual);
    check_forward<c10::SymInt>(kForward, x, num_groups, weight, bias, activation, scale, shift, residual);
  } catch (const Error&) {
    rethrow_for_python(std::current_exception());  // kjit's error classes, as from the op's own kernels
  }
  return GroupNormFunction::apply(x, num_groups, weight, bias, eps, activation, scale, shift, residual)[0];
}

}  // namespace

#define KJIT_GROUP_NORM_ARGS                                                                                           \
  "(Tensor x, int num_groups, Tensor? weight=None, Tensor? bias=None, float eps=1e-05, str? activation=None, Tensor? " \
  "scale=None, Tensor? shift=None, Tensor? residual=None)"
KJIT_OP(group_norm, "group_norm" KJIT_GROUP_NORM_ARGS " -> Tensor", group_norm_cuda, group_norm_meta);
KJIT_OP(group_norm_forward, "group_norm_forward" KJIT_GROUP_NORM_ARGS " -> (Tensor, Tensor, Tensor)",
        group_norm_forward_cuda, group_norm_forward_meta);
#undef KJIT_GROUP_NORM_ARGS
KJIT_OP(group_norm_backward,
        "group_norm_backward(Tensor grad, Tensor x, Tensor mean, Tensor rstd, int num_groups, Tensor? weight=None, "
        "Tensor? bias=None, str? activation=None, Tensor? scale=None, bool has_shift=False) -> (Tensor, Tensor, "
        "Tensor, Tensor, Tensor)",
        group_norm_backward_cuda, group_norm_backward_meta);
KJIT_OP_AUTOGRAD(group_norm, (&group_norm_autograd))
KJIT_OP_AUTOGRAD(group_norm_forward, (autograd_kernel<GroupNormFunction, &group_norm_forward_cuda>))

}  // namespace kjit::ops
