// kjit's dense 1-D convolutions, each one GEMM on kjit's GEMM kernels (runtime/gemm.hpp) over the im2col
// matrix of its input (kernel_templates/im2col.cuh), K = in_channels * width:
//
//   conv1d(x, weight, bias=None, stride=1, padding=0, dilation=1, groups=1)                   F.conv1d
//   conv_transpose1d(x, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1, dilation=1)
//                                                                                              F.conv_transpose1d
//
// x [B, C, L] (or unbatched [C, L]) at any strides; weight [O, C, KW] (conv1d) or [C, O, KW] (conv_transpose1d),
// bias [O], all of one dtype: bfloat16, float16, or float32 as TF32 where torch.backends.cudnn.allow_tf32 allows
// it (PyTorch's convolution default); groups must be 1. y [B, O, Lout] is contiguous.
//
// The forward: A = im2col(x) [B * Lout, C * KW] (K padded to a multiple of 8 with zeros), then
// Y = A @ Wm^T + bias on the GEMM ([B * Lout, O], channels-last; M = B * Lout: a batch of one runs the GEMM's
// split-K form for M <= 16, large batches its tiles), transposed into y. Wm [O, C * KW] is conv1d's weight as
// it is (a view), or conv_transpose1d's flipped along the width with in / out swapped (a copy): a transposed
// convolution is the convolution of its input spread `stride` apart (im2col's `up`), padded by
// dilation * (KW - 1) - padding, with that weight.
//
// The backward ops (conv1d_backward, conv_transpose1d_backward -> (dx, dweight, dbias); dbias [0] without a
// bias): dx is the other convolution of the gradient with the same weight, dweight one GEMM of one tensor's
// rows against the im2col of the other (K = B * L, the transposed layout of im2col), dbias the gradient's sum
// over the batch and the positions.
#include <ATen/ops/flip.h>
#include <ATen/ops/sum.h>
#include <ATen/ops/zeros.h>

#include <algorithm>
#include <limits>
#include <string>
#include <tuple>
#include <vector>

#include "ops/runtime/gemm.hpp"
#include "ops/runtime/op.hpp"

namespace kjit::ops {
namespace {

constexpr const char* kConv = "kjit.ops.conv1d";
constexpr const char* kConvBackward = "kjit.ops.conv1d_backward";
constexpr const char* kTransposed = "kjit.ops.conv_transpose1d";
constexpr const char* kTransposedBackward = "kjit.ops.conv_transpose1d_backward";

const KernelFamily& family() {
  static const KernelFamily f(Engine::global(), builtin_template("im2col"), "im2col", CompileOptions::library());
  return f;
}

// One convolution as im2col sees it: the input x [B, C, L], the output's length, the weight's O and KW, and
// the position of output t's tap j in x: (t * stride + j * dilation - pad) / up where divisible.
struct Geometry {
  std::int64_t B, C, L, O, KW, lout;
  int stride, dilation, pad, up;
};

// The im2col matrix of x by g: [B * lout, C * KW padded] (the forward's A) or, `columns`, its transpose
// [C * KW, B * lout padded] (a weight gradient's B operand).
at::Tensor im2col(const at::Tensor& x, const Geometry& g, bool columns, int device, const LaunchContext& ctx) {
  const std::int64_t rows = g.B * g.lout, cols = g.C * g.KW;
  const std::int64_t rows_p = columns ? padded_k(rows) : rows, cols_p = columns ? cols : padded_k(cols);
  at::Tensor out = columns ? new_empty({cols_p, rows_p}, x) : new_empty({rows_p, cols_p}, x);
  if (out.numel() == 0) return out;
  const TemplateArg targs[] = {type_arg(x.scalar_type()), bool_arg(columns)};
  const auto k = kernel_for(family(), targs, device, ctx.compile_forbidden);
  const void* xp = x.const_data_ptr();
  void* op = out.data_ptr();
  long long sb = g.B > 1 ? x.stride(0) : 0, sc = g.C > 1 ? x.stride(1) : 0, sl = g.L > 1 ? x.stride(2) : 0;
  long long L = g.L, lout = g.lout, r = rows, rp = rows_p, c = cols, cp = cols_p;
  int kw = static_cast<int>(g.KW), stride = g.stride, dilation = g.dilation, pad = g.pad, up = g.up;
  LaunchConfig cfg;
  cfg.grid = grid_1d(out.numel(), device);
  cfg.block.x = 256;
  cfg.stream = ctx.stream;
  launch_kernel(*k, cfg, xp, op, sb, sc, sl, L, kw, lout, r, rp, c, cp, stride, dilation, pad, up);
  return out;
}

// The im2col matrices are built for a chunk of the batch at a time: about kWorkspaceBytes (one batch element's
// matrix at least) and at most kChunkRows GEMM rows, so that a long sequence or a large batch neither runs out
// of memory nor past one launch of the kernels (run_gemm: the mma.sync kernel covers 65535 row tiles of at
// least 16 rows).
constexpr std::int64_t kWorkspaceBytes = std::int64_t{1} << 29;
constexpr std::int64_t kChunkRows = std::int64_t{65535} * 16;

// Batch elements per chunk for im2col matrices of `per_batch` elements a batch element and `rows` GEMM rows.
std::int64_t chunk_of(const Geometry& g, std::int64_t per_batch, std::int64_t rows, std::size_t elem) {
  const std::int64_t by_memory = kWorkspaceBytes / std::max<std::int64_t>(1, per_batch * std::int64_t(elem));
  const std::int64_t by_rows = kChunkRows / std::max<std::int64_t>(1, rows);
  return std::max<std::int64_t>(1, std::min({g.B, by_memory, by_rows}));
}

// One chunk of conv_gemm: y [B, O, lout] of x [B, C, L].
void conv_chunk(const char* op, const at::Tensor& x, const at::Tensor& wm, const at::Tensor& bias, const Geometry& g,
                at::Tensor y, int device, const LaunchContext& ctx) {
  const at::Tensor a = im2col(x, g, false, device, ctx);
  at::Tensor rows = new_empty({g.B * g.lout, g.O}, x);
  Gemm gm;
  gm.dtype = x.scalar_type();
  gm.m = g.B * g.lout;
  gm.n = g.O;
  gm.k = a.size(1);
  gm.k_rows = g.C * g.KW;
  gm.a = gemm_matrix(a);
  at::Tensor w_held;
  gm.b = gemm_operand(gm, device, wm, w_held);
  gm.c = gemm_matrix(rows);
  gm.bias = bias.defined() ? bias.const_data_ptr() : nullptr;
  run_gemm(op, gm, device, ctx);
  y.copy_(rows.view({g.B, g.lout, g.O}).permute({0, 2, 1}));
}

// The convolution of x [B, C, L] by g with the weight matrix wm [O, C * KW] (and bias [O] or undefined):
// y [B, O, lout], contiguous.
at::Tensor conv_gemm(const char* op, const at::Tensor& x, const at::Tensor& wm, const at::Tensor& bias,
                     const Geometry& g, int device, const LaunchContext& ctx) {
  at::Tensor y = new_empty({g.B, g.O, g.lout}, x);
  if (y.numel() == 0) return y;
  const at::Tensor b = bias.defined() ? bias.contiguous() : bias;
  const std::int64_t chunk = chunk_of(g, g.lout * padded_k(g.C * g.KW), g.lout, x.element_size());
  for (std::int64_t b0 = 0; b0 < g.B; b0 += chunk) {
    Geometry gc = g;
    gc.B = std::min(chunk, g.B - b0);
    conv_chunk(op, x.narrow(0, b0, gc.B), wm, b, gc, y.narrow(0, b0, gc.B), device, ctx);
  }
  return y;
}

// dW [M, C * KW] = sum over (b, t) of rows[b, m, t] * im2col(src)[b * lout + t, c * KW + j], for rows
// [B, M, lout] and the im2col of src by g. Chunks of the batch add up in float32.
at::Tensor weight_grad(const char* op, const at::Tensor& rows, const at::Tensor& src, const Geometry& g, int device,
                       const LaunchContext& ctx) {
  const std::int64_t M = rows.size(1), N = g.C * g.KW;
  if (M == 0 || N == 0) return new_empty({M, N}, rows);
  if (g.B * g.lout == 0) return at::zeros({M, N}, rows.options());
  const std::int64_t chunk = chunk_of(g, N * g.lout, g.lout, rows.element_size());
  at::Tensor sum;
  for (std::int64_t b0 = 0; b0 < g.B; b0 += chunk) {
    Geometry gc = g;
    gc.B = std::min(chunk, g.B - b0);
    const at::Tensor bt = im2col(src.narrow(0, b0, gc.B), gc, true, device, ctx);  // [N, K padded]
    const at::Tensor part = rows.narrow(0, b0, gc.B).transpose(0, 1).reshape({M, gc.B * gc.lout});
    at::Tensor dw = mm_tn(op, part, bt, device, ctx);
    if (chunk >= g.B) return dw;
    sum = sum.defined() ? sum.add_(dw) : dw.to(at::ScalarType::Float);
  }
  return sum.to(rows.scalar_type());
}

// The weight matrix of a transposed convolution's weight w [C, O, KW] as a convolution's: [O, C * KW] with
// the width flipped. Of conv1d's weight [O, C, KW]: [C, O * KW], by which its backward convolves the
// gradient back to x.
at::Tensor flipped_matrix(const at::Tensor& w) {
  return at::flip(w, {2}).transpose(0, 1).contiguous().view({w.size(1), w.size(0) * w.size(2)});
}

// The sizes of one call, checked (CUDA and Meta): x's, the weight's O and KW, the output's length.
template <class Int>
struct Shape {
  bool batched;
  Int B, C, L, O, KW, lout;
  std::vector<Int> out() const { return batched ? std::vector<Int>{B, O, lout} : std::vector<Int>{O, lout}; }
};

template <class Int>
c10::ArrayRef<Int> sizes_of(const at::Tensor& t) {
  if constexpr (std::is_same_v<Int, c10::SymInt>)
    return t.sym_sizes();
  else
    return t.sizes();
}

std::string int_name(const char* name, std::int64_t v) { return std::string(name) + "=" + std::to_string(v); }

template <class Int>
Shape<Int> check_conv(const char* op, bool transposed, const at::Tensor& x, const at::Tensor& weight,
                      const std::optional<at::Tensor>& bias, std::int64_t stride, std::int64_t padding,
                      std::int64_t output_padding, std::int64_t dilation, std::int64_t groups) {
  check_matrix_dtype(op, "x", x, true);
  check_same_dtype(op, "weight", weight, "x", x);
  if (bias) check_same_dtype(op, "bias", *bias, "x", x);
  const auto xs = sizes_of<Int>(x);
  const auto ws = sizes_of<Int>(weight);
  if (xs.size() != 2 && xs.size() != 3)
    fail_value(op, "x must be [batch, channels, length] or [channels, length], got shape " + shape_str(xs));
  const char* layout = transposed ? "[in_channels, out_channels, width]" : "[out_channels, in_channels, width]";
  if (ws.size() != 3) fail_value(op, std::string("weight must be 3-D ") + layout + ", got shape " + shape_str(ws));
  if (groups != 1)
    fail_value(op, "groups must be 1 (kjit's dense convolution), got " + std::to_string(groups) +
                       "; use torch.nn.functional." + (transposed ? "conv_transpose1d" : "conv1d") +
                       " for grouped convolutions, or kjit.ops.causal_conv1d for a causal depthwise one");
  const int32_t kMax = std::numeric_limits<int32_t>::max();
  if (stride < 1 || stride > kMax) fail_value(op, int_name("stride", stride) + " must be in [1, 2^31)");
  if (dilation < 1 || dilation > kMax) fail_value(op, int_name("dilation", dilation) + " must be in [1, 2^31)");
  if (padding < 0 || padding > kMax) fail_value(op, int_name("padding", padding) + " must be in [0, 2^31)");
  if (transposed && (output_padding < 0 || output_padding >= std::max(stride, dilation)))
    fail_value(op, int_name("output_padding", output_padding) + " must be in [0, max(stride, dilation)) = [0, " +
                       std::to_string(std::max(stride, dilation)) + ")");
  Shape<Int> s{xs.size() == 3,
               xs.size() == 3 ? xs[0] : Int(1),
               xs[xs.size() - 2],
               xs[xs.size() - 1],
               ws[transposed ? 1 : 0],
               ws[2],
               Int(0)};
  const auto& wc = ws[transposed ? 0 : 1];
  if (wc != s.C)
    fail_value(op, "x has shape " + shape_str(xs) + " (" + c10::str(s.C) + " channels) and weight has shape " +
                       shape_str(ws) + ": weight is " + layout + " with " +
                       (transposed ? "in_channels (dim 0)" : "in_channels (dim 1)") + " equal to x's channels");
  if (s.KW < 1) fail_value(op, "weight has shape " + shape_str(ws) + ": its width (dim 2) must be at least 1");
  const std::int64_t kw = [&] {
    if constexpr (std::is_same_v<Int, c10::SymInt>)
      return s.KW.guard_int(__FILE__, __LINE__);
    else
      return s.KW;
  }();
  if (dilation * (kw - 1) > kMax)
    fail_value(op, int_name("dilation", dilation) + " times the width - 1 (" + std::to_string(kw - 1) +
                       ") must be below 2^31");
  const Int span = Int(dilation * (kw - 1) + 1);  // the taps' extent
  s.lout =
      transposed ? (s.L - 1) * stride - 2 * padding + span + output_padding : (s.L + 2 * padding - span) / stride + 1;
  if (!transposed && s.L + 2 * padding < span)
    fail_value(op, "x's length " + c10::str(s.L) + " padded by " + std::to_string(padding) +
                       " on each side is shorter than the filter's extent dilation * (width - 1) + 1 = " +
                       c10::str(span) + ": no output position; pad more or use a shorter filter");
  if (transposed && s.lout < 1)
    fail_value(op,
               "the output length (L - 1) * stride - 2 * padding + dilation * (width - 1) + output_padding + 1 "
               "is " +
                   c10::str(s.lout) + " for L = " + c10::str(s.L) + ": pad less");
  if (bias) {
    const auto bs = sizes_of<Int>(*bias);
    if (bs.size() != 1 || bs[0] != s.O)
      fail_value(op, "bias has shape " + shape_str(bs) + " but must have shape [" + c10::str(s.O) + "] (out_channels)");
  }
  // GEMM rows per batch element (the batch runs in chunks), columns and K.
  check_gemm_sizes(op, c10::SymInt(s.lout), c10::SymInt(s.O), c10::SymInt(s.C * s.KW));
  if (s.lout > kChunkRows)
    fail_value(op, "the output length " + c10::str(s.lout) + " is more than one GEMM launch covers (" +
                       std::to_string(kChunkRows) + " positions); split the sequence");
  return s;
}

// g for the forward of a call of shape s.
Geometry forward_geometry(bool transposed, const Shape<std::int64_t>& s, std::int64_t stride, std::int64_t padding,
                          std::int64_t dilation) {
  if (!transposed) return {s.B, s.C, s.L, s.O, s.KW, s.lout, int(stride), int(dilation), int(padding), 1};
  return {s.B, s.C, s.L, s.O, s.KW, s.lout, 1, int(dilation), int(dilation * (s.KW - 1) - padding), int(stride)};
}

at::Tensor batched(const at::Tensor& t, bool is_batched) { return is_batched ? t : t.unsqueeze(0); }
at::Tensor unbatched(const at::Tensor& t, bool is_batched) { return is_batched ? t : t.squeeze(0); }

// ---- the forward ops ------------------------------------------------------------------------------------

at::Tensor forward_impl(const char* op, bool transposed, const at::Tensor& x, const at::Tensor& weight,
                        const std::optional<at::Tensor>& bias, std::int64_t stride, std::int64_t padding,
                        std::int64_t output_padding, std::int64_t dilation, std::int64_t groups) {
  const int device = device_for(op, {{"x", x}, {"weight", weight}, {"bias", bias ? *bias : at::Tensor()}});
  const auto s =
      check_conv<std::int64_t>(op, transposed, x, weight, bias, stride, padding, output_padding, dilation, groups);
  const Geometry g = forward_geometry(transposed, s, stride, padding, dilation);
  LaunchContext ctx(device);
  const at::Tensor wm = transposed ? flipped_matrix(weight) : weight.reshape({s.O, s.C * s.KW});
  const at::Tensor y = conv_gemm(op, batched(x, s.batched), wm, bias ? *bias : at::Tensor(), g, device, ctx);
  return unbatched(y, s.batched);
}

at::Tensor conv1d_cuda(const at::Tensor& x, const at::Tensor& weight, const std::optional<at::Tensor>& bias,
                       std::int64_t stride, std::int64_t padding, std::int64_t dilation, std::int64_t groups) {
  return forward_impl(kConv, false, x, weight, bias, stride, padding, 0, dilation, groups);
}
at::Tensor conv1d_meta(const at::Tensor& x, const at::Tensor& weight, const std::optional<at::Tensor>& bias,
                       std::int64_t stride, std::int64_t padding, std::int64_t dilation, std::int64_t groups) {
  const auto s = check_conv<c10::SymInt>(kConv, false, x, weight, bias, stride, padding, 0, dilation, groups);
  return at::empty_symint(s.out(), x.options());
}

at::Tensor conv_transpose1d_cuda(const at::Tensor& x, const at::Tensor& weight, const std::optional<at::Tensor>& bias,
                                 std::int64_t stride, std::int64_t padding, std::int64_t output_padding,
                                 std::int64_t groups, std::int64_t dilation) {
  return forward_impl(kTransposed, true, x, weight, bias, stride, padding, output_padding, dilation, groups);
}
at::Tensor conv_transpose1d_meta(const at::Tensor& x, const at::Tensor& weight, const std::optional<at::Tensor>& bias,
                                 std::int64_t stride, std::int64_t padding, std::int64_t output_padding,
                                 std::int64_t groups, std::int64_t dilation) {
  const auto s =
      check_conv<c10::SymInt>(kTransposed, true, x, weight, bias, stride, padding, output_padding, dilation, groups);
  return at::empty_symint(s.out(), x.options());
}

// ---- the backward ops -----------------------------------------------------------------------------------

using Grads = std::tuple<at::Tensor, at::Tensor, at::Tensor>;

// grad must have the forward's output shape.
template <class Int>
void check_grad(const char* op, const at::Tensor& grad, const at::Tensor& x, const Shape<Int>& s) {
  check_same_dtype(op, "grad", grad, "x", x);
  const auto gs = sizes_of<Int>(grad);
  const auto out = s.out();
  if (std::vector<Int>(gs.begin(), gs.end()) != out)
    fail_value(op, "grad has shape " + shape_str(gs) + " but the forward's output has shape " + shape_str(out));
  // dx's GEMM: x's positions per batch element, its channels, K = O * KW.
  check_gemm_sizes(op, c10::SymInt(s.L), c10::SymInt(s.C), c10::SymInt(s.O * s.KW));
  if (s.L > kChunkRows)
    fail_value(op, "x's length " + c10::str(s.L) + " is more than one GEMM launch covers (" +
                       std::to_string(kChunkRows) + " positions); split the sequence");
}

Grads backward_impl(const char* op, bool transposed, const at::Tensor& grad, const at::Tensor& x,
                    const at::Tensor& weight, std::int64_t stride, std::int64_t padding, std::int64_t output_padding,
                    std::int64_t dilation, std::int64_t groups, bool has_bias) {
  const int device = device_for(op, {{"grad", grad}, {"x", x}, {"weight", weight}});
  const auto s = check_conv<std::int64_t>(op, transposed, x, weight, std::nullopt, stride, padding, output_padding,
                                          dilation, groups);
  check_grad(op, grad, x, s);
  const at::Tensor dy = batched(grad, s.batched), x3 = batched(x, s.batched);
  LaunchContext ctx(device);
  const int d = static_cast<int>(dilation), st = static_cast<int>(stride), p = static_cast<int>(padding);
  at::Tensor dx, dw;
  if (!transposed) {
    // dx: conv_transpose1d of dy (its forward geometry, lout = L); dweight: dy's rows against im2col(x).
    const Geometry gx{s.B, s.O, s.lout, s.C, s.KW, s.L, 1, d, int(dilation * (s.KW - 1) - padding), st};
    dx = conv_gemm(op, dy, flipped_matrix(weight), at::Tensor(), gx, device, ctx);
    dw = weight_grad(op, dy, x3, forward_geometry(false, s, stride, padding, dilation), device, ctx);
  } else {
    // dx: conv1d of dy with the weight as a convolution's [C, O, KW] (lout = L); dweight: x's rows against
    // im2col(dy) by that convolution.
    const Geometry gx{s.B, s.O, s.lout, s.C, s.KW, s.L, st, d, p, 1};
    dx = conv_gemm(op, dy, weight.reshape({s.C, s.O * s.KW}), at::Tensor(), gx, device, ctx);
    dw = weight_grad(op, x3, dy, gx, device, ctx);
  }
  at::Tensor db = has_bias ? at::sum(dy, std::vector<std::int64_t>{0, 2}, false, dy.scalar_type()) : new_empty({0}, x);
  return {unbatched(dx, s.batched), dw.view(weight.sizes()), db};
}

template <class Int>
Grads backward_meta(const char* op, bool transposed, const at::Tensor& grad, const at::Tensor& x,
                    const at::Tensor& weight, std::int64_t stride, std::int64_t padding, std::int64_t output_padding,
                    std::int64_t dilation, std::int64_t groups, bool has_bias) {
  const auto s =
      check_conv<Int>(op, transposed, x, weight, std::nullopt, stride, padding, output_padding, dilation, groups);
  check_grad(op, grad, x, s);
  const c10::SymInt zero(0);
  return {at::empty_symint(x.sym_sizes(), x.options()), at::empty_symint(weight.sym_sizes(), weight.options()),
          at::empty_symint({has_bias ? c10::SymInt(s.O) : zero}, x.options())};
}

Grads conv1d_backward_cuda(const at::Tensor& grad, const at::Tensor& x, const at::Tensor& weight, std::int64_t stride,
                           std::int64_t padding, std::int64_t dilation, std::int64_t groups, bool has_bias) {
  return backward_impl(kConvBackward, false, grad, x, weight, stride, padding, 0, dilation, groups, has_bias);
}
Grads conv1d_backward_meta(const at::Tensor& grad, const at::Tensor& x, const at::Tensor& weight, std::int64_t stride,
                           std::int64_t padding, std::int64_t dilation, std::int64_t groups, bool has_bias) {
  return backward_meta<c10::SymInt>(kConvBackward, false, grad, x, weight, stride, padding, 0, dilation, groups,
                                    has_bias);
}
Grads conv_transpose1d_backward_cuda(const at::Tensor& grad, const at::Tensor& x, const at::Tensor& weight,
                                     std::int64_t stride, std::int64_t padding, std::int64_t output_padding,
                                     std::int64_t groups, std::int64_t dilation, bool has_bias) {
  return backward_impl(kTransposedBackward, true, grad, x, weight, stride, padding, output_padding, dilation, groups,
                       has_bias);
}
Grads conv_transpose1d_backward_meta(const at::Tensor& grad, const at::Tensor& x, const at::Tensor& weight,
                                     std::int64_t stride, std::int64_t padding, std::int64_t output_padding,
                                     std::int64_t groups, std::int64_t dilation, bool has_bias) {
  return backward_meta<c10::SymInt>(kTransposedBackward, true, grad, x, weight, stride, padding, output_padding,
                                    dilation, groups, has_bias);
}

// ---- autograd -------------------------------------------------------------------------------------------

// The gradients of a forward (x, weight, bias, then the ints: none).
torch::autograd::variable_list input_grads(const Grads& g, bool has_bias, std::size_t n_ints) {
  torch::autograd::variable_list v{std::get<0>(g), std::get<1>(g), has_bias ? std::get<2>(g) : at::Tensor()};
  v.resize(3 + n_ints);
  return v;
}

struct Conv1dFunction : public torch::autograd::Function<Conv1dFunction> {
  static constexpr const char* kName = "conv1d";
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x, const at::Tensor& weight,
                            const std::optional<at::Tensor>& bias, std::int64_t stride, std::int64_t padding,
                            std::int64_t dilation, std::int64_t groups) {
    ctx->saved_data["args"] = std::vector<std::int64_t>{stride, padding, dilation, groups};
    ctx->saved_data["has_bias"] = bias.has_value();
    ctx->save_for_backward({x, weight});
    return call_below_autograd<&conv1d_cuda>(kName, x, weight, bias, stride, padding, dilation, groups);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const auto a = ctx->saved_data["args"].toIntVector();
    const bool has_bias = ctx->saved_data["has_bias"].toBool();
    return input_grads(OpHandle<&conv1d_backward_cuda>::get("conv1d_backward")
                           .call(grads[0], saved[0], saved[1], a[0], a[1], a[2], a[3], has_bias),
                       has_bias, 4);
  }
};

struct ConvTranspose1dFunction : public torch::autograd::Function<ConvTranspose1dFunction> {
  static constexpr const char* kName = "conv_transpose1d";
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x, const at::Tensor& weight,
                            const std::optional<at::Tensor>& bias, std::int64_t stride, std::int64_t padding,
                            std::int64_t output_padding, std::int64_t groups, std::int64_t dilation) {
    ctx->saved_data["args"] = std::vector<std::int64_t>{stride, padding, output_padding, groups, dilation};
    ctx->saved_data["has_bias"] = bias.has_value();
    ctx->save_for_backward({x, weight});
    return call_below_autograd<&conv_transpose1d_cuda>(kName, x, weight, bias, stride, padding, output_padding, groups,
                                                       dilation);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const auto a = ctx->saved_data["args"].toIntVector();
    const bool has_bias = ctx->saved_data["has_bias"].toBool();
    return input_grads(OpHandle<&conv_transpose1d_backward_cuda>::get("conv_transpose1d_backward")
                           .call(grads[0], saved[0], saved[1], a[0], a[1], a[2], a[3], a[4], has_bias),
                       has_bias, 5);
  }
};

}  // namespace

KJIT_OP(conv1d,
        "conv1d(Tensor x, Tensor weight, Tensor? bias=None, int stride=1, int padding=0, int dilation=1, int groups=1) "
        "-> Tensor",
        conv1d_cuda, conv1d_meta);
KJIT_OP(conv1d_backward,
        "conv1d_backward(Tensor grad, Tensor x, Tensor weight, int stride=1, int padding=0, int dilation=1, int "
        "groups=1, bool has_bias=False) -> (Tensor, Tensor, Tensor)",
        conv1d_backward_cuda, conv1d_backward_meta);
KJIT_OP(conv_transpose1d,
        "conv_transpose1d(Tensor x, Tensor weight, Tensor? bias=None, int stride=1, int padding=0, int "
        "output_padding=0, int groups=1, int dilation=1) -> Tensor",
        conv_transpose1d_cuda, conv_transpose1d_meta);
KJIT_OP(conv_transpose1d_backward,
        "conv_transpose1d_backward(Tensor grad, Tensor x, Tensor weight, int stride=1, int padding=0, int "
        "output_padding=0, int groups=1, int dilation=1, bool has_bias=False) -> (Tensor, Tensor, Tensor)",
        conv_transpose1d_backward_cuda, conv_transpose1d_backward_meta);
KJIT_OP_AUTOGRAD(conv1d, (autograd_kernel<Conv1dFunction, &conv1d_cuda>))
KJIT_OP_AUTOGRAD(conv_transpose1d, (autograd_kernel<ConvTranspose1dFunction, &conv_transpose1d_cuda>))

}  // namespace kjit::ops
