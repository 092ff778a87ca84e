// The built-in ops' typed launch (python/src/ops/runtime/launch_kernel.hpp, torch-free): the argument array it
// builds from typed values, and the check that debug builds run against the kernel's parameter sizes
// before a launch (the kernel itself needs a GPU: here the sizes are given as the driver reports them).
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "kjit/error.hpp"
#include "launch_kernel.hpp"

namespace {

using kjit::ops::arg_address;
using kjit::ops::arg_size;
using kjit::ops::check_arg_sizes;

// A value whose bytes are chosen at run time, as ElementScalar's (a __half here: 2 bytes).
struct RuntimeSized {
  alignas(8) unsigned char bytes[8] = {1, 2};
  std::size_t size = 2;
  const void* arg_data() const noexcept { return bytes; }
  std::size_t arg_size() const noexcept { return size; }
};

TEST(OpLaunchKernel, EachValueGivesItsOwnAddressAndTheSizeOfItsType) {
  const void* ptr = nullptr;
  long long n = 5;
  int d = 3;
  double eps = 1e-5;
  EXPECT_EQ(arg_address(ptr), static_cast<const void*>(&ptr));
  EXPECT_EQ(arg_size(ptr), 8u);
  EXPECT_EQ(arg_address(n), static_cast<const void*>(&n));
  EXPECT_EQ(arg_size(n), 8u);
  EXPECT_EQ(arg_size(d), 4u);
  EXPECT_EQ(arg_size(eps), 8u);
  EXPECT_EQ(arg_size(1.0f), 4u);
}

TEST(OpLaunchKernel, ARuntimeSizedValueGivesItsBytes) {
  RuntimeSized h;
  EXPECT_EQ(arg_address(h), static_cast<const void*>(h.bytes));
  EXPECT_EQ(arg_size(h), 2u);
  h.size = 8;
  EXPECT_EQ(arg_size(h), 8u);
}

TEST(OpLaunchKernel, MatchingSizesPass) {
  const std::vector<std::size_t> params = {8, 8, 4, 8};
  const std::size_t sizes[] = {8, 8, 4, 8};
  EXPECT_NO_THROW(check_arg_sizes("add_constant<float, 4>", params, sizes, 4));
}

std::string message_of(const std::vector<std::size_t>& params, const std::vector<std::size_t>& sizes) {
  try {
    check_arg_sizes("add_constant<float, 4>", params, sizes.data(), sizes.size());
  } catch (const kjit::LaunchError& e) {
    return e.what();
  }
  return "";
}

TEST(OpLaunchKernel, AMissingArgumentIsALaunchErrorNamingTheKernelAndBothCounts) {
  const std::string m = message_of({8, 8, 4, 8}, {8, 8, 8});
  EXPECT_NE(m.find("kernel add_constant<float, 4> with 3 arguments, but it takes 4"), std::string::npos) << m;
  EXPECT_NE(m.find("(8, 8, 4, 8)"), std::string::npos) << m;
  EXPECT_NE(m.find("(8, 8, 8)"), std::string::npos) << m;
  EXPECT_NE(m.find("launch_kernel"), std::string::npos) << m;
}

TEST(OpLaunchKernel, AnArgumentOfAnotherSizeIsALaunchErrorNamingIt) {
  // A long long passed where the kernel takes an int (argument 3).
  const std::string m = message_of({8, 8, 4, 8}, {8, 8, 8, 8});
  EXPECT_NE(m.find("argument 3 of 4"), std::string::npos) << m;
  EXPECT_NE(m.find("is 8 bytes, but the kernel's parameter there is 4 bytes"), std::string::npos) << m;
  EXPECT_NE(m.find("exact C++ type"), std::string::npos) << m;
}

TEST(OpLaunchKernel, TheFirstDifferingArgumentIsNamed) {
  const std::string m = message_of({8, 2, 4}, {8, 4, 8});
  EXPECT_NE(m.find("argument 2 of 3"), std::string::npos) << m;
}

}  // namespace
