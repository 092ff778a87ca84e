// Every built-in kernel compiles with NVRTC (no GPU needed) for sm_80, sm_90 and sm_100, for every dtype
// and vector width the built-in ops use, and its declaration is what the ops pack arguments for.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "kjit/compiler.hpp"
#include "kjit/engine.hpp"
#include "kjit/error.hpp"
#include "kjit/kernel_family.hpp"
#include "engine_support.hpp"
#include "test_support.hpp"

using namespace kjit;
using kjit::testing::TempDir;

using kjit::testing::prepared_origin;
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
    std::shared_ptr<const SpecializedKernel> p;
    Origin origin = Origin::Memory;
    ASSERT_NO_THROW(p = engine.prepare(spec, target, &origin));
    EXPECT_EQ(origin, Origin::Compiled);
    EXPECT_EQ(p->meta.target, GetParam());
    EXPECT_EQ(p->meta.output, cache::OutputKind::Cubin);
    EXPECT_FALSE(p->meta.lowered_name.empty());
  }
  EXPECT_EQ(engine.stats().compiles, cases.size());
  // A second engine on the same directory finds every one on disk.
  Engine again(Settings::from_map({{"KJIT_CACHE_DIR", (dir / "cache").string()}}));
  for (const auto& c : cases) {
    Specialization spec(Template::builtin(c.tmpl), c.kernel, c.args);
    EXPECT_EQ(prepared_origin(again, spec, target), Origin::Disk) << describe(c);
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
  EXPECT_EQ(params("add_constant", "add_constant"), (V{"const T* __restrict__", "T* __restrict__", "T", "long long"}));
  EXPECT_EQ(params("fused_update", "fused_update"),
            (V{"const T* __restrict__", "const T* __restrict__", "const T* __restrict__", "T* __restrict__",
               "kjit_detail::acc_t<T>", "kjit_detail::acc_t<T>", "kjit_detail::acc_t<T>", "long long"}));
  for (const char* k : {"outer", "outer_backward_a", "outer_backward_c"}) {
    EXPECT_EQ(params("outer", k), (V{"const T* __restrict__", "const T* __restrict__", "T* __restrict__", "long long",
                                     "long long", "long long"}))
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

// kjit's own kernels compile with NVRTC's lean front end (CompileOptions::library()): it must give every one
// of them the same binary as the full front end, byte for byte, so that it changes the compile time and
// nothing else (no kernel of the library runs other code). Two compiles of a kernel give the same bytes
// only if the kernel has no internal-linkage variable: NVRTC names those with a per-compile hash (this test
// failed now and then on kjit_ew::kBlock, a namespace-scope constexpr, now an enumerator).
TEST(BuiltinTemplates, TheLeanFrontEndGivesTheSameBinaryForEveryLibraryKernel) {
  auto ty = [](DType t) { return TemplateArg::type(t); };
  auto i = [](long long v) { return TemplateArg::integer(v); };
  auto b = [](bool v) { return TemplateArg::boolean(v); };
  std::vector<Case> cases;
  for (DType t : {DType::Float32, DType::BFloat16}) {
    const int v = static_cast<int>(16 / dtype_size(t));
    const DType a = DType::Float32;
    auto rows = [&](int tpr, int rpb, int vec, int items, int d) {
      return Args{{"TPR", i(tpr)}, {"ROWS", i(rpb)}, {"VEC", i(vec)}, {"ITEMS", i(items)}, {"D", i(d)}};
    };
    auto with = [](Args head, const Args& tail) {
      head.insert(head.end(), tail.begin(), tail.end());
      return head;
    };
    Args tv = {{"T", ty(t)}, {"VEC", i(v)}};
    cases.push_back({"add_constant", "add_constant", tv});
    cases.push_back({"fused_update", "fused_update", tv});
    for (const char* k : {"outer", "outer_backward_a", "outer_backward_c"}) cases.push_back({"outer", k, tv});
    cases.push_back(
        {"reduce", "reduce_rows", with({{"T", ty(t)}, {"TO", ty(t)}, {"OP", i(0)}}, rows(256, 1, v, 4, 1024 * v))});
    cases.push_back(
        {"reduce", "reduce_rows", with({{"T", ty(t)}, {"TO", ty(t)}, {"OP", i(1)}}, rows(1024, 1, 1, 0, 0))});
    cases.push_back({"reduce", "reduce_cols", {{"T", ty(t)}, {"TO", ty(a)}, {"OP", i(2)}, {"VEC", i(v)}}});
    for (const char* k : {"softmax_forward", "softmax_backward"}) {
      cases.push_back({"softmax", k, with({{"T", ty(t)}}, with(rows(256, 1, v, 4, 1024 * v), {{"LOG", b(false)}}))});
      cases.push_back({"softmax", k, with({{"T", ty(t)}}, with(rows(1024, 1, v, 0, 0), {{"LOG", b(true)}}))});
    }
    for (const char* k : {"norm_forward", "norm_backward"})
      for (bool rms : {false, true})
        cases.push_back({"norm", k,
                         with({{"T", ty(t)}}, with(rows(256, 1, v, 4, 1024 * v),
                                                   {{"RMS", b(rms)}, {"HAS_W", b(true)}, {"HAS_B", b(!rms)}}))});
    for (const char* k : {"pool2d_forward", "pool2d_backward"})
      for (bool max : {true, false})
        cases.push_back({"pool",
                         k,
                         {{"T", ty(t)},
                          {"KH", i(3)},
                          {"KW", i(3)},
                          {"SH", i(2)},
                          {"SW", i(2)},
                          {"PH", i(1)},
                          {"PW", i(1)},
                          {"MAX", b(max)},
                          {"COUNT_PAD", b(true)}}});
  }
  cases.push_back({"rgb_to_gray", "rgb_to_gray", {{"H", i(1080)}, {"W", i(1920)}}});
  // A kjit.elementwise program as python/src/ops/elementwise/function.cpp writes one (silu(x) * s).
  const auto ew = Template::from_string(
      "#include \"elementwise.cuh\"\n"
      "template <typename C> struct kjit_expr {\n  C s;\n"
      "  __device__ __forceinline__ C operator()(C x) const { using namespace kjit_math; return static_cast<C>(silu(x) "
      "* s); }\n};\n"
      "template <typename TO, typename C, int VEC, bool TAIL, typename I, typename T_x>\n"
      "__global__ void __launch_bounds__(kjit_ew::kBlock) kjit_elementwise(TO* __restrict__ kjit_out, I kjit_n, "
      "const T_x* __restrict__ x, double s) {\n"
      "  kjit_ew::flat<C, VEC, TAIL>(kjit_expr<C>{static_cast<C>(s)}, kjit_out, kjit_n, x);\n}\n",
      "kjit_elementwise_lean_test");
  const Target target = Target::parse("sm_90");
  const CompilePlan plan = Compiler::plan(target);
  auto binary = [&](const std::shared_ptr<const Template>& t, const std::string& kernel, const Args& args,
                    bool minimal) {
    CompileOptions o;
    o.minimal = minimal;
    return Compiler::compile(Specialization(t, kernel, args, o), plan).payload;
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(describe(c));
    const auto t = Template::builtin(c.tmpl);
    const std::string lean = binary(t, c.kernel, c.args, true);
    EXPECT_FALSE(lean.empty());
    EXPECT_TRUE(lean == binary(t, c.kernel, c.args, false)) << "the binaries differ";
  }
  for (DType t : {DType::Float32, DType::BFloat16}) {
    const Args args = {{"TO", ty(t)},     {"C", ty(DType::Float32)}, {"VEC", i(static_cast<int>(16 / dtype_size(t)))},
                       {"TAIL", b(true)}, {"I", ty(DType::Int32)},   {"T_x", ty(t)}};
    EXPECT_TRUE(binary(ew, "kjit_elementwise", args, true) == binary(ew, "kjit_elementwise", args, false));
  }
}

TEST(BuiltinTemplates, TheLeanFrontEndIsAnOptionOfTheKeyAndSaysWhatItLeavesOut) {
  CompileOptions lean;
  lean.minimal = true;
  const auto& opts = lean.canonical();
  EXPECT_NE(std::find(opts.begin(), opts.end(), "--minimal"), opts.end());
  CompileOptions full;
  EXPECT_FALSE(lean == full);
  const Args tv = {{"T", TemplateArg::type(DType::Float32)}, {"VEC", TemplateArg::integer(4)}};
  const auto t = Template::builtin("add_constant");
  const CompilePlan plan = Compiler::plan(Target::parse("sm_90"));
  TempDir dir;
  Engine engine(Settings::from_map({{"KJIT_CACHE_DIR", (dir / "cache").string()}}));
  EXPECT_NE(engine.key_for(Specialization(t, "add_constant", tv, lean), plan).hex(),
            engine.key_for(Specialization(t, "add_constant", tv, full), plan).hex());
  // A kernel that uses what --minimal leaves out: a clear error that names the option, and it compiles
  // without it.
  const auto tex = Template::from_string(
      "__global__ void k(cudaTextureObject_t tex, float* y) { y[threadIdx.x] = tex1Dfetch<float>(tex, threadIdx.x); "
      "}\n",
      "uses_textures.cu");
  try {
    Compiler::compile(Specialization(tex, "k", {}, lean), plan);
    FAIL() << "a texture kernel compiled under --minimal";
  } catch (const CompileError& e) {
    EXPECT_NE(std::string(e.what()).find("compiled with minimal=True"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("compile it with minimal=False"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(Compiler::compile(Specialization(tex, "k", {}, full), plan).payload.empty());
}
