// Rows split over the blocks of a thread-block cluster (sm_90 and newer): the row kernels' variant for
// rows too long for one block's registers (softmax_split_forward, norm_split_forward).
//
// Launch: blockDim = TPR, clusters of CL blocks along x (the kernel's __cluster_dims__), grid.x a
// multiple of CL; cluster c handles rows c, c + gridDim.x / CL, ... Every row is read 16 bytes at a time
// whatever its alignment: RowSpan splits it into a head of scalars up to the first VEC-element boundary,
// n_vec aligned vectors and a tail of scalars (fewer than VEC each). Block `rank` holds vectors
// [rank * chunk, (rank + 1) * chunk) in registers (ITEMS per thread: ITEMS * TPR >= chunk,
// CL * chunk >= d / VEC); threads 0 .. VEC-1 of rank 0 hold the head's elements, threads VEC .. 2 VEC-1
// of rank CL-1 the tail's. Every row written alongside must have the row's misalignment (the host
// checks that the pointers differ by a multiple of VEC elements, else VEC = 1).
#pragma once

#include "cluster.cuh"
#include "rows.cuh"

namespace kjit_rows {

// The launch bounds' minimum of resident blocks of TPR threads: registers for 768 threads per
// multiprocessor (at most 85 per thread at TPR = 256).
template <int TPR>
constexpr int kSplitMinBlocks = TPR >= 768 ? 1 : 768 / TPR;

template <int VEC>
struct RowSpan {
  int head;   // scalars before the first aligned vector
  int n_vec;  // aligned vectors (the tail: d - head - n_vec * VEC scalars)
  template <typename T>
  __device__ __forceinline__ RowSpan(const T* row, int d) {
    const int mis = static_cast<int>((reinterpret_cast<unsigned long long>(row) / sizeof(T)) % VEC);
    head = mis ? min(VEC - mis, d) : 0;
    n_vec = (d - head) / VEC;
  }
};

// This block's part of a row in registers: v[it][k] is element k of the row's aligned vector
// first + it * TPR + threadIdx.x; `edge` is this thread's head or tail element (edge_at its index, or -1).
template <typename T, int TPR, int VEC, int ITEMS>
struct SplitRegs {
  using C = acc_t<T>;
  C v[ITEMS][VEC];
  C edge;
  int edge_at;
  int first;
  int count;  // this block's vectors

  __device__ __forceinline__ bool valid(int it) const { return it * TPR + static_cast<int>(threadIdx.x) < count; }

  __device__ __forceinline__ void load(const T* __restrict__ row, int d, const RowSpan<VEC>& s, int rank, int cl,
                                       int chunk, C fill) {
    first = rank * chunk;
    count = max(0, min(chunk, s.n_vec - first));
    const Vec<T, VEC>* body = reinterpret_cast<const Vec<T, VEC>*>(row + s.head) + first;
#pragma unroll
    for (int it = 0; it < ITEMS; ++it) {
      if (valid(it)) {
        const Vec<T, VEC> x = body[it * TPR + threadIdx.x];
#pragma unroll
        for (int k = 0; k < VEC; ++k) v[it][k] = to<C>(x.v[k]);
      } else {
#pragma unroll
        for (int k = 0; k < VEC; ++k) v[it][k] = fill;
      }
    }
    const int t = static_cast<int>(threadIdx.x);
    const int tail0 = s.head + s.n_vec * VEC;
    edge_at = -1;
    if (rank == 0 && t < s.head) edge_at = t;
    if (rank == cl - 1 && t >= VEC && t - VEC < d - tail0) edge_at = tail0 + t - VEC;
    edge = edge_at >= 0 ? to<C>(row[edge_at]) : fill;
  }

  // v = f(v) for every element held (masked ones included).
  template <typename F>
  __device__ __forceinline__ void transform(F f) {
    transform_all(v, f);
    edge = f(edge);
  }

  // op over the elements this thread holds, each passed through f first.
  template <typename Op, typename F>
  __device__ __forceinline__ C fold(Op op, F f) const {
    C acc = Op::template identity<C>();
#pragma unroll
    for (int it = 0; it < ITEMS; ++it)
      if (valid(it)) {
#pragma unroll
        for (int k = 0; k < VEC; ++k) acc = op(acc, f(v[it][k]));
      }
    if (edge_at >= 0) acc = op(acc, f(edge));
    return acc;
  }

  // out[i] = f(the value held for element i, i) for the elements this thread holds; `out` is a row with
  // the misalignment of the one loaded.
  template <typename TO, typename F>
  __device__ __forceinline__ void store(TO* __restrict__ out, const RowSpan<VEC>& s, F f) const {
    Vec<TO, VEC>* body = reinterpret_cast<Vec<TO, VEC>*>(out + s.head) + first;
#pragma unroll
    for (int it = 0; it < ITEMS; ++it)
      if (valid(it)) {
        const int j = it * TPR + static_cast<int>(threadIdx.x);
        const int at = s.head + (first + j) * VEC;
        Vec<TO, VEC> o;
#pragma unroll
        for (int k = 0; k < VEC; ++k) o.v[k] = static_cast<TO>(f(v[it][k], at + k));
        body[j] = o;
      }
    if (edge_at >= 0) out[edge_at] = static_cast<TO>(f(edge, edge_at));
  }
};

// op over v of every thread of the cluster: the block's value (row_reduce), then the CL blocks' values
// in rank order, so that every block gets the same bits. `slots` is 2 elements of shared memory,
// `parity` a counter of the calls (alternate slots: one cluster barrier per call suffices).
template <int TPR, int CL, typename C, typename Op>
__device__ __forceinline__ C cluster_reduce(C v, Op op, C* slots, int& parity) {
  v = row_reduce<TPR, 1>(v, op);
  if (threadIdx.x == 0) slots[parity] = v;
  kjit_cluster::sync();
  C r = kjit_cluster::read_peer(slots + parity, 0);
#pragma unroll
  for (int p = 1; p < CL; ++p) r = op(r, kjit_cluster::read_peer(slots + parity, p));
  parity ^= 1;
  return r;
}

}  // namespace kjit_rows
