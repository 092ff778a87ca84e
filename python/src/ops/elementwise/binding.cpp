// kjit._C.ElementwiseFunction: the C++ side of a kjit.elementwise function (ops/elementwise/function.hpp), shared
// with the registered op kjit::elementwise through one table keyed by the spec.
//   call(*inputs, **inputs_scalars_and_out)   the direct call (METH_FASTCALL): binds the arguments and runs
//                                             the function when nothing needs the dispatcher; returns None
//                                             otherwise (an argument it does not take as is, a tensor that
//                                             requires grad, a subclass, a mode), and kjit/elementwise.py
//                                             then binds them with its messages and calls the registered op.
//   compute(inputs, scalars, out)             the function with out= (no autograd).
#include <pybind11/stl.h>
#include <torch/csrc/autograd/python_variable.h>
#include <torch/csrc/utils/pybind.h>

#include <algorithm>
#include <array>
#include <new>
#include <vector>

#include "core/bindings.hpp"
#include "core/objects.hpp"
#include "ops/runtime/direct.hpp"
#include "ops/elementwise/function.hpp"

namespace kjit::python {
namespace {

struct PyElementwise {
  const ops::ElementwiseFn* fn;
};

// The input tensors of one direct call, in place: only the tensors of the call are constructed and destroyed
// (a function takes up to ElementwiseFn::kMaxInputs = 32; most take one to three).
class CallTensors {
 public:
  CallTensors() = default;
  CallTensors(const CallTensors&) = delete;
  CallTensors& operator=(const CallTensors&) = delete;
  ~CallTensors() {
    for (std::size_t i = 0; i < n_; ++i) data()[i].~Tensor();
  }
  void push(const at::Tensor& t) {
    new (buf_ + n_ * sizeof(at::Tensor)) at::Tensor(t);
    ++n_;
  }
  at::Tensor* data() noexcept { return std::launder(reinterpret_cast<at::Tensor*>(buf_)); }
  std::size_t size() const noexcept { return n_; }

 private:
  alignas(at::Tensor) unsigned char buf_[ops::ElementwiseFn::kMaxInputs * sizeof(at::Tensor)];
  std::size_t n_ = 0;
};

bool scalar_value(PyObject* o, double& v) {
  if (PyFloat_CheckExact(o)) {
    v = PyFloat_AS_DOUBLE(o);
    return true;
  }
  if (!PyLong_CheckExact(o)) return false;
  v = PyLong_AsDouble(o);
  if (v == -1.0 && PyErr_Occurred()) {
    PyErr_Clear();
    return false;
  }
  return true;
}

bool plain_tensor(PyObject* o, const at::Tensor*& t) {
  if (!THPVariable_CheckExact(o)) return false;
  t = &THPVariable_Unpack(o);
  return ops::plain_cuda_tensor(*t);
}

PyObject* call(PyObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  const ops::ElementwiseFn& fn = *py::handle(self).cast<const PyElementwise&>().fn;
  const ops::ElementwiseSpec& spec = fn.spec();
  const std::size_t n_in = spec.inputs.size(), n_sc = spec.scalars.size();
  if (!ops::plain_thread_state() || nargs > static_cast<Py_ssize_t>(n_in) || n_sc > 32) Py_RETURN_NONE;
  PyObject* given_in[ops::ElementwiseFn::kMaxInputs];
  std::fill_n(given_in, n_in, nullptr);
  std::array<PyObject*, 32> given_sc{};
  PyObject* out = nullptr;
  for (Py_ssize_t i = 0; i < nargs; ++i) given_in[i] = args[i];
  bool ok = true;
  for_each_kwarg(args, nargs, kwnames, [&](std::string_view name, PyObject* value) {
    for (std::size_t i = 0; i < n_in; ++i)
      if (spec.inputs[i] == name) {
        ok = ok && !given_in[i];
        given_in[i] = value;
        return;
      }
    for (std::size_t i = 0; i < n_sc; ++i)
      if (spec.scalars[i] == name) {
        given_sc[i] = value;
        return;
      }
    if (name == "out") {
      out = value;
      return;
    }
    ok = false;
  });
  if (!ok) Py_RETURN_NONE;
  CallTensors tensors;
  for (std::size_t i = 0; i < n_in; ++i) {
    const at::Tensor* t = nullptr;
    if (!given_in[i] || !plain_tensor(given_in[i], t)) Py_RETURN_NONE;
    tensors.push(*t);
  }
  std::array<double, 32> scalars{};
  for (std::size_t i = 0; i < n_sc; ++i) {
    if (given_sc[i]) {
      if (!scalar_value(given_sc[i], scalars[i])) Py_RETURN_NONE;
      continue;
    }
    bool found = false;
    for (const auto& [name, value] : spec.defaults)
      if (name == spec.scalars[i]) {
        scalars[i] = value;
        found = true;
      }
    if (!found) Py_RETURN_NONE;
  }
  const at::Tensor* out_tensor = nullptr;
  if (out && out != Py_None && !plain_tensor(out, out_tensor)) Py_RETURN_NONE;
  at::Tensor result =
      fn.call(c10::ArrayRef<at::Tensor>(tensors.data(), n_in), c10::ArrayRef<double>(scalars.data(), n_sc), out_tensor);
  ops::count_direct_call();
  return THPVariable_Wrap(std::move(result));
}

PyMethodDef call_def = {
    "call", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(&guarded<&call>)), METH_FASTCALL | METH_KEYWORDS,
    "call($self, /, *inputs, **kwargs)\n--\n\n"
    "Runs the function directly when nothing needs the dispatcher; None otherwise (see kjit.elementwise)."};

}  // namespace

void bind_elementwise(py::module_& m) {
  py::class_<PyElementwise> cls(m, "ElementwiseFunction",
                                "The compiled side of a kjit.elementwise function (one per spec, kept).");
  cls.def(py::init([](const std::string& spec) { return PyElementwise{&ops::elementwise_fn(spec)}; }), py::arg("spec"))
      .def_property_readonly("spec", [](const PyElementwise& f) { return f.fn->spec_json(); })
      .def(
          "source", [](const PyElementwise& f, const std::vector<double>& values) { return f.fn->source(values); },
          py::arg("specialized_values"))
      .def(
          "template",
          [](const PyElementwise& f, const std::vector<double>& values) { return PyTemplate{f.fn->tmpl(values)}; },
          py::arg("specialized_values"))
      .def(
          "kernel_family",
          [](const PyElementwise& f, const std::vector<double>& values, int rank, at::ScalarType out_dtype) {
            const KernelFamily& fam = f.fn->kernel_family(values, rank, out_dtype);
            // The function keeps its families for the process: a view, not an owner.
            return PyFamily{std::shared_ptr<const KernelFamily>(std::shared_ptr<const KernelFamily>(), &fam)};
          },
          py::arg("specialized_values"), py::arg("rank"), py::arg("out_dtype"),
          "The KernelFamily a call with a result of out_dtype uses (rank 0: flat; 1-6: strided), with its options")
      .def(
          "compute",
          [](const PyElementwise& f, const std::vector<at::Tensor>& inputs, const std::vector<double>& scalars,
             const std::optional<at::Tensor>& out) { return f.fn->call(inputs, scalars, out ? &*out : nullptr); },
          py::arg("inputs"), py::arg("scalars"), py::arg("out") = py::none());
  add_fast_method(cls, &call_def);
  // The rules a definition is checked with, stated once (function.hpp).
  cls.attr("max_inputs") = ops::ElementwiseFn::kMaxInputs;
  py::tuple not_an_expression(std::size(ops::ElementwiseFn::kNotAnExpression));
  for (std::size_t i = 0; i < std::size(ops::ElementwiseFn::kNotAnExpression); ++i)
    not_an_expression[i] = py::str(ops::ElementwiseFn::kNotAnExpression[i]);
  cls.attr("not_an_expression") = not_an_expression;
}

}  // namespace kjit::python
