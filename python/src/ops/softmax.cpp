// kjit::softmax / log_softmax(Tensor x, int dim=-1) over the last dim, and their backward
// (kernel_templates/softmax.cuh). Rows up to 32 elements per thread live in registers (read once,
// written once), longer rows are streamed; on sm_90 and newer, rows too long for one block's registers
// (up to 8 x 512 x 32 elements) are split over a thread-block cluster instead
// (kernel_templates/softmax_split.cuh: read once, 16 bytes at a time whatever their alignment). The row length is
// specialized (D) up to KJIT_MAX_SPECIALIZATIONS distinct lengths per kernel, then the generic variant takes it at run
// time. Half types compute in float. Inputs of any layout are made contiguous first. Gradient: the backward op from the
// saved output.
#include <ATen/ops/empty.h>

#include <array>
#include <climits>

#include "ops/runtime/op.hpp"
#include "ops/runtime/rows.hpp"

namespace kjit::ops {
namespace {

constexpr int kMaxPerThread = 32;

const KernelFamily& family(bool backward) {
  static const std::shared_ptr<const Template> t = builtin_template("softmax");
  static const KernelFamily fwd(Engine::global(), t, "softmax_forward", CompileOptions::library());
  static const KernelFamily bwd(Engine::global(), t, "softmax_backward", CompileOptions::library());
  return backward ? bwd : fwd;
}

// The name of an op of this file in messages ("kjit.ops.log_softmax_backward"): a literal, no allocation
// per call.
constexpr const char* op_name(bool log, bool backward) {
  constexpr const char* kNames[2][2] = {{"kjit.ops.softmax", "kjit.ops.softmax_backward"},
                                        {"kjit.ops.log_softmax", "kjit.ops.log_softmax_backward"}};
  return kNames[log][backward];
}

const KernelFamily& split_family() {
  static const KernelFamily f(Engine::global(), builtin_template("softmax_split"), "softmax_split_forward",
                              CompileOptions::library());
  return f;
}

// The forward of rows too long for one block's registers, split over a cluster (sm_90 and newer; the
// caller checked has_clusters). False when the row does not fit the split either, or the device refused
// the cluster launch (launch_split): the one-block kernel runs then.
template <bool Log>
bool forward_split(int device, const Rows& r, const at::Tensor& y) {
  const SplitGeometry g = split_geometry(r.d, r.x, y, kMaxPerThread);
  if (!g.cl) return false;
  LaunchContext ctx(device);
  const TemplateArg targs[] = {type_arg(y.scalar_type()), int_arg(g.tpr), int_arg(g.cl), int_arg(g.vec),
                               int_arg(g.items),          bool_arg(Log)};
  const auto k = kernel_for(split_family(), targs, device, ctx.compile_forbidden);
  const void* xp = r.x.const_data_ptr();
  void* yp = y.data_ptr();
  long long rows = r.rows;
  int d = static_cast<int>(r.d);
  int chunk = g.chunk;
  LaunchConfig cfg;
  cfg.grid = g.grid_for(r.rows);
  cfg.block = g.block();
  cfg.stream = ctx.stream;
  return launch_split(op_name(Log, false), device, *k, cfg, xp, yp, rows, d, chunk);
}

template <class Sizes>
void check_row(const char* op, const Sizes& sizes) {
  if (!sizes.empty() && sizes[sizes.size() - 1] > INT_MAX)  // the kernels take the row length as an int
    fail_value(op, "rows of " + c10::str(sizes[sizes.size() - 1]) +
                       " elements are too long (at most 2^31 - 1 elements in the last dim); use torch.softmax for "
                       "such rows");
}

template <class Sizes>
void check_dim(const char* op, const Sizes& sizes, std::int64_t dim) {
  const std::int64_t ndim = static_cast<std::int64_t>(sizes.size());
  const std::int64_t d = normalize_dim(op, dim, ndim);
  if (ndim && d != ndim - 1)
    fail_value(op, "only the last dim is supported, got dim=" + std::to_string(dim) + " for a tensor of " +
                       std::to_string(ndim) + " dims; move it last with x.movedim(" + std::to_string(dim) +
                       ", -1) (and back on the result)");
  check_row(op, sizes);
}

template <bool Log>
at::Tensor forward_cuda(const at::Tensor& x, std::int64_t dim) {
  constexpr const char* op = op_name(Log, false);
  const int device = device_for(op, {{"x", x}});
  check_dtype(op, "x", x, kFloatingTypes);
  check_dim(op, x.sizes(), dim);
  const Rows r = as_rows(x);
  at::Tensor y = new_empty(x.sizes(), x);
  if (y.numel() == 0) return y;
  const RowGeometry g = row_geometry(r.d, {&r.x, &y}, kMaxPerThread, r.x.element_size() >= 4 ? 2 : 4);
  if (g.items == 0 && has_clusters(device) && forward_split<Log>(device, r, y)) return y;
  const std::int64_t D = g.items ? specialized_d("softmax_forward", r.d) : 0;
  LaunchContext ctx(device);
  const TemplateArg targs[] = {type_arg(x.scalar_type()),
                               int_arg(g.tpr),
                               int_arg(g.rows_per_block),
                               int_arg(g.vec),
                               int_arg(g.items),
                               int_arg(D),
                               bool_arg(Log)};
  const auto k = kernel_for(family(false), targs, device, ctx.compile_forbidden);
  const void* xp = r.x.const_data_ptr();
  void* yp = y.data_ptr();
  long long rows = r.rows;
  int d = static_cast<int>(r.d);
  LaunchConfig cfg;
  cfg.grid = g.grid_for(r.rows);
  cfg.block = g.block();
  cfg.stream = ctx.stream;
  launch_kernel(*k, cfg, xp, yp, rows, d);
  return y;
}

template <bool Log>
at::Tensor forward_meta(const at::Tensor& x, std::int64_t dim) {
  constexpr const char* op = op_name(Log, false);
  check_dtype(op, "x", x, kFloatingTypes);
  check_dim(op, x.sym_sizes(), dim);
  return at::empty_symint(x.sym_sizes(), x.options().memory_format(c10::MemoryFormat::Contiguous));
}

template <bool Log>
void check_backward(const char* op, const at::Tensor& grad, const at::Tensor& y) {
  check_dtype(op, "output", y, kFloatingTypes);
  check_like(op, "grad", grad, "output", y, y.sym_sizes());
  check_row(op, y.sym_sizes());
}

// The backward kernel for rows of `d` elements of `dtype`, with the tensors whose alignment picks its
// vector width: one plan for backward_cuda and for the compile ahead at the forward.
struct BackwardPlan {
  RowGeometry g;
  std::array<TemplateArg, 7> args;
};
template <bool Log>
BackwardPlan backward_plan(at::ScalarType dtype, std::int64_t d, std::initializer_list<const at::Tensor*> tensors) {
  const RowGeometry g = row_geometry(d, tensors, kMaxPerThread / 2);
  const std::int64_t D = g.items ? specialized_d("softmax_backward", d) : 0;
  return {g,
          {type_arg(dtype), int_arg(g.tpr), int_arg(g.rows_per_block), int_arg(g.vec), int_arg(g.items), int_arg(D),
           bool_arg(Log)}};
}

template <bool Log>
at::Tensor backward_cuda(const at::Tensor& grad, const at::Tensor& output) {
  constexpr const char* op = op_name(Log, true);
  const int device = device_for(op, {{"grad", grad}, {"output", output}});
  check_backward<Log>(op, grad, output);
  const Rows gr = as_rows(grad);
  const at::Tensor y = output.contiguous();
  at::Tensor dx = new_empty(output.sizes(), output);
  if (dx.numel() == 0) return dx;
  const BackwardPlan plan = backward_plan<Log>(y.scalar_type(), gr.d, {&gr.x, &y, &dx});
  const RowGeometry& g = plan.g;
  LaunchContext ctx(device);
  const auto k = kernel_for(family(true), plan.args.data(), plan.args.size(), device, ctx.compile_forbidden);
  const void* gp = gr.x.const_data_ptr();
  const void* yp = y.const_data_ptr();
  void* dp = dx.data_ptr();
  long long rows = gr.rows;
  int d = static_cast<int>(gr.d);
  LaunchConfig cfg;
  cfg.grid = g.grid_for(gr.rows);
  cfg.block = g.block();
  cfg.stream = ctx.stream;
  launch_kernel(*k, cfg, gp, yp, dp, rows, d);
  return dx;
}

template <bool Log>
at::Tensor backward_meta(const at::Tensor& grad, const at::Tensor& output) {
  check_backward<Log>(op_name(Log, true), grad, output);
  return at::empty_symint(output.sym_sizes(), output.options().memory_format(c10::MemoryFormat::Contiguous));
}

template <bool Log>
struct SoftmaxFunction : public torch::autograd::Function<SoftmaxFunction<Log>> {
  static constexpr const char* kName = Log ? "log_softmax" : "softmax";
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x, std::int64_t dim) {
    // Gradients are wanted: when this forward's kernel must compile, the backward's compiles beside it
    // (on a background thread). Its tensors (the gradient, y, dx) are most often fresh, aligned ones of
    // x's shape and dtype: x stands for them.
    const auto predict = [&] {
      const BackwardPlan plan = backward_plan<Log>(x.scalar_type(), x.dim() ? x.size(-1) : 1, {&x, &x, &x});
      family(true).prepare_ahead(plan.args.data(), plan.args.size(), x.get_device());
    };
    const CompileAheadOnMiss ahead(x, predict);
    at::Tensor y = call_below_autograd<&forward_cuda<Log>>(kName, x, dim);
    ctx->save_for_backward({y});
    return y;
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const at::Tensor y = ctx->get_saved_variables()[0];
    return {OpHandle<&backward_cuda<Log>>::get(Log ? "log_softmax_backward" : "softmax_backward").call(grads[0], y),
            at::Tensor()};
  }
};

}  // namespace

KJIT_OP(softmax, "softmax(Tensor x, int dim=-1) -> Tensor", forward_cuda<false>, forward_meta<false>);
KJIT_OP(log_softmax, "log_softmax(Tensor x, int dim=-1) -> Tensor", forward_cuda<true>, forward_meta<true>);
KJIT_OP(softmax_backward, "softmax_backward(Tensor grad, Tensor output) -> Tensor", backward_cuda<false>,
        backward_meta<false>);
KJIT_OP(log_softmax_backward, "log_softmax_backward(Tensor grad, Tensor output) -> Tensor", backward_cuda<true>,
        backward_meta<true>);
KJIT_OP_AUTOGRAD(softmax, (autograd_kernel<SoftmaxFunction<false>, &forward_cuda<false>>))
KJIT_OP_AUTOGRAD(log_softmax, (autograd_kernel<SoftmaxFunction<true>, &forward_cuda<true>>))

}  // namespace kjit::ops
