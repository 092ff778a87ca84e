// The schemas of the built-in ops (torch.ops.kjit.*). Implementations are registered per op file:
// CUDA (the kernels), Meta (shapes for fake tensors / torch.compile) and Autograd where a backward exists.
#include <torch/library.h>

TORCH_LIBRARY(kjit, m) {
  m.def("add_constant(Tensor x, float c) -> Tensor");
  m.def("rgb_to_gray(Tensor img) -> Tensor");
  m.def("outer(Tensor a, Tensor b) -> Tensor");
  m.def("outer_backward(Tensor grad, Tensor a, Tensor b) -> (Tensor, Tensor)");
  m.def("fused_update(Tensor x, Tensor model_out, Tensor noise, float a, float b, float c) -> Tensor");
}
