// The reductions for other ops' use (norm backward sums its per-block partials with them).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>

namespace kjit::ops {

// x (a CUDA tensor of a floating dtype) summed over `dim`, as a new tensor of dtype `out_dtype`.
at::Tensor sum_to_dtype(const at::Tensor& x, std::int64_t dim, at::ScalarType out_dtype);

// For a later sum_to_dtype(x, 0, out_dtype) of a fresh contiguous x of shape [rows, d] and dtype `dtype`:
// its kernels compile ahead (KernelFamily::prepare_ahead). Never throws.
void prepare_sum_rows_ahead(std::int64_t rows, std::int64_t d, at::ScalarType dtype, at::ScalarType out_dtype,
                            int device);

}  // namespace kjit::ops
