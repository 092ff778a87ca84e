#include "kjit/driver_library.hpp"

#include <atomic>
#include <memory>
#include <mutex>
#include <vector>

#include "kjit/error.hpp"

namespace kjit {
namespace {
// The outcome of the one load, published once and read without a lock from then on: the driver (never
// destroyed: kernels and background threads use it until exit), else why it failed (not retried). No lock
// is taken once either is set, and none while an exception is thrown: a fork (a DataLoader) while another
// thread held a lock here gave a child whose first compile waited for that lock forever (a GPU-less
// machine asks for the driver on every compile, and the failure was thrown with the lock held).
std::atomic<const DriverLibrary*> g_driver{nullptr};
std::atomic<const DriverError*> g_failure{nullptr};
}  // namespace

const DriverLibrary& DriverLibrary::get() {
  if (auto* d = g_driver.load(std::memory_order_acquire)) return *d;
  if (auto* f = g_failure.load(std::memory_order_acquire)) throw *f;
  {
    static std::mutex mu;
    std::lock_guard<std::mutex> lock(mu);
    if (!g_driver.load(std::memory_order_acquire) && !g_failure.load(std::memory_order_acquire)) {
      try {
        g_driver.store(load().release(), std::memory_order_release);
      } catch (const DriverError& e) {
        g_failure.store(new DriverError(e), std::memory_order_release);
      }
    }
  }
  if (auto* d = g_driver.load(std::memory_order_acquire)) return *d;
  throw *g_failure.load(std::memory_order_acquire);
}

std::unique_ptr<DriverLibrary> DriverLibrary::load() {
  auto drv = std::unique_ptr<DriverLibrary>(new DriverLibrary());
  std::string err;
  drv->lib_ = DynamicLibrary::try_open("libcuda.so.1", &err);
  if (!drv->lib_.loaded())
    throw DriverError("no CUDA driver: " + err +
                          ". Launching needs an NVIDIA GPU and driver; compiling for a named --arch and the "
                          "cache commands work without one.",
                      CUDA_ERROR_NO_DEVICE, "CUDA_ERROR_NO_DEVICE");
  using GetProc = CUresult (*)(const char*, void**, int, cuuint64_t, CUdriverProcAddressQueryResult*);
  auto get_proc = reinterpret_cast<GetProc>(drv->lib_.find("cuGetProcAddress_v2"));
  if (!get_proc)
    throw DriverError("the CUDA driver at " + drv->lib_.path().string() +
                          " is too old (no cuGetProcAddress_v2); kjit needs a CUDA 12.4+ driver",
                      CUDA_ERROR_NOT_SUPPORTED, "CUDA_ERROR_NOT_SUPPORTED");
  auto load = [&](const char* name, int version, void** slot, bool required) {
    // An optional entry point newer than the driver is not asked for: cuGetProcAddress answers a version
    // above the driver's with CUDA_ERROR_INVALID_VALUE, an API error that compute-sanitizer reports.
    if (!required && version > drv->driver_version_) return;
    CUdriverProcAddressQueryResult status{};
    CUresult r = get_proc(name, slot, version, CU_GET_PROC_ADDRESS_DEFAULT, &status);
    if ((r != CUDA_SUCCESS || !*slot) && required)
      throw DriverError(std::string("the CUDA driver lacks ") + name + " (driver too old for CUDA " +
                            std::to_string(version / 1000) + "." + std::to_string(version % 1000 / 10) +
                            " API); update the driver",
                        CUDA_ERROR_NOT_SUPPORTED, "CUDA_ERROR_NOT_SUPPORTED");
    if (r != CUDA_SUCCESS) *slot = nullptr;
  };
#define KJIT_LOAD(name, version) load(#name, version, reinterpret_cast<void**>(&drv->name), true)
#define KJIT_LOAD_OPT(name, version) load(#name, version, reinterpret_cast<void**>(&drv->name), false)
  KJIT_LOAD(cuGetErrorName, 6000);
  KJIT_LOAD(cuGetErrorString, 6000);
  KJIT_LOAD(cuInit, 2000);
  KJIT_LOAD(cuDriverGetVersion, 2020);
  // The driver's version first: the optional entry points below are asked for only where it has them.
  drv->check(drv->cuDriverGetVersion(&drv->driver_version_), "cuDriverGetVersion");
  KJIT_LOAD(cuDeviceGetCount, 2000);
  KJIT_LOAD(cuDeviceGet, 2000);
  KJIT_LOAD(cuDeviceGetName, 2000);
  KJIT_LOAD(cuDeviceGetAttribute, 2000);
  KJIT_LOAD(cuDevicePrimaryCtxRetain, 7000);
  KJIT_LOAD(cuDevicePrimaryCtxRelease, 11000);
  KJIT_LOAD(cuCtxGetCurrent, 4000);
  KJIT_LOAD(cuCtxSetCurrent, 4000);
  KJIT_LOAD(cuCtxGetDevice, 2000);
  KJIT_LOAD(cuCtxSynchronize, 2000);
  KJIT_LOAD(cuLibraryLoadData, 12000);
  KJIT_LOAD(cuLibraryUnload, 12000);
  KJIT_LOAD(cuLibraryGetKernel, 12000);
  KJIT_LOAD_OPT(cuKernelGetParamInfo, 12040);
  KJIT_LOAD_OPT(cuKernelGetParamCount, 13020);
  KJIT_LOAD(cuKernelGetAttribute, 12000);
  KJIT_LOAD(cuKernelSetAttribute, 12000);
  KJIT_LOAD(cuTensorMapEncodeTiled, 12000);
  KJIT_LOAD(cuLaunchKernel, 4000);
  KJIT_LOAD(cuLaunchKernelEx, 11060);
  KJIT_LOAD(cuStreamCreate, 2000);
  KJIT_LOAD(cuStreamDestroy, 4000);
  KJIT_LOAD(cuStreamSynchronize, 2000);
  KJIT_LOAD(cuStreamIsCapturing, 10000);
  KJIT_LOAD(cuMemAlloc, 3020);
  KJIT_LOAD(cuMemFree, 3020);
  KJIT_LOAD(cuMemcpyHtoD, 3020);
  KJIT_LOAD(cuMemcpyDtoH, 3020);
  KJIT_LOAD(cuMemsetD8, 3020);
  KJIT_LOAD(cuMemsetD32Async, 3020);
  KJIT_LOAD(cuEventCreate, 2000);
  KJIT_LOAD(cuEventDestroy, 4000);
  KJIT_LOAD(cuEventRecord, 2000);
  KJIT_LOAD(cuEventSynchronize, 2000);
  KJIT_LOAD(cuEventElapsedTime, 2000);
  KJIT_LOAD(cuStreamWaitEvent, 3020);
  KJIT_LOAD(cuPointerGetAttribute, 4000);
#undef KJIT_LOAD
#undef KJIT_LOAD_OPT
  drv->check(drv->cuInit(0), "cuInit");
  return drv;
}

bool DriverLibrary::available(std::string* why_not) {
  try {
    const DriverLibrary& d = get();
    int n = 0;
    d.check(d.cuDeviceGetCount(&n), "cuDeviceGetCount");
    if (n == 0) {
      if (why_not) *why_not = "the CUDA driver reports no device";
      return false;
    }
    return true;
  } catch (const Error& e) {
    if (why_not) *why_not = e.what();
    return false;
  }
}

std::string DriverLibrary::error_name(CUresult r) const {
  const char* name = nullptr;
  if (cuGetErrorName(r, &name) != CUDA_SUCCESS || !name) return "CUDA_ERROR_" + std::to_string(r);
  return name;
}

void DriverLibrary::check(CUresult r, const char* call) const {
  if (r == CUDA_SUCCESS) return;
  const char* text = nullptr;
  if (cuGetErrorString(r, &text) != CUDA_SUCCESS || !text) text = "unknown error";
  std::string name = error_name(r);
  throw DriverError(std::string(call) + " failed: " + name + " (" + text + ")", static_cast<int>(r), name);
}

void make_primary_context_current(int device) {
  const DriverLibrary& d = DriverLibrary::get();
  static std::mutex mu;
  static std::vector<CUcontext> contexts;
  CUcontext ctx = nullptr;
  {
    std::lock_guard<std::mutex> lock(mu);
    if (contexts.size() <= static_cast<std::size_t>(device)) contexts.resize(device + 1, nullptr);
    if (!contexts[device]) {
      CUdevice dev;
      d.check(d.cuDeviceGet(&dev, device), "cuDeviceGet");
      d.check(d.cuDevicePrimaryCtxRetain(&contexts[device], dev), "cuDevicePrimaryCtxRetain");
    }
    ctx = contexts[device];
  }
  d.check(d.cuCtxSetCurrent(ctx), "cuCtxSetCurrent");
}

ComputeCapability device_compute_capability(int device) {
  const DriverLibrary& d = DriverLibrary::get();
  CUdevice dev;
  d.check(d.cuDeviceGet(&dev, device), "cuDeviceGet");
  ComputeCapability cc;
  d.check(d.cuDeviceGetAttribute(&cc.major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev), "cuDeviceGetAttribute");
  d.check(d.cuDeviceGetAttribute(&cc.minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev), "cuDeviceGetAttribute");
  return cc;
}

int device_count() {
  const DriverLibrary& d = DriverLibrary::get();
  int n = 0;
  d.check(d.cuDeviceGetCount(&n), "cuDeviceGetCount");
  return n;
}

}  // namespace kjit

namespace kjit {

std::string device_name(int device) {
  const DriverLibrary& d = DriverLibrary::get();
  CUdevice dev;
  d.check(d.cuDeviceGet(&dev, device), "cuDeviceGet");
  char name[256] = {0};
  d.check(d.cuDeviceGetName(name, sizeof name, dev), "cuDeviceGetName");
  return name;
}

}  // namespace kjit
