// The context of one launch or compile on a device, without torch: the device made current (torch's
// device guard when kjit._C registered torch's hooks, else the device's primary context through the
// driver), the stream (torch's current stream, else the legacy default stream, or the one given) and
// whether compiling is allowed now (not while that stream is captured by a CUDA graph).
#pragma once

#include <cuda.h>

namespace kjit {

// The reason passed as `compile_forbidden` while a stream is being captured.
extern const char* const kCaptureForbidsCompile;

// Whether `stream` (of the current context) is being captured by a CUDA graph: kCaptureForbidsCompile
// when it is, else nullptr. Never throws.
const char* capture_forbids_compile(CUstream stream) noexcept;

// The Driver API launches into the thread's current context; PyTorch's runtime calls make the device's
// primary context current lazily, so make sure of it (one cheap call when a context is current).
void ensure_context(int device);

namespace python {

// Construct it before looking a kernel up: pass `compile_forbidden` to KernelFamily::get and `stream`
// to LaunchConfig; keep it alive across the launch. Restores the previous device when destroyed.
class DeviceContext {
 public:
  // The current stream of `device`: torch's with torch, else the legacy default stream.
  explicit DeviceContext(int device);
  // A given stream (a handle of `device`).
  DeviceContext(int device, CUstream stream);
  ~DeviceContext();
  DeviceContext(const DeviceContext&) = delete;
  DeviceContext& operator=(const DeviceContext&) = delete;

  CUstream stream = nullptr;
  const char* compile_forbidden = nullptr;  // non-null while `stream` is being captured by a CUDA graph

 private:
  void enter(int device);
  int prev_device_ = -1;          // torch: the device to restore
  CUcontext prev_ctx_ = nullptr;  // driver: the context to restore
  bool restore_ctx_ = false;
};

// The number of CUDA devices and the current one: torch's with torch, else the driver's (0 devices
// when the driver cannot be loaded; the current context's device, else 0).
int cuda_device_count();
int cuda_current_device();

}  // namespace python
}  // namespace kjit
