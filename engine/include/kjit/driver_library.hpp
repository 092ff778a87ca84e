// DriverLibrary: the CUDA Driver API entry points, from libcuda.so.1 through cuGetProcAddress,
// loaded on first use (a machine with no driver can do everything but launch).
#pragma once

#include <cuda.h>
#include <cudaTypedefs.h>

#include <memory>
#include <string>

#include "kjit/dynamic_library.hpp"

namespace kjit {

class DriverLibrary {
 public:
  // Loads libcuda and calls cuInit(0) on first call; throws DriverError when there is no usable driver.
  static const DriverLibrary& get();
  // Whether a driver with at least one device is usable; `why_not` says why not. Never throws.
  static bool available(std::string* why_not = nullptr);

  // Each entry point has the exact ABI version named here (cudaTypedefs.h PFN_<name>_v<version>) and
  // is requested from cuGetProcAddress with that version: asking for CUDA_VERSION instead can return
  // a newer variant with another signature (cuCtxSynchronize_v13000 takes a context).
#define KJIT_CU_FN(name, version) PFN_##name##_v##version name = nullptr
  KJIT_CU_FN(cuGetErrorName, 6000);
  KJIT_CU_FN(cuGetErrorString, 6000);
  KJIT_CU_FN(cuInit, 2000);
  KJIT_CU_FN(cuDriverGetVersion, 2020);
  KJIT_CU_FN(cuDeviceGetCount, 2000);
  KJIT_CU_FN(cuDeviceGet, 2000);
  KJIT_CU_FN(cuDeviceGetName, 2000);
  KJIT_CU_FN(cuDeviceGetAttribute, 2000);
  KJIT_CU_FN(cuDevicePrimaryCtxRetain, 7000);
  KJIT_CU_FN(cuDevicePrimaryCtxRelease, 11000);
  KJIT_CU_FN(cuCtxGetCurrent, 4000);
  KJIT_CU_FN(cuCtxSetCurrent, 4000);
  KJIT_CU_FN(cuCtxGetDevice, 2000);
  KJIT_CU_FN(cuCtxSynchronize, 2000);
  KJIT_CU_FN(cuLibraryLoadData, 12000);
  KJIT_CU_FN(cuLibraryUnload, 12000);
  KJIT_CU_FN(cuLibraryGetKernel, 12000);
  KJIT_CU_FN(cuKernelGetParamInfo, 12040);  // null on drivers older than 12.4
  KJIT_CU_FN(cuKernelGetAttribute, 12000);
  KJIT_CU_FN(cuKernelSetAttribute, 12000);    // dynamic shared memory over 48 KB
  KJIT_CU_FN(cuTensorMapEncodeTiled, 12000);  // TMA descriptors (the sm_90 GEMM)
  KJIT_CU_FN(cuLaunchKernel, 4000);
  KJIT_CU_FN(cuLaunchKernelEx, 11060);
  KJIT_CU_FN(cuStreamCreate, 2000);
  KJIT_CU_FN(cuStreamDestroy, 4000);
  KJIT_CU_FN(cuStreamSynchronize, 2000);
  KJIT_CU_FN(cuStreamIsCapturing, 10000);
  KJIT_CU_FN(cuMemAlloc, 3020);
  KJIT_CU_FN(cuMemFree, 3020);
  KJIT_CU_FN(cuMemcpyHtoD, 3020);
  KJIT_CU_FN(cuMemcpyDtoH, 3020);
  KJIT_CU_FN(cuMemsetD8, 3020);
  KJIT_CU_FN(cuMemsetD32Async, 3020);  // zeroes the split-K GEMM's arrival counters on its stream
  KJIT_CU_FN(cuEventCreate, 2000);
  KJIT_CU_FN(cuEventDestroy, 4000);
  KJIT_CU_FN(cuEventRecord, 2000);
  KJIT_CU_FN(cuEventSynchronize, 2000);
  KJIT_CU_FN(cuEventElapsedTime, 2000);
  KJIT_CU_FN(cuStreamWaitEvent, 3020);      // orders a launch after another framework's stream
  KJIT_CU_FN(cuPointerGetAttribute, 4000);  // the device of a __cuda_array_interface__ pointer
#undef KJIT_CU_FN
  // The parameter count of a kernel (CUDA 13.2; null on older drivers). Declared here: CUDA 13.0's headers lack it.
  using KernelGetParamCount = CUresult(CUDAAPI*)(CUkernel kernel, size_t* paramCount);
  KernelGetParamCount cuKernelGetParamCount = nullptr;

  int driver_version() const { return driver_version_; }  // e.g. 13000
  std::string path() const { return lib_.path().string(); }

  // Throws DriverError "<call> failed: CUDA_ERROR_X (text)" when r != CUDA_SUCCESS.
  void check(CUresult r, const char* call) const;
  std::string error_name(CUresult r) const;

 private:
  DriverLibrary() = default;
  static std::unique_ptr<DriverLibrary> load();
  DynamicLibrary lib_;
  int driver_version_ = 0;
};

// Sets the primary context of `device` current on this thread (retained for the process lifetime).
void make_primary_context_current(int device);

// Compute capability of a device as {major, minor}.
struct ComputeCapability {
  int major = 0, minor = 0;
};
ComputeCapability device_compute_capability(int device);
int device_count();
std::string device_name(int device);

}  // namespace kjit
