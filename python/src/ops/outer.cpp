// kjit::outer(Tensor a, Tensor b) -> Tensor: batched outer product [B, M] x [B, N] -> [B, M, N]
// (also [M] x [N] -> [M, N]), and kjit::outer_backward(grad, a, b) -> (grad_a, grad_b).
// Kernels: kernel_templates/outer.cuh (outer, outer_backward_a, outer_backward_c), specialized on
// (dtype, VEC); the sizes are runtime arguments. Autograd: outer's backward calls outer_backward.
#include <ATen/ops/empty.h>
#include <ATen/ops/zeros_like.h>

#include <tuple>
#include <vector>

#include "ops/runtime/op.hpp"

namespace kjit::ops {
namespace {

constexpr const char* kOp = "kjit.ops.outer";
constexpr const char* kBackwardOp = "kjit.ops.outer_backward";
constexpr std::int64_t kMaxGridYZ = 65535;

// The three kernels of kernel_templates/outer.cuh, one family each over one loaded template.
const std::shared_ptr<const Template>& outer_template() {
  static const std::shared_ptr<const Template> t = Template::builtin("outer");
  return t;
}
const KernelFamily& forward_family() {
  static const KernelFamily f(Engine::global(), outer_template(), "outer", CompileOptions::library());
  return f;
}
const KernelFamily& backward_a_family() {
  static const KernelFamily f(Engine::global(), outer_template(), "outer_backward_a", CompileOptions::library());
  return f;
}
const KernelFamily& backward_c_family() {
  static const KernelFamily f(Engine::global(), outer_template(), "outer_backward_c", CompileOptions::library());
  return f;
}

std::int64_t next_pow2(std::int64_t v) {
  std::int64_t p = 1;
  while (p < v) p <<= 1;
  return p;
}

// The shape rules shared by the CUDA and Meta kernels: a [B, M] with b [B, N], or a [M] with b [N].
// `Sizes` is IntArrayRef or SymIntArrayRef; returns (B, M, N) as that element type.
template <class Sizes>
auto outer_dims(const char* op, const Sizes& a, const Sizes& b) {
  using Int = std::decay_t<decltype(a[0])>;
  if (a.size() == 1 && b.size() == 1) return std::make_tuple(Int(1), a[0], b[0]);
  if (a.size() == 2 && b.size() == 2) {
    if (a[0] == b[0]) return std::make_tuple(a[0], a[1], b[1]);
    fail_value(op, "a has shape " + shape_str(a) + " and b has shape " + shape_str(b) +
                       ": the batch sizes (first dimensions) must be equal");
  }
  fail_value(op, "a has shape " + shape_str(a) + " and b has shape " + shape_str(b) +
                     ": expected a [B, M] and b [B, N] (batched) or a [M] and b [N]");
}

// outer_dims of outer_backward, and the check that grad has outer(a, b)'s shape (CUDA and Meta kernels).
template <class Sizes>
auto outer_backward_dims(const Sizes& a, const Sizes& b, const Sizes& grad) {
  using Int = std::decay_t<decltype(a[0])>;
  const auto dims = outer_dims(kBackwardOp, a, b);
  const auto& [B, M, N] = dims;
  const bool batched = a.size() == 2;
  const std::vector<Int> expected = batched ? std::vector<Int>{B, M, N} : std::vector<Int>{M, N};
  bool same = grad.size() == expected.size();
  for (std::size_t i = 0; same && i < expected.size(); ++i) same = grad[i] == expected[i];
  if (!same)
    fail_value(kBackwardOp, "grad has shape " + shape_str(grad) + " but outer(a, b) has shape " + shape_str(expected) +
                                ": pass the gradient of outer's output");
  return dims;
}

void check_pair(const char* op, const at::Tensor& a, const at::Tensor& b) {
  check_input(op, "a", a, kFloatingTypes);
  check_input(op, "b", b, kFloatingTypes);
  check_same_dtype(op, "b", b, "a", a);
}

at::Tensor outer_cuda(const at::Tensor& a, const at::Tensor& b) {
  const int device = device_for(kOp, {{"a", a}, {"b", b}});
  check_pair(kOp, a, b);
  const auto [B, M, N] = outer_dims(kOp, a.sizes(), b.sizes());
  at::Tensor out = a.dim() == 1 ? at::empty({M, N}, a.options()) : at::empty({B, M, N}, a.options());
  if (out.numel() == 0) return out;
  LaunchContext ctx(device);
  const int vec = pick_vec(a.element_size(), {b.const_data_ptr(), out.const_data_ptr()}, N);
  const auto k = typed_kernel(forward_family(), a.scalar_type(), vec, device, ctx.compile_forbidden);

  // Threads in x over the N / VEC vectors of a row (a warp at least), y over rows; grid-stride both.
  const std::int64_t n_vec = N / vec, rows = B * M, limit = max_blocks(device);
  const std::int64_t bx = std::min<std::int64_t>(256, std::max<std::int64_t>(32, next_pow2(n_vec))), by = 256 / bx;
  const std::int64_t gx = std::min(cdiv(n_vec, bx), limit);
  const std::int64_t gy = std::min({cdiv(rows, by), kMaxGridYZ, std::max<std::int64_t>(1, limit / gx)});
  LaunchConfig cfg;
  cfg.block = {static_cast<unsigned>(bx), static_cast<unsigned>(by), 1};
  cfg.grid = {static_cast<unsigned>(gx), static_cast<unsigned>(gy), 1};
  cfg.stream = ctx.stream;

  const void* ap = a.const_data_ptr();
  const void* bp = b.const_data_ptr();
  void* op = out.data_ptr();
  long long BB = B, MM = M, NN = N;
  launch_kernel(*k, cfg, ap, bp, op, BB, MM, NN);
  return out;
}

std::tuple<at::Tensor, at::Tensor> outer_backward_cuda(const at::Tensor& grad, const at::Tensor& a,
                                                       const at::Tensor& b) {
  const int device = device_for(kBackwardOp, {{"grad", grad}, {"a", a}, {"b", b}});
  check_pair(kBackwardOp, a, b);
  check_input(kBackwardOp, "grad", grad, kFloatingTypes);
  check_same_dtype(kBackwardOp, "grad", grad, "a", a);
  const auto [B, M, N] = outer_backward_dims(a.sizes(), b.sizes(), grad.sizes());
  if (grad.numel() == 0) return {at::zeros_like(a), at::zeros_like(b)};  // sums over nothing
  at::Tensor grad_a = at::empty(a.sizes(), a.options());
  at::Tensor grad_b = at::empty(b.sizes(), b.options());
  LaunchContext ctx(device);
  const at::ScalarType dt = a.scalar_type();
  const std::int64_t limit = max_blocks(device);
  const void* gp = grad.const_data_ptr();
  const void* ap = a.const_data_ptr();
  const void* bp = b.const_data_ptr();
  long long BB = B, MM = M, NN = N;

  {  // grad_a[r] = dot(grad row r, b row): bx threads per row (a warp, or the whole block for long rows).
    const int vec = pick_vec(a.element_size(), {gp, bp}, N);
    const auto k = typed_kernel(backward_a_family(), dt, vec, device, ctx.compile_forbidden);
    const std::int64_t n_vec = N / vec, rows = B * M;
    const std::int64_t bx = n_vec >= 1024 ? 256 : 32, by = 256 / bx;
    LaunchConfig cfg;
    cfg.block = {static_cast<unsigned>(bx), static_cast<unsigned>(by), 1};
    cfg.grid.x = static_cast<unsigned>(std::min(cdiv(rows, by), limit));
    cfg.stream = ctx.stream;
    void* out = grad_a.data_ptr();
    launch_kernel(*k, cfg, gp, bp, out, BB, MM, NN);
  }
  {  // grad_b[b, j] = sum_i grad[b, i, j] * a[b, i]: x over column vectors, y splits the rows.
    void* out = grad_b.data_ptr();
    const int vec = pick_vec(a.element_size(), {gp, out}, N);
    const auto k = typed_kernel(backward_c_family(), dt, vec, device, ctx.compile_forbidden);
    const std::int64_t n_vec = N / vec;
    const std::int64_t bx = std::min<std::int64_t>(32, next_pow2(n_vec)), by = 256 / bx;
    const std::int64_t gx = std::min(cdiv(n_vec, bx), limit);
    LaunchConfig cfg;
    cfg.block = {static_cast<unsigned>(bx), static_cast<unsigned>(by), 1};
    cfg.grid = {static_cast<unsigned>(gx),
                static_cast<unsigned>(std::min({B, kMaxGridYZ, std::max<std::int64_t>(1, limit / gx)})), 1};
    cfg.stream = ctx.stream;
    launch_kernel(*k, cfg, gp, ap, out, BB, MM, NN);
  }
  return {grad_a, grad_b};
}

at::Tensor outer_meta(const at::Tensor& a, const at::Tensor& b) {
  check_dtype(kOp, "a", a, kFloatingTypes);
  check_same_dtype(kOp, "b", b, "a", a);
  const auto [B, M, N] = outer_dims(kOp, a.sym_sizes(), b.sym_sizes());
  if (a.dim() == 1) return at::empty_symint({M, N}, a.options());
  return at::empty_symint({B, M, N}, a.options());
}

std::tuple<at::Tensor, at::Tensor> outer_backward_meta(const at::Tensor& grad, const at::Tensor& a,
                                                       const at::Tensor& b) {
  check_dtype(kBackwardOp, "a", a, kFloatingTypes);
  check_same_dtype(kBackwardOp, "b", b, "a", a);
  check_same_dtype(kBackwardOp, "grad", grad, "a", a);
  outer_backward_dims(a.sym_sizes(), b.sym_sizes(), grad.sym_sizes());
  return {at::empty_symint(a.sym_sizes(), a.options()), at::empty_symint(b.sym_sizes(), b.options())};
}

class OuterFunction : public torch::autograd::Function<OuterFunction> {
 public:
  static constexpr const char* kName = "outer";
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& a, const at::Tensor& b) {
    ctx->save_for_backward({a, b});
    return call_below_autograd<&outer_cuda>(kName, a, b);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    // The incoming gradient may be a broadcast view (e.g. from .sum()): the kernel needs it dense.
    auto [grad_a, grad_b] =
        OpHandle<&outer_backward_cuda>::get("outer_backward").call(grads[0].contiguous(), saved[0], saved[1]);
    return {ctx->needs_input_grad(0) ? grad_a : at::Tensor(), ctx->needs_input_grad(1) ? grad_b : at::Tensor()};
  }
};

}  // namespace

KJIT_OP(outer, "outer(Tensor a, Tensor b) -> Tensor", outer_cuda, outer_meta);
KJIT_OP(outer_backward, "outer_backward(Tensor grad, Tensor a, Tensor b) -> (Tensor, Tensor)", outer_backward_cuda,
        outer_backward_meta);
KJIT_OP_AUTOGRAD(outer, (autograd_kernel<OuterFunction, &outer_cuda>))

}  // namespace kjit::ops
