// kjit::sum / mean / amax / amin(Tensor x, int dim=-1, bool keepdim=False) over one dim
// (kernel_templates/reduce.cuh).
//
// The input (made contiguous if it is not) is viewed as [outer, R, inner] around the reduced dim. The
// last dim (inner == 1) goes to reduce_rows (a row per TPR threads, in registers when it fits, D
// specialized up to KJIT_MAX_SPECIALIZATIONS distinct lengths); any other dim to reduce_cols, which
// splits R over more blocks (and a second pass) when outer x inner is too small to fill the GPU. Half
// types accumulate in float; the result has the input's dtype, as torch.sum / torch.amax give it.
// Gradients: sum and mean spread the gradient, amax / amin split it evenly between the extreme elements
// (PyTorch's rule), written with PyTorch ops.
#include "ops/reduce.hpp"

#include <ATen/TensorOperators.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/eq.h>
#include <ATen/ops/sum.h>

#include <array>
#include <climits>
#include <vector>

#include "ops/runtime/op.hpp"
#include "ops/runtime/rows.hpp"

namespace kjit::ops {
namespace {

enum class Reduction { Sum, Mean, Amax, Amin };

constexpr const char* name_of(Reduction r) {
  switch (r) {
    case Reduction::Sum: return "sum";
    case Reduction::Mean: return "mean";
    case Reduction::Amax: return "amax";
    default: return "amin";
  }
}
constexpr int opcode(Reduction r) { return r == Reduction::Amax ? 1 : r == Reduction::Amin ? 2 : 0; }

const KernelFamily& rows_family() {
  static const std::shared_ptr<const Template> t = builtin_template("reduce");
  static const KernelFamily f(Engine::global(), t, "reduce_rows", CompileOptions::library());
  return f;
}
const KernelFamily& cols_family() {
  static const KernelFamily f(Engine::global(), builtin_template("reduce"), "reduce_cols", CompileOptions::library());
  return f;
}

// The result's shape: `sizes` without dim `dim` (or with it set to 1 when keepdim).
template <class Int>
std::vector<Int> out_shape(c10::ArrayRef<Int> sizes, std::int64_t dim, bool keepdim) {
  std::vector<Int> out(sizes.begin(), sizes.end());
  if (out.empty()) return out;
  if (keepdim)
    out[dim] = Int(1);
  else
    out.erase(out.begin() + dim);
  return out;
}

// The checks of the reduced dim, shared by the CUDA and the Meta kernel.
template <class Int>
void check_reduced(const char* op, Reduction red, c10::ArrayRef<Int> sizes, std::int64_t dim) {
  const Int R = sizes.empty() ? Int(1) : sizes[dim];
  if (R > INT_MAX)
    fail_value(op, "dim " + std::to_string(dim) + " has " + c10::str(R) +
                       " elements; at most 2^31 - 1 can be reduced in one dim");
  if (R == 0 && (red == Reduction::Amax || red == Reduction::Amin)) {
    Int rest(1);
    for (const Int& s : out_shape(sizes, dim, false)) rest = rest * s;
    if (rest != 0)
      fail_value(op, "dim " + std::to_string(dim) + " has size 0 and " + name_of(red) +
                         " of nothing is undefined; reduce a non-empty dim (torch." + name_of(red) +
                         " raises here too)");
  }
}

// The op's name in messages ("kjit.ops.amax"): a literal, no allocation per call.
constexpr const char* op_name(Reduction r) {
  switch (r) {
    case Reduction::Sum: return "kjit.ops.sum";
    case Reduction::Mean: return "kjit.ops.mean";
    case Reduction::Amax: return "kjit.ops.amax";
    default: return "kjit.ops.amin";
  }
}

void reduce_rows(const at::Tensor& x, const at::Tensor& out, int op, std::int64_t outer, std::int64_t R, double scale,
                 int device, const LaunchContext& ctx) {
  const RowGeometry g = row_geometry(R, {&x}, 32);
  const std::int64_t D = g.items ? specialized_d("reduce_rows", R) : 0;
  const TemplateArg targs[] = {type_arg(x.scalar_type()),
                               type_arg(out.scalar_type()),
                               int_arg(op),
                               int_arg(g.tpr),
                               int_arg(g.rows_per_block),
                               int_arg(g.vec),
                               int_arg(g.items),
                               int_arg(D)};
  const auto k = kernel_for(rows_family(), targs, device, ctx.compile_forbidden);
  const void* xp = x.const_data_ptr();
  void* yp = out.data_ptr();
  long long rows = outer;
  int d = static_cast<int>(R);
  LaunchConfig cfg;
  cfg.grid = g.grid_for(outer);
  cfg.block = g.block();
  cfg.stream = ctx.stream;
  launch_kernel(*k, cfg, xp, yp, rows, d, scale);
}

// The reduce_cols kernel from `x` into `y` at vector width `vec`.
std::array<TemplateArg, 4> cols_args(at::ScalarType x, at::ScalarType y, int op, int vec) {
  return {type_arg(x), type_arg(y), int_arg(op), int_arg(vec)};
}

// How reduce_cols cuts R: into `splits` chunks of `chunk` (one pass when splits is 1, else a second
// pass over the partial results), so that outer x inner / vec columns fill the GPU. Whether R is split
// decides which kernels run (the partials' dtype), so it depends on the shape only, never on the device's
// multiprocessor count: a strict deployment on a GPU with another count runs the kernels that were
// recorded and warmed. How many splits (a runtime grid size) may follow the device.
struct ColsSplit {
  std::int64_t splits = 1, chunk = 0;
};
constexpr std::int64_t kColsSplitBelowBlocks = 512;  // 4 blocks per multiprocessor of a 128-SM GPU
ColsSplit cols_split(std::int64_t outer, std::int64_t R, std::int64_t inner, int vec, int device) {
  const std::int64_t blocks = outer * cdiv(inner / vec, 32);
  std::int64_t splits = 1;
  if (blocks < kColsSplitBelowBlocks && R >= 256) {
    const std::int64_t target = 4 * static_cast<std::int64_t>(sm_count(device));
    splits = std::max<std::int64_t>(2, std::min(cdiv(target, blocks), R / 64));
  }
  const std::int64_t chunk = cdiv(R, splits);
  return {cdiv(R, chunk), chunk};
}

void launch_cols(const at::Tensor& x, const at::Tensor& y, int op, std::int64_t outer, std::int64_t R,
                 std::int64_t inner, std::int64_t chunk, double scale, unsigned grid_z, int device,
                 const LaunchContext& ctx) {
  const int vec = vector_width(inner, {&x});
  const auto targs = cols_args(x.scalar_type(), y.scalar_type(), op, vec);
  const auto k = kernel_for(cols_family(), targs.data(), targs.size(), device, ctx.compile_forbidden);
  const std::int64_t col_blocks = cdiv(inner / vec, 32);
  const void* xp = x.const_data_ptr();
  void* yp = y.data_ptr();
  long long o = outer, in = inner;
  int r = static_cast<int>(R), c = static_cast<int>(chunk);
  LaunchConfig cfg;
  cfg.grid = {static_cast<unsigned>(std::min<std::int64_t>(outer * col_blocks, INT_MAX)), 1, grid_z};
  cfg.block = {32, 8, 1};
  cfg.stream = ctx.stream;
  launch_kernel(*k, cfg, xp, yp, o, r, in, c, scale);
}

void reduce_cols(const at::Tensor& x, const at::Tensor& out, int op, std::int64_t outer, std::int64_t R,
                 std::int64_t inner, double scale, int device, const LaunchContext& ctx) {
  const auto [splits, chunk] = cols_split(outer, R, inner, vector_width(inner, {&x}), device);
  if (splits == 1) {
    launch_cols(x, out, op, outer, R, inner, chunk, scale, 1, device, ctx);
    return;
  }
  const at::Tensor partial = new_empty({outer, splits, inner}, x, acc_dtype(x.scalar_type()));
  launch_cols(x, partial, op, outer, R, inner, chunk, 1.0, static_cast<unsigned>(splits), device, ctx);
  launch_cols(partial, out, op, outer, splits, inner, splits, scale, 1, device, ctx);
}

// The reduction of `x` over `dim` into a new tensor of dtype `out_dtype`.
at::Tensor reduce(Reduction red, const at::Tensor& x, std::int64_t dim, bool keepdim, at::ScalarType out_dtype) {
  const char* const op = op_name(red);
  const int device = device_for(op, {{"x", x}});
  check_dtype(op, "x", x, kFloatingTypes);
  dim = normalize_dim(op, dim, x.dim());
  check_reduced(op, red, x.sizes(), dim);
  const std::vector<std::int64_t> shape = x.dim() ? x.sizes().vec() : std::vector<std::int64_t>{1};
  const std::int64_t R = shape[dim];
  std::int64_t outer = 1, inner = 1;
  for (std::int64_t i = 0; i < dim; ++i) outer *= shape[i];
  for (std::size_t i = dim + 1; i < shape.size(); ++i) inner *= shape[i];
  at::Tensor out = new_empty(out_shape(x.sizes(), dim, keepdim), x, out_dtype);
  if (out.numel() == 0) return out;
  if (R == 0) return out.fill_(red == Reduction::Sum ? 0.0 : std::numeric_limits<double>::quiet_NaN());
  const at::Tensor xc = x.contiguous();
  const double scale = red == Reduction::Mean ? 1.0 / static_cast<double>(R) : 1.0;
  LaunchContext ctx(device);
  if (inner == 1)
    reduce_rows(xc, out, opcode(red), outer, R, scale, device, ctx);
  else
    reduce_cols(xc, out, opcode(red), outer, R, inner, scale, device, ctx);
  return out;
}

template <Reduction Red>
at::Tensor reduce_cuda(const at::Tensor& x, std::int64_t dim, bool keepdim) {
  return reduce(Red, x, dim, keepdim, x.scalar_type());
}

template <Reduction Red>
at::Tensor reduce_meta(const at::Tensor& x, std::int64_t dim, bool keepdim) {
  constexpr const char* op = op_name(Red);
  check_dtype(op, "x", x, kFloatingTypes);
  dim = normalize_dim(op, dim, x.dim());
  check_reduced(op, Red, x.sym_sizes(), dim);
  return at::empty_symint(out_shape(x.sym_sizes(), dim, keepdim), x.options());
}

// The gradient of the reduced result broadcast back to x's shape.
at::Tensor expand_back(const at::Tensor& grad, c10::SymIntArrayRef shape, std::int64_t dim, bool keepdim) {
  at::Tensor g = grad;
  if (!keepdim && !shape.empty()) g = g.unsqueeze(dim);
  return g.expand_symint(shape);
}

template <Reduction Red>
struct ReduceFunction : public torch::autograd::Function<ReduceFunction<Red>> {
  static constexpr const char* kName = name_of(Red);
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x, std::int64_t dim,
                            bool keepdim) {
    at::Tensor out = call_below_autograd<&reduce_cuda<Red>>(kName, x, dim, keepdim);
    ctx->saved_data["dim"] = normalize_dim(op_name(Red), dim, x.dim());
    ctx->saved_data["keepdim"] = keepdim;
    ctx->saved_data["shape"] = c10::IValue(x.sym_sizes().vec());
    if constexpr (Red == Reduction::Amax || Red == Reduction::Amin) ctx->save_for_backward({x, out});
    return out;
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const std::int64_t dim = ctx->saved_data["dim"].toInt();
    const bool keepdim = ctx->saved_data["keepdim"].toBool();
    const std::vector<c10::SymInt> shape = ctx->saved_data["shape"].toSymIntVector();
    at::Tensor g = expand_back(grads[0], shape, dim, keepdim);
    if constexpr (Red == Reduction::Mean) {
      g = g / c10::Scalar(shape.empty() ? c10::SymInt(1) : shape[dim]);
    } else if constexpr (Red == Reduction::Amax || Red == Reduction::Amin) {
      const auto saved = ctx->get_saved_variables();
      const at::Tensor hit = at::eq(saved[0], expand_back(saved[1], shape, dim, keepdim)).to(g.scalar_type());
      const at::Tensor count = shape.empty() ? hit.sum() : at::sum(hit, {dim}, /*keepdim=*/true);
      g = g * hit / count;
    }
    return {g, at::Tensor(), at::Tensor()};
  }
};

}  // namespace

at::Tensor sum_to_dtype(const at::Tensor& x, std::int64_t dim, at::ScalarType out_dtype) {
  return reduce(Reduction::Sum, x, dim, false, out_dtype);
}

void prepare_sum_rows_ahead(std::int64_t rows, std::int64_t d, at::ScalarType dtype, at::ScalarType out_dtype,
                            int device) {
  if (rows == 0 || d <= 1) return;  // nothing to reduce, or the rows kernel (d == 1): not worth it
  try {
    // A fresh tensor is aligned for any vector width: its pointer stands in as null.
    auto width = [&](at::ScalarType t) {
      const Access a{nullptr, static_cast<std::size_t>(c10::elementSize(t))};
      return vector_width(&a, 1, d);
    };
    const int op = opcode(Reduction::Sum);
    const int vec = width(dtype);
    const std::int64_t splits = cols_split(1, rows, d, vec, device).splits;
    auto ahead = [&](const std::array<TemplateArg, 4>& args) {
      cols_family().prepare_ahead(args.data(), args.size(), device);
    };
    if (splits == 1) {
      ahead(cols_args(dtype, out_dtype, op, vec));
      return;
    }
    const at::ScalarType acc = acc_dtype(dtype);
    ahead(cols_args(dtype, acc, op, vec));
    ahead(cols_args(acc, out_dtype, op, width(acc)));
  } catch (const std::exception&) {
    // The sum itself meets whatever this was (no device, a driver error) and reports it.
  }
}

KJIT_OP(sum, "sum(Tensor x, int dim=-1, bool keepdim=False) -> Tensor", reduce_cuda<Reduction::Sum>,
        reduce_meta<Reduction::Sum>);
KJIT_OP(mean, "mean(Tensor x, int dim=-1, bool keepdim=False) -> Tensor", reduce_cuda<Reduction::Mean>,
        reduce_meta<Reduction::Mean>);
KJIT_OP(amax, "amax(Tensor x, int dim=-1, bool keepdim=False) -> Tensor", reduce_cuda<Reduction::Amax>,
        reduce_meta<Reduction::Amax>);
KJIT_OP(amin, "amin(Tensor x, int dim=-1, bool keepdim=False) -> Tensor", reduce_cuda<Reduction::Amin>,
        reduce_meta<Reduction::Amin>);
KJIT_OP_AUTOGRAD(sum, (autograd_kernel<ReduceFunction<Reduction::Sum>, &reduce_cuda<Reduction::Sum>>))
KJIT_OP_AUTOGRAD(mean, (autograd_kernel<ReduceFunction<Reduction::Mean>, &reduce_cuda<Reduction::Mean>>))
KJIT_OP_AUTOGRAD(amax, (autograd_kernel<ReduceFunction<Reduction::Amax>, &reduce_cuda<Reduction::Amax>>))
KJIT_OP_AUTOGRAD(amin, (autograd_kernel<ReduceFunction<Reduction::Amin>, &reduce_cuda<Reduction::Amin>>))

}  // namespace kjit::ops
