// max_pool2d and avg_pool2d over NCHW tensors (contiguous), and their backward.
//
// The window (KH x KW), stride (SH, SW) and padding (PH, PW) are specialized; the sizes are runtime
// arguments. No dilation; floor mode: OH = (H + 2 PH - KH) / SH + 1. One thread per output element
// (forward) or per input element (backward, a gather: no atomics, deterministic). Half types compute
// in float.
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
  int divisor_pad;     // size of the window clipped to the padded input
};

template <int KH, int KW, int SH, int SW, int PH, int PW>
__device__ __forceinline__ Window window(int oh, int ow, int H, int W) {
  int h0 = oh * SH - PH, w0 = ow * SW - PW;
  int h1 = min(h0 + KH, H + PH), w1 = min(w0 + KW, W + PW);
  const int pad_size = (h1 - h0) * (w1 - w0);
  h0 = max(h0, 0);
  w0 = max(w0, 0);
  h1 = min(h1, H);
  w1 = min(w1, W);
  return {h0, h1, w0, w1, pad_size};
}

// Index (h * W + w) of the window's max.
template <typename T>
__device__ __forceinline__ int argmax(const T* __restrict__ plane, const Window& win, int W) {
  using C = kjit_detail::acc_t<T>;
  int best = win.h0 * W + win.w0;
  C best_v = kjit_detail::to<C>(plane[best]);
  for (int h = win.h0; h < win.h1; ++h)
    for (int w = win.w0; w < win.w1; ++w) {
      const C v = kjit_detail::to<C>(plane[h * W + w]);
      if (v > best_v || v != v) {
        best_v = v;
        best = h * W + w;
      }
    }
  return best;
}

}  // namespace kjit_pool

template <typename T, int KH, int KW, int SH, int SW, int PH, int PW, bool MAX, bool COUNT_PAD>
__global__ void __launch_bounds__(256)
    pool2d_forward(const T* __restrict__ x, T* __restrict__ y, long long total, int H, int W, int OH, int OW) {
  using C = kjit_detail::acc_t<T>;
  for (long long i = kjit_detail::global_thread(); i < total; i += kjit_detail::grid_threads()) {
    const int ow = static_cast<int>(i % OW);
    const int oh = static_cast<int>((i / OW) % OH);
    const long long plane = i / (static_cast<long long>(OW) * OH);
    const T* p = x + plane * H * W;
    const kjit_pool::Window win = kjit_pool::window<KH, KW, SH, SW, PH, PW>(oh, ow, H, W);
    if constexpr (MAX) {
      y[i] = p[kjit_pool::argmax(p, win, W)];
    } else {
      C s = C(0);
      for (int h = win.h0; h < win.h1; ++h)
        for (int w = win.w0; w < win.w1; ++w) s += kjit_detail::to<C>(p[h * W + w]);
      const int divisor = COUNT_PAD ? win.divisor_pad : (win.h1 - win.h0) * (win.w1 - win.w0);
      y[i] = static_cast<T>(s / static_cast<C>(divisor));
    }
  }
}

template <typename T, int KH, int KW, int SH, int SW, int PH, int PW, bool MAX, bool COUNT_PAD>
__global__ void __launch_bounds__(256)
    pool2d_backward(const T* __restrict__ g, const T* __restrict__ x, T* __restrict__ dx, long long total, int H,
                    int W, int OH, int OW) {
  using C = kjit_detail::acc_t<T>;
  for (long long i = kjit_detail::global_thread(); i < total; i += kjit_detail::grid_threads()) {
    const int iw = static_cast<int>(i % W);
    const int ih = static_cast<int>((i / W) % H);
    const long long plane = i / (static_cast<long long>(W) * H);
    const T* gp = g + plane * OH * OW;
    // Output rows / columns whose window covers (ih, iw).
    const int oh0 = ih + PH < KH ? 0 : (ih + PH - KH) / SH + 1;
    const int oh1 = min((ih + PH) / SH + 1, OH);
    const int ow0 = iw + PW < KW ? 0 : (iw + PW - KW) / SW + 1;
    const int ow1 = min((iw + PW) / SW + 1, OW);
    C s = C(0);
    for (int oh = oh0; oh < oh1; ++oh)
      for (int ow = ow0; ow < ow1; ++ow) {
        const kjit_pool::Window win = kjit_pool::window<KH, KW, SH, SW, PH, PW>(oh, ow, H, W);
        if constexpr (MAX) {
          if (kjit_pool::argmax(x + plane * H * W, win, W) == ih * W + iw) s += kjit_detail::to<C>(gp[oh * OW + ow]);
        } else {
          const int divisor = COUNT_PAD ? win.divisor_pad : (win.h1 - win.h0) * (win.w1 - win.w0);
          s += kjit_detail::to<C>(gp[oh * OW + ow]) / static_cast<C>(divisor);
        }
      }
    dx[i] = static_cast<T>(s);
  }
}
