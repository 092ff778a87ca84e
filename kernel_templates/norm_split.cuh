// layer_norm / rms_norm forward for rows too long for one block (sm_90 and newer: thread-block clusters).
//
// norm_split_forward: norm.cuh's norm_forward for rows too long for one block (no RESIDUAL), one row
// per thread-block cluster of CL blocks of TPR threads (detail/split_rows.cuh: the row read once, 16
// bytes at a time whatever its alignment, written once; d at run time, `chunk` the vectors per block).
// The statistics as norm_forward's: the mean over the cluster, then the sum of (x - mean)^2 from the
// registers (RMS: of x^2), each exchanged once between the blocks. weight and bias are read per row from
// the caches (every cluster reads them): as vectors when the row starts on a vector boundary and they are
// aligned, else as scalars at the row's misalignment.
#pragma once

#include "detail/split_rows.cuh"

template <typename T, int TPR, int CL, int VEC, int ITEMS, bool RMS, bool HAS_W, bool HAS_B>
__global__ void __cluster_dims__(CL, 1, 1) __launch_bounds__(TPR, kjit_rows::kSplitMinBlocks<TPR>)
    norm_split_forward(const T* __restrict__ x, const T* __restrict__ w, const T* __restrict__ b, T* __restrict__ y,
                       long long rows, int d, int chunk, double eps) {
  using A = kjit_detail::acc_t<T>;
  const kjit_rows::Sum sum_op;
  __shared__ A slots[2];
  int parity = 0;
  const int rank = static_cast<int>(kjit_cluster::rank());
  const long long clusters = gridDim.x / CL;
  const A inv_d = A(1) / static_cast<A>(d);
  const bool wb_aligned = reinterpret_cast<unsigned long long>(w) % sizeof(kjit_detail::Vec<T, VEC>) == 0 &&
                          reinterpret_cast<unsigned long long>(b) % sizeof(kjit_detail::Vec<T, VEC>) == 0;
  for (long long r = blockIdx.x / CL; r < rows; r += clusters) {
    const long long off = r * d;
    const kjit_rows::RowSpan<VEC> span(x + off, d);
    kjit_rows::SplitRegs<T, TPR, VEC, ITEMS> v;
    v.load(x + off, d, span, rank, CL, chunk, A(0));
    A mean = A(0);
    if constexpr (!RMS) {
      // Summed relative to the row's first element: a large mean (x = 1000 + noise) loses no digits to the
      // sum's magnitude (50257 such floats summed directly were off by 5e-4 in the normalized output).
      const A shift = kjit_detail::to<A>(__ldg(x + off));
      mean = shift +
             kjit_rows::cluster_reduce<TPR, CL>(v.fold(sum_op, [&](A e) { return e - shift; }), sum_op, slots, parity) *
                 inv_d;
    }
    const A var = kjit_rows::cluster_reduce<TPR, CL>(v.fold(sum_op, [&](A e) { return (e - mean) * (e - mean); }),
                                                     sum_op, slots, parity) *
                  inv_d;
    const A rstd = A(1) / sqrt(var + static_cast<A>(eps));
    const auto scalar = [&](A e, int at) {
      A o = (e - mean) * rstd;
      if constexpr (HAS_W) o *= kjit_detail::to<A>(__ldg(w + at));
      if constexpr (HAS_B) o += kjit_detail::to<A>(__ldg(b + at));
      return o;
    };
    if (span.head == 0 && wb_aligned) {
      // A row on a vector boundary (every row when d is a multiple of VEC): weight and bias as vectors.
      using VT = kjit_detail::Vec<T, VEC>;
      VT* out = reinterpret_cast<VT*>(y + off) + v.first;
#pragma unroll
      for (int it = 0; it < ITEMS; ++it) {
        if (!v.valid(it)) continue;
        const int j = it * TPR + static_cast<int>(threadIdx.x);
        VT wv, bv, o;
        if constexpr (HAS_W) wv = reinterpret_cast<const VT*>(w)[v.first + j];
        if constexpr (HAS_B) bv = reinterpret_cast<const VT*>(b)[v.first + j];
#pragma unroll
        for (int k = 0; k < VEC; ++k) {
          A e = (v.v[it][k] - mean) * rstd;
          if constexpr (HAS_W) e *= kjit_detail::to<A>(wv.v[k]);
          if constexpr (HAS_B) e += kjit_detail::to<A>(bv.v[k]);
          o.v[k] = static_cast<T>(e);
        }
        out[j] = o;
      }
      if (v.edge_at >= 0) y[off + v.edge_at] = static_cast<T>(scalar(v.edge, v.edge_at));
    } else {
      v.store(y + off, span, scalar);
    }
  }
  kjit_cluster::sync();  // peers may still read this block's slots
}
