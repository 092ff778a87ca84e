// The operands of kjit's GEMM as the matrix ops and the convolutions build them (gemm.hpp): the dtype rule,
// K's padding, views read in place or copied into a layout the kernels read, and C = A @ B.T.
#include <ATen/Context.h>
#include <ATen/ops/constant_pad_nd.h>

#include <algorithm>

#include "ops/runtime/gemm.hpp"
#include "ops/runtime/geometry.hpp"
#include "ops/runtime/launch_context.hpp"
#include "ops/runtime/tensors.hpp"

namespace kjit::ops {
namespace {

constexpr std::initializer_list<at::ScalarType> kMatrixTypes = {at::ScalarType::BFloat16, at::ScalarType::Half,
                                                                at::ScalarType::Float};

// Elements between the matrices of a batch of t [B, rows, cols] (0 for one matrix: a batch of one's stride
// is never read, and may be anything).
std::int64_t batch_stride(const at::Tensor& t) { return t.dim() == 3 && t.size(0) > 1 ? t.stride(0) : 0; }

}  // namespace

void check_matrix_dtype(const char* op, const char* arg, const at::Tensor& t, bool convolution) {
  const bool allowed = convolution ? at::globalContext().allowTF32CuDNN() : at::globalContext().allowTF32CuBLAS();
  if (t.scalar_type() == at::ScalarType::Float && !allowed) {
    const std::string flag = convolution ? "torch.backends.cudnn.allow_tf32" : "torch.backends.cuda.matmul.allow_tf32";
    throw TypeError(std::string(op) + ": " + arg +
                    " is float32, which kjit's matrix kernels compute as TF32 (float32 accumulation, inputs rounded "
                    "to 10 mantissa bits), and TF32 is off (" +
                    flag + " is False); allow it with " + flag + " = True, or convert with " + arg +
                    ".to(torch.bfloat16)");
  }
  check_dtype(op, arg, t, kMatrixTypes);
}

std::int64_t padded_k(std::int64_t k) { return std::max<std::int64_t>(8, cdiv(k, 8) * 8); }

GemmMatrix gemm_matrix(const at::Tensor& t) {
  GemmMatrix m;
  m.ptr = t.const_data_ptr();
  m.ld = t.dim() >= 2 ? t.stride(-2) : t.size(-1);
  m.batch = batch_stride(t);
  return m;
}

GemmMatrix gemm_operand(const Gemm& g, int device, const at::Tensor& t, at::Tensor& held) {
  held = t;  // a reshape's copy included
  const bool k_major = t.size(-1) == g.k && gemm_operand_ok(t);
  if (!k_major && gemm_mn_operand_ok(t) && gemm_reads_mn_major(g, device))
    return GemmMatrix{t.const_data_ptr(), t.stride(-1), batch_stride(t), true};
  if (!k_major) {
    held = t.contiguous();
    if (g.k != t.size(-1)) held = at::constant_pad_nd(held, {0, g.k - t.size(-1)}, 0);
  }
  return gemm_matrix(held);
}

at::Tensor mm_tn(const char* op, const at::Tensor& a, const at::Tensor& b, int device, const LaunchContext& ctx) {
  const bool batched = a.dim() == 3;
  at::Tensor c = batched ? new_empty({a.size(0), a.size(1), b.size(-2)}, a) : new_empty({a.size(0), b.size(0)}, a);
  Gemm g;
  g.dtype = a.scalar_type();
  g.batch = batched ? a.size(0) : 1;
  g.m = a.size(-2);
  g.n = b.size(-2);
  g.k = padded_k(a.size(-1));
  g.k_rows = a.size(-1);
  at::Tensor a_held, b_held;
  g.a = gemm_operand(g, device, a, a_held);
  g.b = gemm_operand(g, device, b, b_held);
  g.c = gemm_matrix(c);
  run_gemm(op, g, device, ctx);
  return c;
}

}  // namespace kjit::ops
