// cub::WarpReduce and cub::BlockScan: each element's inclusive prefix sum within its block, plus the sum
// of its warp.
#include <cub/block/block_scan.cuh>
#include <cub/warp/warp_reduce.cuh>

template <int BLOCK>
__global__ void scan_plus_warp_sum(const int* in, int* out) {
  using WarpReduce = cub::WarpReduce<int>;
  using BlockScan = cub::BlockScan<int, BLOCK>;
  __shared__ typename WarpReduce::TempStorage warp_tmp[BLOCK / 32];
  __shared__ typename BlockScan::TempStorage scan_tmp;
  const int i = blockIdx.x * BLOCK + threadIdx.x;
  const int v = in[i];
  const int warp_sum = WarpReduce(warp_tmp[threadIdx.x / 32]).Sum(v);
  const int warp_total = __shfl_sync(0xffffffffu, warp_sum, 0);
  int prefix;
  BlockScan(scan_tmp).InclusiveSum(v, prefix);
  out[i] = prefix + warp_total;
}
