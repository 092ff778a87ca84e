// kjit::max_pool2d / avg_pool2d over NCHW (or CHW) tensors, with backward (kernel_templates/pool.cuh).
//
// kernel_size, stride (default: kernel_size) and padding are specialized (one compile per distinct
// window); the spatial sizes are runtime arguments. Floor mode, no dilation; padding at most half the
// window (PyTorch's rule). avg_pool2d counts the padding in the divisor unless count_include_pad=False.
// The forward runs the tiled kernel (pool2d_tiled_forward: a tile of outputs per block, vector loads,
// the geometry from tile_for's small table) and falls back to one thread per output (pool2d_forward) for
// windows larger than 8 or tiles that would not fit 48 KB of shared memory. The backward is a gather
// over the windows covering each input element (max_pool2d recomputes each window's argmax from the
// input instead of storing indices).
#include <ATen/ops/empty.h>

#include <algorithm>
#include <climits>
#include <numeric>
#include <optional>
#include <vector>

#include "ops/runtime/op.hpp"

namespace kjit::ops {
namespace {

constexpr unsigned kBlock = 256;

enum class Kind { kForward, kBackward, kTiled };

const KernelFamily& family(Kind kind) {
  static const std::shared_ptr<const Template> t = builtin_template("pool");
  static const KernelFamily fwd(Engine::global(), t, "pool2d_forward", CompileOptions::library());
  static const KernelFamily bwd(Engine::global(), t, "pool2d_backward", CompileOptions::library());
  static const KernelFamily tiled(Engine::global(), t, "pool2d_tiled_forward", CompileOptions::library());
  return kind == Kind::kTiled ? tiled : kind == Kind::kBackward ? bwd : fwd;
}

template <class Int>
std::string pair_str(const Int& a, const Int& b) {
  return "(" + c10::str(a) + ", " + c10::str(b) + ")";
}

// The window (specialized) and the sizes of one call; Int is int64_t (CUDA) or SymInt (Meta).
template <class Int>
struct Pool {
  std::int64_t kh, kw, sh, sw, ph, pw;
  Int H, W, oh, ow;
};

std::pair<std::int64_t, std::int64_t> pair_of(const char* op, const char* what, c10::IntArrayRef v) {
  if (v.size() == 1) return {v[0], v[0]};
  if (v.size() == 2) return {v[0], v[1]};
  throw TypeError(std::string(op) + ": " + what + " must be an int or a pair of ints, got " + shape_str(v));
}

template <class Int>
Pool<Int> pool_params(const char* op, const at::Tensor& x, c10::ArrayRef<Int> sizes, c10::IntArrayRef kernel_size,
                      c10::IntArrayRef stride, c10::IntArrayRef padding) {
  check_dtype(op, "x", x, kFloatingTypes);
  if (sizes.size() != 3 && sizes.size() != 4)
    fail_value(op, "x must be NCHW or CHW (4 or 3 dims), got shape " + shape_str(sizes));
  Pool<Int> p;
  std::tie(p.kh, p.kw) = pair_of(op, "kernel_size", kernel_size);
  std::tie(p.sh, p.sw) = stride.empty() ? std::make_pair(p.kh, p.kw) : pair_of(op, "stride", stride);
  std::tie(p.ph, p.pw) = pair_of(op, "padding", padding);
  if (p.kh < 1 || p.kw < 1 || p.sh < 1 || p.sw < 1 || p.ph < 0 || p.pw < 0)
    fail_value(op, "kernel_size and stride must be >= 1 and padding >= 0, got kernel_size=" + pair_str(p.kh, p.kw) +
                       ", stride=" + pair_str(p.sh, p.sw) + ", padding=" + pair_str(p.ph, p.pw));
  if (p.ph > p.kh / 2 || p.pw > p.kw / 2)
    fail_value(op, "padding " + pair_str(p.ph, p.pw) + " must be at most half the kernel size " + pair_str(p.kh, p.kw));
  p.H = sizes[sizes.size() - 2];
  p.W = sizes[sizes.size() - 1];
  if (p.H * p.W > INT_MAX)
    fail_value(op, "planes of " + c10::str(p.H) + " x " + c10::str(p.W) +
                       " elements are too large (at most 2^31 - 1 per plane)");
  // Python's floor division, as PyTorch computes the output size (negative for inputs smaller than the window).
  const auto floordiv = [](const Int& n, std::int64_t d) {
    return n < 0 ? Int(0) - (Int(0) - n + (d - 1)) / d : n / d;
  };
  p.oh = floordiv(p.H + 2 * p.ph - p.kh, p.sh) + 1;
  p.ow = floordiv(p.W + 2 * p.pw - p.kw, p.sw) + 1;
  if (p.oh < 1 || p.ow < 1)
    fail_value(op, "the input's spatial size " + pair_str(p.H, p.W) + " is too small for kernel_size " +
                       pair_str(p.kh, p.kw) + " with padding " + pair_str(p.ph, p.pw) + " (the output would be " +
                       pair_str(p.oh, p.ow) + ")");
  return p;
}

template <class Int>
std::vector<Int> out_sizes(c10::ArrayRef<Int> sizes, const Pool<Int>& p) {
  std::vector<Int> out(sizes.begin(), sizes.end() - 2);
  out.push_back(p.oh);
  out.push_back(p.ow);
  return out;
}

// Blocks over the positions of one plane (x) and over the planes (y, looped past 65535).
Dim3 grid(std::int64_t positions, std::int64_t planes) {
  Dim3 g;
  g.x = static_cast<unsigned>(std::max<std::int64_t>(1, cdiv(positions, kBlock)));
  g.y = static_cast<unsigned>(std::max<std::int64_t>(1, std::min<std::int64_t>(planes, 65535)));
  return g;
}

const std::shared_ptr<const SpecializedKernel> pool_kernel(Kind kind, const at::Tensor& x, const Pool<std::int64_t>& p,
                                                           bool is_max, bool count_pad, int device,
                                                           const LaunchContext& ctx) {
  const TemplateArg targs[] = {type_arg(x.scalar_type()),
                               int_arg(p.kh),
                               int_arg(p.kw),
                               int_arg(p.sh),
                               int_arg(p.sw),
                               int_arg(p.ph),
                               int_arg(p.pw),
                               bool_arg(is_max),
                               bool_arg(count_pad)};
  return kernel_for(family(kind), targs, device, ctx.compile_forbidden);
}

// The tiled forward's geometry: rows TOH x columns TOW of outputs per block, R outputs per thread,
// vectors of VEC elements. The same numbers as the kernel's kjit_pool::RowTile / HaloTile
// (kernel_templates/pool.cuh), whose static_asserts hold for every row of the table.
struct Tiling {
  std::int64_t toh, tow, r, vec;
  std::int64_t tiles;  // blocks of work (the kernel loops over them past the grid)
};

constexpr std::int64_t kMaxTiledWindow = 8;
constexpr std::int64_t kMaxTileBytes = 48 * 1024;  // static shared memory of one block

std::int64_t pow2_at_least(std::int64_t n) {
  std::int64_t p = 1;
  while (p < n) p *= 2;
  return p;
}

// The tile table: from the window, the dtype, the output width and the alignment, never from other sizes.
// nullopt: the fallback (a window larger than kMaxTiledWindow, a tile over kMaxTileBytes, huge planes).
std::optional<Tiling> tile_for(const Pool<std::int64_t>& p, const at::Tensor& x, std::int64_t planes) {
  if (p.kh > kMaxTiledWindow || p.kw > kMaxTiledWindow || p.H >= (1 << 30) || p.W >= (1 << 30)) return std::nullopt;
  const auto elem = static_cast<std::int64_t>(x.element_size());
  const std::int64_t acc = std::max<std::int64_t>(elem, 4);  // acc_t: half types are staged as float
  Tiling t{};
  if (p.kh == p.sh && p.kw == p.sw && p.ph == 0 && p.pw == 0) {
    // Register path: R consecutive outputs per thread (one vector of at most 16 bytes; at most 32 bytes
    // of input per input row), rows of threads sized to the output width, two rows per thread unless
    // the window's input is large.
    t.r = 16 / elem;
    while (t.r > 1 && t.r * p.sw * elem > 32) t.r /= 2;
    t.vec = pick_vec(static_cast<std::size_t>(elem), {x.const_data_ptr()}, std::gcd(t.r * p.sw, p.W));
    const std::int64_t row_threads = std::clamp<std::int64_t>(pow2_at_least(cdiv(p.ow, t.r)), 8, 128);
    t.tow = row_threads * t.r;
    t.toh = 256 / row_threads * (p.kh * t.r * p.sw * elem <= 128 ? 2 : 1);
    t.tiles = cdiv(planes * p.oh, t.toh) * cdiv(p.ow, t.tow);
    return t;
  }
  // Halo path: R consecutive rows of one output column per thread (8 at stride 1, where neighbouring
  // outputs share more input rows), TOH = 2R rows (R for short planes), TOW columns sized to the output
  // width; several planes' row bands per block when TOW * TOH / R < 256.
  t.r = p.sh == 1 ? 8 : 4;
  t.toh = p.oh <= t.r ? t.r : 2 * t.r;
  t.tow = std::clamp<std::int64_t>(pow2_at_least(p.ow), 16, 128);
  t.vec = pick_vec(static_cast<std::size_t>(elem), {x.const_data_ptr()}, p.W);
  const std::int64_t sub = 256 / (t.tow * (t.toh / t.r));
  const std::int64_t lead = (t.vec - p.pw % t.vec) % t.vec;
  const std::int64_t in_rows = (t.toh - 1) * p.sh + p.kh;
  const std::int64_t in_cols = cdiv(lead + (t.tow - 1) * p.sw + p.kw, t.vec) * t.vec;
  const std::int64_t pitch = cdiv(in_cols, p.sw);
  if (sub * in_rows * p.sw * pitch * acc > kMaxTileBytes) return std::nullopt;
  if (cdiv(sub * in_rows * (in_cols / t.vec), 256) > 64) return std::nullopt;  // the kernel's kIter
  t.tiles = cdiv(planes * cdiv(p.oh, t.toh), sub) * cdiv(p.ow, t.tow);
  return t;
}

const std::shared_ptr<const SpecializedKernel> tiled_kernel(const at::Tensor& x, const Pool<std::int64_t>& p,
                                                            const Tiling& t, bool is_max, bool count_pad, int device,
                                                            const LaunchContext& ctx) {
  const TemplateArg targs[] = {type_arg(x.scalar_type()),
                               int_arg(p.kh),
                               int_arg(p.kw),
                               int_arg(p.sh),
                               int_arg(p.sw),
                               int_arg(p.ph),
                               int_arg(p.pw),
                               bool_arg(is_max),
                               bool_arg(count_pad),
                               int_arg(t.toh),
                               int_arg(t.tow),
                               int_arg(t.r),
                               int_arg(t.vec)};
  return kernel_for(family(Kind::kTiled), targs, device, ctx.compile_forbidden);
}

template <bool Max>
at::Tensor forward(const char* op, const at::Tensor& x, c10::IntArrayRef kernel_size, c10::IntArrayRef stride,
                   c10::IntArrayRef padding, bool count_include_pad) {
  const int device = device_for(op, {{"x", x}});
  const Pool<std::int64_t> p = pool_params(op, x, x.sizes(), kernel_size, stride, padding);
  const at::Tensor xc = x.contiguous();
  at::Tensor y = new_empty(out_sizes(x.sizes(), p), x);
  if (y.numel() == 0) return y;
  LaunchContext ctx(device);
  const void* xp = xc.const_data_ptr();
  void* yp = y.data_ptr();
  long long planes = y.numel() / (p.oh * p.ow);
  int H = static_cast<int>(p.H), W = static_cast<int>(p.W), OH = static_cast<int>(p.oh), OW = static_cast<int>(p.ow);
  LaunchConfig cfg;
  cfg.block.x = kBlock;
  cfg.stream = ctx.stream;
  if (const std::optional<Tiling> t = tile_for(p, xc, planes)) {
    const auto k = tiled_kernel(xc, p, *t, Max, count_include_pad, device, ctx);
    cfg.grid.x = static_cast<unsigned>(std::min<std::int64_t>(t->tiles, INT_MAX));
    launch_kernel(*k, cfg, xp, yp, planes, H, W, OH, OW);
    return y;
  }
  const auto k = pool_kernel(Kind::kForward, xc, p, Max, count_include_pad, device, ctx);
  cfg.grid = grid(p.oh * p.ow, planes);
  launch_kernel(*k, cfg, xp, yp, planes, H, W, OH, OW);
  return y;
}

template <bool Max>
at::Tensor backward(const char* op, const at::Tensor& grad, const at::Tensor& x, c10::IntArrayRef kernel_size,
                    c10::IntArrayRef stride, c10::IntArrayRef padding, bool count_include_pad) {
  const int device = device_for(op, {{"grad", grad}, {"x", x}});
  const Pool<std::int64_t> p = pool_params(op, x, x.sizes(), kernel_size, stride, padding);
  const std::vector<std::int64_t> expected = out_sizes(x.sizes(), p);
  check_like(op, "grad", grad, "x", x, c10::fromIntArrayRefSlow(expected));
  const at::Tensor xc = x.contiguous(), gc = grad.contiguous();
  at::Tensor dx = new_empty(x.sizes(), x);
  if (dx.numel() == 0) return dx;
  LaunchContext ctx(device);
  const auto k = pool_kernel(Kind::kBackward, xc, p, Max, count_include_pad, device, ctx);
  const void* gp = gc.const_data_ptr();
  const void* xp = xc.const_data_ptr();
  void* dp = dx.data_ptr();
  long long planes = dx.numel() / (p.H * p.W);
  int H = static_cast<int>(p.H), W = static_cast<int>(p.W), OH = static_cast<int>(p.oh), OW = static_cast<int>(p.ow);
  LaunchConfig cfg;
  cfg.grid = grid(p.H * p.W, planes);
  cfg.block.x = kBlock;
  cfg.stream = ctx.stream;
  launch_kernel(*k, cfg, gp, xp, dp, planes, H, W, OH, OW);
  return dx;
}

at::Tensor max_pool2d_cuda(const at::Tensor& x, c10::IntArrayRef kernel_size, c10::IntArrayRef stride,
                           c10::IntArrayRef padding) {
  return forward<true>("kjit.ops.max_pool2d", x, kernel_size, stride, padding, true);
}
at::Tensor avg_pool2d_cuda(const at::Tensor& x, c10::IntArrayRef kernel_size, c10::IntArrayRef stride,
                           c10::IntArrayRef padding, bool count_include_pad) {
  return forward<false>("kjit.ops.avg_pool2d", x, kernel_size, stride, padding, count_include_pad);
}
at::Tensor max_pool2d_backward_cuda(const at::Tensor& grad, const at::Tensor& x, c10::IntArrayRef kernel_size,
                                    c10::IntArrayRef stride, c10::IntArrayRef padding) {
  return backward<true>("kjit.ops.max_pool2d_backward", grad, x, kernel_size, stride, padding, true);
}
at::Tensor avg_pool2d_backward_cuda(const at::Tensor& grad, const at::Tensor& x, c10::IntArrayRef kernel_size,
                                    c10::IntArrayRef stride, c10::IntArrayRef padding, bool count_include_pad) {
  return backward<false>("kjit.ops.avg_pool2d_backward", grad, x, kernel_size, stride, padding, count_include_pad);
}

at::Tensor forward_meta(const char* op, const at::Tensor& x, c10::IntArrayRef kernel_size, c10::IntArrayRef stride,
                        c10::IntArrayRef padding) {
  const auto p = pool_params(op, x, x.sym_sizes(), kernel_size, stride, padding);
  return at::empty_symint(out_sizes(x.sym_sizes(), p), x.options());
}
at::Tensor backward_meta(const char* op, const at::Tensor& grad, const at::Tensor& x, c10::IntArrayRef kernel_size,
                         c10::IntArrayRef stride, c10::IntArrayRef padding) {
  const auto p = pool_params(op, x, x.sym_sizes(), kernel_size, stride, padding);
  check_like(op, "grad", grad, "x", x, out_sizes(x.sym_sizes(), p));
  return at::empty_symint(x.sym_sizes(), x.options().memory_format(c10::MemoryFormat::Contiguous));
}
at::Tensor max_pool2d_meta(const at::Tensor& x, c10::IntArrayRef k, c10::IntArrayRef s, c10::IntArrayRef p) {
  return forward_meta("kjit.ops.max_pool2d", x, k, s, p);
}
at::Tensor avg_pool2d_meta(const at::Tensor& x, c10::IntArrayRef k, c10::IntArrayRef s, c10::IntArrayRef p, bool) {
  return forward_meta("kjit.ops.avg_pool2d", x, k, s, p);
}
at::Tensor max_pool2d_backward_meta(const at::Tensor& g, const at::Tensor& x, c10::IntArrayRef k, c10::IntArrayRef s,
                                    c10::IntArrayRef p) {
  return backward_meta("kjit.ops.max_pool2d_backward", g, x, k, s, p);
}
at::Tensor avg_pool2d_backward_meta(const at::Tensor& g, const at::Tensor& x, c10::IntArrayRef k, c10::IntArrayRef s,
                                    c10::IntArrayRef p, bool) {
  return backward_meta("kjit.ops.avg_pool2d_backward", g, x, k, s, p);
}

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

void save_window(AutogradContext* ctx, const at::Tensor& x, c10::IntArrayRef k, c10::IntArrayRef s,
                 c10::IntArrayRef p) {
  ctx->saved_data["kernel_size"] = k.vec();
  ctx->saved_data["stride"] = s.vec();
  ctx->saved_data["padding"] = p.vec();
  ctx->save_for_backward({x});
}

struct MaxPoolFunction : public torch::autograd::Function<MaxPoolFunction> {
  static constexpr const char* kName = "max_pool2d";
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, c10::IntArrayRef k, c10::IntArrayRef s,
                            c10::IntArrayRef p) {
    save_window(ctx, x, k, s, p);
    return call_below_autograd<&max_pool2d_cuda>(kName, x, k, s, p);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto k = ctx->saved_data["kernel_size"].toIntVector(), s = ctx->saved_data["stride"].toIntVector(),
               p = ctx->saved_data["padding"].toIntVector();
    at::Tensor dx = OpHandle<&max_pool2d_backward_cuda>::get("max_pool2d_backward")
                        .call(grads[0], ctx->get_saved_variables()[0], k, s, p);
    return {dx, at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

struct AvgPoolFunction : public torch::autograd::Function<AvgPoolFunction> {
  static constexpr const char* kName = "avg_pool2d";
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, c10::IntArrayRef k, c10::IntArrayRef s,
                            c10::IntArrayRef p, bool count_include_pad) {
    save_window(ctx, x, k, s, p);
    ctx->saved_data["count_include_pad"] = count_include_pad;
    return call_below_autograd<&avg_pool2d_cuda>(kName, x, k, s, p, count_include_pad);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto k = ctx->saved_data["kernel_size"].toIntVector(), s = ctx->saved_data["stride"].toIntVector(),
               p = ctx->saved_data["padding"].toIntVector();
    at::Tensor dx =
        OpHandle<&avg_pool2d_backward_cuda>::get("avg_pool2d_backward")
            .call(grads[0], ctx->get_saved_variables()[0], k, s, p, ctx->saved_data["count_include_pad"].toBool());
    return {dx, at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

}  // namespace

KJIT_OP(max_pool2d, "max_pool2d(Tensor x, int[2] kernel_size, int[2] stride=[], int[2] padding=0) -> Tensor",
        max_pool2d_cuda, max_pool2d_meta);
KJIT_OP(avg_pool2d,
        "avg_pool2d(Tensor x, int[2] kernel_size, int[2] stride=[], int[2] padding=0, bool count_include_pad=True) "
        "-> Tensor",
        avg_pool2d_cuda, avg_pool2d_meta);
KJIT_OP(max_pool2d_backward,
        "max_pool2d_backward(Tensor grad, Tensor x, int[2] kernel_size, int[2] stride=[], int[2] padding=0) -> Tensor",
        max_pool2d_backward_cuda, max_pool2d_backward_meta);
KJIT_OP(avg_pool2d_backward,
        "avg_pool2d_backward(Tensor grad, Tensor x, int[2] kernel_size, int[2] stride=[], int[2] padding=0, "
        "bool count_include_pad=True) -> Tensor",
        avg_pool2d_backward_cuda, avg_pool2d_backward_meta);
KJIT_OP_AUTOGRAD(max_pool2d, (autograd_kernel<MaxPoolFunction, &max_pool2d_cuda>))
KJIT_OP_AUTOGRAD(avg_pool2d, (autograd_kernel<AvgPoolFunction, &avg_pool2d_cuda>))

}  // namespace kjit::ops
