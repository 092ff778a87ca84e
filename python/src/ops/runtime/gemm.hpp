// One GEMM of kjit's matrix ops (matmul.cpp) in F.linear's layout, planned and launched:
//
//   C[z, m, n] = epilogue(sum_k A[z, m, k] * B[z, n, k])      (kernel_templates/detail/gemm_epilogue.cuh)
//
// The kernel: on an sm_90 device, kernel_templates/gemm_sm90.cuh (TMA + wgmma, compiled for sm_90a) for
// 16-bit types and M > 16, and kernel_templates/gemm.cuh (mma.sync) for M <= 16 (its in-block split-K form),
// for float32 (TF32: the caller checks that the user allows it) and on every other architecture. The wgmma kernel
// splits K across blocks where its tiles are too few for the multiprocessors (gemm.cuh's split: kMmaSplitK). N and K
// are template arguments (through the shape policy: past KJIT_MAX_SPECIALIZATIONS distinct values, the generic
// variant), M a runtime one: one kernel serves every batch size of an M bucket. The tile configuration comes from a
// heuristic per (arch, M bucket, N, K, dtype, epilogue); with KJIT_TUNE=1 kjit times the candidates once and keeps the
// fastest on disk (kjit::Choices), where KJIT_RECORD records it, `kjit warm` installs it and strict mode replays it.
#pragma once

#include <cstdint>
#include <string>

#include "ops/runtime/checks.hpp"

namespace kjit::ops {

enum class Activation : int { None = 0, Relu = 1, Gelu = 2, GeluTanh = 3, Silu = 4 };

// "relu" -> Relu ...; ValueError naming the allowed values otherwise (None: Activation::None).
Activation parse_activation(const char* op, const std::optional<c10::string_view>& name);
const char* activation_name(Activation a);

// A matrix of the GEMM: rows of contiguous elements, `ld` elements apart; `batch` elements between
// matrices of a batch (0 for one matrix shared by the whole batch). An operand is K-major (A [M, K], B [N, K]:
// rows of K) or, with mn_major, read in place from its transpose (A^T [K, M], B^T [K, N]: rows of M or N,
// `ld` apart), the layout the backward's GEMMs have their saved tensors in; only where gemm_reads_mn_major.
struct GemmMatrix {
  const void* ptr = nullptr;
  std::int64_t ld = 0;
  std::int64_t batch = 0;
  bool mn_major = false;
};

struct Gemm {
  at::ScalarType dtype = at::ScalarType::BFloat16;  // of A, B, C and the epilogue's tensors (Float: TF32)
  std::int64_t m = 0, n = 0, k = 0, batch = 1;
  // K as an M- / N-major operand holds it (its rows of K; the kernel reads zeros past them): k is padded to a
  // multiple of 8 where a K-major operand was, which the M- / N-major one is not. 0: k.
  std::int64_t k_rows = 0;
  GemmMatrix a;                // [M, K]
  GemmMatrix b;                // [N, K] ([2N, K] for SwiGLU: gate rows, then up rows)
  GemmMatrix c;                // [M, N], written
  GemmMatrix residual;         // [M, N] or null
  GemmMatrix aux;              // [M, N] ([M, 2N] for SwiGLU) or null: the pre-activation, written
  const void* bias = nullptr;  // [N] or null
  Activation act = Activation::None;
  bool swiglu = false;
  float scale = 1.f;
};

// The sizes of the matrix ops' GEMMs, stated once for the CUDA path and the Meta (fake) kernels, so that
// torch.compile sees the launch's error: M, N and K each at most kMaxGemmDim (2^31 - 8: the kernels index
// rows and columns with 32-bit integers, and K is padded to a multiple of 8 for them) and at most
// kMaxGemmBatch matrices in a batch (a launch's grid.z). N counts B's rows: 2F for SwiGLU's w_gate_up.
// ValueError naming `op` otherwise. A symbolic size (torch.compile's dynamic shapes) is left to the launch,
// which checks its value.
constexpr std::int64_t kMaxGemmDim = (std::int64_t{1} << 31) - 8;
constexpr std::int64_t kMaxGemmBatch = 65535;
void check_gemm_sizes(const char* op, const c10::SymInt& m, const c10::SymInt& n, const c10::SymInt& k,
                      const c10::SymInt& batch = c10::SymInt(1));

// What A and B must satisfy (the kernels read them 16 bytes at a time, through TMA on sm_90): K a multiple
// of 8, 16-byte aligned data, row and batch strides multiples of 8 elements and not 0 (a broadcast view is
// copied: a TMA map has no stride-0 dim).
bool gemm_operand_ok(const at::Tensor& t);

// Whether the kernel `g` runs on (by its dtype, M, SwiGLU and the device's architecture) reads M- / N-major
// operands in place: gemm_sm90.cuh's (sm_90, 16-bit, M > 16, not SwiGLU). Elsewhere such an operand is copied
// K-major.
bool gemm_reads_mn_major(const Gemm& g, int device);

// What an M- / N-major operand t [rows, K] (or [B, rows, K]) must satisfy to be read in place (through TMA):
// rows contiguous (stride(-2) 1), rows of K 16-byte aligned (stride(-1) a multiple of 8) in 16-byte aligned
// data, K > 0, and matrices of a batch a multiple of 8 elements apart (not 0: a broadcast batch is copied).
bool gemm_mn_operand_ok(const at::Tensor& t);

// Plans and launches `g` on ctx.stream (every pointer on `device`). `op` names the caller in errors.
void run_gemm(const char* op, const Gemm& g, int device, const LaunchContext& ctx);

// ---- operands: what the matrix ops and the convolutions (matmul.cpp, conv.cpp) hand to run_gemm ----------

// The dtypes of the GEMM kernels: bfloat16, float16, and float32 computed as TF32 (10-bit mantissa products,
// float32 accumulation), only where the user allows TF32 for the op's kind, as PyTorch's vendor libraries do:
// torch.backends.cuda.matmul.allow_tf32 for matrix products, torch.backends.cudnn.allow_tf32 for convolutions
// (`convolution`). TypeError naming the flag otherwise.
void check_matrix_dtype(const char* op, const char* arg, const at::Tensor& t, bool convolution = false);

// K as the kernels take it: a multiple of 8, at least 8.
std::int64_t padded_k(std::int64_t k);

// A contiguous-rows matrix t [rows, cols] or [B, rows, cols] as a GemmMatrix.
GemmMatrix gemm_matrix(const at::Tensor& t);

// An operand t [rows, K] (or [B, rows, K]) of `g` (its dtype, sizes, K padded, k_rows and epilogue set) as g's
// kernel reads it: `t` itself where it can (K-major, or M- / N-major, a transpose's view, where the kernel
// reads those in place), else a contiguous K-major copy with K padded with zeros to g.k, kept alive in `held`.
GemmMatrix gemm_operand(const Gemm& g, int device, const at::Tensor& t, at::Tensor& held);

// C = A @ B.T for A [M, K] / [Bt, M, K] and B [N, K] / [Bt, N, K] of any strides: a fresh contiguous C.
at::Tensor mm_tn(const char* op, const at::Tensor& a, const at::Tensor& b, int device, const LaunchContext& ctx);

}  // namespace kjit::ops
