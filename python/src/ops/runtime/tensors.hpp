// The element types of the built-in ops and the tensors they make: torch dtype -> kjit DType, the
// accumulation dtype, an uninitialized output. Hot-path safe: no allocation but the tensor itself.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/ScalarType.h>

#include <initializer_list>
#include <optional>

#include "kjit/dtype.hpp"

namespace kjit::ops {

// The element types of the floating-point ops (add_constant, outer, outer_backward, fused_update).
inline constexpr std::initializer_list<at::ScalarType> kFloatingTypes = {
    at::ScalarType::Float, at::ScalarType::Half, at::ScalarType::BFloat16, at::ScalarType::Double};

// kjit's DType of a torch dtype; throws TypeError for one kjit cannot specialize on.
DType to_dtype(at::ScalarType t);

// An uninitialized contiguous CUDA tensor of `like`'s dtype and device (without the dispatcher).
at::Tensor new_empty(c10::IntArrayRef sizes, const at::Tensor& like, std::optional<at::ScalarType> dtype = {});

// The accumulation dtype of the kernels (kjit_detail::acc_t): float64 for float64, float32 otherwise.
inline at::ScalarType acc_dtype(at::ScalarType t) {
  return t == at::ScalarType::Double ? at::ScalarType::Double : at::ScalarType::Float;
}

}  // namespace kjit::ops
