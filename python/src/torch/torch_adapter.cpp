// torch's side of the TorchHooks table (core/torch_hooks.hpp), registered into the torch-free binding when
// kjit._C is imported: tensors, dtypes, devices and streams of torch for Kernel.launch and
// KernelFamily.specialize, torch's device guard and current stream, torch's errors (c10::Error), and the
// counters of kjit.stats() its caller names (the op library's). Also maps kjit errors for this module's own
// functions.
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/util/Exception.h>
#include <pybind11/pybind11.h>
#include <torch/csrc/Device.h>
#include <torch/csrc/Dtype.h>
#include <torch/csrc/Exceptions.h>
#include <torch/csrc/Stream.h>
#include <torch/csrc/autograd/python_variable.h>

#include <string>

#include "core/bindings.hpp"
#include "dtypes.hpp"
#include "kjit/error.hpp"
#include "core/torch_hooks.hpp"

namespace kjit::python {
namespace {

bool tensor_pointer(PyObject* v, const ParamLayout& L, std::size_t i, int device, void** ptr) {
  if (!THPVariable_Check(v)) return false;
  const LaunchParam& p = L[i];
  const at::Tensor& t = THPVariable_Unpack(v);
  const c10::Device d = t.device();
  if (!d.is_cuda() || d.index() != device)
    throw ValueError("argument '" + p.name + "' of " + L.kernel() + " is on " + d.str() +
                     ", but the kernel runs on cuda:" + std::to_string(device) + "; move it with " + p.name +
                     ".to('cuda:" + std::to_string(device) + "') or specialize for its device");
  if (p.pointee && dtype_of(t.scalar_type()) != p.pointee)
    throw TypeError("argument '" + p.name + "' of " + L.kernel() + " points to torch." + dtype_name(*p.pointee) +
                    " elements, got a " + torch_dtype_name(t.scalar_type()) + " tensor; convert it with " + p.name +
                    ".to(torch." + dtype_name(*p.pointee) + ") or specialize the kernel for its dtype");
  *ptr = t.data_ptr();
  return true;
}

bool is_tensor(PyObject* v) { return THPVariable_Check(v); }

int dtype(PyObject* v, DType* out) {
  if (!THPDtype_Check(v)) return -1;
  const auto d = dtype_of(reinterpret_cast<THPDtype*>(v)->scalar_type);
  if (!d) return 0;
  if (out) *out = *d;
  return 1;
}

bool stream(PyObject* v, int device, CUstream* out) {
  if (!THPStream_Check(v)) return false;
  const auto* s = reinterpret_cast<const THPStream*>(v);
  const c10::Stream st = c10::Stream::unpack3(s->stream_id, static_cast<c10::DeviceIndex>(s->device_index),
                                              static_cast<c10::DeviceType>(s->device_type));
  if (st.device_type() != c10::DeviceType::CUDA)
    throw ValueError("stream must be a CUDA stream, got a stream of " + st.device().str());
  if (st.device_index() != device)
    throw ValueError("the stream is on " + st.device().str() +
                     " but the kernel runs on cuda:" + std::to_string(device) +
                     "; use a stream of that device (torch.cuda.Stream(device=" + std::to_string(device) + "))");
  *out = c10::cuda::CUDAStream(st).stream();
  return true;
}

bool device(PyObject* v, std::string* type, int* index) {
  c10::Device dev(c10::DeviceType::CPU);
  if (THPDevice_Check(v)) {
    dev = reinterpret_cast<THPDevice*>(v)->device;
  } else if (PyUnicode_Check(v)) {
    const std::string s = py::str(py::handle(v));
    try {
      dev = c10::Device(s);
    } catch (const c10::Error&) {
      throw ValueError("device '" + s +
                       "' is not a device name: pass an int, a torch.device or a str such as "
                       "'cuda:0'");
    }
  } else {
    return false;
  }
  *type = c10::DeviceTypeName(dev.type(), /*lower_case=*/true);
  *index = dev.has_index() ? dev.index() : -1;
  return true;
}

int device_count() { return c10::cuda::device_count(); }
int current_device() { return c10::cuda::current_device(); }
int exchange_device(int device) { return c10::cuda::ExchangeDevice(static_cast<c10::DeviceIndex>(device)); }
CUstream current_stream(int device) {
  return c10::cuda::getCurrentCUDAStream(static_cast<c10::DeviceIndex>(device)).stream();
}

bool set_error(std::exception_ptr p) {
  try {
    std::rethrow_exception(p);
  } catch (const c10::Error&) {
    // As torch.ops would raise it: torch.OutOfMemoryError for c10::OutOfMemoryError, IndexError,
    // NotImplementedError ... (a direct op entry allocates without the dispatcher).
    torch::translate_exception_to_python(std::current_exception());
    return true;
  } catch (...) {
    return false;
  }
}

// The op library's counters come from the module's entry (register_torch_hooks' caller): torch/ is below ops/.
TorchHooks kHooks = {&tensor_pointer, &is_tensor,       &dtype,          &stream,    &device, &device_count,
                     &current_device, &exchange_device, &current_stream, &set_error, nullptr, nullptr};

}  // namespace

void register_torch_hooks(py::module_&, void (*extend_stats)(PyObject* dict), void (*reset_stats)()) {
  kHooks.extend_stats = extend_stats;
  kHooks.reset_stats = reset_stats;
  set_torch_hooks(&kHooks);
  // Local: only this module's functions (kjit._core's functions have their own translator, and
  // torch's pybind11 functions keep torch's error mapping).
  py::register_local_exception_translator([](std::exception_ptr p) {
    if (p && !set_known_error(p)) std::rethrow_exception(p);
  });
}

}  // namespace kjit::python
