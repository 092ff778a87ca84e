// kjit's Hopper GEMM (sm_90a): TMA loads into 128-byte-swizzled shared memory, warpgroup MMA (wgmma),
// a producer warpgroup and BM / 64 consumer warpgroups (warp specialization), the fused epilogue of
// detail/gemm_epilogue.cuh applied to the accumulators in registers.
//
//   C[m, n] = epilogue(sum_k A[m, k] * B[n, k])      (F.linear's layout: A [M, K], B [N, K], C [M, N])
//
// A and B are read through TMA descriptors the host builds (cuTensorMapEncodeTiled; see
// python/src/ops/gemm.cpp): 3-D tensors {K, rows, batch} of T, a box of {64, BM or BN, 1}, 128-byte
// swizzle, zero fill out of bounds (so M, N and K need not be multiples of the tile). For SWIGLU, B has
// 2N rows (gate rows, then up rows) and each block loads BN gate rows and the BN matching up rows.
// N > 0 / K > 0 fix the sizes at compile time (n_runtime / k_runtime are ignored); 0 takes them from
// n_runtime / k_runtime. M is always a runtime argument.
//
// Launch: persistent, grid (min(tiles, multiprocessors), 1, 1) for the ceil(M / BM) x ceil(N / BN) x batch
// tiles, block 128 * (BM / 64 + 1) threads, dynamic shared memory
// 1024 + STAGES * (BM + BN * (SWIGLU ? 2 : 1)) * 64 * sizeof(T) bytes (the 1024 aligns the swizzled tiles).
// BM is 64 or 128, BN 64, 128, 192 or 256, T __half or __nv_bfloat16.
//
// Pipeline: STAGES shared-memory stages, each guarded by a "full" mbarrier (TMA bytes arrived) and an
// "empty" one (every consumer warp done with it). One producer thread issues the loads; the consumer
// warpgroups each own 64 rows of the tile and run 4 wgmma (k = 16 each) per 64-wide k-tile, keeping one
// k-tile's MMAs in flight while the next stage's are issued. A block loops over tiles (in groups of 8 tile
// rows), the stages one ring over all of them: the next tile's loads overlap this tile's epilogue.
#pragma once

#include "detail/gemm_epilogue.cuh"
#include "detail/wgmma.cuh"

namespace kjit_sm90 {

// A CUtensorMap as a kernel parameter (128 bytes, 64-byte aligned; the host passes the driver's).
struct alignas(64) TmaDesc {
  unsigned long long words[16];
};

__device__ __forceinline__ unsigned smem_address(const void* p) {
  unsigned r;
  asm("{\n.reg .u64 a;\ncvta.to.shared.u64 a, %1;\ncvt.u32.u64 %0, a;\n}\n" : "=r"(r) : "l"(p));
  return r;
}

__device__ __forceinline__ void barrier_init(unsigned bar, unsigned count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
__device__ __forceinline__ void barrier_expect_bytes(unsigned bar, unsigned bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}
__device__ __forceinline__ void barrier_arrive(unsigned bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
__device__ __forceinline__ void barrier_wait(unsigned bar, unsigned parity) {
  unsigned done = 0;
  while (!done)
    asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
                 : "=r"(done)
                 : "r"(bar), "r"(parity)
                 : "memory");
}

// One box of a 3-D tensor map into shared memory; completes `bar`'s transaction bytes.
__device__ __forceinline__ void tma_load(unsigned dst, const TmaDesc* map, unsigned bar, int k, int row, int batch) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4, %5}], "
      "[%2];\n" ::"r"(dst),
      "l"(reinterpret_cast<unsigned long long>(map)), "r"(bar), "r"(k), "r"(row), "r"(batch)
      : "memory");
}

// The wgmma descriptor of a K-major tile of rows of 64 16-bit elements (128 bytes) with 128-byte swizzle:
// 8-row groups 1024 bytes apart (stride byte offset), swizzle mode 1.
__device__ __forceinline__ unsigned long long smem_descriptor(unsigned address) {
  return static_cast<unsigned long long>((address & 0x3FFFF) >> 4) | (1ull << 16) | (64ull << 32) | (1ull << 62);
}

}  // namespace kjit_sm90

namespace kjit_sm90 {

// The tile of linear index `t` (of tiles_m x tiles_n x batch): tiles in groups of GROUP_M tile rows, tile
// rows fastest inside a group, so that the blocks at work at once share a few rows of A and columns of B
// in L2 (rather than all of B streaming past each row of A).
struct Tile {
  int m0, n0, z;
};
template <int BM, int BN>
__device__ __forceinline__ Tile tile_of(int t, int tiles_m, int tiles_n) {
  constexpr int GROUP_M = 8;
  const int per_matrix = tiles_m * tiles_n;
  const int z = t / per_matrix, linear = t % per_matrix;
  const int first_m = linear / (GROUP_M * tiles_n) * GROUP_M;
  const int group_rows = min(tiles_m - first_m, GROUP_M);
  const int in_group = linear % (GROUP_M * tiles_n);
  return {(first_m + in_group % group_rows) * BM, in_group / group_rows * BN, z};
}

}  // namespace kjit_sm90

template <typename T, int N, int K, int BM, int BN, int STAGES, int ACT, bool HAS_BIAS, bool HAS_RESIDUAL, bool AUX,
          bool SWIGLU>
__global__ void __launch_bounds__(128 * (BM / 64 + 1), 1)
    gemm_wgmma(const __grid_constant__ kjit_sm90::TmaDesc tma_a, const __grid_constant__ kjit_sm90::TmaDesc tma_b,
               T* __restrict__ c, int m, int n_runtime, int k_runtime, long long ldc, long long batch_c,
               const T* __restrict__ bias, const T* residual, T* aux, long long ld_residual, long long ld_aux,
               long long batch_residual, long long batch_aux, float scale, int batch) {
  static_assert(sizeof(T) == 2, "the sm_90 GEMM takes __half or __nv_bfloat16");
  static_assert(BM == 64 || BM == 128, "BM is 64 or 128 (one or two consumer warpgroups)");
  static_assert(BN == 64 || BN == 128 || BN == 192 || BN == 256, "BN is 64, 128, 192 or 256");
  static_assert(STAGES >= 2, "at least two stages");
  constexpr int BK = 64;  // one 128-byte swizzle row of 16-bit elements
  constexpr int CONSUMERS = BM / 64;
  constexpr unsigned A_BYTES = BM * BK * sizeof(T);
  constexpr unsigned B_BYTES = BN * BK * sizeof(T);
  constexpr unsigned STAGE_BYTES = A_BYTES + (SWIGLU ? 2 : 1) * B_BYTES;
  constexpr int R = BN / 2;  // accumulator registers per thread and set

  const int n = N > 0 ? N : n_runtime;
  const int k = K > 0 ? K : k_runtime;
  const int k_tiles = (k + BK - 1) / BK;
  const int tiles_m = (m + BM - 1) / BM, tiles_n = (n + BN - 1) / BN;
  const int tiles = tiles_m * tiles_n * batch;

  extern __shared__ unsigned char shared_raw[];
  __shared__ alignas(8) unsigned long long full[STAGES], empty[STAGES];
  const unsigned base = (kjit_sm90::smem_address(shared_raw) + 1023u) & ~1023u;
  const unsigned full0 = kjit_sm90::smem_address(full), empty0 = kjit_sm90::smem_address(empty);

  if (threadIdx.x == 0) {
    for (int s = 0; s < STAGES; ++s) {
      kjit_sm90::barrier_init(full0 + 8 * s, 1);
      kjit_sm90::barrier_init(empty0 + 8 * s, CONSUMERS * 4);
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();

  // Persistent: each block takes tiles blockIdx.x, + gridDim.x, ...; the stages are one ring over all of
  // them (`it` counts k-tiles across tiles), so the producer loads the next tile while the consumers
  // finish this one.
  const int warpgroup = threadIdx.x / 128;
  const int t = threadIdx.x % 128;
  if (warpgroup == 0) {  // the producer
    asm volatile("setmaxnreg.dec.sync.aligned.u32 40;\n");
    if (t == 0) {
      int it = 0;
      for (int tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
        const kjit_sm90::Tile tl = kjit_sm90::tile_of<BM, BN>(tile, tiles_m, tiles_n);
        for (int kt = 0; kt < k_tiles; ++kt, ++it) {
          const int s = it % STAGES, round = it / STAGES;
          if (round > 0) kjit_sm90::barrier_wait(empty0 + 8 * s, (round - 1) & 1);
          const unsigned full_s = full0 + 8 * s, dst = base + s * STAGE_BYTES;
          kjit_sm90::barrier_expect_bytes(full_s, STAGE_BYTES);
          kjit_sm90::tma_load(dst, &tma_a, full_s, kt * BK, tl.m0, tl.z);
          kjit_sm90::tma_load(dst + A_BYTES, &tma_b, full_s, kt * BK, tl.n0, tl.z);
          if constexpr (SWIGLU) kjit_sm90::tma_load(dst + A_BYTES + B_BYTES, &tma_b, full_s, kt * BK, n + tl.n0, tl.z);
        }
      }
    }
    return;
  }

  asm volatile("setmaxnreg.inc.sync.aligned.u32 232;\n");
  const int consumer = warpgroup - 1;  // owns rows m0 + 64 * consumer ... + 63 of each tile
  const int warp = t / 32, lane = t % 32;
  float acc[R];
  float acc_up[SWIGLU ? R : 1];
  int it = 0;
  for (int tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
    const kjit_sm90::Tile tl = kjit_sm90::tile_of<BM, BN>(tile, tiles_m, tiles_n);
#pragma unroll
    for (int i = 0; i < R; ++i) acc[i] = 0.f;
#pragma unroll
    for (int i = 0; i < (SWIGLU ? R : 1); ++i) acc_up[i] = 0.f;
    for (int kt = 0; kt < k_tiles; ++kt, ++it) {
      const int s = it % STAGES, round = it / STAGES;
      kjit_sm90::barrier_wait(full0 + 8 * s, round & 1);
      const unsigned a_tile = base + s * STAGE_BYTES + consumer * 64 * BK * sizeof(T);
      const unsigned b_tile = base + s * STAGE_BYTES + A_BYTES;
      kjit_wgmma::fence_operands(acc);
      if constexpr (SWIGLU) kjit_wgmma::fence_operands(acc_up);
      kjit_wgmma::fence();
#pragma unroll
      for (int kk = 0; kk < BK / 16; ++kk) {
        const unsigned long long da = kjit_sm90::smem_descriptor(a_tile + kk * 32);
        kjit_wgmma::Mma<T, BN>::run(acc, da, kjit_sm90::smem_descriptor(b_tile + kk * 32), 1);
        if constexpr (SWIGLU)
          kjit_wgmma::Mma<T, BN>::run(acc_up, da, kjit_sm90::smem_descriptor(b_tile + B_BYTES + kk * 32), 1);
      }
      kjit_wgmma::commit();
      // Keep this k-tile's MMAs in flight; once the previous k-tile's are done, its stage goes back.
      kjit_wgmma::wait<1>();
      if (kt > 0 && lane == 0) kjit_sm90::barrier_arrive(empty0 + 8 * ((it - 1) % STAGES));
    }
    kjit_wgmma::wait<0>();
    kjit_wgmma::fence_operands(acc);
    if constexpr (SWIGLU) kjit_wgmma::fence_operands(acc_up);
    if (k_tiles > 0 && lane == 0) kjit_sm90::barrier_arrive(empty0 + 8 * ((it - 1) % STAGES));

    // The accumulator layout of wgmma m64nN: thread t holds, for each 8 columns i, rows
    // 16 * warp + lane / 4 (+ 8) at columns 8 * i + 2 * (lane % 4) (+ 1).
    const kjit_gemm::Epilogue<T> e{bias,
                                   residual ? residual + tl.z * batch_residual : residual,
                                   aux ? aux + tl.z * batch_aux : aux,
                                   ld_residual,
                                   ld_aux,
                                   scale};
    T* cz = c + tl.z * batch_c;
    const int row = tl.m0 + consumer * 64 + warp * 16 + lane / 4;
#pragma unroll
    for (int i = 0; i < BN / 8; ++i) {
      const int col = tl.n0 + 8 * i + 2 * (lane % 4);
      if constexpr (SWIGLU) {
        kjit_gemm::finish_swiglu_pair<T, HAS_RESIDUAL, AUX>(e, cz, ldc, row, col, m, n, acc[4 * i], acc[4 * i + 1],
                                                            acc_up[4 * i], acc_up[4 * i + 1]);
        kjit_gemm::finish_swiglu_pair<T, HAS_RESIDUAL, AUX>(e, cz, ldc, row + 8, col, m, n, acc[4 * i + 2],
                                                            acc[4 * i + 3], acc_up[4 * i + 2], acc_up[4 * i + 3]);
      } else {
        kjit_gemm::finish_pair<T, ACT, HAS_BIAS, HAS_RESIDUAL, AUX>(e, cz, ldc, row, col, m, n, acc[4 * i],
                                                                    acc[4 * i + 1]);
        kjit_gemm::finish_pair<T, ACT, HAS_BIAS, HAS_RESIDUAL, AUX>(e, cz, ldc, row + 8, col, m, n, acc[4 * i + 2],
                                                                    acc[4 * i + 3]);
      }
    }
  }
}
