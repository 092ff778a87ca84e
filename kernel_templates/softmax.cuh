// softmax / log_softmax over the last dim of a contiguous [rows, d] tensor, and their backward.
//
// Launch: blockDim = (TPR, ROWS), ROWS rows per block, blocks loop over rows. With ITEMS > 0 each row
// is read once into registers (ITEMS vectors of VEC per thread) and written once; ITEMS == 0 streams
// long rows from memory (two reads and one write). D > 0 fixes the row length at compile time;
// D == 0 takes it from `d_runtime` (the generic variant). Half types compute in float.
//
//   softmax_forward:  y = exp(x - max) / sum(exp(x - max));   LOG: y = x - max - log(sum(exp(x - max)))
//   softmax_backward: dx = y * (g - sum(g * y));               LOG: dx = g - exp(y) * sum(g)
#pragma once

#include "detail/rows.cuh"
#include "math.cuh"

namespace kjit_softmax {

// exp in the compute type; for 16-bit element types the fast hardware exp, whose error (a few ulp of
// float) is far below the output's rounding.
template <typename T, typename C>
__device__ __forceinline__ C exp_of(C x) {
  if constexpr (sizeof(T) == 2)
    return __expf(x);
  else
    return kjit_math::exp_(x);
}

}  // namespace kjit_softmax

template <typename T, int TPR, int ROWS, int VEC, int ITEMS, int D, bool LOG>
__global__ void __launch_bounds__(TPR* ROWS)
    softmax_forward(const T* __restrict__ x, T* __restrict__ y, long long rows, int d_runtime) {
  using C = kjit_detail::acc_t<T>;
  using kjit_math::log_;
  const auto exp_ = [](C e) { return kjit_softmax::exp_of<T>(e); };
  const int d = D > 0 ? D : d_runtime;
  const kjit_rows::Max max_op;
  const kjit_rows::Sum sum_op;
  for (long long r0 = static_cast<long long>(blockIdx.x) * ROWS; r0 < rows;
       r0 += static_cast<long long>(gridDim.x) * ROWS) {
    const long long r = r0 + threadIdx.y;
    const bool live = r < rows;
    const long long off = (live ? r : 0) * d;
    if constexpr (ITEMS > 0) {
      kjit_rows::RowRegs<T, TPR, VEC, ITEMS> v;
      if (live) v.load(x + off, d, kjit_rows::Max::identity<C>());
      C m = live ? v.fold(d, max_op, [](C e, int, int) { return e; }) : C(0);
      m = kjit_rows::row_reduce<TPR, ROWS>(m, max_op);
      if constexpr (LOG) {
        C s = live ? v.fold(d, sum_op, [&](C e, int, int) { return exp_(e - m); }) : C(0);
        s = kjit_rows::row_reduce<TPR, ROWS>(s, sum_op);
        if (!live) continue;
        const C shift = m + log_(s);
        kjit_rows::store_regs<T, TPR, VEC, ITEMS>(y + off, d, [&](int it, int k) { return v.v[it][k] - shift; });
      } else {
        v.transform([&](C e) { return exp_(e - m); });  // each exp once, kept for the store
        C s = live ? v.fold(d, sum_op, [](C e, int, int) { return e; }) : C(0);
        s = kjit_rows::row_reduce<TPR, ROWS>(s, sum_op);
        if (!live) continue;
        const C inv = C(1) / s;
        kjit_rows::store_regs<T, TPR, VEC, ITEMS>(y + off, d, [&](int it, int k) { return v.v[it][k] * inv; });
      }
    } else {
      // One pass for max and sum together (the sum rescaled whenever the max grows), one to write.
      C m = kjit_rows::Max::identity<C>(), s = C(0);
      if (live)
        kjit_rows::stream<T, TPR, VEC>(x + off, d, [&](int, const C* c) {
#pragma unroll
          for (int k = 0; k < VEC; ++k) {
            const C e = c[k];
            if (e > m) {
              s = s * exp_(m - e) + C(1);
              m = e;
            } else if (e != e) {
              s = e;  // NaN: the whole row becomes NaN, as in PyTorch
            } else if (e != kjit_rows::Max::identity<C>()) {
              s += exp_(e - m);  // -inf adds nothing (and must not compute -inf - -inf)
            }
          }
        });
      const C row_max = kjit_rows::row_reduce<TPR, ROWS>(m, max_op);
      s = kjit_rows::row_reduce<TPR, ROWS>(m == row_max ? s : s * exp_(m - row_max), sum_op);
      m = row_max;
      if (!live) continue;
      const C shift = m + log_(s);
      const C inv = C(1) / s;
      kjit_rows::stream<T, TPR, VEC>(x + off, d, [&](int j, const C* c) {
        kjit_detail::Vec<T, VEC> o;
#pragma unroll
        for (int k = 0; k < VEC; ++k) o.v[k] = static_cast<T>(LOG ? c[k] - shift : exp_(c[k] - m) * inv);
        reinterpret_cast<kjit_detail::Vec<T, VEC>*>(y + off)[j] = o;
      });
    }
  }
}

template <typename T, int TPR, int ROWS, int VEC, int ITEMS, int D, bool LOG>
__global__ void __launch_bounds__(TPR* ROWS) softmax_backward(const T* __restrict__ g, const T* __restrict__ y,
                                                              T* __restrict__ dx, long long rows, int d_runtime) {
  using C = kjit_detail::acc_t<T>;
  const auto exp_ = [](C e) { return kjit_softmax::exp_of<T>(e); };
  const int d = D > 0 ? D : d_runtime;
  const kjit_rows::Sum sum_op;
  for (long long r0 = static_cast<long long>(blockIdx.x) * ROWS; r0 < rows;
       r0 += static_cast<long long>(gridDim.x) * ROWS) {
    const long long r = r0 + threadIdx.y;
    const bool live = r < rows;
    const long long off = (live ? r : 0) * d;
    if constexpr (ITEMS > 0) {
      kjit_rows::RowRegs<T, TPR, VEC, ITEMS> gv, yv;
      if (live) {
        gv.load(g + off, d, C(0));
        yv.load(y + off, d, C(0));
      }
      C s = live ? gv.fold(d, sum_op, [&](C e, int it, int k) { return LOG ? e : e * yv.v[it][k]; }) : C(0);
      s = kjit_rows::row_reduce<TPR, ROWS>(s, sum_op);
      if (!live) continue;
      kjit_rows::store_regs<T, TPR, VEC, ITEMS>(dx + off, d, [&](int it, int k) {
        const C ge = gv.v[it][k], ye = yv.v[it][k];
        return LOG ? ge - exp_(ye) * s : ye * (ge - s);
      });
    } else {
      using kjit_detail::Vec;
      C s = C(0);
      if (live)
        kjit_rows::stream<T, TPR, VEC>(g + off, d, [&](int j, const C* c) {
          const Vec<T, VEC> yy = reinterpret_cast<const Vec<T, VEC>*>(y + off)[j];
#pragma unroll
          for (int k = 0; k < VEC; ++k) s += LOG ? c[k] : c[k] * kjit_detail::to<C>(yy.v[k]);
        });
      s = kjit_rows::row_reduce<TPR, ROWS>(s, sum_op);
      if (!live) continue;
      kjit_rows::stream<T, TPR, VEC>(g + off, d, [&](int j, const C* c) {
        const Vec<T, VEC> yy = reinterpret_cast<const Vec<T, VEC>*>(y + off)[j];
        Vec<T, VEC> o;
#pragma unroll
        for (int k = 0; k < VEC; ++k) {
          const C ye = kjit_detail::to<C>(yy.v[k]);
          o.v[k] = static_cast<T>(LOG ? c[k] - exp_(ye) * s : ye * (c[k] - s));
        }
        reinterpret_cast<Vec<T, VEC>*>(dx + off)[j] = o;
      });
    }
  }
}
