// CompileOptions::fast_compile (NVRTC's --Ofast-compile) and KJIT_LIBRARY_FAST_COMPILE: an option of the
// key, a binary of its own, checked values, left out for an NVRTC that does not know it, and off for kjit's
// own kernels unless the setting says otherwise (bench/fast_compile_ab.py measured what the levels cost).
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "kjit/compiler.hpp"
#include "kjit/engine.hpp"
#include "kjit/error.hpp"
#include "kjit/nvrtc_library.hpp"
#include "kjit/settings.hpp"
#include "settings_support.hpp"
#include "test_support.hpp"

using namespace kjit;
using kjit::testing::TempDir;

namespace {

using Args = std::vector<std::pair<std::string, TemplateArg>>;

bool has(const std::vector<std::string>& v, const std::string& s) {
  return std::find(v.begin(), v.end(), s) != v.end();
}

CompileOptions at(const std::string& level) {
  CompileOptions o;
  o.fast_compile = level;
  return o;
}

}  // namespace

TEST(FastCompile, IsAFlagOfTheKeyOnlyWhenOn) {
  EXPECT_EQ(CompileOptions().fast_compile, "off");
  for (const auto& f : CompileOptions().canonical()) EXPECT_EQ(f.find("Ofast-compile"), std::string::npos) << f;
  EXPECT_TRUE(has(at("mid").canonical(), "--Ofast-compile=mid"));
  EXPECT_TRUE(has(at("max").nvrtc_flags(Target::parse("sm_90")), "--Ofast-compile=max"));
  EXPECT_FALSE(at("mid") == at("min"));
  EXPECT_TRUE(at("mid") == at("mid"));

  const Args tv = {{"T", TemplateArg::type(DType::Float32)}, {"VEC", TemplateArg::integer(4)}};
  const auto t = Template::builtin("add_constant");
  const CompilePlan plan = Compiler::plan(Target::parse("sm_90"));
  TempDir dir;
  Engine engine(Settings::from_map({{"KJIT_CACHE_DIR", (dir / "cache").string()}}));
  std::vector<std::string> keys;
  for (const auto& level : CompileOptions::fast_compile_levels())
    keys.push_back(engine.key_for(Specialization(t, "add_constant", tv, at(level)), plan).hex());
  std::sort(keys.begin(), keys.end());
  EXPECT_EQ(std::unique(keys.begin(), keys.end()), keys.end()) << "two levels share a key";
}

TEST(FastCompile, AnUnknownLevelIsAClearError) {
  try {
    at("fast").validate();
    FAIL() << "fast_compile='fast' was accepted";
  } catch (const ValueError& e) {
    EXPECT_STREQ(e.what(), "compile option fast_compile='fast' is not valid: allowed off, min, mid, max");
  }
  for (const auto& level : CompileOptions::fast_compile_levels()) EXPECT_NO_THROW(at(level).validate());
}

// It changes the binary (which is why kjit's own kernels do not use it: bench/fast_compile_ab.py), and a
// compile at each level makes one.
TEST(FastCompile, EachLevelCompilesAndMakesABinaryOfItsOwn) {
  const auto t = Template::builtin("softmax");
  const Args args = {{"T", TemplateArg::type(DType::Float32)}, {"TPR", TemplateArg::integer(256)},
                     {"ROWS", TemplateArg::integer(1)},        {"VEC", TemplateArg::integer(4)},
                     {"ITEMS", TemplateArg::integer(4)},       {"D", TemplateArg::integer(4096)},
                     {"LOG", TemplateArg::boolean(false)}};
  const CompilePlan plan = Compiler::plan(Target::parse("sm_90"));
  const auto off = Compiler::compile(Specialization(t, "softmax_forward", args, at("off")), plan);
  const auto mid = Compiler::compile(Specialization(t, "softmax_forward", args, at("mid")), plan);
  ASSERT_FALSE(off.payload.empty());
  ASSERT_FALSE(mid.payload.empty());
  EXPECT_FALSE(off.payload == mid.payload);
  EXPECT_TRUE(has(mid.flags, "--Ofast-compile=mid"));
  EXPECT_FALSE(has(off.flags, "--Ofast-compile=off"));
}

TEST(FastCompile, IsLeftOutForAnNvrtcBefore12_8AndNoCacheIsAddedFrom12_9) {
  const std::vector<std::string> flags = {"--std=c++20", "--Ofast-compile=mid", "-arch=sm_90"};
  EXPECT_EQ(nvrtc_flags_for_version(12, 6, flags), (std::vector<std::string>{"--std=c++20", "-arch=sm_90"}));
  EXPECT_EQ(nvrtc_flags_for_version(12, 8, flags), flags);
  std::vector<std::string> with_no_cache = flags;
  with_no_cache.push_back("--no-cache");
  EXPECT_EQ(nvrtc_flags_for_version(12, 9, flags), with_no_cache);
  EXPECT_EQ(nvrtc_flags_for_version(13, 0, flags), with_no_cache);
}

TEST(FastCompile, TheLibrarysLevelIsTheSettingOffByDefault) {
  EXPECT_EQ(Settings::from_map({}).library_fast_compile, "off");
  EXPECT_EQ(Settings::from_map({{"KJIT_LIBRARY_FAST_COMPILE", "min"}}).library_fast_compile, "min");
  EXPECT_EQ(
      kjit::testing::settings_error({{"KJIT_LIBRARY_FAST_COMPILE", "2"}}),
      "KJIT_LIBRARY_FAST_COMPILE='2' is not valid: allowed off | min | mid | max. Unset it for the default (off).");
  // This process's setting (the test runner leaves it unset): the library compiles fully optimized.
  if (settings().library_fast_compile == "off") EXPECT_EQ(CompileOptions::library().fast_compile, "off");
  EXPECT_EQ(CompileOptions::library().fast_compile, settings().library_fast_compile);
  EXPECT_TRUE(CompileOptions::library().minimal);
}
