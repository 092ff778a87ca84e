// C++ standard headers under NVRTC, which ships none: kjit stands in for the ones device code reaches
// (<cmath>, <complex>, <sstream>, ... as files of kernel_templates/std/), reached only for a name that no
// folder of the template's, the user's or the CUDA toolkit's has, and hashed into the key like every header.
// thrust/complex.h of CUDA 13.0's CCCL includes <cmath>, <complex> and <sstream>: without the stand-ins NVRTC
// stops at "cannot open source file "cmath"".
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <string>

#include "kjit/cache/header_index.hpp"
#include "kjit/cache/sha256.hpp"
#include "kjit/compiler.hpp"
#include "kjit/engine.hpp"
#include "kjit/error.hpp"
#include "kjit/nvrtc_library.hpp"
#include "kjit/spec_record.hpp"
#include "kjit/template.hpp"
#include "header_index_support.hpp"
#include "test_support.hpp"

using namespace kjit;
using namespace kjit::testing;
namespace fs = std::filesystem;

namespace {

// A copy of kjit's templates folder, with or without its std/ folder.
fs::path copy_of_templates(const TempDir& dir, bool with_std) {
  const fs::path to = dir / "kernel_templates";
  fs::copy(kjit::testing::templates_dir(), to, fs::copy_options::recursive);
  if (!with_std) fs::remove_all(to / "std");
  return to;
}

const Header* header_named(const Template& t, const std::string& include_name) {
  for (const auto& h : t.headers())
    if (h.include_name == include_name) return &h;
  return nullptr;
}

Settings settings_for(const TempDir& dir) {
  return Settings::from_map({{"KJIT_CACHE_DIR", (dir / "cache").string()}, {"KJIT_CACHE_MODE", "readwrite"}});
}

bool have_nvrtc(std::string* why_not) {
  try {
    NvrtcLibrary::get();
    return true;
  } catch (const Error& e) {
    *why_not = e.what();
    return false;
  }
}

#define SKIP_WITHOUT_NVRTC()                                    \
  do {                                                          \
    std::string why;                                            \
    if (!have_nvrtc(&why)) GTEST_SKIP() << "no NVRTC: " << why; \
  } while (0)

// A kernel on thrust::complex: thrust/complex.h includes <cmath>, <complex> and <sstream>.
constexpr const char* kThrustComplex =
    "#include <thrust/complex.h>\n"
    "template <typename T>\n"
    "__global__ void k(const thrust::complex<T>* z, thrust::complex<T>* out, int n) {\n"
    "  const int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
    "  if (i < n) out[i] = thrust::exp(z[i]) * thrust::sqrt(z[i]) + thrust::log(z[i]) - thrust::pow(z[i], T(2));\n"
    "}\n";

// <cmath>'s functions in device code, on float and double, with integer and mixed arguments.
constexpr const char* kCmath =
    "#include <cmath>\n"
    "template <typename T>\n"
    "__global__ void k(const T* x, T* out, int n) {\n"
    "  const int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
    "  if (i >= n) return;\n"
    "  const T v = x[i];\n"
    "  out[i] = std::sqrt(std::abs(v)) + std::exp(v) + std::pow(v, 2.0) + std::atan2(v, T(1)) + std::fmax(v, 0.5) +\n"
    "           std::tanh(v) + std::erf(v) + std::fma(v, v, T(1)) + std::hypot(v, T(3)) + std::sqrt(i) +\n"
    "           T(std::isnan(v)) + std::fmod(v, T(2)) + T(std::lround(v)) + (v > 0 ? T(0) : -INFINITY);\n"
    "}\n";

Specialization spec_of(std::shared_ptr<const Template> t, DType type) {
  return Specialization(std::move(t), "k", {{"T", TemplateArg::type(type)}});
}

// Prepares `t` in float and in double for each of `archs`, in an engine on dir's cache: each one a compile.
void expect_compiles_in_float_and_double(const TempDir& dir, const std::shared_ptr<const Template>& t,
                                         std::initializer_list<const char*> archs) {
  Engine engine(settings_for(dir));
  for (const char* arch : archs)
    for (DType type : {DType::Float32, DType::Float64}) {
      SCOPED_TRACE(arch);
      Origin origin;
      engine.prepare(spec_of(t, type), Target::parse(arch), &origin);
      EXPECT_EQ(origin, Origin::Compiled);
    }
}

}  // namespace

TEST(StandardHeaders, AreHeadersOfTheTemplateWithTheirBytesAndSha256) {
  TempDir dir;
  UseIndex use(dir / "cache");
  auto t = Template::from_string("#include <cmath>\n#include <complex>\n#include <sstream>\n__global__ void k() {}\n",
                                 "std.cu");
  for (const char* name : {"cmath", "complex", "sstream", "iosfwd"}) {
    SCOPED_TRACE(name);
    const auto& unresolved = t->unresolved_includes();
    EXPECT_EQ(std::find(unresolved.begin(), unresolved.end(), name), unresolved.end());
    const Header* h = header_named(*t->with_bytes(), name);
    ASSERT_NE(h, nullptr);
    const fs::path file = builtin_templates_dir() / "std" / name;
    EXPECT_EQ(h->path, file);
    EXPECT_FALSE(h->from_cuda) << "kjit's file, recorded in a manifest like kjit's other headers";
    const std::string bytes = kjit::testing::read_file(file);
    EXPECT_EQ(h->sha256, cache::to_hex(cache::Sha256::of(bytes)));
    EXPECT_EQ(h->bytes, bytes);
  }
  // <complex> is libcu++'s std::complex: its header comes with it.
  EXPECT_NE(header_named(*t, "cuda/std/complex"), nullptr);
}

TEST(StandardHeaders, EditingAStandInChangesTheDigest) {
  TempDir dir;
  UseIndex use(dir / "cache");
  KjitTemplatesIn templates(copy_of_templates(dir, true));
  const std::string source = "#include <cmath>\n__global__ void k() {}\n";
  const std::string before = Template::from_string(source, "s.cu")->digest();
  EXPECT_EQ(Template::from_string(source, "s.cu")->digest(), before);
  write_file(builtin_templates_dir() / "std" / "cmath",
             kjit::testing::read_file(builtin_templates_dir() / "std" / "cmath") + "// edited\n");
  EXPECT_NE(Template::from_string(source, "s.cu")->digest(), before);
}

TEST(StandardHeaders, AHeaderOfTheSameNameInTheUsersFoldersWins) {
  TempDir dir;
  UseIndex use(dir / "cache");
  write_file(dir / "inc" / "cmath", "#pragma once\n// the user's own cmath\n");
  auto t =
      Template::from_string("#include <cmath>\n#include <complex>\n__global__ void k() {}\n", "u.cu", {dir / "inc"});
  const Header* cmath = header_named(*t, "cmath");
  ASSERT_NE(cmath, nullptr);
  EXPECT_EQ(cmath->bytes, "#pragma once\n// the user's own cmath\n");
  // Also for the <cmath> that kjit's own <complex> includes: one header of that name.
  EXPECT_EQ(std::count_if(t->headers().begin(), t->headers().end(),
                          [](const Header& h) { return h.include_name == "cmath"; }),
            1);
  // The template's own folder too.
  write_file(dir / "src" / "cmath", "#pragma once\n// beside the template\n");
  write_file(dir / "src" / "k.cu", "#include \"cmath\"\n__global__ void k() {}\n");
  EXPECT_EQ(header_named(*Template::from_file(dir / "src" / "k.cu"), "cmath")->bytes,
            "#pragma once\n// beside the template\n");
}

TEST(StandardHeaders, ANameWithoutAStandInStaysUnresolved) {
  TempDir dir;
  UseIndex use(dir / "cache");
  auto t = Template::from_string(
      "#include <vector>\n#include <not_a_header.h>\n#include <cmath>\n__global__ void k() {}\n", "v.cu");
  EXPECT_EQ(t->unresolved_includes(), (std::vector<std::string>{"vector", "not_a_header.h"}));
}

// The folder is kjit's: an include name that climbs out of it reaches nothing there (kernel_templates/std/..
// is kjit's templates folder, which never serves a climbing name either).
TEST(StandardHeaders, ANameCannotClimbOutOfTheirFolder) {
  TempDir dir;
  UseIndex use(dir / "cache");
  auto t = Template::from_string("#include <../add_constant.cuh>\n__global__ void k() {}\n", "climb.cu");
  EXPECT_TRUE(t->headers().empty()) << t->headers().front().path;
  EXPECT_EQ(t->unresolved_includes(), std::vector<std::string>{"../add_constant.cuh"});
}

TEST(StandardHeaders, AreNotBuiltinTemplates) {
  TempDir with, without;
  std::vector<std::string> names;
  {
    KjitTemplatesIn templates(copy_of_templates(with, true));
    names = Template::builtin_names();
    EXPECT_THROW(Template::builtin("cmath"), ValueError);
  }
  KjitTemplatesIn templates(copy_of_templates(without, false));
  EXPECT_EQ(names, Template::builtin_names());
  EXPECT_NE(std::find(names.begin(), names.end(), "add_constant"), names.end());
}

TEST(StandardHeaders, AThrustComplexKernelCompilesForSm80AndSm90) {
  SKIP_WITHOUT_NVRTC();
  TempDir dir;
  UseIndex use(dir / "cache");
  auto t = Template::from_string(kThrustComplex, "thrust_complex.cu");
  expect_compiles_in_float_and_double(dir, t, {"sm_80", "sm_90"});
  for (const char* name : {"cmath", "complex", "sstream"}) EXPECT_NE(header_named(*t->current(), name), nullptr);
}

TEST(StandardHeaders, WithoutThemAThrustComplexKernelStopsAtCmath) {
  SKIP_WITHOUT_NVRTC();
  TempDir dir;
  UseIndex use(dir / "cache");
  KjitTemplatesIn templates(copy_of_templates(dir, false));
  Engine engine(settings_for(dir));
  auto t = Template::from_string(kThrustComplex, "thrust_complex.cu");
  EXPECT_NE(std::find(t->unresolved_includes().begin(), t->unresolved_includes().end(), "cmath"),
            t->unresolved_includes().end());
  try {
    engine.prepare(spec_of(t, DType::Float32), Target::parse("sm_90"));
    FAIL() << "compiled without the stand-ins";
  } catch (const CompileError& e) {
    EXPECT_NE(std::string(e.what()).find("source file \"cmath\""), std::string::npos) << e.what();
  }
}

TEST(StandardHeaders, CmathDeviceFunctionsCompileForFloatAndDouble) {
  SKIP_WITHOUT_NVRTC();
  TempDir dir;
  UseIndex use(dir / "cache");
  expect_compiles_in_float_and_double(dir, Template::from_string(kCmath, "cmath_kernel.cu"), {"sm_90"});
}

// A template rebuilt from its manifest record (`kjit warm`) may use kjit's templates folder: it keys the same
// and compiles, in the child process that can open no file.
TEST(StandardHeaders, ATemplateRebuiltFromItsRecordKeysTheSameAndCompiles) {
  SKIP_WITHOUT_NVRTC();
  TempDir dir;
  UseIndex use(dir / "cache");
  auto t = Template::from_string(kThrustComplex, "thrust_complex.cu");
  const cache::ManifestRecord record = to_record(spec_of(t, DType::Float32));
  ASSERT_EQ(record.sources->headers().count("cmath"), 1u) << "recorded with the template, as kjit's headers are";
  std::string stale;
  auto rebuilt = template_of(record, &stale);
  EXPECT_EQ(stale, "");
  ASSERT_TRUE(rebuilt->confined());
  EXPECT_EQ(rebuilt->digest(), t->digest());
  // And without the recorded bytes of the stand-ins: found in kjit's templates folder.
  auto bare = Template::from_memory(kThrustComplex, "thrust_complex.cu", {});
  EXPECT_EQ(bare->digest(), t->digest());
  Engine engine(settings_for(dir));
  Origin origin;
  engine.prepare(spec_of(rebuilt, DType::Float32), Target::parse("sm_90"), &origin);
  EXPECT_EQ(origin, Origin::Compiled);
}
