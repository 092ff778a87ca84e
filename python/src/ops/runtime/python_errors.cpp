// kjit errors raised inside an op reach Python as the kjit exception classes (kjit.ValueError with
// its message, kjit.CompileError with its log, ...). Calls through torch.ops are translated by
// torch's own pybind11 exception translator, not kjit's (each extension has its own pybind11
// internals), and torch maps an arbitrary std::exception to RuntimeError; but it restores a
// torch python_error as is. So the kjit error becomes the Python exception kjit's binding would
// raise, and travels inside a python_error. Only this file includes torch's Python headers.
#include <Python.h>
#include <torch/csrc/Exceptions.h>

#include "core/bindings.hpp"
#include "ops/runtime/checks.hpp"

namespace kjit::ops {

[[noreturn]] void rethrow_for_python(std::exception_ptr error) {
  if (!Py_IsInitialized()) std::rethrow_exception(error);  // a C++-only caller gets the C++ error
  python_error wrapped;
  {
    pybind11::gil_scoped_acquire gil;
    kjit::python::set_python_error(error);
    if (!PyErr_Occurred()) std::rethrow_exception(error);
    wrapped.persist();  // takes the pending Python error out of this thread's state, into `wrapped`
  }
  throw std::move(wrapped);
}

}  // namespace kjit::ops
