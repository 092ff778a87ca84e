// What the rest of the binding uses from the ops area: binding the direct entries (kjit._C.ops) and
// their call counters (kjit.stats()["op_calls"]).
#pragma once

#include <pybind11/pybind11.h>

#include <cstdint>

namespace kjit::ops {

namespace py = pybind11;

struct OpCalls {
  std::uint64_t direct = 0;      // calls of kjit.ops.* that ran the CUDA function directly
  std::uint64_t dispatched = 0;  // calls that went to the registered op (autograd, fake tensors, ...)
};
OpCalls op_calls() noexcept;
void reset_op_calls() noexcept;

// Adds the submodule `ops` to `m`: one C function per op defined with KJIT_OP (op.hpp).
void bind_direct_ops(py::module_& m);

// Tests: the ops see `count` multiprocessors on `device` (common.hpp).
void override_sm_count(int device, int count);

}  // namespace kjit::ops
