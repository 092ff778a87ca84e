#include "ops/runtime/geometry.hpp"

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <string>

#include "kjit/driver_library.hpp"
#include "kjit/error.hpp"
#include "kjit/kernel_family.hpp"
#include "ops/runtime/plan.hpp"

namespace kjit::ops {

int vector_width(const Access* accesses, std::size_t n, std::int64_t divides) {
  std::size_t widest = 1;
  for (std::size_t i = 0; i < n; ++i) widest = std::max(widest, accesses[i].elem_size);
  int vec = std::max<int>(1, static_cast<int>(16 / widest));
  for (; vec > 1; vec /= 2) {
    bool ok = divides <= 0 || divides % vec == 0;
    for (std::size_t i = 0; ok && i < n; ++i)
      ok = reinterpret_cast<std::uintptr_t>(accesses[i].ptr) % (accesses[i].elem_size * vec) == 0;
    if (ok) break;
  }
  return vec;
}

int pick_vec(std::size_t elem_size, std::initializer_list<const void*> ptrs, std::int64_t divides) {
  Access a[8];
  std::size_t n = 0;
  for (const void* p : ptrs)
    if (n < 8) a[n++] = {p, elem_size};
  return vector_width(a, n, divides);
}

namespace {
constexpr int kMaxSmDevices = 64;
std::array<std::atomic<int>, kMaxSmDevices>& sm_counts() {
  static std::array<std::atomic<int>, kMaxSmDevices> counts{};
  return counts;
}
void check_sm_device(int device) {
  if (device < 0 || device >= kMaxSmDevices)
    throw ValueError("device ordinal " + std::to_string(device) + " is out of range [0, " +
                     std::to_string(kMaxSmDevices) + ")");
}
}  // namespace

void override_sm_count(int device, int count) {
  check_sm_device(device);
  if (count < 0)
    throw ValueError("a multiprocessor count must be 0 (the device's own) or more, got " + std::to_string(count));
  sm_counts()[device].store(count, std::memory_order_relaxed);
}

int sm_count(int device) {
  if (device == kPlanDevice) return PlanScope::require().sm_count();
  check_sm_device(device);
  auto& counts = sm_counts();
  int n = counts[device].load(std::memory_order_relaxed);
  if (n > 0) return n;
  const DriverLibrary& d = DriverLibrary::get();
  CUdevice dev = 0;
  d.check(d.cuDeviceGet(&dev, device), "cuDeviceGet");
  d.check(d.cuDeviceGetAttribute(&n, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev), "cuDeviceGetAttribute");
  if (n < 1) n = 1;
  counts[device].store(n, std::memory_order_relaxed);
  return n;
}

namespace {
// The opt-in limit of shared memory per block by architecture (the CUDA C++ programming guide's technical
// specifications per compute capability): 227 KB on 9.x / 10.x, 163 KB on 8.0 / 8.7, 99 KB on 8.6 / 8.9 /
// 12.x, 64 KB on 7.5, 96 KB on 7.0 / 7.2.
unsigned shared_optin_of_arch(int arch) {
  switch (arch) {
    case 70:
    case 72: return 96 * 1024;
    case 75: return 64 * 1024;
    case 80:
    case 87: return 163 * 1024;
    case 86:
    case 89: return 99 * 1024;
    default: break;
  }
  if (arch >= 120) return 99 * 1024;
  if (arch >= 90) return 227 * 1024;
  return 48 * 1024;
}
}  // namespace

unsigned max_shared_optin(int device) {
  if (device == kPlanDevice) return shared_optin_of_arch(PlanScope::require().target().arch);
  check_sm_device(device);
  static std::array<std::atomic<unsigned>, kMaxSmDevices> limits{};
  unsigned v = limits[device].load(std::memory_order_relaxed);
  if (v > 0) return v;
  const DriverLibrary& d = DriverLibrary::get();
  CUdevice dev = 0;
  int n = 0;
  d.check(d.cuDeviceGet(&dev, device), "cuDeviceGet");
  d.check(d.cuDeviceGetAttribute(&n, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, dev),
          "cuDeviceGetAttribute");
  v = n > 0 ? static_cast<unsigned>(n) : 48u * 1024u;
  limits[device].store(v, std::memory_order_relaxed);
  return v;
}

const Target& target_of(int device) {
  if (device == kPlanDevice) return PlanScope::require().target();
  return device_target(device);
}

Dim3 grid_1d(std::int64_t n_vec, int device, unsigned block) {
  std::int64_t blocks = std::min(cdiv(n_vec, block), max_blocks(device));
  if (blocks < 1) blocks = 1;
  Dim3 g;
  g.x = static_cast<unsigned>(blocks);
  return g;
}
}  // namespace kjit::ops
