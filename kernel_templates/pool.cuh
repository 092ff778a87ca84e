// max_pool2d and avg_pool2d over NCHW tensors (contiguous), and their backward.
//
// The window (KH x KW), stride (SH, SW) and padding (PH, PW) are specialized; the sizes are runtime
// arguments. No dilation; floor mode: OH = (H + 2 PH - KH) / SH + 1. One thread per output element
// (forward) or per input element (backward, a gather: no atomics, deterministic). Half types compute
// in float. Grid: x over the positions of one plane (32-bit: the caller checks H * W < 2^31), y over
// the N * C planes (blocks loop over planes past gridDim.y).
//
//   max: the first largest element of the window in row-major order; NaN wins (PyTorch's rule). The
//        backward recomputes each window's argmax from x, so no index tensor is stored.
//   avg: sum / divisor, divisor = KH * KW clipped to the padded input (COUNT_PAD, PyTorch's default
//        count_include_pad=True) or the number of elements inside the input.
#pragma once

#include "detail/numeric.cuh"

namespace kjit_pool {

struct Window {
  int h0, h1, w0, w1;  // the window clipped to the input: [h0, h1) x [w0, w1)
  int top, left;       // its unclipped first row and column (may be negative: padding)
  int divisor_pad;     // size of the window clipped to the padded input
};

template <int KH, int KW, int SH, int SW, int PH, int PW>
__device__ __forceinline__ Window window(int oh, int ow, int H, int W) {
  const int top = oh * SH - PH, left = ow * SW - PW;
  const int h1p = min(top + KH, H + PH), w1p = min(left + KW, W + PW);
  return {max(top, 0), min(h1p, H), max(left, 0), min(w1p, W), top, left, (h1p - top) * (w1p - left)};
}

// Index (h * W + w) of the window's max: the first largest in row-major order, NaN wins. The loops
// run over the whole KH x KW window (unrolled) with the out-of-input positions masked.
template <int KH, int KW, typename T>
__device__ __forceinline__ int argmax(const T* __restrict__ plane, const Window& win, int W) {
  using C = kjit_detail::acc_t<T>;
  int best = win.h0 * W + win.w0;
  C best_v = kjit_detail::to<C>(plane[best]);
#pragma unroll
  for (int kh = 0; kh < KH; ++kh) {
    const int h = win.top + kh;
#pragma unroll
    for (int kw = 0; kw < KW; ++kw) {
      const int w = win.left + kw;
      if (h >= win.h0 && h < win.h1 && w >= win.w0 && w < win.w1) {
        const C v = kjit_detail::to<C>(plane[h * W + w]);
        if (v > best_v || v != v) {
          best_v = v;
          best = h * W + w;
        }
      }
    }
  }
  return best;
}

template <int KH, int KW, typename T>
__device__ __forceinline__ kjit_detail::acc_t<T> window_sum(const T* __restrict__ plane, const Window& win, int W) {
  using C = kjit_detail::acc_t<T>;
  C s = C(0);
#pragma unroll
  for (int kh = 0; kh < KH; ++kh) {
    const int h = win.top + kh;
#pragma unroll
    for (int kw = 0; kw < KW; ++kw) {
      const int w = win.left + kw;
      if (h >= win.h0 && h < win.h1 && w >= win.w0 && w < win.w1) s += kjit_detail::to<C>(plane[h * W + w]);
    }
  }
  return s;
}

}  // namespace kjit_pool

template <typename T, int KH, int KW, int SH, int SW, int PH, int PW, bool MAX, bool COUNT_PAD>
__global__ void __launch_bounds__(256)
    pool2d_forward(const T* __restrict__ x, T* __restrict__ y, long long planes, int H, int W, int OH, int OW) {
  using C = kjit_detail::acc_t<T>;
  const int pos = blockIdx.x * blockDim.x + threadIdx.x;
  if (pos >= OH * OW) return;
  const int ow = pos % OW, oh = pos / OW;
  const kjit_pool::Window win = kjit_pool::window<KH, KW, SH, SW, PH, PW>(oh, ow, H, W);
  const int divisor = COUNT_PAD ? win.divisor_pad : (win.h1 - win.h0) * (win.w1 - win.w0);
  for (long long plane = blockIdx.y; plane < planes; plane += gridDim.y) {
    const T* p = x + plane * H * W;
    T out;
    if constexpr (MAX) {
      out = p[kjit_pool::argmax<KH, KW>(p, win, W)];
    } else {
      out = static_cast<T>(kjit_pool::window_sum<KH, KW>(p, win, W) / static_cast<C>(divisor));
    }
    y[plane * OH * OW + pos] = out;
  }
}

template <typename T, int KH, int KW, int SH, int SW, int PH, int PW, bool MAX, bool COUNT_PAD>
__global__ void __launch_bounds__(256)
    pool2d_backward(const T* __restrict__ g, const T* __restrict__ x, T* __restrict__ dx, long long planes, int H,
                    int W, int OH, int OW) {
  using C = kjit_detail::acc_t<T>;
  const int pos = blockIdx.x * blockDim.x + threadIdx.x;
  if (pos >= H * W) return;
  const int iw = pos % W, ih = pos / W;
  // Output rows / columns whose window covers (ih, iw).
  const int oh0 = ih + PH < KH ? 0 : (ih + PH - KH) / SH + 1;
  const int oh1 = min((ih + PH) / SH + 1, OH);
  const int ow0 = iw + PW < KW ? 0 : (iw + PW - KW) / SW + 1;
  const int ow1 = min((iw + PW) / SW + 1, OW);
  for (long long plane = blockIdx.y; plane < planes; plane += gridDim.y) {
    const T* gp = g + plane * OH * OW;
    C s = C(0);
    for (int oh = oh0; oh < oh1; ++oh)
      for (int ow = ow0; ow < ow1; ++ow) {
        const kjit_pool::Window win = kjit_pool::window<KH, KW, SH, SW, PH, PW>(oh, ow, H, W);
        if constexpr (MAX) {
          if (kjit_pool::argmax<KH, KW>(x + plane * H * W, win, W) == pos) s += kjit_detail::to<C>(gp[oh * OW + ow]);
        } else {
          const int divisor = COUNT_PAD ? win.divisor_pad : (win.h1 - win.h0) * (win.w1 - win.w0);
          s += kjit_detail::to<C>(gp[oh * OW + ow]) / static_cast<C>(divisor);
        }
      }
    dx[plane * H * W + pos] = static_cast<T>(s);
  }
}
