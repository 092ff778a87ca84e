// Launch geometry of the row kernels (reductions over the last dim, softmax, norms), once for every op.
//
// A row of d elements is handled by TPR threads (a power of two, 32 to 1024), ROWS rows per block; each
// thread takes ITEMS vectors of VEC elements. VEC is the widest access (16 bytes at most) that divides d
// and to which every row pointer is aligned; TPR grows until each thread has at most
// `vectors_per_thread` vectors (ops tune it: on the H200, rows of 4096 float32 ran softmax best at 2,
// layer_norm at 8, the others at 4). Rows whose share per thread would exceed `max_per_thread` elements
// are streamed (ITEMS = 0) where the kernel supports it.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <initializer_list>
#include <string>

#include "kjit/error.hpp"
#include "kjit/launch_config.hpp"
#include "ops/runtime/launch_kernel.hpp"

namespace kjit::ops {

struct RowGeometry {
  int tpr = 32;
  int rows_per_block = 1;
  int vec = 1;
  int items = 0;  // 0: streamed

  Dim3 block() const { return Dim3{static_cast<unsigned>(tpr), static_cast<unsigned>(rows_per_block), 1}; }
  // Blocks for `rows` rows (at least one, at most 2^31 - 1: the kernels loop over the rest).
  Dim3 grid_for(std::int64_t rows) const;
};

// The widest vector (elements) that divides d and to which every tensor's data pointer is aligned
// (common.hpp's vector_width for these tensors).
int vector_width(std::int64_t d, std::initializer_list<const at::Tensor*> tensors);

// The geometry for rows of length d of these tensors (all of the rows' element type).
RowGeometry row_geometry(std::int64_t d, std::initializer_list<const at::Tensor*> tensors, int max_per_thread,
                         int vectors_per_thread = 4);

// A row split over a thread-block cluster (sm_90 and newer; kernel_templates/detail/split_rows.cuh): CL
// blocks of TPR threads, block `rank` holding `chunk` vectors of VEC elements (ITEMS per thread); a head
// and a tail of scalars make 16-byte vectors possible whatever the row's length and alignment. cl == 0:
// the row does not fit.
struct SplitGeometry {
  int cl = 0;
  int tpr = 256;
  int vec = 1;
  int items = 1;
  int chunk = 0;

  Dim3 block() const { return Dim3{static_cast<unsigned>(tpr), 1, 1}; }
  // One cluster per row (at least one, at most (2^31 - 1) / CL clusters: the kernels loop over the rest).
  Dim3 grid_for(std::int64_t rows) const;
};

// Whether the split kernels run on the device: sm_90 and newer (thread-block clusters), and no cluster
// launch refused there yet (launch_split).
bool has_clusters(int device);

// After the driver refused a cluster launch on the device: warns once (naming the op and the driver's
// error) and has_clusters(device) is false from then on (the one-block kernels take every row).
void refuse_clusters(const char* op, int device, const std::string& why);

// launch_kernel for a split kernel. False when the driver refuses the cluster itself (an error naming
// clusters, e.g. CL blocks cannot be resident at once on a partitioned GPU: MIG, MPS): refuse_clusters,
// and the caller runs the one-block kernel. Any other launch error propagates.
template <class... Args>
bool launch_split(const char* op, int device, const SpecializedKernel& kernel, const LaunchConfig& config,
                  const Args&... args) {
  try {
    launch_kernel(kernel, config, args...);
    return true;
  } catch (const LaunchError& e) {
    if (std::string(e.what()).find("CLUSTER") == std::string::npos) throw;
    refuse_clusters(op, device, e.what());
    return false;
  }
}

// The split of rows of length d read from x and written to y (of one element type): 16-byte vectors when
// x and y are a multiple of 16 bytes apart (every row then has the same misalignment in both), else one
// element; at most max_per_thread elements per thread; the fewest threads per row that hold it, blocks of
// 256 threads before 512 (clusters of 2, 4 or 8 blocks, the portable sizes).
SplitGeometry split_geometry(std::int64_t d, const at::Tensor& x, const at::Tensor& y, int max_per_thread);

// x made contiguous, viewed as rows of its last dim.
struct Rows {
  at::Tensor x;
  std::int64_t rows = 0;
  std::int64_t d = 1;
};
Rows as_rows(const at::Tensor& x);

}  // namespace kjit::ops
