// What the rest of the binding uses from the ops area: binding the direct entries (kjit._C.ops) and
// their call counters (kjit.stats()["op_calls"]).
#pragma once

#include <pybind11/pybind11.h>

namespace kjit::ops {

namespace py = pybind11;

// kjit.stats()["op_calls"]: {"direct": calls of kjit.ops.* that ran the CUDA function directly,
// "dispatched": calls that went to the registered op (autograd, fake tensors, ...)} added to `dict`; and
// both set to zero (kjit.reset_stats()).
void add_op_calls(PyObject* dict);
void reset_op_calls();

// Adds the submodule `ops` to `m`: one C function per op defined with KJIT_OP (op.hpp).
void bind_direct_ops(py::module_& m);

// Tests: the ops see `count` multiprocessors on `device` (common.hpp).
void override_sm_count(int device, int count);

}  // namespace kjit::ops
