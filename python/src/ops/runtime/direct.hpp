// The direct entry of a built-in op: kjit.ops.<name> is a C function (METH_FASTCALL) that converts its
// Python arguments to the op's C++ arguments and calls the op's CUDA function itself, without the
// dispatcher, when nothing needs the dispatcher:
//   - every tensor argument is an exact torch.Tensor (or Parameter) on a CUDA device with no other
//     dispatch key than a plain CUDA tensor's (no fake, functional, batched, conjugate, nested ... tensor);
//   - no tensor requires grad while grad mode is on;
//   - no dispatch key is forced on for this thread (a TorchDispatchMode, functorch's transforms), no
//     TorchFunctionMode is active and no RecordFunction callback (the profiler) is registered;
//   - every other argument has the exact Python type of its schema type (int, float, bool, str, lists
//     of ints; defaults from the schema).
// Anything else calls the registered op (torch.ops.kjit.<name>.default) with the arguments as given, so
// autograd, torch.compile, fake tensors, vmap, tensor subclasses and the dispatcher's own argument
// errors behave exactly as through torch.ops. Under torch.compile, Dynamo traces the registered op
// (kjit/ops.py registers it in place of the C function).
#pragma once

#include <Python.h>
#include <ATen/core/Tensor.h>
#include <c10/util/string_view.h>

#include <array>
#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

namespace kjit::ops {

// ---- what the direct entry needs to know about one op (direct.cpp) ------------------------------------------

// The schema's arguments: names, default values as Python objects (null: required), and the fixed size
// of int[N] arguments (0 otherwise).
struct DirectSchema {
  std::string name;
  std::vector<std::string> arg_names;
  std::vector<PyObject*> defaults;  // new references, kept for the process
  std::vector<int> list_sizes;
  std::vector<bool> int_args;  // int, int? or int[] (a Python bool there is refused, see refuse_bool_ints)
  bool any_int_arg = false;
};

// Parses `schema` ("softmax(Tensor x, int dim=-1) -> Tensor") with torch's schema parser.
DirectSchema parse_direct_schema(const char* name, const char* schema);

// Throws kjit's TypeError when an int argument (or an element of an int list) is a Python bool: the
// dispatcher would read True as 1 (ops.sum(x, True) would reduce dim 1). Called on the way to the
// registered op only (the direct conversion already refuses a bool where an int goes).
void refuse_bool_ints(const DirectSchema& s, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames);

// Whether `t` is a plain CUDA tensor that the CUDA function may take directly (see above).
bool plain_cuda_tensor(const at::Tensor& t) noexcept;
// Whether this thread forces no dispatch key on and no TorchFunctionMode is active.
bool plain_thread_state() noexcept;

// Counts the calls each way (kjit.stats()["op_calls"]).
void count_direct_call() noexcept;
void count_dispatched_call() noexcept;

// The Python result of an op's C++ result.
PyObject* to_python(at::Tensor&& t);
template <class... T>
PyObject* to_python(std::tuple<T...>&& t);

// Sets the Python error for the current C++ exception (kjit errors as kjit.*, c10 errors as RuntimeError).
void set_error_from_current_exception() noexcept;

// ---- argument conversion: Python object -> the C++ argument type of an op's function -----------------------

// Arg<T>::Store holds a converted argument (borrowing from the Python object, alive for the call);
// load() converts (false: the direct entry does not apply, the registered op is called instead);
// get() gives the C++ argument.
template <class T>
struct Arg;

template <>
struct Arg<const at::Tensor&> {
  using Store = const at::Tensor*;
  static bool load(PyObject* o, int, Store& s);
  static const at::Tensor& get(const Store& s) { return *s; }
};

template <>
struct Arg<const std::optional<at::Tensor>&> {
  using Store = std::optional<at::Tensor>;
  static bool load(PyObject* o, int, Store& s);
  static const std::optional<at::Tensor>& get(const Store& s) { return s; }
};

template <>
struct Arg<std::int64_t> {
  using Store = std::int64_t;
  static bool load(PyObject* o, int, Store& s);
  static std::int64_t get(const Store& s) { return s; }
};

template <>
struct Arg<double> {
  using Store = double;
  static bool load(PyObject* o, int, Store& s);
  static double get(const Store& s) { return s; }
};

template <>
struct Arg<bool> {
  using Store = bool;
  static bool load(PyObject* o, int, Store& s);
  static bool get(const Store& s) { return s; }
};

// int[N] (N > 0: an int stands for N copies, as the dispatcher reads it) or int[].
struct IntList {
  std::array<std::int64_t, 8> v{};
  std::size_t n = 0;
};
template <>
struct Arg<c10::IntArrayRef> {
  using Store = IntList;
  static bool load(PyObject* o, int list_size, Store& s);
  static c10::IntArrayRef get(const Store& s) { return c10::IntArrayRef(s.v.data(), s.n); }
};

template <>
struct Arg<c10::string_view> {
  using Store = c10::string_view;
  static bool load(PyObject* o, int, Store& s);
  static c10::string_view get(const Store& s) { return s; }
};

// str? (None or a str).
template <>
struct Arg<std::optional<c10::string_view>> {
  using Store = std::optional<c10::string_view>;
  static bool load(PyObject* o, int, Store& s);
  static std::optional<c10::string_view> get(const Store& s) { return s; }
};

// ---- the entry ---------------------------------------------------------------------------------------------

template <auto F>
struct Direct;

template <class R, class... A, R (*F)(A...)>
struct Direct<F> {
  static constexpr std::size_t kArgs = sizeof...(A);
  using Stores = std::tuple<typename Arg<A>::Store...>;

  static DirectSchema& schema() {
    static DirectSchema s;
    return s;
  }
  static PyObject*& fallback() {
    static PyObject* op = nullptr;  // torch.ops.kjit.<name>.default, set when the module binds the entry
    return op;
  }

  // Binds positional arguments, then keywords, then defaults; false when an argument is missing,
  // unknown, given twice or not convertible (the registered op then says what is wrong).
  template <std::size_t... I>
  static bool bind(PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames, Stores& st, std::index_sequence<I...>) {
    if (nargs > static_cast<Py_ssize_t>(kArgs)) return false;
    const DirectSchema& s = schema();
    std::array<PyObject*, kArgs> given{};
    for (Py_ssize_t i = 0; i < nargs; ++i) given[i] = args[i];
    const Py_ssize_t nkw = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
    for (Py_ssize_t k = 0; k < nkw; ++k) {
      Py_ssize_t len = 0;
      const char* key = PyUnicode_AsUTF8AndSize(PyTuple_GET_ITEM(kwnames, k), &len);
      if (!key) {
        PyErr_Clear();
        return false;
      }
      const std::string_view name(key, static_cast<std::size_t>(len));
      std::size_t j = 0;
      while (j < kArgs && s.arg_names[j] != name) ++j;
      if (j == kArgs || given[j]) return false;
      given[j] = args[nargs + k];
    }
    for (std::size_t i = 0; i < kArgs; ++i) {
      if (!given[i]) given[i] = s.defaults[i];
      if (!given[i]) return false;
    }
    return (... && Arg<A>::load(given[I], s.list_sizes[I], std::get<I>(st)));
  }

  template <std::size_t... I>
  static R invoke(const Stores& st, std::index_sequence<I...>) {
    return F(Arg<A>::get(std::get<I>(st))...);
  }

  static PyObject* call(PyObject*, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) noexcept {
    try {
      Stores st;
      if (plain_thread_state() && bind(args, nargs, kwnames, st, std::index_sequence_for<A...>{})) {
        count_direct_call();
        return to_python(invoke(st, std::index_sequence_for<A...>{}));
      }
      refuse_bool_ints(schema(), args, nargs, kwnames);
    } catch (...) {
      set_error_from_current_exception();
      return nullptr;
    }
    count_dispatched_call();
    return PyObject_Vectorcall(fallback(), args, static_cast<std::size_t>(nargs), kwnames);
  }
};

// Called by KJIT_OP at static initialization: remembers the entry for bind_direct_ops().
using DirectCall = PyObject* (*)(PyObject*, PyObject* const*, Py_ssize_t, PyObject*);
bool register_direct_entry(const char* name, const char* schema, DirectCall call, DirectSchema& (*schema_of)(),
                           PyObject*& (*fallback_of)());

template <auto F>
bool register_direct(const char* name, const char* schema) {
  return register_direct_entry(name, schema, &Direct<F>::call, &Direct<F>::schema, &Direct<F>::fallback);
}

template <class... T>
PyObject* to_python(std::tuple<T...>&& t) {
  PyObject* out = PyTuple_New(sizeof...(T));
  if (!out) return nullptr;
  bool ok = true;
  std::size_t i = 0;
  std::apply(
      [&](auto&... e) {
        ((ok = ok &&
               [&] {
                 PyObject* o = to_python(std::move(e));
                 if (!o) return false;
                 PyTuple_SET_ITEM(out, i++, o);
                 return true;
               }()),
         ...);
      },
      t);
  if (!ok) {
    Py_DECREF(out);
    return nullptr;
  }
  return out;
}

}  // namespace kjit::ops
