// cub::BlockReduce: one sum per block of BLOCK elements.
#include <cub/block/block_reduce.cuh>

template <int BLOCK, typename T>
__global__ void block_sum(const T* in, T* out, int n) {
  using BlockReduce = cub::BlockReduce<T, BLOCK>;
  __shared__ typename BlockReduce::TempStorage tmp;
  const int i = blockIdx.x * BLOCK + threadIdx.x;
  const T v = i < n ? in[i] : T(0);
  const T s = BlockReduce(tmp).Sum(v);
  if (threadIdx.x == 0) out[blockIdx.x] = s;
}
