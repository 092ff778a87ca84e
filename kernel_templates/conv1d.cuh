// Causal depthwise conv1d over the last dim (Mamba's short convolution), and its backward:
//
//   y[b, d, t] = act(bias[d] + sum_k w[d, k] x[b, d, t - (W-1) + k]),  k in [0, W)
//
// where x[..., p] for p < 0 is the initial state init[b, d, W-1 + p] (or 0), and act is SiLU or the identity.
// final_state[b, d, j] = x[b, d, L - (W-1) + j] (the initial state where that is negative): the state a
// decoding step continues from. x's rows may have any batch / channel strides (unit stride along L); y,
// the states and the gradients are contiguous. Half types compute in float.
//
// One warp per (b, d) row, 8 rows per 256-thread block; blocks loop over the rows. A warp walks its row in
// chunks of ITEMS x 32 x VEC elements (lane l holds VEC consecutive elements of each 32 x VEC slice, VEC
// divides L): the W-1 inputs before a lane's first element come from the lanes before it by shuffles, or
// from the previous slice's last inputs, carried in registers: every input is read from memory once.
//
// The backward recomputes the pre-activation z, takes dz = dy * act'(z), and gathers
// dx[t] = sum_k w[k] dz[t + (W-1) - k] (+ dfinal where x[t] is part of the final state): the W-1 dz after a
// lane's last element come from the lanes after it, or (the slice's last lanes) are recomputed from memory.
// dw and dbias: per-row fp32 partial sums [rows, W + 1], added over the batch by the host (deterministic).
#pragma once

#include "detail/numeric.cuh"
#include "math.cuh"

namespace kjit_conv1d {

constexpr unsigned kFull = 0xffffffffu;

// Element i of a row of length L as C (0 past the end); VEC elements at once.
template <typename T, typename C, int VEC>
__device__ __forceinline__ void load(const T* __restrict__ p, long long i, long long L, C (&v)[VEC]) {
  if (i < L) {
    const auto w = *reinterpret_cast<const kjit_detail::Vec<T, VEC>*>(p + i);
#pragma unroll
    for (int k = 0; k < VEC; ++k) v[k] = kjit_detail::to<C>(w.v[k]);
  } else {
#pragma unroll
    for (int k = 0; k < VEC; ++k) v[k] = C(0);
  }
}

template <typename T, typename C, int VEC>
__device__ __forceinline__ void store(T* __restrict__ p, long long i, long long L, const C (&v)[VEC]) {
  if (i < L) {
    kjit_detail::Vec<T, VEC> w;
#pragma unroll
    for (int k = 0; k < VEC; ++k) w.v[k] = static_cast<T>(v[k]);
    *reinterpret_cast<kjit_detail::Vec<T, VEC>*>(p + i) = w;
  }
}

// ext[W-1 + k] = v[k], ext[W-1 - j] = the input j elements before the lane's first (j in [1, W)): from the
// lanes before (shuffles) or, for the slice's first lanes, from prev[j'-1] = the input j' before the slice.
template <typename C, int W, int VEC>
__device__ __forceinline__ void with_left_halo(const C (&v)[VEC], const C (&prev)[W - 1], int lane,
                                               C (&ext)[W - 1 + VEC]) {
#pragma unroll
  for (int k = 0; k < VEC; ++k) ext[W - 1 + k] = v[k];
#pragma unroll
  for (int j = 1; j < W; ++j) {
    const int dl = (j + VEC - 1) / VEC;  // lanes back
    C val = __shfl_up_sync(kFull, v[dl * VEC - j], dl);
    if (lane < dl) {
      const int back = j - lane * VEC;  // 1 .. W-1 elements before the slice
#pragma unroll
      for (int q = 1; q < W; ++q)
        if (q == back) val = prev[q - 1];
    }
    ext[W - 1 - j] = val;
  }
}

// prev[j-1] = the slice's input j elements before its end, for the next slice (every lane gets it).
template <typename C, int W, int VEC>
__device__ __forceinline__ void carry_out(const C (&v)[VEC], C (&prev)[W - 1]) {
#pragma unroll
  for (int j = 1; j < W; ++j) prev[j - 1] = __shfl_sync(kFull, v[(32 * VEC - j) % VEC], (32 * VEC - j) / VEC);
}

template <typename C, bool SILU>
__device__ __forceinline__ C activate(C z) {
  if constexpr (SILU)
    return kjit_math::silu(z);
  else
    return z;
}

template <typename C>
__device__ __forceinline__ C warp_sum(C v) {
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(kFull, v, off);
  return v;
}

// One row's inputs, weights and states, read from memory for the few positions a lane cannot get by a
// shuffle (the backward's right halo at a slice's end, the initial state's gradient).
template <typename T, typename C, int W, bool SILU>
struct Row {
  const T* x;     // the row, unit stride
  const T* init;  // [W-1] or null
  const T* dy;    // [L]
  C w[W];
  C bias;
  long long L;

  __device__ __forceinline__ C input(long long p) const {
    if (p >= 0) return kjit_detail::to<C>(x[p]);
    return init ? kjit_detail::to<C>(init[W - 1 + p]) : C(0);
  }
  // dz at position t (0 outside [0, L)).
  __device__ __forceinline__ C dz(long long t) const {
    if (t < 0 || t >= L) return C(0);
    C z = bias;
#pragma unroll
    for (int k = 0; k < W; ++k) z += w[k] * input(t - (W - 1) + k);
    const C g = kjit_detail::to<C>(dy[t]);
    if constexpr (SILU)
      return kjit_math::silu_backward(g, z);
    else
      return g;
  }
};

}  // namespace kjit_conv1d

// x: rows of B x D (row r = (r / D, r % D) at x + b * stride_b + d * stride_d); weight [D, W]; bias [D] or
// null; init and final_state [rows, W-1] (init may be null); y [rows, L].
template <typename T, int W, int VEC, int ITEMS, bool SILU>
__global__ void __launch_bounds__(256)
    causal_conv1d_forward(const T* __restrict__ x, const T* __restrict__ weight, const T* __restrict__ bias,
                          const T* __restrict__ init, T* __restrict__ y, T* __restrict__ final_state, long long rows,
                          long long D, long long L, long long stride_b, long long stride_d) {
  static_assert(W >= 2 && W <= 4, "causal_conv1d: 2 <= W <= 4");
  using C = kjit_detail::acc_t<T>;
  using kjit_detail::to;
  constexpr int SLICE = 32 * VEC;
  const int lane = threadIdx.x & 31;
  const long long warps = static_cast<long long>(gridDim.x) * 8;
  for (long long row = static_cast<long long>(blockIdx.x) * 8 + (threadIdx.x >> 5); row < rows; row += warps) {
    const long long bi = row / D, di = row - bi * D;
    const T* xr = x + bi * stride_b + di * stride_d;
    T* yr = y + row * L;
    const T* ir = init ? init + row * (W - 1) : nullptr;
    C w[W];
#pragma unroll
    for (int k = 0; k < W; ++k) w[k] = to<C>(weight[di * W + k]);
    const C b0 = bias ? to<C>(bias[di]) : C(0);
    C prev[W - 1];
#pragma unroll
    for (int j = 1; j < W; ++j) prev[j - 1] = ir ? to<C>(ir[W - 1 - j]) : C(0);
    for (long long c0 = 0; c0 < L; c0 += ITEMS * SLICE) {
      C v[ITEMS][VEC];
#pragma unroll
      for (int it = 0; it < ITEMS; ++it) kjit_conv1d::load<T, C, VEC>(xr, c0 + it * SLICE + lane * VEC, L, v[it]);
#pragma unroll
      for (int it = 0; it < ITEMS; ++it) {
        C ext[W - 1 + VEC];
        kjit_conv1d::with_left_halo<C, W, VEC>(v[it], prev, lane, ext);
        kjit_conv1d::carry_out<C, W, VEC>(v[it], prev);
        C out[VEC];
#pragma unroll
        for (int q = 0; q < VEC; ++q) {
          C z = b0;
#pragma unroll
          for (int k = 0; k < W; ++k) z += w[k] * ext[q + k];
          out[q] = kjit_conv1d::activate<C, SILU>(z);
        }
        kjit_conv1d::store<T, C, VEC>(yr, c0 + it * SLICE + lane * VEC, L, out);
      }
    }
    if (lane < W - 1) {
      const long long p = L - (W - 1) + lane;
      final_state[row * (W - 1) + lane] = p >= 0 ? xr[p] : (ir ? ir[W - 1 + p] : T(0.0f));
    }
  }
}

// dy [rows, L]; dfinal [rows, W-1] or null; x, weight, bias, init as the forward's; dx [rows, L];
// partial [rows, W + 1] of acc_t<T> (dw[0..W), dbias); dinit [rows, W-1] or null (not wanted).
template <typename T, int W, int VEC, int ITEMS, bool SILU>
__global__ void __launch_bounds__(256)
    causal_conv1d_backward(const T* __restrict__ dy, const T* __restrict__ dfinal, const T* __restrict__ x,
                           const T* __restrict__ weight, const T* __restrict__ bias, const T* __restrict__ init,
                           T* __restrict__ dx, kjit_detail::acc_t<T>* __restrict__ partial, T* __restrict__ dinit,
                           long long rows, long long D, long long L, long long stride_b, long long stride_d) {
  using C = kjit_detail::acc_t<T>;
  using kjit_detail::to;
  constexpr int SLICE = 32 * VEC;
  const int lane = threadIdx.x & 31;
  const long long warps = static_cast<long long>(gridDim.x) * 8;
  for (long long row = static_cast<long long>(blockIdx.x) * 8 + (threadIdx.x >> 5); row < rows; row += warps) {
    const long long bi = row / D, di = row - bi * D;
    kjit_conv1d::Row<T, C, W, SILU> r;
    r.x = x + bi * stride_b + di * stride_d;
    r.init = init ? init + row * (W - 1) : nullptr;
    r.dy = dy + row * L;
    r.L = L;
#pragma unroll
    for (int k = 0; k < W; ++k) r.w[k] = to<C>(weight[di * W + k]);
    r.bias = bias ? to<C>(bias[di]) : C(0);
    const T* df = dfinal ? dfinal + row * (W - 1) : nullptr;
    T* dxr = dx + row * L;
    C prev[W - 1];
#pragma unroll
    for (int j = 1; j < W; ++j) prev[j - 1] = r.init ? to<C>(r.init[W - 1 - j]) : C(0);
    C dw[W], db = C(0);
#pragma unroll
    for (int k = 0; k < W; ++k) dw[k] = C(0);
    for (long long c0 = 0; c0 < L; c0 += ITEMS * SLICE) {
      C v[ITEMS][VEC], g[ITEMS][VEC];
#pragma unroll
      for (int it = 0; it < ITEMS; ++it) {
        kjit_conv1d::load<T, C, VEC>(r.x, c0 + it * SLICE + lane * VEC, L, v[it]);
        kjit_conv1d::load<T, C, VEC>(r.dy, c0 + it * SLICE + lane * VEC, L, g[it]);
      }
#pragma unroll
      for (int it = 0; it < ITEMS; ++it) {
        const long long t0 = c0 + it * SLICE + lane * VEC;
        C ext[W - 1 + VEC];
        kjit_conv1d::with_left_halo<C, W, VEC>(v[it], prev, lane, ext);
        kjit_conv1d::carry_out<C, W, VEC>(v[it], prev);
        // dz of the lane's elements (0 past the end: dy is 0 there), then of the W-1 after them.
        C dz[VEC + W - 1];
#pragma unroll
        for (int q = 0; q < VEC; ++q) {
          C z = r.bias;
#pragma unroll
          for (int k = 0; k < W; ++k) z += r.w[k] * ext[q + k];
          dz[q] = SILU ? kjit_math::silu_backward(g[it][q], z) : g[it][q];
          db += dz[q];
#pragma unroll
          for (int k = 0; k < W; ++k) dw[k] += dz[q] * ext[q + k];
        }
#pragma unroll
        for (int j = 1; j < W; ++j) {
          const int dl = (VEC - 1 + j) / VEC;  // lanes ahead
          C val = __shfl_down_sync(kjit_conv1d::kFull, dz[(VEC - 1 + j) % VEC], dl);
          if (lane + dl > 31) val = r.dz(t0 + VEC - 1 + j);  // in the next slice: recomputed
          dz[VEC - 1 + j] = val;
        }
        C out[VEC];
#pragma unroll
        for (int q = 0; q < VEC; ++q) {
          C s = C(0);
#pragma unroll
          for (int k = 0; k < W; ++k) s += r.w[k] * dz[q + (W - 1) - k];
          const long long f = t0 + q - (L - (W - 1));        // x[t] is final_state[f]
          if (df && f >= 0 && f < W - 1) s += to<C>(df[f]);  // (past the end: nothing to read)
          out[q] = s;
        }
        kjit_conv1d::store<T, C, VEC>(dxr, t0, L, out);
      }
    }
#pragma unroll
    for (int k = 0; k < W; ++k) dw[k] = kjit_conv1d::warp_sum(dw[k]);
    db = kjit_conv1d::warp_sum(db);
    if (lane == 0) {
#pragma unroll
      for (int k = 0; k < W; ++k) partial[row * (W + 1) + k] = dw[k];
      partial[row * (W + 1) + W] = db;
    }
    if (dinit && lane < W - 1) {
      // The initial state's element j is the input at p = j - (W-1): it feeds dz[j - k] through w[k], and
      // final_state[j - L] when the row is shorter than the state.
      const int j = lane;
      C s = C(0);
#pragma unroll
      for (int k = 0; k < W; ++k) s += r.w[k] * r.dz(j - k);
      if (df && j >= L) s += to<C>(df[j - L]);
      dinit[row * (W - 1) + j] = static_cast<T>(s);
    }
  }
}
