// The loops behind kjit.elementwise: out[i] = f(in_0[i], in_1[i], ...) over a contiguous output.
//
// kjit.elementwise generates a small kernel per expression that declares its parameters and calls one
// of these loops with a functor holding the expression (see python/kjit/elementwise.py). Each input
// is read in its own element type and converted to the compute type C (float for half types; complex
// when the result or an input is complex); the result is converted to the output's type.
//
//   flat<C, VEC, TAIL>(f, out, n, in...)      every input has the output's shape and is contiguous:
//                                              VEC elements per 16-byte-or-less access (the caller checks
//                                              alignment); TAIL: n is not a multiple of VEC.
//   strided<C, R>(f, out, n, sizes, in, strides, ...)
//                                              broadcast or strided inputs: the output's R (coalesced)
//                                              sizes and each input's strides in elements (0 where it
//                                              broadcasts).
//
// The index type I is a template argument of the generated kernel: 32-bit when every offset fits,
// 64-bit otherwise. Each thread handles kUnroll vectors, loading all of them before computing; one
// vector per thread measured fastest on the H200 (1 GiB float32 x * 0.5: 4245 GB/s at one vector per
// thread, 4032 at four, with a device copy at 4210).
#pragma once

#include "detail/numeric.cuh"
#include "math.cuh"

namespace kjit_ew {

using kjit_detail::to;
using kjit_detail::Vec;

// Complex element types. A kernel's type parameters (TO, C and one per input) name the real type (float for
// torch.complex64, double for complex128), and its integer parameter kjit_cx says which of them are complex:
// bit 0 the result, bit 1 the compute type, bit 2 + i input i. So a real call's name expression names its
// types as before (and the 16-bit float headers are parsed only where a name expression asks for them), and
// a complex call differs in kjit_cx alone.
template <typename T, bool CX>
struct Elem {
  using type = T;
};
template <typename T>
struct Elem<T, true> {
  using type = kjit_complex::complex<T>;
};
template <typename T, unsigned long long CX, int BIT>
using elem_t = typename Elem<T, ((CX >> BIT) & 1ull) != 0>::type;
// The kernel's pointer parameter as a pointer to its elements.
template <unsigned long long CX, int BIT, typename T>
__device__ __forceinline__ elem_t<T, CX, BIT>* as(T* p) {
  return reinterpret_cast<elem_t<T, CX, BIT>*>(p);
}
template <unsigned long long CX, int BIT, typename T>
__device__ __forceinline__ const elem_t<T, CX, BIT>* as(const T* p) {
  return reinterpret_cast<const elem_t<T, CX, BIT>*>(p);
}
// The type of a scalar in an expression computed in C: C's real type (a complex constant is C(re, im)).
template <typename C>
using scalar_t = typename kjit_complex::real_of<C>::type;

// Enumerators, not constexpr variables: those have internal linkage here, and NVRTC emits them into the cubin
// under a name with a per-compile hash, so that two compiles of one kernel would differ byte for byte.
enum : int { kBlock = 256, kUnroll = 1 };

// The inputs of one call, as a recursive list: each level holds one input's pointer and, while a
// thread works, its kUnroll loaded vectors.
template <typename C, int VEC, typename I, typename... Ts>
struct Inputs;

template <typename C, int VEC, typename I>
struct Inputs<C, VEC, I> {
  __device__ __forceinline__ Inputs() {}
  __device__ __forceinline__ void load(I, I) {}
  template <typename F, typename... A>
  __device__ __forceinline__ auto apply(const F& f, int, int, A... a) const {
    return f(a...);
  }
  template <typename F, typename... A>
  __device__ __forceinline__ auto apply_at(const F& f, I, A... a) const {
    return f(a...);
  }
};

template <typename C, int VEC, typename I, typename T, typename... Ts>
struct Inputs<C, VEC, I, T, Ts...> {
  const T* __restrict__ ptr;
  Vec<T, VEC> tile[kUnroll];
  Inputs<C, VEC, I, Ts...> rest;

  __device__ __forceinline__ Inputs(const T* p, const Ts*... ps) : ptr(p), rest(ps...) {}

  // Vectors first + u * kBlock (u < kUnroll) that are below n_vec.
  __device__ __forceinline__ void load(I first, I n_vec) {
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const I v = first + static_cast<I>(u) * kBlock;
      if (v < n_vec) tile[u] = reinterpret_cast<const Vec<T, VEC>*>(ptr)[v];
    }
    rest.load(first, n_vec);
  }
  // f(element k of vector u of every input).
  template <typename F, typename... A>
  __device__ __forceinline__ auto apply(const F& f, int u, int k, A... a) const {
    return rest.apply(f, u, k, a..., to<C>(tile[u].v[k]));
  }
  // f(element i of every input), unvectorized.
  template <typename F, typename... A>
  __device__ __forceinline__ auto apply_at(const F& f, I i, A... a) const {
    return rest.apply_at(f, i, a..., to<C>(ptr[i]));
  }
};

template <typename C, int VEC, bool TAIL, typename F, typename I, typename TO, typename... Ts>
__device__ __forceinline__ void flat(const F& f, TO* __restrict__ out, I n, const Ts*... in) {
  static_assert(VEC >= 1 && (VEC & (VEC - 1)) == 0, "VEC must be a power of two");
  Inputs<C, VEC, I, Ts...> inputs(in...);
  const I n_vec = n / VEC;
  const I first = static_cast<I>(blockIdx.x) * (kBlock * kUnroll) + static_cast<I>(threadIdx.x);
  inputs.load(first, n_vec);
#pragma unroll
  for (int u = 0; u < kUnroll; ++u) {
    const I v = first + static_cast<I>(u) * kBlock;
    if (v < n_vec) {
      Vec<TO, VEC> r;
#pragma unroll
      for (int k = 0; k < VEC; ++k) r.v[k] = to<TO>(inputs.apply(f, u, k));
      reinterpret_cast<Vec<TO, VEC>*>(out)[v] = r;
    }
  }
  if constexpr (TAIL) {
    // Fewer than VEC elements after the last whole vector: the first threads of the grid take them.
    if (blockIdx.x == 0) {
      const I i = n_vec * VEC + static_cast<I>(threadIdx.x);
      if (i < n) out[i] = to<TO>(inputs.apply_at(f, i));
    }
  }
}

// One input of a strided call: its pointer and its strides (elements) over the output's R dims.
template <typename T, typename I, int R>
struct StridedIn {
  const T* __restrict__ ptr;
  I stride[R];
};

template <typename C, typename I, int R, typename... Ts>
struct StridedInputs;

template <typename C, typename I, int R>
struct StridedInputs<C, I, R> {
  __device__ __forceinline__ StridedInputs() {}
  __device__ __forceinline__ void load(int, const I*) {}
  template <typename F, typename... A>
  __device__ __forceinline__ auto apply(const F& f, int, A... a) const {
    return f(a...);
  }
};

template <typename C, typename I, int R, typename T, typename... Ts>
struct StridedInputs<C, I, R, T, Ts...> {
  StridedIn<T, I, R> in;
  C value[kUnroll];
  StridedInputs<C, I, R, Ts...> rest;

  __device__ __forceinline__ StridedInputs(const StridedIn<T, I, R>& a, const StridedIn<Ts, I, R>&... as)
      : in(a), rest(as...) {}

  // Element u of this thread at coordinates coord[0..R).
  __device__ __forceinline__ void load(int u, const I* coord) {
    I off = 0;
#pragma unroll
    for (int d = 0; d < R; ++d) off += coord[d] * in.stride[d];
    value[u] = to<C>(in.ptr[off]);
    rest.load(u, coord);
  }
  template <typename F, typename... A>
  __device__ __forceinline__ auto apply(const F& f, int u, A... a) const {
    return rest.apply(f, u, a..., value[u]);
  }
};

template <typename C, int R, typename F, typename I, typename TO, typename... Ts>
__device__ __forceinline__ void strided(const F& f, TO* __restrict__ out, I n, const I (&size)[R],
                                        const StridedIn<Ts, I, R>&... in) {
  StridedInputs<C, I, R, Ts...> inputs(in...);
  const I first = static_cast<I>(blockIdx.x) * (kBlock * kUnroll) + static_cast<I>(threadIdx.x);
#pragma unroll
  for (int u = 0; u < kUnroll; ++u) {
    I i = first + static_cast<I>(u) * kBlock;
    if (i < n) {
      I coord[R];
#pragma unroll
      for (int d = R - 1; d >= 0; --d) {
        coord[d] = i % size[d];
        i /= size[d];
      }
      inputs.load(u, coord);
    }
  }
#pragma unroll
  for (int u = 0; u < kUnroll; ++u) {
    const I i = first + static_cast<I>(u) * kBlock;
    if (i < n) out[i] = to<TO>(inputs.apply(f, u));
  }
}

}  // namespace kjit_ew
