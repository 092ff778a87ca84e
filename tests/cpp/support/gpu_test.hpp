// The GPU tests' fixture base: each test skips, saying why, where no CUDA device is present, and runs with
// device 0's primary context current where one is.
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "kjit/driver_library.hpp"
#include "test_support.hpp"

namespace kjit::testing {

// `Base` is ::testing::Test or a ::testing::TestWithParam<...>. A SetUp of a derived fixture calls
// OnDevice::SetUp() first and returns if IsSkipped().
template <typename Base = ::testing::Test>
class OnDevice : public Base {
 protected:
  void SetUp() override {
    std::string why;
    if (!have_cuda_device(&why)) GTEST_SKIP() << "no CUDA device: " << why;
    make_primary_context_current(0);
  }
};

}  // namespace kjit::testing
