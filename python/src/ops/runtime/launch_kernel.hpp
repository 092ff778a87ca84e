// The one way the built-in ops pass arguments to their kernels: launch_kernel(kernel, config, a, b, ...)
// builds the kernel's argument array (one pointer per parameter) on the stack from typed values, in the
// kernel's parameter order. Each value is passed with its own C++ type, so it must be the parameter's
// exact type (`long long` for a long long, `int` for an int, `const void*` for a pointer); ElementScalar
// and AccScalar carry the bytes of a type known only at run time.
// Release builds: exactly the hand-written array (no allocation, no check). Debug builds (no NDEBUG)
// compare the count and each value's byte size with the parameter sizes the driver reports
// (Kernel::param_sizes(), CUDA 12.4 and later) and throw kjit::LaunchError naming the kernel and the
// first argument that differs, before the launch.
// Torch-free: tests/cpp/test_op_launch_kernel.cpp tests the check without torch.
#pragma once

#include <cstddef>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "kjit/launch_config.hpp"
#include "kjit/module.hpp"
#include "kjit/specialized_kernel.hpp"

namespace kjit::ops {

// A value whose bytes depend on the call (ElementScalar, AccScalar) says where they are and how many:
// `const void* arg_data() const` and `std::size_t arg_size() const`.
template <class T, class = void>
struct HasArgBytes : std::false_type {};
template <class T>
struct HasArgBytes<
    T, std::void_t<decltype(std::declval<const T&>().arg_data()), decltype(std::declval<const T&>().arg_size())>>
    : std::true_type {};

// The address of one kernel argument's bytes and their count.
template <class T>
void* arg_address(const T& value) noexcept {
  if constexpr (HasArgBytes<T>::value) {
    return const_cast<void*>(value.arg_data());
  } else {
    static_assert(std::is_trivially_copyable_v<T> && !std::is_array_v<T>,
                  "launch_kernel: a kernel argument is a pointer, a number or a plain struct (e.g. a "
                  "CUtensorMap) passed by value; pass a tensor's data_ptr(), not the tensor");
    return const_cast<void*>(static_cast<const void*>(&value));
  }
}
template <class T>
std::size_t arg_size(const T& value) noexcept {
  if constexpr (HasArgBytes<T>::value) {
    return value.arg_size();
  } else {
    (void)value;
    return sizeof(T);
  }
}

// Throws LaunchError unless `n` arguments of byte sizes `sizes` fit the parameters of `kernel` (named
// in the message), whose sizes are `params`: the same count, and each argument of its parameter's size.
void check_arg_sizes(const std::string& kernel, const std::vector<std::size_t>& params, const std::size_t* sizes,
                     std::size_t n);

// Debug builds only: check_arg_sizes against the driver's parameter sizes, where the driver tells them.
inline void check_launch_args(const Kernel& kernel, const std::size_t* sizes, std::size_t n) {
  if (kernel.param_sizes_known()) check_arg_sizes(kernel.name(), kernel.param_sizes(), sizes, n);
}

// Launches the kernel `k` found (kernel_for) with `config` and these arguments (Kernel::launch: LaunchError
// when the driver refuses). Temporaries are fine (launch_kernel(*k, cfg, x.const_data_ptr(), n)): they live
// until the launch has copied the arguments. A compile-only kernel (no loaded code: the ops' compile-only plan,
// plan.hpp) launches nothing.
template <class... Args>
void launch_kernel(const SpecializedKernel& k, const LaunchConfig& config, const Args&... args) {
  static_assert(sizeof...(Args) > 0, "launch_kernel: every kernel of the ops takes arguments");
  if (!k.kernel) return;
  void* ptrs[] = {arg_address(args)...};
#ifndef NDEBUG
  const std::size_t sizes[] = {arg_size(args)...};
  check_launch_args(*k.kernel, sizes, sizeof...(Args));
#endif
  k.kernel->launch(config, ptrs);
}

// The same for an argument list whose length depends on the call (kjit.elementwise's kernels): `ptrs`
// one pointer per parameter; `sizes` their byte sizes, read in debug builds only (may be null in release).
inline void launch_kernel_array(const SpecializedKernel& k, const LaunchConfig& config, void** ptrs,
                                [[maybe_unused]] const std::size_t* sizes, [[maybe_unused]] std::size_t n) {
  if (!k.kernel) return;
#ifndef NDEBUG
  check_launch_args(*k.kernel, sizes, n);
#endif
  k.kernel->launch(config, ptrs);
}

}  // namespace kjit::ops
