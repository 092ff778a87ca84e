#include "device_context.hpp"

#include <exception>

#include "kjit/driver_library.hpp"
#include "torch_hooks.hpp"

namespace kjit {

const char* const kCaptureForbidsCompile =
    "the stream is being captured by a CUDA graph; run the kernel once before capture so that it is "
    "compiled and cached";

const char* capture_forbids_compile(CUstream stream) noexcept {
  try {
    CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
    const CUresult r = DriverLibrary::get().cuStreamIsCapturing(stream, &status);
    if (r == CUDA_SUCCESS) return status == CU_STREAM_CAPTURE_STATUS_NONE ? nullptr : kCaptureForbidsCompile;
    // The legacy default stream while another stream captures in global mode: capturing, in effect.
    return r == CUDA_ERROR_STREAM_CAPTURE_IMPLICIT ? kCaptureForbidsCompile : nullptr;
  } catch (...) {
    return nullptr;
  }
}

void ensure_context(int device) {
  const DriverLibrary& d = DriverLibrary::get();
  CUcontext ctx = nullptr;
  if (d.cuCtxGetCurrent(&ctx) != CUDA_SUCCESS || ctx == nullptr) make_primary_context_current(device);
}

namespace python {

void DeviceContext::enter(int device) {
  if (const TorchHooks* h = torch_hooks()) {
    prev_device_ = h->exchange_device(device);
    ensure_context(device);
    return;
  }
  const DriverLibrary& d = DriverLibrary::get();
  CUcontext ctx = nullptr;
  CUdevice current = -1;
  if (d.cuCtxGetCurrent(&ctx) == CUDA_SUCCESS && ctx != nullptr && d.cuCtxGetDevice(&current) == CUDA_SUCCESS &&
      current == device)
    return;
  prev_ctx_ = ctx;
  restore_ctx_ = true;
  make_primary_context_current(device);
}

DeviceContext::DeviceContext(int device) {
  enter(device);
  const TorchHooks* h = torch_hooks();
  stream = h ? h->current_stream(device) : CU_STREAM_LEGACY;
  compile_forbidden = capture_forbids_compile(stream);
}

DeviceContext::DeviceContext(int device, CUstream s) : stream(s) {
  enter(device);
  compile_forbidden = capture_forbids_compile(stream);
}

DeviceContext::~DeviceContext() {
  if (prev_device_ >= 0) {
    if (const TorchHooks* h = torch_hooks()) (void)h->exchange_device(prev_device_);
  } else if (restore_ctx_ && prev_ctx_ != nullptr) {
    (void)DriverLibrary::get().cuCtxSetCurrent(prev_ctx_);
  }
}

int cuda_device_count() {
  if (const TorchHooks* h = torch_hooks()) return h->device_count();
  if (!DriverLibrary::available()) return 0;
  try {
    return device_count();
  } catch (const std::exception&) {
    return 0;  // a driver without devices (CUDA_ERROR_NO_DEVICE)
  }
}

int cuda_current_device() {
  if (const TorchHooks* h = torch_hooks()) return h->current_device();
  const DriverLibrary& d = DriverLibrary::get();
  CUcontext ctx = nullptr;
  CUdevice dev = 0;
  if (d.cuCtxGetCurrent(&ctx) == CUDA_SUCCESS && ctx != nullptr && d.cuCtxGetDevice(&dev) == CUDA_SUCCESS)
    return static_cast<int>(dev);
  return 0;
}

}  // namespace python
}  // namespace kjit
