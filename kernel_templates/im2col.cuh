// The im2col matrix of a dense 1-D convolution: the operand through which kjit's conv1d and conv_transpose1d
// (python/src/ops/conv.cpp) run as one GEMM on kjit's GEMM kernels (K = C * KW):
//
//   A[b * lout + t, c * KW + j] = x[b, c, p / up]   where p = t * stride + j * dilation - pad,
//
// and 0 where p < 0, p is no multiple of up, p / up >= L (the zero padding), or past the real rows / columns
// (the padding of the GEMM's K, and of M in the transposed layout). up > 1 reads x as if up - 1 zeros stood
// between its elements: a transposed convolution's input (its stride), as a convolution of stride 1.
//
// COLUMNS = false writes A [rows, cols_p] (row-major: the forward's A operand, K-major); COLUMNS = true writes
// A^T [cols_p, rows_p] (a weight gradient's B operand, whose K is the rows b * lout + t). x is read at any
// strides (elements); the output is contiguous. Launch: any 1-D grid (grid-stride loop).
#pragma once

#include "detail/numeric.cuh"

template <typename T, bool COLUMNS>
__global__ void im2col(const T* __restrict__ x, T* __restrict__ out, long long sb, long long sc, long long sl,
                       long long L, int KW, long long lout, long long rows, long long rows_p, long long cols,
                       long long cols_p, int stride, int dilation, int pad, int up) {
  const long long n = COLUMNS ? cols_p * rows_p : rows * cols_p;
  const long long step = kjit_detail::grid_threads();
#pragma unroll 1
  for (long long i = kjit_detail::global_thread(); i < n; i += step) {
    // The GEMM sizes are below 2^31 (the op checks): row and column fit an int.
    const long long major = COLUMNS ? i / rows_p : i / cols_p;
    const long long minor = i - major * (COLUMNS ? rows_p : cols_p);
    const long long r = COLUMNS ? minor : major, q = COLUMNS ? major : minor;
    T v = kjit_detail::to<T>(0.f);
    if (r < rows && q < cols) {
      const long long b = r / lout, t = r - b * lout;
      const int c = static_cast<int>(q / KW), j = static_cast<int>(q - static_cast<long long>(c) * KW);
      long long p = t * stride + static_cast<long long>(j) * dilation - pad;
      if (p >= 0 && p % up == 0) {
        p /= up;
        if (p < L) v = x[b * sb + c * sc + p * sl];
      }
    }
    out[i] = v;
  }
}
