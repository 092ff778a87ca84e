// Reductions: sum / mean / amax / amin of a contiguous tensor viewed as [outer, R, inner] over R.
//
//   reduce_rows   inner == 1 (the last dim): ROWS rows per block of TPR threads each, the row in
//                 registers (ITEMS > 0) or streamed (ITEMS == 0); D > 0 fixes R at compile time.
//   reduce_cols   inner > 1: blockDim = (32, 8); x over column vectors of VEC, y splits the R rows,
//                 combined in shared memory. gridDim.z splits R into chunks: block z reduces rows
//                 [z * chunk, (z + 1) * chunk) into y[(o * gridDim.z + z) * inner + c] (with gridDim.z > 1
//                 a float partial, reduced again by a second launch), so that short-and-wide problems
//                 fill the GPU. grid.x loops over outer x column blocks.
//
// OP: 0 sum, 1 max, 2 min. The result is op(...) * scale (mean: scale = 1 / R), accumulated in
// float for half types, converted to TO. R == 0 gives the op's identity (the caller rejects amax /
// amin of empty dims, as PyTorch does).
#pragma once

#include "detail/rows.cuh"

namespace kjit_reduce {

template <int OP>
struct OpOf;
template <>
struct OpOf<0> {
  using type = kjit_rows::Sum;
};
template <>
struct OpOf<1> {
  using type = kjit_rows::Max;
};
template <>
struct OpOf<2> {
  using type = kjit_rows::Min;
};

}  // namespace kjit_reduce

template <typename T, typename TO, int OP, int TPR, int ROWS, int VEC, int ITEMS, int D>
__global__ void __launch_bounds__(TPR* ROWS)
    reduce_rows(const T* __restrict__ x, TO* __restrict__ y, long long rows, int d_runtime, double scale) {
  using C = kjit_detail::acc_t<T>;
  using Op = typename kjit_reduce::OpOf<OP>::type;
  const int d = D > 0 ? D : d_runtime;
  const Op op;
  for (long long r0 = static_cast<long long>(blockIdx.x) * ROWS; r0 < rows;
       r0 += static_cast<long long>(gridDim.x) * ROWS) {
    const long long r = r0 + threadIdx.y;
    const bool live = r < rows;
    const T* row = x + (live ? r : 0) * d;
    C acc = Op::template identity<C>();
    if (live) {
      if constexpr (ITEMS > 0) {
        kjit_rows::RowRegs<T, TPR, VEC, ITEMS> v;
        v.load(row, d, Op::template identity<C>());
        acc = v.fold(d, op, [](C e, int, int) { return e; });
      } else {
        kjit_rows::stream<T, TPR, VEC>(row, d, [&](int, const C* c) {
#pragma unroll
          for (int k = 0; k < VEC; ++k) acc = op(acc, c[k]);
        });
      }
    }
    acc = kjit_rows::row_reduce<TPR, ROWS>(acc, op);
    if (live && threadIdx.x == 0) y[r] = static_cast<TO>(acc * static_cast<C>(scale));
  }
}

template <typename T, typename TO, int OP, int VEC>
__global__ void __launch_bounds__(256) reduce_cols(const T* __restrict__ x, TO* __restrict__ y, long long outer, int R,
                                                   long long inner, int chunk, double scale) {
  using C = kjit_detail::acc_t<T>;
  using Op = typename kjit_reduce::OpOf<OP>::type;
  using kjit_detail::Vec;
  constexpr int kX = 32, kY = 8;
  const Op op;
  const long long col_vecs = inner / VEC;
  const long long col_blocks = (col_vecs + kX - 1) / kX;
  __shared__ C partial[kY][kX * VEC];
  for (long long b = blockIdx.x; b < outer * col_blocks; b += gridDim.x) {
    const long long o = b / col_blocks;
    const long long c = (b % col_blocks) * kX + threadIdx.x;
    const int r_begin = static_cast<int>(blockIdx.z) * chunk;
    const int r_end = min(R, r_begin + chunk);
    C acc[VEC];
#pragma unroll
    for (int k = 0; k < VEC; ++k) acc[k] = Op::template identity<C>();
    if (c < col_vecs) {
      const Vec<T, VEC>* base = reinterpret_cast<const Vec<T, VEC>*>(x + o * R * inner) + c;
      int r = r_begin + threadIdx.y;
      for (; r + 3 * kY < r_end; r += 4 * kY) {
        Vec<T, VEC> v[4];
#pragma unroll
        for (int u = 0; u < 4; ++u) v[u] = base[static_cast<long long>(r + u * kY) * col_vecs];
#pragma unroll
        for (int u = 0; u < 4; ++u)
#pragma unroll
          for (int k = 0; k < VEC; ++k) acc[k] = op(acc[k], kjit_detail::to<C>(v[u].v[k]));
      }
      for (; r < r_end; r += kY) {
        const Vec<T, VEC> v = base[static_cast<long long>(r) * col_vecs];
#pragma unroll
        for (int k = 0; k < VEC; ++k) acc[k] = op(acc[k], kjit_detail::to<C>(v.v[k]));
      }
    }
    __syncthreads();  // the previous iteration's readers are done with `partial`
#pragma unroll
    for (int k = 0; k < VEC; ++k) partial[threadIdx.y][threadIdx.x * VEC + k] = acc[k];
    __syncthreads();
    if (threadIdx.y == 0 && c < col_vecs) {
#pragma unroll
      for (int k = 0; k < VEC; ++k) {
        C a = partial[0][threadIdx.x * VEC + k];
#pragma unroll
        for (int yy = 1; yy < kY; ++yy) a = op(a, partial[yy][threadIdx.x * VEC + k]);
        const long long out_row = o * gridDim.z + blockIdx.z;
        y[out_row * inner + c * VEC + k] = static_cast<TO>(a * static_cast<C>(scale));
      }
    }
  }
}
