// Host conversions between float and the element types of the GPU tests' CPU references.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

namespace kjit::testing {

// How a type converts to and from float on the host: a cast, except for the CUDA half types.
template <typename T>
struct HostFloat {
  static float to(T v) { return static_cast<float>(v); }
  static T from(float v) { return static_cast<T>(v); }
};
template <>
struct HostFloat<__half> {
  static float to(__half v) { return __half2float(v); }
  static __half from(float v) { return __float2half(v); }
};
template <>
struct HostFloat<__nv_bfloat16> {
  static float to(__nv_bfloat16 v) { return __bfloat162float(v); }
  static __nv_bfloat16 from(float v) { return __float2bfloat16(v); }
};

template <typename T>
float to_f(T v) {
  return HostFloat<T>::to(v);
}
template <typename T>
T from_f(float v) {
  return HostFloat<T>::from(v);
}

}  // namespace kjit::testing
