#include "ops/runtime/scalars.hpp"

#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include <cstring>

#include "kjit/error.hpp"
#include "torch/dtypes.hpp"

namespace kjit::ops {

ElementScalar::ElementScalar(double value, at::ScalarType dtype) {
  switch (dtype) {
    case at::ScalarType::Double:
      std::memcpy(bytes_, &value, sizeof(double));
      size_ = sizeof(double);
      break;
    case at::ScalarType::Float: {
      const float f = static_cast<float>(value);
      std::memcpy(bytes_, &f, sizeof(float));
      size_ = sizeof(float);
      break;
    }
    case at::ScalarType::Half: {
      const c10::Half h(static_cast<float>(value));
      std::memcpy(bytes_, &h.x, sizeof(h.x));
      size_ = sizeof(h.x);
      break;
    }
    case at::ScalarType::BFloat16: {
      const c10::BFloat16 b(static_cast<float>(value));
      std::memcpy(bytes_, &b.x, sizeof(b.x));
      size_ = sizeof(b.x);
      break;
    }
    default:
      throw TypeError("kjit: no floating element type for dtype " + python::torch_dtype_name(dtype) +
                      ": allowed torch.float32, torch.float16, torch.bfloat16, torch.float64");
  }
}

}  // namespace kjit::ops
