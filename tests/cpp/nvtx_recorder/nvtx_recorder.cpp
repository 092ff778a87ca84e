// A minimal NVTX tool, injected as nsys injects its own (NVTX_INJECTION64_PATH): it records the names of
// the ranges pushed by the process (nvtxRangePushA) and their depth, so that test_trace can read them
// back (kjit_nvtx_recorded) and check what a profiler attached to kjit would see.
#define NVTX_NO_IMPL
#include <nvtx3/nvToolsExt.h>

#include <mutex>
#include <string>

namespace {
std::mutex mu;
std::string recorded;  // "push <name>\n" / "pop\n", in order
int depth = 0;

int NVTX_API push_a(const char* message) {
  std::lock_guard<std::mutex> lock(mu);
  recorded += std::string("push ") + (message ? message : "") + "\n";
  return depth++;
}

int NVTX_API pop() {
  std::lock_guard<std::mutex> lock(mu);
  recorded += "pop\n";
  return --depth;
}
}  // namespace

extern "C" {

// The NVTX loader calls this once, at the process's first NVTX call.
__attribute__((visibility("default"))) int InitializeInjectionNvtx2(NvtxGetExportTableFunc_t get_export_table) {
  auto* callbacks = static_cast<const NvtxExportTableCallbacks*>(get_export_table(NVTX_ETID_CALLBACKS));
  if (!callbacks) return 0;
  NvtxFunctionTable table = nullptr;
  unsigned int size = 0;
  if (!callbacks->GetModuleFunctionTable(NVTX_CB_MODULE_CORE, &table, &size) || !table) return 0;
  if (size <= NVTX_CBID_CORE_RangePop) return 0;
  *table[NVTX_CBID_CORE_RangePushA] = reinterpret_cast<NvtxFunctionPointer>(&push_a);
  *table[NVTX_CBID_CORE_RangePop] = reinterpret_cast<NvtxFunctionPointer>(&pop);
  return 1;
}

// For the test: what was recorded so far (a copy that stays valid until the next call).
__attribute__((visibility("default"))) const char* kjit_nvtx_recorded() {
  static thread_local std::string copy;
  std::lock_guard<std::mutex> lock(mu);
  copy = recorded;
  return copy.c_str();
}
}
