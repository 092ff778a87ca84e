#include "launch_kernel.hpp"

#include "kjit/error.hpp"

namespace kjit::ops {

namespace {

std::string sizes_text(const std::size_t* sizes, std::size_t n) {
  std::string out = "(";
  for (std::size_t i = 0; i < n; ++i) out += (i ? ", " : "") + std::to_string(sizes[i]);
  return out + ")";
}

}  // namespace

void check_arg_sizes(const std::string& kernel, const std::vector<std::size_t>& params, const std::size_t* sizes,
                     std::size_t n) {
  const std::string expected = "its parameters' byte sizes are " + sizes_text(params.data(), params.size()) +
                               ", the arguments' " + sizes_text(sizes, n);
  if (n != params.size())
    throw LaunchError("kjit internal error: an op launches kernel " + kernel + " with " + std::to_string(n) +
                      " arguments, but it takes " + std::to_string(params.size()) + " (" + expected +
                      "); make the op's launch_kernel call match the kernel's __global__ signature "
                      "(python/src/ops/)");
  for (std::size_t i = 0; i < n; ++i)
    if (sizes[i] != params[i])
      throw LaunchError("kjit internal error: argument " + std::to_string(i + 1) + " of " + std::to_string(n) +
                        " that an op passes to kernel " + kernel + " is " + std::to_string(sizes[i]) +
                        " bytes, but the kernel's parameter there is " + std::to_string(params[i]) + " bytes (" +
                        expected + "); pass a value of the parameter's exact C++ type (python/src/ops/)");
}

}  // namespace kjit::ops
