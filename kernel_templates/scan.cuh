// The linear recurrence h[t] = a[t] * h[t-1] + b[t] over the last dim of contiguous [rows, L] tensors
// (h[-1] = h0[row], or 0), and its backward. The state is kept in the compute type (float for half types,
// double for float64); each output element is rounded once.
//
// One warp per row, 8 rows per 256-thread block; blocks loop over the rows. A warp walks its row in chunks
// of ITEMS x 32 x VEC elements (lane l holds VEC consecutive elements of each 32 x VEC slice): it loads
// the whole chunk first, then scans slice by slice: each lane folds its VEC elements into the affine map
// (A, B) = (prod a, the scan from 0), a warp scan composes the lanes' maps (5 shuffles), and each lane
// redoes its elements from the state before it. The state after a slice is carried to the next. The
// reassociation changes the rounding of a float loop (not its value): the tests compare with a float64 loop.
//
//   linear_scan_forward:  h, and h_last[row] = h[L-1] (the compute type)
//   linear_scan_backward: g[t] = dh[t] + a[t+1] g[t+1], g[L-1] = dh[L-1] + dlast (a reverse scan);
//                         db = g, da[t] = g[t] h[t-1], dh0 = a[0] g[0]. dh and dlast may be null (zero).
#pragma once

#include "detail/numeric.cuh"

namespace kjit_scan {

constexpr unsigned kFull = 0xffffffffu;

// The affine map h -> A h + B, composed with the maps of the lanes before it (forward) or after it
// (backward): the inclusive warp scan of the lanes' maps, in lane order or in reverse.
template <typename C, bool REVERSE>
__device__ __forceinline__ void warp_scan(C& A, C& B, int lane) {
#pragma unroll
  for (int off = 1; off < 32; off <<= 1) {
    const C a = REVERSE ? __shfl_down_sync(kFull, A, off) : __shfl_up_sync(kFull, A, off);
    const C b = REVERSE ? __shfl_down_sync(kFull, B, off) : __shfl_up_sync(kFull, B, off);
    if (REVERSE ? lane + off < 32 : lane >= off) {  // (a, b) first, then (A, B)
      B = A * b + B;
      A = A * a;
    }
  }
}

template <typename T, int VEC>
__device__ __forceinline__ void load(const T* __restrict__ p, long long i, long long L, T (&v)[VEC], T fill) {
  if (i < L) {
    const auto w = *reinterpret_cast<const kjit_detail::Vec<T, VEC>*>(p + i);
#pragma unroll
    for (int k = 0; k < VEC; ++k) v[k] = w.v[k];
  } else {
#pragma unroll
    for (int k = 0; k < VEC; ++k) v[k] = fill;
  }
}

template <typename T, int VEC>
__device__ __forceinline__ void store(T* __restrict__ p, long long i, long long L, const T (&v)[VEC]) {
  if (i < L) {
    kjit_detail::Vec<T, VEC> w;
#pragma unroll
    for (int k = 0; k < VEC; ++k) w.v[k] = v[k];
    *reinterpret_cast<kjit_detail::Vec<T, VEC>*>(p + i) = w;
  }
}

}  // namespace kjit_scan

// VEC divides L (the host picks it from L and the pointers' alignment); h_last is [rows] of acc_t<T>.
template <typename T, int VEC, int ITEMS>
__global__ void __launch_bounds__(256)
    linear_scan_forward(const T* __restrict__ a, const T* __restrict__ b, const kjit_detail::acc_t<T>* __restrict__ h0,
                        T* __restrict__ h, kjit_detail::acc_t<T>* __restrict__ h_last, long long rows, long long L) {
  using C = kjit_detail::acc_t<T>;
  using kjit_detail::to;
  constexpr int SLICE = 32 * VEC;
  const int lane = threadIdx.x & 31;
  const long long warps = static_cast<long long>(gridDim.x) * 8;
  for (long long row = static_cast<long long>(blockIdx.x) * 8 + (threadIdx.x >> 5); row < rows; row += warps) {
    const T* ar = a + row * L;
    const T* br = b + row * L;
    T* hr = h + row * L;
    C carry = h0 ? h0[row] : C(0);
    for (long long c0 = 0; c0 < L; c0 += ITEMS * SLICE) {
      T av[ITEMS][VEC], bv[ITEMS][VEC];
#pragma unroll
      for (int it = 0; it < ITEMS; ++it) {
        const long long i = c0 + it * SLICE + lane * VEC;
        kjit_scan::load<T, VEC>(ar, i, L, av[it], T(1.0f));  // past the end: the identity map
        kjit_scan::load<T, VEC>(br, i, L, bv[it], T(0.0f));
      }
#pragma unroll
      for (int it = 0; it < ITEMS; ++it) {
        C A = C(1), B = C(0);
#pragma unroll
        for (int k = 0; k < VEC; ++k) {
          const C ak = to<C>(av[it][k]);
          B = ak * B + to<C>(bv[it][k]);
          A = ak * A;
        }
        kjit_scan::warp_scan<C, false>(A, B, lane);
        // The state before this lane: the exclusive scan applied to the carry.
        C ae = __shfl_up_sync(kjit_scan::kFull, A, 1), be = __shfl_up_sync(kjit_scan::kFull, B, 1);
        if (lane == 0) ae = C(1), be = C(0);
        // (A 0 state is not multiplied: an inf in a must not turn the start of the sequence into 0 * inf.)
        C s = carry == C(0) ? be : ae * carry + be;
        T out[VEC];
#pragma unroll
        for (int k = 0; k < VEC; ++k) {
          s = to<C>(av[it][k]) * s + to<C>(bv[it][k]);
          out[k] = static_cast<T>(s);
        }
        kjit_scan::store<T, VEC>(hr, c0 + it * SLICE + lane * VEC, L, out);
        carry = __shfl_sync(kjit_scan::kFull, s, 31);
      }
    }
    if (lane == 0) h_last[row] = carry;
  }
}

// Reads dh (or null), dlast ([rows], or null), a, h and h0 (or null); writes da, db (T) and dh0 ([rows] of
// acc_t<T>, or null when h0 has no gradient). Walks each row from its end.
template <typename T, int VEC, int ITEMS>
__global__ void __launch_bounds__(256)
    linear_scan_backward(const T* __restrict__ dh, const kjit_detail::acc_t<T>* __restrict__ dlast,
                         const T* __restrict__ a, const T* __restrict__ h, const kjit_detail::acc_t<T>* __restrict__ h0,
                         T* __restrict__ da, T* __restrict__ db, kjit_detail::acc_t<T>* __restrict__ dh0,
                         long long rows, long long L) {
  using C = kjit_detail::acc_t<T>;
  using kjit_detail::to;
  constexpr int SLICE = 32 * VEC;
  constexpr int CHUNK = ITEMS * SLICE;
  const int lane = threadIdx.x & 31;
  const long long warps = static_cast<long long>(gridDim.x) * 8;
  for (long long row = static_cast<long long>(blockIdx.x) * 8 + (threadIdx.x >> 5); row < rows; row += warps) {
    const long long off = row * L;
    C carry = dlast ? dlast[row] : C(0);  // g[t + 1] for the last element of the slice being scanned
    C a_next = C(1);                      // a[t + 1] there (1 past the end: g[L-1] = dh[L-1] + dlast)
    C a0 = C(0), g0 = C(0);
    const long long last_chunk = (L - 1) / CHUNK * CHUNK;
    for (long long c0 = last_chunk; c0 >= 0; c0 -= CHUNK) {
      T av[ITEMS][VEC], hv[ITEMS][VEC], gv[ITEMS][VEC];
#pragma unroll
      for (int it = 0; it < ITEMS; ++it) {
        const long long i = c0 + it * SLICE + lane * VEC;
        kjit_scan::load<T, VEC>(a + off, i, L, av[it], T(1.0f));  // past the end: the identity (dh = 0)
        kjit_scan::load<T, VEC>(h + off, i, L, hv[it], T(0.0f));
        if (dh)
          kjit_scan::load<T, VEC>(dh + off, i, L, gv[it], T(0.0f));
        else
#pragma unroll
          for (int k = 0; k < VEC; ++k) gv[it][k] = T(0.0f);
      }
      // h[t - 1] before the chunk's first element.
      const C h_before = c0 > 0 ? to<C>(h[off + c0 - 1]) : (h0 ? h0[row] : C(0));
#pragma unroll
      for (int it = ITEMS - 1; it >= 0; --it) {
        const long long i0 = c0 + it * SLICE + lane * VEC;
        // a[t + 1] of the lane's last element: the next lane's first a, or the next slice's (a_next).
        C a_after = __shfl_down_sync(kjit_scan::kFull, to<C>(av[it][0]), 1);
        if (lane == 31) a_after = a_next;
        if (i0 + VEC >= L) a_after = C(1);  // the row's last element (elements past L are inert: dh = 0)
        // The lane's map g_in -> A g_in + B over its elements, from the last one back (g_in: g of the next
        // lane's first element). Lanes past the row's end are the identity.
        C A = C(1), B = C(0);
        if (i0 < L) {
#pragma unroll
          for (int k = VEC - 1; k >= 0; --k) {
            const C m = k == VEC - 1 ? a_after : to<C>(av[it][k + 1]);
            B = m * B + to<C>(gv[it][k]);
            A = m * A;
          }
        }
        // Composed in reverse lane order: the lanes after this one apply first.
        kjit_scan::warp_scan<C, true>(A, B, lane);
        C ae = __shfl_down_sync(kjit_scan::kFull, A, 1), be = __shfl_down_sync(kjit_scan::kFull, B, 1);
        if (lane == 31) ae = C(1), be = C(0);
        C g = carry == C(0) ? be : ae * carry + be;  // g of the next lane's first element
        // h[t - 1] of the lane's first element: the previous lane's last h, or the previous slice's.
        C h_prev_lane = __shfl_up_sync(kjit_scan::kFull, to<C>(hv[it][VEC - 1]), 1);
        const C slice_before =
            it > 0 ? __shfl_sync(kjit_scan::kFull, to<C>(hv[it > 0 ? it - 1 : 0][VEC - 1]), 31) : h_before;
        if (lane == 0) h_prev_lane = slice_before;
        T dav[VEC], dbv[VEC];
#pragma unroll
        for (int k = VEC - 1; k >= 0; --k) {
          const C m = k == VEC - 1 ? a_after : to<C>(av[it][k + 1]);
          g = to<C>(gv[it][k]) + m * g;
          const C hp = k == 0 ? h_prev_lane : to<C>(hv[it][k - 1]);
          dbv[k] = static_cast<T>(g);
          dav[k] = static_cast<T>(g * hp);
        }
        kjit_scan::store<T, VEC>(db + off, i0, L, dbv);
        kjit_scan::store<T, VEC>(da + off, i0, L, dav);
        if (it == 0 && c0 == 0 && lane == 0) {
          a0 = to<C>(av[0][0]);
          g0 = g;
        }
        carry = __shfl_sync(kjit_scan::kFull, g, 0);  // g of the slice's first element
        a_next = __shfl_sync(kjit_scan::kFull, to<C>(av[it][0]), 0);
      }
    }
    if (dh0 && lane == 0) dh0[row] = a0 * g0;
  }
}
