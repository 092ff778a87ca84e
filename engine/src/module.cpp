#include "kjit/module.hpp"

#include "kjit/driver_library.hpp"
#include "kjit/error.hpp"
#include "kjit/image_params.hpp"

#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace kjit {

std::shared_ptr<const Module> Module::load(const std::string& image) {
  const DriverLibrary& d = DriverLibrary::get();
  auto m = std::shared_ptr<Module>(new Module());
  // The image string may not be NUL-terminated where it is PTX; cuLibraryLoadData needs that.
  std::string copy = image;
  copy.push_back('\0');
  d.check(d.cuLibraryLoadData(&m->lib_, copy.data(), nullptr, nullptr, 0, nullptr, nullptr, 0), "cuLibraryLoadData");
  return m;
}

Module::~Module() {
  if (lib_) {
    try {
      DriverLibrary::get().cuLibraryUnload(lib_);
    } catch (...) {
    }
  }
}

Kernel::Kernel(std::shared_ptr<const Module> module, std::string lowered_name, std::string display_name,
               std::string_view image)
    : module_(std::move(module)),
      lowered_(std::move(lowered_name)),
      name_(std::move(display_name)),
      shared_opted_(new std::atomic<unsigned>[kMaxDevices]()) {
  const DriverLibrary& d = DriverLibrary::get();
  d.check(d.cuLibraryGetKernel(&kernel_, module_->handle(), lowered_.c_str()), "cuLibraryGetKernel");
  if (!d.cuKernelGetParamInfo) return;
  // Never a call that fails: cuKernelGetParamInfo past the last parameter answers CUDA_ERROR_INVALID_VALUE,
  // which compute-sanitizer reports in the user's program, so the count comes first.
  std::optional<std::size_t> count;
  std::size_t n = 0;
  if (d.cuKernelGetParamCount && d.cuKernelGetParamCount(kernel_, &n) == CUDA_SUCCESS) count = n;
  if (!count) count = image_param_count(image, lowered_);
  if (!count) return;
  std::vector<std::size_t> sizes;
  sizes.reserve(*count);
  for (std::size_t i = 0; i < *count; ++i) {
    std::size_t offset = 0, size = 0;
    if (d.cuKernelGetParamInfo(kernel_, i, &offset, &size) != CUDA_SUCCESS) return;  // the image misread: unknown
    sizes.push_back(size);
  }
  param_sizes_ = std::move(sizes);
  sizes_known_ = true;
}

void Kernel::opt_in_shared(unsigned bytes) const {
  const DriverLibrary& d = DriverLibrary::get();
  CUdevice dev = 0;
  d.check(d.cuCtxGetDevice(&dev), "cuCtxGetDevice");
  if (dev < 0 || dev >= kMaxDevices) throw LaunchError("device ordinal " + std::to_string(dev) + " is out of range");
  std::atomic<unsigned>& opted = shared_opted_[dev];
  if (opted.load(std::memory_order_acquire) >= bytes) return;
  static std::mutex mu;  // the attribute only grows: two launches never set it below each other's need
  const std::lock_guard<std::mutex> lock(mu);
  if (opted.load(std::memory_order_relaxed) >= bytes) return;
  const CUresult r =
      d.cuKernelSetAttribute(CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, static_cast<int>(bytes), kernel_, dev);
  if (r != CUDA_SUCCESS) {
    const char* text = nullptr;
    d.cuGetErrorString(r, &text);
    throw LaunchError("launch of " + name_ + " asks for " + std::to_string(bytes) +
                      " bytes of dynamic shared memory, which the device refuses: " + d.error_name(r) + " (" +
                      (text ? text : "") +
                      "); ask for less (the device's limit is its "
                      "CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)");
  }
  opted.store(bytes, std::memory_order_release);
}

void Kernel::launch(const LaunchConfig& c, void** args) const {
  const DriverLibrary& d = DriverLibrary::get();
  if (c.shared_mem > 48 * 1024) opt_in_shared(c.shared_mem);
  CUlaunchConfig cfg{};
  cfg.gridDimX = c.grid.x;
  cfg.gridDimY = c.grid.y;
  cfg.gridDimZ = c.grid.z;
  cfg.blockDimX = c.block.x;
  cfg.blockDimY = c.block.y;
  cfg.blockDimZ = c.block.z;
  cfg.sharedMemBytes = c.shared_mem;
  cfg.hStream = c.stream;
  CUresult r = d.cuLaunchKernelEx(&cfg, reinterpret_cast<CUfunction>(kernel_), args, nullptr);
  if (r != CUDA_SUCCESS) {
    c.validate();  // a clearer message for a bad configuration
    const char* text = nullptr;
    d.cuGetErrorString(r, &text);
    throw LaunchError("launch of " + name_ + " failed: " + d.error_name(r) + " (" + (text ? text : "") + ")");
  }
}

}  // namespace kjit
