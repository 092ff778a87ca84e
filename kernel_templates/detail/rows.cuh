// Row-wise building blocks of the reduction, softmax and norm templates.
//
// A block holds ROWS rows of TPR threads each (blockDim = (TPR, ROWS)); thread x of a row handles
// vectors x, x + TPR, x + 2 TPR, ... of VEC elements. With ITEMS > 0 a row's elements live in
// registers (RowRegs: ITEMS vectors per thread, read from memory once); ITEMS == 0 streams the row
// from memory on every pass (rows too long for registers). D > 0 is the row length fixed at compile
// time; D == 0 reads it from a kernel argument (the generic variant). The caller guarantees that the
// row length is a multiple of VEC and that every row starts on a VEC-element boundary.
// An include guard, not #pragma once: the templates include this file as "detail/rows.cuh" and
// split_rows.cuh as "rows.cuh", which NVRTC's in-memory headers see as two files.
#ifndef KJIT_DETAIL_ROWS_CUH
#define KJIT_DETAIL_ROWS_CUH

#include "numeric.cuh"

namespace kjit_rows {

using kjit_detail::acc_t;
using kjit_detail::to;
using kjit_detail::Vec;

struct Sum {
  template <typename C>
  __device__ __forceinline__ C operator()(C a, C b) const {
    return a + b;
  }
  template <typename C>
  __device__ static constexpr C identity() {
    return C(0);
  }
};
// Max and Min propagate NaN, as torch.amax / torch.amin do. Their identity is -inf / +inf (float's
// infinity, widened for double): <cuda/std/limits> would add libcu++'s configuration headers to every
// compile, and NVRTC has no constexpr builtin for it.
struct Max {
  template <typename C>
  __device__ __forceinline__ C operator()(C a, C b) const {
    return (a != a || a > b) ? a : b;
  }
  template <typename C>
  __device__ __forceinline__ static C identity() {
    static_assert(static_cast<C>(0.5) != static_cast<C>(0), "Max's identity (-inf) is for floating types");
    return -static_cast<C>(__int_as_float(0x7f800000));
  }
};
struct Min {
  template <typename C>
  __device__ __forceinline__ C operator()(C a, C b) const {
    return (a != a || a < b) ? a : b;
  }
  template <typename C>
  __device__ __forceinline__ static C identity() {
    static_assert(static_cast<C>(0.5) != static_cast<C>(0), "Min's identity (+inf) is for floating types");
    return static_cast<C>(__int_as_float(0x7f800000));
  }
};

// op over the TPR threads of this thread's row; every thread of the row gets the result. Every
// thread of the block must call it (it synchronizes the block when TPR > 32).
template <int TPR, int ROWS, typename C, typename Op>
__device__ __forceinline__ C row_reduce(C v, Op op) {
  static_assert(TPR >= 32 && TPR <= 1024 && (TPR & (TPR - 1)) == 0, "TPR must be a power of two in [32, 1024]");
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = op(v, __shfl_xor_sync(0xffffffffu, v, o));
  if constexpr (TPR > 32) {
    constexpr int kWarps = TPR / 32;
    __shared__ C partial[ROWS][kWarps];
    const int lane = threadIdx.x & 31;
    __syncthreads();  // readers of the previous reduction are done with `partial`
    if (lane == 0) partial[threadIdx.y][threadIdx.x >> 5] = v;
    __syncthreads();
    v = lane < kWarps ? partial[threadIdx.y][lane] : Op::template identity<C>();
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = op(v, __shfl_xor_sync(0xffffffffu, v, o));
  }
  return v;
}

// v = f(v) for every element of the registers v of a row (masked ones included).
template <typename C, int ITEMS, int VEC, typename F>
__device__ __forceinline__ void transform_all(C (&v)[ITEMS][VEC], F f) {
#pragma unroll
  for (int it = 0; it < ITEMS; ++it)
#pragma unroll
    for (int k = 0; k < VEC; ++k) v[it][k] = f(v[it][k]);
}

// A row held in registers: v[it][k] is element (it * TPR + threadIdx.x) * VEC + k.
template <typename T, int TPR, int VEC, int ITEMS>
struct RowRegs {
  using C = acc_t<T>;
  C v[ITEMS][VEC];

  __device__ __forceinline__ static bool valid(int it, int d) {
    return (it * TPR + static_cast<int>(threadIdx.x)) * VEC < d;
  }

  __device__ __forceinline__ void load(const T* __restrict__ row, int d, C fill) {
#pragma unroll
    for (int it = 0; it < ITEMS; ++it) {
      if (valid(it, d)) {
        const Vec<T, VEC> x = reinterpret_cast<const Vec<T, VEC>*>(row)[it * TPR + threadIdx.x];
#pragma unroll
        for (int k = 0; k < VEC; ++k) v[it][k] = to<C>(x.v[k]);
      } else {
#pragma unroll
        for (int k = 0; k < VEC; ++k) v[it][k] = fill;
      }
    }
  }

  // v = f(v) for every element held (masked ones included).
  template <typename F>
  __device__ __forceinline__ void transform(F f) {
    transform_all(v, f);
  }

  // op over the valid elements of this thread, each passed through f first.
  template <typename Op, typename F>
  __device__ __forceinline__ C fold(int d, Op op, F f) const {
    C acc = Op::template identity<C>();
#pragma unroll
    for (int it = 0; it < ITEMS; ++it)
      if (valid(it, d)) {
#pragma unroll
        for (int k = 0; k < VEC; ++k) acc = op(acc, f(v[it][k], it, k));
      }
    return acc;
  }
};

// out[e] = f(e's vector index it, lane k) for the valid elements of this thread.
template <typename TO, int TPR, int VEC, int ITEMS, typename F>
__device__ __forceinline__ void store_regs(TO* __restrict__ row, int d, F f) {
#pragma unroll
  for (int it = 0; it < ITEMS; ++it) {
    if (RowRegs<TO, TPR, VEC, ITEMS>::valid(it, d)) {
      Vec<TO, VEC> o;
#pragma unroll
      for (int k = 0; k < VEC; ++k) o.v[k] = static_cast<TO>(f(it, k));
      reinterpret_cast<Vec<TO, VEC>*>(row)[it * TPR + threadIdx.x] = o;
    }
  }
}

// Streaming: f(vector j, the VEC values) for this thread's vectors of a row, four loads in flight.
template <typename T, int TPR, int VEC, typename F>
__device__ __forceinline__ void stream(const T* __restrict__ row, int d, F f) {
  using C = acc_t<T>;
  const Vec<T, VEC>* p = reinterpret_cast<const Vec<T, VEC>*>(row);
  const int n_vec = d / VEC;
  constexpr int kInFlight = 4;
  for (int base = threadIdx.x; base < n_vec; base += TPR * kInFlight) {
    Vec<T, VEC> x[kInFlight];
#pragma unroll
    for (int u = 0; u < kInFlight; ++u)
      if (base + u * TPR < n_vec) x[u] = p[base + u * TPR];
#pragma unroll
    for (int u = 0; u < kInFlight; ++u)
      if (base + u * TPR < n_vec) {
        C c[VEC];
#pragma unroll
        for (int k = 0; k < VEC; ++k) c[k] = to<C>(x[u].v[k]);
        f(base + u * TPR, c);
      }
  }
}

// This block's first row and the stride between the rows it handles (blocks loop over rows).
__device__ __forceinline__ long long first_row(int rows_per_block) {
  return static_cast<long long>(blockIdx.x) * rows_per_block + threadIdx.y;
}
__device__ __forceinline__ long long row_step(int rows_per_block) {
  return static_cast<long long>(gridDim.x) * rows_per_block;
}

}  // namespace kjit_rows

#endif  // KJIT_DETAIL_ROWS_CUH
