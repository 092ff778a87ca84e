// One DDPM denoising step (the diffusers DDPMScheduler's step for an epsilon-predicting model), elementwise:
//
//   x0   = x * r - eps * q                       the predicted clean sample
//   x0   = clamp(x0, -clip, clip)                where CLIP (clip_sample)
//   out  = a * x0 + b * x + sigma * noise        the posterior mean, plus noise (none where NOISE is false)
//
// with (r, q, a, b, sigma) = coefficients[t * 5 .. t * 5 + 4] (CT: float32 or float64, in device memory: a CUDA graph
// of the whole denoising loop replays with no host work, and a new schedule is a copy into the table, never a
// recapture). `t` is the step's row, a kernel argument. Half types compute in float; double in double.
// Preconditions (checked by the caller): x, eps, noise and out aligned to sizeof(T) * VEC bytes.
// Launch: any 1-D grid (grid-stride loop).
#pragma once

#include "detail/numeric.cuh"

template <typename T, typename CT, int VEC, bool CLIP, bool NOISE>
__global__ void ddpm_step(const T* __restrict__ x, const T* __restrict__ eps, const T* __restrict__ noise,
                          T* __restrict__ out, const CT* __restrict__ coefficients, long long t, float clip,
                          long long n) {
  using kjit_detail::acc_t;
  using kjit_detail::narrow;
  using kjit_detail::Vec;
  using kjit_detail::widen;
  using A = acc_t<T>;
  const CT* c = coefficients + t * 5;
  const A r = A(c[0]), q = A(c[1]), a = A(c[2]), b = A(c[3]), sigma = A(c[4]), lim = clip;
  const auto step = [&](T xv, T ev, T zv) {
    const A xw = widen(xv);
    A x0 = xw * r - widen(ev) * q;
    if (CLIP) x0 = x0 < -lim ? -lim : (x0 > lim ? lim : x0);  // NaN stays NaN
    A o = a * x0 + b * xw;
    if (NOISE) o += sigma * widen(zv);
    return narrow<T>(o);
  };
  const long long n_vec = n / VEC;
  const long long stride = kjit_detail::grid_threads();
#pragma unroll 1
  for (long long i = kjit_detail::global_thread(); i < n_vec; i += stride) {
    const Vec<T, VEC> xv = reinterpret_cast<const Vec<T, VEC>*>(x)[i];
    const Vec<T, VEC> ev = reinterpret_cast<const Vec<T, VEC>*>(eps)[i];
    Vec<T, VEC> zv;
    if (NOISE) zv = reinterpret_cast<const Vec<T, VEC>*>(noise)[i];
    Vec<T, VEC> o;
#pragma unroll
    for (int k = 0; k < VEC; ++k) o.v[k] = step(xv.v[k], ev.v[k], NOISE ? zv.v[k] : xv.v[k]);
    reinterpret_cast<Vec<T, VEC>*>(out)[i] = o;
  }
  const long long tail = n_vec * VEC + kjit_detail::global_thread();
  if (tail < n) out[tail] = step(x[tail], eps[tail], NOISE ? noise[tail] : x[tail]);
}

// The table ddpm_step reads, from the betas [n] (any dtype, `sb` elements apart): row t of out [n, 5] is
// (r, q, a, b, sigma) of the step from timestep t to t - step, in float64, stored as float32 (the formulas are
// python/src/ops/ddpm.cpp's). Thread t forms its own cumulative products (n is a schedule's length: a
// thousand steps is a million multiplies). Launch: any 1-D grid (grid-stride loop).
template <typename T>
__global__ void ddpm_coefficients(const T* __restrict__ betas, long long sb, float* __restrict__ out, long long n,
                                  long long step) {
  const long long stride = kjit_detail::grid_threads();
#pragma unroll 1
  for (long long t = kjit_detail::global_thread(); t < n; t += stride) {
    double abar = 1.0, abar_prev = 1.0;
#pragma unroll 1
    for (long long i = 0; i <= t; ++i) {
      abar *= 1.0 - kjit_detail::to<double>(betas[i * sb]);
      if (i == t - step) abar_prev = abar;
    }
    const double alpha = abar / abar_prev, beta = 1.0 - alpha;
    const double var = (1.0 - abar_prev) / (1.0 - abar) * beta;
    float* row = out + t * 5;
    row[0] = static_cast<float>(1.0 / sqrt(abar));
    row[1] = static_cast<float>(sqrt(1.0 - abar) / sqrt(abar));
    row[2] = static_cast<float>(sqrt(abar_prev) * beta / (1.0 - abar));
    row[3] = static_cast<float>(sqrt(alpha) * (1.0 - abar_prev) / (1.0 - abar));
    row[4] = t < step ? 0.f : static_cast<float>(sqrt(var > 1e-20 ? var : 1e-20));
  }
}
