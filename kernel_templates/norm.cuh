// layer_norm and rms_norm over the last dim of a contiguous [rows, d] tensor, and their backward.
//
// Launch: blockDim = (TPR, ROWS), ROWS rows per block, blocks loop over rows; each row lives in
// registers (ITEMS vectors of VEC per thread: rows are read once and written once). D > 0 fixes the
// row length at compile time, D == 0 takes it from `d_runtime` (the generic variant). Half types
// compute in float, float64 in double; statistics are kept in that type (A).
//
//   norm_forward:   layer_norm y = (x - mean) * rstd * w + b      (RMS: y = x * rstd * w)
//                   rstd = 1 / sqrt(var + eps), var the biased variance (RMS: mean of x^2).
//   norm_backward:  mean and rstd recomputed from the row in registers (no statistics are stored
//                   between forward and backward); xhat = (x - mean) * rstd (RMS: x * rstd), wg = g * w
//                   dx = rstd * (wg - mean(wg) - xhat * mean(wg * xhat))   (RMS: no mean(wg) term)
//                   dw_partial[slot, :] = sum over the rows of this slot of g * xhat, db_partial of g,
//                   slot = blockIdx.x * ROWS + threadIdx.y (the caller sums the slots: gridDim.x * ROWS
//                   rows of partials).
// HAS_W / HAS_B: whether weight / bias are given (w == nullptr otherwise).
//
// The residual add of add_rms_norm / add_layer_norm, fused (both flags default to false, and the kernels
// without them ignore `residual` / `h` / `dh` / `dres`, which the caller passes as nullptr):
//   norm_forward  RESIDUAL:  h = x + residual, computed in A and rounded to T, is written to `h`, and the
//                            row normalized is that rounded h (as torch's norm(x + residual) reads it).
//   norm_backward RESIDUAL:  x is h; dx + dh (ADD_DH: dh given; else dx alone), one rounding to T, is
//                            written to both `dx` and `dres` (the gradients of x and residual).
#pragma once

#include "detail/rows.cuh"

namespace kjit_norm {

// The mean (0 for RMS, whose variance is the mean of x^2) and the biased variance of a row, from this
// thread's registers `v` of it (a thread past the last row: `live` false, zeros); every thread of the block
// takes part in the reductions.
template <bool RMS, int TPR, int ROWS, typename Regs, typename A>
__device__ __forceinline__ void moments(const Regs& v, bool live, int d, A inv_d, A& mean, A& var) {
  const kjit_rows::Sum sum_op;
  mean = A(0);
  if constexpr (!RMS) {
    mean = live ? v.fold(d, sum_op, [](A e, int, int) { return e; }) : A(0);
    mean = kjit_rows::row_reduce<TPR, ROWS>(mean, sum_op) * inv_d;
  }
  var = live ? v.fold(d, sum_op, [&](A e, int, int) { return (e - mean) * (e - mean); }) : A(0);
  var = kjit_rows::row_reduce<TPR, ROWS>(var, sum_op) * inv_d;
}

}  // namespace kjit_norm

template <typename T, int TPR, int ROWS, int VEC, int ITEMS, int D, bool RMS, bool HAS_W, bool HAS_B,
          bool RESIDUAL = false>
__global__ void __launch_bounds__(TPR* ROWS)
    norm_forward(const T* __restrict__ x, const T* __restrict__ w, const T* __restrict__ b, T* __restrict__ y,
                 long long rows, int d_runtime, double eps, const T* __restrict__ residual, T* __restrict__ h) {
  using A = kjit_detail::acc_t<T>;
  static_assert(ITEMS > 0, "norm rows live in registers");
  const int d = D > 0 ? D : d_runtime;
  kjit_rows::RowRegs<T, TPR, VEC, ITEMS> wv, bv;
  if constexpr (HAS_W) wv.load(w, d, A(0));
  if constexpr (HAS_B) bv.load(b, d, A(0));
  const A inv_d = A(1) / static_cast<A>(d);
  for (long long r0 = static_cast<long long>(blockIdx.x) * ROWS; r0 < rows;
       r0 += static_cast<long long>(gridDim.x) * ROWS) {
    const long long r = r0 + threadIdx.y;
    const bool live = r < rows;
    const long long off = (live ? r : 0) * d;
    kjit_rows::RowRegs<T, TPR, VEC, ITEMS> v;
    if (live) v.load(x + off, d, A(0));
    if constexpr (RESIDUAL) {
      if (live) {
        // v <- the rounded h, a vector at a time (no second row of registers).
        using VT = kjit_detail::Vec<T, VEC>;
#pragma unroll
        for (int it = 0; it < ITEMS; ++it) {
          if (!v.valid(it, d)) continue;
          const int j = it * TPR + static_cast<int>(threadIdx.x);
          const VT rv = reinterpret_cast<const VT*>(residual + off)[j];
          VT hv;
#pragma unroll
          for (int k = 0; k < VEC; ++k) {
            hv.v[k] = kjit_detail::narrow<T>(v.v[it][k] + kjit_detail::to<A>(rv.v[k]));
            v.v[it][k] = kjit_detail::to<A>(hv.v[k]);
          }
          reinterpret_cast<VT*>(h + off)[j] = hv;
        }
      }
    }
    A mean, var;
    kjit_norm::moments<RMS, TPR, ROWS>(v, live, d, inv_d, mean, var);
    if (!live) continue;
    const A rstd = A(1) / sqrt(var + static_cast<A>(eps));
    kjit_rows::store_regs<T, TPR, VEC, ITEMS>(y + off, d, [&](int it, int k) {
      A o = (v.v[it][k] - mean) * rstd;
      if constexpr (HAS_W) o *= wv.v[it][k];
      if constexpr (HAS_B) o += bv.v[it][k];
      return o;
    });
  }
}

template <typename T, int TPR, int ROWS, int VEC, int ITEMS, int D, bool RMS, bool HAS_W, bool HAS_B,
          bool RESIDUAL = false, bool ADD_DH = false>
__global__ void __launch_bounds__(TPR* ROWS)
    norm_backward(const T* __restrict__ g, const T* __restrict__ x, const T* __restrict__ w, T* __restrict__ dx,
                  kjit_detail::acc_t<T>* __restrict__ dw_partial, kjit_detail::acc_t<T>* __restrict__ db_partial,
                  long long rows, int d_runtime, double eps, const T* __restrict__ dh, T* __restrict__ dres) {
  using A = kjit_detail::acc_t<T>;
  static_assert(ITEMS > 0, "norm rows live in registers");
  static_assert(RESIDUAL || !ADD_DH, "ADD_DH is a variant of the RESIDUAL backward");
  const int d = D > 0 ? D : d_runtime;
  const kjit_rows::Sum sum_op;
  kjit_rows::RowRegs<T, TPR, VEC, ITEMS> wv;
  if constexpr (HAS_W) wv.load(w, d, A(0));
  A dw[ITEMS][VEC], db[ITEMS][VEC];
#pragma unroll
  for (int it = 0; it < ITEMS; ++it)
#pragma unroll
    for (int k = 0; k < VEC; ++k) dw[it][k] = db[it][k] = A(0);
  const A inv_d = A(1) / static_cast<A>(d);
  for (long long r0 = static_cast<long long>(blockIdx.x) * ROWS; r0 < rows;
       r0 += static_cast<long long>(gridDim.x) * ROWS) {
    const long long r = r0 + threadIdx.y;
    const bool live = r < rows;
    const long long off = (live ? r : 0) * d;
    kjit_rows::RowRegs<T, TPR, VEC, ITEMS> xv, gv;
    if (live) {
      xv.load(x + off, d, A(0));
      gv.load(g + off, d, A(0));
    }
    A mean, var;
    kjit_norm::moments<RMS, TPR, ROWS>(xv, live, d, inv_d, mean, var);
    const A rstd = A(1) / sqrt(var + static_cast<A>(eps));
    // xhat and wg in place: xv <- xhat, gv stays g (wg computed on the fly).
#pragma unroll
    for (int it = 0; it < ITEMS; ++it)
#pragma unroll
      for (int k = 0; k < VEC; ++k) xv.v[it][k] = (xv.v[it][k] - mean) * rstd;
    auto wg = [&](int it, int k) { return HAS_W ? gv.v[it][k] * wv.v[it][k] : gv.v[it][k]; };
    A s1 = A(0), s2 = A(0);
    if (live) {
      s2 = xv.fold(d, sum_op, [&](A e, int it, int k) { return wg(it, k) * e; });
      if constexpr (!RMS) s1 = gv.fold(d, sum_op, [&](A, int it, int k) { return wg(it, k); });
    }
    s2 = kjit_rows::row_reduce<TPR, ROWS>(s2, sum_op) * inv_d;
    if constexpr (!RMS) s1 = kjit_rows::row_reduce<TPR, ROWS>(s1, sum_op) * inv_d;
    if (!live) continue;
    if constexpr (RESIDUAL) {
      using VT = kjit_detail::Vec<T, VEC>;
#pragma unroll
      for (int it = 0; it < ITEMS; ++it) {
        if (!xv.valid(it, d)) continue;
        const int j = it * TPR + static_cast<int>(threadIdx.x);
        A add[VEC];
        if constexpr (ADD_DH) {
          const VT hv = reinterpret_cast<const VT*>(dh + off)[j];
#pragma unroll
          for (int k = 0; k < VEC; ++k) add[k] = kjit_detail::to<A>(hv.v[k]);
        }
        VT o;
#pragma unroll
        for (int k = 0; k < VEC; ++k) {
          A e = rstd * (wg(it, k) - s1 - xv.v[it][k] * s2);
          if constexpr (ADD_DH) e += add[k];
          o.v[k] = kjit_detail::narrow<T>(e);
        }
        reinterpret_cast<VT*>(dx + off)[j] = o;
        reinterpret_cast<VT*>(dres + off)[j] = o;
      }
    } else {
      kjit_rows::store_regs<T, TPR, VEC, ITEMS>(
          dx + off, d, [&](int it, int k) { return rstd * (wg(it, k) - s1 - xv.v[it][k] * s2); });
    }
#pragma unroll
    for (int it = 0; it < ITEMS; ++it)
#pragma unroll
      for (int k = 0; k < VEC; ++k) {
        dw[it][k] += gv.v[it][k] * xv.v[it][k];
        db[it][k] += gv.v[it][k];
      }
  }
  const long long slot = static_cast<long long>(blockIdx.x) * ROWS + threadIdx.y;
  if constexpr (HAS_W)
    kjit_rows::store_regs<A, TPR, VEC, ITEMS>(dw_partial + slot * d, d, [&](int it, int k) { return dw[it][k]; });
  if constexpr (HAS_B)
    kjit_rows::store_regs<A, TPR, VEC, ITEMS>(db_partial + slot * d, d, [&](int it, int k) { return db[it][k]; });
}
