// Which CUDA device an op call's tensors are on, and the context of one launch: a device guard, PyTorch's
// current stream, and whether compiling is allowed now (not during CUDA graph capture); for kPlanDevice (a
// compile-only plan, plan.hpp) none of these. Hot-path safe: no allocation unless an error is thrown.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/cuda/CUDAGuard.h>
#include <cuda.h>

#include <initializer_list>
#include <vector>

#include "core/device_context.hpp"  // kCaptureForbidsCompile, capture_forbids_compile

namespace kjit::ops {

// One tensor of a call and the name it has in messages.
struct NamedTensor {
  const char* name;
  const at::TensorBase& tensor;
};

// The CUDA device that every defined tensor is on (undefined tensors, i.e. None, are skipped; with
// none left, the current device). Throws kjit::ValueError naming each tensor's device, e.g.
// "expected all tensors on one CUDA device, got cuda:0 (x) and cpu (y)".
int device_of(std::initializer_list<NamedTensor> tensors);
// The same with names given apart ("#1", "#2", ... where `names` is shorter).
int device_of(const std::vector<at::Tensor>& tensors, std::initializer_list<const char*> names = {});

// Everything one launch on `device` needs. Construct it before looking a kernel up: pass
// `compile_forbidden` to KernelFamily::get and `stream` to LaunchConfig; keep it alive across the launch.
struct LaunchContext {
  // PyTorch's current stream of `device`.
  explicit LaunchContext(int device);
  // A given stream (a handle of `device`).
  LaunchContext(int device, CUstream stream);

  c10::cuda::OptionalCUDAGuard guard;  // none for kPlanDevice (a compile-only plan: no device, no stream)
  CUstream stream;
  const char* compile_forbidden;  // non-null while `stream` is being captured by a CUDA graph
};

}  // namespace kjit::ops
