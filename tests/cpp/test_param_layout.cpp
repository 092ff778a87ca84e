// ParamLayout: parameter types with template arguments substituted, classification, and the packer
// (exact bytes, range and kind checks, host half / bfloat16 rounding).
#include <gtest/gtest.h>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include "kjit/error.hpp"
#include "kjit/kernel_decl.hpp"
#include "kjit/param_layout.hpp"

using namespace kjit;

namespace {

KernelDecl decl_of(const std::string& source) {
  auto ks = parse_kernel_decls(source);
  EXPECT_EQ(ks.size(), 1u);
  return ks.at(0);
}

const char* kAddConstant = R"(
  template <typename T, int VEC>
  __global__ void add_constant(const T* __restrict__ x, T* __restrict__ y, T c, long long n) {}
)";

ParamLayout add_constant_layout(DType t) {
  return ParamLayout(decl_of(kAddConstant), {{"T", TemplateArg::type(t)}, {"VEC", TemplateArg::integer(4)}},
                     std::string("add_constant<") + dtype_cpp(t) + ", 4>");
}

template <typename T>
T read(const ArgSlot& s) {
  T v;
  std::memcpy(&v, s.bytes, sizeof v);
  return v;
}

template <typename E, typename F>
std::string message_of(F&& f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  } catch (const std::exception& e) {
    return std::string("wrong exception type: ") + e.what();
  }
  return "no exception";
}

std::uint16_t half_bits(__half h) {
  std::uint16_t b;
  std::memcpy(&b, &h, sizeof b);
  return b;
}
std::uint16_t bf16_bits(__nv_bfloat16 h) {
  std::uint16_t b;
  std::memcpy(&b, &h, sizeof b);
  return b;
}

}  // namespace

TEST(ParamLayout, SubstitutesTypeParameters) {
  ParamLayout l = add_constant_layout(DType::Float16);
  ASSERT_EQ(l.size(), 4u);
  EXPECT_EQ(l[0].name, "x");
  EXPECT_EQ(l[0].declared, "const T* __restrict__");
  EXPECT_EQ(l[0].type, "const __half* __restrict__");
  EXPECT_EQ(l[0].kind, LaunchParam::Kind::Pointer);
  ASSERT_TRUE(l[0].pointee);
  EXPECT_EQ(*l[0].pointee, DType::Float16);
  EXPECT_EQ(l[0].size, 8u);
  EXPECT_EQ(l[2].kind, LaunchParam::Kind::Scalar);
  EXPECT_EQ(l[2].scalar, DType::Float16);
  EXPECT_EQ(l[2].size, 2u);
  EXPECT_EQ(l[3].scalar, DType::Int64);
  EXPECT_EQ(l.signature(), "(x, y, c, n)");

  ParamLayout b = add_constant_layout(DType::BFloat16);
  EXPECT_EQ(b[2].type, "__nv_bfloat16");
  EXPECT_EQ(b[2].scalar, DType::BFloat16);
  ParamLayout u = add_constant_layout(DType::UInt64);
  EXPECT_EQ(u[2].scalar, DType::UInt64);
  ParamLayout i8 = add_constant_layout(DType::Int8);
  EXPECT_EQ(i8[2].scalar, DType::Int8);
  EXPECT_EQ(*i8[1].pointee, DType::Int8);
}

TEST(ParamLayout, PositionalArgumentsAndDefaults) {
  KernelDecl d = decl_of(R"(
    template <typename T, typename U = T, typename A = float>
    __global__ void k(T a, U b, A c, const unsigned char* rgb, void* raw, float2 f, T** pp) {}
  )");
  TemplateArg args[] = {TemplateArg::type(DType::Int32)};
  ParamLayout l(d, args, 1, "k<int>");
  EXPECT_EQ(l[0].scalar, DType::Int32);
  EXPECT_EQ(l[1].type, "int");  // U defaults to T
  EXPECT_EQ(l[1].scalar, DType::Int32);
  EXPECT_EQ(l[2].scalar, DType::Float32);
  EXPECT_EQ(l[3].kind, LaunchParam::Kind::Pointer);
  EXPECT_EQ(*l[3].pointee, DType::UInt8);
  EXPECT_EQ(l[4].kind, LaunchParam::Kind::Pointer);
  EXPECT_FALSE(l[4].pointee);
  EXPECT_EQ(l[5].kind, LaunchParam::Kind::Unsupported);
  EXPECT_EQ(l[5].size, 0u);
  EXPECT_EQ(l[6].kind, LaunchParam::Kind::Pointer);
  EXPECT_FALSE(l[6].pointee);
}

TEST(ParamLayout, ClassifiesScalarSpellings) {
  struct Case {
    const char* type;
    DType want;
  } cases[] = {
      {"int", DType::Int32},
      {"const int", DType::Int32},
      {"unsigned", DType::UInt32},
      {"unsigned int", DType::UInt32},
      {"long", DType::Int64},
      {"long long", DType::Int64},
      {"long long int", DType::Int64},
      {"unsigned long long", DType::UInt64},
      {"long unsigned long", DType::UInt64},
      {"short", DType::Int16},
      {"unsigned short int", DType::UInt16},
      {"char", DType::Int8},
      {"signed char", DType::Int8},
      {"unsigned char", DType::UInt8},
      {"std::int64_t", DType::Int64},
      {"::uint32_t", DType::UInt32},
      {"size_t", DType::UInt64},
      {"std::size_t", DType::UInt64},
      {"bool", DType::Bool},
      {"float", DType::Float32},
      {"const double", DType::Float64},
      {"__half", DType::Float16},
      {"half", DType::Float16},
      {"__nv_bfloat16", DType::BFloat16},
      {"nv_bfloat16", DType::BFloat16},
  };
  for (const auto& c : cases) {
    LaunchParam p = classify_param_type(c.type);
    EXPECT_EQ(p.kind, LaunchParam::Kind::Scalar) << c.type;
    EXPECT_EQ(p.scalar, c.want) << c.type;
    EXPECT_EQ(p.size, dtype_size(c.want)) << c.type;
  }
  for (const char* bad : {"long double", "float4", "Params", "const Params&", "Vec<float, 4>", "int int",
                          "unsigned float", "short long"}) {
    EXPECT_EQ(classify_param_type(bad).kind, LaunchParam::Kind::Unsupported) << bad;
  }
  EXPECT_EQ(classify_param_type("float x[]").kind, LaunchParam::Kind::Pointer);
  EXPECT_EQ(*classify_param_type("const float* __restrict__").pointee, DType::Float32);
  EXPECT_EQ(classify_param_type("Vec<float, 4>*").kind, LaunchParam::Kind::Pointer);
  EXPECT_FALSE(classify_param_type("Vec<float, 4>*").pointee);
}

TEST(ParamLayout, ArgumentCountMessage) {
  ParamLayout l = add_constant_layout(DType::Float32);
  EXPECT_NO_THROW(l.check_count(4));
  EXPECT_EQ(message_of<TypeError>([&] { l.check_count(3); }),
            "kernel add_constant<float, 4> takes 4 arguments (x, y, c, n), got 3");
}

TEST(ParamLayout, PacksExactBytes) {
  ParamLayout f32 = add_constant_layout(DType::Float32);
  ArgSlot s;
  f32.pack_float(2, 1.5, s);
  EXPECT_EQ(read<float>(s), 1.5f);
  f32.pack_int(2, 3, s);  // an int for a float parameter converts
  EXPECT_EQ(read<float>(s), 3.0f);
  f32.pack_int(3, -5, s);
  EXPECT_EQ(read<long long>(s), -5);
  f32.pack_uint(3, 7, s);
  EXPECT_EQ(read<long long>(s), 7);
  int dummy = 0;
  f32.pack_pointer(0, &dummy, s);
  EXPECT_EQ(read<void*>(s), static_cast<void*>(&dummy));
  f32.pack_pointer(1, nullptr, s);
  EXPECT_EQ(read<void*>(s), nullptr);

  ParamLayout f64 = add_constant_layout(DType::Float64);
  f64.pack_float(2, 0.1, s);
  EXPECT_EQ(read<double>(s), 0.1);
  f64.pack_uint(2, 18446744073709551615ull, s);
  EXPECT_EQ(read<double>(s), 18446744073709551615.0);

  ParamLayout f16 = add_constant_layout(DType::Float16);
  f16.pack_float(2, 1.0, s);
  EXPECT_EQ(read<std::uint16_t>(s), 0x3C00);
  ParamLayout bf = add_constant_layout(DType::BFloat16);
  bf.pack_float(2, -2.0, s);
  EXPECT_EQ(read<std::uint16_t>(s), 0xC000);

  ParamLayout u8 = add_constant_layout(DType::UInt8);
  u8.pack_int(2, 255, s);
  EXPECT_EQ(read<std::uint8_t>(s), 255);
  ParamLayout i16 = add_constant_layout(DType::Int16);
  i16.pack_int(2, -32768, s);
  EXPECT_EQ(read<std::int16_t>(s), -32768);
  ParamLayout u64 = add_constant_layout(DType::UInt64);
  u64.pack_uint(2, 18446744073709551615ull, s);
  EXPECT_EQ(read<std::uint64_t>(s), 18446744073709551615ull);
  ParamLayout b = add_constant_layout(DType::Bool);
  b.pack_bool(2, true, s);
  EXPECT_EQ(read<unsigned char>(s), 1);
  b.pack_bool(2, false, s);
  EXPECT_EQ(read<unsigned char>(s), 0);
}

TEST(ParamLayout, RejectsWrongKinds) {
  ParamLayout l = add_constant_layout(DType::Float32);
  ArgSlot s;
  EXPECT_EQ(message_of<TypeError>([&] { l.pack_float(3, 2.5, s); }),
            "argument 'n' of add_constant<float, 4> is an int64 scalar (long long): pass an int, got the float 2.5");
  EXPECT_EQ(message_of<TypeError>([&] { l.pack_float(3, 2.0, s); }),
            "argument 'n' of add_constant<float, 4> is an int64 scalar (long long): pass an int, got the float 2.0");
  EXPECT_EQ(message_of<TypeError>([&] { l.pack_int(0, 5, s); }),
            "argument 'x' of add_constant<float, 4> is a pointer (const float* __restrict__): pass a CUDA tensor "
            "or None, got the int 5");
  EXPECT_EQ(message_of<TypeError>([&] { l.pack_pointer(2, &s, s); }),
            "argument 'c' of add_constant<float, 4> is a float32 scalar (float): pass a float or an int, got a "
            "pointer");
  EXPECT_EQ(message_of<TypeError>([&] { l.reject(2, "a tensor"); }),
            "argument 'c' of add_constant<float, 4> is a float32 scalar (float): pass a float or an int, got a "
            "tensor");
  EXPECT_EQ(message_of<TypeError>([&] { l.pack_bool(3, true, s); }),
            "argument 'n' of add_constant<float, 4> is an int64 scalar (long long): pass an int, got the bool True");
  ParamLayout b = add_constant_layout(DType::Bool);
  EXPECT_EQ(message_of<TypeError>([&] { b.pack_int(2, 1, s); }),
            "argument 'c' of add_constant<bool, 4> is a bool scalar (bool): pass a bool, got the int 1");

  KernelDecl d = decl_of("struct P { int a; }; __global__ void k(P p) {}");
  ParamLayout u(d, std::vector<std::pair<std::string, TemplateArg>>{}, "k");
  EXPECT_EQ(u[0].kind, LaunchParam::Kind::Unsupported);
  std::string m = message_of<TypeError>([&] { u.pack_int(0, 1, s); });
  EXPECT_NE(m.find("argument 'p' of k has type 'P', which a launch cannot pass"), std::string::npos) << m;
}

TEST(ParamLayout, RejectsOutOfRange) {
  ArgSlot s;
  ParamLayout i32 = add_constant_layout(DType::Int32);
  EXPECT_EQ(message_of<ValueError>([&] { i32.pack_int(2, 4294967296ll, s); }),
            "argument 'c' of add_constant<int, 4> is an int32 scalar (int): the value 4294967296 is out of its "
            "range [-2147483648, 2147483647]");
  EXPECT_NO_THROW(i32.pack_int(2, -2147483648ll, s));
  EXPECT_THROW(i32.pack_int(2, -2147483649ll, s), ValueError);
  ParamLayout u8 = add_constant_layout(DType::UInt8);
  EXPECT_EQ(message_of<ValueError>([&] { u8.pack_int(2, -1, s); }),
            "argument 'c' of add_constant<unsigned char, 4> is a uint8 scalar (unsigned char): the value -1 is "
            "out of its range [0, 255]");
  EXPECT_THROW(u8.pack_int(2, 256, s), ValueError);
  ParamLayout i64 = add_constant_layout(DType::Int64);
  EXPECT_THROW(i64.pack_uint(2, 9223372036854775808ull, s), ValueError);
  EXPECT_EQ(message_of<ValueError>([&] { i64.reject_range(2, "2**70"); }),
            "argument 'c' of add_constant<long long, 4> is an int64 scalar (long long): the value 2**70 is out of "
            "its range [-9223372036854775808, 9223372036854775807]");

  ParamLayout f16 = add_constant_layout(DType::Float16);
  EXPECT_EQ(message_of<ValueError>([&] { f16.pack_float(2, 1e5, s); }),
            "argument 'c' of add_constant<__half, 4> is a float16 scalar (__half): the value 100000.0 overflows it "
            "(largest finite float16: 65504); pass a smaller value or declare the parameter with a wider type");
  EXPECT_THROW(f16.pack_int(2, 70000, s), ValueError);
  EXPECT_NO_THROW(f16.pack_float(2, 65519.0, s));  // rounds down to 65504
  EXPECT_EQ(read<std::uint16_t>(s), 0x7BFF);
  EXPECT_THROW(f16.pack_float(2, 65520.0, s), ValueError);  // rounds to infinity
  EXPECT_NO_THROW(f16.pack_float(2, std::numeric_limits<double>::infinity(), s));
  EXPECT_EQ(read<std::uint16_t>(s), 0x7C00);
  ParamLayout f32 = add_constant_layout(DType::Float32);
  EXPECT_THROW(f32.pack_float(2, 1e300, s), ValueError);
  EXPECT_NO_THROW(f32.pack_float(2, -std::numeric_limits<double>::infinity(), s));
  EXPECT_EQ(read<float>(s), -std::numeric_limits<float>::infinity());
  f32.pack_float(2, std::nan(""), s);
  EXPECT_TRUE(std::isnan(read<float>(s)));
}

TEST(ParamLayout, CheckSizes) {
  ParamLayout l = add_constant_layout(DType::Float32);
  EXPECT_NO_THROW(l.check_sizes({8, 8, 4, 8}));
  EXPECT_EQ(message_of<LaunchError>([&] { l.check_sizes({8, 8, 8, 8}); }),
            "parameter 'c' of kernel add_constant<float, 4> is read as a float32 scalar (float), 4 bytes, but the "
            "compiled kernel takes 8 bytes there; the declaration 'T' is not what NVRTC compiled. Write the "
            "parameter type without macros or typedefs.");
  EXPECT_THROW(l.check_sizes({8, 8, 4}), LaunchError);
}

TEST(ParamLayout, ArgBufferPointsAtSlots) {
  ArgBuffer small(3);
  for (std::size_t i = 0; i < 3; ++i) EXPECT_EQ(small.pointers()[i], &small.slot(i));
  ArgBuffer big(40);
  for (std::size_t i = 0; i < 40; ++i) EXPECT_EQ(big.pointers()[i], &big.slot(i));
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(&big.slot(1)) % 8, 0u);
}

TEST(HostFloatConversion, HalfKnownValues) {
  EXPECT_EQ(double_to_half_bits(0.0), 0x0000);
  EXPECT_EQ(double_to_half_bits(-0.0), 0x8000);
  EXPECT_EQ(double_to_half_bits(1.0), 0x3C00);
  EXPECT_EQ(double_to_half_bits(-2.0), 0xC000);
  EXPECT_EQ(double_to_half_bits(0.1), 0x2E66);
  EXPECT_EQ(double_to_half_bits(65504.0), 0x7BFF);
  EXPECT_EQ(double_to_half_bits(65520.0), 0x7C00);
  EXPECT_EQ(double_to_half_bits(1e10), 0x7C00);
  EXPECT_EQ(double_to_half_bits(std::ldexp(1.0, -24)), 0x0001);  // smallest subnormal
  EXPECT_EQ(double_to_half_bits(std::ldexp(1.0, -25)), 0x0000);  // tie -> even (zero)
  EXPECT_EQ(double_to_half_bits(std::ldexp(1.5, -25)), 0x0001);
  EXPECT_EQ(double_to_half_bits(std::ldexp(3.0, -25)), 0x0002);                               // tie 1.5 ulp -> even
  EXPECT_EQ(double_to_half_bits(std::ldexp(1.0, -14)), 0x0400);                               // smallest normal
  EXPECT_EQ(double_to_half_bits(std::ldexp(1.0, -14) - std::ldexp(1.0, -26)), 0x0400);        // rounds up into normal
  EXPECT_EQ(double_to_half_bits(1.0 + std::ldexp(1.0, -11)), 0x3C00);                         // tie -> even
  EXPECT_EQ(double_to_half_bits(1.0 + 3 * std::ldexp(1.0, -11)), 0x3C02);                     // tie -> even (up)
  EXPECT_EQ(double_to_half_bits(1.0 + std::ldexp(1.0, -11) + std::ldexp(1.0, -40)), 0x3C01);  // above the tie
  EXPECT_EQ(double_to_half_bits(std::ldexp(1.0, -1074)), 0x0000);                             // double subnormal
  EXPECT_EQ(double_to_half_bits(std::numeric_limits<double>::infinity()), 0x7C00);
  EXPECT_EQ(double_to_half_bits(-std::numeric_limits<double>::infinity()), 0xFC00);
  std::uint16_t nan = double_to_half_bits(std::nan(""));
  EXPECT_EQ(nan & 0x7C00, 0x7C00);
  EXPECT_NE(nan & 0x03FF, 0);
  EXPECT_EQ(double_to_half_bits(-std::nan("")) & 0x8000, 0x8000);
}

TEST(HostFloatConversion, BFloat16AndFloatKnownValues) {
  EXPECT_EQ(double_to_bfloat16_bits(1.0), 0x3F80);
  EXPECT_EQ(double_to_bfloat16_bits(3.140625), 0x4049);
  EXPECT_EQ(double_to_bfloat16_bits(M_PI), 0x4049);
  EXPECT_EQ(double_to_bfloat16_bits(3.3895313892515355e38), 0x7F7F);
  EXPECT_EQ(double_to_bfloat16_bits(3.4e38), 0x7F80);
  EXPECT_EQ(double_to_bfloat16_bits(1.0 + std::ldexp(1.0, -8)), 0x3F80);  // tie -> even
  EXPECT_EQ(double_to_bfloat16_bits(1.0 + std::ldexp(1.0, -8) + std::ldexp(1.0, -30)), 0x3F81);
  EXPECT_EQ(double_to_bfloat16_bits(std::ldexp(1.0, -133)), 0x0001);
  std::uint16_t nan = double_to_bfloat16_bits(std::nan(""));
  EXPECT_EQ(nan & 0x7F80, 0x7F80);
  EXPECT_NE(nan & 0x007F, 0);

  // The double rounding trap: just above a bfloat16 tie, but rounding to float first lands on the tie.
  const double above_tie = 1.0 + std::ldexp(1.0, -8) + std::ldexp(1.0, -40);
  EXPECT_EQ(static_cast<double>(static_cast<float>(above_tie)), 1.0 + std::ldexp(1.0, -8));
  EXPECT_EQ(double_to_bfloat16_bits(above_tie), 0x3F81);

  for (double v : {0.0, 1.0, -1.5, 0.1, 1e-30, 3.4028234663852886e38, 1e-45, 1.17549435e-38}) {
    float f = static_cast<float>(v);
    std::uint32_t want;
    std::memcpy(&want, &f, sizeof want);
    EXPECT_EQ(double_to_float_bits(v), want) << v;
  }
  EXPECT_EQ(double_to_float_bits(1e39), 0x7F800000u);
}

TEST(HostFloatConversion, MatchesCudaHostConversions) {
  std::mt19937_64 rng(42);
  std::uniform_int_distribution<int> exp_dist(-40, 20);
  std::uniform_real_distribution<double> mant(1.0, 2.0);
  for (int i = 0; i < 200000; ++i) {
    double v = std::ldexp(mant(rng), exp_dist(rng)) * ((i & 1) ? -1 : 1);
    ASSERT_EQ(double_to_half_bits(v), half_bits(__double2half(v))) << v;
  }
  std::uniform_int_distribution<int> exp_dist2(-140, 130);
  for (int i = 0; i < 200000; ++i) {
    double v = std::ldexp(mant(rng), exp_dist2(rng)) * ((i & 1) ? -1 : 1);
    std::uint16_t want = bf16_bits(__double2bfloat16(v));
    // CUDA saturates nothing here: both give infinity on overflow.
    ASSERT_EQ(double_to_bfloat16_bits(v), want) << v;
  }
  // Exact ties and their neighbours (ulp-level cases that random values rarely hit).
  for (int k = 0; k < 4096; ++k) {
    double tie = 1.0 + std::ldexp(2.0 * k + 1, -11);  // halfway between two halves in [1, 2)... [1, 5)
    for (double v : {tie, std::nextafter(tie, 0.0), std::nextafter(tie, 10.0)})
      ASSERT_EQ(double_to_half_bits(v), half_bits(__double2half(v))) << v;
  }
}
