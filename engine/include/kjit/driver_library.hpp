// DriverLibrary: the CUDA Driver API entry points, from libcuda.so.1 through cuGetProcAddress,
// loaded on first use (a machine with no driver can do everything but launch).
#pragma once

#include <cuda.h>

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

  // Members are declared through the cuda.h macros, so each is the ABI version of the header.
#define KJIT_CU_FN(name) decltype(&::name) name = nullptr
  KJIT_CU_FN(cuGetErrorName);
  KJIT_CU_FN(cuGetErrorString);
  KJIT_CU_FN(cuInit);
  KJIT_CU_FN(cuDriverGetVersion);
  KJIT_CU_FN(cuDeviceGetCount);
  KJIT_CU_FN(cuDeviceGet);
  KJIT_CU_FN(cuDeviceGetName);
  KJIT_CU_FN(cuDeviceGetAttribute);
  KJIT_CU_FN(cuDevicePrimaryCtxRetain);
  KJIT_CU_FN(cuDevicePrimaryCtxRelease);
  KJIT_CU_FN(cuCtxGetCurrent);
  KJIT_CU_FN(cuCtxSetCurrent);
  KJIT_CU_FN(cuCtxGetDevice);
  KJIT_CU_FN(cuCtxSynchronize);
  KJIT_CU_FN(cuLibraryLoadData);
  KJIT_CU_FN(cuLibraryUnload);
  KJIT_CU_FN(cuLibraryGetKernel);
  KJIT_CU_FN(cuKernelGetParamInfo);  // may stay null on drivers older than 12.4
  KJIT_CU_FN(cuKernelGetAttribute);
  KJIT_CU_FN(cuLaunchKernel);
  KJIT_CU_FN(cuLaunchKernelEx);
  KJIT_CU_FN(cuStreamCreate);
  KJIT_CU_FN(cuStreamDestroy);
  KJIT_CU_FN(cuStreamSynchronize);
  KJIT_CU_FN(cuStreamIsCapturing);
  KJIT_CU_FN(cuMemAlloc);
  KJIT_CU_FN(cuMemFree);
  KJIT_CU_FN(cuMemcpyHtoD);
  KJIT_CU_FN(cuMemcpyDtoH);
  KJIT_CU_FN(cuMemsetD8);
  KJIT_CU_FN(cuEventCreate);
  KJIT_CU_FN(cuEventDestroy);
  KJIT_CU_FN(cuEventRecord);
  KJIT_CU_FN(cuEventSynchronize);
  KJIT_CU_FN(cuEventElapsedTime);
#undef KJIT_CU_FN

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
