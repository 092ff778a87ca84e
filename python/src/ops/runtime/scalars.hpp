// Kernel arguments whose C++ type is known only at run time (the element type T, or acc_t<T>): the bytes
// of a float, a double, a __half or a __nv_bfloat16, passed to launch_kernel (arg_data / arg_size).
#pragma once

#include <c10/core/ScalarType.h>

#include <cstddef>

namespace kjit::ops {

// A kernel argument of type T (the element type) holding `value`: float, double, or the bits of a
// __half / __nv_bfloat16. An argument of launch_kernel (arg_data / arg_size).
class ElementScalar {
 public:
  ElementScalar(double value, at::ScalarType dtype);
  const void* arg_data() const noexcept { return bytes_; }
  std::size_t arg_size() const noexcept { return size_; }

 private:
  alignas(8) unsigned char bytes_[8] = {};
  std::size_t size_ = 0;
};

// A kernel argument of the arithmetic type kjit_detail::acc_t<T> (detail/numeric.cuh): double for
// float64 elements, float for the others. An argument of launch_kernel (arg_data / arg_size).
class AccScalar {
 public:
  AccScalar(double value, at::ScalarType dtype)
      : d_(value), f_(static_cast<float>(value)), double_(dtype == at::ScalarType::Double) {}
  const void* arg_data() const noexcept {
    return double_ ? static_cast<const void*>(&d_) : static_cast<const void*>(&f_);
  }
  std::size_t arg_size() const noexcept { return double_ ? sizeof(d_) : sizeof(f_); }

 private:
  double d_;
  float f_;
  bool double_;
};

}  // namespace kjit::ops
