#include "kjit/nvrtc_library.hpp"

#include <algorithm>
#include <atomic>
#include <memory>
#include <mutex>

#include "kjit/cuda_toolkit.hpp"
#include "kjit/error.hpp"

namespace kjit {
namespace {
std::atomic<bool> g_loaded{false};
}

bool NvrtcLibrary::loaded() { return g_loaded.load(std::memory_order_acquire); }

const NvrtcLibrary& NvrtcLibrary::get() {
  static std::mutex mu;
  // Never destroyed (nor NVRTC closed): a background thread (the compiler preload, compiles ahead) may be
  // inside NVRTC while the process's static objects are destroyed at exit.
  static NvrtcLibrary* instance = nullptr;
  if (g_loaded.load(std::memory_order_acquire)) return *instance;
  std::lock_guard<std::mutex> lock(mu);
  if (instance) return *instance;

  const CudaToolkit& tk = cuda_toolkit();
  std::string where;
  for (const auto& s : tk.searched) where += "\n  " + s;
  if (!tk.has_nvrtc())
    throw Error("NVRTC (libnvrtc.so) was not found. Looked in:" + where +
                "\nInstall the CUDA toolkit or `pip install nvidia-cuda-nvrtc`, or set KJIT_CUDA_HOME "
                "to the toolkit root or KJIT_NVRTC_LIBRARY to the library file.");
  auto lib = std::unique_ptr<NvrtcLibrary>(new NvrtcLibrary());
  std::string err;
  lib->lib_ = DynamicLibrary::try_open(tk.nvrtc_library.string(), &err);
  if (!lib->lib_.loaded())
    throw Error("NVRTC was found at " + tk.nvrtc_library.string() + " but could not be loaded: " + err +
                "\nSet KJIT_NVRTC_LIBRARY to a working libnvrtc.so.");
#define KJIT_LOAD(name) lib->name = reinterpret_cast<decltype(lib->name)>(lib->lib_.require(#name))
  KJIT_LOAD(nvrtcVersion);
  KJIT_LOAD(nvrtcGetErrorString);
  KJIT_LOAD(nvrtcGetNumSupportedArchs);
  KJIT_LOAD(nvrtcGetSupportedArchs);
  KJIT_LOAD(nvrtcCreateProgram);
  KJIT_LOAD(nvrtcDestroyProgram);
  KJIT_LOAD(nvrtcCompileProgram);
  KJIT_LOAD(nvrtcGetPTXSize);
  KJIT_LOAD(nvrtcGetPTX);
  KJIT_LOAD(nvrtcGetCUBINSize);
  KJIT_LOAD(nvrtcGetCUBIN);
  KJIT_LOAD(nvrtcGetProgramLogSize);
  KJIT_LOAD(nvrtcGetProgramLog);
  KJIT_LOAD(nvrtcAddNameExpression);
  KJIT_LOAD(nvrtcGetLoweredName);
#undef KJIT_LOAD
#define KJIT_LOAD_IF_THERE(name) lib->name = reinterpret_cast<decltype(lib->name)>(lib->lib_.find(#name))
  KJIT_LOAD_IF_THERE(nvrtcSetPCHHeapSize);
  KJIT_LOAD_IF_THERE(nvrtcGetPCHCreateStatus);
  KJIT_LOAD_IF_THERE(nvrtcGetPCHHeapSizeRequired);
#undef KJIT_LOAD_IF_THERE
  lib->check(lib->nvrtcVersion(&lib->major_, &lib->minor_), "nvrtcVersion");
  int n = 0;
  lib->check(lib->nvrtcGetNumSupportedArchs(&n), "nvrtcGetNumSupportedArchs");
  lib->archs_.resize(static_cast<std::size_t>(n));
  if (n > 0) lib->check(lib->nvrtcGetSupportedArchs(lib->archs_.data()), "nvrtcGetSupportedArchs");
  instance = lib.release();
  g_loaded.store(true, std::memory_order_release);
  return *instance;
}

std::vector<std::string> nvrtc_flags_for_version(int major, int minor, std::vector<std::string> flags) {
  const auto at_least = [&](int ma, int mi) { return major > ma || (major == ma && minor >= mi); };
  if (!at_least(12, 8))
    flags.erase(std::remove_if(flags.begin(), flags.end(),
                               [](const std::string& f) { return f.rfind("--Ofast-compile=", 0) == 0; }),
                flags.end());
  if (at_least(12, 9)) flags.push_back("--no-cache");
  return flags;
}

void NvrtcLibrary::check(nvrtcResult r, const char* call) const {
  if (r == NVRTC_SUCCESS) return;
  throw Error(std::string(call) + " failed: " + nvrtcGetErrorString(r));
}

}  // namespace kjit
