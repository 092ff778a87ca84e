// Module: a loaded cubin/PTX (a context-independent CUlibrary). Kernel: one entry point of it,
// usable on every device of the process (cuLibraryGetKernel handles load lazily per context).
#pragma once

#include <cuda.h>

#include <atomic>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "kjit/launch_config.hpp"

namespace kjit {

class Module {
 public:
  // Loads `image` (cubin or NUL-terminated PTX). Throws DriverError.
  static std::shared_ptr<const Module> load(const std::string& image);
  ~Module();
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;
  CUlibrary handle() const noexcept { return lib_; }

 private:
  Module() = default;
  CUlibrary lib_ = nullptr;
};

class Kernel {
 public:
  // Looks `lowered_name` up in `module`, loaded from `image` (its cubin or PTX), and reads the parameter
  // sizes where they can be told without a failing driver call: the count from cuKernelGetParamCount
  // (CUDA 13.2 drivers) or else from the image (image_params.hpp), then each size from cuKernelGetParamInfo
  // (12.4). Unknown (param_sizes_known() false) where neither tells the count, or on older drivers.
  Kernel(std::shared_ptr<const Module> module, std::string lowered_name, std::string display_name,
         std::string_view image);

  // The hot path: one cuLaunchKernelEx on config.stream. `args` points to one pointer per kernel
  // parameter. Needs a current context (PyTorch's device guard, or make_primary_context_current).
  // Throws LaunchError (CUDA error name and text) when the driver refuses the launch. Dynamic shared
  // memory over 48 KB is opted in per device the first time a launch asks for it (the driver's
  // CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES), so callers just set config.shared_mem.
  void launch(const LaunchConfig& config, void** args) const;

  CUkernel handle() const noexcept { return kernel_; }
  const std::string& lowered_name() const noexcept { return lowered_; }
  const std::string& name() const noexcept { return name_; }
  // Byte size of each parameter (empty when unknown).
  const std::vector<std::size_t>& param_sizes() const noexcept { return param_sizes_; }
  bool param_sizes_known() const noexcept { return sizes_known_; }

 private:
  std::shared_ptr<const Module> module_;
  CUkernel kernel_ = nullptr;
  std::string lowered_;
  std::string name_;
  std::vector<std::size_t> param_sizes_;
  bool sizes_known_ = false;
  // The dynamic shared memory opted in so far, per device ordinal (kMaxDevices of them).
  static constexpr int kMaxDevices = 64;
  std::unique_ptr<std::atomic<unsigned>[]> shared_opted_;
  void opt_in_shared(unsigned bytes) const;
};

}  // namespace kjit
