// GPU tests (ctest label `gpu`): built-in kernels against CPU references for awkward sizes, a disk hit in
// the next process, and ordering on a non-default stream. Each skips with a reason without a device.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <random>

#include "child_process.hpp"
#include "device_buffer.hpp"
#include "gpu_test.hpp"
#include "host_half.hpp"
#include "kjit/driver_library.hpp"
#include "kjit/kernel_family.hpp"
#include "test_support.hpp"

using namespace kjit;
using namespace kjit::testing;

namespace {

class Gpu : public OnDevice<> {
 protected:
  void SetUp() override {
    OnDevice::SetUp();
    if (IsSkipped()) return;
    engine_ = std::make_unique<Engine>(Settings::from_map({{"KJIT_CACHE_DIR", (dir_ / "cache").string()}}));
  }
  TempDir dir_{"kjit-gpu"};
  std::unique_ptr<Engine> engine_;
};

unsigned blocks_for(long long n, int vec) {
  long long items = n / vec + 1;
  return static_cast<unsigned>(std::min<long long>((items + 255) / 256, 4096));
}

template <typename T>
void check_add_constant(Engine& engine, DType dt, long long n, int vec, float c) {
  KernelFamily family(engine, Template::builtin("add_constant"), "add_constant");
  auto k = family.get({TemplateArg::type(dt), TemplateArg::integer(vec)}, 0);
  std::mt19937 rng(static_cast<unsigned>(n));
  std::uniform_real_distribution<float> dist(-8, 8);
  std::vector<T> x(static_cast<std::size_t>(n));
  for (auto& v : x) v = from_f<T>(std::round(dist(rng) * 4) / 4);  // exactly representable values
  DeviceBuffer dx(n * sizeof(T)), dy(n * sizeof(T));
  dx.upload(x);
  CUdeviceptr px = dx.get(), py = dy.get();
  T cv = from_f<T>(c);
  void* args[] = {&px, &py, &cv, &n};
  LaunchConfig cfg;
  cfg.grid.x = blocks_for(n, vec);
  cfg.block.x = 256;
  k->kernel->launch(cfg, args);
  auto y = dy.download<T>(static_cast<std::size_t>(n));
  for (long long i = 0; i < n; ++i) {
    float want = to_f(from_f<T>(to_f(x[i]) + to_f(cv)));
    ASSERT_EQ(to_f(y[i]), want) << dtype_name(dt) << " n=" << n << " vec=" << vec << " i=" << i;
  }
}

}  // namespace

TEST_F(Gpu, AddConstantMatchesCpuForAwkwardSizes) {
  for (long long n : {1ll, 7ll, 1000ll, 4097ll, (1ll << 20) + 3}) {
    check_add_constant<float>(*engine_, DType::Float32, n, 4, 1.25f);
    check_add_constant<float>(*engine_, DType::Float32, n, 1, -3.5f);
    check_add_constant<double>(*engine_, DType::Float64, n, 2, 0.75f);
    check_add_constant<__half>(*engine_, DType::Float16, n, 8, 2.5f);
    check_add_constant<__nv_bfloat16>(*engine_, DType::BFloat16, n, 8, -1.0f);
  }
  // 5 distinct specializations, each compiled once.
  EXPECT_EQ(engine_->stats().compiles, 5u);
}

TEST_F(Gpu, RgbToGrayMatchesCpu) {
  struct Size {
    int h, w, batch;
  };
  for (Size s : {Size{1, 1, 1}, Size{7, 13, 2}, Size{1080, 1919, 1}, Size{33, 4097, 3}}) {
    KernelFamily family(*engine_, Template::builtin("rgb_to_gray"), "rgb_to_gray");
    auto k = family.get({TemplateArg::integer(s.h), TemplateArg::integer(s.w)}, 0);
    std::size_t pixels = static_cast<std::size_t>(s.h) * s.w * s.batch;
    std::vector<unsigned char> rgb(pixels * 3);
    std::mt19937 rng(static_cast<unsigned>(pixels));
    for (auto& v : rgb) v = static_cast<unsigned char>(rng() & 255);
    DeviceBuffer drgb(rgb.size()), dgray(pixels);
    drgb.upload(rgb);
    CUdeviceptr pr = drgb.get(), pg = dgray.get();
    void* args[] = {&pr, &pg};
    LaunchConfig cfg;
    cfg.block = {32, 8, 1};
    cfg.grid = {static_cast<unsigned>((s.w + 31) / 32), static_cast<unsigned>((s.h + 7) / 8),
                static_cast<unsigned>(s.batch)};
    k->kernel->launch(cfg, args);
    auto gray = dgray.download<unsigned char>(pixels);
    for (std::size_t p = 0; p < pixels; ++p) {
      unsigned want = (77u * rgb[3 * p] + 150u * rgb[3 * p + 1] + 29u * rgb[3 * p + 2] + 128u) >> 8;
      ASSERT_EQ(gray[p], want) << s.h << "x" << s.w << " pixel " << p;
    }
  }
}

// The child (this binary re-executed) resolves the same kernel: it must be a disk hit, not a compile.
TEST_F(Gpu, CompiledInOneProcessIsADiskHitInTheNext) {
  if (const char* child = std::getenv("KJIT_TEST_DISK_CHILD")) {
    Engine e(Settings::from_map({{"KJIT_CACHE_DIR", child}}));
    KernelFamily family(e, Template::builtin("add_constant"), "add_constant");
    Origin origin;
    family.get({TemplateArg::type(DType::Float32), TemplateArg::integer(4)}, 0, &origin);
    std::fflush(nullptr);
    _exit(origin == Origin::Disk && e.stats().compiles == 0 && e.stats().disk_hits == 1 ? 0 : 1);
  }
  KernelFamily family(*engine_, Template::builtin("add_constant"), "add_constant");
  Origin origin;
  family.get({TemplateArg::type(DType::Float32), TemplateArg::integer(4)}, 0, &origin);
  ASSERT_EQ(origin, Origin::Compiled);
  family.get({TemplateArg::type(DType::Float32), TemplateArg::integer(4)}, 0, &origin);
  EXPECT_EQ(origin, Origin::Memory);
  EXPECT_EQ(rerun_this_test("gpu_test_launch", "Gpu.CompiledInOneProcessIsADiskHitInTheNext", "KJIT_TEST_DISK_CHILD",
                            (dir_ / "cache").string()),
            0)
      << "the second process compiled instead of loading from disk";
}

TEST_F(Gpu, LaunchOnANonDefaultStreamIsOrderedOnThatStream) {
  // A slow kernel writes x[i] = 1 after spinning; add_constant on the same stream must see it.
  auto spin = Template::from_string(R"(
    extern "C" __global__ void slow_fill(float* x, long long n, long long cycles) {
      long long start = clock64();
      while (clock64() - start < cycles) { }
      for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
        x[i] = 1.0f;
    })",
                                    "slow_fill.cu");
  KernelFamily slow(*engine_, spin, "slow_fill");
  KernelFamily add(*engine_, Template::builtin("add_constant"), "add_constant");
  auto ks = slow.get(nullptr, 0, 0);
  auto ka = add.get({TemplateArg::type(DType::Float32), TemplateArg::integer(4)}, 0);
  const auto& d = DriverLibrary::get();
  CUstream stream;
  d.check(d.cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
  long long n = 1 << 16, cycles = 50'000'000;  // ~25 ms at 2 GHz
  DeviceBuffer dx(n * 4), dy(n * 4);
  d.check(d.cuMemsetD8(dx.get(), 0, n * 4), "cuMemsetD8");
  d.check(d.cuCtxSynchronize(), "cuCtxSynchronize");
  CUdeviceptr px = dx.get(), py = dy.get();
  void* sargs[] = {&px, &n, &cycles};
  LaunchConfig cfg;
  cfg.grid.x = 64;
  cfg.block.x = 256;
  cfg.stream = stream;
  ks->kernel->launch(cfg, sargs);
  float c = 2.0f;
  void* aargs[] = {&px, &py, &c, &n};
  ka->kernel->launch(cfg, aargs);
  d.check(d.cuStreamSynchronize(stream), "cuStreamSynchronize");
  auto y = dy.download<float>(static_cast<std::size_t>(n));
  for (long long i = 0; i < n; ++i) ASSERT_EQ(y[i], 3.0f) << i;
  d.cuStreamDestroy(stream);
}

// A compile-only request (Python's specialize(arch=...)) for the architecture of a kernel this engine has
// already loaded for a device: the entry is reused (no compile) but what comes back is compile-only. A kernel
// asked for as compile-only never launches, whatever this process loaded before (a memory hit used to hand
// back the loaded kernel, so `arch=` kernels launched or not depending on earlier calls).
TEST_F(Gpu, ACompileOnlyRequestAfterALoadIsStillCompileOnly) {
  KernelFamily family(*engine_, Template::builtin("add_constant"), "add_constant");
  const std::vector<TemplateArg> args = {TemplateArg::type(DType::Float32), TemplateArg::integer(4)};
  auto loaded = family.get(args, 0);
  ASSERT_TRUE(loaded->kernel);
  const Specialization spec = family.specialization(args.data(), args.size());
  Origin origin;
  auto compiled = engine_->compile_only(spec, device_target(0), &origin);
  EXPECT_EQ(origin, Origin::Memory);
  EXPECT_FALSE(compiled->kernel) << "a compile-only request returned a loaded kernel";
  EXPECT_EQ(compiled->key, loaded->key);
  EXPECT_EQ(engine_->stats().compiles, 1u);
  // And the other order: compile-only first, then a load, then compile-only again.
  const std::vector<TemplateArg> args2 = {TemplateArg::type(DType::Float64), TemplateArg::integer(2)};
  const Specialization spec2 = family.specialization(args2.data(), args2.size());
  EXPECT_FALSE(engine_->compile_only(spec2, device_target(0))->kernel);
  EXPECT_TRUE(family.get(args2, 0)->kernel);
  EXPECT_FALSE(engine_->compile_only(spec2, device_target(0))->kernel);
  EXPECT_EQ(engine_->stats().compiles, 2u);
}
