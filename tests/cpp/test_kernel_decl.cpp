// The template parser: kernels, template parameters and function parameters are found by name.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <string>

#include "kjit/kernel_decl.hpp"

using namespace kjit;

TEST(KernelDecl, FindsTemplateKernelWithParams) {
  auto ks = parse_kernel_decls(R"(
    #include "x.h"
    // template <typename Fake> __global__ void commented_out();
    template <typename T, int VEC, long long N = 4>
    __global__ void __launch_bounds__(256) add(const T* __restrict__ x, T* y, T c, long long n) { }
  )");
  ASSERT_EQ(ks.size(), 1u);
  const KernelDecl& k = ks[0];
  EXPECT_EQ(k.name, "add");
  EXPECT_TRUE(k.is_template);
  ASSERT_EQ(k.template_params.size(), 3u);
  EXPECT_EQ(k.template_params[0].name, "T");
  EXPECT_EQ(k.template_params[0].kind, TemplateParam::Kind::Type);
  EXPECT_EQ(k.template_params[1].name, "VEC");
  EXPECT_EQ(k.template_params[1].kind, TemplateParam::Kind::Integral);
  EXPECT_EQ(k.template_params[1].cpp_type, "int");
  EXPECT_EQ(k.template_params[2].cpp_type, "long long");
  ASSERT_TRUE(k.template_params[2].default_value);
  EXPECT_EQ(*k.template_params[2].default_value, "4");
  ASSERT_EQ(k.params.size(), 4u);
  EXPECT_EQ(k.params[0].name, "x");
  EXPECT_TRUE(k.params[0].is_pointer);
  EXPECT_EQ(k.params[2].name, "c");
  EXPECT_EQ(k.params[2].type, "T");
  EXPECT_FALSE(k.params[2].is_pointer);
  EXPECT_EQ(k.params[3].type, "long long");
  EXPECT_EQ(k.line, 5);
}

TEST(KernelDecl, DeviceTemplateBeforeKernelIsNotItsHead) {
  auto ks = parse_kernel_decls(R"(
    template <typename U> __device__ U twice(U v) { return v + v; }
    extern "C" __global__ void plain(float* p, int n) { }
    template <bool FLAG, float S> __global__ void k2(float* p) { }
  )");
  ASSERT_EQ(ks.size(), 2u);
  EXPECT_EQ(ks[0].name, "plain");
  EXPECT_FALSE(ks[0].is_template);
  EXPECT_TRUE(ks[0].extern_c);
  EXPECT_EQ(ks[1].name, "k2");
  ASSERT_EQ(ks[1].template_params.size(), 2u);
  EXPECT_EQ(ks[1].template_params[0].kind, TemplateParam::Kind::Bool);
  EXPECT_EQ(ks[1].template_params[1].kind, TemplateParam::Kind::Floating);
}

TEST(KernelDecl, DeclarationAndDefinitionCountOnce) {
  auto ks = parse_kernel_decls(R"(
    template <typename T> __global__ void k(T* p);
    template <typename T> __global__ void k(T* p) { p[0] = T(); }
  )");
  ASSERT_EQ(ks.size(), 1u);
}

TEST(KernelDecl, UnsupportedParameterKindsAreMarked) {
  auto ks = parse_kernel_decls("template <typename... Ts, template <class> class C> __global__ void k() {}");
  ASSERT_EQ(ks.size(), 1u);
  ASSERT_EQ(ks[0].template_params.size(), 2u);
  EXPECT_EQ(ks[0].template_params[0].kind, TemplateParam::Kind::Unsupported);
  EXPECT_EQ(ks[0].template_params[1].kind, TemplateParam::Kind::Unsupported);
}

TEST(KernelDecl, ComparisonsInsideParenthesesDoNotSplitOrMergeParameters) {
  auto ks = parse_kernel_decls(
      "template <typename T, int VEC = (sizeof(T) > 2 ? 4 : 8), int BLOCK = 256>\n"
      "__global__ void k(T* p) {}\n");
  ASSERT_EQ(ks.size(), 1u);
  ASSERT_EQ(ks[0].template_params.size(), 3u);
  EXPECT_EQ(ks[0].template_params[1].name, "VEC");
  std::string dflt = *ks[0].template_params[1].default_value;
  dflt.erase(std::remove(dflt.begin(), dflt.end(), ' '), dflt.end());
  EXPECT_EQ(dflt, "(sizeof(T)>2?4:8)");
  EXPECT_EQ(ks[0].template_params[2].name, "BLOCK");
}

TEST(KernelDecl, CommentInsideADirectiveDoesNotLeakCode) {
  auto ks = parse_kernel_decls(
      "#define DECL /* helper */ __global__ void fake(float* x)\n"
      "__global__ void real(float* x) {}\n");
  ASSERT_EQ(ks.size(), 1u);
  EXPECT_EQ(ks[0].name, "real");
  EXPECT_EQ(ks[0].line, 2);
}

TEST(KernelDecl, KernelsInNamespacesAreQualified) {
  auto ks = parse_kernel_decls(R"(
    namespace mylib { namespace detail {
      template <typename T> __global__ void k(T* p) {}
    } }
    namespace {
      __global__ void hidden(float* p) { if (p) { p[0] = 1; } }
    }
    namespace a::b { __global__ void nested(float* p) {} }
    __global__ void top(float* p) {}
  )");
  ASSERT_EQ(ks.size(), 4u);
  EXPECT_EQ(ks[0].qualified_name(), "mylib::detail::k");
  EXPECT_EQ(ks[1].qualified_name(), "hidden");
  EXPECT_EQ(ks[2].qualified_name(), "a::b::nested");
  EXPECT_EQ(ks[3].qualified_name(), "top");
}

// Issue 14 item 14: the parser was quadratic in the number of `__global__` (or `namespace`) tokens that do
// not make a declaration: a 660 KB source of them took 33 s (each one re-scanned the rest of the file).
// Linear, each of these parses in well under a second even under sanitizers; the bound (10 s) is far
// from both, so it cannot flake, and the old parser exceeded it on every one of them.
TEST(KernelDecl, HostileTokenRunsParseInLinearTime) {
  for (const std::string unit :
       {"__global__ ", "namespace ", "__global__ __launch_bounds__( ", "template <class T> __global__ "}) {
    std::string source;
    while (source.size() < 660000) source += unit;
    const auto start = std::chrono::steady_clock::now();
    const auto ks = parse_kernel_decls(source);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    EXPECT_TRUE(ks.empty()) << unit;
    EXPECT_LT(seconds, 10.0) << "660 KB of '" << unit << "' took " << seconds << " s";
  }
  // And many real kernels after a template head that is not theirs: found, none of them a template.
  std::string source = "template <typename T> __device__ T twice(T x) { return x + x; }\n";
  for (int i = 0; i < 20000; ++i) source += "__global__ void k" + std::to_string(i) + "(float* x) { }\n";
  const auto ks = parse_kernel_decls(source);
  ASSERT_EQ(ks.size(), 20000u);
  EXPECT_FALSE(ks[0].is_template);
  EXPECT_EQ(ks[19999].name, "k19999");
  EXPECT_EQ(ks[19999].line, 20001);
}

// Issue 14 item 19: a parameter list continued with backslash-newlines (as CuPy's test kernels write
// them) is read as the compiler reads it, after translation phase 2: `unsigned int N`, not '\ unsigned int'.
TEST(KernelDecl, BackslashNewlineContinuationsAreSpliced) {
  auto ks = parse_kernel_decls(
      "template <typename T,\\\n          int VEC>\\\n"
      "__global__ void add(const T* x, \\\n  T* y, \\\r\n  unsigned int N) { }\n"
      "// a comment continued \\\n __global__ void hidden(int n);\n"
      "__global__ void after(unsi\\\ngned int n) { }\n");
  ASSERT_EQ(ks.size(), 2u);
  const KernelDecl& k = ks[0];
  EXPECT_EQ(k.name, "add");
  EXPECT_EQ(k.line, 3);
  ASSERT_EQ(k.template_params.size(), 2u);
  EXPECT_EQ(k.template_params[1].name, "VEC");
  EXPECT_EQ(k.template_params[1].cpp_type, "int");
  ASSERT_EQ(k.params.size(), 3u);
  EXPECT_EQ(k.params[1].type, "T*");
  EXPECT_EQ(k.params[2].name, "N");
  EXPECT_EQ(k.params[2].type, "unsigned int");
  EXPECT_EQ(ks[1].name, "after");  // `hidden` is inside the continued comment
  EXPECT_EQ(ks[1].line, 8);
  ASSERT_EQ(ks[1].params.size(), 1u);
  EXPECT_EQ(ks[1].params[0].type, "unsigned int");
}
