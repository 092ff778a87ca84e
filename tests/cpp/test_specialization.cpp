// Typed template arguments addressed by name: name expressions and the errors for bad arguments.
#include <gtest/gtest.h>

#include "kjit/error.hpp"
#include "kjit/specialization.hpp"

using namespace kjit;

namespace {
std::shared_ptr<const Template> demo() {
  return Template::from_string(R"(
    template <typename T, int VEC, unsigned U = 3u, bool FLAG = false>
    __global__ void k(T* p) {}
    template <float S, double D> __global__ void fl(float* p) {}
    __global__ void plain(float* p) {}
  )", "demo.cu");
}
std::string message_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}
}  // namespace

TEST(Specialization, RendersNameExpressionInDeclarationOrder) {
  Specialization s(demo(), "k", {{"VEC", TemplateArg::integer(4)}, {"T", TemplateArg::type(DType::BFloat16)}});
  EXPECT_EQ(s.name_expression(), "k<__nv_bfloat16, 4>");
  Specialization s2(demo(), "k", {{"T", TemplateArg::type(DType::Int8)}, {"VEC", TemplateArg::integer(1)},
                                  {"FLAG", TemplateArg::boolean(true)}});
  EXPECT_EQ(s2.name_expression(), "k<signed char, 1, 3u, true>");
  EXPECT_EQ(s2.describe(), "k(T=int8, VEC=1, FLAG=true) from template demo.cu");
}

TEST(Specialization, FloatingArgumentsAreExactHexLiterals) {
  Specialization s(demo(), "fl", {{"S", TemplateArg::floating(0.5)}, {"D", TemplateArg::floating(0.1)}});
  EXPECT_EQ(s.name_expression(), "fl<0x1p-1f, 0x1.999999999999ap-4>");
}

TEST(Specialization, NonTemplateKernel) {
  Specialization s(demo(), "plain", {});
  EXPECT_EQ(s.name_expression(), "plain");
}

TEST(Specialization, UnknownKernelListsKernels) {
  EXPECT_EQ(message_of([] { Specialization(demo(), "nope", {}); }),
            "template 'demo.cu' has no __global__ kernel named 'nope' (it declares: k, fl, plain)");
}

TEST(Specialization, UnknownParameterListsParameters) {
  EXPECT_EQ(message_of([] {
              Specialization(demo(), "k", {{"T", TemplateArg::type(DType::Float32)}, {"VEC", TemplateArg::integer(1)},
                                           {"WIDTH", TemplateArg::integer(2)}});
            }),
            "kernel 'k' has no template parameter 'WIDTH'; its parameters are T (type), VEC (int), U (unsigned) = "
            "3u, FLAG (bool) = false");
}

TEST(Specialization, MissingParameterIsNamed) {
  EXPECT_EQ(message_of([] { Specialization(demo(), "k", {{"T", TemplateArg::type(DType::Float32)}}); }),
            "kernel 'k' needs template parameter VEC; its parameters are T (type), VEC (int), U (unsigned) = 3u, "
            "FLAG (bool) = false");
}

TEST(Specialization, KindMismatchIsTypeError) {
  EXPECT_THROW(Specialization(demo(), "k", {{"T", TemplateArg::integer(4)}, {"VEC", TemplateArg::integer(1)}}),
               TypeError);
  EXPECT_EQ(message_of([] {
              Specialization(demo(), "k", {{"T", TemplateArg::integer(4)}, {"VEC", TemplateArg::integer(1)}});
            }),
            "template parameter 'T' of kernel 'k' is a type: pass a dtype (e.g. float32, bfloat16, int64), got the "
            "value 4.");
}

TEST(Specialization, OutOfRangeIntegerIsValueError) {
  EXPECT_THROW(Specialization(demo(), "k", {{"T", TemplateArg::type(DType::Float32)},
                                           {"VEC", TemplateArg::integer(1ll << 40)}}),
               ValueError);
  EXPECT_THROW(Specialization(demo(), "k", {{"T", TemplateArg::type(DType::Float32)}, {"VEC", TemplateArg::integer(1)},
                                           {"U", TemplateArg::integer(-1)}}),
               ValueError);
}

TEST(Specialization, NonFiniteFloatIsValueError) {
  EXPECT_THROW(Specialization(demo(), "fl", {{"S", TemplateArg::floating(1e300)}, {"D", TemplateArg::floating(1)}}),
               ValueError);
}
