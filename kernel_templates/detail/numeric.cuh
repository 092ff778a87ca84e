// Shared device helpers of the built-in templates: accumulation types and aligned vectors.
// Framework-agnostic: plain CUDA C++, compiles with NVRTC and nvcc alike.
#pragma once

// kjit defines KJIT_USES_HALF / KJIT_USES_BFLOAT16 (0 or 1) for each specialization: the 1.6 MB of the
// 16-bit float headers are parsed only by the compiles that use those types. Elsewhere (nvcc), both.
#if !defined(KJIT_USES_HALF) || KJIT_USES_HALF
#include <cuda_fp16.h>
#define KJIT_DETAIL_HALF 1
#endif
#if !defined(KJIT_USES_BFLOAT16) || KJIT_USES_BFLOAT16
#include <cuda_bf16.h>
#define KJIT_DETAIL_BFLOAT16 1
#endif
#include "complex.cuh"

namespace kjit_detail {

// Arithmetic type of an element type: half types compute in float.
template <typename T>
struct Acc {
  using type = T;
};
#ifdef KJIT_DETAIL_HALF
template <>
struct Acc<__half> {
  using type = float;
};
#endif
#ifdef KJIT_DETAIL_BFLOAT16
template <>
struct Acc<__nv_bfloat16> {
  using type = float;
};
#endif
template <typename T>
using acc_t = typename Acc<T>::type;

template <typename T>
__device__ __forceinline__ acc_t<T> widen(T v) {
  return static_cast<acc_t<T>>(v);
}
template <typename T>
__device__ __forceinline__ T narrow(acc_t<T> v) {
  return static_cast<T>(v);
}

// C(v) for every element type and compute type: the half types convert to double through float; a real
// value becomes (v, 0) as a complex one; a complex value becomes a real one as PyTorch casts it (the real
// part; a bool is true when either part is nonzero).
template <typename C, typename T>
struct Convert {
  static __device__ __forceinline__ C run(T v) { return static_cast<C>(v); }
};
template <typename C, typename T>
__device__ __forceinline__ C to(T v) {
  return Convert<C, T>::run(v);
}
template <typename R, typename T>
struct Convert<kjit_complex::complex<R>, T> {
  static __device__ __forceinline__ kjit_complex::complex<R> run(T v) {
    return kjit_complex::complex<R>(to<R>(v), R(0));
  }
};
template <typename R, typename U>
struct Convert<kjit_complex::complex<R>, kjit_complex::complex<U>> {
  static __device__ __forceinline__ kjit_complex::complex<R> run(kjit_complex::complex<U> v) {
    return kjit_complex::complex<R>(static_cast<R>(v.re), static_cast<R>(v.im));
  }
};
template <typename C, typename U>
struct Convert<C, kjit_complex::complex<U>> {
  static __device__ __forceinline__ C run(kjit_complex::complex<U> v) { return static_cast<C>(v.re); }
};
template <typename U>
struct Convert<bool, kjit_complex::complex<U>> {
  static __device__ __forceinline__ bool run(kjit_complex::complex<U> v) { return v.re != U(0) || v.im != U(0); }
};
#ifdef KJIT_DETAIL_HALF
template <>
__device__ __forceinline__ double to<double, __half>(__half v) {
  return __half2float(v);
}
#endif
#ifdef KJIT_DETAIL_BFLOAT16
template <>
__device__ __forceinline__ double to<double, __nv_bfloat16>(__nv_bfloat16 v) {
  return __bfloat162float(v);
}
#endif

// N elements loaded and stored as one aligned access (16 bytes at most, e.g. 4 floats, 8 halves).
template <typename T, int N>
struct alignas(sizeof(T) * N) Vec {
  T v[N];
};

// Global thread index as 64-bit: grids of more than 2^31 threads are indexed correctly.
__device__ __forceinline__ long long global_thread() {
  return static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ __forceinline__ long long grid_threads() { return static_cast<long long>(gridDim.x) * blockDim.x; }

}  // namespace kjit_detail
