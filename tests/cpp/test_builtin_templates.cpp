// Every built-in kernel compiles with NVRTC (no GPU needed) for sm_80, sm_90 and sm_100, for every dtype
// and vector width the built-in ops use, and its declaration is what the ops pack arguments for.
#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "kjit/engine.hpp"
#include "kjit/error.hpp"
#include "kjit/kernel_family.hpp"
#include "test_support.hpp"

using namespace kjit;
using kjit::testing::TempDir;

namespace {

using Args = std::vector<std::pair<std::string, TemplateArg>>;

struct Case {
  std::string tmpl;
  std::string kernel;
  Args args;
};

// The vector widths the ops choose for a dtype: 16 bytes down to one element.
std::vector<int> vec_widths(DType t) {
  std::vector<int> out;
  for (int v = static_cast<int>(16 / dtype_size(t)); v >= 1; v /= 2) out.push_back(v);
  return out;
}

const DType kFloating[] = {DType::Float32, DType::Float16, DType::BFloat16, DType::Float64};

std::vector<Case> builtin_cases() {
  std::vector<Case> cases;
  for (DType t : kFloating) {
    for (int vec : vec_widths(t)) {
      Args tv = {{"T", TemplateArg::type(t)}, {"VEC", TemplateArg::integer(vec)}};
      cases.push_back({"add_constant", "add_constant", tv});
      cases.push_back({"fused_update", "fused_update", tv});
      for (const char* k : {"outer", "outer_backward_a", "outer_backward_c"}) cases.push_back({"outer", k, tv});
    }
  }
  for (auto [h, w] : {std::pair<int, int>{1080, 1920}, {1, 7}})
    cases.push_back({"rgb_to_gray", "rgb_to_gray", {{"H", TemplateArg::integer(h)}, {"W", TemplateArg::integer(w)}}});
  return cases;
}

std::string describe(const Case& c) {
  std::string s = c.tmpl + ":" + c.kernel + "<";
  for (std::size_t i = 0; i < c.args.size(); ++i) s += (i ? ", " : "") + c.args[i].second.describe();
  return s + ">";
}

}  // namespace

class BuiltinsForArch : public ::testing::TestWithParam<std::string> {};

TEST_P(BuiltinsForArch, EveryKernelAndDtypeCompilesToCubin) {
  TempDir dir;
  Engine engine(Settings::from_map({{"KJIT_CACHE_DIR", (dir / "cache").string()}}));
  const Target target = Target::parse(GetParam());
  const auto cases = builtin_cases();
  for (const auto& c : cases) {
    SCOPED_TRACE(describe(c));
    Specialization spec(Template::builtin(c.tmpl), c.kernel, c.args);
    Prepared p;
    ASSERT_NO_THROW(p = engine.prepare(spec, target));
    EXPECT_EQ(p.origin, Origin::Compiled);
    EXPECT_EQ(p.meta.target, GetParam());
    EXPECT_EQ(p.meta.output, cache::OutputKind::Cubin);
    EXPECT_FALSE(p.meta.lowered_name.empty());
  }
  EXPECT_EQ(engine.stats().compiles, cases.size());
  // A second engine on the same directory finds every one on disk.
  Engine again(Settings::from_map({{"KJIT_CACHE_DIR", (dir / "cache").string()}}));
  for (const auto& c : cases) {
    Specialization spec(Template::builtin(c.tmpl), c.kernel, c.args);
    EXPECT_EQ(again.prepare(spec, target).origin, Origin::Disk) << describe(c);
  }
  EXPECT_EQ(again.stats().compiles, 0u);
}

INSTANTIATE_TEST_SUITE_P(Archs, BuiltinsForArch, ::testing::Values("sm_80", "sm_90", "sm_100"));

TEST(BuiltinTemplates, AreListedByName) {
  auto names = Template::builtin_names();
  for (const char* n : {"add_constant", "rgb_to_gray", "outer", "fused_update"})
    EXPECT_NE(std::find(names.begin(), names.end(), n), names.end()) << n;
}

// The ops pack launch arguments positionally with exact C++ types: pin the declared parameters.
TEST(BuiltinTemplates, DeclarationsMatchWhatTheOpsPack) {
  auto params = [](const std::string& tmpl, const std::string& kernel) {
    std::vector<std::string> out;
    auto t = Template::builtin(tmpl);
    for (const auto& p : t->kernel(kernel).params) out.push_back(p.type);
    return out;
  };
  auto tparams = [](const std::string& tmpl, const std::string& kernel) {
    std::string out;
    auto t = Template::builtin(tmpl);
    for (const auto& p : t->kernel(kernel).template_params) out += p.name + ";";
    return out;
  };
  using V = std::vector<std::string>;
  EXPECT_EQ(params("add_constant", "add_constant"),
            (V{"const T* __restrict__", "T* __restrict__", "T", "long long"}));
  EXPECT_EQ(params("fused_update", "fused_update"),
            (V{"const T* __restrict__", "const T* __restrict__", "const T* __restrict__", "T* __restrict__",
               "kjit_detail::acc_t<T>", "kjit_detail::acc_t<T>", "kjit_detail::acc_t<T>", "long long"}));
  for (const char* k : {"outer", "outer_backward_a", "outer_backward_c"}) {
    EXPECT_EQ(params("outer", k), (V{"const T* __restrict__", "const T* __restrict__", "T* __restrict__",
                                     "long long", "long long", "long long"}))
        << k;
    EXPECT_EQ(tparams("outer", k), "T;VEC;") << k;
  }
  EXPECT_EQ(tparams("add_constant", "add_constant"), "T;VEC;");
  EXPECT_EQ(tparams("fused_update", "fused_update"), "T;VEC;");
  EXPECT_EQ(tparams("rgb_to_gray", "rgb_to_gray"), "H;W;");
}

TEST(BuiltinTemplates, NameExpressions) {
  Args tv = {{"T", TemplateArg::type(DType::BFloat16)}, {"VEC", TemplateArg::integer(8)}};
  EXPECT_EQ(Specialization(Template::builtin("outer"), "outer_backward_c", tv).name_expression(),
            "outer_backward_c<__nv_bfloat16, 8>");
  EXPECT_EQ(Specialization(Template::builtin("fused_update"), "fused_update", tv).name_expression(),
            "fused_update<__nv_bfloat16, 8>");
}
