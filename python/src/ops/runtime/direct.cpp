// The direct entries of the built-in ops (see direct.hpp): argument conversion, the plain-call test,
// and binding the entries as kjit._C.ops.<name>.
#include "ops/runtime/direct.hpp"

#include <ATen/PythonTorchFunctionTLS.h>
#include <ATen/record_function.h>
#include <c10/core/DispatchKeySet.h>
#include <c10/core/GradMode.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <torch/csrc/autograd/python_variable.h>
#include <torch/csrc/jit/frontend/function_schema_parser.h>

#include <algorithm>
#include <atomic>
#include <climits>

#include "core/bindings.hpp"
#include "kjit/error.hpp"
#include "ops/runtime/op.hpp"
#include "ops/runtime/plan.hpp"
#include "ops/runtime/binding.hpp"

namespace kjit::ops {
namespace {

std::atomic<std::uint64_t> g_direct_calls{0}, g_dispatched_calls{0};

struct Entry {
  const char* name;
  const char* schema;
  DirectCall call;
  DirectSchema& (*schema_of)();
  PyObject*& (*fallback_of)();
};

std::vector<Entry>& entries() {
  static std::vector<Entry> e;
  return e;
}

// A default value of the schema as a Python object (new reference).
py::object default_value(const c10::IValue& v) {
  if (v.isNone()) return py::none();
  if (v.isBool()) return py::bool_(v.toBool());
  if (v.isInt()) return py::int_(v.toInt());
  if (v.isDouble()) return py::float_(v.toDouble());
  if (v.isString()) return py::str(v.toStringRef());
  if (v.isIntList()) {
    py::list l;
    for (std::int64_t i : v.toIntVector()) l.append(py::int_(i));
    return std::move(l);
  }
  throw std::logic_error("kjit: unsupported default value in an op schema: " + v.tagKind());
}

// "softmax(x, dim=-1)\n--\n\n": the signature Python's inspect reads from a C function's __doc__.
std::string text_signature(const c10::FunctionSchema& fs) {
  std::string sig = fs.name().substr(fs.name().find("::") + 2) + "(";
  bool first = true;
  for (const c10::Argument& a : fs.arguments()) {
    if (!first) sig += ", ";
    first = false;
    if (a.kwarg_only() && sig.find('*') == std::string::npos) sig += "*, ";
    sig += a.name();
    if (a.default_value()) sig += "=" + py::repr(default_value(*a.default_value())).cast<std::string>();
  }
  return sig + ")\n--\n\n";
}

}  // namespace

DirectSchema parse_direct_schema(const char* name, const char* schema) {
  const c10::FunctionSchema fs = torch::jit::parseSchema(std::string("kjit::") + schema);
  DirectSchema s;
  s.name = name;
  for (const c10::Argument& a : fs.arguments()) {
    s.arg_names.push_back(a.name());
    s.defaults.push_back(a.default_value() ? default_value(*a.default_value()).release().ptr() : nullptr);
    s.list_sizes.push_back(a.N() ? static_cast<int>(*a.N()) : 0);
    c10::TypePtr t = a.type();
    if (const auto opt = t->cast<c10::OptionalType>()) t = opt->getElementType();
    if (const auto list = t->cast<c10::ListType>()) t = list->getElementType();
    s.int_args.push_back(t->kind() == c10::TypeKind::IntType);
    s.any_int_arg = s.any_int_arg || s.int_args.back();
  }
  return s;
}

void refuse_bool_ints(const DirectSchema& s, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  if (!s.any_int_arg) return;
  auto check = [&](std::size_t i, PyObject* o) {
    if (i >= s.int_args.size() || !s.int_args[i]) return;
    PyObject* bad = PyBool_Check(o) ? o : nullptr;
    if (!bad && (PyList_CheckExact(o) || PyTuple_CheckExact(o))) {
      const Py_ssize_t n = PySequence_Fast_GET_SIZE(o);
      PyObject** items = PySequence_Fast_ITEMS(o);
      for (Py_ssize_t k = 0; k < n && !bad; ++k)
        if (PyBool_Check(items[k])) bad = items[k];
    }
    if (bad)
      throw TypeError("kjit.ops." + s.name + ": " + s.arg_names[i] + " must be an int" +
                      (bad == o ? "" : " or a list of ints") + ", got bool (" + (bad == Py_True ? "True" : "False") +
                      "); pass an int (kjit refuses a bool there instead of reading True as 1)");
  };
  for (Py_ssize_t i = 0; i < nargs; ++i) check(static_cast<std::size_t>(i), args[i]);
  const Py_ssize_t nkw = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
  for (Py_ssize_t k = 0; k < nkw; ++k) {
    const char* key = PyUnicode_AsUTF8(PyTuple_GET_ITEM(kwnames, k));
    if (!key) {
      PyErr_Clear();
      continue;
    }
    for (std::size_t j = 0; j < s.arg_names.size(); ++j)
      if (s.arg_names[j] == key) check(j, args[nargs + k]);
  }
}

bool plain_cuda_tensor(const at::Tensor& t) noexcept {
  if (!t.defined()) return false;
  if (c10::GradMode::is_enabled() && t.requires_grad()) return false;
  // A plain CUDA tensor's keys, less those that only matter for autograd and autocast (which kjit's ops
  // do not register: the dispatcher passes them through to the CUDA kernel).
  const c10::DispatchKeySet keys = t.key_set()
                                       .remove(c10::DispatchKey::AutogradFunctionality)
                                       .remove(c10::DispatchKey::ADInplaceOrView)
                                       .remove(c10::DispatchKey::AutocastCUDA);
  if (keys == c10::DispatchKeySet(c10::DispatchKey::CUDA)) return true;
  // Under a compile-only plan (plan.hpp) a plain meta tensor stands for a CUDA one.
  return keys == c10::DispatchKeySet(c10::DispatchKey::Meta) && PlanScope::current();
}

bool plain_thread_state() noexcept {
  const c10::impl::LocalDispatchKeySet tls = c10::impl::tls_local_dispatch_key_set();
  // RecordFunction callbacks (the profiler, torch.profiler's record_shapes...) see the op through the
  // dispatcher, as they would any PyTorch op.
  return (tls.included_ - c10::default_included_set).empty() && !at::impl::torch_function_mode_enabled() &&
         !at::hasCallbacks();
}

void count_direct_call() noexcept { g_direct_calls.fetch_add(1, std::memory_order_relaxed); }
void count_dispatched_call() noexcept { g_dispatched_calls.fetch_add(1, std::memory_order_relaxed); }

void add_op_calls(PyObject* dict) {
  py::dict calls;
  calls["direct"] = g_direct_calls.load(std::memory_order_relaxed);
  calls["dispatched"] = g_dispatched_calls.load(std::memory_order_relaxed);
  if (PyDict_SetItemString(dict, "op_calls", calls.ptr()) < 0) throw py::error_already_set();
}
void reset_op_calls() {
  g_direct_calls.store(0, std::memory_order_relaxed);
  g_dispatched_calls.store(0, std::memory_order_relaxed);
}

PyObject* to_python(at::Tensor&& t) { return THPVariable_Wrap(std::move(t)); }

void set_error_from_current_exception() noexcept { python::set_python_error(std::current_exception()); }

bool Arg<const at::Tensor&>::load(PyObject* o, int, Store& s) {
  if (!THPVariable_CheckExact(o)) return false;
  s = &THPVariable_Unpack(o);
  return plain_cuda_tensor(*s);
}

bool Arg<const std::optional<at::Tensor>&>::load(PyObject* o, int, Store& s) {
  if (o == Py_None) return true;
  if (!THPVariable_CheckExact(o)) return false;
  const at::Tensor& t = THPVariable_Unpack(o);
  if (!plain_cuda_tensor(t)) return false;
  s = t;
  return true;
}

bool Arg<std::int64_t>::load(PyObject* o, int, Store& s) {
  if (!PyLong_CheckExact(o)) return false;
  int overflow = 0;
  s = PyLong_AsLongLongAndOverflow(o, &overflow);
  return !overflow && !(s == -1 && PyErr_Occurred());
}

bool Arg<double>::load(PyObject* o, int, Store& s) {
  if (PyFloat_CheckExact(o)) {
    s = PyFloat_AS_DOUBLE(o);
    return true;
  }
  if (!PyLong_CheckExact(o)) return false;
  s = PyLong_AsDouble(o);
  if (s == -1.0 && PyErr_Occurred()) {
    PyErr_Clear();
    return false;
  }
  return true;
}

bool Arg<bool>::load(PyObject* o, int, Store& s) {
  if (o != Py_True && o != Py_False) return false;
  s = o == Py_True;
  return true;
}

bool Arg<c10::IntArrayRef>::load(PyObject* o, int list_size, Store& s) {
  auto item = [](PyObject* e, std::int64_t& out) {
    if (!PyLong_CheckExact(e)) return false;
    int overflow = 0;
    out = PyLong_AsLongLongAndOverflow(e, &overflow);
    return !overflow && !(out == -1 && PyErr_Occurred());
  };
  if (PyLong_CheckExact(o)) {
    if (list_size <= 0 || static_cast<std::size_t>(list_size) > s.v.size() || !item(o, s.v[0])) return false;
    for (int i = 1; i < list_size; ++i) s.v[i] = s.v[0];
    s.n = static_cast<std::size_t>(list_size);
    return true;
  }
  if (!PyList_CheckExact(o) && !PyTuple_CheckExact(o)) return false;
  const Py_ssize_t n = PySequence_Fast_GET_SIZE(o);
  if (n > static_cast<Py_ssize_t>(s.v.size())) return false;
  PyObject** items = PySequence_Fast_ITEMS(o);
  for (Py_ssize_t i = 0; i < n; ++i)
    if (!item(items[i], s.v[i])) return false;
  s.n = static_cast<std::size_t>(n);
  // int[N] takes N values or none (the op's default); anything else is the dispatcher's error to give.
  return list_size <= 0 || n == 0 || n == list_size;
}

bool Arg<c10::string_view>::load(PyObject* o, int, Store& s) {
  if (!PyUnicode_CheckExact(o)) return false;
  Py_ssize_t len = 0;
  const char* p = PyUnicode_AsUTF8AndSize(o, &len);
  if (!p) {
    PyErr_Clear();
    return false;
  }
  s = c10::string_view(p, static_cast<std::size_t>(len));
  return true;
}

bool Arg<std::optional<c10::string_view>>::load(PyObject* o, int n, Store& s) {
  if (o == Py_None) return true;
  c10::string_view v;
  if (!Arg<c10::string_view>::load(o, n, v)) return false;
  s = v;
  return true;
}

bool register_direct_entry(const char* name, const char* schema, DirectCall call, DirectSchema& (*schema_of)(),
                           PyObject*& (*fallback_of)()) {
  entries().push_back({name, schema, call, schema_of, fallback_of});
  return true;
}

[[noreturn]] void throw_not_a_tensor(const char* name, const char* schema, std::size_t index) {
  std::string arg = "#" + std::to_string(index + 1);
  if (schema) {
    const c10::FunctionSchema fs = torch::jit::parseSchema(std::string("kjit::") + schema);
    if (index < fs.arguments().size()) arg = fs.arguments()[index].name();
  }
  throw TypeError("kjit.ops." + std::string(name ? name : "?") + ": " + arg + " must be a torch.Tensor, got NoneType");
}

void bind_direct_ops(py::module_& m) {
  py::module_ ops = m.def_submodule("ops", "Direct entries of the built-in ops (use kjit.ops)");
  py::object kjit_ops = py::module_::import("torch").attr("ops").attr("kjit");
  static std::deque<PyMethodDef> defs;  // PyCFunction keeps a pointer to its PyMethodDef
  static std::deque<std::string> docs;
  for (const Entry& e : entries()) {
    e.schema_of() = parse_direct_schema(e.name, e.schema);
    py::object op = kjit_ops.attr(e.name).attr("default");
    e.fallback_of() = op.inc_ref().ptr();
    const c10::FunctionSchema fs = torch::jit::parseSchema(std::string("kjit::") + e.schema);
    docs.push_back(text_signature(fs) + "torch.ops.kjit." + e.name + " (" + e.schema +
                   "), called directly when nothing needs the dispatcher.");
    defs.push_back({e.name, reinterpret_cast<PyCFunction>(reinterpret_cast<void*>(e.call)),
                    METH_FASTCALL | METH_KEYWORDS, docs.back().c_str()});
    PyObject* fn = PyCFunction_NewEx(&defs.back(), nullptr, ops.attr("__name__").ptr());
    if (!fn) throw py::error_already_set();
    ops.attr(e.name) = py::reinterpret_steal<py::object>(fn);
  }
  // The registry of what KJIT_OP registered, sorted: kjit.ops.__all__ is this list.
  std::vector<std::string> names;
  for (const Entry& e : entries()) names.emplace_back(e.name);
  std::sort(names.begin(), names.end());
  py::list all;
  for (const std::string& n : names) all.append(n);
  ops.attr("__all__") = all;
}

}  // namespace kjit::ops
