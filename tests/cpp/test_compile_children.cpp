// Compile children kept for reuse (CompileChildren, used by `kjit warm`/`export` -j N): a thread's child
// serves the jobs of one template (lineage) only, a child that failed a job is never reused, one that
// died while idle costs the next job nothing, and none outlives its CompileChildren. Also the job's bytes
// on the child's socket (encode/decode of NvrtcJob). Real NVRTC, real child processes; no GPU.
#include <gtest/gtest.h>

#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "kjit/compile_sandbox.hpp"
#include "kjit/engine.hpp"
#include "kjit/cuda_toolkit.hpp"
#include "kjit/error.hpp"
#include "kjit/nvrtc_job.hpp"
#include "test_support.hpp"

using namespace kjit;

namespace {

NvrtcJob job_for(const std::string& body, const std::string& name = "k") {
  NvrtcJob job;
  job.source = "__global__ void " + name + "(int* p) { " + body + " }\n";
  job.program_name = name + ".cu";
  job.name_expression = name;
  job.flags = {"-arch=sm_90", "--std=c++17"};
  return job;
}

// The live children of this thread (the ones it forked): /proc's children list, less any that exited.
std::vector<pid_t> children_of_this_thread() {
  const std::string path = "/proc/self/task/" + std::to_string(::syscall(SYS_gettid)) + "/children";
  std::ifstream in(path);
  std::vector<pid_t> out;
  for (long pid; in >> pid;) out.push_back(static_cast<pid_t>(pid));
  return out;
}

bool is_zombie(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  std::getline(in, line);
  const auto close = line.rfind(')');
  return close != std::string::npos && line.size() > close + 2 && line[close + 2] == 'Z';
}

bool proc_children_listed() {
  return std::ifstream("/proc/self/task/" + std::to_string(::syscall(SYS_gettid)) + "/children").good();
}

bool have_nvrtc() {
  try {
    (void)cuda_toolkit();
    return true;
  } catch (const Error&) {
    return false;
  }
}

const CompileBounds kBounds{60, 8ull << 30, true};

}  // namespace

TEST(CompileChildren, AJobCrossesTheSocketIntactAndDamagedBytesAreRefused) {
  NvrtcJob job = job_for("p[0] = 1;");
  job.headers = {{"a.h", std::string("#pragma once\n\0binary", 20)}, {"dir/b.cuh", ""}};
  job.flags.push_back("-DX=\"1 2\"");
  job.want_cubin = false;
  const std::string bytes = encode(job);
  NvrtcJob back;
  ASSERT_TRUE(decode(bytes, back));
  EXPECT_EQ(back.source, job.source);
  EXPECT_EQ(back.program_name, job.program_name);
  EXPECT_EQ(back.name_expression, job.name_expression);
  EXPECT_EQ(back.headers, job.headers);
  EXPECT_EQ(back.flags, job.flags);
  EXPECT_FALSE(back.want_cubin);
  for (std::size_t cut : {std::size_t{0}, std::size_t{7}, bytes.size() / 2, bytes.size() - 1}) {
    NvrtcJob part;
    EXPECT_FALSE(decode(bytes.substr(0, cut), part)) << "decoded " << cut << " of " << bytes.size() << " bytes";
  }
  NvrtcJob longer;
  EXPECT_FALSE(decode(bytes + "x", longer)) << "trailing bytes were accepted";
  // A header count larger than the bytes could hold is refused before anything is allocated for it.
  NvrtcJob one = job_for("");
  one.headers = {{"h", "x"}};
  one.want_cubin = false;  // its field is "0": the first field "1" is the header count
  std::string forged = encode(one);
  const std::string::size_type at =
      forged.find(std::string("\x01\0\0\0\0\0\0\0"
                              "1",
                              9));
  ASSERT_NE(at, std::string::npos);
  forged.replace(at, 9,
                 std::string("\x09\0\0\0\0\0\0\0"
                             "999999999",
                             17));
  NvrtcJob bad;
  EXPECT_FALSE(decode(forged, bad));
  EXPECT_TRUE(decode(encode(one), bad));
  EXPECT_EQ(bad.headers, one.headers);
}

TEST(CompileChildren, AThreadKeepsOneChildPerTemplateAndEndsItAfterwards) {
  if (!compile_children_are_safe()) GTEST_SKIP() << "a sanitizer build compiles in-process: no child";
  if (!have_nvrtc()) GTEST_SKIP() << "no CUDA toolkit";
  {
    CompileChildren keep;
    for (int i = 0; i < 3; ++i) {
      const NvrtcOutcome out =
          run_nvrtc_in_child(job_for("p[0] = " + std::to_string(i) + ";"), kBounds, "job", "template-a");
      ASSERT_TRUE(out.ok()) << out.log;
      EXPECT_FALSE(out.payload.empty());
    }
    EXPECT_EQ(keep.started(), 1u) << "three jobs of one template took more than one child";
    if (proc_children_listed()) EXPECT_EQ(children_of_this_thread().size(), 1u);
    // Another template's job never goes to that child, nor does the first template's next job go to
    // the child that compiled the other's.
    ASSERT_TRUE(run_nvrtc_in_child(job_for("p[0] = 7;"), kBounds, "job", "template-b").ok());
    EXPECT_EQ(keep.started(), 2u);
    ASSERT_TRUE(run_nvrtc_in_child(job_for("p[0] = 8;"), kBounds, "job", "template-a").ok());
    EXPECT_EQ(keep.started(), 3u);
    // Nor one under another memory limit.
    CompileBounds more = kBounds;
    more.memory_bytes = 9ull << 30;
    ASSERT_TRUE(run_nvrtc_in_child(job_for("p[0] = 9;"), more, "job", "template-a").ok());
    EXPECT_EQ(keep.started(), 4u);
    if (proc_children_listed()) EXPECT_EQ(children_of_this_thread().size(), 1u) << "a replaced child lives on";
  }
  if (proc_children_listed())
    EXPECT_TRUE(children_of_this_thread().empty()) << "the kept child outlived CompileChildren";
  // Without a CompileChildren, each compile has a child of its own, gone when it returns.
  ASSERT_TRUE(run_nvrtc_in_child(job_for("p[0] = 1;"), kBounds, "job", "template-a").ok());
  if (proc_children_listed()) EXPECT_TRUE(children_of_this_thread().empty());
}

TEST(CompileChildren, ACompileErrorKeepsTheChildButATimeLimitEndsIt) {
  if (!compile_children_are_safe()) GTEST_SKIP() << "a sanitizer build compiles in-process: no child";
  if (!have_nvrtc()) GTEST_SKIP() << "no CUDA toolkit";
  CompileChildren keep;
  const NvrtcOutcome bad = run_nvrtc_in_child(job_for("p[0] = undeclared;"), kBounds, "job", "t");
  EXPECT_FALSE(bad.ok());
  EXPECT_NE(bad.log.find("undeclared"), std::string::npos) << bad.log;
  ASSERT_TRUE(run_nvrtc_in_child(job_for("p[0] = 1;"), kBounds, "job", "t").ok());
  EXPECT_EQ(keep.started(), 1u) << "an ordinary compile error should not cost the child";

  // 2^40 terms after macro expansion: the compile runs until the time limit stops it.
  std::string slow = "#define A0 1\n";
  for (int i = 1; i <= 40; ++i)
    slow += "#define A" + std::to_string(i) + " (A" + std::to_string(i - 1) + " + A" + std::to_string(i - 1) + ")\n";
  NvrtcJob endless = job_for("p[0] = 1;");
  endless.source = slow + "__device__ long x = A40;\n" + endless.source;
  CompileBounds short_limit = kBounds;
  short_limit.timeout_s = 1;
  try {
    run_nvrtc_in_child(endless, short_limit, "the endless job", "t");
    FAIL() << "compiled";
  } catch (const CompileError& e) {
    EXPECT_NE(std::string(e.what()).find("took longer than kjit's limit of 1 s"), std::string::npos) << e.what();
  }
  if (proc_children_listed()) EXPECT_TRUE(children_of_this_thread().empty()) << "the stopped child was kept";
  ASSERT_TRUE(run_nvrtc_in_child(job_for("p[0] = 2;"), kBounds, "job", "t").ok());
  EXPECT_EQ(keep.started(), 2u);
}

// A kept child's address space still holds what its earlier compiles left: a job that runs out of memory
// there is tried once more in a fresh child (with the whole limit) before it is called too big.
TEST(CompileChildren, AJobThatRunsOutOfMemoryInAKeptChildIsTriedOnceInAFreshOne) {
  if (!compile_children_are_safe()) GTEST_SKIP() << "a sanitizer build compiles in-process: no child";
  if (!have_nvrtc()) GTEST_SKIP() << "no CUDA toolkit";
  CompileChildren keep;
  CompileBounds small = kBounds;
  small.memory_bytes = 200ull << 20;
  small.timeout_s = 120;
  ASSERT_TRUE(run_nvrtc_in_child(job_for("p[0] = 1;"), small, "job", "t").ok());
  ASSERT_EQ(keep.started(), 1u);
  // 2^40 terms after macro expansion: the compiler's memory grows until the limit stops it.
  std::string grows = "#define A0 1\n";
  for (int i = 1; i <= 40; ++i)
    grows += "#define A" + std::to_string(i) + " (A" + std::to_string(i - 1) + " + A" + std::to_string(i - 1) + ")\n";
  NvrtcJob big = job_for("p[0] = 1;");
  big.source = grows + "__device__ long x = A40;\n" + big.source;
  try {
    run_nvrtc_in_child(big, small, "the growing job", "t");
    FAIL() << "compiled";
  } catch (const CompileError& e) {
    EXPECT_NE(std::string(e.what()).find("200 MiB"), std::string::npos) << e.what();
  }
  EXPECT_EQ(keep.started(), 2u) << "the kept child's failure was not tried again in a fresh one";
  ASSERT_TRUE(run_nvrtc_in_child(job_for("p[0] = 2;"), small, "job", "t").ok());
  EXPECT_EQ(keep.started(), 3u) << "a child that ran out of memory was kept";
}

TEST(CompileChildren, AKeptChildThatDiedWhileIdleCostsTheNextJobNothing) {
  if (!compile_children_are_safe()) GTEST_SKIP() << "a sanitizer build compiles in-process: no child";
  if (!have_nvrtc()) GTEST_SKIP() << "no CUDA toolkit";
  if (!proc_children_listed()) GTEST_SKIP() << "/proc lists no children here (CONFIG_PROC_CHILDREN)";
  CompileChildren keep;
  ASSERT_TRUE(run_nvrtc_in_child(job_for("p[0] = 1;"), kBounds, "job", "t").ok());
  const std::vector<pid_t> kept = children_of_this_thread();
  ASSERT_EQ(kept.size(), 1u);
  ASSERT_EQ(::kill(kept[0], SIGKILL), 0);  // as the OOM killer would
  // Once it is dead (a zombie until reaped), the next job must not be lost to it.
  for (int i = 0; i < 500 && !is_zombie(kept[0]); ++i) ::usleep(10000);
  ASSERT_TRUE(is_zombie(kept[0]));
  const NvrtcOutcome out = run_nvrtc_in_child(job_for("p[0] = 2;"), kBounds, "job", "t");
  EXPECT_TRUE(out.ok()) << out.status_text << out.log;
  EXPECT_EQ(keep.started(), 2u);
  const std::vector<pid_t> now = children_of_this_thread();
  ASSERT_EQ(now.size(), 1u);
  EXPECT_NE(now[0], kept[0]);
}

TEST(CompileChildren, TheInnermostOnAThreadIsUsedAndTheOuterOneComesBack) {
  if (!compile_children_are_safe()) GTEST_SKIP() << "a sanitizer build compiles in-process: no child";
  if (!have_nvrtc()) GTEST_SKIP() << "no CUDA toolkit";
  CompileChildren outer;
  ASSERT_TRUE(run_nvrtc_in_child(job_for("p[0] = 1;"), kBounds, "job", "t").ok());
  {
    CompileChildren inner;
    ASSERT_TRUE(run_nvrtc_in_child(job_for("p[0] = 2;"), kBounds, "job", "t").ok());
    EXPECT_EQ(inner.started(), 1u);
  }
  ASSERT_TRUE(run_nvrtc_in_child(job_for("p[0] = 3;"), kBounds, "job", "t").ok());
  EXPECT_EQ(outer.started(), 1u) << "the outer keeper's child was not reused after the inner one ended";
}

// A manifest's records of one template may each carry macro text of their own (defines): a record whose
// macros subverted NVRTC must not compile the next record of that template, which differs only there.
TEST(CompileChildren, RecordsOfOneTemplateWithOtherMacrosNeverShareAChild) {
  if (!compile_children_are_safe()) GTEST_SKIP() << "a sanitizer build compiles in-process: no child";
  if (!have_nvrtc()) GTEST_SKIP() << "no CUDA toolkit";
  kjit::testing::TempDir dir("kjit-lineage");
  Engine engine(
      Settings::from_map({{"KJIT_CACHE_DIR", (dir / "cache").string()}, {"KJIT_COMPILE_ISOLATION", "always"}}));
  const Target sm90 = Target::parse("sm_90");
  auto spec = [](const char* value, int vec) {
    CompileOptions o;
    o.defines["KJIT_TEST_MACRO"] = value;
    return Specialization(Template::builtin("add_constant"), "add_constant",
                          {{"T", TemplateArg::type(DType::Float32)}, {"VEC", TemplateArg::integer(vec)}}, o);
  };
  CompileChildren keep;
  engine.prepare(spec("1", 1), sm90);
  engine.prepare(spec("1", 2), sm90);
  EXPECT_EQ(keep.started(), 1u) << "typed template arguments alone should keep the child";
  engine.prepare(spec("2", 2), sm90);
  EXPECT_EQ(keep.started(), 2u) << "another record's macros were compiled by the same child";
}
