// libcu++ (<cuda/std/...>): complex numbers, math, limits and arrays in device code.
#include <cuda/std/array>
#include <cuda/std/cmath>
#include <cuda/std/complex>
#include <cuda/std/cstdint>
#include <cuda/std/limits>

template <typename T, int SCALE = 1>
__global__ void complex_norm_clamped(const T* re, const T* im, T* out, T hi, int n) {
  const cuda::std::int32_t i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const cuda::std::complex<T> z(re[i], im[i]);
  const cuda::std::complex<T> w = z * cuda::std::conj(z);
  const cuda::std::array<T, 2> range{T(0), hi < cuda::std::numeric_limits<T>::max() ? hi : T(1)};
  out[i] = SCALE * cuda::std::fmin(cuda::std::fmax(w.real(), range[0]), range[1]);
}
