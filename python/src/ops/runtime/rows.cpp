#include "ops/runtime/rows.hpp"

#include <algorithm>
#include <array>
#include <atomic>
#include <climits>
#include <cstdint>

#include "kjit/kernel_family.hpp"
#include "kjit/log.hpp"
#include "ops/runtime/checks.hpp"
#include "ops/runtime/geometry.hpp"
#include "ops/runtime/kernels.hpp"

namespace kjit::ops {

Dim3 RowGeometry::grid_for(std::int64_t rows) const {
  const std::int64_t blocks = (rows + rows_per_block - 1) / rows_per_block;
  Dim3 g;
  g.x = static_cast<unsigned>(std::clamp<std::int64_t>(blocks, 1, INT_MAX));
  return g;
}

int vector_width(std::int64_t d, std::initializer_list<const at::Tensor*> tensors) {
  Access a[8];
  std::size_t n = 0;
  for (const at::Tensor* t : tensors)
    if (n < 8) a[n++] = {t->const_data_ptr(), static_cast<std::size_t>(t->element_size())};
  return ops::vector_width(a, n, d);
}

RowGeometry row_geometry(std::int64_t d, std::initializer_list<const at::Tensor*> tensors, int max_per_thread,
                         int vectors_per_thread) {
  RowGeometry g;
  g.vec = vector_width(d, tensors);
  const std::int64_t n_vec = std::max<std::int64_t>(1, d / g.vec);
  while (g.tpr < 1024 && static_cast<std::int64_t>(g.tpr) * vectors_per_thread < n_vec) g.tpr *= 2;
  const std::int64_t items = (n_vec + g.tpr - 1) / g.tpr;
  g.items = items * g.vec > max_per_thread ? 0 : static_cast<int>(items);
  g.rows_per_block = std::max(1, 256 / g.tpr);
  return g;
}

Dim3 SplitGeometry::grid_for(std::int64_t rows) const {
  const std::int64_t clusters = std::clamp<std::int64_t>(rows, 1, INT_MAX / std::max(cl, 1));
  Dim3 g;
  g.x = static_cast<unsigned>(clusters * std::max(cl, 1));
  return g;
}

namespace {
constexpr int kMaxDevices = 64;
std::array<std::atomic<bool>, kMaxDevices> clusters_refused{};
}  // namespace

bool has_clusters(int device) {
  if (device >= 0 && device < kMaxDevices && clusters_refused[device].load(std::memory_order_relaxed)) return false;
  return target_of(device).arch >= 90;
}

void refuse_clusters(const char* op, int device, const std::string& why) {
  if (device >= 0 && device < kMaxDevices) clusters_refused[device].store(true, std::memory_order_relaxed);
  log::warn_once("split-rows:" + std::to_string(device),
                 std::string(op) + ": device " + std::to_string(device) +
                     " refused the launch of a row split over a thread-block cluster (" + why +
                     "); its long rows run on the one-block kernels from now on (slower, same results)");
}

SplitGeometry split_geometry(std::int64_t d, const at::Tensor& x, const at::Tensor& y, int max_per_thread) {
  struct Shape {
    int cl, tpr;
  };
  // By threads per row, then the more blocks (more of them in flight per multiprocessor).
  constexpr Shape kShapes[] = {{2, 256}, {4, 256}, {2, 512}, {8, 256}, {4, 512}, {8, 512}};
  const auto apart =
      reinterpret_cast<std::uintptr_t>(x.const_data_ptr()) - reinterpret_cast<std::uintptr_t>(y.const_data_ptr());
  const int vec = apart % 16 == 0 ? static_cast<int>(16 / x.element_size()) : 1;
  const std::int64_t n_vec = std::max<std::int64_t>(1, d / vec);
  for (const Shape s : kShapes) {
    const std::int64_t chunk = (n_vec + s.cl - 1) / s.cl;
    const std::int64_t items = (chunk + s.tpr - 1) / s.tpr;
    if (items * vec <= max_per_thread) {
      SplitGeometry g;
      g.cl = s.cl;
      g.tpr = s.tpr;
      g.vec = vec;
      g.items = static_cast<int>(items);
      g.chunk = static_cast<int>(chunk);
      return g;
    }
  }
  return {};
}

Rows as_rows(const at::Tensor& x) {
  Rows r;
  r.x = x.contiguous();
  r.d = x.dim() ? x.size(-1) : 1;
  r.rows = r.d ? x.numel() / r.d : 0;
  return r;
}

}  // namespace kjit::ops
