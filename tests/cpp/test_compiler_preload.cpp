// The compiler preload (compiler_preload.hpp) as the settings have it. Each test reads the process's settings
// for the first time (ctest runs every test in a process of its own); run together in one process, a test
// that finds them read already skips. Its forks: test_fork_safety.cpp.
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>

#include "kjit/compile_sandbox.hpp"
#include "kjit/compiler_preload.hpp"
#include "kjit/nvrtc_library.hpp"
#include "kjit/settings.hpp"
#include "kjit/usable_cpus.hpp"
#include "test_support.hpp"

using namespace kjit;
using kjit::testing::ScopedEnv;

TEST(CompilerPreload, StrictModeLoadsNoNvrtcButStillFindsTheToolkit) {
  if (usable_cpus() < 2) GTEST_SKIP() << "the preload runs only with two usable CPUs or more";
  ScopedEnv mode("KJIT_CACHE_MODE", "strict");
  if (settings().cache_mode != CacheMode::Strict) GTEST_SKIP() << "settings read already: run it alone (ctest does)";
  ASSERT_FALSE(NvrtcLibrary::loaded());
  ASSERT_TRUE(preload_compiler(90));
  wait_for_compiler_preload();
  ASSERT_TRUE(compiler_preload_report().has_value());
  EXPECT_FALSE(compiler_preload_report()->compiled);
  EXPECT_FALSE(NvrtcLibrary::loaded()) << "strict mode never loads NVRTC, the preload neither";
}

TEST(CompilerPreload, IsolatedCompilesMeanNoCompileInProcessButNvrtcIsLoaded) {
  if (usable_cpus() < 2) GTEST_SKIP() << "the preload runs only with two usable CPUs or more";
  ScopedEnv isolation("KJIT_COMPILE_ISOLATION", "always");
  if (settings().compile_isolation != CompileIsolation::Always)
    GTEST_SKIP() << "settings read already: run it alone (ctest does)";
  ASSERT_TRUE(preload_compiler(90));
  wait_for_compiler_preload();
  ASSERT_TRUE(compiler_preload_report().has_value());
  EXPECT_FALSE(compiler_preload_report()->compiled);
  EXPECT_TRUE(NvrtcLibrary::loaded());
}

TEST(CompilerPreload, TurnedOffItStartsNothing) {
  ScopedEnv off("KJIT_PRELOAD_COMPILER", "0");
  if (settings().preload_compiler) GTEST_SKIP() << "settings read already: run it alone (ctest does)";
  EXPECT_FALSE(preload_compiler(90));
  wait_for_compiler_preload();  // returns at once
  EXPECT_FALSE(compiler_preload_report().has_value());
  EXPECT_FALSE(NvrtcLibrary::loaded());
}

TEST(CompilerPreload, ByDefaultItLoadsNvrtcAndCompilesOnceForAnyTarget) {
  if (usable_cpus() < 2) GTEST_SKIP() << "the preload runs only with two usable CPUs or more";
  if (!settings().preload_compiler || settings().cache_mode == CacheMode::Strict)
    GTEST_SKIP() << "run with the default settings";
  // A target newer than any NVRTC (PTX for its newest compute_XY, as kjit's compiles plan it).
  ASSERT_TRUE(preload_compiler(990));
  wait_for_compiler_preload();
  ASSERT_TRUE(compiler_preload_report().has_value());
  EXPECT_TRUE(compiler_preload_report()->compiled);
  EXPECT_GT(compiler_preload_report()->ms, 0);
  EXPECT_TRUE(preload_compiler(90)) << "one preload per process, reported to every caller";
}

TEST(CompilerPreload, AForkedChildHasNoPreloadOfItsOwnToWaitFor) {
  if (!compile_children_are_safe()) GTEST_SKIP() << "no fork from threads under a sanitizer";
  if (usable_cpus() < 2) GTEST_SKIP() << "the preload runs only with two usable CPUs or more";
  if (!settings().preload_compiler) GTEST_SKIP() << "run with the default settings";
  ASSERT_TRUE(preload_compiler(90));
  const pid_t pid = ::fork();  // while the preload starts or works (then the fork waits for it)
  if (pid == 0) {
    ::alarm(20);                  // a child that waited for a thread it does not have would hang
    wait_for_compiler_preload();  // returns at once: the child has no preload thread
    _exit(0);
  }
  ASSERT_GT(pid, 0);
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFEXITED(status)) << "the child was killed (signal " << WTERMSIG(status) << ")";
  EXPECT_EQ(WEXITSTATUS(status), 0);
  wait_for_compiler_preload();  // the parent's goes on
  ASSERT_TRUE(compiler_preload_report().has_value());
  EXPECT_TRUE(compiler_preload_report()->compiled);
}

TEST(CompilerPreload, AProcessThatExitsWhileItRunsEndsCleanly) {
  if (!compile_children_are_safe()) GTEST_SKIP() << "no fork from threads under a sanitizer";
  if (usable_cpus() < 2) GTEST_SKIP() << "the preload runs only with two usable CPUs or more";
  if (!settings().preload_compiler) GTEST_SKIP() << "run with the default settings";
  // C++ programs that start the preload and call exit() a little later each (0 to 16 ms: the preload locates
  // the toolkit, loads NVRTC, whose constructors register its destructors, then compiles), so that some exit
  // while NVRTC loads. exit() must wait for the preload before any static object goes (once, an exit handler
  // waited too late: about one exit in 200 crashed in NVRTC's constructors). Four at a time.
  constexpr int kPrograms = 48, kAtOnce = 4;
  for (int first = 0; first < kPrograms; first += kAtOnce) {
    pid_t pids[kAtOnce];
    int delays_us[kAtOnce];
    for (int j = 0; j < kAtOnce; ++j) {
      delays_us[j] = (first + j) * 16000 / kPrograms;
      pids[j] = ::fork();
      if (pids[j] == 0) {
        ::alarm(60);
        preload_compiler(90);
        if (delays_us[j] > 0) ::usleep(delays_us[j]);
        std::exit(0);
      }
      ASSERT_GT(pids[j], 0);
    }
    for (int j = 0; j < kAtOnce; ++j) {
      int status = 0;
      ASSERT_EQ(::waitpid(pids[j], &status, 0), pids[j]);
      EXPECT_TRUE(WIFEXITED(status)) << "the program that exited after " << delays_us[j] << " us was killed (signal "
                                     << WTERMSIG(status) << ")";
      EXPECT_TRUE(!WIFEXITED(status) || WEXITSTATUS(status) == 0)
          << "the program that exited after " << delays_us[j] << " us exited with " << WEXITSTATUS(status);
    }
  }
}
