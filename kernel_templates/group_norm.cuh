// group_norm over [B, C, L] (contiguous; L the product of the dims after C) in G groups of Cg = C / G
// channels, with the activation, FiLM and residual of a diffusion U-Net's blocks fused after it, and its
// backward. A group's Cg * L elements are contiguous: group q = b * G + g starts at element q * Cg * L.
//
//   z = (x - mean) * rstd * w[c] + b[c]      mean, rstd = 1 / sqrt(var + eps) over the group (biased var)
//   y = act(z) * scale[b, c] + shift[b, c] + residual[b, c, l]
//
// ACT: 0 none, 1 silu, 2 mish (kernel_templates/math.cuh). HAS_W / HAS_B: the affine weight and bias [C];
// FILM_SCALE / FILM_SHIFT: the per-(batch, channel) FiLM terms, [B, C] with `film_ld` elements between
// batches (the scale and shift halves of one [B, 2, C] embedding: film_ld 2C); RESIDUAL: [B, C, L] like y.
// Pointers a flag leaves out are not read (pass nullptr). Half types compute in float, float64 in double (A).
//
// Launch (both kernels): grid (min(groups, a few blocks per multiprocessor)), blocks loop over groups;
// block THREADS threads (a power of two, 32-1024). VEC: elements per vector access, > 1 only where L is a
// multiple of VEC and x, y (and residual, dy, dx) are 16-byte aligned (a vector then lies in one channel).
//
//   group_norm_forward:  two passes over the group for its moments (the mean, then the variance around it:
//                        exact for data far from zero), a third writes y; mean_out / rstd_out [B * G]
//                        get the statistics (STATS; nullptr otherwise).
//   group_norm_backward: from dy, x and the forward's mean / rstd (the activation's input z recomputed):
//                        dz = dy * scale[b, c] * act'(z), dxhat = dz * w[c],
//                        dx = rstd * (dxhat - mean(dxhat) - xhat * mean(dxhat * xhat)) over the group;
//                        and per (b, c), sums over L written to [B, C] arrays (nullptr: not wanted):
//                        dw_bc = sum dz * xhat, db_bc = sum dz, dscale_bc = sum dy * act(z),
//                        dshift_bc = sum dy (the caller sums dw_bc / db_bc over B). A warp walks a
//                        channel's L elements (the per-channel sums), the warps of the block the group's
//                        channels. The residual's gradient is dy itself.
#pragma once

#include "detail/rows.cuh"  // and numeric.cuh
#include "math.cuh"

namespace kjit_group_norm {

template <int ACT, typename A>
__device__ __forceinline__ A activation(A z) {
  if constexpr (ACT == 1) return kjit_math::silu(z);
  if constexpr (ACT == 2) return kjit_math::mish(z);
  return z;
}
// d act(z) / dz times g.
template <int ACT, typename A>
__device__ __forceinline__ A activation_backward(A g, A z) {
  if constexpr (ACT == 1) return kjit_math::silu_backward(g, z);
  if constexpr (ACT == 2) return kjit_math::mish_backward(g, z);
  return g;
}

// op over the block's THREADS threads (blockDim (THREADS, 1)); every thread gets the result.
template <int THREADS, typename A>
__device__ __forceinline__ A block_sum(A v) {
  return kjit_rows::row_reduce<THREADS, 1>(v, kjit_rows::Sum());
}

// f(i, values) for every VEC-vector of the n elements at `p` (i: its first element's index), spread over
// the block's threads.
template <typename T, int THREADS, int VEC, typename F>
__device__ __forceinline__ void for_vectors(const T* __restrict__ p, long long n, F f) {
  using A = kjit_detail::acc_t<T>;
  using VT = kjit_detail::Vec<T, VEC>;
  for (long long i = static_cast<long long>(threadIdx.x) * VEC; i < n; i += static_cast<long long>(THREADS) * VEC) {
    const VT v = *reinterpret_cast<const VT*>(p + i);
    A a[VEC];
#pragma unroll
    for (int k = 0; k < VEC; ++k) a[k] = kjit_detail::to<A>(v.v[k]);
    f(i, a);
  }
}

}  // namespace kjit_group_norm

template <typename T, int THREADS, int VEC, int ACT, bool HAS_W, bool HAS_B, bool FILM_SCALE, bool FILM_SHIFT,
          bool RESIDUAL, bool STATS>
__global__ void __launch_bounds__(THREADS)
    group_norm_forward(const T* __restrict__ x, const T* __restrict__ w, const T* __restrict__ b,
                       const T* __restrict__ film_scale, const T* __restrict__ film_shift, long long film_ld,
                       const T* __restrict__ residual, T* __restrict__ y, kjit_detail::acc_t<T>* __restrict__ mean_out,
                       kjit_detail::acc_t<T>* __restrict__ rstd_out, long long groups, int num_groups, int cg,
                       long long l, double eps) {
  using A = kjit_detail::acc_t<T>;
  using VT = kjit_detail::Vec<T, VEC>;
  static_assert(ACT >= 0 && ACT <= 2, "ACT is 0 (none), 1 (silu) or 2 (mish)");
  const long long n = static_cast<long long>(cg) * l;
  const A inv_n = A(1) / static_cast<A>(n);
  for (long long q = blockIdx.x; q < groups; q += gridDim.x) {
    const long long base = q * n;
    const long long batch = q / num_groups;
    const int c0 = static_cast<int>(q % num_groups) * cg;
    A s = A(0);
    kjit_group_norm::for_vectors<T, THREADS, VEC>(x + base, n, [&](long long, const A(&a)[VEC]) {
#pragma unroll
      for (int k = 0; k < VEC; ++k) s += a[k];
    });
    const A mean = kjit_group_norm::block_sum<THREADS>(s) * inv_n;
    A ss = A(0);
    kjit_group_norm::for_vectors<T, THREADS, VEC>(x + base, n, [&](long long, const A(&a)[VEC]) {
#pragma unroll
      for (int k = 0; k < VEC; ++k) ss += (a[k] - mean) * (a[k] - mean);
    });
    const A var = kjit_group_norm::block_sum<THREADS>(ss) * inv_n;
    const A rstd = A(1) / sqrt(var + static_cast<A>(eps));
    if constexpr (STATS) {
      if (threadIdx.x == 0) mean_out[q] = mean, rstd_out[q] = rstd;
    }
    kjit_group_norm::for_vectors<T, THREADS, VEC>(x + base, n, [&](long long i, const A(&a)[VEC]) {
      const int c = c0 + static_cast<int>(i / l);  // a vector lies in one channel (l % VEC == 0)
      const long long bc = batch * film_ld + c;
      VT r;
      if constexpr (RESIDUAL) r = *reinterpret_cast<const VT*>(residual + base + i);
      VT out;
#pragma unroll
      for (int k = 0; k < VEC; ++k) {
        A o = (a[k] - mean) * rstd;
        if constexpr (HAS_W) o *= kjit_detail::to<A>(w[c]);
        if constexpr (HAS_B) o += kjit_detail::to<A>(b[c]);
        o = kjit_group_norm::activation<ACT>(o);
        if constexpr (FILM_SCALE) o *= kjit_detail::to<A>(film_scale[bc]);
        if constexpr (FILM_SHIFT) o += kjit_detail::to<A>(film_shift[bc]);
        if constexpr (RESIDUAL) o += kjit_detail::to<A>(r.v[k]);
        out.v[k] = kjit_detail::narrow<T>(o);
      }
      *reinterpret_cast<VT*>(y + base + i) = out;
    });
  }
}

template <typename T, int THREADS, int VEC, int ACT, bool HAS_W, bool HAS_B, bool FILM_SCALE>
__global__ void __launch_bounds__(THREADS)
    group_norm_backward(const T* __restrict__ dy, const T* __restrict__ x,
                        const kjit_detail::acc_t<T>* __restrict__ mean, const kjit_detail::acc_t<T>* __restrict__ rstd,
                        const T* __restrict__ w, const T* __restrict__ b, const T* __restrict__ film_scale,
                        long long film_ld, T* __restrict__ dx, kjit_detail::acc_t<T>* __restrict__ dw_bc,
                        kjit_detail::acc_t<T>* __restrict__ db_bc, kjit_detail::acc_t<T>* __restrict__ dscale_bc,
                        kjit_detail::acc_t<T>* __restrict__ dshift_bc, long long groups, int num_groups, int cg,
                        long long l) {
  using A = kjit_detail::acc_t<T>;
  using VT = kjit_detail::Vec<T, VEC>;
  static_assert(THREADS >= 32 && THREADS % 32 == 0, "whole warps");
  static_assert(ACT >= 0 && ACT <= 2, "ACT is 0 (none), 1 (silu) or 2 (mish)");
  constexpr int WARPS = THREADS / 32;
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  const long long n = static_cast<long long>(cg) * l;
  const A inv_n = A(1) / static_cast<A>(n);
  const long long C = static_cast<long long>(num_groups) * cg;
  for (long long q = blockIdx.x; q < groups; q += gridDim.x) {
    const long long base = q * n;
    const long long batch = q / num_groups;
    const int c0 = static_cast<int>(q % num_groups) * cg;
    const A mu = mean[q], rs = rstd[q];
    // dz and dxhat of element e of channel c (vector k of values a / g): the activation's input recomputed.
    A s1 = A(0), s2 = A(0);  // this thread's sums of dxhat and dxhat * xhat over the group
    for (int ci = warp; ci < cg; ci += WARPS) {
      const int c = c0 + ci;
      const A wc = HAS_W ? kjit_detail::to<A>(w[c]) : A(1), bc = HAS_B ? kjit_detail::to<A>(b[c]) : A(0);
      const A sc = FILM_SCALE ? kjit_detail::to<A>(film_scale[batch * film_ld + c]) : A(1);
      A dw = A(0), db = A(0), dscale = A(0), dshift = A(0);
      const long long off = base + static_cast<long long>(ci) * l;
      for (long long i = static_cast<long long>(lane) * VEC; i < l; i += 32LL * VEC) {
        const VT xv = *reinterpret_cast<const VT*>(x + off + i);
        const VT gv = *reinterpret_cast<const VT*>(dy + off + i);
#pragma unroll
        for (int k = 0; k < VEC; ++k) {
          const A g = kjit_detail::to<A>(gv.v[k]);
          const A xhat = (kjit_detail::to<A>(xv.v[k]) - mu) * rs;
          const A z = xhat * wc + bc;
          const A dz = kjit_group_norm::activation_backward<ACT>(g * sc, z);
          if constexpr (FILM_SCALE) dscale += g * kjit_group_norm::activation<ACT>(z);
          dshift += g;
          dw += dz * xhat;
          db += dz;
          s1 += dz * wc;
          s2 += dz * wc * xhat;
        }
      }
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) {
        dw += __shfl_xor_sync(0xffffffffu, dw, o);
        db += __shfl_xor_sync(0xffffffffu, db, o);
        dscale += __shfl_xor_sync(0xffffffffu, dscale, o);
        dshift += __shfl_xor_sync(0xffffffffu, dshift, o);
      }
      if (lane == 0) {
        const long long at = batch * C + c;
        if (dw_bc) dw_bc[at] = dw;
        if (db_bc) db_bc[at] = db;
        if (dscale_bc) dscale_bc[at] = dscale;
        if (dshift_bc) dshift_bc[at] = dshift;
      }
    }
    const A m1 = kjit_group_norm::block_sum<THREADS>(s1) * inv_n;
    const A m2 = kjit_group_norm::block_sum<THREADS>(s2) * inv_n;
    for (int ci = warp; ci < cg; ci += WARPS) {
      const int c = c0 + ci;
      const A wc = HAS_W ? kjit_detail::to<A>(w[c]) : A(1), bc = HAS_B ? kjit_detail::to<A>(b[c]) : A(0);
      const A sc = FILM_SCALE ? kjit_detail::to<A>(film_scale[batch * film_ld + c]) : A(1);
      const long long off = base + static_cast<long long>(ci) * l;
      for (long long i = static_cast<long long>(lane) * VEC; i < l; i += 32LL * VEC) {
        const VT xv = *reinterpret_cast<const VT*>(x + off + i);
        const VT gv = *reinterpret_cast<const VT*>(dy + off + i);
        VT out;
#pragma unroll
        for (int k = 0; k < VEC; ++k) {
          const A xhat = (kjit_detail::to<A>(xv.v[k]) - mu) * rs;
          const A dz = kjit_group_norm::activation_backward<ACT>(kjit_detail::to<A>(gv.v[k]) * sc, xhat * wc + bc);
          out.v[k] = kjit_detail::narrow<T>(rs * (dz * wc - m1 - xhat * m2));
        }
        *reinterpret_cast<VT*>(dx + off + i) = out;
      }
    }
  }
}
