// NVRTC compile-only paths (no GPU needed): built-in templates for sm_80 / sm_90 / sm_100, compile errors
// carrying the log and the offending line, the disk cache in front of the compiler, strict mode.
#include <gtest/gtest.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdio>
#include <filesystem>
#include <cstdlib>

#include "kjit/compile_sandbox.hpp"
#include "kjit/compiler.hpp"
#include "kjit/dynamic_library.hpp"
#include "kjit/engine.hpp"
#include "kjit/error.hpp"
#include "kjit/log.hpp"
#include "kjit/nvrtc_library.hpp"
#include "kjit/settings.hpp"
#include "child_process.hpp"
#include "engine_support.hpp"
#include "test_support.hpp"

using namespace kjit;
namespace fs = std::filesystem;
using kjit::testing::TempDir;

using kjit::testing::prepared_origin;
namespace {

Settings settings_for(const TempDir& dir, const std::string& mode = "readwrite") {
  return Settings::from_map({{"KJIT_CACHE_DIR", (dir / "cache").string()}, {"KJIT_CACHE_MODE", mode}});
}

// Where Engine::prepare found (or made) kernel k of `t` with T = `type`, for sm_90.
Origin origin_of_k(Engine& engine, std::shared_ptr<const Template> t, DType type) {
  return prepared_origin(engine, Specialization(std::move(t), "k", {{"T", TemplateArg::type(type)}}),
                         Target::parse("sm_90"));
}

Specialization add_constant(DType t, int vec) {
  return Specialization(Template::builtin("add_constant"), "add_constant",
                        {{"T", TemplateArg::type(t)}, {"VEC", TemplateArg::integer(vec)}});
}

}  // namespace

class CompileForArch : public ::testing::TestWithParam<std::string> {};

TEST_P(CompileForArch, BuiltinsCompileToCubin) {
  TempDir dir;
  Engine engine(settings_for(dir));
  Target target = Target::parse(GetParam());
  for (DType t : {DType::Float32, DType::Float16, DType::BFloat16, DType::Float64, DType::Int32}) {
    Origin p_origin;
    const auto p = engine.prepare(add_constant(t, 4), target, &p_origin);
    EXPECT_EQ(p_origin, Origin::Compiled);
    EXPECT_EQ(p->meta.target, GetParam());
    EXPECT_EQ(p->meta.output, cache::OutputKind::Cubin);
    EXPECT_FALSE(p->meta.lowered_name.empty());
    EXPECT_GT(p->meta.compile_ms, 0.0);
  }
  Specialization gray(Template::builtin("rgb_to_gray"), "rgb_to_gray",
                      {{"H", TemplateArg::integer(1080)}, {"W", TemplateArg::integer(1919)}});
  Origin g_origin;
  const auto g = engine.prepare(gray, target, &g_origin);
  EXPECT_EQ(g->meta.name_expression, "rgb_to_gray<1080, 1919>");
  EXPECT_EQ(engine.stats().compiles, 6u);
}

INSTANTIATE_TEST_SUITE_P(Archs, CompileForArch, ::testing::Values("sm_80", "sm_90", "sm_90a", "sm_100"));

TEST(Compile, SecondPrepareIsADiskHitWithTheSameKey) {
  TempDir dir;
  Engine first(settings_for(dir));
  Origin a_origin;
  const auto a = first.prepare(add_constant(DType::Float32, 4), Target::parse("sm_90"), &a_origin);
  Engine second(settings_for(dir));
  Origin b_origin;
  const auto b = second.prepare(add_constant(DType::Float32, 4), Target::parse("sm_90"), &b_origin);
  EXPECT_EQ(a_origin, Origin::Compiled);
  EXPECT_EQ(b_origin, Origin::Disk);
  EXPECT_EQ(a->key, b->key);
  EXPECT_EQ(second.stats().compiles, 0u);
  EXPECT_EQ(second.stats().disk_hits, 1u);
}

namespace {

// add_constant<float, vec> prepared for `target` by an engine on dir's cache.
std::shared_ptr<const SpecializedKernel> prepared(const TempDir& dir, int vec, const std::string& target) {
  Engine engine(settings_for(dir));
  return engine.prepare(add_constant(DType::Float32, vec), Target::parse(target));
}

}  // namespace

TEST(Compile, PtxTarget) {
  TempDir dir;
  EXPECT_EQ(prepared(dir, 1, "compute_90")->meta.output, cache::OutputKind::Ptx);
}

TEST(Compile, ErrorCarriesLogLineAndOptions) {
  TempDir dir;
  Engine engine(settings_for(dir));
  auto t = Template::from_string(
      "template <typename T>\n"
      "__global__ void broken(T* p) {\n"
      "  p[0] = undefined_symbol;\n"
      "}\n",
      "broken.cu");
  Specialization s(t, "broken", {{"T", TemplateArg::type(DType::Float32)}});
  try {
    engine.prepare(s, Target::parse("sm_90"));
    FAIL() << "no CompileError";
  } catch (const CompileError& e) {
    EXPECT_NE(e.log().find("undefined_symbol"), std::string::npos) << e.log();
    EXPECT_EQ(e.name_expression(), "broken<float>");
    EXPECT_NE(std::find(e.options().begin(), e.options().end(), "--gpu-architecture=sm_90"), e.options().end());
    EXPECT_NE(e.source_excerpt().find(" >    3 |   p[0] = undefined_symbol;"), std::string::npos) << e.source_excerpt();
    std::string what = e.what();
    EXPECT_NE(what.find("NVRTC could not compile broken(T=float32) from template broken.cu for sm_90"),
              std::string::npos)
        << what;
  }
  // The process stays usable: a valid compile right after succeeds.
  EXPECT_EQ(prepared_origin(engine, add_constant(DType::Float32, 4), Target::parse("sm_90")), Origin::Compiled);
}

TEST(Compile, ErrorInAHeaderShowsTheHeaderLine) {
  TempDir dir;
  kjit::testing::write_file(dir / "src" / "helper.cuh", "#pragma once\n__device__ int helper() { return nope; }\n");
  kjit::testing::write_file(dir / "src" / "main.cu",
                            "#include \"helper.cuh\"\n__global__ void k(int* p) { p[0] = helper(); }\n");
  Engine engine(settings_for(dir));
  Specialization s(Template::from_file(dir / "src" / "main.cu"), "k", {});
  try {
    engine.prepare(s, Target::parse("sm_90"));
    FAIL() << "no CompileError";
  } catch (const CompileError& e) {
    EXPECT_NE(e.source_excerpt().find("helper.cuh:2:"), std::string::npos) << e.source_excerpt();
  }
}

namespace {

// The message of the ValueError that preparing add_constant<float, 4> for `target` raises; a failure of the
// calling test (and "") when there is none.
std::string target_error(Engine& engine, const std::string& target) {
  try {
    engine.prepare(add_constant(DType::Float32, 4), Target::parse(target));
  } catch (const ValueError& e) {
    return e.what();
  }
  ADD_FAILURE() << "no error for " << target;
  return "";
}

}  // namespace

TEST(Compile, UnsupportedTargetIsAClearError) {
  TempDir dir;
  Engine engine(settings_for(dir));
  const std::string what = target_error(engine, "sm_91");
  EXPECT_NE(what.find("cannot compile for sm_91: it supports"), std::string::npos) << what;
}

TEST(Compile, UnknownPtxTargetIsAValueErrorBeforeNvrtc) {
  // compute_91 parses (compute_XY) but names no architecture: it used to reach NVRTC and come back as a
  // CompileError (NVRTC_ERROR_INVALID_OPTION).
  TempDir dir;
  Engine engine(settings_for(dir));
  const std::string what = target_error(engine, "compute_91");
  EXPECT_EQ(what.rfind("NVRTC ", 0), 0u) << what;
  EXPECT_NE(what.find(" cannot compile for compute_91: it supports compute_"), std::string::npos) << what;
  EXPECT_NE(what.find(", compute_90"), std::string::npos) << what;
  EXPECT_NE(what.find(" for PTX (or sm_XY for a cubin)"), std::string::npos) << what;
  EXPECT_EQ(engine.stats().compiles, 0u);  // compute_90 and the others NVRTC lists: Compile.PtxTarget
}

TEST(Compile, NewerThanNvrtcFallsBackToPtxAndSaysSo) {
  TempDir dir;
  const auto p = prepared(dir, 4, "sm_990");
  EXPECT_EQ(p->meta.output, cache::OutputKind::Ptx);
  EXPECT_EQ(p->meta.requested_target, "sm_990");
  EXPECT_EQ(p->meta.target.rfind("compute_", 0), 0u);
  EXPECT_NE(p->meta.note.find("cannot make a cubin for sm_990"), std::string::npos) << p->meta.note;
}

TEST(Compile, HeaderBytesChangeTheKey) {
  TempDir dir;
  kjit::testing::write_file(dir / "src" / "v.cuh", "#pragma once\n#define SCALE 2\n");
  kjit::testing::write_file(dir / "src" / "k.cu", "#include \"v.cuh\"\n__global__ void k(int* p) { p[0] = SCALE; }\n");
  Engine engine(settings_for(dir));
  Origin a_origin;
  const auto a = engine.prepare(Specialization(Template::from_file(dir / "src" / "k.cu"), "k", {}),
                                Target::parse("sm_90"), &a_origin);
  kjit::testing::write_file(dir / "src" / "v.cuh", "#pragma once\n#define SCALE 3\n");
  Origin b_origin;
  const auto b = engine.prepare(Specialization(Template::from_file(dir / "src" / "k.cu"), "k", {}),
                                Target::parse("sm_90"), &b_origin);
  EXPECT_NE(a->key, b->key);
  EXPECT_EQ(b_origin, Origin::Compiled);
}

// Runs in a fresh process (this binary re-executed with KJIT_TEST_STRICT_CHILD set), so that no
// earlier test has loaded NVRTC; the exit code says what went wrong.
TEST(Compile, StrictModeRaisesOnAMissAndNeverLoadsNvrtc) {
  if (const char* child_dir = std::getenv("KJIT_TEST_STRICT_CHILD")) {
    int code = 0;
    try {
      Engine strict(Settings::from_map({{"KJIT_CACHE_DIR", child_dir}, {"KJIT_CACHE_MODE", "strict"}}));
      strict.prepare(add_constant(DType::Float32, 4), Target::parse("sm_90"));
      code = 10;  // no error
    } catch (const CacheMissError& e) {
      std::string m = e.what();
      if (m.find("strict cache mode") == std::string::npos)
        code = 11;
      else if (m.find("kjit compile add_constant --kernel add_constant --param T=float32 --param VEC=4 --arch sm_90") ==
               std::string::npos)
        code = 12;
      else if (e.key().size() != 64)
        code = 13;
    } catch (...) {
      code = 14;
    }
    if (code == 0 && library_is_mapped("libnvrtc")) code = 15;
    std::fflush(nullptr);
    _exit(code);
  }
  TempDir dir;
  EXPECT_EQ(kjit::testing::rerun_this_test("test_compile", "Compile.StrictModeRaisesOnAMissAndNeverLoadsNvrtc",
                                           "KJIT_TEST_STRICT_CHILD", (dir / "cache").string()),
            0)
      << "10: no error, 11-13: message, 14: other error, 15: NVRTC was loaded";
}

TEST(Compile, StrictModeFindsWhatReadwriteCompiled) {
  TempDir dir;
  Engine rw(settings_for(dir));
  Origin a_origin;
  const auto a = rw.prepare(add_constant(DType::Float16, 8), Target::parse("sm_90"), &a_origin);
  Engine strict(settings_for(dir, "strict"));
  Origin b_origin;
  const auto b = strict.prepare(add_constant(DType::Float16, 8), Target::parse("sm_90"), &b_origin);
  EXPECT_EQ(b_origin, Origin::Disk);
  EXPECT_EQ(a->key, b->key);
}

TEST(Compile, KernelInANamespaceCompilesUnderItsQualifiedName) {
  TempDir dir;
  Engine engine(settings_for(dir));
  auto t = Template::from_string(
      "namespace mylib { template <typename T> __global__ void scale(T* p, T s) { p[threadIdx.x] *= s; } }\n", "ns.cu");
  Specialization by_plain(t, "scale", {{"T", TemplateArg::type(DType::Float32)}});
  EXPECT_EQ(by_plain.name_expression(), "mylib::scale<float>");
  Specialization by_qualified(t, "mylib::scale", {{"T", TemplateArg::type(DType::Float64)}});
  Origin p_origin;
  const auto p = engine.prepare(by_qualified, Target::parse("sm_90"), &p_origin);
  EXPECT_EQ(p->meta.name_expression, "mylib::scale<double>");
  EXPECT_FALSE(p->meta.lowered_name.empty());
}

// A template rebuilt from a (possibly hostile) manifest must not make NVRTC read files: not by an
// absolute or climbing include name, not through the folder its recorded name points to, not through a
// directive kjit's scanner cannot read. A secret line would otherwise come back in the compile log.
TEST(Compile, ATemplateFromAManifestCannotMakeNvrtcReadFiles) {
  TempDir dir;
  const std::string secret = "TOP_SECRET_LINE_42 leaked;\n";
  kjit::testing::write_file(dir / "keys" / "id_rsa", secret);
  Engine engine(settings_for(dir));
  const std::string kernel = "template <typename T>\n__global__ void k(T* p) { p[0] = T(1); }\n";
  for (const std::string& include :
       {"#include \"" + (dir / "keys" / "id_rsa").string() + "\"\n", std::string("#include \"../keys/id_rsa\"\n"),
        std::string("#include \"id_rsa\"\n")}) {
    SCOPED_TRACE(include);
    // The recorded name points into the folder of the secret: NVRTC would search it for "id_rsa".
    auto t = Template::from_memory(include + kernel, (dir / "keys" / "k.cu").string(), {});
    Specialization s(t, "k", {{"T", TemplateArg::type(DType::Float32)}});
    try {
      engine.prepare(s, Target::parse("sm_90"));
      FAIL() << "compiled";
    } catch (const CompileError& e) {
      EXPECT_EQ(std::string(e.what()).find("TOP_SECRET"), std::string::npos) << e.what();
      EXPECT_EQ(e.log().find("TOP_SECRET"), std::string::npos) << e.log();
    }
  }
  // Directives the scanner cannot read are refused before NVRTC sees them.
  for (const std::string& include :
       {std::string("#define F \"/etc/hostname\"\n#include F\n"), std::string("#/**/include \"/etc/hostname\"\n"),
        std::string("#include_next \"/etc/hostname\"\n"),
        std::string("#if __has_include(\"/etc/hostname\")\n#error exists\n#endif\n"),
        std::string("#if __has_include(<../../etc/hostname>)\n#endif\n")}) {
    SCOPED_TRACE(include);
    EXPECT_THROW(Template::from_memory(include + kernel, "k.cu", {}), ValueError);
  }
  // Continued lines and the %: digraph are read as what they are.
  auto joined = Template::from_memory("#inc\\\nlude \"../x.h\"\n%:include \"/y.h\"\n" + kernel, "k.cu", {});
  EXPECT_EQ(joined->unresolved_includes(), (std::vector<std::string>{"../x.h", "/y.h"}));
  // A recorded template that includes plainly still compiles (and may probe plain names).
  auto ok = Template::from_memory("#include \"h.cuh\"\n#if __has_include(<cuda_fp16.h>)\n#endif\n" + kernel,
                                  (dir / "keys" / "k.cu").string(), {{"h.cuh", "#pragma once\n"}});
  EXPECT_EQ(origin_of_k(engine, ok, DType::Float32), Origin::Compiled);
}

namespace {

// Restores the working directory when it goes.
struct InDirectory {
  explicit InDirectory(const std::filesystem::path& dir) : before(std::filesystem::current_path()) {
    std::filesystem::current_path(dir);
  }
  ~InDirectory() { std::filesystem::current_path(before); }
  std::filesystem::path before;
};

std::string message_of_compile(Engine& engine, const Specialization& s, const std::string& target = "sm_90") {
  try {
    engine.prepare(s, Target::parse(target));
  } catch (const CompileError& e) {
    return e.what();
  }
  return "";
}

const std::string kKernel = "template <typename T>\n__global__ void k(T* p) { p[0] = T(1); }\n";

}  // namespace

// NVRTC searches the program name's folder, and (for a bare file name) the current directory, for a
// quoted include: a header kjit never resolved nor hashed would be compiled, and an edit of it would
// bring the old kernel back from disk under the same key. NVRTC now reads only what kjit hashed.
TEST(Compile, NvrtcReadsNoHeaderKjitDidNotResolveAndHash) {
  TempDir dir;
  kjit::testing::write_file(dir / "kernels" / "common.h", "#define VALUE 1\n");
  kjit::testing::write_file(dir / "elsewhere" / "k.cu", "#include \"common.h\"\n" + kKernel);
  Engine engine(settings_for(dir));
  const std::string source = "#include \"common.h\"\n" + kKernel;
  // A string template named into the folder of the header.
  auto named = Template::from_string(source, (dir / "kernels" / "k.cu").string());
  EXPECT_EQ(named->unresolved_includes(), (std::vector<std::string>{"common.h"}));
  std::string msg = message_of_compile(engine, Specialization(named, "k", {{"T", TemplateArg::type(DType::Float32)}}));
  EXPECT_NE(msg.find("kjit did not find 'common.h'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("include_dirs"), std::string::npos) << msg;
  // A file template run from the folder of the header (its own folder does not have it).
  {
    InDirectory in(dir / "kernels");
    auto file = Template::from_file(dir / "elsewhere" / "k.cu");
    msg = message_of_compile(engine, Specialization(file, "k", {{"T", TemplateArg::type(DType::Float32)}}));
    EXPECT_NE(msg.find("kjit did not find 'common.h'"), std::string::npos) << msg;
  }
  // Resolved through include_dirs, it compiles, and its bytes are in the key.
  auto resolved = Template::from_string(source, "k.cu", {dir / "kernels"});
  Specialization s(resolved, "k", {{"T", TemplateArg::type(DType::Float32)}});
  EXPECT_EQ(prepared_origin(engine, s, Target::parse("sm_90")), Origin::Compiled);
}

// Every spelling of an include or a probe a hostile manifest could use: whatever the include scanner
// makes of it, the compile of a template rebuilt from a manifest can open no file and learn nothing of
// what exists (it runs in a child with file syscalls answered ENOENT).
TEST(Compile, NoSpellingLetsAManifestTemplateReadOrProbeAFile) {
  TempDir dir;
  const std::string secret_path = (dir / "id_rsa").string();
  kjit::testing::write_file(dir / "id_rsa", "TOP_SECRET_LINE_42 leaked;\n");
  std::vector<std::string> warnings;
  auto previous = log::set_warning_sink([&](const std::string& m) { warnings.push_back(m); });
  Engine engine(settings_for(dir));
  const std::string q = "\"" + secret_path + "\"";
  const std::vector<std::string> includes = {
      "/**/#include " + q + "\n", "\f#include " + q + "\n",
      "\v#include " + q + "\n",   "/* a comment\n over lines */ #include " + q + "\n",
      "#\finclude " + q + "\n",   "#define F " + q + "\n#include F\n",
      "%:include " + q + "\n",
  };
  for (const std::string& include : includes) {
    SCOPED_TRACE(include);
    std::shared_ptr<const Template> t;
    try {
      t = Template::from_memory(include + kKernel, "k.cu", {});
    } catch (const ValueError&) {
      continue;  // refused by the scanner: also fine
    }
    const std::string msg =
        message_of_compile(engine, Specialization(t, "k", {{"T", TemplateArg::type(DType::Float32)}}));
    EXPECT_FALSE(msg.empty()) << "compiled";
    EXPECT_EQ(msg.find("TOP_SECRET"), std::string::npos) << msg;
  }
  // A __has_include built by token pasting (the scanner cannot see it): the file exists, and the probe
  // must still say it does not.
  auto probe = Template::from_memory("#define CAT(a, b) a##b\n#define HAS CAT(__has_, include)\n#if HAS(" + q +
                                         ")\n#error THE_FILE_EXISTS\n#endif\n" + kKernel,
                                     "probe.cu", {});
  for (const auto& w : warnings)
    if (w.find("could not stop NVRTC") != std::string::npos) GTEST_SKIP() << w;
  const std::string msg =
      message_of_compile(engine, Specialization(probe, "k", {{"T", TemplateArg::type(DType::Float32)}}));
  log::set_warning_sink(previous);
  for (const auto& w : warnings)
    if (w.find("could not stop NVRTC") != std::string::npos) GTEST_SKIP() << w;
  EXPECT_EQ(msg, "") << "the probe learnt that the file exists";
}

namespace {
// 2^40 terms after macro expansion: the compiler's time and memory grow without end.
std::string exponential_template() {
  std::string s = "#define A0 1\n";
  for (int i = 1; i <= 40; ++i)
    s += "#define A" + std::to_string(i) + " (A" + std::to_string(i - 1) + " + A" + std::to_string(i - 1) + ")\n";
  return s + "__device__ long x = A40;\n" + kKernel;
}
}  // namespace

TEST(Compile, AManifestTemplateCompileStopsAtTheTimeLimit) {
  if (!compile_children_are_safe()) GTEST_SKIP() << "a sanitizer build compiles in-process: no child, no bounds";
  TempDir dir;
  Engine engine(Settings::from_map({{"KJIT_CACHE_DIR", (dir / "cache").string()}, {"KJIT_COMPILE_TIMEOUT", "2"}}));
  auto t = Template::from_memory(exponential_template(), "exp.cu", {});
  const auto start = std::chrono::steady_clock::now();
  const std::string msg =
      message_of_compile(engine, Specialization(t, "k", {{"T", TemplateArg::type(DType::Float32)}}));
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_NE(msg.find("took longer than kjit's limit of 2 s"), std::string::npos) << msg;
  EXPECT_NE(msg.find("KJIT_COMPILE_TIMEOUT"), std::string::npos) << msg;
  EXPECT_LT(s, 60) << "the limit did not stop it";
  // The engine works afterwards.
  auto ok = Template::from_memory(kKernel, "ok.cu", {});
  EXPECT_EQ(origin_of_k(engine, ok, DType::Float32), Origin::Compiled);
}

TEST(Compile, AnIsolatedCompileStopsAtTheMemoryLimit) {
  if (!compile_children_are_safe()) GTEST_SKIP() << "a sanitizer build compiles in-process: no child, no bounds";
  TempDir dir;
  Engine engine(Settings::from_map({{"KJIT_CACHE_DIR", (dir / "cache").string()},
                                    {"KJIT_COMPILE_ISOLATION", "always"},
                                    {"KJIT_COMPILE_MEMORY", "200M"},
                                    {"KJIT_COMPILE_TIMEOUT", "120"}}));
  auto t = Template::from_string(exponential_template(), "exp.cu");
  const std::string msg =
      message_of_compile(engine, Specialization(t, "k", {{"T", TemplateArg::type(DType::Float32)}}));
  EXPECT_NE(msg.find("200 MiB"), std::string::npos) << msg;
  EXPECT_NE(msg.find("KJIT_COMPILE_MEMORY"), std::string::npos) << msg;
  // Your own templates still compile in the child (with the CUDA include path) under `always`.
  auto half = Template::from_string("#include <cuda_fp16.h>\n" + kKernel, "half.cu");
  EXPECT_EQ(origin_of_k(engine, half, DType::Float16), Origin::Compiled);
}

// A name expression kjit rendered with __half / __nv_bfloat16 on a template that does not include the
// header declaring it: kjit names the include to add, not NVRTC's bare "identifier is undefined".
TEST(Compile, AHalfSpecializationOfATemplateWithoutCudaFp16SaysWhichIncludeToAdd) {
  TempDir dir;
  Engine engine(settings_for(dir));
  auto t = Template::from_string(kKernel, "plain.cu");
  for (auto [dtype, header] : {std::pair{DType::Float16, "cuda_fp16.h"}, std::pair{DType::BFloat16, "cuda_bf16.h"}}) {
    try {
      engine.prepare(Specialization(t, "k", {{"T", TemplateArg::type(dtype)}}), Target::parse("sm_90"));
      FAIL() << "compiled";
    } catch (const ValueError& e) {
      EXPECT_NE(std::string(e.what()).find(std::string("#include <") + header + ">"), std::string::npos) << e.what();
    }
  }
  // Included, it compiles.
  auto with = Template::from_string("#include <cuda_fp16.h>\n" + kKernel, "with.cu");
  EXPECT_EQ(origin_of_k(engine, with, DType::Float16), Origin::Compiled);
}

// A header included by absolute path from a string template is the user's, not the toolkit's: it is
// in memory for NVRTC and recorded in a manifest.
TEST(Compile, AHeaderIncludedByAbsolutePathIsTheUsersOwn) {
  TempDir dir;
  kjit::testing::write_file(dir / "inc" / "abs.cuh", "#define ABS_VALUE 3\n");
  const std::string source = "#include \"" + (dir / "inc" / "abs.cuh").string() + "\"\n" + kKernel;
  auto t = Template::from_string(source, "abs.cu");
  ASSERT_EQ(t->headers().size(), 1u);
  EXPECT_FALSE(t->headers()[0].from_cuda);
  Engine engine(settings_for(dir));
  EXPECT_EQ(origin_of_k(engine, t, DType::Float32), Origin::Compiled);
  // Rebuilt as a manifest would (its recorded headers only), it compiles too.
  auto rebuilt = Template::from_memory(source, "abs.cu", {{t->headers()[0].include_name, t->headers()[0].bytes}});
  EXPECT_EQ(rebuilt->digest(), t->digest());
  EXPECT_EQ(origin_of_k(engine, rebuilt, DType::Int32), Origin::Compiled);
}

// A template rebuilt from a manifest compiles with no file access: the CUDA headers it includes are
// resolved by kjit and handed to NVRTC in memory, under every spelling they are reached by.
TEST(Compile, AManifestTemplateCompilesWithTheCudaHeadersInMemory) {
  TempDir dir;
  Engine engine(settings_for(dir));
  for (const std::string& include : {std::string("#include <cuda_fp16.h>\n#include <cuda_bf16.h>\n"),
                                     std::string("#include <cooperative_groups.h>\n"),
                                     std::string("#include <cuda/std/cstdint>\n#include <cuda/std/limits>\n")}) {
    SCOPED_TRACE(include);
    auto t = Template::from_memory(include + kKernel, "cuda_headers.cu", {});
    try {
      EXPECT_EQ(origin_of_k(engine, t, DType::Float32), Origin::Compiled);
    } catch (const CompileError& e) {
      ADD_FAILURE() << e.what();
    }
  }
}

// NVRTC 12.9+ caches compiles itself (in the driver's JIT cache): kjit turns that off, so that a compile
// it counts, times and logs is a real one (nvFuser does the same for its ptxas logs).
TEST(Compile, NvrtcsOwnCacheIsOffSoCompilesAreReal) {
  int major = 0, minor = 0;
  NvrtcLibrary::get().nvrtcVersion(&major, &minor);
  const auto spec = add_constant(DType::Float32, 1);
  CompiledBinary bin = Compiler::compile(spec, Compiler::plan(Target::parse("sm_90")));
  const bool has_cache = major > 12 || (major == 12 && minor >= 9);
  EXPECT_EQ(std::count(bin.flags.begin(), bin.flags.end(), "--no-cache"), has_cache ? 1 : 0)
      << "NVRTC " << major << "." << minor;
  EXPECT_EQ(std::count(bin.flags.begin(), bin.flags.end(), "--no-source-include"), 1);
}

// Your own template: an include kjit's scanner cannot see (built by a macro, or an odd spelling) names
// a file NVRTC could open by its absolute path, outside the key. NVRTC runs with no file access: it asks
// for it, and kjit resolves it, hands it over in memory and hashes it (test_computed_includes), so that
// the key follows the file's bytes; NVRTC itself never opens it.
TEST(Compile, AnIncludeTheScannerCannotSeeIsHandedToNvrtcByKjitAndKeyed) {
  TempDir dir;
  const std::string cfg = (dir / "cfg.h").string();
  Engine engine(settings_for(dir));
  int value = 0;
  for (const std::string& include : {"#define CFG \"" + cfg + "\"\n#include CFG\n", "/**/#include \"" + cfg + "\"\n"}) {
    SCOPED_TRACE(include);
    kjit::testing::write_file(dir / "cfg.h", "#define CFG_VALUE " + std::to_string(++value) + "\n");
    auto t = Template::from_string(include + kKernel, "own.cu");
    const Specialization spec(t, "k", {{"T", TemplateArg::type(DType::Float32)}});
    EXPECT_EQ(message_of_compile(engine, spec), "");
    const auto compiled = t->current();
    ASSERT_EQ(compiled->headers().size(), 1u);
    EXPECT_EQ(compiled->headers()[0].include_name, cfg);
    kjit::testing::write_file(dir / "cfg.h", "#define CFG_VALUE 100\n");
    EXPECT_NE(Template::from_string(include + kKernel, "own.cu")->digest(), compiled->digest());
  }
}

// A name a manifest's template includes plainly is looked up among its recorded headers, kjit's
// templates and the CUDA headers: never in the user's KJIT_INCLUDE_PATH (whose files would otherwise be
// read by kjit itself, outside the sandbox, and printed in the compile log).
TEST(Compile, AManifestTemplateReadsNothingFromTheUsersIncludePath) {
  TempDir dir;
  kjit::testing::write_file(dir / "proj" / "notes.env", "TOP_SECRET_LINE_42 leaked;\n");
  kjit::testing::ScopedEnv include_path("KJIT_INCLUDE_PATH", (dir / "proj").string());
  if (settings().include_dirs.empty() || settings().include_dirs[0] != dir / "proj")
    GTEST_SKIP() << "this process read its settings before the test set KJIT_INCLUDE_PATH (ctest runs each test alone)";
  // The user's own template does use KJIT_INCLUDE_PATH.
  EXPECT_EQ(Template::from_string("#include \"notes.env\"\n" + kKernel, "own.cu")->headers().size(), 1u);
  auto t = Template::from_memory("#include \"notes.env\"\n" + kKernel, "recorded.cu", {});
  EXPECT_TRUE(t->headers().empty());
  EXPECT_EQ(t->unresolved_includes(), std::vector<std::string>{"notes.env"});
  Engine engine(settings_for(dir));
  const std::string msg =
      message_of_compile(engine, Specialization(t, "k", {{"T", TemplateArg::type(DType::Float32)}}));
  EXPECT_NE(msg.find("did not find 'notes.env' among the headers recorded"), std::string::npos) << msg;
  EXPECT_EQ(msg.find("TOP_SECRET"), std::string::npos) << msg;
}

// Where the file filter cannot be installed (here: a process whose own seccomp filter refuses
// seccomp()), a template from a manifest is not compiled at all: kjit fails closed.
TEST(Compile, WithoutTheFileFilterAManifestTemplateIsRefused) {
  TempDir dir;
  KJIT_RUN_IN_CHILD([&](kjit::testing::ChildChecks& c) {
    Engine engine(settings_for(dir));
    // Load NVRTC first: what it reads once is read before the filter below.
    engine.prepare(
        Specialization(Template::from_string(kKernel, "warm.cu"), "k", {{"T", TemplateArg::type(DType::Float32)}}),
        Target::parse("sm_90"));
    sock_filter deny_seccomp[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_seccomp, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EPERM),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
    };
    sock_fprog prog{4, deny_seccomp};
    if (!c.check(
            prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0 && syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &prog) == 0,
            "cannot install the test's own filter"))
      return;
    auto t = Template::from_memory(kKernel, "recorded.cu", {});
    try {
      engine.prepare(Specialization(t, "k", {{"T", TemplateArg::type(DType::Int32)}}), Target::parse("sm_90"));
      c.check(false, "compiled without the filter");
    } catch (const Error& e) {
      c.check(std::string(e.what()).find("kjit will not compile") != std::string::npos &&
                  std::string(e.what()).find("cannot stop NVRTC from reading files") != std::string::npos,
              e.what());
    }
    // Your own templates still compile (their headers are kjit's, in memory).
    auto own = Template::from_string(kKernel, "own.cu");
    c.check(origin_of_k(engine, own, DType::Int32) == Origin::Compiled, "own template");
  });
}

// A compile that prints without end: the log that reaches the parent is cut (in the child), and a
// log line that merely mentions "out of memory" does not make a successful compile a failure.
TEST(Compile, AnIsolatedCompilesLogIsBoundedAndItsTextDecidesNothing) {
  if (!compile_children_are_safe()) GTEST_SKIP() << "a sanitizer build compiles in-process: no child, no bounds";
  TempDir dir;
  Engine engine(
      Settings::from_map({{"KJIT_CACHE_DIR", (dir / "cache").string()}, {"KJIT_COMPILE_ISOLATION", "always"}}));
  std::string loud;
  for (int i = 0; i < 120000; ++i)
    loud += "#warning a very long warning line that fills the compile log of this kernel\n";
  auto t = Template::from_string(loud + "#warning catastrophic error: out of memory\n" + kKernel, "loud.cu");
  CompiledBinary bin = Compiler::compile(Specialization(t, "k", {{"T", TemplateArg::type(DType::Float32)}}),
                                         Compiler::plan(Target::parse("sm_90")), engine.settings());
  EXPECT_FALSE(bin.payload.empty());
  EXPECT_LE(bin.log.size(), (4u << 20) + 200);
  EXPECT_NE(bin.log.find("[kjit: the log was cut here, at 4 MiB of "), std::string::npos)
      << bin.log.substr(bin.log.size() - 200);
}

// NVRTC's precompiled header (KJIT_PCH): a file in this process's own folder, the one place the compile
// thread may open files; the binary is the one a compile without it makes, and a probe of any other
// file still finds nothing.
TEST(Compile, APrecompiledHeaderLivesInItsOwnFolderAndChangesNoBinary) {
  if (!NvrtcLibrary::get().has_pch())
    GTEST_SKIP() << "NVRTC " << NvrtcLibrary::get().version() << " has no PCH (12.8+)";
  TempDir dir;
  kjit::testing::write_file(dir / "exists.h", "TOP_SECRET_LINE_42 leaked;\n");
  const std::string q = "\"" + (dir / "exists.h").string() + "\"";
  auto t = Template::from_string(
      "#include <cuda_fp16.h>\n#define CAT(a, b) a##b\n#define HAS CAT(__has_, include)\n#if HAS(" + q +
          ")\n#error THE_FILE_EXISTS\n#endif\n" + kKernel,
      "pch.cu");
  const auto plan = Compiler::plan(Target::parse("sm_90"));
  Settings on = settings_for(dir), off = settings_for(dir);
  on.pch = PchMode::On;
  off.pch = PchMode::Off;
  auto spec = [&](DType d) { return Specialization(t, "k", {{"T", TemplateArg::type(d)}}); };
  const CompiledBinary first = Compiler::compile(spec(DType::Float32), plan, on);
  const auto dir_flag = std::find_if(first.flags.begin(), first.flags.end(),
                                     [](const std::string& f) { return f.rfind("--pch-dir=", 0) == 0; });
  ASSERT_NE(dir_flag, first.flags.end()) << "compiled without the PCH";
  const fs::path pch_dir = dir_flag->substr(10);
  std::size_t pch_files = 0;
  for (const auto& e : fs::directory_iterator(pch_dir))
    if (e.path().extension() == ".pch") ++pch_files;
  EXPECT_GE(pch_files, 1u) << "NVRTC made no precompiled header in " << pch_dir;
  EXPECT_EQ(fs::status(pch_dir).permissions() & fs::perms::all, fs::perms::owner_all);
  // The next specialization (which uses it) and the same one without it: the binaries a plain compile makes.
  const CompiledBinary second = Compiler::compile(spec(DType::Float64), plan, on);
  EXPECT_EQ(second.payload, Compiler::compile(spec(DType::Float64), plan, off).payload);
  EXPECT_EQ(first.payload, Compiler::compile(spec(DType::Float32), plan, off).payload);
}
