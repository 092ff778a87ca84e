// kjit::trace ranges as an NVTX tool sees them: a real injection (tests/cpp/nvtx_recorder, loaded by
// NVTX from NVTX_INJECTION64_PATH, as nsys loads its own) records "kjit compile <name expression>"
// around a compile and "kjit load <name expression>" around a disk-cache read; the hook a profiler
// binding installs (torch.profiler's, in Python) sees the same ranges. Compile-only: no GPU needed.
#include <gtest/gtest.h>
#include <dlfcn.h>
#include <stdlib.h>

#include <string>
#include <vector>

#include "kjit/engine.hpp"
#include "kjit/trace.hpp"
#include "engine_support.hpp"
#include "test_support.hpp"

using namespace kjit;
using kjit::testing::TempDir;

using kjit::testing::prepared_origin;
namespace {

std::vector<std::string>* hook_log = nullptr;

void* hook_begin(const std::string& name) noexcept {
  hook_log->push_back("begin " + name);
  return hook_log;
}
void hook_end(void* handle) noexcept { static_cast<std::vector<std::string>*>(handle)->push_back("end"); }

}  // namespace

// One test in this binary: NVTX reads NVTX_INJECTION64_PATH once, at the process's first NVTX call.
TEST(Trace, CompileAndLoadAreNamedRangesForNvtxAndTheHook) {
  ASSERT_EQ(::setenv("NVTX_INJECTION64_PATH", KJIT_NVTX_RECORDER, 1), 0);
  void* recorder = ::dlopen(KJIT_NVTX_RECORDER, RTLD_NOW);
  ASSERT_NE(recorder, nullptr) << ::dlerror();
  auto recorded = reinterpret_cast<const char* (*)()>(::dlsym(recorder, "kjit_nvtx_recorded"));
  ASSERT_NE(recorded, nullptr);

  std::vector<std::string> hooked;
  hook_log = &hooked;
  trace::Hook hook;
  hook.begin = &hook_begin;
  hook.end = &hook_end;
  trace::set_hook(hook);

  TempDir dir;
  const Specialization spec(Template::builtin("add_constant"), "add_constant",
                            {{"T", TemplateArg::type(DType::Float32)}, {"VEC", TemplateArg::integer(4)}});
  const std::string name = spec.name_expression();
  {
    Engine engine(Settings::from_map({{"KJIT_CACHE_DIR", (dir / "cache").string()}}));
    ASSERT_EQ(prepared_origin(engine, spec, Target::parse("sm_80")), Origin::Compiled);
  }
  Engine again(Settings::from_map({{"KJIT_CACHE_DIR", (dir / "cache").string()}}));
  ASSERT_EQ(prepared_origin(again, spec, Target::parse("sm_80")), Origin::Disk);
  trace::set_hook({});

  // The miss looks on disk (a short load range), compiles; the second engine loads from disk.
  const std::string expected =
      "push kjit load " + name + "\npop\npush kjit compile " + name + "\npop\npush kjit load " + name + "\npop\n";
  EXPECT_EQ(std::string(recorded()), expected);
  const std::vector<std::string> hook_expected{"begin kjit load " + name, "end", "begin kjit compile " + name, "end",
                                               "begin kjit load " + name, "end"};
  EXPECT_EQ(hooked, hook_expected);
}
