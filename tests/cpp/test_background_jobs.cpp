// BackgroundJobs (the threads of Engine::prepare_ahead) and prepare_ahead itself: jobs run, at most N at
// once, exceptions are dropped, drain() waits, a forked child neither waits for its parent's threads nor
// loses its own jobs; an op's backward compiled ahead is compiled once, into the disk, and found there.
// No GPU: the engine part compiles for sm_90 only.
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <chrono>
#include <stdexcept>
#include <thread>

#include "kjit/background_jobs.hpp"
#include "kjit/cache/manifest.hpp"
#include "kjit/engine.hpp"
#include "kjit/error.hpp"
#include "kjit/kernel_family.hpp"
#include "test_support.hpp"

using namespace kjit;
using kjit::testing::TempDir;
using namespace std::chrono_literals;
namespace fs = std::filesystem;

TEST(BackgroundJobs, RunsEveryJobOnAtMostItsThreadsAndDropsTheirExceptions) {
  BackgroundJobs jobs(2);
  std::atomic<int> ran{0}, now{0}, most{0};
  for (int i = 0; i < 12; ++i)
    ASSERT_TRUE(jobs.submit([&, i] {
      const int in = ++now;
      for (int seen = most.load(); in > seen && !most.compare_exchange_weak(seen, in);) {
      }
      std::this_thread::sleep_for(5ms);
      --now;
      ++ran;
      if (i % 3 == 0) throw std::runtime_error("dropped");
    }));
  jobs.drain();
  EXPECT_EQ(ran.load(), 12);
  EXPECT_EQ(most.load(), 2) << "two threads should have run jobs side by side, never more";
  EXPECT_EQ(jobs.pending(), 0u);
  // Threads end when the work runs out; new work starts them again.
  ASSERT_TRUE(jobs.submit([&] { ++ran; }));
  jobs.drain();
  EXPECT_EQ(ran.load(), 13);
}

TEST(BackgroundJobs, WithNoThreadsNothingRuns) {
  BackgroundJobs jobs(0);
  bool ran = false;
  EXPECT_FALSE(jobs.submit([&] { ran = true; }));
  jobs.drain();
  EXPECT_FALSE(ran);
}

TEST(BackgroundJobs, TheDestructorWaitsForRunningJobs) {
  std::atomic<bool> finished{false};
  {
    BackgroundJobs jobs(1);
    jobs.submit([&] {
      std::this_thread::sleep_for(50ms);
      finished = true;
    });
  }
  EXPECT_TRUE(finished.load());
}

TEST(BackgroundJobs, AForkedChildNeitherWaitsForItsParentsThreadsNorLosesItsOwnJobs) {
#if defined(__SANITIZE_THREAD__)
  GTEST_SKIP() << "ThreadSanitizer does not support starting threads in the child of a multithreaded fork";
#endif
  BackgroundJobs jobs(1);
  std::atomic<bool> release{false}, started{false};
  jobs.submit([&] {
    started = true;  // off the queue's lock from here on
    while (!release.load()) std::this_thread::sleep_for(1ms);
  });
  while (!started.load()) std::this_thread::sleep_for(1ms);
  const pid_t pid = ::fork();
  if (pid == 0) {
    // The parent's job runs in the parent only; here drain() returns, and a new job runs.
    jobs.drain();
    std::atomic<bool> ran{false};
    jobs.submit([&] { ran = true; });
    jobs.drain();
    ::_exit(ran.load() ? 0 : 1);
  }
  ASSERT_GT(pid, 0);
  int status = -1;
  for (int i = 0; i < 1000 && ::waitpid(pid, &status, WNOHANG) == 0; ++i) std::this_thread::sleep_for(10ms);
  if (!WIFEXITED(status)) {
    ::kill(pid, SIGKILL);
    ::waitpid(pid, &status, 0);
  }
  release = true;
  jobs.drain();
  ASSERT_TRUE(WIFEXITED(status)) << "the child hung waiting for its parent's thread";
  EXPECT_EQ(WEXITSTATUS(status), 0) << "the child's own job did not run";
}

TEST(BackgroundJobs, StopDropsTheQueuedJobsWaitsForTheRunningOneAndRefusesMore) {
  BackgroundJobs jobs(1);
  std::atomic<bool> release{false}, started{false};
  std::atomic<int> ran{0};
  jobs.submit([&] {
    started = true;
    while (!release.load()) std::this_thread::sleep_for(1ms);
    ++ran;
  });
  for (int i = 0; i < 5; ++i) jobs.submit([&] { ++ran; });
  while (!started.load()) std::this_thread::sleep_for(1ms);
  std::thread releaser([&] {
    std::this_thread::sleep_for(20ms);
    release = true;
  });
  jobs.stop();
  releaser.join();
  EXPECT_EQ(ran.load(), 1) << "the queued jobs ran at stop(), or the running one was not waited for";
  EXPECT_FALSE(jobs.submit([&] { ++ran; }));
  jobs.drain();
  EXPECT_EQ(ran.load(), 1);
}

namespace {

Specialization add_spec(DType t, int vec) {
  return Specialization(Template::builtin("add_constant"), "add_constant",
                        {{"T", TemplateArg::type(t)}, {"VEC", TemplateArg::integer(vec)}});
}

SpecKey key_of(int n) {
  SpecKey k;
  k.family = 0xbac;
  k.nargs = 1;
  k.args[0] = static_cast<std::uint64_t>(n);
  return k;
}

}  // namespace

TEST(PrepareAhead, CompilesOnceIntoTheDiskWhereTheLaterCallFindsIt) {
  TempDir dir("kjit-ahead");
  Engine engine(Settings::from_map({{"KJIT_CACHE_DIR", (dir / "cache").string()}}));
  if (engine.background_jobs().threads() == 0) GTEST_SKIP() << "one usable CPU: nothing is prepared ahead";
  const Target sm90 = Target::parse("sm_90");
  const Specialization spec = add_spec(DType::Float32, 4);
  engine.prepare_ahead(key_of(1), spec, sm90);
  engine.drain_background_jobs();
  EXPECT_EQ(engine.stats().compiles, 1u);
  Origin later_origin;
  const auto later = engine.prepare(spec, sm90, &later_origin);
  EXPECT_EQ(later_origin, Origin::Disk);
  // A caller that wants it while it compiles ahead shares that compile (whichever of the two claims
  // the key first compiles it; the other waits for it).
  const Specialization other = add_spec(DType::Float64, 2);
  engine.prepare_ahead(key_of(4), other, sm90);
  Origin now_origin;
  const auto now = engine.prepare(other, sm90, &now_origin);
  engine.drain_background_jobs();
  EXPECT_EQ(engine.stats().compiles, 2u) << "the second specialization compiled twice: ahead and by the caller";
  EXPECT_EQ(engine.prepare(other, sm90)->key, now->key);
  // Asked again under the same key: nothing happens (not even a disk lookup).
  const auto before = engine.stats();
  engine.prepare_ahead(key_of(1), spec, sm90);
  engine.drain_background_jobs();
  EXPECT_EQ(engine.stats().disk_hits, before.disk_hits);
  EXPECT_EQ(engine.stats().compiles, before.compiles);
}

TEST(PrepareAhead, WhatIsPreparedAheadIsRecordedOnlyWhenUsed) {
  TempDir dir("kjit-ahead-record");
  const fs::path manifest = dir / "manifest.json";
  Engine engine(Settings::from_map({{"KJIT_CACHE_DIR", (dir / "cache").string()}, {"KJIT_RECORD", manifest.string()}}));
  if (engine.background_jobs().threads() == 0) GTEST_SKIP() << "one usable CPU: nothing is prepared ahead";
  const Target sm90 = Target::parse("sm_90");
  engine.prepare_ahead(key_of(5), add_spec(DType::Float32, 8), sm90);  // a backward that never runs
  engine.drain_background_jobs();
  EXPECT_EQ(engine.stats().compiles, 1u);
  EXPECT_TRUE(!fs::exists(manifest) || cache::read_manifest(manifest).records().empty())
      << "a kernel compiled ahead but never used went into the manifest";
  engine.prepare(add_spec(DType::Float32, 8), sm90);  // used: recorded now
  EXPECT_EQ(cache::read_manifest(manifest).records().size(), 1u);
}

TEST(PrepareAhead, ABadSpecializationIsLeftForTheCallThatWantsIt) {
  TempDir dir("kjit-ahead-bad");
  Engine engine(Settings::from_map({{"KJIT_CACHE_DIR", (dir / "cache").string()}}));
  if (engine.background_jobs().threads() == 0) GTEST_SKIP() << "one usable CPU: nothing is prepared ahead";
  const Target sm90 = Target::parse("sm_90");
  const Specialization bad = add_spec(DType::Float32, 3);  // the template's static_assert refuses VEC=3
  engine.prepare_ahead(key_of(2), bad, sm90);
  engine.drain_background_jobs();
  EXPECT_THROW(engine.prepare(bad, sm90), CompileError);
}

TEST(PrepareAhead, NothingIsDoneWhereTheResultCouldNotBeKept) {
  for (const char* mode : {"readonly", "strict", "off"}) {
    TempDir dir("kjit-ahead-mode");
    Engine engine(Settings::from_map({{"KJIT_CACHE_DIR", (dir / "cache").string()}, {"KJIT_CACHE_MODE", mode}}));
    engine.prepare_ahead(key_of(3), add_spec(DType::Float32, 2), Target::parse("sm_90"));
    engine.drain_background_jobs();
    EXPECT_EQ(engine.stats().compiles, 0u) << mode;
    EXPECT_EQ(engine.background_jobs().pending(), 0u) << mode;
  }
}
