// ShapePolicy: at most KJIT_MAX_SPECIALIZATIONS distinct values of a shape parameter are specialized per
// kernel; later values run the generic variant (0), with one warning per (kernel, parameter).
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <thread>
#include <vector>

#include "cache_test_helpers.hpp"
#include "kjit/engine.hpp"
#include "kjit/error.hpp"
#include "kjit/shape_policy.hpp"
#include "test_support.hpp"

using namespace kjit;
using kjit::testing::TempDir;
using kjit::testing::WarningCapture;

TEST(ShapePolicy, AdmitsUpToTheLimitThenRoutesToGeneric) {
  WarningCapture warnings;
  ShapePolicy policy(4);
  EXPECT_EQ(policy.max_values(), 4);
  for (std::int64_t v : {128, 256, 512, 1024}) EXPECT_EQ(policy.admit("softmax", "D", v), v);
  EXPECT_EQ(policy.admit("softmax", "D", 2048), 0);
  EXPECT_EQ(policy.admit("softmax", "D", 4096), 0);
  // Values admitted before saturation stay specialized.
  for (std::int64_t v : {128, 256, 512, 1024}) EXPECT_EQ(policy.admit("softmax", "D", v), v);
  // Routed to generic once: still generic later.
  EXPECT_EQ(policy.admit("softmax", "D", 2048), 0);
  EXPECT_EQ(warnings.count(), 1u) << warnings.all();
}

TEST(ShapePolicy, RepeatedValuesCountOnce) {
  ShapePolicy policy(2);
  for (int i = 0; i < 100; ++i) {
    EXPECT_EQ(policy.admit("k", "N", 7), 7);
    EXPECT_EQ(policy.admit("k", "N", 9), 9);
  }
  auto r = policy.report();
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].specialized_values, 2u);
  EXPECT_EQ(r[0].generic_values, 0u);
  EXPECT_TRUE(r[0].saturated);  // full: the next new value runs generic
}

TEST(ShapePolicy, WarnsOncePerKernelAndParameterWithTheExactMessage) {
  WarningCapture warnings;
  ShapePolicy policy(16);
  for (std::int64_t v = 1; v <= 40; ++v) policy.admit("softmax", "D", v * 64);
  ASSERT_EQ(warnings.count(), 1u) << warnings.all();
  EXPECT_EQ(warnings.messages()[0],
            "kernel 'softmax' has been specialized on 16 distinct values of D (KJIT_MAX_SPECIALIZATIONS=16); "
            "further values run its generic variant (D as a runtime argument). Raise KJIT_MAX_SPECIALIZATIONS to "
            "specialize more.");
  // Another parameter of the same kernel, another kernel: each warns once of its own.
  for (std::int64_t v = 1; v <= 20; ++v) policy.admit("softmax", "ROWS", v);
  for (std::int64_t v = 1; v <= 20; ++v) policy.admit("layer_norm", "D", v);
  ASSERT_EQ(warnings.count(), 3u) << warnings.all();
  EXPECT_NE(warnings.messages()[1].find("kernel 'softmax'"), std::string::npos);
  EXPECT_NE(warnings.messages()[1].find("values of ROWS"), std::string::npos);
  EXPECT_NE(warnings.messages()[2].find("kernel 'layer_norm'"), std::string::npos);
}

TEST(ShapePolicy, ReportCountsSortedByKernelThenParameter) {
  WarningCapture warnings;
  ShapePolicy policy(3);
  for (std::int64_t v : {1, 2, 3, 4, 5, 5, 5, 6, 4}) policy.admit("zeta", "N", v);
  policy.admit("alpha", "W", 10);
  policy.admit("alpha", "H", 20);
  policy.admit("alpha", "H", 21);
  const auto r = policy.report();
  ASSERT_EQ(r.size(), 3u);
  EXPECT_EQ(r[0].kernel, "alpha");
  EXPECT_EQ(r[0].param, "H");
  EXPECT_EQ(r[0].specialized_values, 2u);
  EXPECT_EQ(r[0].generic_values, 0u);
  EXPECT_FALSE(r[0].saturated);
  EXPECT_EQ(r[1].kernel, "alpha");
  EXPECT_EQ(r[1].param, "W");
  EXPECT_EQ(r[1].specialized_values, 1u);
  EXPECT_EQ(r[2].kernel, "zeta");
  EXPECT_EQ(r[2].param, "N");
  EXPECT_EQ(r[2].specialized_values, 3u);
  EXPECT_EQ(r[2].generic_values, 3u);  // 4, 5, 6: each distinct value once
  EXPECT_TRUE(r[2].saturated);
  EXPECT_EQ(warnings.count(), 1u);
}

TEST(ShapePolicy, ZeroIsTheGenericVariantAndCountsNothing) {
  WarningCapture warnings;
  ShapePolicy policy(1);
  EXPECT_EQ(policy.admit("k", "N", 0), 0);
  EXPECT_TRUE(policy.report().empty());
  EXPECT_EQ(policy.admit("k", "N", 5), 5);  // 0 did not take the only slot
  EXPECT_EQ(policy.admit("k", "N", 0), 0);
  const auto r = policy.report();
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].specialized_values, 1u);
  EXPECT_EQ(r[0].generic_values, 0u);
  EXPECT_EQ(warnings.count(), 0u) << warnings.all();  // asking for generic is not a saturation
}

TEST(ShapePolicy, ResetForgetsEverything) {
  WarningCapture warnings;
  ShapePolicy policy(1);
  EXPECT_EQ(policy.admit("k", "N", 1), 1);
  EXPECT_EQ(policy.admit("k", "N", 2), 0);
  policy.reset();
  EXPECT_TRUE(policy.report().empty());
  EXPECT_EQ(policy.admit("k", "N", 2), 2);
  EXPECT_EQ(policy.admit("k", "N", 1), 0);
  EXPECT_EQ(warnings.count(), 2u);  // the reset policy warns again when it saturates again
}

TEST(ShapePolicy, RejectsANonPositiveLimit) {
  EXPECT_THROW(ShapePolicy(0), ValueError);
  EXPECT_THROW(ShapePolicy(-1), ValueError);
}

TEST(ShapePolicy, ThreadsAdmitExactlyTheLimit) {
  WarningCapture warnings;
  constexpr int kMax = 16, kThreads = 8, kValues = 64;
  ShapePolicy policy(kMax);
  std::atomic<bool> go{false};
  std::vector<std::vector<std::int64_t>> admitted(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      while (!go.load()) std::this_thread::yield();
      for (int round = 0; round < 20; ++round)
        for (int i = 0; i < kValues; ++i) {
          const std::int64_t v = 1 + (i * 7 + t * 3) % kValues;  // overlapping, in different orders
          const std::int64_t got = policy.admit("race", "N", v);
          ASSERT_TRUE(got == v || got == 0) << got;
          if (got == v) admitted[t].push_back(v);
        }
    });
  }
  go = true;
  for (auto& th : threads) th.join();
  std::vector<std::int64_t> all;
  for (auto& a : admitted) all.insert(all.end(), a.begin(), a.end());
  std::sort(all.begin(), all.end());
  all.erase(std::unique(all.begin(), all.end()), all.end());
  EXPECT_EQ(all.size(), static_cast<std::size_t>(kMax));
  const auto r = policy.report();
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].specialized_values, static_cast<std::size_t>(kMax));
  EXPECT_EQ(r[0].generic_values, static_cast<std::uint64_t>(kValues - kMax));
  EXPECT_TRUE(r[0].saturated);
  EXPECT_EQ(warnings.count(), 1u) << warnings.all();
  // Every value is consistently one or the other afterwards.
  for (std::int64_t v = 1; v <= kValues; ++v) {
    const bool was_admitted = std::binary_search(all.begin(), all.end(), v);
    EXPECT_EQ(policy.admit("race", "N", v), was_admitted ? v : 0);
  }
}

TEST(ShapePolicy, EngineTakesTheLimitFromSettings) {
  TempDir dir;
  Engine engine(Settings::from_map({{"KJIT_CACHE_DIR", (dir / "cache").string()}, {"KJIT_MAX_SPECIALIZATIONS", "3"}}));
  EXPECT_EQ(engine.shape_policy().max_values(), 3);
  WarningCapture warnings;
  for (std::int64_t v : {10, 20, 30}) EXPECT_EQ(engine.shape_policy().admit("k", "N", v), v);
  EXPECT_EQ(engine.shape_policy().admit("k", "N", 40), 0);
  EXPECT_EQ(warnings.count(), 1u);
  EXPECT_NE(warnings.all().find("KJIT_MAX_SPECIALIZATIONS=3"), std::string::npos) << warnings.all();

  // The policy is state, not a counter: reset_stats() keeps it.
  engine.reset_stats();
  EXPECT_EQ(engine.shape_policy().report().at(0).specialized_values, 3u);
  EXPECT_EQ(engine.shape_policy().admit("k", "N", 40), 0);

  Engine defaults(Settings::from_map({{"KJIT_CACHE_DIR", (dir / "cache").string()}}));
  EXPECT_EQ(defaults.shape_policy().max_values(), 16);
}

TEST(ShapePolicy, GenericValuesAreTrackedUpToACapThenCounted) {
  WarningCapture warnings;
  ShapePolicy policy(1);
  const auto cap = static_cast<std::int64_t>(ShapePolicy::kMaxTrackedGenericValues);
  policy.admit("k", "N", -1);  // the one specialized value
  for (std::int64_t v = 1; v <= cap; ++v) policy.admit("k", "N", v);
  for (std::int64_t v = 1; v <= cap; ++v) policy.admit("k", "N", v);  // tracked: not counted again
  EXPECT_EQ(policy.report().at(0).generic_values, static_cast<std::uint64_t>(cap));
  policy.admit("k", "N", cap + 1);  // past the cap: every call counts
  policy.admit("k", "N", cap + 1);
  EXPECT_EQ(policy.report().at(0).generic_values, static_cast<std::uint64_t>(cap + 2));
  EXPECT_EQ(warnings.count(), 1u);
}
