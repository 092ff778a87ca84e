// The `kjit` operator namespace. Each op defines its schema and kernels in its own file with KJIT_OP
// (op.hpp); this library only claims the namespace.
#include <torch/library.h>

TORCH_LIBRARY(kjit, m) {}
