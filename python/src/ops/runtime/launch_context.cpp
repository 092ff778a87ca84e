#include "ops/runtime/launch_context.hpp"

#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAStream.h>

#include <string>
#include <utility>

#include "kjit/error.hpp"
#include "ops/runtime/plan.hpp"

namespace kjit::ops {

namespace {

// Cold path: "expected all tensors on one CUDA device, got cuda:0 (x) and cpu (y)" with the tensors
// grouped by device in the order they came.
template <class Each>
[[noreturn]] void throw_devices(Each&& each) {
  std::vector<std::pair<std::string, std::string>> groups;  // device -> "x, y"
  std::string first_cuda;
  each([&](const char* name, const at::TensorBase& t) {
    const std::string dev = t.device().str();
    if (first_cuda.empty() && t.is_cuda()) first_cuda = dev;
    for (auto& g : groups)
      if (g.first == dev) {
        g.second += std::string(", ") + name;
        return;
      }
    groups.emplace_back(dev, name);
  });
  std::string got;
  for (std::size_t i = 0; i < groups.size(); ++i) {
    if (i) got += i + 1 == groups.size() ? " and " : ", ";
    got += groups[i].first + " (" + groups[i].second + ")";
  }
  const std::string target = first_cuda.empty() ? std::string("cuda") : first_cuda;
  throw ValueError("expected all tensors on one CUDA device, got " + got + "; move them with .to('" + target + "')");
}

template <class Each>
int common_device(Each&& each) {
  int device = -1;
  bool bad = false;
  each([&](const char*, const at::TensorBase& t) {
    const c10::Device d = t.device();
    if (!d.is_cuda()) {
      bad = true;
    } else if (device < 0) {
      device = d.index();
    } else if (d.index() != device) {
      bad = true;
    }
  });
  if (bad) throw_devices(each);
  return device >= 0 ? device : static_cast<int>(c10::cuda::current_device());
}

}  // namespace

int device_of(std::initializer_list<NamedTensor> tensors) {
  return common_device([&](auto&& f) {
    for (const NamedTensor& t : tensors)
      if (t.tensor.defined()) f(t.name, t.tensor);
  });
}

int device_of(const std::vector<at::Tensor>& tensors, std::initializer_list<const char*> names) {
  static const char* const kNumbers[] = {"#1", "#2",  "#3",  "#4",  "#5",  "#6",  "#7",  "#8",
                                         "#9", "#10", "#11", "#12", "#13", "#14", "#15", "#16"};
  return common_device([&](auto&& f) {
    for (std::size_t i = 0; i < tensors.size(); ++i) {
      if (!tensors[i].defined()) continue;
      const char* name = i < names.size() ? names.begin()[i] : (i < 16 ? kNumbers[i] : "#?");
      f(name, tensors[i]);
    }
  });
}

LaunchContext::LaunchContext(int device) : stream(nullptr), compile_forbidden(nullptr) {
  if (device == kPlanDevice) return;
  guard.set_index(static_cast<c10::DeviceIndex>(device));
  stream = c10::cuda::getCurrentCUDAStream(static_cast<c10::DeviceIndex>(device)).stream();
  ensure_context(device);
  compile_forbidden = capture_forbids_compile(stream);  // a Driver API call: after the context
}

LaunchContext::LaunchContext(int device, CUstream s) : stream(s), compile_forbidden(nullptr) {
  if (device == kPlanDevice) return;
  guard.set_index(static_cast<c10::DeviceIndex>(device));
  ensure_context(device);
  compile_forbidden = capture_forbids_compile(stream);
}

}  // namespace kjit::ops
