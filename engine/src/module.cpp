#include "kjit/module.hpp"

#include "kjit/driver_library.hpp"
#include "kjit/error.hpp"

namespace kjit {

std::shared_ptr<const Module> Module::load(const std::string& image) {
  const DriverLibrary& d = DriverLibrary::get();
  auto m = std::shared_ptr<Module>(new Module());
  // The image string may not be NUL-terminated where it is PTX; cuLibraryLoadData needs that.
  std::string copy = image;
  copy.push_back('\0');
  d.check(d.cuLibraryLoadData(&m->lib_, copy.data(), nullptr, nullptr, 0, nullptr, nullptr, 0),
          "cuLibraryLoadData");
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

Kernel::Kernel(std::shared_ptr<const Module> module, std::string lowered_name, std::string display_name)
    : module_(std::move(module)), lowered_(std::move(lowered_name)), name_(std::move(display_name)) {
  const DriverLibrary& d = DriverLibrary::get();
  d.check(d.cuLibraryGetKernel(&kernel_, module_->handle(), lowered_.c_str()), "cuLibraryGetKernel");
  if (d.cuKernelGetParamInfo) {
    sizes_known_ = true;
    for (std::size_t i = 0;; ++i) {
      std::size_t offset = 0, size = 0;
      CUresult r = d.cuKernelGetParamInfo(kernel_, i, &offset, &size);
      if (r != CUDA_SUCCESS) break;
      param_sizes_.push_back(size);
    }
  }
}

void Kernel::launch(const LaunchConfig& c, void** args) const {
  const DriverLibrary& d = DriverLibrary::get();
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
