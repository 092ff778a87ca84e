// GPU tests (ctest label `gpu`): Kernel's parameter sizes on a real driver, for the kernels of
// param_test_kernels.hpp loaded from a cubin for the device and from PTX. The count comes from
// cuKernelGetParamCount (13.2 drivers) or from the image (image_params.hpp), never from a failing call; where the
// driver has the count query, the image's count must equal it. Skips with a reason without a device.
#include <gtest/gtest.h>

#include <string>

#include "kjit/compiler.hpp"
#include "kjit/driver_library.hpp"
#include "kjit/image_params.hpp"
#include "kjit/module.hpp"
#include "kjit/specialization.hpp"
#include "kjit/template.hpp"
#include "gpu_test.hpp"
#include "param_test_kernels.hpp"
#include "test_support.hpp"

using namespace kjit;
using kjit::testing::param_test_kernels;
using kjit::testing::param_test_source;

namespace {

class ParamSizes : public kjit::testing::OnDevice<> {
 protected:
  // The device's compute capability as the digits of its targets (90 for sm_90).
  static std::string arch() {
    const ComputeCapability cc = device_compute_capability(0);
    return std::to_string(cc.major * 10 + cc.minor);
  }
};

void check_loaded(const std::string& target) {
  const auto tmpl = Template::from_string(param_test_source(), "gpu_param_sizes.cu");
  const CompilePlan plan = Compiler::plan(Target::parse(target));
  const DriverLibrary& d = DriverLibrary::get();
  for (const auto& e : param_test_kernels()) {
    SCOPED_TRACE(e.kernel + " from " + target + " (" + cache::to_string(plan.output) + ")");
    const CompiledBinary b = Compiler::compile(Specialization(tmpl, e.kernel, e.args), plan);
    const Kernel k(Module::load(b.payload), b.lowered_name, e.kernel, b.payload);
    if (!d.cuKernelGetParamInfo) GTEST_SKIP() << "the driver has no cuKernelGetParamInfo (older than 12.4)";
    EXPECT_TRUE(k.param_sizes_known());
    EXPECT_EQ(k.param_sizes(), e.sizes);
    if (d.cuKernelGetParamCount) {
      std::size_t n = 0;
      ASSERT_EQ(d.cuKernelGetParamCount(k.handle(), &n), CUDA_SUCCESS);
      EXPECT_EQ(image_param_count(b.payload, b.lowered_name), n);
    }
  }
}

}  // namespace

TEST_F(ParamSizes, KernelsLoadedFromACubinForTheDevice) { check_loaded("sm_" + arch()); }

TEST_F(ParamSizes, KernelsLoadedFromPtx) { check_loaded("compute_" + arch()); }
