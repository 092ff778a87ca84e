// Device math for kjit.elementwise expressions and the activation ops: each function is defined for
// the compute types (float, double; half types compute in float) and, where it makes sense, integers.
// Backward helpers take the gradient first: silu_backward(g, x) = g * d silu(x) / dx. Those written in
// terms of the forward output (relu, sigmoid, tanh) take y, as PyTorch's own backward kernels do.
#pragma once

#include "detail/complex.cuh"

namespace kjit_math {

// KJIT_FAST_EXP (kjit.elementwise defines it for float16 / bfloat16 results): the hardware exp, whose
// error (a few float ulp) is far below one rounding of a 16-bit result.
#ifdef KJIT_FAST_EXP
__device__ __forceinline__ float exp_(float x) { return __expf(x); }
#else
__device__ __forceinline__ float exp_(float x) { return expf(x); }
#endif
__device__ __forceinline__ double exp_(double x) { return ::exp(x); }
__device__ __forceinline__ float log_(float x) { return logf(x); }
__device__ __forceinline__ double log_(double x) { return ::log(x); }
__device__ __forceinline__ float erf_(float x) { return erff(x); }
__device__ __forceinline__ double erf_(double x) { return ::erf(x); }
__device__ __forceinline__ float tanh_(float x) { return tanhf(x); }
__device__ __forceinline__ double tanh_(double x) { return ::tanh(x); }
__device__ __forceinline__ float log1p_(float x) { return log1pf(x); }
__device__ __forceinline__ double log1p_(double x) { return ::log1p(x); }

// Complex values (kjit.elementwise with torch.complex64 / complex128): sigmoid, silu and tanh_ work through
// these (PyTorch has them for complex too); the arithmetic and the other functions are kjit_complex's.
template <typename T>
__device__ __forceinline__ kjit_complex::complex<T> exp_(kjit_complex::complex<T> z) {
  return kjit_complex::exp(z);
}
template <typename T>
__device__ __forceinline__ kjit_complex::complex<T> log_(kjit_complex::complex<T> z) {
  return kjit_complex::log(z);
}
template <typename T>
__device__ __forceinline__ kjit_complex::complex<T> tanh_(kjit_complex::complex<T> z) {
  return kjit_complex::tanh(z);
}

// polar(r, theta) takes real values: no argument brings kjit_complex's functions into the lookup.
using kjit_complex::polar;

// real, imag, conj and angle of a real value, as torch.real / imag / conj / angle give them (angle: pi for
// a negative value, NaN for NaN, else 0), so that one expression serves real and complex inputs.
template <typename T>
using if_real = typename kjit_complex::enable_if<!kjit_complex::is_complex<T>::value, T>::type;
template <typename T>
__device__ __forceinline__ if_real<T> real(T x) {
  return x;
}
template <typename T>
__device__ __forceinline__ if_real<T> imag(T) {
  return T(0);
}
template <typename T>
__device__ __forceinline__ if_real<T> conj(T x) {
  return x;
}
template <typename T>
__device__ __forceinline__ if_real<T> angle(T x) {
  return x != x ? x : x < T(0) ? T(3.14159265358979323846) : T(0);
}

// Activations PyTorch has no complex form of (relu and gelu refuse complex tensors there too).
#define KJIT_MATH_NO_COMPLEX(NAME, PARAMS)                                                               \
  template <typename T>                                                                                  \
  __device__ kjit_complex::complex<T> NAME PARAMS {                                                      \
    static_assert(kjit_complex::always_false<T>::value,                                                  \
                  "kjit.elementwise: " #NAME                                                             \
                  " of a complex value: PyTorch has no complex form of it either; apply it to real(z), " \
                  "imag(z) or abs(z)");                                                                  \
    return {};                                                                                           \
  }
KJIT_MATH_NO_COMPLEX(erf_, (kjit_complex::complex<T>))
KJIT_MATH_NO_COMPLEX(relu, (kjit_complex::complex<T>))
KJIT_MATH_NO_COMPLEX(relu_backward, (kjit_complex::complex<T>, kjit_complex::complex<T>))
KJIT_MATH_NO_COMPLEX(gelu, (kjit_complex::complex<T>))
KJIT_MATH_NO_COMPLEX(gelu_backward, (kjit_complex::complex<T>, kjit_complex::complex<T>))
KJIT_MATH_NO_COMPLEX(gelu_tanh, (kjit_complex::complex<T>))
KJIT_MATH_NO_COMPLEX(gelu_tanh_backward, (kjit_complex::complex<T>, kjit_complex::complex<T>))
KJIT_MATH_NO_COMPLEX(mish, (kjit_complex::complex<T>))
KJIT_MATH_NO_COMPLEX(mish_backward, (kjit_complex::complex<T>, kjit_complex::complex<T>))
#undef KJIT_MATH_NO_COMPLEX

// NaN propagates as in PyTorch: relu(NaN) = NaN, and the gradient through a NaN output is g (threshold_backward).
template <typename C>
__device__ __forceinline__ C relu(C x) {
  return (x > C(0) || x != x) ? x : C(0);
}
template <typename C>
__device__ __forceinline__ C relu_backward(C g, C y) {
  return y <= C(0) ? C(0) : g;
}

template <typename C>
__device__ __forceinline__ C sigmoid(C x) {
  return C(1) / (C(1) + exp_(-x));
}
template <typename C>
__device__ __forceinline__ C sigmoid_backward(C g, C y) {
  return g * y * (C(1) - y);
}

template <typename C>
__device__ __forceinline__ C tanh_backward(C g, C y) {
  return g * (C(1) - y * y);
}

template <typename C>
__device__ __forceinline__ C silu(C x) {
  return x / (C(1) + exp_(-x));
}
template <typename C>
__device__ __forceinline__ C silu_backward(C g, C x) {
  const C s = sigmoid(x);
  return g * s * (C(1) + x * (C(1) - s));
}

// gelu(x) = x * Phi(x), Phi the standard normal CDF (PyTorch's approximate='none').
template <typename C>
__device__ __forceinline__ C gelu(C x) {
  constexpr C kInvSqrt2 = C(0.70710678118654752440);
  return C(0.5) * x * (C(1) + erf_(x * kInvSqrt2));
}
template <typename C>
__device__ __forceinline__ C gelu_backward(C g, C x) {
  constexpr C kInvSqrt2 = C(0.70710678118654752440);
  constexpr C kInvSqrt2Pi = C(0.39894228040143267794);
  const C cdf = C(0.5) * (C(1) + erf_(x * kInvSqrt2));
  const C pdf = kInvSqrt2Pi * exp_(C(-0.5) * x * x);
  return g * (cdf + x * pdf);
}

// gelu with the tanh approximation (PyTorch's approximate='tanh').
template <typename C>
__device__ __forceinline__ C gelu_tanh(C x) {
  constexpr C kBeta = C(0.79788456080286535588);  // sqrt(2 / pi)
  constexpr C kKappa = C(0.044715);
  const C inner = kBeta * (x + kKappa * x * x * x);
  return C(0.5) * x * (C(1) + tanh_(inner));
}
template <typename C>
__device__ __forceinline__ C gelu_tanh_backward(C g, C x) {
  constexpr C kBeta = C(0.79788456080286535588);
  constexpr C kKappa = C(0.044715);
  const C x2 = x * x;
  const C t = tanh_(kBeta * (x + kKappa * x2 * x));
  const C dinner = kBeta * (C(1) + C(3) * kKappa * x2);
  return g * (C(0.5) * (C(1) + t) + C(0.5) * x * (C(1) - t * t) * dinner);
}

// mish(x) = x * tanh(softplus(x)), softplus(x) = log(1 + exp(x)), as PyTorch's F.mish (no threshold: past
// exp's range exp(x) is inf and tanh(inf) = 1, so mish(x) = x). Its derivative:
// tanh(softplus(x)) + x * sigmoid(x) * (1 - tanh(softplus(x))^2), PyTorch's mish_backward.
template <typename C>
__device__ __forceinline__ C mish(C x) {
  return x * tanh_(log1p_(exp_(x)));
}
template <typename C>
__device__ __forceinline__ C mish_backward(C g, C x) {
  const C t = tanh_(log1p_(exp_(x)));
  return g * (t + x * sigmoid(x) * (C(1) - t * t));
}

}  // namespace kjit_math
