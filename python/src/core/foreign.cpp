#include "foreign.hpp"

#include <pybind11/stl.h>

#include <cstdio>
#include <string_view>

#include "kjit/driver_library.hpp"
#include "kjit/error.hpp"

namespace kjit::python {
namespace {

// ---- DLPack ---------------------------------------------------------------------------------------
// The legacy (unversioned) ABI of dlpack.h, which every producer exports when the consumer asks
// for no max_version: a stable C layout, declared here so that this file needs no framework header.
struct DLDevice {
  std::int32_t device_type;
  std::int32_t device_id;
};
struct DLDataType {
  std::uint8_t code;
  std::uint8_t bits;
  std::uint16_t lanes;
};
struct DLTensor {
  void* data;
  DLDevice device;
  std::int32_t ndim;
  DLDataType dtype;
  std::int64_t* shape;
  std::int64_t* strides;
  std::uint64_t byte_offset;
};
struct DLManagedTensor {
  DLTensor dl_tensor;
  void* manager_ctx;
  void (*deleter)(DLManagedTensor* self);
};
enum : int { kDLCPU = 1, kDLCUDA = 2, kDLCUDAHost = 3, kDLROCM = 10, kDLCUDAManaged = 13 };
enum : int { kDLInt = 0, kDLUInt = 1, kDLFloat = 2, kDLBfloat = 4, kDLComplex = 5, kDLBool = 6 };

std::string dl_device_name(int type, int id) {
  switch (type) {
    case kDLCPU: return "CPU memory";
    case kDLCUDA: return "cuda:" + std::to_string(id);
    case kDLCUDAHost: return "CUDA pinned host memory";
    case kDLCUDAManaged: return "CUDA managed memory";
    case kDLROCM: return "a ROCm device";
  }
  return "DLPack device type " + std::to_string(type);
}

std::optional<DType> dl_dtype(DLDataType t) {
  if (t.lanes != 1) return std::nullopt;
  switch (t.code) {
    case kDLFloat:
      return t.bits == 16   ? std::optional(DType::Float16)
             : t.bits == 32 ? std::optional(DType::Float32)
             : t.bits == 64 ? std::optional(DType::Float64)
                            : std::nullopt;
    case kDLBfloat: return t.bits == 16 ? std::optional(DType::BFloat16) : std::nullopt;
    case kDLInt:
      return t.bits == 8    ? std::optional(DType::Int8)
             : t.bits == 16 ? std::optional(DType::Int16)
             : t.bits == 32 ? std::optional(DType::Int32)
             : t.bits == 64 ? std::optional(DType::Int64)
                            : std::nullopt;
    case kDLUInt:
      return t.bits == 8    ? std::optional(DType::UInt8)
             : t.bits == 16 ? std::optional(DType::UInt16)
             : t.bits == 32 ? std::optional(DType::UInt32)
             : t.bits == 64 ? std::optional(DType::UInt64)
                            : std::nullopt;
    case kDLBool: return t.bits == 8 ? std::optional(DType::Bool) : std::nullopt;
  }
  return std::nullopt;
}

std::string dl_dtype_text(DLDataType t) {
  if (auto d = dl_dtype(t)) return dtype_name(*d);
  static const char* const kCodes[] = {"int", "uint", "float", "opaque handle", "bfloat", "complex", "bool"};
  std::string s = t.code < 7 ? std::string(kCodes[t.code]) : "DLPack type code " + std::to_string(t.code);
  s += std::to_string(t.bits);
  if (t.lanes != 1) s += "x" + std::to_string(t.lanes);
  return s;
}

// The `stream` argument of __dlpack__ for a launch on `s`: the consumer's stream, on which the
// producer orders its pending work. 0 is not allowed there (ambiguous): the legacy default stream is 1.
py::int_ dlpack_stream_arg(CUstream s) {
  const auto h = reinterpret_cast<std::uintptr_t>(s);
  return py::int_(h == 0 ? std::uintptr_t{1} : h);
}

// ---- CUDA Array Interface -------------------------------------------------------------------------
[[noreturn]] void malformed(PyObject* o, const std::string& what, const std::string& detail) {
  throw ValueError(what + " is a " + type_name(o) + " whose __cuda_array_interface__ is malformed: " + detail +
                   "; its producer does not follow the CUDA Array Interface "
                   "(https://numba.readthedocs.io/en/stable/cuda/cuda_array_interface.html)");
}

// "<f4" -> float32. Native byte order only ('<' on the little-endian hosts CUDA runs on, '|' for one
// byte, '=' native).
std::optional<DType> typestr_dtype(std::string_view t) {
  if (t.size() < 3 || (t[0] != '<' && t[0] != '|' && t[0] != '=')) return std::nullopt;
  const std::string_view code = t.substr(1);
  static constexpr struct {
    const char* code;
    DType t;
  } kRows[] = {{"f2", DType::Float16}, {"f4", DType::Float32}, {"f8", DType::Float64}, {"i1", DType::Int8},
               {"i2", DType::Int16},   {"i4", DType::Int32},   {"i8", DType::Int64},   {"u1", DType::UInt8},
               {"u2", DType::UInt16},  {"u4", DType::UInt32},  {"u8", DType::UInt64},  {"b1", DType::Bool}};
  for (const auto& r : kRows)
    if (code == r.code) return r.t;
  return std::nullopt;
}

long long as_index(PyObject* o, PyObject* v, const std::string& what, const char* field) {
  if (!PyLong_Check(v) || PyBool_Check(v))
    malformed(o, what, std::string("'") + field + "' must hold ints, got " + describe_value(v));
  const long long x = PyLong_AsLongLong(v);
  if (x == -1 && PyErr_Occurred()) {
    PyErr_Clear();
    malformed(o, what, std::string("'") + field + "' holds " + py::repr(v).cast<std::string>() + ", out of range");
  }
  return x;
}

std::vector<long long> int_tuple(PyObject* o, PyObject* v, const std::string& what, const char* field) {
  if (!PyTuple_Check(v))
    malformed(o, what, std::string("'") + field + "' must be a tuple of ints, got " + describe_value(v));
  std::vector<long long> out;
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(v); ++i) out.push_back(as_index(o, PyTuple_GET_ITEM(v, i), what, field));
  return out;
}

// The CUDA device that owns `data` (its context's device). Cold path: one driver call.
int pointer_device(PyObject* o, void* data, const std::string& what) {
  const DriverLibrary& d = DriverLibrary::get();
  int ordinal = -1;
  auto query = [&] {
    return d.cuPointerGetAttribute(&ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, reinterpret_cast<CUdeviceptr>(data));
  };
  CUresult r = query();
  if (r == CUDA_ERROR_INVALID_CONTEXT) {  // no context on this thread yet: any one answers (UVA)
    make_primary_context_current(0);
    r = query();
  }
  if (r == CUDA_SUCCESS) return ordinal;
  char ptr[32];
  std::snprintf(ptr, sizeof ptr, "%p", data);
  if (r == CUDA_ERROR_INVALID_VALUE)
    throw ValueError(what + " is a " + type_name(o) + " whose __cuda_array_interface__ pointer " + ptr +
                     " is not CUDA memory (the driver does not know it); kernels read CUDA memory: copy the "
                     "data to the GPU first");
  d.check(r, "cuPointerGetAttribute(CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL)");
  return -1;
}

ArrayInfo read_cai(PyObject* o, PyObject* cai, const std::string& what) {
  if (!PyDict_Check(cai)) malformed(o, what, "it must be a dict, got " + describe_value(cai));
  ArrayInfo a;
  a.protocol = ArrayInfo::Protocol::CudaArrayInterface;
  auto field = [&](const char* name, bool required) -> PyObject* {
    PyObject* v = PyDict_GetItemString(cai, name);  // borrowed
    if (!v && required) malformed(o, what, std::string("it has no '") + name + "'");
    return v;
  };
  PyObject* version = field("version", false);
  const long long ver = version ? as_index(o, version, what, "version") : 0;
  if (ver > 3)
    malformed(o, what,
              "'version' is " + std::to_string(ver) +
                  "; kjit reads versions 0 to 3 (newer: ask for "
                  "DLPack with __dlpack__)");
  a.shape = int_tuple(o, field("shape", true), what, "shape");
  long long numel = 1;
  for (long long s : a.shape) {
    if (s < 0) malformed(o, what, "'shape' has a negative extent " + std::to_string(s));
    numel *= s;
  }
  PyObject* typestr = field("typestr", true);
  if (!PyUnicode_Check(typestr)) malformed(o, what, "'typestr' must be a str, got " + describe_value(typestr));
  a.typestr = py::str(typestr);
  a.dtype = typestr_dtype(a.typestr);
  PyObject* data = field("data", true);
  if (!PyTuple_Check(data) || PyTuple_GET_SIZE(data) != 2 || !PyLong_Check(PyTuple_GET_ITEM(data, 0)))
    malformed(o, what, "'data' must be a tuple (pointer: int, read_only: bool), got " + describe_value(data));
  a.data = PyLong_AsVoidPtr(PyTuple_GET_ITEM(data, 0));
  if (!a.data && PyErr_Occurred()) {
    PyErr_Clear();
    malformed(o, what, "'data' holds a pointer out of range");
  }
  if (PyObject* strides = field("strides", false); strides && strides != Py_None) {
    a.strides = int_tuple(o, strides, what, "strides");
    if (a.strides.size() != a.shape.size())
      malformed(o, what,
                "'strides' has " + std::to_string(a.strides.size()) + " entries for " + std::to_string(a.shape.size()) +
                    " dimensions");
  }
  if (PyObject* mask = field("mask", false); mask && mask != Py_None)
    throw ValueError(what + " is a masked " + type_name(o) +
                     " (its __cuda_array_interface__ has a 'mask'); kernels "
                     "take plain arrays: pass the data without the mask");
  if (PyObject* stream = field("stream", false); stream && stream != Py_None && ver >= 3) {
    const long long s = as_index(o, stream, what, "stream");
    if (s == 0) malformed(o, what, "'stream' is 0, which the interface forbids (1: the legacy default stream)");
    a.stream = static_cast<std::uintptr_t>(s);
  }
  // An empty array may carry a null pointer: there is no memory to read, on any device.
  a.device = (a.data == nullptr && numel == 0) ? -1 : pointer_device(o, a.data, what);
  return a;
}

// ---- DLPack device ---------------------------------------------------------------------------------
[[noreturn]] void not_cuda(PyObject* o, const std::string& what, const std::string& where) {
  throw ValueError(what + " is a " + type_name(o) + " in " + where +
                   "; kernels read CUDA device memory: copy it to "
                   "the GPU first (e.g. cupy.asarray(x), jax.device_put(x, jax.devices('gpu')[0]), "
                   "torch.as_tensor(x, device='cuda'))");
}

int dlpack_device(PyObject* o, const std::string& what) {
  py::object dev = py::reinterpret_borrow<py::object>(o).attr("__dlpack_device__")();
  if (!PyTuple_Check(dev.ptr()) || PyTuple_GET_SIZE(dev.ptr()) != 2)
    throw TypeError(what + " is a " + type_name(o) + " whose __dlpack_device__() returned " +
                    describe_value(dev.ptr()) + ", not a tuple (device_type, device_id)");
  const int type = py::int_(py::reinterpret_borrow<py::object>(PyTuple_GET_ITEM(dev.ptr(), 0)));
  const int id = py::int_(py::reinterpret_borrow<py::object>(PyTuple_GET_ITEM(dev.ptr(), 1)));
  // Managed memory is device memory too; pinned host memory is refused like any host memory.
  if (type != kDLCUDA && type != kDLCUDAManaged) not_cuda(o, what, dl_device_name(type, id));
  return id;
}

bool has_attr(PyObject* o, const char* name) {
  const int r = PyObject_HasAttrString(o, name);  // never raises (clears errors of failing properties)
  return r == 1;
}

[[noreturn]] void wrong_device(PyObject* o, const std::string& what, const std::string& param, int got, int device) {
  throw ValueError(what + " is a " + type_name(o) + " on cuda:" + std::to_string(got) +
                   ", but the kernel runs on cuda:" + std::to_string(device) + "; copy " + param +
                   " to cuda:" + std::to_string(device) + " or specialize for its device");
}

[[noreturn]] void wrong_dtype(const ParamLayout& L, std::size_t i, PyObject* o, const std::string& got) {
  const LaunchParam& p = L[i];
  throw TypeError("argument '" + p.name + "' of " + L.kernel() + " points to " + dtype_name(*p.pointee) +
                  " elements, got a " + type_name(o) + " of " + got + "; convert it with " + p.name + ".astype('" +
                  dtype_name(*p.pointee) + "') or specialize the kernel for its dtype");
}

std::string arg_what(const ParamLayout& L, std::size_t i) { return "argument '" + L[i].name + "' of " + L.kernel(); }

// Makes `stream` wait for the work queued so far on `producer` (an event between them; the event can
// be destroyed at once, the wait keeps what it needs).
void order_after(CUstream producer, CUstream stream) {
  const DriverLibrary& d = DriverLibrary::get();
  CUevent ev = nullptr;
  d.check(d.cuEventCreate(&ev, CU_EVENT_DISABLE_TIMING), "cuEventCreate");
  CUresult r = d.cuEventRecord(ev, producer);
  if (r == CUDA_SUCCESS) r = d.cuStreamWaitEvent(stream, ev, 0);
  d.cuEventDestroy(ev);
  d.check(r, "ordering the launch after the array's producer stream (cuEventRecord / cuStreamWaitEvent)");
}

}  // namespace

bool is_foreign_array(PyObject* o) { return has_attr(o, "__cuda_array_interface__") || has_attr(o, "__dlpack__"); }

std::optional<ArrayInfo> try_read_array(PyObject* o, const std::string& what) {
  // One lookup: a producer may compute the interface on each access (CuPy's holds its current stream).
  PyObject* cai = PyObject_GetAttrString(o, "__cuda_array_interface__");
  if (cai) {
    py::object owned = py::reinterpret_steal<py::object>(cai);
    return read_cai(o, cai, what);
  }
  if (!PyErr_ExceptionMatches(PyExc_AttributeError)) throw py::error_already_set();
  PyErr_Clear();
  if (!has_attr(o, "__dlpack__")) return std::nullopt;
  if (!has_attr(o, "__dlpack_device__"))
    throw TypeError(what + " is a " + type_name(o) +
                    " with __dlpack__ but no __dlpack_device__; kjit needs both "
                    "(the DLPack protocol) to know where its memory is");
  ArrayInfo a;
  a.protocol = ArrayInfo::Protocol::DLPack;
  a.device = dlpack_device(o, what);
  return a;
}

ArrayInfo read_array(PyObject* o, const std::string& what) {
  if (auto a = try_read_array(o, what)) return std::move(*a);
  throw TypeError(what + " is " + describe_value(o) +
                  ", which is no array: pass a CUDA tensor or an array with "
                  "__cuda_array_interface__ or __dlpack__ (CuPy, JAX, Numba, TensorFlow)");
}

std::optional<std::string> foreign_dtype_name(PyObject* v) {
  if (PyUnicode_Check(v)) return std::nullopt;
  std::string name;
  if (PyType_Check(v)) {  // before the array test: a scalar type may have __dlpack__ as a method
    const auto* t = reinterpret_cast<PyTypeObject*>(v);
    py::handle h(v);
    if (!has_attr(v, "__module__") || py::str(h.attr("__module__")).cast<std::string>() == "builtins")
      return std::nullopt;
    name = t->tp_name;
    const auto dot = name.rfind('.');
    if (dot != std::string::npos) name.erase(0, dot + 1);
  } else if (!is_foreign_array(v) && has_attr(v, "name") &&
             (has_attr(v, "itemsize") || has_attr(v, "as_numpy_dtype"))) {  // numpy dtype, tf.DType
    py::object n = py::handle(v).attr("name");
    if (!PyUnicode_Check(n.ptr())) return std::nullopt;
    name = py::str(n);
  } else {
    return std::nullopt;
  }
  if (name.size() > 1 && name.back() == '_') name.pop_back();  // numpy 1: np.bool_, np.float_
  return name;
}

std::optional<CUstream> stream_from_protocol(PyObject* v) {
  auto handle = [](PyObject* h) -> std::optional<CUstream> {
    if (h == Py_None) return reinterpret_cast<CUstream>(0);  // a ctypes null pointer: the default stream
    if (!PyLong_Check(h) || PyBool_Check(h)) return std::nullopt;
    const unsigned long long x = PyLong_AsUnsignedLongLong(h);
    if (x == static_cast<unsigned long long>(-1) && PyErr_Occurred()) {
      PyErr_Clear();
      throw ValueError("stream handle " + py::repr(h).cast<std::string>() + " is not a valid cudaStream_t value");
    }
    return reinterpret_cast<CUstream>(static_cast<std::uintptr_t>(x));
  };
  if (PyLong_Check(v) && !PyBool_Check(v)) return handle(v);
  py::handle s(v);
  if (has_attr(v, "__cuda_stream__")) {  // the CUDA stream protocol: (version, handle)
    py::object t = s.attr("__cuda_stream__")();
    if (!PyTuple_Check(t.ptr()) || PyTuple_GET_SIZE(t.ptr()) != 2)
      throw TypeError("stream " + describe_value(v) + ": __cuda_stream__() must return (version, handle), got " +
                      describe_value(t.ptr()));
    if (auto h = handle(PyTuple_GET_ITEM(t.ptr(), 1))) return h;
    throw TypeError("stream " + describe_value(v) + ": __cuda_stream__() returned a handle that is not an int");
  }
  for (const char* attr : {"cuda_stream", "ptr"})
    if (has_attr(v, attr)) {
      py::object h = s.attr(attr);
      if (auto r = handle(h.ptr())) return r;
    }
  if (has_attr(v, "handle")) {  // Numba: a ctypes c_void_p whose .value is the handle (None for 0)
    py::object h = s.attr("handle");
    if (has_attr(h.ptr(), "value"))
      if (auto r = handle(h.attr("value").ptr())) return r;
  }
  return std::nullopt;
}

ForeignArgs::~ForeignArgs() {
  for (void* p : exports_) {
    auto* m = static_cast<DLManagedTensor*>(p);
    if (m->deleter) m->deleter(m);
  }
}

void ForeignArgs::add(const ParamLayout& L, std::size_t i, PyObject* v, int device) {
  const std::string what = arg_what(L, i);
  std::optional<ArrayInfo> read = try_read_array(v, what);
  if (!read)  // ParamLayout::reject's wording, with what the Python front end takes besides tensors
    throw TypeError(what + " is " + L[i].describe() +
                    ": pass a CUDA tensor, a CUDA array (__cuda_array_interface__ "
                    "or __dlpack__: CuPy, JAX, Numba...) or None, got " +
                    describe_value(v));
  ArrayInfo a = std::move(*read);
  if (a.device >= 0 && a.device != device) wrong_device(v, what, L[i].name, a.device, device);
  const LaunchParam& p = L[i];
  if (a.protocol == ArrayInfo::Protocol::CudaArrayInterface && p.pointee && a.dtype != p.pointee)
    wrong_dtype(L, i, v, a.dtype ? std::string(dtype_name(*a.dtype)) : "typestr '" + a.typestr + "'");
  items_.push_back(Item{i, v, std::move(a)});
}

std::optional<CUstream> ForeignArgs::producer_stream() const {
  for (const Item& it : items_)
    if (it.info.stream) return reinterpret_cast<CUstream>(*it.info.stream);
  return std::nullopt;
}

void ForeignArgs::pack(const ParamLayout& L, CUstream stream, ArgBuffer& buf) {
  for (const Item& it : items_) {
    if (it.info.protocol == ArrayInfo::Protocol::CudaArrayInterface) {
      if (it.info.stream && reinterpret_cast<CUstream>(*it.info.stream) != stream)
        order_after(reinterpret_cast<CUstream>(*it.info.stream), stream);
      L.pack_pointer(it.index, it.info.data, buf.slot(it.index));
      continue;
    }
    // DLPack: the producer orders its pending work before `stream` (the consumer's stream). A producer
    // whose __dlpack__ takes no `stream` (before the 2021 protocol) is asked without one.
    py::handle obj(it.obj);
    py::object cap;
    try {
      cap = obj.attr("__dlpack__")(py::arg("stream") = dlpack_stream_arg(stream));
    } catch (py::error_already_set& e) {
      if (!e.matches(PyExc_TypeError)) throw;
      cap = obj.attr("__dlpack__")();
    }
    const std::string what = arg_what(L, it.index);
    if (!PyCapsule_IsValid(cap.ptr(), "dltensor"))
      throw TypeError(what + " is a " + type_name(it.obj) + " whose __dlpack__() returned " +
                      describe_value(cap.ptr()) + ", not an unused DLPack capsule ('dltensor')");
    auto* m = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(cap.ptr(), "dltensor"));
    // Consumed, per the protocol: renamed, so that the capsule's destructor leaves the tensor to us.
    if (PyCapsule_SetName(cap.ptr(), "used_dltensor") < 0) throw py::error_already_set();
    exports_.push_back(m);
    const DLTensor& t = m->dl_tensor;
    if (t.device.device_type != kDLCUDA && t.device.device_type != kDLCUDAManaged)
      not_cuda(it.obj, what, dl_device_name(t.device.device_type, t.device.device_id));
    const int device = it.info.device;
    if (t.device.device_id != device) wrong_device(it.obj, what, L[it.index].name, t.device.device_id, device);
    const LaunchParam& p = L[it.index];
    if (p.pointee && dl_dtype(t.dtype) != p.pointee) wrong_dtype(L, it.index, it.obj, dl_dtype_text(t.dtype));
    L.pack_pointer(it.index, static_cast<char*>(t.data) + t.byte_offset, buf.slot(it.index));
  }
}

void bind_arrays(py::module_& m) {
  m.def(
      "array_info",
      [](py::handle obj, const std::string& what) {
        const ArrayInfo a = read_array(obj.ptr(), what);
        py::dict d;
        const bool cai = a.protocol == ArrayInfo::Protocol::CudaArrayInterface;
        d["protocol"] = cai ? "cuda_array_interface" : "dlpack";
        d["device"] = a.device >= 0 ? py::object(py::int_(a.device)) : py::object(py::none());
        d["data"] = cai ? py::object(py::int_(reinterpret_cast<std::uintptr_t>(a.data))) : py::object(py::none());
        d["dtype"] = a.dtype ? py::object(py::str(dtype_name(*a.dtype))) : py::object(py::none());
        d["typestr"] = cai ? py::object(py::str(a.typestr)) : py::object(py::none());
        d["shape"] = cai ? py::object(py::tuple(py::cast(a.shape))) : py::object(py::none());
        d["strides"] = cai && !a.strides.empty() ? py::object(py::tuple(py::cast(a.strides))) : py::object(py::none());
        d["stream"] = a.stream ? py::object(py::int_(*a.stream)) : py::object(py::none());
        return d;
      },
      py::arg("obj"), py::arg("what") = "the array",
      "What the CUDA Array Interface or DLPack says about `obj`: {protocol, device, data, dtype, typestr, "
      "shape, strides (bytes; None when C-contiguous), stream}. DLPack arrays give device only (the rest "
      "comes with an export). Raises kjit.ValueError for an array outside CUDA memory or a malformed "
      "interface, naming it as `what`.");
}

}  // namespace kjit::python
