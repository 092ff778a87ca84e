// gemm_mma: C = epilogue(A @ B^T) on the tensor cores of sm_80 and later (mma.sync m16n8k16 for half /
// bfloat16, m16n8k8.tf32 for float), the "TN" layout of F.linear:
//
//   A [M, K] row stride lda, B [N, K] row stride ldb (both K-contiguous), C [M, N] row stride ldc (elements),
//   C[m, n] = epilogue(sum_k A[m, k] * B[n, k]), fp32 accumulation; the epilogue is detail/gemm_epilogue.cuh's
//   (scale, bias, activation, residual, the pre-activation kept in aux; SWIGLU: B holds 2N rows, gate rows
//   [0, N) and up rows [N, 2N), out = silu(scale * gate) * (scale * up) (+ residual), no bias, ACT none).
//   N > 0 / K > 0 fix the sizes at compile time (n_runtime / k_runtime ignored); 0 takes them from those
//   (the generic variant). M is always a runtime argument.
//
// Launch: grid (ceil(N / BN), ceil(M / BM), batch * splits), blockDim 32 * WM * WN * WK, dynamic shared memory
//   max(STAGES * (BM + BN * (SWIGLU ? 2 : 1)) * BK * sizeof(T), WK > 1 ? (WK - 1) * BM * BN * (SWIGLU ? 2 : 1) * 4 : 0)
//   bytes. blockIdx.z / splits is the batch: a += z * batch_a, b += z * batch_b, c += z * batch_c, residual and
//   aux likewise (bias is shared). Blocks are visited in groups of 8 tile rows (an L2-friendly order); a block
//   computes the BM x BN tile of C it is mapped to.
//
// Split-K across blocks (splits > 1; 1 otherwise, partials / arrivals unread): part blockIdx.z % splits of a
// tile takes k-tiles [part * per, (part + 1) * per), per = ceil(ceil(K / BK) / splits), so that a tile grid
// smaller than the GPU still fills it. Each part writes its fp32 sums to `partials` (splits * BM * BN * SETS
// floats per tile, tiles numbered (z * tiles_m + tile_m) * tiles_n + tile_n) and counts itself in
// arrivals[tile] (zeroed before the launch); the part that arrives last adds the parts up in their order
// (0, 1, ...: the same sum whichever arrives last) and runs the epilogue.
//
// Inside a block: a STAGES-deep cp.async pipeline of BK-deep tiles of A and B in shared memory (16-byte
// chunks XOR-swizzled within 128-byte lines: ldmatrix and cp.async are bank-conflict free); the WM x WN warps
// of a K group tile the block tile, warp tile (BM / WM) x (BN / WN). WK > 1: WK groups of WM * WN warps share
// the pipeline and take interleaved mma k-steps (16 deep, 8 for tf32) of every stage; groups 1..WK-1 hand
// their sums to group 0 through shared memory, and group 0 runs the epilogue (for small M: BM = 16 fills a
// block with WK * WM * WN warps, no split-K kernel).
//
// Host guarantees: a, b 16-byte aligned; lda, ldb multiples of 8; K % 8 == 0; M >= 1. Tiles past M / N / K
// are zero-filled (cp.async src-size 0), never read; C, residual and aux may have any alignment.
//
// Allowed parameters (static_asserts below):
//   T: __half, __nv_bfloat16, float (TF32 math).  BK * sizeof(T) in {64, 128, 256} bytes (BK 32 / 64 / 128 for
//   16-bit types, 16 / 32 / 64 for float). BM / WM and BN / WN multiples of 16. STAGES >= 2.
//   WK: 1, or WK dividing BK / 16 (BK / 8 for float) or a multiple of it. SWIGLU: ACT == 0, no bias.
// Configurations checked to compile without spills (sm_80, sm_90, sm_100; half and bfloat16; registers per
// thread on sm_80: 128x128 ~234, 128x256 ~235, 64x64 72, 64x128 128, 16x64 WK4 48-56, 16x32 WK8 ~40):
//   large M   BM=128 BN=128 BK=32 WM=2 WN=2 WK=1 STAGES=4   (128 threads, 64 KB)
//             BM=128 BN=256 BK=32 WM=2 WN=4 WK=1 STAGES=4   (256 threads, 96 KB)
//   medium M  BM=64  BN=64  BK=32 WM=2 WN=2 WK=1 STAGES=4   (128 threads, 32 KB)
//             BM=64  BN=128 BK=32 WM=2 WN=2 WK=1 STAGES=4   (128 threads, 48 KB)
//   small M   BM=16  BN=64  BK=64 WM=1 WN=2 WK=4 STAGES=3   (256 threads, 30 KB)
//             BM=16  BN=32  BK=64 WM=1 WN=2 WK=8 STAGES=3   (512 threads, 18 KB)
//   SWIGLU keeps two accumulator sets: with BM=128 use BN=64 (WN=2) or BN=128 WN=4 (warp tile 64 x 32).
#pragma once

#include "detail/gemm_epilogue.cuh"

namespace kjit_gemm_mma {

// The mma flavour of an element type: 1 half, 2 bfloat16, 3 float as TF32.
template <typename T>
struct Kind {
  static constexpr int value = 0;
};
template <>
struct Kind<float> {
  static constexpr int value = 3;
};
#ifdef KJIT_DETAIL_HALF
template <>
struct Kind<__half> {
  static constexpr int value = 1;
};
#endif
#ifdef KJIT_DETAIL_BFLOAT16
template <>
struct Kind<__nv_bfloat16> {
  static constexpr int value = 2;
};
#endif

__device__ __forceinline__ unsigned smem_addr(const void* p) {
  return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

// 16 bytes global -> shared, bypassing L1; bytes < 16 zero-fills the rest (0: reads nothing).
__device__ __forceinline__ void cp_async16(unsigned dst, const void* src, int bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(bytes) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int PENDING>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(PENDING) : "memory");
}

__device__ __forceinline__ void ldmatrix_x4(unsigned (&r)[4], unsigned addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

__device__ __forceinline__ unsigned to_tf32(unsigned x) {
  unsigned r;
  asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(r) : "f"(__uint_as_float(x)));
  return r;
}

// d += a * b for one m16n8 tile: k16 (half, bfloat16) or k8 (tf32). a: 4 registers, b: 2.
template <int KIND>
__device__ __forceinline__ void mma(float (&d)[4], const unsigned (&a)[4], const unsigned (&b)[2]) {
  if constexpr (KIND == 1) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  } else if constexpr (KIND == 2) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  } else {
    asm("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  }
}

// Byte offset of 16-byte chunk c of row r in a tile of CPR chunks per row: the chunk's index within its
// 128-byte line is XORed with the line's row key, so the 8 rows one ldmatrix phase (or one cp.async phase)
// touches land in 8 distinct bank groups. Rows 16 apart have the same key (warp tiles start at multiples of 16).
template <int CPR>
__device__ __forceinline__ unsigned swizzle(int r, int c) {
  const int key = CPR >= 8 ? (r & 7) : ((r / (8 / CPR)) & 7);
  return static_cast<unsigned>(((r * CPR + c) ^ key) * 16);
}

// Dynamic shared memory of a specialization (the formula of the file comment; red = BM * BN * SETS).
__host__ __device__ constexpr int smem_bytes(int stages, int bm, int bnt, int bk, int elem, int wk, int red) {
  return stages * (bm + bnt) * bk * elem > (wk > 1 ? (wk - 1) * red * 4 : 0) ? stages * (bm + bnt) * bk * elem
                                                                             : (wk - 1) * red * 4;
}

// f(s, i, j, q) for register q of every accumulator fragment (s, i, j) of a warp, fully unrolled.
template <int SETS, int MI, int NI, typename F>
__device__ __forceinline__ void for_each_acc(F f) {
#pragma unroll
  for (int s = 0; s < SETS; ++s)
#pragma unroll
    for (int i = 0; i < MI; ++i)
#pragma unroll
      for (int j = 0; j < NI; ++j)
#pragma unroll
        for (int q = 0; q < 4; ++q) f(s, i, j, q);
}

// f(s, i, j, frag) for every accumulator fragment (s, i, j) of a warp, frag its index in that order, fully unrolled.
template <int SETS, int MI, int NI, typename F>
__device__ __forceinline__ void for_each_fragment(F f) {
#pragma unroll
  for (int s = 0; s < SETS; ++s)
#pragma unroll
    for (int i = 0; i < MI; ++i)
#pragma unroll
      for (int j = 0; j < NI; ++j) f(s, i, j, (s * MI + i) * NI + j);
}

// The most m16 slabs (a divisor of MI) the epilogue can stage at once in SMEM bytes, SLAB bytes each.
template <int MI, int SLAB, int SMEM>
__host__ __device__ constexpr int slabs_per_pass() {
  int best = 0;
  for (int mc = 1; mc <= MI; ++mc)
    if (MI % mc == 0 && mc * SLAB <= SMEM) best = mc;
  return best;
}

}  // namespace kjit_gemm_mma

template <typename T, int N, int K, int BM, int BN, int BK, int WM, int WN, int WK, int STAGES, int ACT, bool HAS_BIAS,
          bool HAS_RESIDUAL, bool AUX, bool SWIGLU>
__global__ void __launch_bounds__(32 * WM * WN * WK)
    gemm_mma(const T* __restrict__ a, const T* __restrict__ b, T* __restrict__ c, int m, int n_runtime, int k_runtime,
             long long lda, long long ldb, long long ldc, long long batch_a, long long batch_b, long long batch_c,
             const T* __restrict__ bias, const T* residual, T* aux, long long ld_residual, long long ld_aux,
             long long batch_residual, long long batch_aux, float scale, int splits, float* partials, int* arrivals) {
  namespace g = kjit_gemm_mma;
  constexpr int KIND = g::Kind<T>::value;
  constexpr int THREADS = 32 * WM * WN * WK;
  constexpr int GROUP_THREADS = 32 * WM * WN;
  constexpr int EPC = 16 / static_cast<int>(sizeof(T));  // elements per 16-byte chunk
  constexpr int CPR = BK / EPC;                          // chunks per tile row
  constexpr int KSTEPS = CPR / 2;                        // mma k-steps per stage (each 32 bytes of k)
  constexpr int WTM = BM / WM, WTN = BN / WN;            // warp tile
  constexpr int MI = WTM / 16, NI = WTN / 8;             // mma tiles per warp tile
  constexpr int SETS = SWIGLU ? 2 : 1;                   // accumulator sets (gate, up)
  constexpr int BNT = BN * SETS;                         // B rows per stage
  constexpr int A_CHUNKS = BM * CPR, B_CHUNKS = BNT * CPR;
  static_assert(KIND != 0, "gemm_mma: T must be __half, __nv_bfloat16 or float");
  static_assert(BK * sizeof(T) == 64 || BK * sizeof(T) == 128 || BK * sizeof(T) == 256,
                "gemm_mma: BK * sizeof(T) must be 64, 128 or 256 bytes");
  static_assert(WM >= 1 && WN >= 1 && WK >= 1 && BM % WM == 0 && BN % WN == 0 && WTM % 16 == 0 && WTN % 16 == 0,
                "gemm_mma: the warp tile (BM / WM) x (BN / WN) must be a multiple of 16 x 16");
  static_assert(STAGES >= 2, "gemm_mma: STAGES >= 2");
  static_assert(WK == 1 || KSTEPS % WK == 0 || WK % KSTEPS == 0,
                "gemm_mma: WK must divide BK / 16 (BK / 8 for float) or be a multiple of it");
  static_assert(THREADS <= 1024, "gemm_mma: at most 1024 threads");
  static_assert(!SWIGLU || (ACT == kjit_gemm::kActNone && !HAS_BIAS), "gemm_mma: SWIGLU takes no ACT and no bias");
  static_assert(N >= 0 && K >= 0 && (K == 0 || K % 8 == 0), "gemm_mma: N, K >= 0, K % 8 == 0");

  extern __shared__ __align__(128) unsigned char kjit_gemm_smem[];
  const int n = N > 0 ? N : n_runtime;
  const int k = K > 0 ? K : k_runtime;
  const int tid = threadIdx.x;
  const int lane = tid & 31;
  const int warp = tid >> 5;
  const int kg = WK == 1 ? 0 : warp / (WM * WN);  // K group
  const int wm = (warp % (WM * WN)) / WN, wn = warp % WN;

  // Tile of this block: grouped order (8 tile rows at a time sweep the columns) for L2 reuse.
  int tile_m, tile_n;
  {
    const int tiles_n = gridDim.x, tiles_m = gridDim.y;
    const int pid = blockIdx.y * tiles_n + blockIdx.x;
    constexpr int GROUP = 8;
    const int per_group = GROUP * tiles_n;
    const int first_m = (pid / per_group) * GROUP;
    const int rows_in_group = min(tiles_m - first_m, GROUP);
    tile_m = first_m + (pid % per_group) % rows_in_group;
    tile_n = (pid % per_group) / rows_in_group;
  }
  const int m0 = tile_m * BM, n0 = tile_n * BN;
  const int part = static_cast<int>(blockIdx.z) % splits;
  const long long z = blockIdx.z / splits;
  {
    a += z * batch_a;
    b += z * batch_b;
    c += z * batch_c;
    if constexpr (HAS_RESIDUAL) residual += z * batch_residual;
    if constexpr (AUX) aux += z * batch_aux;
  }

  const unsigned smem_a = g::smem_addr(kjit_gemm_smem);
  const unsigned smem_b = smem_a + STAGES * A_CHUNKS * 16;
  // This block's k-tiles: [kt0, kt0 + ktiles) of the ceil(k / BK) (all of them without split-K).
  int kt0 = 0, ktiles = (k + BK - 1) / BK;
  if (splits > 1) {
    const int per = (ktiles + splits - 1) / splits;
    kt0 = min(part * per, ktiles);
    ktiles = min(per, ktiles - kt0);
  }

  // One BK-deep tile of A and B into stage `stage`; chunks past M, N or K are zero-filled.
  auto load_tile = [&](int t, int stage) {
    const int k0 = (kt0 + t) * BK;
#pragma unroll
    for (int j = 0; j < (A_CHUNKS + THREADS - 1) / THREADS; ++j) {
      const int i = tid + j * THREADS;
      if (A_CHUNKS % THREADS == 0 || i < A_CHUNKS) {
        const int r = i / CPR, ch = i % CPR;
        const int gr = m0 + r, gk = k0 + ch * EPC;
        const bool ok = gr < m && gk < k;
        g::cp_async16(smem_a + stage * (A_CHUNKS * 16) + g::swizzle<CPR>(r, ch), ok ? a + gr * lda + gk : a,
                      ok ? 16 : 0);
      }
    }
#pragma unroll
    for (int j = 0; j < (B_CHUNKS + THREADS - 1) / THREADS; ++j) {
      const int i = tid + j * THREADS;
      if (B_CHUNKS % THREADS == 0 || i < B_CHUNKS) {
        const int r = i / CPR, ch = i % CPR;
        const int rn = SWIGLU ? r % BN : r;  // column of C this row feeds
        const int gr = n0 + rn + (SWIGLU && r >= BN ? n : 0);
        const int gk = k0 + ch * EPC;
        const bool ok = n0 + rn < n && gk < k;
        g::cp_async16(smem_b + stage * (B_CHUNKS * 16) + g::swizzle<CPR>(r, ch), ok ? b + gr * ldb + gk : b,
                      ok ? 16 : 0);
      }
    }
  };

  float acc[SETS][MI][NI][4];
  g::for_each_acc<SETS, MI, NI>([&](int s, int i, int j, int q) { acc[s][i][j][q] = 0.f; });

  // ldmatrix lanes: A x4 = rows 0-15 of the m16 tile at chunks (2 ks, 2 ks + 1); B x4 = two n8 tiles.
  const int a_row = wm * WTM + (lane & 15), a_half = lane >> 4;
  const int b_row = wn * WTN + (lane & 7) + ((lane >> 4) << 3), b_half = (lane >> 3) & 1;

  auto compute_step = [&](int stage, int ks) {
    const unsigned sa = smem_a + stage * (A_CHUNKS * 16);
    const unsigned sb = smem_b + stage * (B_CHUNKS * 16);
    unsigned af[MI][4];
    unsigned bfr[SETS][NI][2];
#pragma unroll
    for (int i = 0; i < MI; ++i) g::ldmatrix_x4(af[i], sa + g::swizzle<CPR>(a_row + i * 16, 2 * ks + a_half));
#pragma unroll
    for (int s = 0; s < SETS; ++s)
#pragma unroll
      for (int p = 0; p < NI / 2; ++p) {
        unsigned r[4];
        g::ldmatrix_x4(r, sb + g::swizzle<CPR>(s * BN + b_row + p * 16, 2 * ks + b_half));
        bfr[s][2 * p][0] = r[0];
        bfr[s][2 * p][1] = r[1];
        bfr[s][2 * p + 1][0] = r[2];
        bfr[s][2 * p + 1][1] = r[3];
      }
    if constexpr (KIND == 3) {
#pragma unroll
      for (int i = 0; i < MI; ++i)
#pragma unroll
        for (int q = 0; q < 4; ++q) af[i][q] = g::to_tf32(af[i][q]);
#pragma unroll
      for (int s = 0; s < SETS; ++s)
#pragma unroll
        for (int j = 0; j < NI; ++j)
#pragma unroll
          for (int q = 0; q < 2; ++q) bfr[s][j][q] = g::to_tf32(bfr[s][j][q]);
    }
#pragma unroll
    for (int s = 0; s < SETS; ++s)
#pragma unroll
      for (int i = 0; i < MI; ++i)
#pragma unroll
        for (int j = 0; j < NI; ++j) g::mma<KIND>(acc[s][i][j], af[i], bfr[s][j]);
  };

  // The pipeline: STAGES - 1 tiles in flight while one is consumed; one barrier per tile.
#pragma unroll
  for (int s = 0; s < STAGES - 1; ++s) {
    if (s < ktiles) load_tile(s, s);
    g::cp_async_commit();
  }
  int stage = 0;
#pragma unroll 1
  for (int t = 0; t < ktiles; ++t) {
    g::cp_async_wait<STAGES - 2>();
    __syncthreads();  // tile t is visible to all; stage (t - 1) % STAGES is free
    {
      const int tn = t + STAGES - 1;
      if (tn < ktiles) load_tile(tn, tn % STAGES);
      g::cp_async_commit();
    }
    if constexpr (WK == 1) {
#pragma unroll
      for (int ks = 0; ks < KSTEPS; ++ks) compute_step(stage, ks);
    } else if constexpr (KSTEPS % WK == 0) {
#pragma unroll
      for (int j = 0; j < KSTEPS / WK; ++j) compute_step(stage, kg + j * WK);
    } else {  // WK a multiple of KSTEPS: group kg takes step kg % KSTEPS of every (WK / KSTEPS)-th tile
      if (t % (WK / KSTEPS) == kg / KSTEPS) compute_step(stage, kg % KSTEPS);
    }
    stage = stage + 1 == STAGES ? 0 : stage + 1;
  }

  // Drain the pipeline: every warp is past its last ldmatrix before shared memory is reused.
  g::cp_async_wait<0>();
  __syncthreads();
  if constexpr (WK > 1) {
    // Groups 1..WK-1 leave their sums in shared memory (one float per thread and register: conflict free).
    float* red = reinterpret_cast<float*>(kjit_gemm_smem);
    const int gt = tid % GROUP_THREADS;
    // Register q of fragment (s, i, j) of thread gt of group w: red[((w * SETS + s) * MI + i) * NI + j) * 4 + q]
    auto slot = [&](int w, int s, int i, int j, int q) {
      return ((((w * SETS + s) * MI + i) * NI + j) * 4 + q) * GROUP_THREADS + gt;
    };
    if (kg > 0)
      g::for_each_acc<SETS, MI, NI>(
          [&](int s, int i, int j, int q) { red[slot(kg - 1, s, i, j, q)] = acc[s][i][j][q]; });
    __syncthreads();
    if (kg == 0) {
#pragma unroll
      for (int w = 0; w < WK - 1; ++w)
        g::for_each_acc<SETS, MI, NI>([&](int s, int i, int j, int q) { acc[s][i][j][q] += red[slot(w, s, i, j, q)]; });
    }
    __syncthreads();  // red is read before group 0 stages its outputs over it
  }
  if (splits > 1) {
    // Split-K: group 0's sums to this part's slot (a float4 per thread and accumulator fragment, coalesced;
    // past L1, which other multiprocessors' blocks do not see), then the tile's arrival count; the last part to
    // arrive sums every part's slot in order.
    constexpr int FRAGS = SETS * MI * NI;
    // The arrival's verdict goes through the (drained) dynamic shared memory: a static variable would add to
    // the block's shared memory, past the limit of a configuration that uses all of it.
    volatile int* last_part = reinterpret_cast<volatile int*>(kjit_gemm_smem);
    const long long tile = (z * gridDim.y + tile_m) * gridDim.x + tile_n;
    float4* slots = reinterpret_cast<float4*>(partials) + tile * splits * FRAGS * GROUP_THREADS + tid % GROUP_THREADS;
    if (kg == 0) {
      float4* mine = slots + part * FRAGS * GROUP_THREADS;
      g::for_each_fragment<SETS, MI, NI>([&](int s, int i, int j, int f) {
        const float* q = acc[s][i][j];
        __stcg(mine + f * GROUP_THREADS, make_float4(q[0], q[1], q[2], q[3]));
      });
    }
    __threadfence();
    __syncthreads();
    if (tid == 0) *last_part = atomicAdd(arrivals + tile, 1) == splits - 1;
    __syncthreads();
    const bool last = *last_part;
    __syncthreads();  // read by all before the epilogue stages its outputs over it
    if (!last) return;
    __threadfence();
    if (kg == 0) {
      g::for_each_acc<SETS, MI, NI>([&](int s, int i, int j, int q) { acc[s][i][j][q] = 0.f; });
#pragma unroll 1
      for (int p = 0; p < splits; ++p) {  // one unrolled body, not one loop per register (compile time)
        const float4* from = slots + p * FRAGS * GROUP_THREADS;
        g::for_each_fragment<SETS, MI, NI>([&](int s, int i, int j, int f) {
          const float4 v = __ldcg(from + f * GROUP_THREADS);
          float* q = acc[s][i][j];
          q[0] += v.x, q[1] += v.y, q[2] += v.z, q[3] += v.w;
        });
      }
    }
  }
  if (WK > 1 && kg > 0) return;

  // The epilogue: each warp stages MC m16 slabs of its accumulators in its own shared memory (rows padded
  // by 8 floats: the fragment stores are conflict free), then walks them row by row, lanes on consecutive
  // column pairs (coalesced stores; one copy of the epilogue code per pass, not one per fragment).
  constexpr int LD = WTN + 8;
  constexpr int SMEM = g::smem_bytes(STAGES, BM, BNT, BK, sizeof(T), WK, BM * BNT);
  constexpr int MC = g::slabs_per_pass<MI, WM * WN * 16 * LD * SETS * 4, SMEM>();
  static_assert(MC >= 1, "gemm_mma: shared memory too small for the epilogue's staging");
  float* stage_out = reinterpret_cast<float*>(kjit_gemm_smem) + (warp % (WM * WN)) * (MC * 16 * LD * SETS);
  const kjit_gemm::Epilogue<T> e{bias, residual, aux, ld_residual, ld_aux, scale};
#pragma unroll
  for (int p = 0; p < MI / MC; ++p) {
#pragma unroll
    for (int s = 0; s < SETS; ++s)
#pragma unroll
      for (int i = 0; i < MC; ++i)
#pragma unroll
        for (int j = 0; j < NI; ++j)
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const int r = i * 16 + h * 8 + (lane >> 2), col = j * 8 + 2 * (lane & 3);
            const float* q = acc[s][p * MC + i][j];
            *reinterpret_cast<float2*>(stage_out + (s * MC * 16 + r) * LD + col) = make_float2(q[2 * h], q[2 * h + 1]);
          }
    __syncwarp();
    const int row_base = m0 + wm * WTM + p * MC * 16, col_base = n0 + wn * WTN;
#pragma unroll 1
    for (int idx = lane; idx < MC * 16 * (WTN / 2); idx += 32) {
      const int r = idx / (WTN / 2), col = 2 * (idx % (WTN / 2));
      const float2 v = *reinterpret_cast<const float2*>(stage_out + r * LD + col);
      if constexpr (SWIGLU) {
        const float2 u = *reinterpret_cast<const float2*>(stage_out + (MC * 16 + r) * LD + col);
        kjit_gemm::finish_swiglu_pair<T, HAS_RESIDUAL, AUX>(e, c, ldc, row_base + r, col_base + col, m, n, v.x, v.y,
                                                            u.x, u.y);
      } else {
        kjit_gemm::finish_pair<T, ACT, HAS_BIAS, HAS_RESIDUAL, AUX>(e, c, ldc, row_base + r, col_base + col, m, n, v.x,
                                                                    v.y);
      }
    }
    __syncwarp();
  }
}
