// kjit::linear_scan(a, b, h0): the linear recurrence h[t] = a[t] * h[t-1] + b[t] over the last dim
// (h[-1] = h0, or 0), run in parallel over time (kernel_templates/scan.cuh), with backward.
//
// a and b: one shape [..., L] and one floating dtype. h0: [...] (a's shape without its last dim), any
// floating dtype. Returns h ([..., L], a's dtype) and h_last ([...], the state after the last step) in the
// compute dtype: float32 for float32 / float16 / bfloat16 inputs, float64 for float64. The state is
// carried in that dtype and each h is rounded once: a 16-bit Python loop that rounds h at every step
// differs from it by more than one rounding over long sequences.
//
// The backward saves h (no recompute): g[t] = dh[t] + a[t+1] g[t+1] from the end (g[L-1] = dh[L-1] +
// dh_last), db = g, da[t] = g[t] h[t-1], dh0 = a[0] g[0]. For 16-bit inputs da uses the rounded h.
#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>

#include <algorithm>
#include <tuple>

#include "ops/runtime/op.hpp"
#include "ops/runtime/rows.hpp"

namespace kjit::ops {
namespace {

constexpr unsigned kBlock = 256;  // 8 warps: one row each
constexpr const char* kForward = "kjit.ops.linear_scan";
constexpr const char* kBackward = "kjit.ops.linear_scan_backward";

const KernelFamily& family(bool backward) {
  static const std::shared_ptr<const Template> t = builtin_template("scan");
  static const KernelFamily fwd(Engine::global(), t, "linear_scan_forward", CompileOptions::library());
  static const KernelFamily bwd(Engine::global(), t, "linear_scan_backward", CompileOptions::library());
  return backward ? bwd : fwd;
}

// Vector width (from L and the rows' alignment) and vectors per lane per chunk: up to 8 elements.
struct Geometry {
  int vec;
  int items;
};
Geometry geometry(std::int64_t L, std::initializer_list<const at::Tensor*> tensors) {
  const int vec = vector_width(L, tensors);
  return {vec, std::min(4, std::max(1, 8 / vec))};
}

Dim3 grid(std::int64_t rows) {
  Dim3 g;
  g.x = static_cast<unsigned>(std::clamp<std::int64_t>(cdiv(rows, kBlock / 32), 1, 1 << 30));
  return g;
}

std::shared_ptr<const SpecializedKernel> scan_kernel(bool backward, at::ScalarType dtype, const Geometry& g, int device,
                                                     const char* compile_forbidden) {
  const TemplateArg targs[] = {type_arg(dtype), int_arg(g.vec), int_arg(g.items)};
  return kernel_for(family(backward), targs, device, compile_forbidden);
}

// The state's shape: a's without its last dim.
template <class Sizes>
auto state_shape(const Sizes& sizes) {
  using Int = std::decay_t<decltype(sizes[0])>;
  return std::vector<Int>(sizes.begin(), sizes.end() - 1);
}

// a and b, and h0 when given (the checks of the CUDA and Meta functions).
void check_inputs(const char* op, const at::Tensor& a, const char* b_name, const at::Tensor& b,
                  const std::optional<at::Tensor>& h0) {
  check_dtype(op, "a", a, kFloatingTypes);
  if (a.dim() == 0) fail_value(op, "a must have at least one dim (the time axis, last), got a 0-dim tensor");
  check_like(op, b_name, b, "a", a, a.sym_sizes());
  if (h0) {
    check_dtype(op, "h0", *h0, kFloatingTypes);
    const auto want = state_shape(a.sym_sizes());
    if (h0->sym_sizes() != c10::SymIntArrayRef(want))
      fail_value(op, "h0 has shape " + shape_str(h0->sym_sizes()) + " but must have shape " + shape_str(want) +
                         " (a's shape without its last, time dim)");
  }
}

// h0 as the kernel reads it: contiguous, in the compute dtype.
at::Tensor state_in(const std::optional<at::Tensor>& h0, at::ScalarType dtype) {
  return h0 ? h0->to(acc_dtype(dtype)).contiguous() : at::Tensor();
}

using Pair = std::tuple<at::Tensor, at::Tensor>;
using Triple = std::tuple<at::Tensor, at::Tensor, at::Tensor>;

Pair linear_scan_cuda(const at::Tensor& a, const at::Tensor& b, const std::optional<at::Tensor>& h0) {
  const int device = device_for(kForward, {{"a", a}, {"b", b}, {"h0", h0 ? *h0 : at::Tensor()}});
  check_inputs(kForward, a, "b", b, h0);
  const at::ScalarType dt = a.scalar_type();
  const Rows ra = as_rows(a), rb = as_rows(b);
  const at::Tensor s0 = state_in(h0, dt);
  at::Tensor h = new_empty(a.sizes(), a);
  at::Tensor last = new_empty(state_shape(a.sizes()), a, acc_dtype(dt));
  if (ra.d == 0) {  // no steps: the state is h0
    if (h0)
      last.copy_(s0);
    else
      last.zero_();
    return {std::move(h), std::move(last)};
  }
  if (ra.rows == 0) return {std::move(h), std::move(last)};
  const Geometry g = geometry(ra.d, {&ra.x, &rb.x, &h});
  LaunchContext ctx(device);
  const auto k = scan_kernel(false, dt, g, device, ctx.compile_forbidden);
  const void* ap = ra.x.const_data_ptr();
  const void* bp = rb.x.const_data_ptr();
  const void* h0p = s0.defined() ? s0.const_data_ptr() : nullptr;
  void* hp = h.data_ptr();
  void* lp = last.data_ptr();
  long long rows = ra.rows, L = ra.d;
  LaunchConfig cfg;
  cfg.grid = grid(ra.rows);
  cfg.block.x = kBlock;
  cfg.stream = ctx.stream;
  launch_kernel(*k, cfg, ap, bp, h0p, hp, lp, rows, L);
  return {std::move(h), std::move(last)};
}

Pair linear_scan_meta(const at::Tensor& a, const at::Tensor& b, const std::optional<at::Tensor>& h0) {
  check_inputs(kForward, a, "b", b, h0);
  const auto options = a.options().memory_format(c10::MemoryFormat::Contiguous);
  return {at::empty_symint(a.sym_sizes(), options),
          at::empty_symint(state_shape(a.sym_sizes()), options.dtype(acc_dtype(a.scalar_type())))};
}

void check_backward(const at::Tensor& a, const at::Tensor& h, const std::optional<at::Tensor>& grad_h,
                    const std::optional<at::Tensor>& grad_last, const std::optional<at::Tensor>& h0) {
  check_inputs(kBackward, a, "h", h, h0);
  if (grad_h) check_like(kBackward, "grad_h", *grad_h, "a", a, a.sym_sizes());
  if (grad_last) {
    check_dtype(kBackward, "grad_last", *grad_last, kFloatingTypes);
    const auto want = state_shape(a.sym_sizes());
    if (grad_last->sym_sizes() != c10::SymIntArrayRef(want))
      fail_value(kBackward, "grad_last has shape " + shape_str(grad_last->sym_sizes()) + " but must have shape " +
                                shape_str(want));
  }
}

// (da, db, dh0): dh0 has h0's shape and dtype, or is an empty tensor [0] when there is no h0.
Triple linear_scan_backward_cuda(const at::Tensor& a, const at::Tensor& h, const std::optional<at::Tensor>& grad_h,
                                 const std::optional<at::Tensor>& grad_last, const std::optional<at::Tensor>& h0) {
  const int device = device_for(kBackward, {{"a", a},
                                            {"h", h},
                                            {"grad_h", grad_h ? *grad_h : at::Tensor()},
                                            {"grad_last", grad_last ? *grad_last : at::Tensor()},
                                            {"h0", h0 ? *h0 : at::Tensor()}});
  check_backward(a, h, grad_h, grad_last, h0);
  const at::ScalarType dt = a.scalar_type();
  const Rows ra = as_rows(a), rh = as_rows(h);
  const at::Tensor gh = grad_h ? grad_h->contiguous() : at::Tensor();
  const at::Tensor gl = grad_last ? grad_last->to(acc_dtype(dt)).contiguous() : at::Tensor();
  const at::Tensor s0 = state_in(h0, dt);
  at::Tensor da = new_empty(a.sizes(), a);
  at::Tensor db = new_empty(a.sizes(), a);
  at::Tensor dh0 = h0 ? new_empty(state_shape(a.sizes()), a, acc_dtype(dt)) : new_empty({0}, a);
  if (ra.d == 0) {  // no steps: h_last = h0
    if (h0) {
      if (gl.defined())
        dh0.copy_(gl);
      else
        dh0.zero_();
    }
  } else {
    const Geometry g =
        gh.defined() ? geometry(ra.d, {&ra.x, &rh.x, &gh, &da, &db}) : geometry(ra.d, {&ra.x, &rh.x, &da, &db});
    LaunchContext ctx(device);
    const auto k = scan_kernel(true, dt, g, device, ctx.compile_forbidden);
    const void* ghp = gh.defined() ? gh.const_data_ptr() : nullptr;
    const void* glp = gl.defined() ? gl.const_data_ptr() : nullptr;
    const void* ap = ra.x.const_data_ptr();
    const void* hp = rh.x.const_data_ptr();
    const void* h0p = s0.defined() ? s0.const_data_ptr() : nullptr;
    void* dap = da.data_ptr();
    void* dbp = db.data_ptr();
    void* dh0p = h0 ? dh0.data_ptr() : nullptr;
    long long rows = ra.rows, L = ra.d;
    LaunchConfig cfg;
    cfg.grid = grid(ra.rows);
    cfg.block.x = kBlock;
    cfg.stream = ctx.stream;
    launch_kernel(*k, cfg, ghp, glp, ap, hp, h0p, dap, dbp, dh0p, rows, L);
  }
  if (h0 && h0->scalar_type() != dh0.scalar_type()) dh0 = dh0.to(h0->scalar_type());
  return {std::move(da), std::move(db), std::move(dh0)};
}

Triple linear_scan_backward_meta(const at::Tensor& a, const at::Tensor& h, const std::optional<at::Tensor>& grad_h,
                                 const std::optional<at::Tensor>& grad_last, const std::optional<at::Tensor>& h0) {
  check_backward(a, h, grad_h, grad_last, h0);
  const auto options = a.options().memory_format(c10::MemoryFormat::Contiguous);
  const c10::SymInt zero(0);
  return {at::empty_symint(a.sym_sizes(), options), at::empty_symint(a.sym_sizes(), options),
          h0 ? at::empty_symint(h0->sym_sizes(), options.dtype(h0->scalar_type()))
             : at::empty_symint(c10::SymIntArrayRef(&zero, 1), options)};
}

// The backward's kernel, compiled ahead at the forward's first compile (CompileAheadOnMiss): a stands
// for the gradient, h, da and db (fresh tensors of its shape, most often aligned alike).
void prepare_backward_ahead(const at::Tensor& a) {
  const std::int64_t L = a.dim() ? a.size(-1) : 0;
  if (!L || !a.numel()) return;
  const Geometry g = geometry(L, {&a});
  const TemplateArg targs[] = {type_arg(a.scalar_type()), int_arg(g.vec), int_arg(g.items)};
  family(true).prepare_ahead(targs, 3, a.get_device());
}

struct LinearScanFunction : public torch::autograd::Function<LinearScanFunction> {
  static constexpr const char* kName = "linear_scan";
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx, const at::Tensor& a,
                                                const at::Tensor& b, const std::optional<at::Tensor>& h0) {
    ctx->set_materialize_grads(false);
    const auto predict = [&] { prepare_backward_ahead(a); };
    const CompileAheadOnMiss ahead(a, predict);
    auto [h, last] = call_below_autograd<&linear_scan_cuda>(kName, a, b, h0);
    ctx->saved_data["has_h0"] = h0.has_value();
    ctx->save_for_backward({a, h, h0 ? *h0 : at::Tensor()});  // h, an output: saved as one
    return {h, last};
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const bool has_h0 = ctx->saved_data["has_h0"].toBool();
    const at::Tensor& dh = grads[0];
    const at::Tensor& dlast = grads[1];
    if (!dh.defined() && !dlast.defined()) return {at::Tensor(), at::Tensor(), at::Tensor()};
    const auto opt = [](const at::Tensor& t) { return t.defined() ? std::optional<at::Tensor>(t) : std::nullopt; };
    auto [da, db, dh0] = OpHandle<&linear_scan_backward_cuda>::get("linear_scan_backward")
                             .call(saved[0], saved[1], opt(dh), opt(dlast), has_h0 ? opt(saved[2]) : std::nullopt);
    return {da, db, has_h0 ? dh0 : at::Tensor()};
  }
};

}  // namespace

KJIT_OP(linear_scan, "linear_scan(Tensor a, Tensor b, Tensor? h0=None) -> (Tensor, Tensor)", linear_scan_cuda,
        linear_scan_meta);
KJIT_OP(linear_scan_backward,
        "linear_scan_backward(Tensor a, Tensor h, Tensor? grad_h, Tensor? grad_last, Tensor? h0=None) -> "
        "(Tensor, Tensor, Tensor)",
        linear_scan_backward_cuda, linear_scan_backward_meta);
KJIT_OP_AUTOGRAD(linear_scan, (autograd_kernel<LinearScanFunction, &linear_scan_cuda>))

}  // namespace kjit::ops
