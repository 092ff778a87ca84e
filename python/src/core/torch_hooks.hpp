// What the torch-free binding (kjit._core) asks of torch, when torch is there: kjit._C fills this table
// at import (torch/torch_adapter.cpp) and the launch, specialize, error and stats paths call it. Without
// torch (no kjit._C loaded) the table is null and those paths do without: driver calls, no tensors.
// The table lives in libkjit_core.so next to the core, so both modules see the one copy.
#pragma once

#include <Python.h>
#include <cuda.h>

#include <cstddef>
#include <exception>
#include <string>

#include "kjit/dtype.hpp"
#include "kjit/param_layout.hpp"

namespace kjit::python {

struct TorchHooks {
  // Argument i of a launch when it is a torch.Tensor: checks its device and dtype against the
  // parameter (throws kjit errors) and returns true with its data pointer in `ptr`; false when `v`
  // is not a tensor. The whole tensor fast path of Kernel.launch: one call.
  bool (*tensor_pointer)(PyObject* v, const ParamLayout& layout, std::size_t i, int device, void** ptr);
  // Whether `v` is a torch.Tensor (for messages: a tensor passed as a number).
  bool (*is_tensor)(PyObject* v);
  // A torch.dtype as a kjit DType: -1 when `v` is not a torch.dtype, 0 when kjit cannot specialize on
  // it, 1 with `out` set.
  int (*dtype)(PyObject* v, DType* out);
  // A torch.Stream as a CUstream of `device` (throws kjit errors for a stream of another device or
  // kind); false when `v` is not a torch stream.
  bool (*stream)(PyObject* v, int device, CUstream* out);
  // A torch.device or a device string: true with the device type ("cuda", "cpu", ...) and index (-1:
  // none given); false when `v` is neither. Throws kjit::ValueError for a malformed string.
  bool (*device)(PyObject* v, std::string* type, int* index);
  // torch.cuda.device_count() and current_device().
  int (*device_count)();
  int (*current_device)();
  // Makes `device` current (as torch.cuda.device does) and returns the device that was current.
  int (*exchange_device)(int device);
  // torch.cuda.current_stream(device).
  CUstream (*current_stream)(int device);
  // Sets the Python error for a torch (c10) exception; false for anything else.
  bool (*set_error)(std::exception_ptr e);
  // Adds torch's counters to the dict of kjit.stats() (op_calls) / sets them to zero.
  void (*extend_stats)(PyObject* dict);
  void (*reset_stats)();
};

// The table kjit._C registered, or null (no torch in this process). `hooks` must live for the process.
const TorchHooks* torch_hooks() noexcept;
void set_torch_hooks(const TorchHooks* hooks) noexcept;

}  // namespace kjit::python
