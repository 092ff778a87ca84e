// DeviceBuffer: RAII device memory for the GPU tests and benchmarks (Driver API, no runtime).
#pragma once

#include <cuda.h>

#include <cstddef>
#include <vector>

#include "kjit/driver_library.hpp"

namespace kjit::testing {

class DeviceBuffer {
 public:
  explicit DeviceBuffer(std::size_t bytes) : bytes_(bytes) {
    const auto& d = DriverLibrary::get();
    d.check(d.cuMemAlloc(&ptr_, bytes ? bytes : 1), "cuMemAlloc");
  }
  ~DeviceBuffer() {
    if (ptr_) DriverLibrary::get().cuMemFree(ptr_);
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  CUdeviceptr get() const noexcept { return ptr_; }
  template <typename T>
  void upload(const std::vector<T>& host) {
    const auto& d = DriverLibrary::get();
    d.check(d.cuMemcpyHtoD(ptr_, host.data(), host.size() * sizeof(T)), "cuMemcpyHtoD");
  }
  template <typename T>
  std::vector<T> download(std::size_t count) const {
    std::vector<T> host(count);
    const auto& d = DriverLibrary::get();
    d.check(d.cuMemcpyDtoH(host.data(), ptr_, count * sizeof(T)), "cuMemcpyDtoH");
    return host;
  }

 private:
  CUdeviceptr ptr_ = 0;
  std::size_t bytes_;
};

}  // namespace kjit::testing
