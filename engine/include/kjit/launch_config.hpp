// LaunchConfig: grid, block, dynamic shared memory and stream of one launch (a value object).
#pragma once

#include <cuda.h>

#include <string>

namespace kjit {

struct Dim3 {
  unsigned x = 1, y = 1, z = 1;
  unsigned long long count() const noexcept { return 1ull * x * y * z; }
};

struct LaunchConfig {
  Dim3 grid;
  Dim3 block;
  unsigned shared_mem = 0;
  CUstream stream = nullptr;

  // Throws LaunchError for an empty grid or block, a block over 1024 threads or a dimension over the
  // CUDA limits, saying what was received and what is allowed.
  void validate() const;
};

}  // namespace kjit
