// kjit's Hopper GEMM (sm_90a): TMA loads into 128-byte-swizzled shared memory, warpgroup MMA (wgmma),
// a producer warpgroup and consumer warpgroups (warp specialization), the fused epilogue of
// detail/gemm_epilogue.cuh applied to the accumulators in registers, the result stored through shared
// memory by TMA.
//
//   C[m, n] = epilogue(sum_k A[m, k] * B[n, k])      (F.linear's layout: A [M, K], B [N, K], C [M, N])
//
// A, B and C are read and written through TMA descriptors the host builds (cuTensorMapEncodeTiled; see
// python/src/ops/runtime/gemm.cpp): 3-D tensors {K, rows, batch} of T for A and B, a box of {64, BM or
// BN, 1}, and {N, M, batch} for C, a box of {64, 64, 1}; 128-byte swizzle, zero fill out of bounds on load
// and no write out of bounds on store (so M, N and K need not be multiples of the tile). For SWIGLU, B
// has 2N rows (gate rows, then up rows) and each block loads BN gate rows and the BN matching up rows.
// N > 0 / K > 0 fix the sizes at compile time (n_runtime / k_runtime are ignored); 0 takes them from
// n_runtime / k_runtime. M is always a runtime argument. TMA_STORE false (C's rows not 16-byte aligned)
// stores from registers instead, and tma_c is not read.
//
// A_MN / B_MN: the operand is read in place from its transpose, M- / N-major: A^T [K, M] (B^T [K, N]) with
// M (N) contiguous, as the backward's GEMMs have their saved tensors (dX = dY @ W reads W [N_fwd, K_fwd] as
// an N-major B; dW = dY^T @ X reads dY and X as an M-major A and an N-major B). Its tensor map is {M (N), K,
// batch} with a box of {64, 64, 1}: a stage holds BM / 64 (BN / 64) such boxes of 64 k-rows, 8 KB apart,
// which wgmma reads transposed (imm-trans-a / -b), 16 k-rows (2 KB) per k-step. Not with SWIGLU.
//
// Two schedules of the consumer warpgroups over a block's tiles:
// - cooperative (PINGPONG false): BM / 64 consumers share each BM x BN tile, 64 rows each;
// - ping-pong (PINGPONG true): two consumers take turns, each a whole BM x BN tile of its own (tiles
//   0, 2, 4, ... of the block to the first, 1, 3, 5, ... to the second); a consumer's MMAs start when
//   the other's are all issued, so one's epilogue runs while the other's MMAs keep the tensor cores busy.
//
// Launch: persistent, grid (min(tiles, multiprocessors), 1, 1) for the ceil(M / BM) x ceil(N / BN) x batch
// tiles, block 128 * (CONSUMERS + 1) threads (gemm_threads below), dynamic shared memory
// 1024 + STAGES * (BM + BN * (SWIGLU ? 2 : 1)) * 64 * sizeof(T) bytes (the 1024 aligns the swizzled tiles),
// plus, with TMA_STORE, (PINGPONG ? 2 : 1) * BM * BN * sizeof(T) for the output tiles.
// BM is 64 or 128, BN 64, 128, 192 or 256, T __half or __nv_bfloat16.
//
// Pipeline: STAGES shared-memory stages, each guarded by a "full" mbarrier (TMA bytes arrived) and an
// "empty" one (every warp of the consumers of its tile done with it). One producer thread issues the
// loads of the block's tiles in order; a consumer runs 4 wgmma (k = 16 each) per 64-wide k-tile and 64
// rows, keeping one k-tile's MMAs in flight while the next stage's are issued. A block takes its tiles in
// groups of 8 tile rows; the stages are one ring over all of them: the next tile's loads overlap this
// tile's epilogue.
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
// 8-row groups 1024 bytes apart (stride byte offset), swizzle mode 1. MN: an M- / N-major tile of boxes of 64
// k-rows of 64 16-bit elements (TMA's 128-byte swizzle): 8-k-row groups 1024 bytes apart (stride byte
// offset), boxes of the next 64 M / N 8 KB apart (leading byte offset).
template <bool MN = false>
__device__ __forceinline__ unsigned long long smem_descriptor(unsigned address) {
  return static_cast<unsigned long long>((address & 0x3FFFF) >> 4) | ((MN ? 512ull : 1ull) << 16) | (64ull << 32) |
         (1ull << 62);
}

// Named barriers of some warps of the block (id 1-15; 0 is __syncthreads): `count` threads in all, a
// multiple of 32; arrive does not wait.
__device__ __forceinline__ void named_sync(unsigned id, unsigned count) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(count) : "memory");
}
__device__ __forceinline__ void named_arrive(unsigned id, unsigned count) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(count) : "memory");
}

// One box of shared memory to a 3-D tensor (TMA store; nothing out of the tensor's bounds is written), in
// this thread's current bulk group.
__device__ __forceinline__ void tma_store(const TmaDesc* map, unsigned src, int col, int row, int batch) {
  asm volatile("cp.async.bulk.tensor.3d.global.shared::cta.bulk_group [%0, {%2, %3, %4}], [%1];\n" ::"l"(
                   reinterpret_cast<unsigned long long>(map)),
               "r"(src), "r"(col), "r"(row), "r"(batch)
               : "memory");
}
__device__ __forceinline__ void bulk_commit() { asm volatile("cp.async.bulk.commit_group;\n" ::: "memory"); }
// Until this thread's bulk groups have read their shared memory (it may be written again) / are done.
__device__ __forceinline__ void bulk_wait_read() { asm volatile("cp.async.bulk.wait_group.read 0;\n" ::: "memory"); }
__device__ __forceinline__ void bulk_wait() { asm volatile("cp.async.bulk.wait_group 0;\n" ::: "memory"); }
// Makes this thread's shared-memory writes visible to the async proxy (a TMA store that reads them).
__device__ __forceinline__ void fence_async_shared() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }

// The byte offset, in a 128-byte-swizzled box of 64 x 64 16-bit elements (8 KB), of element (r, c): the
// 16-byte chunk c / 8 of row r moves to chunk (c / 8) ^ (r % 8) (TMA's 128-byte swizzle, so that the 8
// rows a warp writes at once fall in distinct banks).
__device__ __forceinline__ unsigned swizzled_offset(int r, int c) {
  return static_cast<unsigned>(r * 128 + ((((c >> 3) ^ r) & 7) << 4) + (c & 7) * 2);
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

// Consumer warpgroups of a schedule (a block has one more: the producer).
template <bool PINGPONG, int BM>
__host__ __device__ constexpr int gemm_consumers() {
  return PINGPONG ? 2 : BM / 64;
}

template <typename T, int N, int K, int BM, int BN, int STAGES, bool PINGPONG, bool TMA_STORE, int ACT, bool HAS_BIAS,
          bool HAS_RESIDUAL, bool AUX, bool SWIGLU, bool A_MN = false, bool B_MN = false>
__global__ void __launch_bounds__(128 * (gemm_consumers<PINGPONG, BM>() + 1), 1)
    gemm_wgmma(const __grid_constant__ kjit_sm90::TmaDesc tma_a, const __grid_constant__ kjit_sm90::TmaDesc tma_b,
               const __grid_constant__ kjit_sm90::TmaDesc tma_c, T* __restrict__ c, int m, int n_runtime, int k_runtime,
               long long ldc, long long batch_c, const T* __restrict__ bias, const T* residual, T* aux,
               long long ld_residual, long long ld_aux, long long batch_residual, long long batch_aux, float scale,
               int batch, int splits, float* __restrict__ partials, int* __restrict__ arrivals) {
  static_assert(sizeof(T) == 2, "the sm_90 GEMM takes __half or __nv_bfloat16");
  static_assert(BM == 64 || BM == 128, "BM is 64 or 128");
  static_assert(BN == 64 || BN == 128 || BN == 192 || BN == 256, "BN is 64, 128, 192 or 256");
  static_assert(STAGES >= 2, "at least two stages");
  static_assert(!(SWIGLU && (A_MN || B_MN)), "SWIGLU reads K-major operands");
  constexpr int BK = 64;  // one 128-byte swizzle row of 16-bit elements
  constexpr int CONSUMERS = gemm_consumers<PINGPONG, BM>();
  constexpr int ROWS = PINGPONG ? BM : 64;  // rows of a tile one consumer computes
  constexpr int MMAS_M = ROWS / 64;         // 64-row MMAs per k-step and consumer
  constexpr unsigned A_BYTES = BM * BK * sizeof(T);
  constexpr unsigned B_BYTES = BN * BK * sizeof(T);
  constexpr unsigned STAGE_BYTES = A_BYTES + (SWIGLU ? 2 : 1) * B_BYTES;
  constexpr unsigned C_BYTES = ROWS * BN * sizeof(T);  // one consumer's output tile in shared memory
  constexpr int R = BN / 2;                            // accumulator registers per thread, MMA and set
  static_assert(MMAS_M * R * (SWIGLU ? 2 : 1) <= 128, "at most 128 accumulators per thread");

  const int n = N > 0 ? N : n_runtime;
  const int k = K > 0 ? K : k_runtime;
  // Split-K: each tile's k-tiles in `splits` parts of part_k_tiles (the last part's past K read as zeros),
  // the units of work; without it, one part of all k-tiles.
  const int part_k_tiles = ((k + BK - 1) / BK + splits - 1) / splits;
  const int tiles_m = (m + BM - 1) / BM, tiles_n = (n + BN - 1) / BN;
  const int units = tiles_m * tiles_n * batch * splits;
  // This block's units: blockIdx.x, + gridDim.x, ...; the q-th of them starts at k-tile q * part_k_tiles
  // of the ring. Unit u is part u % splits of tile u / splits.
  const int block_units = static_cast<int>(blockIdx.x) < units ? (units - 1 - blockIdx.x) / gridDim.x + 1 : 0;

  extern __shared__ unsigned char shared_raw[];
  __shared__ alignas(8) unsigned long long full[STAGES], empty[STAGES];
  __shared__ int last_part[CONSUMERS];  // split-K: whether a consumer's part of a tile was the last one done
  const unsigned base = (kjit_sm90::smem_address(shared_raw) + 1023u) & ~1023u;
  const unsigned full0 = kjit_sm90::smem_address(full), empty0 = kjit_sm90::smem_address(empty);

  if (threadIdx.x == 0) {
    for (int s = 0; s < STAGES; ++s) {
      kjit_sm90::barrier_init(full0 + 8 * s, 1);
      kjit_sm90::barrier_init(empty0 + 8 * s, (PINGPONG ? 1 : CONSUMERS) * 4);
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();

  const int warpgroup = threadIdx.x / 128;
  const int t = threadIdx.x % 128;
  if (warpgroup == 0) {  // the producer
    asm volatile("setmaxnreg.dec.sync.aligned.u32 40;\n");
    if (t == 0) {
      int s = 0, round = 0;
      for (int q = 0; q < block_units; ++q) {
        const int unit = blockIdx.x + q * gridDim.x;
        const kjit_sm90::Tile tl = kjit_sm90::tile_of<BM, BN>(unit / splits, tiles_m, tiles_n);
        const int k0 = unit % splits * part_k_tiles * BK;
        for (int kt = 0; kt < part_k_tiles; ++kt) {
          if (round > 0) kjit_sm90::barrier_wait(empty0 + 8 * s, (round - 1) & 1);
          const unsigned full_s = full0 + 8 * s, dst = base + s * STAGE_BYTES;
          kjit_sm90::barrier_expect_bytes(full_s, STAGE_BYTES);
          const int kc = k0 + kt * BK;
          if constexpr (A_MN) {  // BM / 64 boxes of {64 rows of A, 64 k}, 8 KB each
#pragma unroll
            for (int j = 0; j < BM / 64; ++j)
              kjit_sm90::tma_load(dst + j * 8192, &tma_a, full_s, tl.m0 + 64 * j, kc, tl.z);
          } else {
            kjit_sm90::tma_load(dst, &tma_a, full_s, kc, tl.m0, tl.z);
          }
          if constexpr (B_MN) {
#pragma unroll
            for (int j = 0; j < BN / 64; ++j)
              kjit_sm90::tma_load(dst + A_BYTES + j * 8192, &tma_b, full_s, tl.n0 + 64 * j, kc, tl.z);
          } else {
            kjit_sm90::tma_load(dst + A_BYTES, &tma_b, full_s, kc, tl.n0, tl.z);
          }
          if constexpr (SWIGLU)
            kjit_sm90::tma_load(dst + A_BYTES + B_BYTES, &tma_b, full_s, k0 + kt * BK, n + tl.n0, tl.z);
          if (++s == STAGES) s = 0, ++round;
        }
      }
    }
    return;
  }

  asm volatile("setmaxnreg.inc.sync.aligned.u32 232;\n");
  const int consumer = warpgroup - 1;
  const int warp = t / 32, lane = t % 32;
  const int row0 = PINGPONG ? 0 : consumer * 64;  // this consumer's first row in a tile
  const unsigned c_tile = base + STAGES * STAGE_BYTES + consumer * C_BYTES;
  float acc[MMAS_M][R];
  float acc_up[MMAS_M][SWIGLU ? R : 1];
  for (int q = PINGPONG ? consumer : 0; q < block_units; q += PINGPONG ? 2 : 1) {
    const int unit = blockIdx.x + q * gridDim.x, tile = unit / splits, part = unit % splits;
    const kjit_sm90::Tile tl = kjit_sm90::tile_of<BM, BN>(tile, tiles_m, tiles_n);
#pragma unroll
    for (int j = 0; j < MMAS_M; ++j) {
#pragma unroll
      for (int i = 0; i < R; ++i) acc[j][i] = 0.f;
#pragma unroll
      for (int i = 0; i < (SWIGLU ? R : 1); ++i) acc_up[j][i] = 0.f;
    }
    // Ping-pong: the other consumer has issued all its MMAs of tile q - 1 (and so waited for every stage
    // before this tile's: a stage's "full" phase seen here is this tile's, never one two rounds old).
    if (PINGPONG && q > 0) kjit_sm90::named_sync(1 + consumer, 256);
    const long long first = static_cast<long long>(q) * part_k_tiles;
    int s = static_cast<int>(first % STAGES), round = static_cast<int>((first / STAGES) & 1);
    int previous = -1;  // the stage of the k-tile before, given back once its MMAs are done
    for (int kt = 0; kt < part_k_tiles; ++kt) {
      kjit_sm90::barrier_wait(full0 + 8 * s, round);
      const unsigned a_tile = base + s * STAGE_BYTES + row0 * BK * sizeof(T);
      const unsigned b_tile = base + s * STAGE_BYTES + A_BYTES;
#pragma unroll
      for (int j = 0; j < MMAS_M; ++j) {
        kjit_wgmma::fence_operands(acc[j]);
        if constexpr (SWIGLU) kjit_wgmma::fence_operands(acc_up[j]);
      }
      kjit_wgmma::fence();
#pragma unroll
      for (int kk = 0; kk < BK / 16; ++kk) {
        // A k-step is 16 elements of a K-major row (32 bytes) or 16 k-rows of an M- / N-major box (2 KB); a
        // 64-row MMA's A is the next 64 rows (K-major) or the next box (M-major): 8 KB either way.
        constexpr unsigned A_STEP = A_MN ? 2048 : 32, B_STEP = B_MN ? 2048 : 32;
        const unsigned long long db = kjit_sm90::smem_descriptor<B_MN>(b_tile + kk * B_STEP);
#pragma unroll
        for (int j = 0; j < MMAS_M; ++j) {
          const unsigned long long da =
              kjit_sm90::smem_descriptor<A_MN>(a_tile + j * 64 * BK * sizeof(T) + kk * A_STEP);
          kjit_wgmma::Mma<T, BN, A_MN, B_MN>::run(acc[j], da, db, 1);
          if constexpr (SWIGLU)
            kjit_wgmma::Mma<T, BN>::run(acc_up[j], da, kjit_sm90::smem_descriptor(b_tile + B_BYTES + kk * 32), 1);
        }
      }
      kjit_wgmma::commit();
      // Keep this k-tile's MMAs in flight; once the previous k-tile's are done, its stage goes back.
      kjit_wgmma::wait<1>();
      if (previous >= 0 && lane == 0) kjit_sm90::barrier_arrive(empty0 + 8 * previous);
      previous = s;
      if (++s == STAGES) s = 0, round ^= 1;
    }
    // Ping-pong: the other consumer's MMAs of tile q + 1 may start now, beside this tile's epilogue.
    if (PINGPONG && q + 1 < block_units) kjit_sm90::named_arrive(1 + (1 - consumer), 256);
    kjit_wgmma::wait<0>();
#pragma unroll
    for (int j = 0; j < MMAS_M; ++j) {
      kjit_wgmma::fence_operands(acc[j]);
      if constexpr (SWIGLU) kjit_wgmma::fence_operands(acc_up[j]);
    }
    if (previous >= 0 && lane == 0) kjit_sm90::barrier_arrive(empty0 + 8 * previous);

    if (splits > 1) {
      // Split-K: this part's accumulators into its slot of the workspace (register i of thread t at
      // i * 128 + t); the consumer that finishes a tile's rows last adds every part's (in part order, so
      // the sum does not depend on which was last) and runs the epilogue; the others are done with it.
      constexpr int REGS = MMAS_M * R * (SWIGLU ? 2 : 1);
      const long long rows_slot = static_cast<long long>(tile) * (PINGPONG ? 1 : CONSUMERS) + (PINGPONG ? 0 : consumer);
      float* slot = partials + (rows_slot * splits + part) * (REGS * 128);
#pragma unroll
      for (int j = 0; j < MMAS_M; ++j)
#pragma unroll
        for (int i = 0; i < R; ++i) {
          slot[(j * R + i) * 128 + t] = acc[j][i];
          if constexpr (SWIGLU) slot[((MMAS_M + j) * R + i) * 128 + t] = acc_up[j][i];
        }
      __threadfence();
      kjit_sm90::named_sync(3 + consumer, 128);
      if (t == 0) last_part[consumer] = atomicAdd(arrivals + rows_slot, 1) == splits - 1;
      kjit_sm90::named_sync(3 + consumer, 128);
      if (!last_part[consumer]) continue;
      __threadfence();
      const float* first_slot = partials + rows_slot * splits * (REGS * 128);
#pragma unroll
      for (int j = 0; j < MMAS_M; ++j)
#pragma unroll
        for (int i = 0; i < R; ++i) {
          acc[j][i] = 0.f;
          if constexpr (SWIGLU) acc_up[j][i] = 0.f;
        }
      for (int p = 0; p < splits; ++p) {
        const float* from = first_slot + p * (REGS * 128);
#pragma unroll
        for (int j = 0; j < MMAS_M; ++j)
#pragma unroll
          for (int i = 0; i < R; ++i) {
            acc[j][i] += __ldcg(from + (j * R + i) * 128 + t);
            if constexpr (SWIGLU) acc_up[j][i] += __ldcg(from + ((MMAS_M + j) * R + i) * 128 + t);
          }
      }
    }

    // The accumulator layout of wgmma m64nN: thread t holds, for each 8 columns i, rows
    // 16 * warp + lane / 4 (+ 8) at columns 8 * i + 2 * (lane % 4) (+ 1).
    const kjit_gemm::Epilogue<T> e{bias,
                                   residual ? residual + tl.z * batch_residual : residual,
                                   aux ? aux + tl.z * batch_aux : aux,
                                   ld_residual,
                                   ld_aux,
                                   scale};
    if constexpr (TMA_STORE) {
      // The consumer's ROWS x BN outputs into shared memory, as (ROWS / 64) x (BN / 64) swizzled 64 x 64
      // boxes, then one thread stores them by TMA; the shared memory is written again once the previous
      // tile's stores have read it.
      if (t == 0) kjit_sm90::bulk_wait_read();
      kjit_sm90::named_sync(3 + consumer, 128);
#pragma unroll
      for (int j = 0; j < MMAS_M; ++j) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int r = warp * 16 + lane / 4 + 8 * h;  // in the 64-row slab j
          const int row = tl.m0 + row0 + 64 * j + r;
#pragma unroll
          for (int i = 0; i < BN / 8; ++i) {
            const int cc = 8 * i + 2 * (lane % 4);  // in the tile
            const int col = tl.n0 + cc;
            float2 o = make_float2(0.f, 0.f);
            if (row < m && col < n) {
              const bool both = col + 1 < n;
              if constexpr (SWIGLU)
                o = kjit_gemm::finish_swiglu_values<T, HAS_RESIDUAL, AUX>(
                    e, row, col, n, both, acc[j][4 * i + 2 * h], acc[j][4 * i + 2 * h + 1], acc_up[j][4 * i + 2 * h],
                    acc_up[j][4 * i + 2 * h + 1]);
              else
                o = kjit_gemm::finish_values<T, ACT, HAS_BIAS, HAS_RESIDUAL, AUX>(
                    e, row, col, both, acc[j][4 * i + 2 * h], acc[j][4 * i + 2 * h + 1]);
            }
            kjit_detail::Vec<T, 2> v;
            v.v[0] = static_cast<T>(o.x);
            v.v[1] = static_cast<T>(o.y);
            const unsigned at = c_tile + (j * (BN / 64) + cc / 64) * 8192u + kjit_sm90::swizzled_offset(r, cc % 64);
            asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(at), "r"(*reinterpret_cast<const unsigned*>(&v)) : "memory");
          }
        }
      }
      kjit_sm90::fence_async_shared();
      kjit_sm90::named_sync(3 + consumer, 128);
      if (t == 0) {
#pragma unroll
        for (int j = 0; j < MMAS_M; ++j)
#pragma unroll
          for (int b = 0; b < BN / 64; ++b)
            kjit_sm90::tma_store(&tma_c, c_tile + (j * (BN / 64) + b) * 8192u, tl.n0 + 64 * b, tl.m0 + row0 + 64 * j,
                                 tl.z);
        kjit_sm90::bulk_commit();
      }
    } else {
      T* cz = c + tl.z * batch_c;
#pragma unroll
      for (int j = 0; j < MMAS_M; ++j) {
        const int row = tl.m0 + row0 + 64 * j + warp * 16 + lane / 4;
#pragma unroll
        for (int i = 0; i < BN / 8; ++i) {
          const int col = tl.n0 + 8 * i + 2 * (lane % 4);
          if constexpr (SWIGLU) {
            kjit_gemm::finish_swiglu_pair<T, HAS_RESIDUAL, AUX>(
                e, cz, ldc, row, col, m, n, acc[j][4 * i], acc[j][4 * i + 1], acc_up[j][4 * i], acc_up[j][4 * i + 1]);
            kjit_gemm::finish_swiglu_pair<T, HAS_RESIDUAL, AUX>(e, cz, ldc, row + 8, col, m, n, acc[j][4 * i + 2],
                                                                acc[j][4 * i + 3], acc_up[j][4 * i + 2],
                                                                acc_up[j][4 * i + 3]);
          } else {
            kjit_gemm::finish_pair<T, ACT, HAS_BIAS, HAS_RESIDUAL, AUX>(e, cz, ldc, row, col, m, n, acc[j][4 * i],
                                                                        acc[j][4 * i + 1]);
            kjit_gemm::finish_pair<T, ACT, HAS_BIAS, HAS_RESIDUAL, AUX>(e, cz, ldc, row + 8, col, m, n,
                                                                        acc[j][4 * i + 2], acc[j][4 * i + 3]);
          }
        }
      }
    }
  }
  // The last TMA stores are done before the block (and its shared memory) ends.
  if (TMA_STORE && t == 0) kjit_sm90::bulk_wait();
}
