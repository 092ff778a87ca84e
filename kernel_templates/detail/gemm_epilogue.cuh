// The fused epilogue of kjit's GEMM kernels (gemm.cuh: mma.sync, gemm_sm90.cuh: wgmma): what happens to
// an accumulator between the tensor cores and global memory. Shared by both, so every kernel computes the
// same function of the same fp32 accumulator:
//
//   z   = scale * acc + bias[n]                      (pre-activation; AUX keeps it in `aux`)
//   out = act(z) + residual[m, n]                    (ACT: kActNone, kActRelu, kActGelu, kActGeluTanh, kActSilu)
//   SwiGLU (the gated MLP): two accumulators per output, gate g and up u, no bias:
//   z_g = scale * g, z_u = scale * u, out = silu(z_g) * z_u (+ residual); AUX keeps z_g at column n and
//   z_u at column n + N of `aux` (an [M, 2N] tensor: the layout of x @ w_gate_up.T).
//
// Both MMA fragment layouts (mma.sync m16n8 and wgmma m64nN) hand each thread pairs of adjacent columns
// (n, n + 1) of one row, so the epilogue works on pairs: `store_pair` writes them as one 4-byte store when
// the row and column allow it.
#pragma once

#include "../math.cuh"
#include "numeric.cuh"

namespace kjit_gemm {

enum : int { kActNone = 0, kActRelu = 1, kActGelu = 2, kActGeluTanh = 3, kActSilu = 4 };

template <int ACT>
__device__ __forceinline__ float activate(float v) {
  if constexpr (ACT == kActRelu)
    return kjit_math::relu(v);
  else if constexpr (ACT == kActGelu)
    return kjit_math::gelu(v);
  else if constexpr (ACT == kActGeluTanh)
    return kjit_math::gelu_tanh(v);
  else if constexpr (ACT == kActSilu)
    return kjit_math::silu(v);
  else
    return v;
}

// Everything an epilogue reads besides the accumulator (kernel arguments, passed through unchanged).
// Row strides are in elements. Pointers the specialization does not use are null.
template <typename T>
struct Epilogue {
  const T* bias;      // [N] (HAS_BIAS)
  const T* residual;  // [M, N] with row stride ld_residual (HAS_RESIDUAL)
  T* aux;             // [M, N] ([M, 2N] for SwiGLU) with row stride ld_aux (AUX)
  long long ld_residual;
  long long ld_aux;
  float scale;
};

template <typename T>
__device__ __forceinline__ void store_pair(T* p, bool both, float v0, float v1) {
  if (both && (reinterpret_cast<unsigned long long>(p) & (2 * sizeof(T) - 1)) == 0) {
    kjit_detail::Vec<T, 2> v;
    v.v[0] = static_cast<T>(v0);
    v.v[1] = static_cast<T>(v1);
    *reinterpret_cast<kjit_detail::Vec<T, 2>*>(p) = v;
  } else {
    p[0] = static_cast<T>(v0);
    if (both) p[1] = static_cast<T>(v1);
  }
}

template <typename T>
__device__ __forceinline__ float2 load_pair(const T* p, bool both) {
  float2 r;
  r.x = static_cast<float>(p[0]);
  r.y = both ? static_cast<float>(p[1]) : 0.f;
  return r;
}

// The finished outputs (m, n) and (m, n + 1) of a plain GEMM from accumulators a0, a1 (the second only
// when `both`: column n + 1 exists): bias, AUX's store of the pre-activation, activation, residual. The
// caller has checked that row m and column n exist; the kernel stores the result (store_pair, or through
// shared memory and a TMA store).
template <typename T, int ACT, bool HAS_BIAS, bool HAS_RESIDUAL, bool AUX>
__device__ __forceinline__ float2 finish_values(const Epilogue<T>& e, int m, int n, bool both, float a0, float a1) {
  float z0 = e.scale * a0, z1 = e.scale * a1;
  if constexpr (HAS_BIAS) {
    const float2 b = load_pair(e.bias + n, both);
    z0 += b.x;
    z1 += b.y;
  }
  if constexpr (AUX) store_pair(e.aux + m * e.ld_aux + n, both, z0, z1);
  float o0 = activate<ACT>(z0), o1 = activate<ACT>(z1);
  if constexpr (HAS_RESIDUAL) {
    const float2 r = load_pair(e.residual + m * e.ld_residual + n, both);
    o0 += r.x;
    o1 += r.y;
  }
  return make_float2(o0, o1);
}

// The SwiGLU form of finish_values: g0, g1 the gate accumulators, u0, u1 the up ones of outputs (m, n),
// (m, n + 1); n_limit is N (the output width: AUX's up half starts there).
template <typename T, bool HAS_RESIDUAL, bool AUX>
__device__ __forceinline__ float2 finish_swiglu_values(const Epilogue<T>& e, int m, int n, int n_limit, bool both,
                                                       float g0, float g1, float u0, float u1) {
  const float zg0 = e.scale * g0, zg1 = e.scale * g1, zu0 = e.scale * u0, zu1 = e.scale * u1;
  if constexpr (AUX) {
    T* row = e.aux + m * e.ld_aux;
    store_pair(row + n, both, zg0, zg1);
    store_pair(row + n_limit + n, both, zu0, zu1);
  }
  float o0 = kjit_math::silu(zg0) * zu0, o1 = kjit_math::silu(zg1) * zu1;
  if constexpr (HAS_RESIDUAL) {
    const float2 r = load_pair(e.residual + m * e.ld_residual + n, both);
    o0 += r.x;
    o1 += r.y;
  }
  return make_float2(o0, o1);
}

// Finishes and stores the outputs (m, n) and (m, n + 1) of a plain GEMM from accumulators a0, a1.
// Columns at or past n_limit and rows at or past m_limit are not written.
template <typename T, int ACT, bool HAS_BIAS, bool HAS_RESIDUAL, bool AUX>
__device__ __forceinline__ void finish_pair(const Epilogue<T>& e, T* c, long long ldc, int m, int n, int m_limit,
                                            int n_limit, float a0, float a1) {
  if (m >= m_limit || n >= n_limit) return;
  const bool both = n + 1 < n_limit;
  const float2 o = finish_values<T, ACT, HAS_BIAS, HAS_RESIDUAL, AUX>(e, m, n, both, a0, a1);
  store_pair(c + m * ldc + n, both, o.x, o.y);
}

// The SwiGLU form of finish_pair.
template <typename T, bool HAS_RESIDUAL, bool AUX>
__device__ __forceinline__ void finish_swiglu_pair(const Epilogue<T>& e, T* c, long long ldc, int m, int n, int m_limit,
                                                   int n_limit, float g0, float g1, float u0, float u1) {
  if (m >= m_limit || n >= n_limit) return;
  const bool both = n + 1 < n_limit;
  const float2 o = finish_swiglu_values<T, HAS_RESIDUAL, AUX>(e, m, n, n_limit, both, g0, g1, u0, u1);
  store_pair(c + m * ldc + n, both, o.x, o.y);
}

}  // namespace kjit_gemm
