// The kjit exception family as Python classes, the mapping from C++ errors to them, and kjit's
// warnings routed to Python's `warnings` module (category kjit.KjitWarning).
#include <pybind11/stl.h>

#include <cstdio>
#include <initializer_list>
#include <new>
#include <string>
#include <utility>

#include "bindings.hpp"
#include "kjit/error.hpp"
#include "kjit/log.hpp"
#include "torch_hooks.hpp"

namespace kjit::python {
namespace {

// The classes live for the whole process (the module is never unloaded).
struct Classes {
  PyObject* error = nullptr;
  PyObject* compile_error = nullptr;
  PyObject* cache_miss_error = nullptr;
  PyObject* driver_error = nullptr;
  PyObject* launch_error = nullptr;
  PyObject* value_error = nullptr;
  PyObject* type_error = nullptr;
  PyObject* warning = nullptr;
};
Classes g;

PyObject* new_class(const char* name, PyObject* bases, const char* doc,
                    std::initializer_list<std::pair<const char*, py::object>> defaults = {}) {
  PyObject* cls = PyErr_NewExceptionWithDoc(name, doc, bases, nullptr);
  if (!cls) throw py::error_already_set();
  for (const auto& [attr, value] : defaults)
    if (PyObject_SetAttrString(cls, attr, value.ptr()) < 0) throw py::error_already_set();
  return cls;
}

py::str text(const std::string& s) {
  PyObject* o = PyUnicode_DecodeUTF8(s.data(), static_cast<Py_ssize_t>(s.size()), "replace");
  if (!o) throw py::error_already_set();
  return py::reinterpret_steal<py::str>(o);
}

void raise(PyObject* cls, const char* what, std::initializer_list<std::pair<const char*, py::object>> attrs = {}) {
  py::object exc = py::reinterpret_borrow<py::object>(cls)(text(what));
  for (const auto& [name, value] : attrs) exc.attr(name) = value;
  PyErr_SetObject(cls, exc.ptr());
}

// Maps kjit and torch errors; returns false for anything else.
bool set_known_error_impl(std::exception_ptr p) {
  if (!g.error) return false;  // the classes were never made (module loaded without `import kjit`)
  try {
    std::rethrow_exception(p);
  } catch (const CompileError& e) {
    raise(g.compile_error, e.what(),
          {{"log", text(e.log())},
           {"name_expression", text(e.name_expression())},
           {"options", py::cast(e.options())},
           {"source_excerpt", text(e.source_excerpt())}});
  } catch (const CacheMissError& e) {
    raise(g.cache_miss_error, e.what(), {{"key", text(e.key())}, {"specialization", text(e.specialization())}});
  } catch (const DriverError& e) {
    raise(g.driver_error, e.what(), {{"code", py::int_(e.code())}, {"code_name", text(e.code_name())}});
  } catch (const LaunchError& e) {
    raise(g.launch_error, e.what());
  } catch (const ValueError& e) {
    raise(g.value_error, e.what());
  } catch (const TypeError& e) {
    raise(g.type_error, e.what());
  } catch (const Error& e) {
    raise(g.error, e.what());
  } catch (...) {
    // torch's errors (c10::Error) as torch.ops would raise them, when kjit._C registered torch's hooks.
    const TorchHooks* h = torch_hooks();
    return h && h->set_error(std::current_exception());
  }
  return true;
}

bool finalizing() {
#if PY_VERSION_HEX >= 0x030D0000
  return Py_IsFinalizing();
#else
  return _Py_IsFinalizing();
#endif
}

// kjit::log warnings -> warnings.warn(message, kjit.KjitWarning). May be called from any thread,
// with or without the GIL (compiles of `kjit warm -j N` run on worker threads).
void warn_to_python(const std::string& message) {
  if (!Py_IsInitialized() || finalizing()) {
    std::fprintf(stderr, "kjit warning: %s\n", message.c_str());
    return;
  }
  py::gil_scoped_acquire gil;
  PyObject *type, *value, *tb;
  PyErr_Fetch(&type, &value, &tb);  // a pending error (if any) survives the warning
  if (PyErr_WarnEx(g.warning, message.c_str(), 1) < 0) {
    // Warnings turned into errors (-W error): the caller of this C++ code cannot receive a Python
    // exception here, so the message goes to stderr instead of being lost.
    PyErr_Clear();
    std::fprintf(stderr, "kjit warning: %s\n", message.c_str());
  }
  PyErr_Restore(type, value, tb);
}

}  // namespace

bool set_known_error(std::exception_ptr p) { return set_known_error_impl(p); }

void set_python_error(std::exception_ptr p) noexcept {
  try {
    if (set_known_error(p)) return;
    try {
      std::rethrow_exception(p);
    } catch (py::error_already_set& e) {
      e.restore();
    } catch (const py::builtin_exception& e) {
      e.set_error();
    } catch (const std::bad_alloc&) {
      PyErr_NoMemory();
    } catch (const std::exception& e) {
      if (!PyErr_Occurred()) PyErr_SetString(PyExc_RuntimeError, e.what());
    } catch (...) {
      if (!PyErr_Occurred()) PyErr_SetString(PyExc_RuntimeError, "kjit: unknown C++ exception");
    }
  } catch (...) {
    if (!PyErr_Occurred()) PyErr_SetString(PyExc_RuntimeError, "kjit: error while reporting an error");
  }
}

void add_fast_method(py::handle cls, PyMethodDef* def) {
  PyObject* descr = PyDescr_NewMethod(reinterpret_cast<PyTypeObject*>(cls.ptr()), def);
  if (!descr) throw py::error_already_set();
  const int r = PyObject_SetAttrString(cls.ptr(), def->ml_name, descr);
  Py_DECREF(descr);
  if (r < 0) throw py::error_already_set();
}

std::string type_name(PyObject* o) {
  PyTypeObject* t = Py_TYPE(o);
  py::handle h(reinterpret_cast<PyObject*>(t));
  try {
    std::string module = py::str(h.attr("__module__"));
    std::string qual = py::str(h.attr("__qualname__"));
    return module == "builtins" ? qual : module + "." + qual;
  } catch (py::error_already_set&) {
    PyErr_Clear();
    return t->tp_name;
  }
}

std::string describe_value(PyObject* v) {
  if (v == Py_None) return "None";
  if (const TorchHooks* h = torch_hooks(); h && h->dtype(v, nullptr) >= 0) return py::str(py::handle(v));
  if (PyBool_Check(v) || PyLong_Check(v) || PyFloat_Check(v) || PyUnicode_Check(v))
    return "the " + type_name(v) + " " + py::repr(py::handle(v)).cast<std::string>();
  const std::string t = type_name(v);
  const char c = t.empty() ? 'x' : t[0];
  return (c == 'a' || c == 'e' || c == 'i' || c == 'o' || c == 'u' ? "an " : "a ") + t;
}

void bind_errors(py::module_& m) {
  const py::str empty("");
  g.error = new_class("kjit.Error", PyExc_Exception, "Base class of every kjit error.");
  py::tuple base = py::make_tuple(py::handle(g.error));
  g.compile_error =
      new_class("kjit.CompileError", base.ptr(),
                "NVRTC rejected a specialization. Attributes: log (the NVRTC log), name_expression, options "
                "(the NVRTC options) and source_excerpt (the specialized source lines around each error).",
                {{"log", empty}, {"name_expression", empty}, {"options", py::list()}, {"source_excerpt", empty}});
  g.cache_miss_error = new_class("kjit.CacheMissError", base.ptr(),
                                 "Strict cache mode (KJIT_CACHE_MODE=strict) met a specialization that is not cached. "
                                 "Attributes: key (hex) and specialization (its description).",
                                 {{"key", empty}, {"specialization", empty}});
  g.driver_error = new_class("kjit.DriverError", base.ptr(),
                             "A CUDA Driver API call failed. Attributes: code (the CUresult) and code_name.",
                             {{"code", py::int_(0)}, {"code_name", empty}});
  g.launch_error = new_class("kjit.LaunchError", base.ptr(),
                             "A launch was refused: bad configuration or arguments, a kernel compiled for an "
                             "architecture only, or compiling during CUDA graph capture.");
  g.value_error = new_class("kjit.ValueError", py::make_tuple(py::handle(g.error), py::handle(PyExc_ValueError)).ptr(),
                            "A bad argument value (also a builtins.ValueError).");
  g.type_error = new_class("kjit.TypeError", py::make_tuple(py::handle(g.error), py::handle(PyExc_TypeError)).ptr(),
                           "An argument of the wrong kind (also a builtins.TypeError).");
  g.warning = new_class("kjit.KjitWarning", PyExc_UserWarning,
                        "kjit warnings: damaged cache entries, an unusable cache directory, NVRTC problems.");

  m.attr("Error") = py::handle(g.error);
  m.attr("CompileError") = py::handle(g.compile_error);
  m.attr("CacheMissError") = py::handle(g.cache_miss_error);
  m.attr("DriverError") = py::handle(g.driver_error);
  m.attr("LaunchError") = py::handle(g.launch_error);
  m.attr("ValueError") = py::handle(g.value_error);
  m.attr("TypeError") = py::handle(g.type_error);
  m.attr("KjitWarning") = py::handle(g.warning);

  // Local: only this module's functions (torch's own pybind11 functions keep torch's error mapping
  // even when both extensions share pybind11 internals).
  py::register_local_exception_translator([](std::exception_ptr p) {
    if (p && !set_known_error(p)) std::rethrow_exception(p);
  });
  log::set_warning_sink(warn_to_python);
}

}  // namespace kjit::python
