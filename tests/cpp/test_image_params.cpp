// image_params: a kernel's parameter count read from NVRTC's own output (cubins for sm_80, sm_90 and sm_120,
// PTX for compute_90) for the kernels of param_test_kernels.hpp (0 to 29 parameters, structs, __grid_constant__
// CUtensorMap-sized parameters, a parameter list over 8000 bytes, a template kernel); and images that do not say
// for sure, which give no count rather than a guess. No GPU needed.
#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "kjit/compiler.hpp"
#include "kjit/image_params.hpp"
#include "kjit/specialization.hpp"
#include "kjit/template.hpp"
#include "param_test_kernels.hpp"

using namespace kjit;

namespace {

using kjit::testing::param_test_kernels;
using kjit::testing::param_test_source;
using Expected = kjit::testing::ParamTestKernel;

const std::shared_ptr<const Template>& test_template() {
  static const auto tmpl = Template::from_string(param_test_source(), "image_params_test.cu");
  return tmpl;
}

// The kernel compiled by NVRTC for `target` (a cubin for sm_XY, PTX for compute_XY).
CompiledBinary compile(const Expected& e, const std::string& target) {
  const auto& tmpl = test_template();
  return Compiler::compile(Specialization(tmpl, e.kernel, e.args), Compiler::plan(Target::parse(target)));
}

bool is_elf(const std::string& image) {
  return image.size() > 4 && image[0] == 0x7f && image.compare(1, 3, "ELF") == 0;
}

}  // namespace

class ImageParams : public ::testing::TestWithParam<std::string> {};

TEST_P(ImageParams, CountsEveryKernelsParametersAsDeclared) {
  for (const Expected& e : param_test_kernels()) {
    SCOPED_TRACE(e.kernel + " for " + GetParam());
    const CompiledBinary b = compile(e, GetParam());
    ASSERT_EQ(is_elf(b.payload), GetParam().rfind("sm_", 0) == 0);
    EXPECT_EQ(image_param_count(b.payload, b.lowered_name), e.sizes.size());
    // The count kjit's own reading of the declaration gives (ParamLayout's), for the same kernel.
    EXPECT_EQ(Specialization(test_template(), e.kernel, e.args).kernel().params.size(), e.sizes.size());
    // Another kernel's name in the same image: not this one's count.
    EXPECT_EQ(image_param_count(b.payload, b.lowered_name + "x"), std::nullopt);
    EXPECT_EQ(image_param_count(b.payload, ""), std::nullopt);
  }
}

INSTANTIATE_TEST_SUITE_P(Targets, ImageParams, ::testing::Values("sm_80", "sm_90", "sm_120", "compute_90"));

TEST(ImageParamsFormats, EachFormatReaderRefusesTheOther) {
  const Expected& unused = param_test_kernels()[2];
  const CompiledBinary cubin = compile(unused, "sm_90");
  const CompiledBinary ptx = compile(unused, "compute_90");
  EXPECT_EQ(cubin_param_count(cubin.payload, cubin.lowered_name), 4u);
  EXPECT_EQ(ptx_param_count(ptx.payload, ptx.lowered_name), 4u);
  EXPECT_EQ(cubin_param_count(ptx.payload, ptx.lowered_name), std::nullopt);
  EXPECT_EQ(ptx_param_count(cubin.payload, cubin.lowered_name), std::nullopt);
}

TEST(ImageParamsFormats, ACubinThatDoesNotSayGivesNoCount) {
  // One kernel alone, so that the records changed below are its own.
  const auto alone =
      Template::from_string("__global__ void unused(float* x, int a, double b, char c) {}\n", "image_params_alone.cu");
  const CompiledBinary b =
      Compiler::compile(Specialization(alone, "unused", {}), Compiler::plan(Target::parse("sm_90")));
  ASSERT_EQ(cubin_param_count(b.payload, b.lowered_name), 4u);
  // Cut short: the section headers (at the end) are gone.
  EXPECT_EQ(image_param_count(b.payload.substr(0, b.payload.size() / 2), b.lowered_name), std::nullopt);
  EXPECT_EQ(image_param_count(b.payload.substr(0, 16), b.lowered_name), std::nullopt);
  EXPECT_EQ(image_param_count("", b.lowered_name), std::nullopt);
  EXPECT_EQ(image_param_count("garbage", b.lowered_name), std::nullopt);

  // The same bytes with each EIATTR_KPARAM_INFO record's attribute changed (04 17 0c 00 -> 04 7f 0c 00): a
  // kernel whose parameter space has bytes but no parameter record kjit knows is not taken for one without
  // parameters.
  const std::string record("\x04\x17\x0c\x00", 4);
  std::string unknown_attr = b.payload;
  std::size_t changed = 0;
  for (std::size_t at = unknown_attr.find(record); at != std::string::npos; at = unknown_attr.find(record, at + 1)) {
    unknown_attr[at + 1] = '\x7f';
    ++changed;
  }
  ASSERT_EQ(changed, 4u);
  EXPECT_EQ(cubin_param_count(unknown_attr, b.lowered_name), std::nullopt);
  // Nor when the parameter space's size (EIATTR_CBANK_PARAM_SIZE: 03 19, 25 bytes) is gone too: the
  // parameters' constant bank (EIATTR_PARAM_CBANK) is still named.
  const std::string space_size("\x03\x19\x19\x00", 4);
  const std::size_t space_at = unknown_attr.find(space_size);
  ASSERT_NE(space_at, std::string::npos);
  unknown_attr[space_at + 1] = '\x7f';
  EXPECT_EQ(cubin_param_count(unknown_attr, b.lowered_name), std::nullopt);

  // A record format this reader does not know (5): it cannot tell where the next record starts.
  std::string unknown_format = b.payload;
  unknown_format[unknown_format.find(record)] = '\x05';
  EXPECT_EQ(cubin_param_count(unknown_format, b.lowered_name), std::nullopt);

  // Two records of one ordinal: 3 parameters and a gap is not a count.
  std::string twice = b.payload;
  const std::size_t first = twice.find(record);
  twice[first + 8] = twice[twice.find(record, first + 1) + 8];
  EXPECT_EQ(cubin_param_count(twice, b.lowered_name), std::nullopt);
}

TEST(ImageParamsFormats, PtxEntries) {
  EXPECT_EQ(ptx_param_count(".version 8.0\n.target sm_90\n.visible .entry k()\n{\n\tret;\n}\n", "k"), 0u);
  EXPECT_EQ(ptx_param_count(".visible .entry k\n{\n\tret;\n}\n", "k"), 0u);  // no list at all
  EXPECT_EQ(ptx_param_count(".entry k(\n\t.param .u64 .ptr .global .align 16 k_param_0, // the output\n"
                            "\t.param .align 8 .b8 k_param_1[24] /* a struct */,\n\t.param .u32 k_param_2\n)\n"
                            ".maxntid 256, 1, 1\n{\n\tret;\n}\n",
                            "k"),
            3u);
  // The entry named, not another one whose name it begins.
  EXPECT_EQ(ptx_param_count(".entry kk(\n.param .u32 a\n)\n{}\n.entry k(\n.param .u32 b,\n.param .u32 c\n)\n{}\n", "k"),
            2u);
  EXPECT_EQ(ptx_param_count(".entry kk(\n.param .u32 a\n)\n{}\n", "k"), std::nullopt);
  // What is not a `.param` list is not counted.
  EXPECT_EQ(ptx_param_count(".entry k(\n.reg .u32 a\n)\n{}\n", "k"), std::nullopt);
  EXPECT_EQ(ptx_param_count(".entry k(\n.param .u32 a,\n", "k"), std::nullopt);  // cut short
  EXPECT_EQ(ptx_param_count(".func k(\n.param .u32 a\n)\n{}\n", "k"), std::nullopt);
}
