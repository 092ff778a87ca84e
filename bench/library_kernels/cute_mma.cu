// CuTe: one warp computes C (16x8, fp32) = A (16x16, fp16) * B (8x16, fp16)^T with the SM80 16x8x16 MMA
// atom (mma.sync, also on sm_90), partitioned by a cute::TiledMMA, copied with cute::copy.
#include <cute/arch/mma_sm80.hpp>
#include <cute/atom/mma_atom.hpp>
#include <cute/tensor.hpp>

template <int SCALE>
__global__ void mma_16x8x16(const cute::half_t* a, const cute::half_t* b, float* c) {
  using namespace cute;
  TiledMMA mma = make_tiled_mma(SM80_16x8x16_F32F16F16F32_TN{});
  Tensor A = make_tensor(make_gmem_ptr(a), make_layout(make_shape(Int<16>{}, Int<16>{}), LayoutRight{}));
  Tensor B = make_tensor(make_gmem_ptr(b), make_layout(make_shape(Int<8>{}, Int<16>{}), LayoutRight{}));
  Tensor C = make_tensor(make_gmem_ptr(c), make_layout(make_shape(Int<16>{}, Int<8>{}), LayoutRight{}));
  ThrMMA thr = mma.get_slice(threadIdx.x);
  Tensor fA = thr.partition_fragment_A(A);
  Tensor fB = thr.partition_fragment_B(B);
  Tensor fC = thr.partition_fragment_C(C);
  copy(thr.partition_A(A), fA);
  copy(thr.partition_B(B), fB);
  clear(fC);
  gemm(mma, fA, fB, fC);
  for (int i = 0; i < size(fC); ++i) fC(i) *= SCALE;
  copy(fC, thr.partition_C(C));
}
