// The template parser: kernels, template parameters and function parameters are found by name.
#include <gtest/gtest.h>

#include <algorithm>

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
