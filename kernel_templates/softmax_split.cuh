// softmax / log_softmax forward for rows too long for one block (sm_90 and newer: thread-block clusters).
//
// softmax_split_forward: one row per thread-block cluster of CL blocks of TPR threads
// (detail/split_rows.cuh: the row read once, 16 bytes at a time whatever its alignment, written once; d
// at run time, `chunk` the vectors per block). Each thread takes the max m of its elements and the sum of
// exp(x - m); the (max, sum) pairs combine, rescaled, first in the block and then over the cluster in one
// exchange. NaN makes the whole row NaN, -inf adds nothing, a row of -inf is NaN (as torch.softmax).
#pragma once

#include "detail/split_rows.cuh"
#include "softmax.cuh"

namespace kjit_softmax {

// A row's running max and the sum of exp(x - m) of the elements seen.
template <typename C>
struct MaxSum {
  C m, s;
};

// The pair of a and b together: the sums rescaled to the larger max (NaN propagates; a max of -inf
// scales its sum, 0, by 1: no -inf - -inf).
template <typename T, typename C>
__device__ __forceinline__ MaxSum<C> combine(MaxSum<C> a, MaxSum<C> b) {
  const C m = kjit_rows::Max()(a.m, b.m);
  const C fa = a.m == m ? C(1) : exp_of<T>(a.m - m);
  const C fb = b.m == m ? C(1) : exp_of<T>(b.m - m);
  return {m, a.s * fa + b.s * fb};
}

// The pair over every thread of the cluster (the block first, then the CL blocks in rank order: every
// block gets the same bits). slot_m / slot_s: 2 elements of shared memory each; parity as cluster_reduce's.
template <typename T, int TPR, int CL, typename C>
__device__ __forceinline__ MaxSum<C> cluster_max_sum(MaxSum<C> p, C* slot_m, C* slot_s, int& parity) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1)
    p = combine<T>(p, MaxSum<C>{__shfl_xor_sync(0xffffffffu, p.m, o), __shfl_xor_sync(0xffffffffu, p.s, o)});
  if constexpr (TPR > 32) {
    constexpr int kWarps = TPR / 32;
    __shared__ C pm[kWarps], ps[kWarps];
    const int lane = threadIdx.x & 31;
    __syncthreads();  // readers of the previous row's partials are done
    if (lane == 0) {
      pm[threadIdx.x >> 5] = p.m;
      ps[threadIdx.x >> 5] = p.s;
    }
    __syncthreads();
    p = lane < kWarps ? MaxSum<C>{pm[lane], ps[lane]} : MaxSum<C>{kjit_rows::Max::identity<C>(), C(0)};
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
      p = combine<T>(p, MaxSum<C>{__shfl_xor_sync(0xffffffffu, p.m, o), __shfl_xor_sync(0xffffffffu, p.s, o)});
  }
  if (threadIdx.x == 0) {
    slot_m[parity] = p.m;
    slot_s[parity] = p.s;
  }
  kjit_cluster::sync();
  MaxSum<C> r{kjit_cluster::read_peer(slot_m + parity, 0), kjit_cluster::read_peer(slot_s + parity, 0)};
#pragma unroll
  for (int q = 1; q < CL; ++q)
    r = combine<T>(r,
                   MaxSum<C>{kjit_cluster::read_peer(slot_m + parity, q), kjit_cluster::read_peer(slot_s + parity, q)});
  parity ^= 1;
  return r;
}

}  // namespace kjit_softmax

template <typename T, int TPR, int CL, int VEC, int ITEMS, bool LOG>
__global__ void __cluster_dims__(CL, 1, 1) __launch_bounds__(TPR, kjit_rows::kSplitMinBlocks<TPR>)
    softmax_split_forward(const T* __restrict__ x, T* __restrict__ y, long long rows, int d, int chunk) {
  using C = kjit_detail::acc_t<T>;
  using kjit_math::log_;
  const auto exp_ = [](C e) { return kjit_softmax::exp_of<T>(e); };
  const C ninf = kjit_rows::Max::identity<C>();
  __shared__ C slot_m[2], slot_s[2];
  int parity = 0;
  const int rank = static_cast<int>(kjit_cluster::rank());
  const long long clusters = gridDim.x / CL;
  for (long long r = blockIdx.x / CL; r < rows; r += clusters) {
    const long long off = r * d;
    const kjit_rows::RowSpan<VEC> span(x + off, d);
    kjit_rows::SplitRegs<T, TPR, VEC, ITEMS> v;
    v.load(x + off, d, span, rank, CL, chunk, ninf);
    const C m = v.fold(kjit_rows::Max(), [](C e) { return e; });
    const C ref = m == ninf ? C(0) : m;  // exp(-inf - ref) = 0 (no -inf - -inf); NaN stays NaN
    C s;
    if constexpr (LOG) {
      s = v.fold(kjit_rows::Sum(), [&](C e) { return exp_(e - ref); });
    } else {
      v.transform([&](C e) { return exp_(e - ref); });  // each exp once, kept for the store
      s = v.fold(kjit_rows::Sum(), [](C e) { return e; });
    }
    const kjit_softmax::MaxSum<C> row =
        kjit_softmax::cluster_max_sum<T, TPR, CL>(kjit_softmax::MaxSum<C>{m, s}, slot_m, slot_s, parity);
    if constexpr (LOG) {
      const C shift = row.m + log_(row.s);
      v.store(y + off, span, [&](C e, int) { return e - shift; });
    } else {
      // exp(x - m) = exp(x - ref) * exp(ref - m): this thread's values rescaled once.
      const C scale = (m == row.m ? C(1) : exp_(m - row.m)) * (C(1) / row.s);
      v.store(y + off, span, [&](C e, int) { return e * scale; });
    }
  }
  kjit_cluster::sync();  // peers may still read this block's slots
}
