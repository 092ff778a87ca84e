// Shared device helpers of the built-in templates: accumulation types and aligned vectors.
// Framework-agnostic: plain CUDA C++, compiles with NVRTC and nvcc alike.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

namespace kjit_detail {

// Arithmetic type of an element type: half types compute in float.
template <typename T> struct Acc { using type = T; };
template <> struct Acc<__half> { using type = float; };
template <> struct Acc<__nv_bfloat16> { using type = float; };
template <typename T> using acc_t = typename Acc<T>::type;

template <typename T>
__device__ __forceinline__ acc_t<T> widen(T v) { return static_cast<acc_t<T>>(v); }
template <typename T>
__device__ __forceinline__ T narrow(acc_t<T> v) { return static_cast<T>(v); }

// C(v) for every element type and compute type: the half types convert to double through float.
template <typename C, typename T>
__device__ __forceinline__ C to(T v) { return static_cast<C>(v); }
template <> __device__ __forceinline__ double to<double, __half>(__half v) { return __half2float(v); }
template <> __device__ __forceinline__ double to<double, __nv_bfloat16>(__nv_bfloat16 v) {
  return __bfloat162float(v);
}

// N elements loaded and stored as one aligned access (16 bytes at most, e.g. 4 floats, 8 halves).
template <typename T, int N>
struct alignas(sizeof(T) * N) Vec {
  T v[N];
};

// Global thread index as 64-bit: grids of more than 2^31 threads are indexed correctly.
__device__ __forceinline__ long long global_thread() {
  return static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ __forceinline__ long long grid_threads() {
  return static_cast<long long>(gridDim.x) * blockDim.x;
}

}  // namespace kjit_detail
