// The pieces of the kjit._core module (torch-free; core_module.cpp calls them in order) and of kjit._C
// (torch; torch_module.cpp), one function per area, and the helpers they share: the C++ -> Python error
// mapping and fast (vectorcall) methods for hot paths.
#pragma once

#include <pybind11/pybind11.h>

#include <exception>
#include <string>
#include <string_view>

namespace kjit::python {

namespace py = pybind11;

// Exported from libkjit_core.so. Needed on what takes pybind11 types: GCC otherwise gives a function the
// hidden visibility of pybind11's namespace through its parameter types.
#define KJIT_PY_EXPORT __attribute__((visibility("default")))

// kjit._core (torch-free; these live in libkjit_core.so, which kjit._C links too):
KJIT_PY_EXPORT void bind_errors(py::module_& m);       // errors.cpp: kjit.Error & co., warnings
KJIT_PY_EXPORT void bind_template(py::module_& m);     // template_binding.cpp: Template, KernelFamily (specialize)
KJIT_PY_EXPORT void bind_kernel(py::module_& m);       // kernel_binding.cpp: Kernel (launch)
KJIT_PY_EXPORT void bind_engine(py::module_& m);       // engine_binding.cpp: stats, cache_info, templates, toolkit
KJIT_PY_EXPORT void bind_cli(py::module_& m);          // cli_binding.cpp: cli_run
KJIT_PY_EXPORT void register_logging(py::module_& m);  // logging.cpp: log events -> logging.getLogger("kjit")
KJIT_PY_EXPORT void bind_arrays(py::module_& m);       // foreign.cpp: array_info (other frameworks' arrays)
// kjit._C (torch):
// torch/torch_adapter.cpp: torch's TorchHooks table and errors; `extend_stats` / `reset_stats` add counters
// to kjit.stats() (the op library's, from the module's entry).
void register_torch_hooks(py::module_& m, void (*extend_stats)(PyObject* dict), void (*reset_stats)());
void bind_elementwise(py::module_& m);   // ops/elementwise/binding.cpp: ElementwiseFunction (kjit.elementwise)
void register_profiler(py::module_& m);  // torch/profiler.cpp: compile / load ranges in torch.profiler traces

// Sets the Python error for an exception thrown by kjit, torch or pybind11 code (kjit errors map to
// the kjit exception classes, with their data as attributes).
KJIT_PY_EXPORT void set_python_error(std::exception_ptr e) noexcept;
// The same for kjit and torch errors only: false (nothing set) for any other exception. For a module's
// local pybind11 exception translator.
KJIT_PY_EXPORT bool set_known_error(std::exception_ptr e);

// A METH_FASTCALL | METH_KEYWORDS method: no argument tuple or kwargs dict is built per call.
using FastMethod = PyObject* (*)(PyObject * self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames);

template <FastMethod F>
PyObject* guarded(PyObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) noexcept {
  try {
    return F(self, args, nargs, kwnames);
  } catch (...) {
    set_python_error(std::current_exception());
    return nullptr;
  }
}

// Calls fn(name, value) for each keyword argument of a METH_FASTCALL | METH_KEYWORDS call (their values
// follow the `nargs` positional ones in `args`).
template <typename F>
void for_each_kwarg(PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames, F&& fn) {
  const Py_ssize_t nkw = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
  for (Py_ssize_t i = 0; i < nkw; ++i) {
    Py_ssize_t len = 0;
    const char* s = PyUnicode_AsUTF8AndSize(PyTuple_GET_ITEM(kwnames, i), &len);
    if (!s) throw py::error_already_set();
    fn(std::string_view(s, static_cast<std::size_t>(len)), args[nargs + i]);
  }
}

// Adds `def` (static storage; ml_flags METH_FASTCALL | METH_KEYWORDS) to the class `cls` as a method.
KJIT_PY_EXPORT void add_fast_method(py::handle cls, PyMethodDef* def);

// The name of a Python object's type, for messages ("float", "torch.Tensor").
KJIT_PY_EXPORT std::string type_name(PyObject* o);
// A value for messages: "the int 4", "the float 2.5", "the bool True", "the str 'x'", "torch.float32",
// "None", "a torch.Tensor", "a list".
KJIT_PY_EXPORT std::string describe_value(PyObject* v);

}  // namespace kjit::python
