// C++ cost of a cached kjit launch (KernelFamily::get memory hit + Kernel::launch) against a bare
// cuLaunchKernel of the same kernel, in one process; plus cold-compile and warm-disk first-call times.
// Needs a GPU. Usage: launch_overhead [iterations]. Prints JSON lines.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "kjit/driver_library.hpp"
#include "kjit/kernel_family.hpp"

using namespace kjit;
using Clock = std::chrono::steady_clock;

namespace {

double ms_since(Clock::time_point t0) { return std::chrono::duration<double, std::milli>(Clock::now() - t0).count(); }

// Median of `reps` batches of `iters` calls of `f`, in microseconds per call.
template <typename F>
double us_per_call(F&& f, int iters, int reps, double* min_out) {
  std::vector<double> per;
  const auto& d = DriverLibrary::get();
  for (int r = 0; r < reps; ++r) {
    d.check(d.cuCtxSynchronize(), "cuCtxSynchronize");
    auto t0 = Clock::now();
    for (int i = 0; i < iters; ++i) f();
    per.push_back(ms_since(t0) * 1000.0 / iters);
  }
  std::sort(per.begin(), per.end());
  *min_out = per.front();
  return per[per.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  int iters = argc > 1 ? std::atoi(argv[1]) : 2000;
  std::string why;
  if (!DriverLibrary::available(&why)) {
    std::printf("{\"skipped\": \"no CUDA device: %s\"}\n", why.c_str());
    return 0;
  }
  make_primary_context_current(0);
  const auto& d = DriverLibrary::get();
  char name[256] = {0};
  CUdevice dev;
  d.check(d.cuDeviceGet(&dev, 0), "cuDeviceGet");
  d.cuDeviceGetName(name, sizeof name, dev);

  auto dir = std::filesystem::temp_directory_path() / ("kjit-bench-" + std::to_string(::getpid()));
  Settings s = Settings::from_map({{"KJIT_CACHE_DIR", dir.string()}});

  // Cold compile: empty cache, new Engine.
  auto t0 = Clock::now();
  Engine cold(s);
  KernelFamily fam_cold(cold, Template::builtin("add_constant"), "add_constant");
  std::vector<TemplateArg> args = {TemplateArg::type(DType::Float32), TemplateArg::integer(4)};
  fam_cold.get(args, 0);
  double cold_ms = ms_since(t0);
  double nvrtc_ms = cold.stats().compile_ms;

  // Warm disk: a new Engine over the same directory (template load, key, read, validate, module load).
  t0 = Clock::now();
  Engine warm(s);
  KernelFamily fam(warm, Template::builtin("add_constant"), "add_constant");
  Origin origin;
  auto k = fam.get(args, 0, &origin);
  double warm_ms = ms_since(t0);

  long long n = 1024;
  CUdeviceptr x, y;
  d.check(d.cuMemAlloc(&x, n * 4), "cuMemAlloc");
  d.check(d.cuMemAlloc(&y, n * 4), "cuMemAlloc");
  float c = 1.0f;
  void* params[] = {&x, &y, &c, &n};
  LaunchConfig cfg;
  cfg.grid.x = 1;
  cfg.block.x = 256;
  CUkernel raw = k->kernel->handle();

  auto bare = [&] {
    d.cuLaunchKernel(reinterpret_cast<CUfunction>(raw), 1, 1, 1, 256, 1, 1, 0, nullptr, params, nullptr);
  };
  auto kjit_call = [&] {
    auto kk = fam.get(args.data(), args.size(), 0);
    kk->kernel->launch(cfg, params);
  };
  for (int i = 0; i < 1000; ++i) {  // warm-up
    bare();
    kjit_call();
  }
  double bare_min, kjit_min;
  double bare_us = us_per_call(bare, iters, 21, &bare_min);
  double kjit_us = us_per_call(kjit_call, iters, 21, &kjit_min);
  d.check(d.cuCtxSynchronize(), "cuCtxSynchronize");
  std::printf(
      "{\"gpu\": \"%s\", \"driver\": %d, \"cold_first_call_ms\": %.2f, \"cold_nvrtc_ms\": %.2f, "
      "\"warm_disk_first_call_ms\": %.3f, \"warm_origin\": \"%s\", \"bare_cuLaunchKernel_us\": %.3f, "
      "\"bare_min_us\": %.3f, \"kjit_get_launch_us\": %.3f, \"kjit_min_us\": %.3f, \"ratio\": %.3f}\n",
      name, d.driver_version(), cold_ms, nvrtc_ms, warm_ms, to_string(origin), bare_us, bare_min, kjit_us, kjit_min,
      kjit_us / bare_us);
  d.cuMemFree(x);
  d.cuMemFree(y);
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  return 0;
}
