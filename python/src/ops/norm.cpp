// kjit::layer_norm(x, weight, bias, eps) and rms_norm(x, weight, eps) over the last dim, with backward
// (kernel_templates/norm.cuh).
//
// No statistics are stored for the backward: norm_backward recomputes mean and rstd from the row it holds
// in registers anyway. The backward writes dx and per-block partial sums of dweight / dbias, reduced by
// the sum reduction over dim 0. Rows live in registers (up to 128 elements per thread: rows of up to
// 131072 elements); the row length is specialized (D) up to KJIT_MAX_SPECIALIZATIONS distinct lengths
// per kernel. On sm_90 and newer, the plain norms' forward splits rows of more than 32 elements per
// thread over a thread-block cluster instead (kernel_templates/norm_split.cuh: 16-byte vectors whatever
// the row's alignment, no register spills; up to 8 x 512 x 32 elements). weight and bias have the input's dtype and
// shape [d]. Half types compute in float. The backward ops return three distinct tensors: dweight / dbias are empty
// tensors of their own when there is no weight / bias (outputs never alias each other).
//
// add_layer_norm(x, residual, weight, bias, eps) and add_rms_norm(x, residual, weight, eps) fuse the
// residual add of a transformer block into the same kernel (RESIDUAL): one pass reads x and residual and
// writes h = x + residual (rounded to x's dtype; the norm reads that rounded h, as norm(x + residual) does)
// and y = norm(h). Their backward saves h alone: given dy and dh (None when h had no gradient), the
// gradient of x and of residual is dh + norm_backward(dy, h), both written by one norm_backward pass
// (RESIDUAL; ADD_DH when dh is given), as two distinct tensors.
#include <ATen/ops/empty.h>

#include <array>
#include <tuple>

#include "ops/runtime/op.hpp"
#include "ops/reduce.hpp"
#include "ops/runtime/rows.hpp"

namespace kjit::ops {
namespace {

constexpr int kMaxPerThread = 128;
// Beyond this many elements per thread the forward's registers spill: the split kernel takes the row.
constexpr int kSplitPerThread = 32;

const KernelFamily& family(bool backward) {
  static const std::shared_ptr<const Template> t = builtin_template("norm");
  static const KernelFamily fwd(Engine::global(), t, "norm_forward", CompileOptions::library());
  static const KernelFamily bwd(Engine::global(), t, "norm_backward", CompileOptions::library());
  return backward ? bwd : fwd;
}

const KernelFamily& split_family() {
  static const KernelFamily f(Engine::global(), builtin_template("norm_split"), "norm_split_forward",
                              CompileOptions::library());
  return f;
}

// The name of an op of this file in messages ("kjit.ops.add_rms_norm_backward"): a literal, no allocation
// per call.
constexpr const char* op_name(bool rms, bool residual, bool backward) {
  constexpr const char* kNames[2][2][2] = {// [rms][residual][backward]
                                           {{"kjit.ops.layer_norm", "kjit.ops.layer_norm_backward"},
                                            {"kjit.ops.add_layer_norm", "kjit.ops.add_layer_norm_backward"}},
                                           {{"kjit.ops.rms_norm", "kjit.ops.rms_norm_backward"},
                                            {"kjit.ops.add_rms_norm", "kjit.ops.add_rms_norm_backward"}}};
  return kNames[rms][residual][backward];
}

RowGeometry geometry(const char* op, std::int64_t d, std::initializer_list<const at::Tensor*> tensors, bool rms) {
  const bool wide = (*tensors.begin())->element_size() >= 4 && !rms;
  const RowGeometry g = row_geometry(d, tensors, kMaxPerThread, wide ? 8 : 4);
  if (g.items == 0)
    fail_value(op, "rows of " + std::to_string(d) +
                       " elements are longer than the kernel holds in registers (at most " +
                       std::to_string(1024 * kMaxPerThread) +
                       " elements at this alignment); use torch.nn.functional for such rows");
  return g;
}

// The checks shared by every norm kernel (CUDA and Meta): x has a floating dtype and a last dim;
// weight and bias have its dtype and the shape [d]. `x_name` names x in messages (h in the backward of
// the residual norms).
void check(const char* op, const at::Tensor& x, const std::optional<at::Tensor>& weight,
           const std::optional<at::Tensor>& bias, const char* x_name = "x") {
  check_dtype(op, x_name, x, kFloatingTypes);
  if (x.dim() == 0)
    fail_value(op, std::string(x_name) + " must have at least one dim (the normalized last dim), got a 0-dim tensor");
  const c10::SymInt d = x.sym_size(-1);
  if (weight) check_like(op, "weight", *weight, x_name, x, c10::SymIntArrayRef(&d, 1));
  if (bias) check_like(op, "bias", *bias, x_name, x, c10::SymIntArrayRef(&d, 1));
}

// The residual norms' checks: those of the norm, then residual has x's dtype and shape.
void check_residual(const char* op, const at::Tensor& x, const at::Tensor& residual,
                    const std::optional<at::Tensor>& weight, const std::optional<at::Tensor>& bias) {
  check(op, x, weight, bias);
  check_like(op, "residual", residual, "x", x, x.sym_sizes());
}

const void* data_or_null(const std::optional<at::Tensor>& t) { return t ? t->const_data_ptr() : nullptr; }

// norm_forward on the rows of x (checked, on `device`) into y; Residual: of x + residual (res, the
// contiguous residual), written to h. Without Residual, res and h are undefined and the kernel is the
// plain norm's (its nine template arguments: RESIDUAL left to its default).
// The plain norms' forward split over a cluster (sm_90 and newer; the caller checked has_clusters) when
// one block would hold more than kSplitPerThread elements per thread (or cannot hold the row). False
// (also when the device refused the cluster launch: launch_split): the one-block kernel runs (or refuses
// the row).
template <bool Rms>
bool launch_split_forward(int device, const Rows& r, const at::Tensor& y, const std::optional<at::Tensor>& w,
                          const std::optional<at::Tensor>& b, double eps) {
  const bool wide = r.x.element_size() >= 4 && !Rms;  // as geometry()
  const RowGeometry one = row_geometry(r.d, {&r.x, &y, w ? &*w : &r.x, b ? &*b : &r.x}, kMaxPerThread, wide ? 8 : 4);
  if (one.items && one.items * one.vec <= kSplitPerThread) return false;
  const SplitGeometry g = split_geometry(r.d, r.x, y, kSplitPerThread);
  if (!g.cl) return false;
  LaunchContext ctx(device);
  const TemplateArg targs[] = {type_arg(y.scalar_type()), int_arg(g.tpr), int_arg(g.cl),     int_arg(g.vec),
                               int_arg(g.items),          bool_arg(Rms),  bool_arg(bool(w)), bool_arg(bool(b))};
  const auto k = kernel_for(split_family(), targs, device, ctx.compile_forbidden);
  const void* xp = r.x.const_data_ptr();
  const void* wp = data_or_null(w);
  const void* bp = data_or_null(b);
  void* yp = y.data_ptr();
  long long rows = r.rows;
  int d = static_cast<int>(r.d);
  int chunk = g.chunk;
  LaunchConfig cfg;
  cfg.grid = g.grid_for(r.rows);
  cfg.block = g.block();
  cfg.stream = ctx.stream;
  return launch_split(op_name(Rms, false, false), device, *k, cfg, xp, wp, bp, yp, rows, d, chunk, eps);
}

template <bool Rms, bool Residual>
void launch_forward(const char* op, int device, const Rows& r, const at::Tensor& res, const at::Tensor& y,
                    const at::Tensor& h, const std::optional<at::Tensor>& weight, const std::optional<at::Tensor>& bias,
                    double eps) {
  const std::optional<at::Tensor> w = weight ? std::optional<at::Tensor>(weight->contiguous()) : std::nullopt;
  const std::optional<at::Tensor> b = bias ? std::optional<at::Tensor>(bias->contiguous()) : std::nullopt;
  if constexpr (!Residual)
    if (has_clusters(device) && launch_split_forward<Rms>(device, r, y, w, b, eps)) return;
  // A tensor that is absent stands in as x (the vector width depends on the alignment of each one).
  const RowGeometry g =
      geometry(op, r.d, {&r.x, &y, w ? &*w : &r.x, b ? &*b : &r.x, Residual ? &res : &r.x, Residual ? &h : &r.x}, Rms);
  const std::int64_t D = specialized_d("norm_forward", r.d);
  LaunchContext ctx(device);
  const TemplateArg targs[] = {type_arg(y.scalar_type()),
                               int_arg(g.tpr),
                               int_arg(g.rows_per_block),
                               int_arg(g.vec),
                               int_arg(g.items),
                               int_arg(D),
                               bool_arg(Rms),
                               bool_arg(bool(w)),
                               bool_arg(bool(b)),
                               bool_arg(true)};
  const auto k = kernel_for(family(false), targs, Residual ? 10 : 9, device, ctx.compile_forbidden);
  const void* xp = r.x.const_data_ptr();
  const void* wp = data_or_null(w);
  const void* bp = data_or_null(b);
  void* yp = y.data_ptr();
  long long rows = r.rows;
  int d = static_cast<int>(r.d);
  const void* rp = Residual ? res.const_data_ptr() : nullptr;
  void* hp = Residual ? h.data_ptr() : nullptr;
  LaunchConfig cfg;
  cfg.grid = g.grid_for(r.rows);
  cfg.block = g.block();
  cfg.stream = ctx.stream;
  launch_kernel(*k, cfg, xp, wp, bp, yp, rows, d, eps, rp, hp);
}

template <bool Rms>
at::Tensor forward(const at::Tensor& x, const std::optional<at::Tensor>& weight, const std::optional<at::Tensor>& bias,
                   double eps) {
  constexpr const char* op = op_name(Rms, false, false);
  const int device =
      device_for(op, {{"x", x}, {"weight", weight ? *weight : at::Tensor()}, {"bias", bias ? *bias : at::Tensor()}});
  check(op, x, weight, bias);
  const Rows r = as_rows(x);
  at::Tensor y = new_empty(x.sizes(), x);
  if (y.numel() == 0) return y;
  launch_forward<Rms, false>(op, device, r, at::Tensor(), y, at::Tensor(), weight, bias, eps);
  return y;
}

using Pair = std::tuple<at::Tensor, at::Tensor>;

// (y, h): h = x + residual, y = norm(h).
template <bool Rms>
Pair add_forward(const at::Tensor& x, const at::Tensor& residual, const std::optional<at::Tensor>& weight,
                 const std::optional<at::Tensor>& bias, double eps) {
  constexpr const char* op = op_name(Rms, true, false);
  const int device = device_for(op, {{"x", x},
                                     {"residual", residual},
                                     {"weight", weight ? *weight : at::Tensor()},
                                     {"bias", bias ? *bias : at::Tensor()}});
  check_residual(op, x, residual, weight, bias);
  const Rows r = as_rows(x);
  at::Tensor y = new_empty(x.sizes(), x);
  at::Tensor h = new_empty(x.sizes(), x);
  if (y.numel() == 0) return {std::move(y), std::move(h)};
  const at::Tensor res = residual.contiguous();
  launch_forward<Rms, true>(op, device, r, res, y, h, weight, bias, eps);
  return {std::move(y), std::move(h)};
}

at::Tensor layer_norm_cuda(const at::Tensor& x, const std::optional<at::Tensor>& weight,
                           const std::optional<at::Tensor>& bias, double eps) {
  return forward<false>(x, weight, bias, eps);
}
at::Tensor rms_norm_cuda(const at::Tensor& x, const std::optional<at::Tensor>& weight, double eps) {
  return forward<true>(x, weight, std::nullopt, eps);
}
at::Tensor layer_norm_meta(const at::Tensor& x, const std::optional<at::Tensor>& weight,
                           const std::optional<at::Tensor>& bias, double) {
  check("kjit.ops.layer_norm", x, weight, bias);
  return at::empty_symint(x.sym_sizes(), x.options().memory_format(c10::MemoryFormat::Contiguous));
}
at::Tensor rms_norm_meta(const at::Tensor& x, const std::optional<at::Tensor>& weight, double) {
  check("kjit.ops.rms_norm", x, weight, std::nullopt);
  return at::empty_symint(x.sym_sizes(), x.options().memory_format(c10::MemoryFormat::Contiguous));
}

Pair add_layer_norm_cuda(const at::Tensor& x, const at::Tensor& residual, const std::optional<at::Tensor>& weight,
                         const std::optional<at::Tensor>& bias, double eps) {
  return add_forward<false>(x, residual, weight, bias, eps);
}
Pair add_rms_norm_cuda(const at::Tensor& x, const at::Tensor& residual, const std::optional<at::Tensor>& weight,
                       double eps) {
  return add_forward<true>(x, residual, weight, std::nullopt, eps);
}
Pair add_meta(const char* op, const at::Tensor& x, const at::Tensor& residual, const std::optional<at::Tensor>& weight,
              const std::optional<at::Tensor>& bias) {
  check_residual(op, x, residual, weight, bias);
  const auto options = x.options().memory_format(c10::MemoryFormat::Contiguous);
  return {at::empty_symint(x.sym_sizes(), options), at::empty_symint(x.sym_sizes(), options)};
}
Pair add_layer_norm_meta(const at::Tensor& x, const at::Tensor& residual, const std::optional<at::Tensor>& weight,
                         const std::optional<at::Tensor>& bias, double) {
  return add_meta("kjit.ops.add_layer_norm", x, residual, weight, bias);
}
Pair add_rms_norm_meta(const at::Tensor& x, const at::Tensor& residual, const std::optional<at::Tensor>& weight,
                       double) {
  return add_meta("kjit.ops.add_rms_norm", x, residual, weight, std::nullopt);
}

using Grads = std::tuple<at::Tensor, at::Tensor, at::Tensor>;
using Grads4 = std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor>;

// x_name: "h" for the residual norms' backward (whose saved input is h = x + residual).
void check_backward(const char* op, const at::Tensor& grad, const at::Tensor& x,
                    const std::optional<at::Tensor>& weight, const char* x_name = "x") {
  check(op, x, weight, std::nullopt, x_name);
  check_like(op, "grad", grad, x_name, x, x.sym_sizes());
}
void check_residual_backward(const char* op, const at::Tensor& grad, const std::optional<at::Tensor>& grad_h,
                             const at::Tensor& h, const std::optional<at::Tensor>& weight) {
  check_backward(op, grad, h, weight, "h");
  if (grad_h) check_like(op, "grad_h", *grad_h, "h", h, h.sym_sizes());
}

// The backward kernel's template arguments: one list for backward() and for the compile ahead at the
// forward. The plain norms' kernels take the first nine (RESIDUAL and ADD_DH left to their defaults),
// the residual norms' all eleven.
struct BackwardArgs {
  std::array<TemplateArg, 11> args;
  std::size_t n;
};
template <bool Rms, bool Residual>
BackwardArgs backward_args(at::ScalarType dtype, const RowGeometry& g, std::int64_t d, bool has_w, bool has_bias,
                           bool add_dh) {
  const std::int64_t D = specialized_d("norm_backward", d);
  return {{type_arg(dtype), int_arg(g.tpr), int_arg(g.rows_per_block), int_arg(g.vec), int_arg(g.items), int_arg(D),
           bool_arg(Rms), bool_arg(has_w), bool_arg(has_bias), bool_arg(Residual), bool_arg(Residual && add_dh)},
          Residual ? 11u : 9u};
}

// Blocks of the backward kernel: each writes the partial sums of dweight / dbias of its rows (a slot
// per row of the block), which sum_to_dtype adds up.
std::int64_t backward_blocks(const RowGeometry& g, std::int64_t rows, int device) {
  return std::min<std::int64_t>(g.grid_for(rows).x, 2 * sm_count(device));
}

// The norm's backward at x (Residual: at h, the saved x + residual) given grad (dy) and, with Residual,
// grad_h (dh, or nullopt). Returns (dx, dresidual, dweight, dbias); dresidual is undefined without
// Residual (with it, dx and dresidual hold the same values: dh + the norm's dx).
template <bool Rms, bool Residual>
Grads4 backward_impl(const char* op, int device, const at::Tensor& grad, const std::optional<at::Tensor>& grad_h,
                     const at::Tensor& x, const std::optional<at::Tensor>& weight, bool has_bias, double eps) {
  const Rows gr = as_rows(grad);
  const at::Tensor xc = x.contiguous();
  const at::Tensor ghc = Residual && grad_h ? grad_h->contiguous() : at::Tensor();
  const std::optional<at::Tensor> w = weight ? std::optional<at::Tensor>(weight->contiguous()) : std::nullopt;
  at::Tensor dx = new_empty(x.sizes(), x);
  at::Tensor dres = Residual ? new_empty(x.sizes(), x) : at::Tensor();
  // A tensor that is absent stands in as the gradient (the vector width depends on each one's alignment).
  const RowGeometry g = geometry(
      op, gr.d, {&gr.x, &xc, &dx, w ? &*w : &gr.x, ghc.defined() ? &ghc : &gr.x, Residual ? &dres : &gr.x}, Rms);
  const std::int64_t blocks = backward_blocks(g, gr.rows, device);
  const std::int64_t slots = blocks * g.rows_per_block;
  const bool work = gr.rows && gr.d;
  auto partial = [&](bool wanted) {
    if (!wanted) return at::Tensor();
    at::Tensor p = new_empty({slots, gr.d}, x, acc_dtype(x.scalar_type()));
    return work ? p : p.zero_();  // every slot writes its whole partial row when there is work
  };
  const at::Tensor dw_partial = partial(bool(w));
  const at::Tensor db_partial = partial(has_bias);
  if (work) {
    LaunchContext ctx(device);
    const auto targs = backward_args<Rms, Residual>(x.scalar_type(), g, gr.d, bool(w), has_bias, ghc.defined());
    const auto k = kernel_for(family(true), targs.args.data(), targs.n, device, ctx.compile_forbidden);
    const void* gp = gr.x.const_data_ptr();
    const void* xp = xc.const_data_ptr();
    const void* wp = data_or_null(w);
    void* dxp = dx.data_ptr();
    void* dwp = dw_partial.defined() ? dw_partial.data_ptr() : nullptr;
    void* dbp = db_partial.defined() ? db_partial.data_ptr() : nullptr;
    long long rows = gr.rows;
    int d = static_cast<int>(gr.d);
    const void* dhp = ghc.defined() ? ghc.const_data_ptr() : nullptr;
    void* dresp = dres.defined() ? dres.data_ptr() : nullptr;
    LaunchConfig cfg;
    cfg.grid.x = static_cast<unsigned>(blocks);
    cfg.block = g.block();
    cfg.stream = ctx.stream;
    launch_kernel(*k, cfg, gp, xp, wp, dxp, dwp, dbp, rows, d, eps, dhp, dresp);
  }
  const at::ScalarType dt = x.scalar_type();
  at::Tensor dw = w ? sum_to_dtype(dw_partial, 0, dt) : new_empty({0}, x);
  at::Tensor db = has_bias ? sum_to_dtype(db_partial, 0, dt) : new_empty({0}, x);
  return {std::move(dx), std::move(dres), std::move(dw), std::move(db)};
}

template <bool Rms>
Grads backward(const at::Tensor& grad, const at::Tensor& x, const std::optional<at::Tensor>& weight, bool has_bias,
               double eps) {
  constexpr const char* op = op_name(Rms, false, true);
  const int device = device_for(op, {{"grad", grad}, {"x", x}, {"weight", weight ? *weight : at::Tensor()}});
  check_backward(op, grad, x, weight);
  auto [dx, dres, dw, db] = backward_impl<Rms, false>(op, device, grad, std::nullopt, x, weight, has_bias, eps);
  return {std::move(dx), std::move(dw), std::move(db)};
}

// (dx, dresidual, dweight, dbias) of add_*_norm: dx = dresidual = grad_h + the norm's backward at h.
template <bool Rms>
Grads4 add_backward(const at::Tensor& grad, const std::optional<at::Tensor>& grad_h, const at::Tensor& h,
                    const std::optional<at::Tensor>& weight, bool has_bias, double eps) {
  constexpr const char* op = op_name(Rms, true, true);
  const int device = device_for(op, {{"grad", grad},
                                     {"grad_h", grad_h ? *grad_h : at::Tensor()},
                                     {"h", h},
                                     {"weight", weight ? *weight : at::Tensor()}});
  check_residual_backward(op, grad, grad_h, h, weight);
  return backward_impl<Rms, true>(op, device, grad, grad_h, h, weight, has_bias, eps);
}

Grads4 add_layer_norm_backward_cuda(const at::Tensor& grad, const std::optional<at::Tensor>& grad_h,
                                    const at::Tensor& h, const std::optional<at::Tensor>& weight, bool has_bias,
                                    double eps) {
  return add_backward<false>(grad, grad_h, h, weight, has_bias, eps);
}
Grads4 add_rms_norm_backward_cuda(const at::Tensor& grad, const std::optional<at::Tensor>& grad_h, const at::Tensor& h,
                                  const std::optional<at::Tensor>& weight, bool has_bias, double eps) {
  return add_backward<true>(grad, grad_h, h, weight, has_bias, eps);
}

Grads layer_norm_backward_cuda(const at::Tensor& grad, const at::Tensor& x, const std::optional<at::Tensor>& weight,
                               bool has_bias, double eps) {
  return backward<false>(grad, x, weight, has_bias, eps);
}
Grads rms_norm_backward_cuda(const at::Tensor& grad, const at::Tensor& x, const std::optional<at::Tensor>& weight,
                             bool has_bias, double eps) {
  return backward<true>(grad, x, weight, has_bias, eps);
}

template <bool Rms>
Grads backward_meta(const at::Tensor& grad, const at::Tensor& x, const std::optional<at::Tensor>& weight, bool has_bias,
                    double) {
  check_backward(op_name(Rms, false, true), grad, x, weight);
  const c10::SymInt d = x.sym_size(-1);
  const c10::SymInt zero(0);
  return {at::empty_symint(x.sym_sizes(), x.options().memory_format(c10::MemoryFormat::Contiguous)),
          at::empty_symint({weight ? d : zero}, x.options()), at::empty_symint({has_bias ? d : zero}, x.options())};
}

Grads4 add_backward_meta(const char* op, const at::Tensor& grad, const std::optional<at::Tensor>& grad_h,
                         const at::Tensor& h, const std::optional<at::Tensor>& weight, bool has_bias) {
  check_residual_backward(op, grad, grad_h, h, weight);
  const c10::SymInt d = h.sym_size(-1);
  const c10::SymInt zero(0);
  const auto options = h.options().memory_format(c10::MemoryFormat::Contiguous);
  return {at::empty_symint(h.sym_sizes(), options), at::empty_symint(h.sym_sizes(), options),
          at::empty_symint({weight ? d : zero}, h.options()), at::empty_symint({has_bias ? d : zero}, h.options())};
}
Grads4 add_layer_norm_backward_meta(const at::Tensor& grad, const std::optional<at::Tensor>& grad_h,
                                    const at::Tensor& h, const std::optional<at::Tensor>& weight, bool has_bias,
                                    double) {
  return add_backward_meta("kjit.ops.add_layer_norm_backward", grad, grad_h, h, weight, has_bias);
}
Grads4 add_rms_norm_backward_meta(const at::Tensor& grad, const std::optional<at::Tensor>& grad_h, const at::Tensor& h,
                                  const std::optional<at::Tensor>& weight, bool has_bias, double) {
  return add_backward_meta("kjit.ops.add_rms_norm_backward", grad, grad_h, h, weight, has_bias);
}

// The backward's kernels of a forward of x that wants gradients, compiled ahead when the forward's kernel
// must compile (CompileAheadOnMiss; the forward's checks have passed). x stands for the gradient, x and
// dx of the backward (same shape and dtype; the gradient and dx are most often fresh, aligned tensors);
// Residual: also for h, dh and dresidual (the residual norms' backward, predicted with dh given: h is
// most often used further on, as the next residual).
template <bool Rms, bool Residual = false>
void prepare_backward_ahead(const at::Tensor& x, const std::optional<at::Tensor>& weight, bool has_bias) {
  constexpr const char* op = op_name(Rms, Residual, true);
  const std::int64_t d = x.size(-1), rows = d ? x.numel() / d : 0;
  if (!rows || !d) return;
  // Only the weight's alignment matters here (the backward reads weight.contiguous()).
  const RowGeometry g = weight ? geometry(op, d, {&x, &x, &x, &*weight}, Rms) : geometry(op, d, {&x, &x, &x}, Rms);
  const int device = x.get_device();
  const auto args = backward_args<Rms, Residual>(x.scalar_type(), g, d, bool(weight), has_bias, true);
  family(true).prepare_ahead(args.args.data(), args.n, device);
  if (weight || has_bias)  // then the partial sums of dweight / dbias are added up
    prepare_sum_rows_ahead(backward_blocks(g, rows, device) * g.rows_per_block, d, acc_dtype(x.scalar_type()),
                           x.scalar_type(), device);
}

struct LayerNormFunction : public torch::autograd::Function<LayerNormFunction> {
  static constexpr const char* kName = "layer_norm";
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x,
                            const std::optional<at::Tensor>& weight, const std::optional<at::Tensor>& bias,
                            double eps) {
    ctx->saved_data["has_w"] = weight.has_value();
    ctx->saved_data["has_b"] = bias.has_value();
    ctx->saved_data["eps"] = eps;
    ctx->save_for_backward({x, weight ? *weight : at::Tensor()});
    const auto predict = [&] { prepare_backward_ahead<false>(x, weight, bias.has_value()); };
    const CompileAheadOnMiss ahead(x, predict);
    return call_below_autograd<&layer_norm_cuda>(kName, x, weight, bias, eps);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const bool has_w = ctx->saved_data["has_w"].toBool(), has_b = ctx->saved_data["has_b"].toBool();
    const std::optional<at::Tensor> w = has_w ? std::optional<at::Tensor>(saved[1]) : std::nullopt;
    auto [dx, dw, db] = OpHandle<&layer_norm_backward_cuda>::get("layer_norm_backward")
                            .call(grads[0], saved[0], w, has_b, ctx->saved_data["eps"].toDouble());
    return {dx, has_w ? dw : at::Tensor(), has_b ? db : at::Tensor(), at::Tensor()};
  }
};

struct RmsNormFunction : public torch::autograd::Function<RmsNormFunction> {
  static constexpr const char* kName = "rms_norm";
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x,
                            const std::optional<at::Tensor>& weight, double eps) {
    ctx->saved_data["has_w"] = weight.has_value();
    ctx->saved_data["eps"] = eps;
    ctx->save_for_backward({x, weight ? *weight : at::Tensor()});
    const auto predict = [&] { prepare_backward_ahead<true>(x, weight, false); };
    const CompileAheadOnMiss ahead(x, predict);
    return call_below_autograd<&rms_norm_cuda>(kName, x, weight, eps);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const bool has_w = ctx->saved_data["has_w"].toBool();
    const std::optional<at::Tensor> w = has_w ? std::optional<at::Tensor>(saved[1]) : std::nullopt;
    auto [dx, dw, db] = OpHandle<&rms_norm_backward_cuda>::get("rms_norm_backward")
                            .call(grads[0], saved[0], w, false, ctx->saved_data["eps"].toDouble());
    return {dx, has_w ? dw : at::Tensor(), at::Tensor()};
  }
};

// The residual norms' backward from the gradients of y and h (either may be undefined: materialize_grads
// is off, so that a None gradient of h costs nothing and the kernel adds no dh).
template <auto Backward>
torch::autograd::variable_list add_norm_backward(const char* name, torch::autograd::AutogradContext* ctx,
                                                 const torch::autograd::variable_list& grads, bool layer_norm) {
  const auto saved = ctx->get_saved_variables();
  const bool has_w = ctx->saved_data["has_w"].toBool();
  const bool has_b = layer_norm && ctx->saved_data["has_b"].toBool();
  const at::Tensor& dy = grads[0];
  const at::Tensor& dh = grads[1];
  // One gradient per forward input: x, residual, weight, (layer_norm: bias,) eps.
  const std::size_t n = layer_norm ? 5 : 4;
  torch::autograd::variable_list out(n);
  if (!dy.defined()) {  // y has no gradient: dx = dresidual = dh, two tensors
    if (dh.defined()) {
      out[0] = dh.clone(at::MemoryFormat::Contiguous);
      out[1] = dh.clone(at::MemoryFormat::Contiguous);
    }
    return out;
  }
  const std::optional<at::Tensor> w = has_w ? std::optional<at::Tensor>(saved[1]) : std::nullopt;
  const std::optional<at::Tensor> gh = dh.defined() ? std::optional<at::Tensor>(dh) : std::nullopt;
  auto [dx, dres, dw, db] =
      OpHandle<Backward>::get(name).call(dy, gh, saved[0], w, has_b, ctx->saved_data["eps"].toDouble());
  out[0] = dx;
  out[1] = dres;
  if (has_w) out[2] = dw;
  if (has_b) out[3] = db;
  return out;
}

struct AddLayerNormFunction : public torch::autograd::Function<AddLayerNormFunction> {
  static constexpr const char* kName = "add_layer_norm";
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x,
                                                const at::Tensor& residual, const std::optional<at::Tensor>& weight,
                                                const std::optional<at::Tensor>& bias, double eps) {
    ctx->saved_data["has_w"] = weight.has_value();
    ctx->saved_data["has_b"] = bias.has_value();
    ctx->saved_data["eps"] = eps;
    ctx->set_materialize_grads(false);
    const auto predict = [&] { prepare_backward_ahead<false, true>(x, weight, bias.has_value()); };
    const CompileAheadOnMiss ahead(x, predict);
    auto [y, h] = call_below_autograd<&add_layer_norm_cuda>(kName, x, residual, weight, bias, eps);
    ctx->save_for_backward({h, weight ? *weight : at::Tensor()});  // h, an output: saved as one
    return {y, h};
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    return add_norm_backward<&add_layer_norm_backward_cuda>("add_layer_norm_backward", ctx, grads, true);
  }
};

struct AddRmsNormFunction : public torch::autograd::Function<AddRmsNormFunction> {
  static constexpr const char* kName = "add_rms_norm";
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x,
                                                const at::Tensor& residual, const std::optional<at::Tensor>& weight,
                                                double eps) {
    ctx->saved_data["has_w"] = weight.has_value();
    ctx->saved_data["eps"] = eps;
    ctx->set_materialize_grads(false);
    const auto predict = [&] { prepare_backward_ahead<true, true>(x, weight, false); };
    const CompileAheadOnMiss ahead(x, predict);
    auto [y, h] = call_below_autograd<&add_rms_norm_cuda>(kName, x, residual, weight, eps);
    ctx->save_for_backward({h, weight ? *weight : at::Tensor()});  // h, an output: saved as one
    return {y, h};
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    return add_norm_backward<&add_rms_norm_backward_cuda>("add_rms_norm_backward", ctx, grads, false);
  }
};

}  // namespace

KJIT_OP(layer_norm, "layer_norm(Tensor x, Tensor? weight=None, Tensor? bias=None, float eps=1e-05) -> Tensor",
        layer_norm_cuda, layer_norm_meta);
KJIT_OP(rms_norm, "rms_norm(Tensor x, Tensor? weight=None, float eps=1e-06) -> Tensor", rms_norm_cuda, rms_norm_meta);
KJIT_OP(layer_norm_backward,
        "layer_norm_backward(Tensor grad, Tensor x, Tensor? weight, bool has_bias, float eps) -> (Tensor, Tensor, "
        "Tensor)",
        layer_norm_backward_cuda, backward_meta<false>);
KJIT_OP(rms_norm_backward,
        "rms_norm_backward(Tensor grad, Tensor x, Tensor? weight, bool has_bias, float eps) -> (Tensor, Tensor, "
        "Tensor)",
        rms_norm_backward_cuda, backward_meta<true>);
KJIT_OP_AUTOGRAD(layer_norm, (autograd_kernel<LayerNormFunction, &layer_norm_cuda>))
KJIT_OP_AUTOGRAD(rms_norm, (autograd_kernel<RmsNormFunction, &rms_norm_cuda>))

KJIT_OP(add_layer_norm,
        "add_layer_norm(Tensor x, Tensor residual, Tensor? weight=None, Tensor? bias=None, float eps=1e-05) -> "
        "(Tensor, Tensor)",
        add_layer_norm_cuda, add_layer_norm_meta);
KJIT_OP(add_rms_norm,
        "add_rms_norm(Tensor x, Tensor residual, Tensor? weight=None, float eps=1e-06) -> (Tensor, Tensor)",
        add_rms_norm_cuda, add_rms_norm_meta);
KJIT_OP(add_layer_norm_backward,
        "add_layer_norm_backward(Tensor grad, Tensor? grad_h, Tensor h, Tensor? weight, bool has_bias, float eps) -> "
        "(Tensor, Tensor, Tensor, Tensor)",
        add_layer_norm_backward_cuda, add_layer_norm_backward_meta);
KJIT_OP(add_rms_norm_backward,
        "add_rms_norm_backward(Tensor grad, Tensor? grad_h, Tensor h, Tensor? weight, bool has_bias, float eps) -> "
        "(Tensor, Tensor, Tensor, Tensor)",
        add_rms_norm_backward_cuda, add_rms_norm_backward_meta);
KJIT_OP_AUTOGRAD(add_layer_norm, (autograd_kernel<AddLayerNormFunction, &add_layer_norm_cuda>))
KJIT_OP_AUTOGRAD(add_rms_norm, (autograd_kernel<AddRmsNormFunction, &add_rms_norm_cuda>))

}  // namespace kjit::ops
