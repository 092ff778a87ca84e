// y = x + c, elementwise. c is a runtime argument (changing it never recompiles); the element type T
// and the vector width VEC (elements per 16-byte-or-less access) are specialized.
// Preconditions (checked by the caller): x and y aligned to sizeof(T) * VEC bytes.
#pragma once

#include "detail/numeric.cuh"

template <typename T, int VEC>
__global__ void add_constant(const T* __restrict__ x, T* __restrict__ y, T c, long long n) {
  using kjit_detail::narrow;
  using kjit_detail::Vec;
  using kjit_detail::widen;
  static_assert(VEC >= 1 && (VEC & (VEC - 1)) == 0, "VEC must be a power of two");
  const auto cc = widen(c);
  const long long n_vec = n / VEC;
  const long long stride = kjit_detail::grid_threads();
  // Not unrolled: every thread of a full grid (SMs x 8 blocks) already keeps one vector access in flight,
  // and NVRTC unrolling this runtime-count loop costs about a third of the compile (bench/nvrtc_floor.py).
#pragma unroll 1
  for (long long i = kjit_detail::global_thread(); i < n_vec; i += stride) {
    Vec<T, VEC> a = reinterpret_cast<const Vec<T, VEC>*>(x)[i];
#pragma unroll
    for (int k = 0; k < VEC; ++k) a.v[k] = narrow<T>(widen(a.v[k]) + cc);
    reinterpret_cast<Vec<T, VEC>*>(y)[i] = a;
  }
  // The tail that does not fill a vector.
  const long long tail = n_vec * VEC + kjit_detail::global_thread();
  if (tail < n) y[tail] = narrow<T>(widen(x[tail]) + cc);
}
