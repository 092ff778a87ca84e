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
