// One step of a sampler update in one pass: out = a * x + b * model_out + c * noise, elementwise.
// a, b and c are runtime arguments (changing them never recompiles) of the arithmetic type: float for
// float / half / bfloat16 elements, double for double. The element type T and the vector width VEC
// (elements per 16-byte-or-less access) are specialized.
// Preconditions (checked by the caller): x, model_out, noise and out aligned to sizeof(T) * VEC bytes.
// Launch: any 1-D grid (grid-stride loop).
#pragma once

#include "detail/numeric.cuh"

template <typename T, int VEC>
__global__ void fused_update(const T* __restrict__ x, const T* __restrict__ model_out, const T* __restrict__ noise,
                             T* __restrict__ out, kjit_detail::acc_t<T> a, kjit_detail::acc_t<T> b,
                             kjit_detail::acc_t<T> c, long long n) {
  using kjit_detail::acc_t;
  using kjit_detail::narrow;
  using kjit_detail::Vec;
  using kjit_detail::widen;
  using A = acc_t<T>;
  static_assert(VEC >= 1 && (VEC & (VEC - 1)) == 0, "VEC must be a power of two");
  const A ca = a, cb = b, cc = c;
  const long long n_vec = n / VEC;
  const long long stride = kjit_detail::grid_threads();
  // Not unrolled: every thread of a full grid (SMs x 8 blocks) already keeps one vector access in flight,
  // and NVRTC unrolling this runtime-count loop costs about a third of the compile (bench/nvrtc_floor.py).
#pragma unroll 1
  for (long long i = kjit_detail::global_thread(); i < n_vec; i += stride) {
    const Vec<T, VEC> xv = reinterpret_cast<const Vec<T, VEC>*>(x)[i];
    const Vec<T, VEC> mv = reinterpret_cast<const Vec<T, VEC>*>(model_out)[i];
    const Vec<T, VEC> nv = reinterpret_cast<const Vec<T, VEC>*>(noise)[i];
    Vec<T, VEC> o;
#pragma unroll
    for (int k = 0; k < VEC; ++k) o.v[k] = narrow<T>(ca * widen(xv.v[k]) + cb * widen(mv.v[k]) + cc * widen(nv.v[k]));
    reinterpret_cast<Vec<T, VEC>*>(out)[i] = o;
  }
  // The tail that does not fill a vector.
  const long long tail = n_vec * VEC + kjit_detail::global_thread();
  if (tail < n) out[tail] = narrow<T>(ca * widen(x[tail]) + cb * widen(model_out[tail]) + cc * widen(noise[tail]));
}
