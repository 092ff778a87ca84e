// The reductions for other ops' use (norm backward sums its per-block partials with them).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>

namespace kjit::ops {

// x (a CUDA tensor of a floating dtype) summed over `dim`, as a new tensor of dtype `out_dtype`.
at::Tensor sum_to_dtype(const at::Tensor& x, std::int64_t dim, at::ScalarType out_dtype);

}  // namespace kjit::ops
