#include "ops/runtime/checks.hpp"

#include <algorithm>
#include <string>

#include "kjit/error.hpp"
#include "ops/runtime/plan.hpp"
#include "torch/dtypes.hpp"

namespace kjit::ops {
namespace {

std::string torch_name(at::ScalarType t) { return python::torch_dtype_name(t); }

}  // namespace

[[noreturn]] void fail_value(const char* op, const std::string& message) {
  throw ValueError(std::string(op) + ": " + message);
}

int device_for(const char* op, std::initializer_list<NamedTensor> tensors) {
  if (PlanScope::current()) {
    for (const NamedTensor& t : tensors)
      if (t.tensor.defined() && !t.tensor.is_meta())
        fail_value(op, std::string("a compile-only plan takes meta tensors, got ") + t.name + " on " +
                           t.tensor.device().str());
    return kPlanDevice;
  }
  try {
    return device_of(tensors);
  } catch (const ValueError& e) {
    fail_value(op, e.what());
  }
}

void check_dtype(const char* op, const char* arg, const at::Tensor& t, std::initializer_list<at::ScalarType> allowed) {
  const at::ScalarType s = t.scalar_type();
  for (at::ScalarType a : allowed)
    if (a == s) return;
  std::string names;
  for (at::ScalarType a : allowed) names += (names.empty() ? "" : ", ") + torch_name(a);
  throw TypeError(std::string(op) + ": " + arg + " has dtype " + torch_name(s) + ", which is not supported; allowed: " +
                  names + "; convert it with " + arg + ".to(" + torch_name(*allowed.begin()) + ")");
}

void check_contiguous(const char* op, const char* arg, const at::Tensor& t) {
  if (t.is_contiguous()) return;
  fail_value(op, std::string(arg) + " is not contiguous (shape " + shape_str(t.sizes()) + ", strides " +
                     shape_str(t.strides()) + "): call " + arg + ".contiguous() first");
}

void check_same_dtype(const char* op, const char* arg, const at::Tensor& t, const char* ref_arg,
                      const at::Tensor& ref) {
  if (t.scalar_type() == ref.scalar_type()) return;
  throw TypeError(std::string(op) + ": " + arg + " has dtype " + torch_name(t.scalar_type()) + " but " + ref_arg +
                  " has dtype " + torch_name(ref.scalar_type()) + ": the dtypes must match; convert with " + arg +
                  ".to(" + ref_arg + ".dtype)");
}

void check_same_shape(const char* op, const char* arg, const at::Tensor& t, const char* ref_arg,
                      const at::Tensor& ref) {
  if (t.sizes() == ref.sizes()) return;
  fail_value(op, std::string(arg) + " has shape " + shape_str(t.sizes()) + " but " + ref_arg + " has shape " +
                     shape_str(ref.sizes()) + ": the shapes must be equal (kjit ops do not broadcast)");
}
std::int64_t normalize_dim(const char* op, std::int64_t dim, std::int64_t ndim) {
  const std::int64_t rank = std::max<std::int64_t>(ndim, 1);
  if (dim < -rank || dim >= rank)
    fail_value(op, "dim " + std::to_string(dim) + " is out of range for a tensor of " + std::to_string(ndim) +
                       " dims (allowed: " + std::to_string(-rank) + " to " + std::to_string(rank - 1) + ")");
  return dim < 0 ? dim + rank : dim;
}
}  // namespace kjit::ops
