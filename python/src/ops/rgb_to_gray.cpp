// kjit::rgb_to_gray(Tensor img) -> Tensor: interleaved uint8 RGB [H, W, 3] or [B, H, W, 3] to gray
// [H, W] / [B, H, W] (kernel_templates/rgb_to_gray.cuh). The image size (H, W) is specialized: one
// compile per distinct size, then cached; the batch is a runtime grid dimension.
#include <ATen/ops/empty.h>

#include <climits>

#include "ops/runtime/op.hpp"

namespace kjit::ops {
namespace {

constexpr const char* kOp = "kjit.ops.rgb_to_gray";
constexpr unsigned kBlockX = 32, kBlockY = 8;
constexpr std::int64_t kMaxGridYZ = 65535;

const KernelFamily& family() {
  static const KernelFamily f(Engine::global(), Template::builtin("rgb_to_gray"), "rgb_to_gray",
                              CompileOptions::library());
  return f;
}

template <class Sizes>
void check_shape(const Sizes& sizes, std::int64_t dim) {
  if ((dim == 3 || dim == 4) && sizes[dim - 1] == 3) return;
  fail_value(kOp,
             "img has shape " + shape_str(sizes) + ": expected interleaved RGB of shape [H, W, 3] or [B, H, W, 3]");
}

at::Tensor rgb_to_gray_cuda(const at::Tensor& img) {
  const int device = device_for(kOp, {{"img", img}});
  check_input(kOp, "img", img, {at::ScalarType::Byte});
  const std::int64_t dim = img.dim();
  check_shape(img.sizes(), dim);
  const std::int64_t H = img.size(dim - 3), W = img.size(dim - 2), B = dim == 4 ? img.size(0) : 1;
  at::Tensor gray = dim == 4 ? new_empty({B, H, W}, img) : new_empty({H, W}, img);
  if (gray.numel() == 0) return gray;
  if (H > INT_MAX || W > INT_MAX || cdiv(H, kBlockY) > kMaxGridYZ)
    fail_value(kOp, "an image of " + c10::str(H) + " x " + c10::str(W) +
                        " pixels is too large: allowed H <= " + c10::str(kMaxGridYZ * kBlockY) +
                        " and W <= " + c10::str(INT_MAX) + "; split the image into tiles");
  LaunchContext ctx(device);
  const TemplateArg targs[2] = {TemplateArg::integer(H), TemplateArg::integer(W)};
  const auto k = kernel_for(family(), targs, device, ctx.compile_forbidden);

  LaunchConfig cfg;
  cfg.block.x = kBlockX;
  cfg.block.y = kBlockY;
  cfg.grid.x = static_cast<unsigned>(cdiv(W, kBlockX));
  cfg.grid.y = static_cast<unsigned>(cdiv(H, kBlockY));
  cfg.stream = ctx.stream;
  const auto* rgb = static_cast<const unsigned char*>(img.const_data_ptr());
  auto* out = static_cast<unsigned char*>(gray.data_ptr());
  // gridDim.z indexes the batch: batches over 65535 images go in chunks.
  for (std::int64_t b0 = 0; b0 < B; b0 += kMaxGridYZ) {
    cfg.grid.z = static_cast<unsigned>(std::min(B - b0, kMaxGridYZ));
    const unsigned char* src = rgb + b0 * H * W * 3;
    unsigned char* dst = out + b0 * H * W;
    launch_kernel(*k, cfg, src, dst);
  }
  return gray;
}

at::Tensor rgb_to_gray_meta(const at::Tensor& img) {
  check_dtype(kOp, "img", img, {at::ScalarType::Byte});
  const std::int64_t dim = img.dim();
  const auto sizes = img.sym_sizes();
  check_shape(sizes, dim);
  if (dim == 4) return at::empty_symint({sizes[0], sizes[1], sizes[2]}, img.options());
  return at::empty_symint({sizes[0], sizes[1]}, img.options());
}

}  // namespace

KJIT_OP(rgb_to_gray, "rgb_to_gray(Tensor img) -> Tensor", rgb_to_gray_cuda, rgb_to_gray_meta);

}  // namespace kjit::ops
