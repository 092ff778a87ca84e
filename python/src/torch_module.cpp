// kjit._C: the torch part of the binding (libtorch), the top of python/src's layers: torch's hooks into the
// torch-free kjit._core (torch/: tensors, dtypes, devices, streams, errors), torch.profiler ranges,
// kjit.elementwise's C++ path and the built-in ops (ops/), which register with torch.library when the module
// loads.
// kjit._core is imported first: the core, its classes and its exceptions live there (libkjit_core.so).
#include "core/bindings.hpp"
#include "ops/runtime/binding.hpp"
#include "ops/runtime/plan.hpp"

#ifndef KJIT_VERSION
#define KJIT_VERSION "0.0.0"
#endif

PYBIND11_MODULE(_C, m) {
  using namespace kjit::python;
  py::module_::import("kjit._core");
  m.doc() = "kjit's torch binding (use the kjit package, not this module)";
  m.attr("__version__") = KJIT_VERSION;
  register_torch_hooks(m, &kjit::ops::add_op_calls, &kjit::ops::reset_op_calls);
  bind_elementwise(m);
  register_profiler(m);
  kjit::ops::bind_direct_ops(m);
  kjit::ops::bind_plan(m);
  m.def("_override_sm_count", &kjit::ops::override_sm_count, py::arg("device"), py::arg("count"),
        "Tests only: the built-in ops see `count` multiprocessors on `device` (0: its own), as on another GPU model");
}
