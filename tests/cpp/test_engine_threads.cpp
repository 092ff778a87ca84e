// Threads (issue 7): 8 threads share ONE Engine and, released together, resolve overlapping
// specializations of the built-in add_constant template compile-only for sm_90 (no GPU), through the
// calls the Python layer makes (KernelFamily::specialization + Engine::prepare), while another thread
// reads the counters. Checked: with a disk cache each distinct key is compiled exactly once; with the
// cache off, threads that miss a key while it compiles share that compile; every thread holds the same
// key and compile result for the same specialization; the counters add up; nothing throws; a compile
// error reaches every thread. Also the hot-path table (find/remember) under concurrent writers and
// readers. Run under ThreadSanitizer by .ci/tsan.sh (GPU counterpart: gpu_test_engine_threads.cpp).
#include <gtest/gtest.h>

#include <atomic>
#include <cstdio>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "kjit/engine.hpp"
#include "kjit/error.hpp"
#include "kjit/kernel_family.hpp"
#include "start_line.hpp"
#include "engine_support.hpp"
#include "test_support.hpp"

using namespace kjit;
using kjit::testing::TempDir;
namespace fs = std::filesystem;

using kjit::testing::prepared_origin;
namespace {

constexpr int kThreads = 8;
constexpr int kRounds = 2;  // with a disk cache, the second round finds everything cached

struct Spec {
  DType t;
  int vec;
};
// 10 distinct keys.
const std::vector<Spec> kSpecs = {
    {DType::Float32, 1}, {DType::Float32, 2}, {DType::Float32, 4},  {DType::Float64, 1},  {DType::Float64, 2},
    {DType::Float16, 2}, {DType::Float16, 8}, {DType::BFloat16, 4}, {DType::BFloat16, 8}, {DType::Int32, 4},
};
const int kKeys = static_cast<int>(kSpecs.size());

using kjit::testing::run_together;
using kjit::testing::StartLine;

struct Result {
  int spec = -1;
  Origin origin = Origin::Memory;
  std::shared_ptr<const SpecializedKernel> prepared;
};

struct Outcome {
  int rounds = 0;
  std::vector<std::vector<Result>> per_thread;  // [thread] -> what it got, in request order
  std::vector<std::string> errors;              // one per thread that threw
  std::string reader_error;                     // from the stats reader
  std::uint64_t reader_samples = 0;
  EngineStats final_stats;
};

// Thread i starts its round at key (i % 4) * 3 % kKeys: threads i and i + 4 begin on the same key, and
// each key is requested by every thread every round, so several threads miss the same key at once.
// Even threads use the shared KernelFamily; odd ones load their own Template and KernelFamily after the
// start (concurrent template loading and family interning; the same bytes make the same cache keys).
// Each thread requests every key `rounds` times. `max_compiles`: the most the stats reader may ever see.
Outcome run_threads(Engine& engine, const Target& target, int rounds, std::uint64_t max_compiles) {
  auto shared_template = Template::builtin("add_constant");
  KernelFamily shared_family(engine, shared_template, "add_constant");

  Outcome out;
  out.rounds = rounds;
  out.per_thread.resize(kThreads);
  std::vector<std::string> errors(kThreads);
  std::atomic<bool> done{false};
  StartLine start(kThreads + 1);  // + the stats reader

  std::thread reader([&] {
    start.arrive_and_wait();
    EngineStats last;
    std::uint64_t samples = 0;
    auto check = [&](const EngineStats& s) {
      if (s.compiles < last.compiles || s.disk_hits < last.disk_hits || s.memory_hits < last.memory_hits ||
          s.compile_ms < last.compile_ms)
        out.reader_error = "a counter went down between two reads";
      if (s.compiles > max_compiles)
        out.reader_error = "more compiles (" + std::to_string(s.compiles) + ") than " + std::to_string(max_compiles);
      last = s;
      ++samples;
    };
    while (!done.load(std::memory_order_acquire) && out.reader_error.empty()) {
      check(engine.stats());
      (void)engine.disk().describe();  // the cache state, read under its own lock
      std::this_thread::yield();
    }
    check(engine.stats());
    out.reader_samples = samples;
  });

  std::vector<std::thread> workers;
  for (int i = 0; i < kThreads; ++i) {
    workers.emplace_back([&, i] {
      start.arrive_and_wait();
      try {
        std::unique_ptr<KernelFamily> own;
        if (i % 2) own = std::make_unique<KernelFamily>(engine, Template::builtin("add_constant"), "add_constant");
        const KernelFamily& family = own ? *own : shared_family;
        const int first = (i % 4) * 3 % kKeys;
        for (int round = 0; round < rounds; ++round) {
          for (int j = 0; j < kKeys; ++j) {
            const int s = (first + j) % kKeys;
            const TemplateArg args[] = {TemplateArg::type(kSpecs[s].t), TemplateArg::integer(kSpecs[s].vec)};
            Specialization spec = family.specialization(args, 2);
            Origin origin;
            auto p = engine.prepare(spec, target, &origin);
            out.per_thread[i].push_back({s, origin, std::move(p)});
          }
        }
      } catch (const std::exception& e) {
        errors[i] = "thread " + std::to_string(i) + ": " + e.what();
      }
    });
  }
  for (auto& w : workers) w.join();
  done.store(true, std::memory_order_release);
  reader.join();
  for (auto& e : errors)
    if (!e.empty()) out.errors.push_back(e);
  out.final_stats = engine.stats();
  return out;
}

bool same_meta(const cache::EntryMetadata& a, const cache::EntryMetadata& b) {
  return a.template_name == b.template_name && a.template_digest == b.template_digest && a.kernel == b.kernel &&
         a.name_expression == b.name_expression && a.lowered_name == b.lowered_name && a.options == b.options &&
         a.target == b.target && a.requested_target == b.requested_target && a.nvrtc_version == b.nvrtc_version &&
         a.output == b.output && a.compile_ms == b.compile_ms && a.created == b.created;
}

// What holds in every mode: no error, one key per specialization (distinct between specializations),
// the right kernel for it, and every request counted once as a compile or a hit.
void check_common(const Outcome& out) {
  for (const auto& e : out.errors) ADD_FAILURE() << e;
  EXPECT_TRUE(out.reader_error.empty()) << out.reader_error;
  EXPECT_GE(out.reader_samples, 1u);
  std::map<int, cache::CacheKey> key_of;
  std::size_t requests = 0;
  for (int i = 0; i < kThreads; ++i) {
    ASSERT_EQ(out.per_thread[i].size(), static_cast<std::size_t>(out.rounds * kKeys)) << "thread " << i;
    for (const Result& r : out.per_thread[i]) {
      ++requests;
      auto [it, first] = key_of.emplace(r.spec, r.prepared->key);
      EXPECT_EQ(it->second, r.prepared->key) << "thread " << i << " got another key for spec " << r.spec;
      const std::string expr =
          std::string("add_constant<") + dtype_cpp(kSpecs[r.spec].t) + ", " + std::to_string(kSpecs[r.spec].vec) + ">";
      EXPECT_EQ(r.prepared->meta.name_expression, expr);
      EXPECT_EQ(r.prepared->meta.target, "sm_90");
      EXPECT_EQ(r.prepared->meta.output, cache::OutputKind::Cubin);
      EXPECT_FALSE(r.prepared->meta.lowered_name.empty());
    }
  }
  std::set<std::string> distinct;
  for (const auto& [s, k] : key_of) distinct.insert(k.hex());
  EXPECT_EQ(distinct.size(), static_cast<std::size_t>(kKeys)) << "two specializations share a key";
  const EngineStats& st = out.final_stats;
  EXPECT_EQ(st.compiles + st.disk_hits + st.memory_hits, requests)
      << "compiles " << st.compiles << " disk hits " << st.disk_hits << " memory hits " << st.memory_hits;
  EXPECT_EQ(st.strict_misses, 0u);
  EXPECT_GT(st.compile_ms, 0.0);
}

// Exactly one compile per key, and every thread holds the metadata of that one compile.
void check_compiled_once(const Outcome& out) {
  std::map<int, const Result*> compiled;
  for (int i = 0; i < kThreads; ++i)
    for (const Result& r : out.per_thread[i])
      if (r.origin == Origin::Compiled) {
        auto [it, first] = compiled.emplace(r.spec, &r);
        EXPECT_TRUE(first) << "spec " << r.spec << " (" << r.prepared->meta.name_expression
                           << ") was compiled more than once (again by thread " << i << ")";
      }
  EXPECT_EQ(compiled.size(), static_cast<std::size_t>(kKeys));
  EXPECT_EQ(out.final_stats.compiles, static_cast<std::uint64_t>(kKeys));
  for (int i = 0; i < kThreads; ++i)
    for (const Result& r : out.per_thread[i]) {
      auto it = compiled.find(r.spec);
      if (it == compiled.end()) continue;
      EXPECT_TRUE(same_meta(r.prepared->meta, it->second->prepared->meta))
          << "thread " << i << " got another compile of " << r.prepared->meta.name_expression << " (compiled in "
          << r.prepared->meta.compile_ms << " ms at " << r.prepared->meta.created << ", the first in "
          << it->second->prepared->meta.compile_ms << " ms)";
    }
}

std::size_t count_files(const fs::path& root, const std::string& extension) {
  std::size_t n = 0;
  std::error_code ec;
  if (!fs::exists(root, ec)) return 0;
  for (auto it = fs::recursive_directory_iterator(root, ec); !ec && it != fs::recursive_directory_iterator();
       it.increment(ec))
    if (it->path().extension() == extension) ++n;
  return n;
}

}  // namespace

TEST(EngineThreads, EightThreadsOneDiskCacheCompileEachKeyOnce) {
  TempDir dir("kjit-threads");
  Engine engine(Settings::from_map({{"KJIT_CACHE_DIR", (dir / "cache").string()}}));
  const Outcome out = run_threads(engine, Target::parse("sm_90"), kRounds, kKeys);
  check_common(out);
  check_compiled_once(out);
  // Every other request shared a compile in flight (memory) or found the entry on disk.
  EXPECT_EQ(out.final_stats.disk_hits + out.final_stats.memory_hits,
            static_cast<std::uint64_t>(kThreads * kRounds * kKeys - kKeys));
  EXPECT_GT(out.final_stats.disk_hits, 0u);  // the second round, at least
  // One entry per key on disk, each valid and holding the binary every thread was told about.
  EXPECT_EQ(count_files(dir / "cache", ".kjit"), static_cast<std::size_t>(kKeys));
  EXPECT_EQ(count_files(dir / "cache", ".tmp"), 0u);
  EXPECT_EQ(count_files(dir / "cache", ".lock"), 0u);
  for (const Result& r : out.per_thread[0]) {
    auto e = engine.disk().load(r.prepared->key, "sm_90");
    ASSERT_TRUE(e) << r.prepared->meta.name_expression;
    EXPECT_TRUE(same_meta(e->meta, r.prepared->meta));
    ASSERT_GE(e->payload.size(), 4u);
    EXPECT_EQ(e->payload.substr(0, 4),
              "\x7f"
              "ELF")
        << "the entry's payload is not a cubin";
  }
}

// No disk cache (and so no per-key file lock): only the engine keeps threads that miss the same key at
// once from compiling it again. prepare() keeps no memory table (compile_only() does), so a key requested again after
// its compile finished is compiled again: the exact count depends on timing, but a thread that arrives while the key is
// compiling shares that compile (origin "memory"), and then it holds exactly that compile's result.
TEST(EngineThreads, EightThreadsCacheOffShareCompilesInFlight) {
  TempDir dir("kjit-threads");
  Engine engine(Settings::from_map({{"KJIT_CACHE_DIR", (dir / "cache").string()}, {"KJIT_CACHE_MODE", "off"}}));
  const std::uint64_t requests = kThreads * kKeys;  // one round: a second would only compile again
  const Outcome out = run_threads(engine, Target::parse("sm_90"), 1, requests);
  check_common(out);
  const EngineStats& st = out.final_stats;
  std::printf("cache off: %llu requests, %llu compiles, %llu shared a compile in flight\n",
              static_cast<unsigned long long>(requests), static_cast<unsigned long long>(st.compiles),
              static_cast<unsigned long long>(st.memory_hits));
  EXPECT_EQ(st.disk_hits, 0u);
  EXPECT_GE(st.compiles, static_cast<std::uint64_t>(kKeys));
  // 8 threads released together on overlapping keys: without in-process sharing every request compiles.
  EXPECT_LT(st.compiles, requests) << "no thread shared a compile in flight";
  EXPECT_EQ(st.memory_hits, requests - st.compiles);
  std::map<std::string, std::vector<const cache::EntryMetadata*>> compiles_of;  // by key
  for (const auto& results : out.per_thread)
    for (const Result& r : results)
      if (r.origin == Origin::Compiled) compiles_of[r.prepared->key.hex()].push_back(&r.prepared->meta);
  EXPECT_EQ(compiles_of.size(), static_cast<std::size_t>(kKeys));
  for (int i = 0; i < kThreads; ++i)
    for (const Result& r : out.per_thread[i]) {
      const auto& mine = compiles_of[r.prepared->key.hex()];
      bool found = false;
      for (const cache::EntryMetadata* m : mine) found = found || same_meta(*m, r.prepared->meta);
      EXPECT_TRUE(found) << "thread " << i << " holds " << r.prepared->meta.name_expression << " (origin "
                         << to_string(r.origin) << ") from no compile any thread reported";
      if (!mine.empty()) EXPECT_EQ(r.prepared->meta.lowered_name, mine.front()->lowered_name);
    }
  EXPECT_FALSE(fs::exists(dir / "cache"));
}

// A template that does not compile, missed by 8 threads at once: each gets the CompileError with the
// NVRTC log (shared from a compile in flight or its own), nothing is cached, the engine stays usable.
TEST(EngineThreads, EightThreadsMissingABrokenKernelEachGetTheCompileError) {
  TempDir dir("kjit-threads");
  Engine engine(Settings::from_map({{"KJIT_CACHE_DIR", (dir / "cache").string()}}));
  auto broken = Template::from_string(
      "template <typename T>\n__global__ void broken(T* p) {\n  p[0] = undefined_symbol;\n}\n", "broken.cu");
  KernelFamily family(engine, broken, "broken");
  const Target sm90 = Target::parse("sm_90");
  std::vector<std::string> got(kThreads);
  run_together(kThreads, [&](int i) {
    const TemplateArg arg = TemplateArg::type(DType::Float32);
    try {
      engine.prepare(family.specialization(&arg, 1), sm90);
      got[i] = "no error";
    } catch (const CompileError& e) {
      got[i] = e.log().find("undefined_symbol") != std::string::npos ? "CompileError" : "log: " + e.log();
    } catch (const std::exception& e) {
      got[i] = std::string("another error: ") + e.what();
    }
  });
  for (int i = 0; i < kThreads; ++i) EXPECT_EQ(got[i], "CompileError") << "thread " << i;
  EXPECT_EQ(engine.stats().compiles, 0u);
  EXPECT_EQ(count_files(dir / "cache", ".kjit"), 0u);
  EXPECT_EQ(count_files(dir / "cache", ".lock"), 0u);
  const TemplateArg args[] = {TemplateArg::type(DType::Float32), TemplateArg::integer(4)};
  KernelFamily good(engine, Template::builtin("add_constant"), "add_constant");
  EXPECT_EQ(prepared_origin(engine, good.specialization(args, 2), sm90), Origin::Compiled);
}

// The hot-path table: writers remember() while readers find() through KernelFamily (as every cached launch
// does), and family ids are interned from many threads. Needs no NVRTC and no GPU.
TEST(EngineThreads, HotPathTableUnderConcurrentRememberAndFind) {
  TempDir dir("kjit-threads");
  Engine engine(Settings::from_map({{"KJIT_CACHE_DIR", (dir / "cache").string()}, {"KJIT_CACHE_MODE", "off"}}));
  auto tmpl = Template::builtin("add_constant");
  constexpr int kDevices = 4, kVecs = 16;
  std::vector<std::string> errors(kThreads);
  std::vector<std::uint64_t> family_ids(kThreads);
  run_together(kThreads, [&](int i) {
    KernelFamily family(engine, tmpl, "add_constant");  // interned: the same id in every thread
    family_ids[i] = engine.family_id(*tmpl, "add_constant", {});
    for (int pass = 0; pass < 50; ++pass) {
      for (int d = 0; d < kDevices; ++d) {
        for (int v = 0; v < kVecs; ++v) {
          const TemplateArg args[] = {TemplateArg::type(DType::Float32), TemplateArg::integer(v)};
          if (auto hit = family.find(args, 2, d)) {
            if (hit->meta.name_expression != "vec=" + std::to_string(v) + " device=" + std::to_string(d))
              errors[i] = "find returned another entry: " + hit->meta.name_expression;
            continue;
          }
          if ((v + d + i) % 2) continue;  // half of the threads write each slot
          SpecKey key;
          key.family = family_ids[i];
          key.device = d;
          key.nargs = 2;
          key.args[0] = args[0].word();
          key.args[1] = args[1].word();
          auto loaded = std::make_shared<SpecializedKernel>();
          loaded->meta.name_expression = "vec=" + std::to_string(v) + " device=" + std::to_string(d);
          engine.remember(key, std::move(loaded));
        }
      }
    }
  });
  for (const auto& e : errors) EXPECT_TRUE(e.empty()) << e;
  for (int i = 1; i < kThreads; ++i) EXPECT_EQ(family_ids[i], family_ids[0]);
  KernelFamily family(engine, tmpl, "add_constant");
  for (int d = 0; d < kDevices; ++d)
    for (int v = 0; v < kVecs; ++v) {
      const TemplateArg args[] = {TemplateArg::type(DType::Float32), TemplateArg::integer(v)};
      EXPECT_NE(family.find(args, 2, d), nullptr) << "vec " << v << " device " << d;
    }
  EXPECT_EQ(engine.stats().compiles, 0u);
}
