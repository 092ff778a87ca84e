// Batched outer product and its backward.
//
//   outer:             out[b, i, j] = a[b, i] * c[b, j]       a: [B, M], c: [B, N], out: [B, M, N]
//   outer_backward_a:  grad_a[b, i] = sum_j g[b, i, j] * c[b, j]
//   outer_backward_c:  grad_c[b, j] = sum_i g[b, i, j] * a[b, i]
//
// All tensors are dense and row-major. B, M and N are runtime arguments; offsets are 64-bit, so outputs
// of more than 2^31 elements are indexed correctly. The element type T and the vector width VEC are
// specialized; half types compute (and accumulate) in float, float64 in double.
//
// Preconditions (checked by the caller): N % VEC == 0; every pointer aligned to sizeof(T) * VEC bytes;
// blockDim.x * blockDim.y <= 256 for the backward kernels, with blockDim.x a power of two >= 32 for
// outer_backward_a (and blockDim.y == 1 when blockDim.x > 32).
//
// Launch shapes:
//   outer:             threads x over the N / VEC vectors of a row, y over the B * M rows (grid-stride
//                      in both); any grid.
//   outer_backward_a:  blockDim.x threads reduce one row, blockDim.y rows per block; 1-D grid-stride
//                      grid over the B * M rows.
//   outer_backward_c:  threads x over the N / VEC column vectors, y split the M rows of a batch and
//                      are reduced through shared memory; grid.x over column vectors, grid.y over B
//                      (grid-stride in both).
#pragma once

#include "detail/numeric.cuh"

namespace kjit_outer {

// Sum over the 32 lanes of a warp (every lane gets the result).
template <typename A>
__device__ __forceinline__ A warp_sum(A v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

}  // namespace kjit_outer

template <typename T, int VEC>
__global__ void outer(const T* __restrict__ a, const T* __restrict__ c, T* __restrict__ out, long long B, long long M,
                      long long N) {
  using kjit_detail::narrow;
  using kjit_detail::Vec;
  using kjit_detail::widen;
  static_assert(VEC >= 1 && (VEC & (VEC - 1)) == 0, "VEC must be a power of two");
  const long long rows = B * M;
  const long long n_vec = N / VEC;
  const long long row_stride = static_cast<long long>(gridDim.y) * blockDim.y;
  const long long col_start = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  const long long col_stride = static_cast<long long>(gridDim.x) * blockDim.x;
  for (long long r = static_cast<long long>(blockIdx.y) * blockDim.y + threadIdx.y; r < rows; r += row_stride) {
    const auto av = widen(a[r]);  // a is [B, M]: row r of out is a[r] * c[r / M, :]
    const Vec<T, VEC>* crow = reinterpret_cast<const Vec<T, VEC>*>(c + (r / M) * N);
    Vec<T, VEC>* orow = reinterpret_cast<Vec<T, VEC>*>(out + r * N);
    for (long long j = col_start; j < n_vec; j += col_stride) {
      Vec<T, VEC> v = crow[j];
#pragma unroll
      for (int k = 0; k < VEC; ++k) v.v[k] = narrow<T>(av * widen(v.v[k]));
      orow[j] = v;
    }
  }
}

template <typename T, int VEC>
__global__ void outer_backward_a(const T* __restrict__ g, const T* __restrict__ c, T* __restrict__ grad_a, long long B,
                                 long long M, long long N) {
  using kjit_detail::acc_t;
  using kjit_detail::narrow;
  using kjit_detail::Vec;
  using kjit_detail::widen;
  using A = acc_t<T>;
  static_assert(VEC >= 1 && (VEC & (VEC - 1)) == 0, "VEC must be a power of two");
  __shared__ A warp_partial[8];  // blockDim.x / 32 partial sums of one row (blockDim.x <= 256)
  const long long rows = B * M;
  const long long n_vec = N / VEC;
  const long long rows_per_step = static_cast<long long>(gridDim.x) * blockDim.y;
  // `base` is uniform across the block, so every thread runs the same iterations (barriers are safe).
  for (long long base = static_cast<long long>(blockIdx.x) * blockDim.y; base < rows; base += rows_per_step) {
    const long long r = base + threadIdx.y;
    A sum = A(0);
    if (r < rows) {
      const Vec<T, VEC>* grow = reinterpret_cast<const Vec<T, VEC>*>(g + r * N);
      const Vec<T, VEC>* crow = reinterpret_cast<const Vec<T, VEC>*>(c + (r / M) * N);
      for (long long j = threadIdx.x; j < n_vec; j += blockDim.x) {
        const Vec<T, VEC> gv = grow[j];
        const Vec<T, VEC> cv = crow[j];
#pragma unroll
        for (int k = 0; k < VEC; ++k) sum += widen(gv.v[k]) * widen(cv.v[k]);
      }
    }
    sum = kjit_outer::warp_sum(sum);
    if (blockDim.x > 32) {  // one row per block: combine the warps' partial sums
      const int warp = threadIdx.x >> 5;
      if ((threadIdx.x & 31) == 0) warp_partial[warp] = sum;
      __syncthreads();
      if (threadIdx.x == 0) {
        A total = A(0);
        for (int w = 0; w < static_cast<int>(blockDim.x >> 5); ++w) total += warp_partial[w];
        if (r < rows) grad_a[r] = narrow<T>(total);
      }
      __syncthreads();  // warp_partial is reused by the next row
    } else if (threadIdx.x == 0 && r < rows) {
      grad_a[r] = narrow<T>(sum);
    }
  }
}

template <typename T, int VEC>
__global__ void outer_backward_c(const T* __restrict__ g, const T* __restrict__ a, T* __restrict__ grad_c, long long B,
                                 long long M, long long N) {
  using kjit_detail::acc_t;
  using kjit_detail::narrow;
  using kjit_detail::Vec;
  using kjit_detail::widen;
  using A = acc_t<T>;
  static_assert(VEC >= 1 && (VEC & (VEC - 1)) == 0, "VEC must be a power of two");
  __shared__ A partial[256 * VEC];  // one VEC-wide partial sum per thread (blockDim <= 256 threads)
  const long long n_vec = N / VEC;
  const long long col_stride = static_cast<long long>(gridDim.x) * blockDim.x;
  const long long col_base0 = static_cast<long long>(blockIdx.x) * blockDim.x;
  const int tid = threadIdx.y * blockDim.x + threadIdx.x;
  // Loop bounds below are uniform across the block, so the barriers are safe.
  for (long long b = blockIdx.y; b < B; b += gridDim.y) {
    const T* ab = a + b * M;
    const T* gb = g + b * M * N;
    for (long long col_base = col_base0; col_base < n_vec; col_base += col_stride) {
      const long long j = col_base + threadIdx.x;
      A sum[VEC];
#pragma unroll
      for (int k = 0; k < VEC; ++k) sum[k] = A(0);
      if (j < n_vec) {
        for (long long i = threadIdx.y; i < M; i += blockDim.y) {
          const A ai = widen(ab[i]);
          const Vec<T, VEC> gv = reinterpret_cast<const Vec<T, VEC>*>(gb + i * N)[j];
#pragma unroll
          for (int k = 0; k < VEC; ++k) sum[k] += widen(gv.v[k]) * ai;
        }
      }
#pragma unroll
      for (int k = 0; k < VEC; ++k) partial[tid * VEC + k] = sum[k];
      __syncthreads();
      if (threadIdx.y == 0 && j < n_vec) {
        for (int y = 1; y < static_cast<int>(blockDim.y); ++y) {
          const int t = y * blockDim.x + threadIdx.x;
#pragma unroll
          for (int k = 0; k < VEC; ++k) sum[k] += partial[t * VEC + k];
        }
        Vec<T, VEC> out;
#pragma unroll
        for (int k = 0; k < VEC; ++k) out.v[k] = narrow<T>(sum[k]);
        reinterpret_cast<Vec<T, VEC>*>(grad_c + b * N)[j] = out;
      }
      __syncthreads();  // partial is reused by the next columns
    }
  }
}
