// GPU threads (issue 7; ctest label `gpu`, skips without a device): 8 threads share ONE Engine, each on
// its own CUDA stream, resolve overlapping add_constant specializations for the device's architecture
// through KernelFamily::get (compiling the misses) and launch them, while another thread reads the
// counters. Checked: every result against a CPU reference, one compile per distinct key, the same loaded
// kernel for the same key in every thread, the counters add up. Meant to run under ThreadSanitizer too
// (.ci/tsan.sh on the GPU machine).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "device_buffer.hpp"
#include "gpu_test.hpp"
#include "host_half.hpp"
#include "kjit/driver_library.hpp"
#include "kjit/kernel_family.hpp"
#include "start_line.hpp"
#include "test_support.hpp"

using namespace kjit;
using kjit::testing::DeviceBuffer;
using kjit::testing::TempDir;

namespace {

constexpr int kThreads = 8;
constexpr int kRounds = 2;  // the second round is all memory hits, with other constants (no recompile)

struct Spec {
  DType t;
  int vec;
};
// 8 distinct keys.
const std::vector<Spec> kSpecs = {
    {DType::Float32, 1}, {DType::Float32, 4},  {DType::Float64, 1}, {DType::Float64, 2},
    {DType::Float16, 8}, {DType::BFloat16, 8}, {DType::Int32, 1},   {DType::Int32, 4},
};
const int kKeys = static_cast<int>(kSpecs.size());

using kjit::testing::StartLine;

using kjit::testing::from_f;
using kjit::testing::to_f;

// y = x + c for n elements on `stream`; returns an error text, empty when every element matches.
template <typename T>
std::string add_and_check(const Kernel& kernel, CUstream stream, long long n, int vec, float c, unsigned seed) {
  const auto& d = DriverLibrary::get();
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-64, 64);
  std::vector<T> x(static_cast<std::size_t>(n));
  for (auto& v : x) v = from_f<T>(std::round(dist(rng) * 4) / 4);  // exactly representable in every dtype
  DeviceBuffer dx(n * sizeof(T)), dy(n * sizeof(T));
  dx.upload(x);
  // cuMemcpyHtoD from pageable memory may return before the DMA lands; it runs on the legacy stream,
  // which a non-blocking stream does not wait for.
  d.check(d.cuStreamSynchronize(nullptr), "cuStreamSynchronize");
  CUdeviceptr px = dx.get(), py = dy.get();
  T cv = from_f<T>(c);
  void* args[] = {&px, &py, &cv, &n};
  LaunchConfig cfg;
  cfg.grid.x = static_cast<unsigned>(std::min<long long>((n / vec + 256) / 256, 1024));
  cfg.block.x = 256;
  cfg.stream = stream;
  kernel.launch(cfg, args);
  d.check(d.cuStreamSynchronize(stream), "cuStreamSynchronize");
  auto y = dy.download<T>(static_cast<std::size_t>(n));
  for (long long i = 0; i < n; ++i) {
    const float want = to_f(from_f<T>(to_f(x[i]) + to_f(cv)));
    if (to_f(y[i]) != want)
      return kernel.name() + " n=" + std::to_string(n) + " c=" + std::to_string(c) + ": y[" + std::to_string(i) +
             "] = " + std::to_string(to_f(y[i])) + ", want " + std::to_string(want);
  }
  return {};
}

std::string run_spec(const Spec& s, const Kernel& k, CUstream stream, long long n, float c, unsigned seed) {
  switch (s.t) {
    case DType::Float32: return add_and_check<float>(k, stream, n, s.vec, c, seed);
    case DType::Float64: return add_and_check<double>(k, stream, n, s.vec, c, seed);
    case DType::Float16: return add_and_check<__half>(k, stream, n, s.vec, c, seed);
    case DType::BFloat16: return add_and_check<__nv_bfloat16>(k, stream, n, s.vec, c, seed);
    case DType::Int32: return add_and_check<int>(k, stream, n, s.vec, c, seed);
    default: return "no reference for " + std::string(dtype_name(s.t));
  }
}

class GpuThreads : public kjit::testing::OnDevice<::testing::TestWithParam<std::string>> {
 protected:
  TempDir dir_{"kjit-gpu-threads"};
};

}  // namespace

// Thread i starts at key (i % 4) * 2 (threads i and i + 4 miss the same key at once); even threads share
// one KernelFamily, odd ones make their own (another Template object of the same bytes: same keys).
TEST_P(GpuThreads, EightThreadsEachOnItsOwnStreamCompileOnceAndComputeRight) {
  Engine engine(Settings::from_map({{"KJIT_CACHE_DIR", (dir_ / "cache").string()}, {"KJIT_CACHE_MODE", GetParam()}}));
  auto tmpl = Template::builtin("add_constant");
  KernelFamily shared_family(engine, tmpl, "add_constant");

  struct Got {
    int spec;
    const SpecializedKernel* loaded;
    Origin origin;
  };
  std::vector<std::vector<Got>> got(kThreads);
  std::vector<std::string> errors(kThreads);
  std::string reader_error;
  std::atomic<bool> done{false};
  StartLine start(kThreads + 1);

  std::thread reader([&] {
    start.arrive_and_wait();
    EngineStats last;
    while (!done.load(std::memory_order_acquire)) {
      EngineStats s = engine.stats();
      if (s.compiles < last.compiles || s.disk_hits < last.disk_hits || s.memory_hits < last.memory_hits)
        reader_error = "a counter went down between two reads";
      if (s.compiles > static_cast<std::uint64_t>(kKeys)) reader_error = "more compiles than distinct keys";
      last = s;
      std::this_thread::yield();
    }
  });

  std::vector<std::thread> workers;
  for (int i = 0; i < kThreads; ++i) {
    workers.emplace_back([&, i] {
      CUstream stream = nullptr;
      try {
        const auto& d = DriverLibrary::get();
        make_primary_context_current(0);  // per thread
        d.check(d.cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
        start.arrive_and_wait();
        std::unique_ptr<KernelFamily> own;
        if (i % 2) own = std::make_unique<KernelFamily>(engine, Template::builtin("add_constant"), "add_constant");
        const KernelFamily& family = own ? *own : shared_family;
        const int first = (i % 4) * 2;
        for (int round = 0; round < kRounds; ++round) {
          for (int j = 0; j < kKeys; ++j) {
            const int s = (first + j) % kKeys;
            const TemplateArg args[] = {TemplateArg::type(kSpecs[s].t), TemplateArg::integer(kSpecs[s].vec)};
            Origin origin;
            auto loaded = family.get(args, 2, 0, &origin);
            got[i].push_back({s, loaded.get(), origin});
            // Awkward sizes (not multiples of the vector width), a constant per thread and round.
            const long long n = 4097 + 13 * i + 7 * s + round;
            const float c = 0.25f * static_cast<float>(1 + i + kThreads * round);
            std::string bad = run_spec(kSpecs[s], *loaded->kernel, stream, n, c, 1000u * i + 10u * s + round);
            if (!bad.empty()) throw std::runtime_error(bad);
          }
        }
      } catch (const std::exception& e) {
        errors[i] = "thread " + std::to_string(i) + ": " + e.what();
      }
      if (stream) DriverLibrary::get().cuStreamDestroy(stream);
    });
  }
  for (auto& w : workers) w.join();
  done.store(true, std::memory_order_release);
  reader.join();

  for (const auto& e : errors) EXPECT_TRUE(e.empty()) << e;
  EXPECT_TRUE(reader_error.empty()) << reader_error;
  std::map<int, const SpecializedKernel*> kernel_of;
  std::size_t requests = 0;
  for (int i = 0; i < kThreads; ++i) {
    for (const Got& g : got[i]) {
      ++requests;
      auto [it, first] = kernel_of.emplace(g.spec, g.loaded);
      EXPECT_EQ(it->second, g.loaded) << "thread " << i << " holds another loaded kernel for spec " << g.spec;
    }
  }
  EXPECT_EQ(requests, static_cast<std::size_t>(kThreads * kRounds * kKeys));
  std::set<std::string> keys;
  for (const auto& [s, k] : kernel_of) keys.insert(k->key.hex());
  EXPECT_EQ(keys.size(), static_cast<std::size_t>(kKeys));
  const EngineStats st = engine.stats();
  EXPECT_EQ(st.compiles, static_cast<std::uint64_t>(kKeys)) << "each distinct key compiled once";
  EXPECT_EQ(st.compiles + st.disk_hits + st.memory_hits, requests)
      << "compiles " << st.compiles << " disk hits " << st.disk_hits << " memory hits " << st.memory_hits;
  if (GetParam() == "off") EXPECT_EQ(st.disk_hits, 0u);
}

INSTANTIATE_TEST_SUITE_P(CacheModes, GpuThreads, ::testing::Values("readwrite", "off"),
                         [](const ::testing::TestParamInfo<std::string>& p) { return p.param; });
