// Compiles in child processes (KJIT_COMPILE_ISOLATION=always, and every template from a manifest) fork a
// process whose other threads keep working: no such thread may be inside NVRTC at the fork, or the child
// inherits NVRTC mid-call (a lock held, a lazy initialization half done) and its compile can wait until
// the compile timer kills it (seen once: a `kjit export` on 2 threads stalled after 5 of 6 entries).
// Here NVRTC is a forwarding stand-in (tests/cpp/nvrtc_fork_watch) that counts forks made while another
// thread is inside an NVRTC call: one thread compiles in children while another plans compiles (what each
// compile does first), in one Engine, as `kjit warm`/`export` threads do.
#include <gtest/gtest.h>

#include <dlfcn.h>

#include <atomic>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "kjit/compile_sandbox.hpp"
#include "kjit/compiler.hpp"
#include "kjit/engine.hpp"
#include "kjit/kernel_family.hpp"
#include "kjit/nvrtc_library.hpp"
#include "test_support.hpp"

using namespace kjit;
using kjit::testing::TempDir;

// One test in this binary: the stand-in must be the NVRTC this process loads, before anything loads one.
TEST(ForkSafety, NoThreadIsInsideNvrtcWhenACompileChildIsForked) {
  if (!compile_children_are_safe()) GTEST_SKIP() << "compiles run in-process under a sanitizer";
  ASSERT_FALSE(NvrtcLibrary::loaded());
  ASSERT_EQ(::setenv("KJIT_TEST_REAL_NVRTC", KJIT_REAL_NVRTC, 1), 0);
  ASSERT_EQ(::setenv("KJIT_NVRTC_LIBRARY", KJIT_NVRTC_FORK_WATCH, 1), 0);
  TempDir dir("kjit-fork-safety");
  Engine engine(Settings::from_map({{"KJIT_CACHE_DIR", (dir / "cache").string()},
                                    {"KJIT_CACHE_MODE", "off"},
                                    {"KJIT_COMPILE_ISOLATION", "always"}}));
  ASSERT_EQ(NvrtcLibrary::get().path(), KJIT_NVRTC_FORK_WATCH);
  KernelFamily family(engine, Template::builtin("add_constant"), "add_constant");
  const Target target = Target::parse("sm_90");

  std::atomic<bool> done{false};
  std::atomic<long> plans{0};
  std::string planner_error;
  std::thread planner([&] {
    try {
      while (!done.load()) {
        (void)Compiler::plan(target);
        plans.fetch_add(1);
      }
    } catch (const std::exception& e) {
      planner_error = e.what();
    }
  });
  const int vecs[] = {1, 2, 4, 8};
  const DType types[] = {DType::Float32, DType::Float64, DType::Int32};
  int compiled = 0;
  std::string error;
  try {
    for (DType t : types)
      for (int vec : vecs) {
        const TemplateArg args[] = {TemplateArg::type(t), TemplateArg::integer(vec)};
        Prepared p = engine.prepare(family.specialization(args, 2), target);
        EXPECT_EQ(p.origin, Origin::Compiled);
        ++compiled;
      }
  } catch (const std::exception& e) {
    error = e.what();
  }
  done.store(true);
  planner.join();
  ASSERT_TRUE(error.empty()) << error;
  ASSERT_TRUE(planner_error.empty()) << planner_error;
  EXPECT_EQ(compiled, 12);
  EXPECT_GT(plans.load(), 0);

  using Count = int (*)(char*, int);
  void* watch = ::dlopen(KJIT_NVRTC_FORK_WATCH, RTLD_NOW | RTLD_NOLOAD);
  ASSERT_NE(watch, nullptr);
  auto count = reinterpret_cast<Count>(::dlsym(watch, "kjit_test_forks_inside_nvrtc"));
  ASSERT_NE(count, nullptr);
  char last[128] = {};
  EXPECT_EQ(count(last, sizeof last), 0) << "compile children were forked while another thread was inside "
                                         << last << " (after " << plans.load() << " plans)";
  ::dlclose(watch);
}
