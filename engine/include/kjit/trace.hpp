// Named ranges for profilers around the cold paths: "kjit compile <name expression>" around an NVRTC
// compile, "kjit load <name expression>" around a disk-cache lookup and a module load.
//
// Every range is an NVTX range (nsys, Nsight Systems; NVTX costs one predictable branch when no tool is
// attached). An embedding program may add its own profiler through a hook (the Python binding adds
// torch.profiler's at::RecordFunction); the core stays free of any framework.
#pragma once

#include <string>

namespace kjit::trace {

// begin(name) opens a range on the calling thread and returns a handle that end(handle) closes, on the
// same thread. Both may be called from any thread; neither may throw.
struct Hook {
  void* (*begin)(const std::string& name) noexcept = nullptr;
  void (*end)(void* handle) noexcept = nullptr;
};

// Installs `hook` (both functions, or neither to remove it) for ranges that open from now on.
void set_hook(Hook hook) noexcept;

// One range: opens in the constructor, closes in the destructor.
class Range {
 public:
  // `what`: "compile" or "load"; the range is named "kjit <what> <name_expression>".
  Range(const char* what, const std::string& name_expression);
  ~Range();
  Range(const Range&) = delete;
  Range& operator=(const Range&) = delete;

 private:
  void (*end_)(void*) noexcept = nullptr;
  void* handle_ = nullptr;
};

}  // namespace kjit::trace
