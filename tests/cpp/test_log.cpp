// Structured log events of the engine and the cache (compiles, disk loads, stores, evictions, strict
// misses, damaged entries) through kjit::log's event sink, their deferral under the cache's per-key lock,
// and the per-kernel counters. Compile-only for a named architecture: no GPU needed.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <mutex>
#include <vector>

#include "kjit/engine.hpp"
#include "kjit/error.hpp"
#include "kjit/log.hpp"
#include "kjit/settings.hpp"
#include "engine_support.hpp"
#include "log_capture.hpp"
#include "test_support.hpp"

using namespace kjit;
using kjit::testing::TempDir;

using kjit::testing::prepared_origin;
namespace {

// Keeps every event and warning for the test's lifetime.
class CapturedLog {
 public:
  std::vector<log::Event> of_kind(const std::string& kind) const {
    std::vector<log::Event> out;
    for (const auto& e : events_.kept())
      if (e.kind == kind) out.push_back(e);
    return out;
  }
  std::vector<std::string> warnings() const { return warnings_.messages(); }

 private:
  kjit::testing::EventCapture events_;
  kjit::testing::WarningCapture warnings_;
};

Settings settings_for(const TempDir& dir, std::vector<std::pair<std::string, std::string>> more = {}) {
  std::map<std::string, std::string> env{{"KJIT_CACHE_DIR", (dir / "cache").string()}};
  for (auto& [k, v] : more) env[k] = v;
  return Settings::from_map(env);
}

Specialization add_constant(DType t, int vec) {
  return Specialization(Template::builtin("add_constant"), "add_constant",
                        {{"T", TemplateArg::type(t)}, {"VEC", TemplateArg::integer(vec)}});
}

}  // namespace

TEST(Log, CompileDiskLoadAndStoreAreEventsWithTheirData) {
  TempDir dir;
  CapturedLog captured;
  const Specialization spec = add_constant(DType::Float32, 4);
  const Target sm80 = Target::parse("sm_80");
  std::string key;
  {
    Engine engine(settings_for(dir));
    Origin p_origin;
    const auto p = engine.prepare(spec, sm80, &p_origin);
    ASSERT_EQ(p_origin, Origin::Compiled);
    key = p->key.hex();
  }
  const auto compiles = captured.of_kind("compile");
  ASSERT_EQ(compiles.size(), 1u);
  const log::Event& c = compiles[0];
  EXPECT_EQ(c.level, log::Level::Info);
  EXPECT_EQ(c.key, key);
  EXPECT_EQ(c.template_name, "add_constant");
  EXPECT_EQ(c.kernel, spec.name_expression());
  EXPECT_EQ(c.target, "sm_80");
  EXPECT_EQ(c.origin, "compiled");
  EXPECT_GT(c.ms, 0.0);
  // Today's KJIT_VERBOSE line, unchanged.
  EXPECT_EQ(c.message.rfind("compiled " + spec.describe() + " for sm_80 in ", 0), 0u) << c.message;

  const auto stores = captured.of_kind("cache_store");
  ASSERT_EQ(stores.size(), 1u);
  EXPECT_EQ(stores[0].level, log::Level::Debug);
  EXPECT_EQ(stores[0].key, key);
  EXPECT_EQ(stores[0].kernel, spec.name_expression());

  // A new engine (a new process, as far as memory goes) finds it on disk.
  Engine again(settings_for(dir));
  Origin p_origin;
  const auto p = again.prepare(spec, sm80, &p_origin);
  ASSERT_EQ(p_origin, Origin::Disk);
  const auto loads = captured.of_kind("disk_load");
  ASSERT_EQ(loads.size(), 1u);
  EXPECT_EQ(loads[0].level, log::Level::Debug);
  EXPECT_EQ(loads[0].key, key);
  EXPECT_EQ(loads[0].origin, "disk");
  EXPECT_EQ(loads[0].target, "sm_80");
  EXPECT_GE(loads[0].ms, 0.0);
}

TEST(Log, StrictMissAndDamagedEntryAreEvents) {
  TempDir dir;
  CapturedLog captured;
  const Specialization spec = add_constant(DType::Float64, 2);
  const Target sm90 = Target::parse("sm_90");
  {
    Engine strict(settings_for(dir, {{"KJIT_CACHE_MODE", "strict"}}));
    EXPECT_THROW(strict.prepare(spec, sm90), CacheMissError);
  }
  const auto misses = captured.of_kind("strict_miss");
  ASSERT_EQ(misses.size(), 1u);
  EXPECT_EQ(misses[0].level, log::Level::Warning);
  EXPECT_EQ(misses[0].kernel, spec.name_expression());
  EXPECT_EQ(misses[0].target, "sm_90");
  EXPECT_EQ(misses[0].key.size(), 64u);

  // Damage the entry a compile wrote: the next engine warns (warning sink) and logs it with the key.
  Engine engine(settings_for(dir));
  Origin p_origin;
  const auto p = engine.prepare(spec, sm90, &p_origin);
  std::filesystem::path entry;
  for (auto& f : std::filesystem::recursive_directory_iterator(dir / "cache"))
    if (f.path().extension() == ".kjit") entry = f.path();
  ASSERT_FALSE(entry.empty());
  {
    std::ofstream(entry, std::ios::binary | std::ios::trunc) << "not an entry";
  }
  Engine fresh(settings_for(dir));
  EXPECT_EQ(prepared_origin(fresh, spec, sm90), Origin::Compiled);
  const auto damaged = captured.of_kind("cache_damaged");
  ASSERT_EQ(damaged.size(), 1u);
  EXPECT_EQ(damaged[0].level, log::Level::Warning);
  EXPECT_EQ(damaged[0].key, p->key.hex());
  EXPECT_EQ(damaged[0].target, "sm_90");
  // Still a warning (warnings.warn in Python), with the same text.
  const auto warnings = captured.warnings();
  EXPECT_NE(std::find(warnings.begin(), warnings.end(), damaged[0].message), warnings.end());
}

TEST(Log, EvictionIsAnEvent) {
  TempDir dir;
  CapturedLog captured;
  // Room for about one entry: the second store evicts the first.
  Engine engine(settings_for(dir, {{"KJIT_CACHE_MAX_BYTES", "4096"}}));
  engine.prepare(add_constant(DType::Float32, 1), Target::parse("sm_80"));
  engine.prepare(add_constant(DType::Float32, 2), Target::parse("sm_80"));
  const auto evictions = captured.of_kind("cache_evict");
  ASSERT_EQ(evictions.size(), 1u);
  EXPECT_NE(evictions[0].message.find("evicted 1 least recently used entries"), std::string::npos)
      << evictions[0].message;
}

// Under a Deferred (what DiskCache holds around its per-key lock) nothing reaches a sink until the
// outermost one ends; then everything does, in order, warnings included.
TEST(Log, DeferredDeliversWhenTheOutermostScopeEnds) {
  CapturedLog captured;
  {
    log::Deferred outer;
    {
      log::Deferred inner;
      log::info(1, "first");
      log::warn("second");
    }
    EXPECT_TRUE(captured.of_kind("info").empty());
    EXPECT_TRUE(captured.warnings().empty());
    log::info(2, "third");
  }
  const auto infos = captured.of_kind("info");
  ASSERT_EQ(infos.size(), 2u);
  EXPECT_EQ(infos[0].message, "first");
  EXPECT_EQ(infos[0].level, log::Level::Info);
  EXPECT_EQ(infos[1].message, "third");
  EXPECT_EQ(infos[1].level, log::Level::Debug);
  ASSERT_EQ(captured.warnings(), std::vector<std::string>{"second"});
  ASSERT_EQ(captured.of_kind("warning").size(), 1u);
}

TEST(KernelStats, CountsCompilesAndDiskLoadsPerKernel) {
  TempDir dir;
  const Specialization f32 = add_constant(DType::Float32, 4);
  const Specialization f16 = add_constant(DType::Float16, 4);
  const Target sm80 = Target::parse("sm_80");
  {
    Engine engine(settings_for(dir));
    engine.prepare(f32, sm80);
    engine.prepare(f16, sm80);
    engine.prepare(f16, Target::parse("sm_90"));
    const auto k = engine.kernel_stats();
    ASSERT_EQ(k.size(), 2u);
    EXPECT_EQ(k.at(f32.name_expression()).compiles, 1u);
    EXPECT_EQ(k.at(f16.name_expression()).compiles, 2u);
    EXPECT_GT(k.at(f16.name_expression()).compile_ms, 0.0);
    EXPECT_EQ(k.at(f16.name_expression()).disk_loads, 0u);
    double sum = 0;
    for (const auto& [name, s] : k) sum += s.compile_ms;
    EXPECT_NEAR(sum, engine.stats().compile_ms, 0.01);
  }
  Engine engine(settings_for(dir));
  engine.prepare(f16, sm80);
  auto k = engine.kernel_stats();
  ASSERT_EQ(k.size(), 1u);
  EXPECT_EQ(k.at(f16.name_expression()).disk_loads, 1u);
  EXPECT_EQ(k.at(f16.name_expression()).compiles, 0u);
  EXPECT_GE(k.at(f16.name_expression()).load_ms, 0.0);
  engine.reset_stats();
  EXPECT_TRUE(engine.kernel_stats().empty());
}

TEST(KernelStats, IsBoundedAndSumsTheRest) {
  TempDir dir;
  Engine engine(settings_for(dir));
  engine.set_kernel_stats_limit(3);
  for (int vec : {1, 2, 4, 8}) engine.prepare(add_constant(DType::Float32, vec), Target::parse("sm_80"));
  const auto k = engine.kernel_stats();
  ASSERT_EQ(k.size(), 3u);
  EXPECT_EQ(k.at(add_constant(DType::Float32, 1).name_expression()).compiles, 1u);
  EXPECT_EQ(k.at(add_constant(DType::Float32, 2).name_expression()).compiles, 1u);
  EXPECT_EQ(k.at(StatsBook::kOtherKernels).compiles, 2u);
  EXPECT_THROW(engine.set_kernel_stats_limit(0), ValueError);
}
