// Host conversions between float and the element types of the GPU tests' CPU references.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

namespace kjit::testing {

template <typename T>
float to_f(T v) {
  return static_cast<float>(v);
}
template <>
inline float to_f(__half v) {
  return __half2float(v);
}
template <>
inline float to_f(__nv_bfloat16 v) {
  return __bfloat162float(v);
}
template <typename T>
T from_f(float v) {
  return static_cast<T>(v);
}
template <>
inline __half from_f(float v) {
  return __float2half(v);
}
template <>
inline __nv_bfloat16 from_f(float v) {
  return __float2bfloat16(v);
}

}  // namespace kjit::testing
