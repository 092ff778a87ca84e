#include "ops/runtime/tensors.hpp"

#include <ATen/cuda/EmptyTensor.h>
#include <ATen/ops/empty.h>

#include <string>

#include "kjit/error.hpp"
#include "torch/dtypes.hpp"

namespace kjit::ops {

DType to_dtype(at::ScalarType t) {
  if (auto d = python::dtype_of(t)) return *d;
  throw TypeError("dtype " + python::torch_dtype_name(t) + " has no kjit element type: allowed " +
                  python::torch_dtype_names() +
                  "; convert the tensor with .to(torch.float32) (or another allowed dtype)");
}

at::Tensor new_empty(c10::IntArrayRef sizes, const at::Tensor& like, std::optional<at::ScalarType> dtype) {
  if (like.is_meta()) return at::empty(sizes, like.options().dtype(dtype.value_or(like.scalar_type())));  // a plan's
  return at::detail::empty_cuda(sizes, dtype.value_or(like.scalar_type()), like.device(), std::nullopt);
}
}  // namespace kjit::ops
