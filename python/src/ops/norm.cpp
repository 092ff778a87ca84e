// kjit::layer_norm(x, weight, bias, eps) and rms_norm(x, weight, eps) over the last dim, with backward
// (kernel_templates/norm.cuh).
//
// No statistics are stored for the backward: norm_backward recomputes mean and rstd from the row it holds
// in registers anyway. The backward writes dx and per-block partial sums of dweight / dbias, reduced by
// the sum reduction over dim 0. Rows live in registers (up to 128 elements per thread: rows of up to
// 131072 elements); the row length is specialized (D) up to KJIT_MAX_SPECIALIZATIONS distinct lengths
// per kernel. weight and bias have the input's dtype and shape [d]. Half types compute in float.
// The backward ops return three distinct tensors: dweight / dbias are empty tensors of their own when
// there is no weight / bias (outputs never alias each other).
#include <ATen/ops/empty.h>

#include <array>
#include <tuple>

#include "op.hpp"
#include "reduce.hpp"
#include "rows.hpp"

namespace kjit::ops {
namespace {

constexpr int kMaxPerThread = 128;

const KernelFamily& family(bool backward) {
  static const std::shared_ptr<const Template> t = builtin_template("norm");
  static const KernelFamily fwd(Engine::global(), t, "norm_forward", CompileOptions::library());
  static const KernelFamily bwd(Engine::global(), t, "norm_backward", CompileOptions::library());
  return backward ? bwd : fwd;
}

std::string op_name(const char* name) { return std::string("kjit.ops.") + name; }

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
// weight and bias have its dtype and the shape [d].
void check(const char* op, const at::Tensor& x, const std::optional<at::Tensor>& weight,
           const std::optional<at::Tensor>& bias) {
  check_dtype(op, "x", x, kFloatingTypes);
  if (x.dim() == 0)
    fail_value(op, "x must have at least one dim (the normalized last dim), got a 0-dim tensor");
  const c10::SymInt d = x.sym_size(-1);
  if (weight) check_like(op, "weight", *weight, "x", x, c10::SymIntArrayRef(&d, 1));
  if (bias) check_like(op, "bias", *bias, "x", x, c10::SymIntArrayRef(&d, 1));
}

const void* data_or_null(const std::optional<at::Tensor>& t) { return t ? t->const_data_ptr() : nullptr; }

template <bool Rms>
at::Tensor forward(const at::Tensor& x, const std::optional<at::Tensor>& weight,
                   const std::optional<at::Tensor>& bias, double eps) {
  const std::string op = op_name(Rms ? "rms_norm" : "layer_norm");
  const int device = device_for(op.c_str(), {{"x", x},
                                             {"weight", weight ? *weight : at::Tensor()},
                                             {"bias", bias ? *bias : at::Tensor()}});
  check(op.c_str(), x, weight, bias);
  const Rows r = as_rows(x);
  at::Tensor y = new_empty(x.sizes(), x);
  if (y.numel() == 0) return y;
  const std::optional<at::Tensor> w = weight ? std::optional<at::Tensor>(weight->contiguous()) : std::nullopt;
  const std::optional<at::Tensor> b = bias ? std::optional<at::Tensor>(bias->contiguous()) : std::nullopt;
  const RowGeometry g = w && b   ? geometry(op.c_str(), r.d, {&r.x, &y, &*w, &*b}, Rms)
                        : w      ? geometry(op.c_str(), r.d, {&r.x, &y, &*w}, Rms)
                        : b      ? geometry(op.c_str(), r.d, {&r.x, &y, &*b}, Rms)
                                 : geometry(op.c_str(), r.d, {&r.x, &y}, Rms);
  const std::int64_t D = specialized_d("norm_forward", r.d);
  LaunchContext ctx(device);
  const TemplateArg targs[] = {type_arg(x.scalar_type()), int_arg(g.tpr),     int_arg(g.rows_per_block),
                               int_arg(g.vec),            int_arg(g.items),   int_arg(D),
                               bool_arg(Rms),             bool_arg(bool(w)),  bool_arg(bool(b))};
  const auto k = kernel_for(family(false), targs, device, ctx.compile_forbidden);
  const void* xp = r.x.const_data_ptr();
  const void* wp = data_or_null(w);
  const void* bp = data_or_null(b);
  void* yp = y.data_ptr();
  long long rows = r.rows;
  int d = static_cast<int>(r.d);
  void* args[] = {&xp, &wp, &bp, &yp, &rows, &d, &eps};
  LaunchConfig cfg;
  cfg.grid = g.grid_for(r.rows);
  cfg.block = g.block();
  cfg.stream = ctx.stream;
  k->kernel->launch(cfg, args);
  return y;
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

using Grads = std::tuple<at::Tensor, at::Tensor, at::Tensor>;

void check_backward(const char* op, const at::Tensor& grad, const at::Tensor& x,
                    const std::optional<at::Tensor>& weight) {
  check(op, x, weight, std::nullopt);
  check_like(op, "grad", grad, "x", x, x.sym_sizes());
}

// The backward kernel's template arguments: one list for backward() and for the compile ahead at the
// forward.
template <bool Rms>
std::array<TemplateArg, 9> backward_args(at::ScalarType dtype, const RowGeometry& g, std::int64_t d, bool has_w,
                                         bool has_bias) {
  const std::int64_t D = specialized_d("norm_backward", d);
  return {type_arg(dtype), int_arg(g.tpr), int_arg(g.rows_per_block), int_arg(g.vec), int_arg(g.items),
          int_arg(D),      bool_arg(Rms),  bool_arg(has_w),            bool_arg(has_bias)};
}

// Blocks of the backward kernel: each writes the partial sums of dweight / dbias of its rows (a slot
// per row of the block), which sum_to_dtype adds up.
std::int64_t backward_blocks(const RowGeometry& g, std::int64_t rows, int device) {
  return std::min<std::int64_t>(g.grid_for(rows).x, 2 * sm_count(device));
}

template <bool Rms>
Grads backward(const at::Tensor& grad, const at::Tensor& x, const std::optional<at::Tensor>& weight, bool has_bias,
               double eps) {
  const std::string op = op_name(Rms ? "rms_norm_backward" : "layer_norm_backward");
  const int device =
      device_for(op.c_str(), {{"grad", grad}, {"x", x}, {"weight", weight ? *weight : at::Tensor()}});
  check_backward(op.c_str(), grad, x, weight);
  const Rows gr = as_rows(grad);
  const at::Tensor xc = x.contiguous();
  const std::optional<at::Tensor> w = weight ? std::optional<at::Tensor>(weight->contiguous()) : std::nullopt;
  at::Tensor dx = new_empty(x.sizes(), x);
  const RowGeometry g = w ? geometry(op.c_str(), gr.d, {&gr.x, &xc, &dx, &*w}, Rms)
                          : geometry(op.c_str(), gr.d, {&gr.x, &xc, &dx}, Rms);
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
    const auto targs = backward_args<Rms>(x.scalar_type(), g, gr.d, bool(w), has_bias);
    const auto k = kernel_for(family(true), targs.data(), targs.size(), device, ctx.compile_forbidden);
    const void* gp = gr.x.const_data_ptr();
    const void* xp = xc.const_data_ptr();
    const void* wp = data_or_null(w);
    void* dxp = dx.data_ptr();
    void* dwp = dw_partial.defined() ? dw_partial.data_ptr() : nullptr;
    void* dbp = db_partial.defined() ? db_partial.data_ptr() : nullptr;
    long long rows = gr.rows;
    int d = static_cast<int>(gr.d);
    void* args[] = {&gp, &xp, &wp, &dxp, &dwp, &dbp, &rows, &d, &eps};
    LaunchConfig cfg;
    cfg.grid.x = static_cast<unsigned>(blocks);
    cfg.block = g.block();
    cfg.stream = ctx.stream;
    k->kernel->launch(cfg, args);
  }
  const at::ScalarType dt = x.scalar_type();
  at::Tensor dw = w ? sum_to_dtype(dw_partial, 0, dt) : new_empty({0}, x);
  at::Tensor db = has_bias ? sum_to_dtype(db_partial, 0, dt) : new_empty({0}, x);
  return {std::move(dx), std::move(dw), std::move(db)};
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
Grads backward_meta(const at::Tensor& grad, const at::Tensor& x, const std::optional<at::Tensor>& weight,
                    bool has_bias, double) {
  check_backward(op_name(Rms ? "rms_norm_backward" : "layer_norm_backward").c_str(), grad, x, weight);
  const c10::SymInt d = x.sym_size(-1);
  const c10::SymInt zero(0);
  return {at::empty_symint(x.sym_sizes(), x.options().memory_format(c10::MemoryFormat::Contiguous)),
          at::empty_symint({weight ? d : zero}, x.options()), at::empty_symint({has_bias ? d : zero}, x.options())};
}

// The backward's kernels of a forward of x that wants gradients, compiled ahead when the forward's kernel
// must compile (CompileAheadOnMiss; the forward's checks have passed). x stands for the gradient, x and
// dx of the backward (same shape and dtype; the gradient and dx are most often fresh, aligned tensors).
template <bool Rms>
void prepare_backward_ahead(const at::Tensor& x, const std::optional<at::Tensor>& weight, bool has_bias) {
  const std::string op = op_name(Rms ? "rms_norm_backward" : "layer_norm_backward");
  const std::int64_t d = x.size(-1), rows = d ? x.numel() / d : 0;
  if (!rows || !d) return;
  // Only the weight's alignment matters here (the backward reads weight.contiguous()).
  const RowGeometry g = weight ? geometry(op.c_str(), d, {&x, &x, &x, &*weight}, Rms)
                               : geometry(op.c_str(), d, {&x, &x, &x}, Rms);
  const int device = x.get_device();
  const auto args = backward_args<Rms>(x.scalar_type(), g, d, bool(weight), has_bias);
  family(true).prepare_ahead(args.data(), args.size(), device);
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

}  // namespace

KJIT_OP(layer_norm, "layer_norm(Tensor x, Tensor? weight=None, Tensor? bias=None, float eps=1e-05) -> Tensor",
        layer_norm_cuda, layer_norm_meta);
KJIT_OP(rms_norm, "rms_norm(Tensor x, Tensor? weight=None, float eps=1e-06) -> Tensor", rms_norm_cuda,
        rms_norm_meta);
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

}  // namespace kjit::ops
