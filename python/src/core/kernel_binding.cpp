// kjit.Kernel: one specialization, loaded for a device. launch() is the hot path: arguments are read
// from the vectorcall, tensors give their data pointers, Python numbers are packed by ParamLayout into
// a stack buffer with the exact bytes of each parameter's type, and the kernel goes to the stream.
#include <pybind11/stl.h>

#include <climits>
#include <optional>
#include <string_view>
#include <type_traits>
#include <variant>

#include "kjit/cache/entry_metadata_fields.hpp"
#include "kjit/error.hpp"
#include "device_context.hpp"
#include "foreign.hpp"
#include "objects.hpp"
#include "torch_hooks.hpp"

namespace kjit::python {
namespace {

std::string repr(PyObject* v) { return py::repr(py::handle(v)).cast<std::string>(); }

Dim3 parse_dim(PyObject* v, const char* what) {
  auto bad_kind = [&]() -> TypeError {
    return TypeError(std::string(what) + " must be an int or a tuple of 1 to 3 ints, got " + describe_value(v));
  };
  Dim3 d;
  auto one = [&](PyObject* x, unsigned& out) {
    if (!PyLong_Check(x) || PyBool_Check(x)) throw bad_kind();
    int overflow = 0;
    const long long n = PyLong_AsLongLongAndOverflow(x, &overflow);
    if (overflow || n < 0 || n > static_cast<long long>(UINT_MAX))
      throw ValueError(std::string(what) + " " + repr(v) + " has a dimension out of range [1, 2^32-1]");
    out = static_cast<unsigned>(n);
  };
  if (PyLong_Check(v) && !PyBool_Check(v)) {
    one(v, d.x);
    return d;
  }
  const bool tuple = PyTuple_Check(v);
  if (!tuple && !PyList_Check(v)) throw bad_kind();
  const Py_ssize_t n = tuple ? PyTuple_GET_SIZE(v) : PyList_GET_SIZE(v);
  if (n < 1 || n > 3) throw bad_kind();
  unsigned* dims[3] = {&d.x, &d.y, &d.z};
  for (Py_ssize_t i = 0; i < n; ++i) one(tuple ? PyTuple_GET_ITEM(v, i) : PyList_GET_ITEM(v, i), *dims[i]);
  return d;
}

CUstream parse_stream(PyObject* v, int device) {
  CUstream torch_stream = nullptr;
  if (const TorchHooks* h = torch_hooks(); h && h->stream(v, device, &torch_stream)) return torch_stream;
  // Int handles and other frameworks' streams (their device is the caller's business, as for an int).
  if (auto s = stream_from_protocol(v)) return *s;
  throw TypeError(
      "stream must be None (the current stream), a torch.cuda.Stream or an int handle, or another "
      "framework's stream (with __cuda_stream__, .cuda_stream, .ptr or .handle), got " +
      describe_value(v));
}

void pack_number(const ParamLayout& L, std::size_t i, PyObject* v, ArgSlot& slot) {
  if (PyBool_Check(v)) return L.pack_bool(i, v == Py_True, slot);
  if (PyLong_Check(v)) {
    int overflow = 0;
    const long long x = PyLong_AsLongLongAndOverflow(v, &overflow);
    if (!overflow) {
      if (x == -1 && PyErr_Occurred()) throw py::error_already_set();
      return L.pack_int(i, x, slot);
    }
    const LaunchParam& p = L[i];
    if (p.kind == LaunchParam::Kind::Scalar && dtype_is_floating(p.scalar)) {
      const double d = PyLong_AsDouble(v);
      if (d == -1.0 && PyErr_Occurred()) {
        PyErr_Clear();
        throw ValueError("argument '" + p.name + "' of " + L.kernel() + " is " + p.describe() + ": the value " +
                         repr(v) + " overflows it");
      }
      return L.pack_float(i, d, slot);
    }
    if (overflow > 0) {
      const unsigned long long u = PyLong_AsUnsignedLongLong(v);
      if (!PyErr_Occurred()) return L.pack_uint(i, u, slot);
      PyErr_Clear();
    }
    L.reject_range(i, repr(v));
  }
  if (PyFloat_Check(v)) return L.pack_float(i, PyFloat_AS_DOUBLE(v), slot);
  if (const TorchHooks* h = torch_hooks(); h && h->is_tensor(v))
    L.reject(i, "a tensor (pass a Python number; for a one-element tensor, t.item())");
  if (PyIndex_Check(v) && !PyUnicode_Check(v)) {  // numpy integers
    py::object o = py::reinterpret_steal<py::object>(PyNumber_Index(v));
    if (!o) throw py::error_already_set();
    return pack_number(L, i, o.ptr(), slot);
  }
  if (!PyUnicode_Check(v) && Py_TYPE(v)->tp_as_number && Py_TYPE(v)->tp_as_number->nb_float) {  // numpy floats
    const double d = PyFloat_AsDouble(v);
    if (d == -1.0 && PyErr_Occurred()) throw py::error_already_set();
    return L.pack_float(i, d, slot);
  }
  L.reject(i, describe_value(v));
}

// Packs argument i. A pointer argument that is an array of another framework is left to `foreign`
// (its pointer waits for the launch stream); `tensors` is set when it is a tensor (`hooks`: torch's, or null).
void pack_arg(const TorchHooks* hooks, const ParamLayout& L, std::size_t i, PyObject* v, int device, ArgSlot& slot,
              ForeignArgs& foreign, bool& tensors) {
  const LaunchParam& p = L[i];
  if (p.kind == LaunchParam::Kind::Pointer) {
    if (v == Py_None) return L.pack_pointer(i, nullptr, slot);
    void* ptr = nullptr;
    if (hooks && hooks->tensor_pointer(v, L, i, device, &ptr)) {
      tensors = true;
      return L.pack_pointer(i, ptr, slot);
    }
    return foreign.add(L, i, v, device);
  }
  pack_number(L, i, v, slot);
}

PyObject* launch(PyObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  const PyKernel& k = py::handle(self).cast<const PyKernel&>();
  const KernelInfo& info = *k.info;
  const ParamLayout& L = info.layout;
  if (nargs < 2)
    throw TypeError("launch() takes grid and block, then the kernel's arguments " + L.signature() + "; got " +
                    std::to_string(nargs) + " positional argument" + (nargs == 1 ? "" : "s"));
  unsigned shared_mem = 0;
  PyObject* stream = nullptr;
  for_each_kwarg(args, nargs, kwnames, [&](std::string_view name, PyObject* value) {
    if (name == "stream") {
      stream = value;
    } else if (name == "shared_mem") {
      if (!PyLong_Check(value) || PyBool_Check(value))
        throw TypeError("shared_mem must be an int (bytes of dynamic shared memory), got " + describe_value(value));
      int overflow = 0;
      const long long b = PyLong_AsLongLongAndOverflow(value, &overflow);
      if (overflow || b < 0 || b > static_cast<long long>(UINT_MAX))
        throw ValueError("shared_mem " + repr(value) + " is out of range [0, 2^32-1]");
      shared_mem = static_cast<unsigned>(b);
    } else {
      throw TypeError("launch() got an unexpected keyword argument '" + std::string(name) +
                      "': it takes launch(grid, block, *args, shared_mem=0, stream=None), the kernel's arguments " +
                      L.signature() + " by position");
    }
  });
  if (!info.specialized->kernel)
    throw LaunchError(info.name_expression + " is compiled for " + info.arch + " only (arch='" + info.arch +
                      "'); specialize with a device to launch");
  LaunchConfig cfg;
  cfg.grid = parse_dim(args[0], "grid");
  cfg.block = parse_dim(args[1], "block");
  cfg.shared_mem = shared_mem;
  cfg.validate();
  const std::size_t n = static_cast<std::size_t>(nargs - 2);
  L.check_count(n);
  ArgBuffer buf(n);
  ForeignArgs foreign;
  bool tensors = false;
  const TorchHooks* hooks = torch_hooks();
  for (std::size_t i = 0; i < n; ++i) pack_arg(hooks, L, i, args[2 + i], k.device, buf.slot(i), foreign, tensors);
  // The stream: the one given; else PyTorch's current stream when tensors (or no arrays) are passed
  // (the legacy default stream without torch); else the arrays' producer stream (CAI v3), else the
  // legacy default stream.
  std::optional<DeviceContext> ctx;
  if (stream != nullptr && stream != Py_None)
    ctx.emplace(k.device, parse_stream(stream, k.device));
  else if (tensors || foreign.empty())
    ctx.emplace(k.device);
  else
    ctx.emplace(k.device, foreign.producer_stream().value_or(CU_STREAM_LEGACY));
  if (!foreign.empty()) foreign.pack(L, ctx->stream, buf);
  cfg.stream = ctx->stream;
  info.specialized->kernel->launch(cfg, buf.pointers());
  Py_RETURN_NONE;
}

PyMethodDef launch_def = {
    "launch", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(&guarded<&launch>)),
    METH_FASTCALL | METH_KEYWORDS,
    "launch($self, grid, block, /, *args, shared_mem=0, stream=None)\n--\n\n"
    "Launches the kernel: grid and block are an int or a tuple of 1 to 3 ints; `args` are the kernel's\n"
    "arguments in order. A tensor passes its data pointer (it must be a CUDA tensor on the kernel's\n"
    "device; its layout is not checked: non-contiguous tensors and views are the caller's business);\n"
    "so does an array of another framework (CuPy, JAX, Numba, TensorFlow: __cuda_array_interface__ or\n"
    "__dlpack__), its dtype checked like a tensor's. None passes a null pointer, and Python numbers are\n"
    "converted to the exact parameter type (a float for an integer parameter, or a value out of the\n"
    "type's range, is an error).\n"
    "stream: a torch.cuda.Stream, an int handle, or another framework's stream (__cuda_stream__,\n"
    ".cuda_stream, .ptr, .handle). Without it: torch.cuda.current_stream(device) when a tensor (or no\n"
    "array) is passed; else the arrays' producer stream (__cuda_array_interface__ v3), else the legacy\n"
    "default stream. DLPack arrays are exported for the launch stream, which waits for every other\n"
    "producer stream named. Legal inside CUDA graph capture."};

py::object arg_value(const TemplateArg& a) {
  switch (a.kind()) {
    case TemplateArg::Kind::Type: return py::str(dtype_name(a.dtype()));
    case TemplateArg::Kind::Integer: return a.above_int64() ? py::int_(a.uint_value()) : py::int_(a.int_value());
    case TemplateArg::Kind::Float: return py::float_(a.float_value());
    case TemplateArg::Kind::Bool: return py::bool_(a.bool_value());
    case TemplateArg::Kind::Default: break;  // never listed: only given arguments are
  }
  return py::none();
}

// The entry's metadata, one key per row of its field table (entry_metadata_fields.hpp), as the entry's
// JSON names them.
py::dict meta_dict(const cache::EntryMetadata& m) {
  auto to_py = [](const auto& v) -> py::object {
    if constexpr (std::is_same_v<std::decay_t<decltype(v)>, cache::OutputKind>)
      return py::cast(cache::to_string(v));  // "cubin" / "ptx", as the JSON has it
    else
      return py::cast(v);
  };
  py::dict d;
  for (const cache::EntryMetadataField& f : cache::entry_metadata_fields())
    d[f.name.c_str()] = std::visit(to_py, f.get(m));
  return d;
}

}  // namespace

void bind_kernel(py::module_& m) {
  py::class_<PyKernel> kernel(m, "Kernel",
                              "A specialized kernel (from KernelFamily.specialize): launch() it; key, origin and "
                              "meta tell where it came from.");
  kernel
      .def_property_readonly(
          "key", [](const PyKernel& k) { return k.info->specialized->key.hex(); }, "The cache key (hex SHA-256).")
      .def_property_readonly(
          "origin", [](const PyKernel& k) { return to_string(k.origin); },
          "'memory', 'disk', 'remote' or 'compiled': where this specialize() call found it.")
      .def_property_readonly("name_expression", [](const PyKernel& k) { return k.info->name_expression; })
      .def_property_readonly(
          "target", [](const PyKernel& k) { return k.info->specialized->meta.target; },
          "What the binary is for: 'sm_90', 'sm_90a' or 'compute_90' (PTX).")
      .def_property_readonly(
          "device",
          [](const PyKernel& k) { return k.device < 0 ? py::object(py::none()) : py::object(py::int_(k.device)); },
          "The CUDA device it launches on; None when compiled for an architecture only.")
      .def_property_readonly(
          "meta", [](const PyKernel& k) { return meta_dict(k.info->specialized->meta); }, "The cache entry's metadata.")
      .def_property_readonly(
          "args",
          [](const PyKernel& k) {
            py::dict d;
            for (const auto& [name, value] : k.info->args) d[py::str(name)] = arg_value(value);
            return d;
          },
          "The template arguments: {name: dtype name, int, float or bool}.")
      .def_property_readonly(
          "params",
          [](const PyKernel& k) {
            py::list out;
            for (const auto& p : k.info->layout.params()) {
              std::optional<DType> dt;
              if (p.kind == LaunchParam::Kind::Scalar)
                dt = p.scalar;
              else if (p.kind == LaunchParam::Kind::Pointer)
                dt = p.pointee;
              out.append(py::make_tuple(p.name, to_string(p.kind), p.type,
                                        dt ? py::object(py::str(dtype_name(*dt))) : py::object(py::none())));
            }
            return out;
          },
          "Launch parameters: (name, kind, cpp_type, dtype) with kind 'pointer', 'scalar' or "
          "'unsupported', the type with template arguments substituted, and the dtype name of "
          "a scalar or of a pointer's elements (None when unknown).")
      .def_property_readonly(
          "param_sizes",
          [](const PyKernel& k) -> py::object {
            const auto& kernel = k.info->specialized->kernel;
            if (!kernel || !kernel->param_sizes_known()) return py::none();
            return py::cast(kernel->param_sizes());
          },
          "Byte size of each parameter as the driver reports it (None when unknown).")
      .def_property_readonly(
          "log", [](const PyKernel& k) { return k.info->specialized->log; },
          "NVRTC warnings when it was compiled by specialize(arch=...) in this process.")
      .def("__repr__", [](const PyKernel& k) {
        std::string where = k.device >= 0 ? "cuda:" + std::to_string(k.device) : "arch " + k.info->arch;
        return "<kjit.Kernel " + k.info->name_expression + " on " + where +
               " target=" + k.info->specialized->meta.target + " origin=" + to_string(k.origin) +
               " key=" + k.info->specialized->key.hex().substr(0, 12) + ">";
      });
  add_fast_method(kernel, &launch_def);
}

}  // namespace kjit::python
