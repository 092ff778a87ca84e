// Typed template arguments addressed by name: name expressions and the errors for bad arguments.
#include <gtest/gtest.h>

#include "kjit/error.hpp"
#include "kjit/specialization.hpp"
#include "param_text.hpp"

using namespace kjit;

namespace {
std::shared_ptr<const Template> demo() {
  return Template::from_string(R"(
    template <typename T, int VEC, unsigned U = 3u, bool FLAG = false>
    __global__ void k(T* p) {}
    template <float S, double D> __global__ void fl(float* p) {}
    __global__ void plain(float* p) {}
  )",
                               "demo.cu");
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
  Specialization s2(
      demo(), "k",
      {{"T", TemplateArg::type(DType::Int8)}, {"VEC", TemplateArg::integer(1)}, {"FLAG", TemplateArg::boolean(true)}});
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
              Specialization(demo(), "k",
                             {{"T", TemplateArg::type(DType::Float32)},
                              {"VEC", TemplateArg::integer(1)},
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
  EXPECT_THROW(
      Specialization(demo(), "k", {{"T", TemplateArg::type(DType::Float32)}, {"VEC", TemplateArg::integer(1ll << 40)}}),
      ValueError);
  EXPECT_THROW(Specialization(demo(), "k",
                              {{"T", TemplateArg::type(DType::Float32)},
                               {"VEC", TemplateArg::integer(1)},
                               {"U", TemplateArg::integer(-1)}}),
               ValueError);
}

TEST(Specialization, NonFiniteFloatIsValueError) {
  EXPECT_THROW(Specialization(demo(), "fl", {{"S", TemplateArg::floating(1e300)}, {"D", TemplateArg::floating(1)}}),
               ValueError);
}

// Issue 14 item 18: an unsigned 64-bit parameter refused every value from 2^63 up. Every integral type takes
// exactly its own range, from both ends, through the core and through the CLI's text.
TEST(Specialization, EveryIntegralTypeTakesExactlyItsRange) {
  struct Case {
    const char* type;
    std::string lo, hi, below, above;  // decimal text; below/above empty when no 64-bit value is out there
  };
  const Case cases[] = {
      {"signed char", "-128", "127", "-129", "128"},
      {"char", "-128", "127", "-129", "128"},
      {"unsigned char", "0", "255", "-1", "256"},
      {"int8_t", "-128", "127", "-129", "128"},
      {"uint8_t", "0", "255", "-1", "256"},
      {"short", "-32768", "32767", "-32769", "32768"},
      {"std::uint16_t", "0", "65535", "-1", "65536"},
      {"int", "-2147483648", "2147483647", "-2147483649", "2147483648"},
      {"unsigned", "0", "4294967295", "-1", "4294967296"},
      {"uint32_t", "0", "4294967295", "-1", "4294967296"},
      {"long", "-9223372036854775808", "9223372036854775807", "", "9223372036854775808"},
      {"long long", "-9223372036854775808", "9223372036854775807", "", "9223372036854775808"},
      {"int64_t", "-9223372036854775808", "9223372036854775807", "", "18446744073709551615"},
      {"unsigned long long", "0", "18446744073709551615", "-1", ""},
      {"uint64_t", "0", "18446744073709551615", "-9223372036854775808", ""},
      {"size_t", "0", "18446744073709551615", "-1", ""},
      {"std::size_t", "0", "18446744073709551615", "-1", ""},
  };
  for (const Case& c : cases) {
    const auto t =
        Template::from_string("template <" + std::string(c.type) + " N> __global__ void k(int* p) {}", "t.cu");
    const KernelDecl& decl = t->kernel("k");
    ASSERT_EQ(decl.template_params.at(0).kind, TemplateParam::Kind::Integral) << c.type;
    auto spec = [&](const std::string& text) {
      return Specialization(t, "k", {{"N", cli::parse_param_value(decl, "N", text)}}).name_expression();
    };
    for (const std::string& ok : {c.lo, c.hi}) EXPECT_NO_THROW(spec(ok)) << c.type << " " << ok;
    for (const std::string& bad : {c.below, c.above}) {
      if (bad.empty()) continue;
      const std::string m = message_of([&] { spec(bad); });
      EXPECT_NE(m.find("the value " + bad + " is out of its range [" + c.lo), std::string::npos) << c.type << ": " << m;
    }
  }
  // 2^64 and more do not fit any parameter.
  const auto t = Template::from_string("template <unsigned long long N> __global__ void k(int* p) {}", "t.cu");
  const std::string m = message_of([&] { cli::parse_param_value(t->kernel("k"), "N", "18446744073709551616"); });
  EXPECT_NE(m.find("18446744073709551616 is out of every integer parameter's range [-2^63, 2^64)"), std::string::npos)
      << m;
  // The largest value renders as an unsigned literal, describes and compares as itself.
  const TemplateArg max = TemplateArg::unsigned_integer(UINT64_MAX);
  EXPECT_EQ(Specialization(t, "k", {{"N", max}}).name_expression(), "k<18446744073709551615ull>");
  EXPECT_EQ(max.describe(), "18446744073709551615");
  EXPECT_FALSE(max == TemplateArg::integer(-1));
  EXPECT_TRUE(TemplateArg::unsigned_integer(5) == TemplateArg::integer(5));
}

// Issue 14 item 21: one resolver for skipped defaults, in the core. A default left out before a given
// parameter is its text as written, with the earlier parameters it names replaced by their values (the
// core inserted `N * 2` as is, which does not compile outside the template head; Python evaluated it,
// and could not for such defaults). A Default argument (what front ends pass for a parameter left out
// in an array in parameter order) is the same as leaving the parameter out.
TEST(Specialization, SkippedDefaultsNameEarlierParametersByValue) {
  const auto t = Template::from_string(
      "template <typename T, int N, int M = N * 2, typename U = T, int K = sizeof(U) + M, bool B = false>\n"
      "__global__ void k(T* x, U* y) {}\n",
      "defaults.cu");
  const Specialization s(
      t, "k",
      {{"T", TemplateArg::type(DType::Float16)}, {"N", TemplateArg::integer(4)}, {"B", TemplateArg::boolean(true)}});
  EXPECT_EQ(s.name_expression(), "k<__half, 4, (4)* 2, __half, sizeof ( __half ) + ((4)* 2), true>");
  ASSERT_EQ(s.args().size(), 3u);  // only what was given
  const Specialization with_default(t, "k",
                                    {{"T", TemplateArg::type(DType::Float16)},
                                     {"N", TemplateArg::integer(4)},
                                     {"M", TemplateArg::defaulted()},
                                     {"U", TemplateArg::defaulted()},
                                     {"K", TemplateArg::defaulted()},
                                     {"B", TemplateArg::boolean(true)}});
  EXPECT_EQ(with_default.name_expression(), s.name_expression());
  EXPECT_EQ(with_default.args().size(), 3u);
  // Trailing defaults stay out; a member named like a parameter is not replaced.
  const auto m =
      Template::from_string("template <int N, int M = traits::N + N> __global__ void k(int* p) {}\n", "member.cu");
  EXPECT_EQ(Specialization(m, "k", {{"N", TemplateArg::integer(3)}}).name_expression(), "k<3>");
  EXPECT_EQ(substitute_names("traits::N + N + a.N", {{"N", "(3)"}}), "traits::N + (3) + a . N");
  // A parameter without a default cannot be left to its default.
  EXPECT_THROW(Specialization(t, "k", {{"T", TemplateArg::type(DType::Float16)}, {"N", TemplateArg::defaulted()}}),
               ValueError);
}

// A bare define is NAME=1 (as nvcc -DNAME) in every front end: one parser, in the core.
TEST(Specialization, ABareDefineIsOne) {
  EXPECT_EQ(parse_define("FLAG"), std::make_pair(std::string("FLAG"), std::string("1")));
  EXPECT_EQ(parse_define("A=b=c"), std::make_pair(std::string("A"), std::string("b=c")));
  EXPECT_EQ(parse_define("E="), std::make_pair(std::string("E"), std::string("")));
  EXPECT_THROW(parse_define("=1"), ValueError);
  EXPECT_EQ(cli::parse_defines({"FLAG", "X=2"}), (std::map<std::string, std::string>{{"FLAG", "1"}, {"X", "2"}}));
}
