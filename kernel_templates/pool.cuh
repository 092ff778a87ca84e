// max_pool2d and avg_pool2d over NCHW tensors (contiguous), and their backward.
//
// The window (KH x KW), stride (SH, SW) and padding (PH, PW) are specialized; the sizes are runtime
// arguments. No dilation; floor mode: OH = (H + 2 PH - KH) / SH + 1. Half types compute in float.
//
//   max: the first largest element of the window in row-major order; NaN wins (PyTorch's rule). The
//        backward recomputes each window's argmax from x, so no index tensor is stored.
//   avg: sum / divisor, divisor = KH * KW clipped to the padded input (COUNT_PAD, PyTorch's default
//        count_include_pad=True) or the number of elements inside the input.
//
// Forward kernels:
//   pool2d_tiled_forward: the fast one (below). A block of 256 threads computes a tile of outputs; the
//     geometry (TOH, TOW, R, VEC) comes from a small fixed table of the host (python/src/ops/pool.cpp:
//     tile_for), never from the sizes. Two paths, chosen by the window:
//     - register path (KH == SH, KW == SW, no padding: the windows tile the input, e.g. 2x2 s2): each
//       thread computes R consecutive outputs of one row from KH input rows loaded as VEC-element vectors
//       straight from global memory, and stores them as one vector where aligned;
//     - halo path (everything else, e.g. 3x3 s2 p1): the block stages its input tile plus halo in shared
//       memory (loaded with VEC-element vectors, padding filled with the reduction's identity) and each
//       thread computes R consecutive outputs of one column from it.
//   pool2d_forward: one thread per output (the fallback for windows larger than 8 or tiles that do not
//     fit 48 KB of shared memory). Grid: x over the positions of one plane (32-bit: the caller checks
//     H * W < 2^31), y over the N * C planes (blocks loop over planes past gridDim.y).
// Backward: one thread per input element (a gather: no atomics, deterministic), grid as pool2d_forward.
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

// ============================================ the tiled forward ============================================

namespace kjit_pool {

// A window's extent along one dimension: its size clipped to the padded input (pad) and to the input
// (valid). The divisor of avg_pool2d is the product of the two dimensions' extents (as window()).
struct Extent {
  int pad, valid;
};
template <int K, int S, int P>
__device__ __forceinline__ Extent extent(int o, int n) {
  const int first = o * S - P, end_pad = min(first + K, n + P);
  return {end_pad - first, min(end_pad, n) - max(first, 0)};
}

// One step of the max: v replaces best when larger or NaN (a NaN, once in, stays). Over a window in
// row-major order from its first element this is argmax()'s rule; the value it leaves does not depend
// on the order (NaN if any, else the largest), so rows may be reduced first, then columns.
template <typename C>
__device__ __forceinline__ C max_step(C best, C v) {
  return (v > best || v != v) ? v : best;
}

// The identity of the max (-inf: float's, widened for double), which fills the padding of a halo tile.
template <typename C>
__device__ __forceinline__ C minus_inf() {
  return -static_cast<C>(__int_as_float(0x7f800000));
}

// The tiled kernel's geometry (python/src/ops/pool.cpp:tile_for computes the same numbers). 256 threads.
// The windows tile the input exactly (K == S, no padding): the register path (no shared memory, no halo).
template <int KH, int KW, int SH, int SW, int PH, int PW>
inline constexpr bool kRegisterPath = KH == SH && KW == SW && PH == 0 && PW == 0;

// Register path: a block computes TOH output rows (consecutive rows of all planes, N * C * OH of them) x
// TOW columns; a thread R consecutive outputs of kRowsPerThread rows.
template <int KW, int TOH, int TOW, int R>
struct RowTile {
  static constexpr int kRowThreads = TOW / R;                // threads per output row
  static constexpr int kRowsPerPass = 256 / kRowThreads;     // output rows the block covers at once
  static constexpr int kRowsPerThread = TOH / kRowsPerPass;  // output rows per thread
  static constexpr int kSpan = R * KW;                       // input elements per input row and thread
};

// Halo path: a block computes kSub sub-tiles (row bands of TOH output rows of a plane, consecutive bands
// of all planes) x TOW columns; a thread R consecutive rows of one output column. Its input tile,
// kInRows x kInCols, starts kLead elements before the first input column of the tile (at a multiple of
// VEC) and is stored in shared memory as acc_t, each row split into SW phases (the columns j with
// j % SW == phase, kPitch elements each), so that the threads of a warp, on consecutive output columns,
// read consecutive words (no bank conflicts at any stride).
template <int KH, int KW, int SH, int SW, int PW, int TOH, int TOW, int R, int VEC>
struct HaloTile {
  static constexpr int kLead = (VEC - PW % VEC) % VEC;
  static constexpr int kInRows = (TOH - 1) * SH + KH;
  static constexpr int kInCols = (kLead + (TOW - 1) * SW + KW + VEC - 1) / VEC * VEC;
  static constexpr int kVecs = kInCols / VEC;  // vectors per input row
  static constexpr int kPitch = (kInCols + SW - 1) / SW;
  static constexpr int kGroups = TOH / R;  // threads per output column of a sub-tile
  static_assert(kGroups >= 1 && TOW * kGroups <= 256, "pool2d_tiled_forward: TOW * TOH / R must divide 256");
  static constexpr int kSub = 256 / (TOW * kGroups);
  static constexpr int kElements = kSub * kInRows * SW * kPitch;  // of shared memory (acc_t)
};

template <typename T, int KH, int KW, bool MAX, int TOH, int TOW, int R, int VEC>
__device__ __forceinline__ void tiled_rows(const T* __restrict__ x, T* __restrict__ y, long long planes, int H, int W,
                                           int OH, int OW) {
  using C = kjit_detail::acc_t<T>;
  using G = RowTile<KW, TOH, TOW, R>;
  constexpr int NVL = G::kSpan / VEC;  // vectors per input row and thread
  static_assert(TOW % R == 0 && 256 % G::kRowThreads == 0 && TOH % G::kRowsPerPass == 0 && G::kSpan % VEC == 0,
                "pool2d_tiled_forward: TOW / R threads per row must divide 256, TOH the rows per pass, VEC R * KW");
  static_assert(R * sizeof(T) <= 16 && (R & (R - 1)) == 0, "pool2d_tiled_forward: R outputs are one vector");
  const long long rows = planes * OH;  // output rows of all planes
  const long long row_tiles = (rows + TOH - 1) / TOH;
  const int col_tiles = (OW + TOW - 1) / TOW;
  const long long tiles = row_tiles * col_tiles;
  const int tc = threadIdx.x % G::kRowThreads, tr = threadIdx.x / G::kRowThreads;
  for (long long t = blockIdx.x; t < tiles; t += gridDim.x) {
    const long long rt = t / col_tiles;
    const int ow = static_cast<int>(t - rt * col_tiles) * TOW + tc * R;  // the thread's first output column
    const long long g0 = rt * TOH, plane0 = g0 / OH;
    const unsigned oh0 = static_cast<unsigned>(g0 - plane0 * OH);
    long long plane[G::kRowsPerThread];
    int oh[G::kRowsPerThread];
    kjit_detail::Vec<T, VEC> in[G::kRowsPerThread][KH][NVL];
    // All loads first (KH * NVL * kRowsPerThread vectors in flight per thread).
#pragma unroll
    for (int k = 0; k < G::kRowsPerThread; ++k) {
      const unsigned r = oh0 + tr + k * G::kRowsPerPass, q = r / static_cast<unsigned>(OH);
      plane[k] = plane0 + q;
      oh[k] = static_cast<int>(r - q * static_cast<unsigned>(OH));
      const bool live = plane[k] < planes && ow < OW;
      const T* src = x + (plane[k] * H + static_cast<long long>(oh[k]) * KH) * W + static_cast<long long>(ow) * KW;
#pragma unroll
      for (int kh = 0; kh < KH; ++kh)
#pragma unroll
        for (int v = 0; v < NVL; ++v) {
          // W % VEC == 0: a vector starting inside the row ends inside it. One past the row serves
          // only outputs past OW.
          if (live && ow * KW + v * VEC < W) {
            in[k][kh][v] =
                *reinterpret_cast<const kjit_detail::Vec<T, VEC>*>(src + static_cast<long long>(kh) * W + v * VEC);
          } else {
#pragma unroll
            for (int e = 0; e < VEC; ++e) in[k][kh][v].v[e] = static_cast<T>(0.0f);
          }
        }
    }
#pragma unroll
    for (int k = 0; k < G::kRowsPerThread; ++k) {
      if (plane[k] >= planes || ow >= OW) continue;
      kjit_detail::Vec<T, R> out;
#pragma unroll
      for (int i = 0; i < R; ++i) {
        // Row-major over the window, as window_sum() and argmax() (the same sum, to the bit).
        C acc = MAX ? kjit_detail::to<C>(in[k][0][(i * KW) / VEC].v[(i * KW) % VEC]) : C(0);
#pragma unroll
        for (int kh = 0; kh < KH; ++kh)
#pragma unroll
          for (int kw = 0; kw < KW; ++kw) {
            const int e = i * KW + kw;
            const C v = kjit_detail::to<C>(in[k][kh][e / VEC].v[e % VEC]);
            if constexpr (MAX) {
              acc = max_step(acc, v);
            } else {
              acc += v;
            }
          }
        if constexpr (MAX) {
          out.v[i] = static_cast<T>(acc);
        } else {
          out.v[i] = static_cast<T>(acc / static_cast<C>(KH * KW));  // no padding: every divisor is KH * KW
        }
      }
      T* dst = y + (plane[k] * OH + oh[k]) * OW + ow;
      if (ow + R <= OW && reinterpret_cast<unsigned long long>(dst) % sizeof(out) == 0) {
        *reinterpret_cast<kjit_detail::Vec<T, R>*>(dst) = out;
      } else {
#pragma unroll
        for (int i = 0; i < R; ++i)
          if (ow + i < OW) dst[i] = out.v[i];
      }
    }
  }
}

template <typename T, int KH, int KW, int SH, int SW, int PH, int PW, bool MAX, bool COUNT_PAD, int TOH, int TOW, int R,
          int VEC>
__device__ __forceinline__ void tiled_halo(const T* __restrict__ x, T* __restrict__ y, long long planes, int H, int W,
                                           int OH, int OW) {
  using C = kjit_detail::acc_t<T>;
  using G = HaloTile<KH, KW, SH, SW, PW, TOH, TOW, R, VEC>;
  static_assert(TOH % R == 0 && G::kSub >= 1 && G::kSub * TOW * G::kGroups == 256,
                "pool2d_tiled_forward: TOW * TOH / R must divide 256");
  static_assert(TOW * SW % VEC == 0, "pool2d_tiled_forward: every column tile starts at a multiple of VEC");
  static_assert(G::kElements * sizeof(C) <= 48 * 1024, "pool2d_tiled_forward: the tile exceeds 48 KB");
  constexpr int NR = (R - 1) * SH + KH;  // input rows of a thread's R outputs
  __shared__ __align__(32) C tile[G::kElements];
  const C fill = MAX ? minus_inf<C>() : C(0);  // the padding: never larger than a value, adds nothing
  const int bands = (OH + TOH - 1) / TOH;      // row bands per plane
  const long long groups = (planes * bands + G::kSub - 1) / G::kSub;
  const int col_tiles = (OW + TOW - 1) / TOW;
  const long long tiles = groups * col_tiles;
  const int ow_l = threadIdx.x % TOW, rg = (threadIdx.x / TOW) % G::kGroups, sub = threadIdx.x / (TOW * G::kGroups);
  for (long long t = blockIdx.x; t < tiles; t += gridDim.x) {
    const long long bg = t / col_tiles;
    const int ct = static_cast<int>(t - bg * col_tiles);
    const long long b0 = bg * G::kSub, plane0 = b0 / bands;
    const int band0 = static_cast<int>(b0 - plane0 * bands);
    // (plane, band) of sub-tile s: consecutive bands of all planes.
    const auto band_of = [&](int s, long long& plane) {
      int band = band0 + s;
      plane = plane0;
      if (G::kSub > 1 && band >= bands) {
        const int q = band / bands;
        plane += q;
        band -= q * bands;
      }
      return band;
    };
    const int a0 = ct * TOW * SW - PW - G::kLead;  // input column of the tile's first element (a multiple of VEC)

    // Stage the input tiles: all loads first (kIter vectors in flight per thread), then the stores. A
    // vector is inside the row or outside it (W % VEC == 0); outside, it is the padding.
    constexpr int kTotal = G::kSub * G::kInRows * G::kVecs, kIter = (kTotal + 255) / 256;
    static_assert(kIter <= 64, "pool2d_tiled_forward: at most 64 vectors per thread");
    kjit_detail::Vec<T, VEC> in[kIter];
    unsigned long long loaded = 0;  // bit it: in[it] holds input
#pragma unroll
    for (int it = 0; it < kIter; ++it) {
      const int i = threadIdx.x + it * 256;
      if (kTotal % 256 != 0 && i >= kTotal) break;
      const int s = i / (G::kInRows * G::kVecs), rem = i - s * (G::kInRows * G::kVecs);
      const int r = rem / G::kVecs, iw = a0 + (rem - r * G::kVecs) * VEC;
      long long plane;
      const int ih = band_of(s, plane) * TOH * SH - PH + r;
      if (plane < planes && ih >= 0 && ih < H && iw >= 0 && iw < W) {
        in[it] = *reinterpret_cast<const kjit_detail::Vec<T, VEC>*>(x + (plane * H + ih) * W + iw);
        loaded |= 1ull << it;
      }
    }
#pragma unroll
    for (int it = 0; it < kIter; ++it) {
      const int i = threadIdx.x + it * 256;
      if (kTotal % 256 != 0 && i >= kTotal) break;
      const int s = i / (G::kInRows * G::kVecs), rem = i - s * (G::kInRows * G::kVecs);
      const int r = rem / G::kVecs, j0 = (rem - r * G::kVecs) * VEC;
      C v[VEC];
#pragma unroll
      for (int e = 0; e < VEC; ++e) v[e] = (loaded >> it) & 1 ? kjit_detail::to<C>(in[it].v[e]) : fill;
      C* row = tile + (s * G::kInRows + r) * SW * G::kPitch;
      if constexpr (VEC % SW == 0) {  // each phase gets VEC / SW consecutive elements: one store
        constexpr int N = VEC / SW;
#pragma unroll
        for (int ph = 0; ph < SW; ++ph) {
          kjit_detail::Vec<C, N> part;
#pragma unroll
          for (int e = 0; e < N; ++e) part.v[e] = v[ph + e * SW];
          *reinterpret_cast<kjit_detail::Vec<C, N>*>(row + ph * G::kPitch + j0 / SW) = part;
        }
      } else {
#pragma unroll
        for (int e = 0; e < VEC; ++e) row[((j0 + e) % SW) * G::kPitch + (j0 + e) / SW] = v[e];
      }
    }
    __syncthreads();

    long long plane;
    const int oh0 = band_of(sub, plane) * TOH + rg * R;  // the thread's first output row
    const int ow = ct * TOW + ow_l;
    if (plane < planes && ow < OW) {
      // Each input row's reduction over the KW columns of the window, then over KH rows per output.
      const C* base = tile + (sub * G::kInRows + rg * R * SH) * SW * G::kPitch + ow_l;
      C rowv[NR];
#pragma unroll
      for (int q = 0; q < NR; ++q) {
        const C* row = base + q * SW * G::kPitch;
        C acc = row[(G::kLead % SW) * G::kPitch + G::kLead / SW];
#pragma unroll
        for (int kw = 1; kw < KW; ++kw) {
          const C v = row[((kw + G::kLead) % SW) * G::kPitch + (kw + G::kLead) / SW];
          if constexpr (MAX) {
            acc = max_step(acc, v);
          } else {
            acc += v;
          }
        }
        rowv[q] = acc;
      }
      const Extent ew = extent<KW, SW, PW>(ow, W);
      T* dst = y + (plane * OH + oh0) * OW + ow;
#pragma unroll
      for (int i = 0; i < R; ++i) {
        if (oh0 + i >= OH) break;
        C acc = rowv[i * SH];
#pragma unroll
        for (int kh = 1; kh < KH; ++kh) {
          if constexpr (MAX) {
            acc = max_step(acc, rowv[i * SH + kh]);
          } else {
            acc += rowv[i * SH + kh];
          }
        }
        if constexpr (!MAX) {
          const Extent eh = extent<KH, SH, PH>(oh0 + i, H);
          const int divisor = COUNT_PAD ? eh.pad * ew.pad : eh.valid * ew.valid;
          acc = acc / static_cast<C>(divisor);
        }
        dst[static_cast<long long>(i) * OW] = static_cast<T>(acc);
      }
    }
    __syncthreads();  // the next tile overwrites the shared memory
  }
}

}  // namespace kjit_pool

// The tiled forward (see the top of this file). TOH, TOW, R and VEC come from the host's table; VEC
// divides W and x is aligned to VEC elements.
template <typename T, int KH, int KW, int SH, int SW, int PH, int PW, bool MAX, bool COUNT_PAD, int TOH, int TOW, int R,
          int VEC>
__global__ void __launch_bounds__(256)
    pool2d_tiled_forward(const T* __restrict__ x, T* __restrict__ y, long long planes, int H, int W, int OH, int OW) {
  if constexpr (kjit_pool::kRegisterPath<KH, KW, SH, SW, PH, PW>) {
    kjit_pool::tiled_rows<T, KH, KW, MAX, TOH, TOW, R, VEC>(x, y, planes, H, W, OH, OW);
  } else {
    kjit_pool::tiled_halo<T, KH, KW, SH, SW, PH, PW, MAX, COUNT_PAD, TOH, TOW, R, VEC>(x, y, planes, H, W, OH, OW);
  }
}
