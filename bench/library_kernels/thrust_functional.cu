// thrust's device functions: tuples and function objects.
#include <thrust/functional.h>
#include <thrust/pair.h>
#include <thrust/tuple.h>

template <typename T>
__global__ void max_plus(const T* a, const T* b, T* out, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const thrust::tuple<T, T> t = thrust::make_tuple(a[i], b[i]);
  const thrust::pair<T, T> p = thrust::make_pair(thrust::get<0>(t), thrust::get<1>(t));
  out[i] = thrust::maximum<T>()(p.first, p.second) + thrust::multiplies<T>()(a[i], b[i]);
}
