#include "rows.hpp"

#include <algorithm>
#include <climits>

#include "kjit/engine.hpp"
#include "kjit/shape_policy.hpp"
#include "common.hpp"

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

std::int64_t specialized_d(const char* kernel, std::int64_t d) {
  return Engine::global().shape_policy().admit(kernel, "D", d);
}

Rows as_rows(const at::Tensor& x) {
  Rows r;
  r.x = x.contiguous();
  r.d = x.dim() ? x.size(-1) : 1;
  r.rows = r.d ? x.numel() / r.d : 0;
  return r;
}

}  // namespace kjit::ops
