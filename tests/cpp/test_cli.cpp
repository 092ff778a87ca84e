// The `kjit` command line: kjit::cli::run in-process (each test with its own cache directory), and
// the built binary through popen.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <sys/wait.h>

#include <algorithm>
#include <cstdio>
#include <sstream>
#include <string>
#include <vector>

#include "cli.hpp"
#include "entry_differences.hpp"
#include "format.hpp"
#include "kjit/cuda_toolkit.hpp"
#include "kjit/dtype.hpp"
#include "kjit/driver_library.hpp"
#include "kjit/settings.hpp"
#include "cli_run.hpp"
#include "test_support.hpp"

namespace {

namespace fs = std::filesystem;
using kjit::testing::ScopedEnv;
using kjit::testing::TempDir;
using nlohmann::json;

using Result = kjit::testing::CliRun;

std::size_t count_lines_with(const std::string& text, const std::string& needle) {
  std::istringstream is(text);
  std::string line;
  std::size_t n = 0;
  while (std::getline(is, line)) n += line.find(needle) != std::string::npos;
  return n;
}

bool starts_with(const std::string& text, const std::string& prefix) { return text.rfind(prefix, 0) == 0; }

// Whether `r` ended with exit code 1 and said exactly `err` on stderr.
::testing::AssertionResult failed_with(const Result& r, const std::string& err) {
  if (r.code == 1 && r.err == err) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "exit code " << r.code << " (expected 1), stderr:\n"
                                       << r.err << "\nexpected stderr:\n"
                                       << err;
}

// Whether `r` ended with exit code `code` and its stderr starts with `start`.
::testing::AssertionResult failed_starting(const Result& r, int code, const std::string& start) {
  if (r.code == code && starts_with(r.err, start)) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "exit code " << r.code << " (expected " << code << "), stderr:\n"
                                       << r.err << "\nexpected it to start with:\n"
                                       << start;
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream is(text);
  std::string line;
  while (std::getline(is, line)) out.push_back(line);
  return out;
}

class CliTest : public ::testing::Test {
 protected:
  // Runs `kjit --cache-dir <this test's dir> args...`.
  Result kjit(std::vector<std::string> args) {
    args.insert(args.begin(), {"--cache-dir", cache_dir().string()});
    return run_raw(args);
  }
  static Result run_raw(const std::vector<std::string>& args) { return kjit::testing::cli(args); }
  fs::path cache_dir() const { return dir_ / "cache"; }

  // `kjit compile add_constant --kernel add_constant`, a --param for each of `params`, --arch `arch`, then `more`.
  Result compile_add(const std::vector<std::string>& params, const std::string& arch,
                     const std::vector<std::string>& more = {}) {
    std::vector<std::string> args = {"compile", "add_constant", "--kernel", "add_constant"};
    for (const auto& p : params) args.insert(args.end(), {"--param", p});
    args.insert(args.end(), {"--arch", arch});
    args.insert(args.end(), more.begin(), more.end());
    return kjit(args);
  }

  // compile add_constant (T, VEC) for `archs` with --json; returns the parsed output.
  json compile_add_constant(const std::string& archs, const std::string& dtype = "float32",
                            const std::string& vec = "4") {
    Result r = compile_add({"T=" + dtype, "VEC=" + vec}, archs, {"--json"});
    EXPECT_EQ(r.code, 0) << r.err;
    return json::parse(r.out);
  }

  TempDir dir_{"kjit-cli"};
  // The suite controls the cache through --cache-dir; nothing from the caller's environment leaks in.
  ScopedEnv mode_{"KJIT_CACHE_MODE", std::nullopt};
  ScopedEnv layers_{"KJIT_CACHE_PATH", std::nullopt};
  ScopedEnv max_bytes_{"KJIT_CACHE_MAX_BYTES", std::nullopt};
};

// ---- info ---------------------------------------------------------------------------------------

TEST_F(CliTest, InfoNamesNvrtcCacheModeAndEverySetting) {
  Result r = kjit({"info"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(starts_with(r.out, "kjit " KJIT_VERSION "\n")) << r.out;
  EXPECT_NE(r.out.find("NVRTC"), std::string::npos);
  EXPECT_NE(r.out.find("libnvrtc"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("loaded:        version "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("CUDA headers:"), std::string::npos);
  EXPECT_NE(r.out.find("dir:               " + cache_dir().string() + " (from --cache-dir)"), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("mode:              readwrite\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("  KJIT_CACHE_MODE                (unset)\n"), std::string::npos) << r.out;
  for (const auto& s : kjit::setting_registry())
    EXPECT_NE(r.out.find(std::string("  ") + s.name + " "), std::string::npos) << s.name;
}

TEST_F(CliTest, InfoJsonParsesAndMatchesTheText) {
  ScopedEnv verbose("KJIT_VERBOSE", "0");
  Result r = kjit({"info", "--json"});
  ASSERT_EQ(r.code, 0) << r.err;
  json j = json::parse(r.out);
  EXPECT_EQ(j["kjit_version"], KJIT_VERSION);
  EXPECT_TRUE(j["nvrtc"]["found"].get<bool>());
  EXPECT_TRUE(j["nvrtc"]["loaded"].get<bool>());
  EXPECT_FALSE(j["nvrtc"]["supported_archs"].empty());
  EXPECT_EQ(j["cache"]["dir"], cache_dir().string());
  EXPECT_EQ(j["cache"]["dir_source"], "--cache-dir");
  EXPECT_EQ(j["cache"]["mode"], "readwrite");
  EXPECT_TRUE(j["cache"]["writable"].get<bool>());
  EXPECT_TRUE(j["cache"]["max_bytes"].is_null());
  ASSERT_EQ(j["settings"].size(), kjit::setting_registry().size());
  for (const auto& s : kjit::setting_registry()) EXPECT_TRUE(j["settings"].contains(s.name)) << s.name;
  EXPECT_EQ(j["settings"]["KJIT_VERBOSE"]["value"], "0");
  EXPECT_TRUE(j["settings"]["KJIT_CACHE_MODE"]["value"].is_null());
}

TEST_F(CliTest, InfoWithoutGpuSaysWhy) {
  std::string why;
  if (kjit::DriverLibrary::available(&why)) GTEST_SKIP() << "a CUDA device is present";
  Result r = kjit({"info"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("  driver:  none: "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("  GPUs:    none"), std::string::npos) << r.out;
  json j = json::parse(kjit({"info", "--json"}).out);
  EXPECT_TRUE(j["gpus"]["devices"].empty());
  EXPECT_FALSE(j["gpus"]["error"].get<std::string>().empty());
}

TEST_F(CliTest, InfoInStrictModeDoesNotLoadNvrtc) {
  ScopedEnv strict("KJIT_CACHE_MODE", "strict");
  Result r = kjit({"info"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("  loaded:        not loaded (strict mode)\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("mode:              strict\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("  KJIT_CACHE_MODE                strict\n"), std::string::npos) << r.out;
  json j = json::parse(kjit({"info", "--json"}).out);
  EXPECT_FALSE(j["nvrtc"]["loaded"].get<bool>());
  EXPECT_EQ(j["nvrtc"]["not_loaded_reason"], "strict mode");
}

// The value of the `  <label>:   <value>` line of `kjit info` ("" when there is none).
std::string info_field(const std::string& out, const std::string& label) {
  for (const auto& line : lines_of(out)) {
    if (!starts_with(line, "  " + label + ":")) continue;
    std::size_t v = line.find_first_not_of(' ', label.size() + 3);
    return v == std::string::npos ? std::string() : line.substr(v);
  }
  return {};
}

TEST_F(CliTest, InfoShowsTheCcclOfTheToolkit) {
  const kjit::CudaToolkit& tk = kjit::cuda_toolkit();
  Result r = kjit({"info"});
  ASSERT_EQ(r.code, 0) << r.err;
  json j = json::parse(kjit({"info", "--json"}).out);
  if (tk.cccl.found()) {
    EXPECT_EQ(info_field(r.out, "CCCL"),
              tk.cccl.include_dir.string() + ", version " + tk.cccl.version + " (from " + tk.cccl.from + ")")
        << r.out;
    EXPECT_TRUE(j["cccl"]["found"].get<bool>());
    EXPECT_EQ(j["cccl"]["include_dir"], tk.cccl.include_dir.string());
    EXPECT_EQ(j["cccl"]["version"], tk.cccl.version);
    EXPECT_EQ(j["cccl"]["from"], tk.cccl.from);
    EXPECT_TRUE(j["cccl"]["hint"].is_null());
  } else {
    EXPECT_TRUE(starts_with(info_field(r.out, "CCCL"), "not found: install a CUDA toolkit with CCCL")) << r.out;
    EXPECT_FALSE(j["cccl"]["found"].get<bool>());
    EXPECT_NE(j["cccl"]["hint"].get<std::string>().find("nvidia-cuda-cccl"), std::string::npos);
  }
}

TEST_F(CliTest, InfoWithoutCutlassSaysWhatToInstall) {
  ScopedEnv include("KJIT_INCLUDE_PATH", std::nullopt);
  if (kjit::cuda_toolkit().cutlass.found()) GTEST_SKIP() << "a CUTLASS folder was registered";
  Result r = kjit({"info"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(info_field(r.out, "CUTLASS"),
            "not found: pip install nvidia-cutlass, or add CUTLASS's include/ to KJIT_INCLUDE_PATH")
      << r.out;
  json j = json::parse(kjit({"info", "--json"}).out);
  EXPECT_FALSE(j["cutlass"]["found"].get<bool>());
  EXPECT_TRUE(j["cutlass"]["include_dir"].is_null());
  EXPECT_EQ(j["cutlass"]["hint"], "pip install nvidia-cutlass, or add CUTLASS's include/ to KJIT_INCLUDE_PATH");
}

TEST_F(CliTest, InfoShowsACutlassOnKjitIncludePath) {
  if (kjit::cuda_toolkit().cutlass.found()) GTEST_SKIP() << "a CUTLASS folder was registered";
  const fs::path mine = dir_ / "cutlass" / "include";
  kjit::testing::write_file(mine / "cutlass" / "version.h",
                            "#define CUTLASS_MAJOR 3\n#define CUTLASS_MINOR 9\n#define CUTLASS_PATCH 2\n");
  kjit::testing::write_file(mine / "cute" / "tensor.hpp", "#pragma once\n");
  ScopedEnv include("KJIT_INCLUDE_PATH", (dir_ / "elsewhere").string() + ":" + mine.string());
  Result r = kjit({"info"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(info_field(r.out, "CUTLASS"), mine.string() + ", version 3.9.2 (from KJIT_INCLUDE_PATH)") << r.out;
  json j = json::parse(kjit({"info", "--json"}).out);
  EXPECT_TRUE(j["cutlass"]["found"].get<bool>());
  EXPECT_EQ(j["cutlass"]["include_dir"], mine.string());
  EXPECT_EQ(j["cutlass"]["version"], "3.9.2");
  EXPECT_EQ(j["cutlass"]["from"], "KJIT_INCLUDE_PATH");
  EXPECT_TRUE(j["cutlass"]["shadowed"].empty());
}

TEST_F(CliTest, BadSettingIsAnErrorNamingTheVariable) {
  ScopedEnv bad("KJIT_CACHE_MODE", "sometimes");
  Result r = kjit({"ls"});
  EXPECT_TRUE(
      failed_with(r,
                  "kjit: error: KJIT_CACHE_MODE='sometimes' is not valid: allowed readwrite | readonly | strict | off. "
                  "Unset it for the default (readwrite).\n"));
}

// ---- compile ------------------------------------------------------------------------------------

TEST_F(CliTest, CompileTwoArchsThenHitsTheDisk) {
  const std::vector<std::string> args = {"compile",   "add_constant", "--kernel", "add_constant", "--param",
                                         "T=float32", "--param",      "VEC=4",    "--arch",       "sm_80,sm_90"};
  Result first = kjit(args);
  ASSERT_EQ(first.code, 0) << first.err;
  EXPECT_EQ(first.err, "");
  std::vector<std::string> lines = lines_of(first.out);
  ASSERT_EQ(lines.size(), 4u) << first.out;
  EXPECT_EQ(lines[0], "add_constant(T=float32, VEC=4) from template add_constant: add_constant<float, 4>");
  EXPECT_TRUE(starts_with(lines[1], "key "));
  EXPECT_NE(lines[2].find("  sm_80        compiled  "), std::string::npos) << lines[2];
  EXPECT_NE(lines[3].find("  sm_90        compiled  "), std::string::npos) << lines[3];
  EXPECT_EQ(lines[2].substr(lines[2].size() - 3), " ms");
  EXPECT_EQ(count_lines_with(first.out, "compiled"), 2u);

  Result second = kjit(args);
  ASSERT_EQ(second.code, 0) << second.err;
  lines = lines_of(second.out);
  ASSERT_EQ(lines.size(), 4u) << second.out;
  EXPECT_NE(lines[2].find("  sm_80        disk      -"), std::string::npos) << lines[2];
  EXPECT_NE(lines[3].find("  sm_90        disk      -"), std::string::npos) << lines[3];
  // Same keys both times.
  EXPECT_EQ(lines_of(first.out)[2].substr(0, 64), lines[2].substr(0, 64));
}

TEST_F(CliTest, CompileJsonRepeatedArchAndDedup) {
  Result r = compile_add({"T=float16", "VEC=8"}, "sm_90", {"--arch", "9.0,sm_80", "--json"});
  ASSERT_EQ(r.code, 0) << r.err;
  json j = json::parse(r.out);
  EXPECT_EQ(j["name_expression"], "add_constant<__half, 8>");
  ASSERT_EQ(j["results"].size(), 2u);  // sm_90 and 9.0 are one target
  EXPECT_EQ(j["results"][0]["arch"], "sm_90");
  EXPECT_EQ(j["results"][1]["arch"], "sm_80");
  for (const auto& x : j["results"]) {
    EXPECT_EQ(x["origin"], "compiled");
    EXPECT_EQ(x["output"], "cubin");
    EXPECT_EQ(x["key"].get<std::string>().size(), 64u);
    EXPECT_GT(x["compile_ms"].get<double>(), 0.0);
    EXPECT_TRUE(x["note"].is_null());
  }
  json again = compile_add_constant("sm_90", "float16", "8");
  EXPECT_EQ(again["results"][0]["origin"], "disk");
  EXPECT_TRUE(again["results"][0]["compile_ms"].is_null());
  EXPECT_EQ(again["results"][0]["key"], j["results"][0]["key"]);
}

TEST_F(CliTest, CompileRgbToGrayWithShapeParams) {
  Result r = kjit(
      {"compile", "rgb_to_gray", "--kernel", "rgb_to_gray", "--param", "H=4", "--param", "W=5", "--arch", "sm_90"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(lines_of(r.out)[0], "rgb_to_gray(H=4, W=5) from template rgb_to_gray: rgb_to_gray<4, 5>");
  EXPECT_EQ(count_lines_with(r.out, "  sm_90        compiled  "), 1u) << r.out;
}

TEST_F(CliTest, CompileUserFileWithIncludeDirOptionsAndEveryParamKind) {
  kjit::testing::write_file(dir_ / "inc" / "twice.cuh",
                            "#pragma once\ntemplate <typename T> __device__ T twice(T x) { return x + x; }\n");
  const fs::path file = dir_ / "src" / "scale.cu";
  kjit::testing::write_file(file,
                            "#include \"twice.cuh\"\n"
                            "template <typename T, int N, bool FLIP, float F>\n"
                            "__global__ void scale(T* y) {\n"
                            "  int i = threadIdx.x;\n"
                            "  if (i < N) y[i] = twice(y[i]) * T(F) * (FLIP ? T(-1) : T(1)) * T(SCALE_BIAS);\n"
                            "}\n");
  const std::vector<std::string> args = {"compile",      file.string(), "--kernel", "scale",       "--param",
                                         "T=float64",    "--param",     "N=7",      "--param",     "FLIP=1",
                                         "--param",      "F=1.5",       "--arch",   "sm_90",       "--define",
                                         "SCALE_BIAS=3", "--std",       "c++20",    "--fast-math", "--json"};
  std::vector<std::string> with_include = args;
  with_include.insert(with_include.end(), {"--include", (dir_ / "inc").string()});
  Result r = kjit(with_include);
  ASSERT_EQ(r.code, 0) << r.err;
  json j = json::parse(r.out);
  EXPECT_EQ(j["template"], "scale.cu");
  EXPECT_EQ(j["name_expression"], "scale<double, 7, true, 0x1.8p+0f>");
  EXPECT_EQ(j["options"], json({"--std=c++20", "--use_fast_math", "-DSCALE_BIAS=3"}));
  EXPECT_EQ(j["results"][0]["origin"], "compiled");

  // Without --include the header is not found: NVRTC's error, with the source line.
  Result missing = kjit(args);
  EXPECT_TRUE(failed_starting(missing, 1,
                              "kjit: error: NVRTC could not compile scale(T=float64, N=7, FLIP=true, F=1.5) "
                              "from template scale.cu for sm_90"));
  EXPECT_NE(missing.err.find("open source file \"twice.cuh\""), std::string::npos) << missing.err;
  EXPECT_NE(missing.err.find(" >    1 | #include \"twice.cuh\""), std::string::npos) << missing.err;
  const std::string hint =
      "\nhint: these #include files were not found: twice.cuh; pass the directories that hold them with "
      "--include DIR\n";
  EXPECT_EQ(missing.err.substr(missing.err.size() - std::min(hint.size(), missing.err.size())), hint) << missing.err;
}

TEST_F(CliTest, IncludeDirForABuiltinIsAnError) {
  Result r = compile_add({"T=float32", "VEC=4"}, "sm_90", {"--include", dir_.path().string()});
  EXPECT_TRUE(
      failed_with(r,
                  "kjit: error: --include applies to template files; 'add_constant' is a built-in template, which "
                  "includes only kjit's own headers. Pass a file path (e.g. ./add_constant.cu) to compile a "
                  "template of your own.\n"));
}

TEST_F(CliTest, UnknownParamListsTheKernelsParameters) {
  Result r = compile_add({"T=float32", "WIDTH=4"}, "sm_90");
  EXPECT_EQ(r.code, 1);
  EXPECT_EQ(r.out, "");
  EXPECT_EQ(r.err,
            "kjit: error: kernel 'add_constant' has no template parameter 'WIDTH'; its parameters are "
            "T (type), VEC (int)\n");
}

TEST_F(CliTest, BadDtypeListsTheDtypes) {
  Result r = compile_add({"T=float33", "VEC=4"}, "sm_90");
  EXPECT_TRUE(
      failed_with(r,
                  "kjit: error: --param T=float33: template parameter 'T' of kernel 'add_constant' is a type and "
                  "'float33' is not a dtype; allowed: " +
                      kjit::dtype_names() + "\n"));
  EXPECT_NE(r.err.find("float32, float64, float16, bfloat16"), std::string::npos);
}

TEST_F(CliTest, BadParamValuesSayWhatIsAllowed) {
  auto compile = [&](const std::string& param) { return compile_add({"T=float32", param}, "sm_90"); };
  Result r = compile("VEC=four");
  EXPECT_TRUE(failed_with(r,
                          "kjit: error: --param VEC=four: template parameter 'VEC' of kernel 'add_constant' is an "
                          "integer (int) and 'four' is not a decimal integer\n"));
  r = compile("VEC");
  EXPECT_TRUE(failed_with(r, "kjit: error: --param 'VEC' is not NAME=VALUE (for example --param T=float32)\n"));
  r = compile("VEC=4294967296");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("the value 4294967296 is out of its range"), std::string::npos) << r.err;
  r = compile_add({"VEC=4"}, "sm_90");
  EXPECT_TRUE(failed_with(r,
                          "kjit: error: kernel 'add_constant' needs template parameter T; its parameters are T (type), "
                          "VEC (int)\n"));
}

TEST_F(CliTest, UnknownKernelAndTemplate) {
  Result r = kjit({"compile", "add_constant", "--kernel", "add", "--arch", "sm_90"});
  EXPECT_TRUE(failed_with(r,
                          "kjit: error: template 'add_constant' has no __global__ kernel named 'add' (it declares: "
                          "add_constant)\n"));
  r = kjit({"compile", "no_such_template", "--kernel", "k", "--arch", "sm_90"});
  EXPECT_TRUE(failed_starting(r, 1, "kjit: error: there is no built-in template 'no_such_template' in "));
  EXPECT_NE(r.err.find("(available: add_constant, "), std::string::npos) << r.err;
  const fs::path missing = dir_ / "missing.cu";
  r = kjit({"compile", missing.string(), "--kernel", "k", "--arch", "sm_90"});
  EXPECT_TRUE(failed_with(r, "kjit: error: cannot read template file '" + missing.string() +
                                 "': it does not exist or is not readable. Pass the path of a .cu/.cuh file.\n"));
}

TEST_F(CliTest, BadArchListsTheAllowedForms) {
  Result r = compile_add({"T=float32", "VEC=4"}, "sm_90,hopper");
  EXPECT_EQ(r.code, 1);
  EXPECT_EQ(r.out, "");  // every --arch is checked before anything is compiled
  EXPECT_EQ(r.err,
            "kjit: error: target 'hopper' is not valid: allowed sm_XY (cubin), sm_XYa (arch-specific cubin), "
            "compute_XY (PTX) or a compute capability such as 9.0; for example sm_90\n");
  r = compile_add({"T=float32", "VEC=4"}, "sm_72");
  EXPECT_TRUE(failed_starting(r, 1, "kjit: error: NVRTC "));
  EXPECT_NE(r.err.find(" cannot compile for sm_72: it supports sm_75, sm_80, "), std::string::npos) << r.err;
  // An unknown PTX target: the same kind of error, not NVRTC's NVRTC_ERROR_INVALID_OPTION.
  r = compile_add({"T=float32", "VEC=4"}, "compute_91");
  EXPECT_TRUE(failed_starting(r, 1, "kjit: error: NVRTC "));
  EXPECT_NE(r.err.find(" cannot compile for compute_91: it supports compute_75, compute_80, "), std::string::npos)
      << r.err;
}

TEST_F(CliTest, StrictModeCompileOfAnUncachedSpecializationFails) {
  ScopedEnv strict("KJIT_CACHE_MODE", "strict");
  Result r = compile_add({"T=int64", "VEC=2"}, "sm_90");
  EXPECT_TRUE(failed_starting(r, 1,
                              "kjit: error: strict cache mode (KJIT_CACHE_MODE=strict) never compiles, and "
                              "add_constant(T=int64, VEC=2) from template add_constant for sm_90 is not cached"));
}

TEST_F(CliTest, CompileInReadonlyModeSaysNothingWasStored) {
  ScopedEnv readonly("KJIT_CACHE_MODE", "readonly");
  Result r = compile_add({"T=int16", "VEC=2"}, "sm_90");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(count_lines_with(r.out, "  sm_90        compiled  "), 1u) << r.out;
  EXPECT_EQ(r.err, "kjit: warning: the cache is not writable, so nothing compiled now was stored: " +
                       cache_dir().string() + " (readonly)\n");
}

// ---- ls / verify / prune / clear ---------------------------------------------------------------------

TEST_F(CliTest, LsListsTheCompiledEntries) {
  Result empty = kjit({"ls"});
  ASSERT_EQ(empty.code, 0) << empty.err;
  EXPECT_EQ(empty.out, "cache " + cache_dir().string() + " (readwrite, writable)\nno entries\n");

  json compiled = compile_add_constant("sm_80,sm_90");
  Result r = kjit({"ls"});
  ASSERT_EQ(r.code, 0) << r.err;
  std::vector<std::string> lines = lines_of(r.out);
  ASSERT_EQ(lines.size(), 5u) << r.out;
  EXPECT_TRUE(starts_with(lines[1], "key               target  template      kernel")) << lines[1];
  for (const auto& res : compiled["results"]) {
    const std::string key16 = res["key"].get<std::string>().substr(0, 16);
    const std::size_t n = count_lines_with(
        r.out, key16 + "  " + res["target"].get<std::string>() + "   add_constant  add_constant<float, 4>  ");
    EXPECT_EQ(n, 1u) << key16 << "\n" << r.out;
  }
  EXPECT_EQ(count_lines_with(r.out, "  valid   writable"), 2u) << r.out;
  EXPECT_TRUE(starts_with(lines[4], "2 entries, ")) << lines[4];

  Result rj = kjit({"ls", "--json"});
  ASSERT_EQ(rj.code, 0) << rj.err;
  json j = json::parse(rj.out);
  ASSERT_EQ(j["entries"].size(), 2u);
  EXPECT_EQ(j["total"]["entries"], 2);
  EXPECT_EQ(j["total"]["invalid"], 0);
  std::uint64_t bytes = 0;
  for (const auto& e : j["entries"]) {
    EXPECT_TRUE(e["valid"].get<bool>());
    EXPECT_EQ(e["layer"], "writable");
    EXPECT_EQ(e["template"], "add_constant");
    EXPECT_EQ(e["name_expression"], "add_constant<float, 4>");
    EXPECT_TRUE(fs::is_regular_file(e["path"].get<std::string>()));
    EXPECT_EQ(fs::file_size(e["path"].get<std::string>()), e["size"].get<std::uint64_t>());
    bytes += e["size"].get<std::uint64_t>();
  }
  EXPECT_EQ(j["total"]["bytes"], bytes);
}

// ---- ls: what tells apart entries of one kernel and target (issue 40) ---------------------------------

namespace {
kjit::cache::EntryInfo listed(const std::string& key, const std::string& name, std::vector<std::string> options,
                              const std::string& target = "sm_90") {
  kjit::cache::EntryInfo e;
  e.key = key;
  e.valid = true;
  e.layer = "writable";
  kjit::cache::EntryMetadata m;
  m.template_name = "rgb_to_gray";
  m.template_digest = "0123456789abcdef0123";
  m.kernel = "rgb_to_gray";
  m.name_expression = name;
  m.options = std::move(options);
  m.target = target;
  m.nvrtc_version = "13.0";
  m.kjit_version = "0.1.0";
  e.meta = m;
  return e;
}
}  // namespace

TEST(CliEntryDifferences, OptionsOnlySomeEntriesHaveAreNamed) {
  using kjit::cli::differences;
  std::vector<kjit::cache::EntryInfo> entries{
      listed("k1", "rgb_to_gray<2, 3>", {"--std=c++20", "--minimal"}),
      listed("k2", "rgb_to_gray<2, 3>", {"--std=c++20"}),
      listed("k3", "rgb_to_gray<2, 3>", {"--std=c++20", "--minimal"}, "sm_80"),  // another target: alone
      listed("k4", "rgb_to_gray<4, 3>", {"--std=c++20"}),                        // another kernel: alone
  };
  EXPECT_EQ(differences(entries),
            (std::vector<std::string>{"options: --minimal", "options: without --minimal", "", ""}));

  // A flag with another value is that value, not "without" the other one.
  entries = {listed("a", "k<1>", {"--Ofast-compile=min"}), listed("b", "k<1>", {"--Ofast-compile=max", "-DX=1"}),
             listed("c", "k<1>", {})};
  EXPECT_EQ(
      differences(entries),
      (std::vector<std::string>{"options: --Ofast-compile=min; without -DX=1", "options: --Ofast-compile=max -DX=1",
                                "options: without --Ofast-compile=min --Ofast-compile=max -DX=1"}));
}

TEST(CliEntryDifferences, OtherRecordedFieldsThenTheKeyAlone) {
  using kjit::cli::differences;
  auto a = listed("a", "k<1>", {"--minimal"}), b = listed("b", "k<1>", {"--minimal"});
  b.meta->template_digest = "fedcba9876543210fedc";
  b.meta->nvrtc_version = "13.1";
  b.meta->output = kjit::cache::OutputKind::Ptx;
  EXPECT_EQ(differences({a, b}), (std::vector<std::string>{"template 0123456789ab; nvrtc 13.0; output cubin",
                                                           "template fedcba987654; nvrtc 13.1; output ptx"}));
  auto c = listed("c", "k<1>", {"--minimal"});
  c.meta->kjit_version = "0.2.0";
  EXPECT_EQ(differences({a, c}), (std::vector<std::string>{"kjit 0.1.0", "kjit 0.2.0"}));
  // Nothing the metadata records differs (a PTX entry's key holds the driver version): the key says it.
  EXPECT_EQ(differences({a, listed("d", "k<1>", {"--minimal"})}), (std::vector<std::string>{"key only", "key only"}));
}

TEST(CliEntryDifferences, TheSameKeyInTwoLayersAndUnreadableEntriesAreNotCompared) {
  using kjit::cli::differences;
  auto in_layer = listed("a", "k<1>", {"--minimal"});
  in_layer.layer = "/warm";
  kjit::cache::EntryInfo damaged;
  damaged.key = "z";
  damaged.error = "bad magic";
  EXPECT_EQ(differences({listed("a", "k<1>", {"--minimal"}), in_layer, damaged}),
            (std::vector<std::string>{"", "", ""}));
}

// The reviewer's case: rgb_to_gray compiled by a library op (the library's options, as the demo compiles
// it) and by `kjit compile` without them: two entries, and `kjit ls` says what differs.
TEST_F(CliTest, LsSaysWhatTellsApartTwoEntriesOfOneKernelAndTarget) {
  std::vector<std::string> rgb{"compile", "rgb_to_gray", "--kernel", "rgb_to_gray", "--param",
                               "H=2",     "--param",     "W=3",      "--arch",      "sm_90"};
  Result plain = kjit(rgb);
  ASSERT_EQ(plain.code, 0) << plain.err;
  rgb.push_back("--minimal");
  Result minimal = kjit(rgb);
  ASSERT_EQ(minimal.code, 0) << minimal.err;
  EXPECT_EQ(count_lines_with(minimal.out, "  sm_90        compiled  "), 1u) << "another entry: " << minimal.out;
  compile_add_constant("sm_90");  // alone in its group: nothing to say

  Result r = kjit({"ls"});
  ASSERT_EQ(r.code, 0) << r.err;
  const std::vector<std::string> lines = lines_of(r.out);
  ASSERT_EQ(lines.size(), 6u) << r.out;
  EXPECT_NE(lines[1].find("  layer     differs"), std::string::npos) << lines[1];
  EXPECT_EQ(count_lines_with(r.out, "rgb_to_gray<2, 3>"), 2u) << r.out;
  EXPECT_EQ(count_lines_with(r.out, "  writable  options: --minimal"), 1u) << r.out;
  EXPECT_EQ(count_lines_with(r.out, "  writable  options: without --minimal"), 1u) << r.out;
  for (const auto& line : lines)
    if (line.find("add_constant<float, 4>") != std::string::npos)
      EXPECT_TRUE(line.size() >= 8 && line.substr(line.size() - 8) == "writable") << line;

  json j = json::parse(kjit({"ls", "--json"}).out);
  std::vector<std::string> differs;
  for (const auto& e : j["entries"]) {
    ASSERT_TRUE(e.contains("differs")) << e.dump(2);
    differs.push_back(e["differs"].is_null() ? "-" : e["differs"].get<std::string>());
  }
  std::sort(differs.begin(), differs.end());
  EXPECT_EQ(differs, (std::vector<std::string>{"-", "options: --minimal", "options: without --minimal"})) << j.dump(2);
}

// Without such entries the table is as before: no "differs" column.
TEST_F(CliTest, LsHasNoDiffersColumnWhenNothingNeedsTellingApart) {
  compile_add_constant("sm_80,sm_90");
  Result r = kjit({"ls"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out.find("differs"), std::string::npos) << r.out;
}

// ---- escaping what comes from files (issue 14 item 9) -------------------------------------------

TEST(CliPrintable, NeutralisesTerminalControlsAndKeepsText) {
  using kjit::cli::Newlines;
  using kjit::cli::printable;
  // ESC (clear screen, title), BEL, CR, DEL, the other C0 controls.
  EXPECT_EQ(printable("a\x1b[2Jb\x1b]0;t\x07"
                      "c\rd\x7f\x01"),
            "a\\x1b[2Jb\\x1b]0;t\\x07c\\x0dd\\x7f\\x01");
  // C1 controls as UTF-8 (U+009B is CSI) and bidirectional overrides.
  EXPECT_EQ(printable("x\xc2\x9b"
                      "2Jy"),
            "x\\u009b2Jy");
  EXPECT_EQ(printable("\xe2\x80\xae"
                      "abc\xe2\x81\xa6"),
            "\\u202eabc\\u2066");
  // Bytes that are not UTF-8: a lone C1 byte, a truncated sequence, an overlong '/', a surrogate.
  EXPECT_EQ(printable("\x9b"
                      "a\xc3"),
            "\\x9ba\\xc3");
  EXPECT_EQ(printable("\xc0\xaf"), "\\xc0\\xaf");
  EXPECT_EQ(printable("\xed\xa0\x80"), "\\xed\\xa0\\x80");
  EXPECT_EQ(printable("\xff\xfe"), "\\xff\\xfe");
  // Text stays text: accents, CJK, emoji, backslashes.
  EXPECT_EQ(printable("caf\xc3\xa9 \xe6\xbc\xa2 \xf0\x9f\x98\x80 a\\b"),
            "caf\xc3\xa9 \xe6\xbc\xa2 \xf0\x9f\x98\x80 a\\b");
  // Lines: escaped in a single-line field, kept in a log.
  EXPECT_EQ(printable("l1\n\tl2"), "l1\\n\\tl2");
  EXPECT_EQ(printable("l1\n\tl2\x1b", Newlines::Keep), "l1\n\tl2\\x1b");
}

// An error quoting a path from the command line (or a manifest): escaped in the message.
TEST_F(CliTest, ErrorMessagesAreEscaped) {
  const std::string bad = (dir_ / "no\x1b]0;title\x07.cu").string();
  Result r = kjit({"compile", bad, "--kernel", "k", "--arch", "sm_90"});
  EXPECT_EQ(r.code, 1) << r.err;
  EXPECT_EQ(r.err.find('\x1b'), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find('\x07'), std::string::npos) << r.err;
  EXPECT_TRUE(r.err.find("no\\x1b]0;title\\x07.cu") != std::string::npos) << r.err;
}

TEST_F(CliTest, LsShowsReadOnlyLayers) {
  const fs::path warm = dir_ / "warm";
  Result c = run_raw({"--cache-dir", warm.string(), "compile", "rgb_to_gray", "--kernel", "rgb_to_gray", "--param",
                      "H=2", "--param", "W=3", "--arch", "sm_80"});
  ASSERT_EQ(c.code, 0) << c.err;
  ScopedEnv layers("KJIT_CACHE_PATH", warm.string());
  Result r = kjit({"ls", "--json"});
  ASSERT_EQ(r.code, 0) << r.err;
  json j = json::parse(r.out);
  ASSERT_EQ(j["entries"].size(), 1u) << r.out;
  EXPECT_EQ(j["entries"][0]["layer"], warm.string());
  EXPECT_EQ(j["entries"][0]["name_expression"], "rgb_to_gray<2, 3>");
  // A disk hit from the read-only layer; nothing is copied into the writable one.
  Result again = kjit(
      {"compile", "rgb_to_gray", "--kernel", "rgb_to_gray", "--param", "H=2", "--param", "W=3", "--arch", "sm_80"});
  EXPECT_EQ(count_lines_with(again.out, "  sm_80        disk      -"), 1u) << again.out;
  Result info = kjit({"info"});
  EXPECT_NE(info.out.find("  read-only layers:  " + warm.string() + "\n"), std::string::npos) << info.out;
}

TEST_F(CliTest, VerifyFindsAFlippedPayloadByte) {
  json compiled = compile_add_constant("sm_80,sm_90", "int32", "4");
  Result ok = kjit({"verify"});
  EXPECT_EQ(ok.code, 0) << ok.err;
  EXPECT_EQ(ok.out, "2 entries verified, all valid\n");

  // The sm_90 entry: flip the last byte (the payload ends the file).
  const std::string key = compiled["results"][1]["key"];
  const fs::path entry = cache_dir() / "v1" / "sm_90" / key.substr(0, 2) / (key + ".kjit");
  ASSERT_TRUE(fs::is_regular_file(entry)) << entry;
  std::string bytes = kjit::testing::read_file(entry);
  bytes.back() = static_cast<char>(bytes.back() ^ 0x5a);
  kjit::testing::write_file(entry, bytes);

  Result bad = kjit({"verify"});
  EXPECT_EQ(bad.code, 1);
  EXPECT_EQ(bad.out, "damaged: " + entry.string() +
                         ": payload checksum mismatch\n"
                         "1 of 2 entries damaged; `kjit prune` removes damaged entries from the writable cache\n");
  EXPECT_TRUE(fs::exists(entry));  // verify only reports

  Result ls = kjit({"ls"});
  EXPECT_EQ(count_lines_with(ls.out, "invalid (payload checksum mismatch)"), 1u) << ls.out;
  EXPECT_NE(ls.out.find(", 1 invalid\n"), std::string::npos) << ls.out;

  Result pruned = kjit({"prune"});
  ASSERT_EQ(pruned.code, 0) << pruned.err;
  EXPECT_NE(pruned.out.find("1 damaged entry,"), std::string::npos) << pruned.out;
  EXPECT_FALSE(fs::exists(entry));
  EXPECT_EQ(kjit({"verify"}).out, "1 entry verified, all valid\n");
}

TEST_F(CliTest, ADamagedEntryIsRecompiledWithAWarningOnErr) {
  json first = compile_add_constant("sm_90", "uint8", "2");  // a specialization no other test uses
  const std::string key = first["results"][0]["key"];
  const fs::path entry = cache_dir() / "v1" / "sm_90" / key.substr(0, 2) / (key + ".kjit");
  std::string bytes = kjit::testing::read_file(entry);
  bytes[bytes.size() / 2] = static_cast<char>(bytes[bytes.size() / 2] ^ 1);
  kjit::testing::write_file(entry, bytes);

  Result r = compile_add({"T=uint8", "VEC=2"}, "sm_90", {"--json"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(json::parse(r.out)["results"][0]["origin"], "compiled");
  EXPECT_TRUE(starts_with(r.err, "kjit: warning: kjit cache: ignoring damaged entry " + entry.string() + " ("))
      << r.err;
}

TEST_F(CliTest, PruneToOneByteRemovesEverything) {
  compile_add_constant("sm_80,sm_90");
  Result r = kjit({"prune", "--max-bytes", "1"});
  ASSERT_EQ(r.code, 0) << r.err;
  std::vector<std::string> lines = lines_of(r.out);
  ASSERT_EQ(lines.size(), 4u) << r.out;
  EXPECT_EQ(lines[0], "pruned " + cache_dir().string() + " to at most 1 B");
  EXPECT_EQ(lines[1],
            "  removed:  2 least recently used entries, 0 damaged entries, 0 stale temp files, "
            "0 abandoned lock files");
  EXPECT_TRUE(starts_with(lines[2], "  size:     "));
  EXPECT_EQ(lines[2].substr(lines[2].size() - 7), " -> 0 B") << lines[2];
  EXPECT_TRUE(starts_with(lines[3], "  pch:      ")) << lines[3];
  EXPECT_EQ(kjit({"ls"}).out, "cache " + cache_dir().string() + " (readwrite, writable)\nno entries\n");
}

TEST_F(CliTest, PruneWithSuffixKeepsWhatFits) {
  compile_add_constant("sm_80,sm_90");
  Result r = kjit({"prune", "--max-bytes", "1G"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(lines_of(r.out)[0], "pruned " + cache_dir().string() + " to at most 1.0 GiB");
  EXPECT_NE(r.out.find("removed:  0 least recently used entries"), std::string::npos) << r.out;
  EXPECT_EQ(kjit({"verify"}).out, "2 entries verified, all valid\n");
}

TEST_F(CliTest, PruneAndClearRefuseOutsideReadwriteMode) {
  ScopedEnv readonly("KJIT_CACHE_MODE", "readonly");
  Result r = kjit({"prune"});
  EXPECT_TRUE(failed_with(r,
                          "kjit: error: prune changes nothing in cache mode readonly (KJIT_CACHE_MODE=readonly); unset "
                          "KJIT_CACHE_MODE or set it to readwrite to prune " +
                              cache_dir().string() + "\n"));
  r = kjit({"clear", "--yes"});
  EXPECT_TRUE(failed_starting(r, 1, "kjit: error: clear changes nothing in cache mode readonly"));
}

TEST_F(CliTest, ClearNeedsYes) {
  Result nothing = kjit({"clear"});
  EXPECT_EQ(nothing.code, 0) << nothing.err;
  EXPECT_EQ(nothing.out, "nothing to clear in " + cache_dir().string() + "\n");

  compile_add_constant("sm_80,sm_90");
  Result refused = kjit({"clear"});
  EXPECT_TRUE(failed_starting(refused, 1, "kjit: error: clear would remove 2 entries ("));
  EXPECT_NE(refused.err.find(") from " + cache_dir().string() + "; run `kjit clear --yes` to confirm\n"),
            std::string::npos)
      << refused.err;
  EXPECT_EQ(kjit({"verify"}).out, "2 entries verified, all valid\n");

  Result r = kjit({"clear", "--yes"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out, "removed 2 entries from " + cache_dir().string() + "\n");
  EXPECT_EQ(kjit({"verify"}).out, "0 entries verified, all valid\n");
}

// ---- usage --------------------------------------------------------------------------------------

TEST_F(CliTest, VersionAndHelp) {
  Result v = run_raw({"--version"});
  EXPECT_EQ(v.code, 0);
  EXPECT_EQ(v.out, "kjit " KJIT_VERSION "\n");
  Result h = run_raw({"--help"});
  EXPECT_EQ(h.code, 0);
  EXPECT_NE(h.out.find("Usage: kjit [OPTIONS] SUBCOMMAND"), std::string::npos) << h.out;
  for (const char* c : {"info", "compile", "ls", "verify", "prune", "clear"})
    EXPECT_NE(h.out.find(std::string("  ") + c + " "), std::string::npos) << c;
  Result ch = run_raw({"compile", "--help"});
  EXPECT_EQ(ch.code, 0);
  EXPECT_NE(ch.out.find("--param NAME=VALUE"), std::string::npos) << ch.out;
}

TEST_F(CliTest, UsageErrorsExitTwoWithMessageAndUsage) {
  Result none = run_raw({});
  EXPECT_EQ(none.code, 2);
  EXPECT_EQ(none.out, "");
  EXPECT_TRUE(starts_with(none.err, "kjit: error: A subcommand is required\n\n")) << none.err;
  EXPECT_NE(none.err.find("Usage: kjit [OPTIONS] SUBCOMMAND"), std::string::npos) << none.err;

  Result unknown = kjit({"frobnicate"});
  EXPECT_TRUE(failed_starting(unknown, 2,
                              "kjit: error: unknown command 'frobnicate' (commands: info, compile, warm, export, "
                              "prefetch, ls, verify, prune, clear)\n\nkjit " KJIT_VERSION ": "));

  Result no_kernel = kjit({"compile", "add_constant", "--arch", "sm_90"});
  EXPECT_TRUE(failed_starting(no_kernel, 2, "kjit: error: --kernel is required\n\n"));
  EXPECT_NE(no_kernel.err.find("Usage: kjit compile [OPTIONS] TEMPLATE"), std::string::npos) << no_kernel.err;

  Result bad_std = compile_add({}, "sm_90", {"--std", "c++11"});
  EXPECT_TRUE(failed_starting(bad_std, 2, "kjit: error: --std: c++11 not in {c++17,c++20}\n"));

  Result bad_size = kjit({"prune", "--max-bytes", "10X"});
  EXPECT_TRUE(failed_starting(bad_size, 2,
                              "kjit: error: --max-bytes: value '10X' is not valid: allowed a byte count with "
                              "an optional K, M or G suffix (powers of 1024), e.g. 500M or 2G\n\n"));
  EXPECT_NE(bad_size.err.find("Usage: kjit prune [OPTIONS]"), std::string::npos) << bad_size.err;

  // An unset variable (`kjit verify --dir "$EXPORT"`) used to check the user's own cache and exit 0.
  Result empty_dir = kjit({"verify", "--dir", ""});
  EXPECT_TRUE(failed_starting(empty_dir, 2,
                              "kjit: error: --dir: an empty path is not allowed (an unset variable?); give the "
                              "exported cache's folder\n"));
  Result empty_lock = kjit({"verify", "--lock", ""});
  EXPECT_EQ(empty_lock.code, 2);
  EXPECT_NE(empty_lock.err.find("--lock: an empty path is not allowed"), std::string::npos) << empty_lock.err;

  Result extra = kjit({"ls", "extra"});
  EXPECT_EQ(extra.code, 2);
}

// ---- the binary ---------------------------------------------------------------------------------

Result run_binary(const std::string& args) {
  const kjit::testing::CliRun c = kjit::testing::run_shell(std::string(KJIT_CLI_PATH) + " " + args + " 2>&1");
  Result r;
  r.code = c.code;
  r.out = c.out;
  return r;
}

TEST_F(CliTest, TheExecutableWorks) {
  Result v = run_binary("--version");
  EXPECT_EQ(v.code, 0) << v.out;
  EXPECT_EQ(v.out, "kjit " KJIT_VERSION "\n");

  const std::string compile = "--cache-dir '" + cache_dir().string() +
                              "' compile add_constant --kernel add_constant --param T=float32 --param VEC=4 "
                              "--arch sm_90";
  Result c = run_binary(compile);
  EXPECT_EQ(c.code, 0) << c.out;
  EXPECT_EQ(count_lines_with(c.out, "  sm_90        compiled  "), 1u) << c.out;
  Result again = run_binary(compile);
  EXPECT_EQ(count_lines_with(again.out, "  sm_90        disk      -"), 1u) << again.out;

  Result usage = run_binary("compile");
  EXPECT_EQ(usage.code, 2) << usage.out;
}

// The log (kjit_base) knows nothing of the settings: it reads KJIT_VERBOSE through the source the engine's
// settings install. The binary prints the verbose lines with it, and none without it.
TEST_F(CliTest, TheExecutableHonoursKjitVerbose) {
  const std::string compile = "--cache-dir '" + cache_dir().string() +
                              "' compile add_constant --kernel add_constant --param T=float32 --param VEC=4 "
                              "--arch ";
  {
    ScopedEnv verbose("KJIT_VERBOSE", "1");
    Result c = run_binary(compile + "sm_90");
    EXPECT_EQ(c.code, 0) << c.out;
    EXPECT_EQ(count_lines_with(c.out, "kjit: compiled add_constant"), 1u) << c.out;
  }
  ScopedEnv quiet("KJIT_VERBOSE", std::nullopt);
  Result c = run_binary(compile + "sm_80");
  EXPECT_EQ(c.code, 0) << c.out;
  EXPECT_EQ(count_lines_with(c.out, "  sm_80        compiled  "), 1u) << c.out;
  EXPECT_EQ(count_lines_with(c.out, "kjit: "), 0u) << c.out;
}

}  // namespace
