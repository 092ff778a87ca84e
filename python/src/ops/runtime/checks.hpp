// The argument checks of the built-in ops, with messages that say what was received, what is allowed and
// what to do, and the errors they raise as Python sees them (kjit.* exceptions). Hot-path safe: nothing is
// allocated unless a check fails.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/ScalarType.h>
#include <c10/util/StringUtil.h>

#include <cstdint>
#include <exception>
#include <initializer_list>
#include <string>
#include <utility>

#include "kjit/error.hpp"
#include "ops/runtime/tensors.hpp"
#include "ops/runtime/launch_context.hpp"

namespace kjit::ops {

// Argument checks. `op` is the user-facing name ("kjit.ops.outer"), `arg` the argument's name.
// The CUDA device every tensor is on (kjit::device_of, its ValueError prefixed with `op`): CPU tensors
// and tensors on different devices are rejected with the devices named and a `.to(...)` to fix it.
int device_for(const char* op, std::initializer_list<NamedTensor> tensors);
// One of `allowed` (TypeError listing them and saying how to convert).
void check_dtype(const char* op, const char* arg, const at::Tensor& t, std::initializer_list<at::ScalarType> allowed);
// Contiguous (ValueError with shape and strides: "call .contiguous()").
void check_contiguous(const char* op, const char* arg, const at::Tensor& t);
// One of `allowed` and contiguous.
inline void check_input(const char* op, const char* arg, const at::Tensor& t,
                        std::initializer_list<at::ScalarType> allowed) {
  check_dtype(op, arg, t, allowed);
  check_contiguous(op, arg, t);
}
// `t` has the same dtype as `ref` (TypeError naming both).
void check_same_dtype(const char* op, const char* arg, const at::Tensor& t, const char* ref_arg, const at::Tensor& ref);
// `t` has exactly the shape of `ref` (ValueError naming both shapes).
void check_same_shape(const char* op, const char* arg, const at::Tensor& t, const char* ref_arg, const at::Tensor& ref);
// Cold path: rethrows a kjit::Error thrown inside an op so that a Python caller (through torch.ops)
// gets the kjit exception class with its message and data, not a RuntimeError; C++ callers (no
// interpreter) get the original exception. See python_errors.cpp.
[[noreturn]] void rethrow_for_python(std::exception_ptr error);

// An op implementation whose kjit errors surface in Python as kjit.* exceptions:
// m.impl("outer", kjit_errors<&outer_cuda>).
template <auto F>
struct WithKjitErrors;
template <class R, class... A, R (*F)(A...)>
struct WithKjitErrors<F> {
  static R call(A... args) {
    try {
      return F(std::forward<A>(args)...);
    } catch (const Error&) {
      rethrow_for_python(std::current_exception());
    }
  }
};
template <auto F>
inline constexpr auto kjit_errors = &WithKjitErrors<F>::call;

// "[2, 3, 4]" for messages: IntArrayRef, SymIntArrayRef or a vector of integers.
template <class Sizes>
std::string shape_str(const Sizes& sizes) {
  std::string out = "[";
  for (std::size_t i = 0; i < sizes.size(); ++i) out += (i ? ", " : "") + c10::str(sizes[i]);
  return out + "]";
}

// Throws ValueError "<op>: <message>".
[[noreturn]] void fail_value(const char* op, const std::string& message);

// `dim` of a tensor of `ndim` dims made non-negative (a 0-dim tensor has one dim for this purpose);
// ValueError naming the allowed range otherwise.
std::int64_t normalize_dim(const char* op, std::int64_t dim, std::int64_t ndim);

// `t` has `ref`'s dtype (TypeError) and the shape `shape` (ValueError): the checks of an op's second tensor.
template <class Sizes>
void check_like(const char* op, const char* arg, const at::Tensor& t, const char* ref_arg, const at::Tensor& ref,
                const Sizes& shape) {
  check_dtype(op, arg, t, kFloatingTypes);
  check_same_dtype(op, arg, t, ref_arg, ref);
  if (t.sym_sizes() != c10::SymIntArrayRef(shape))
    fail_value(
        op, std::string(arg) + " has shape " + shape_str(t.sym_sizes()) + " but must have shape " + shape_str(shape));
}

}  // namespace kjit::ops
