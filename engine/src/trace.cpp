#include "kjit/trace.hpp"

#include <nvtx3/nvToolsExt.h>

#include <atomic>
#include <forward_list>
#include <mutex>

namespace kjit::trace {
namespace {
// Both pointers are read together by a Range: one atomic pair (begin and end of one hook).
struct HookPair {
  void* (*begin)(const std::string&) noexcept;
  void (*end)(void*) noexcept;
};
std::atomic<const HookPair*> installed{nullptr};

// Every pair ever installed, kept for the life of the process: a Range on another thread may still be
// using a replaced one. Hooks are installed about once per process (at import of the binding), so this
// stays a few entries. Never destroyed (a Range may run during static destruction) and still reachable,
// so leak checkers see no leak.
std::mutex& kept_mutex() {
  static std::mutex m;
  return m;
}
std::forward_list<HookPair>& kept() {
  static auto* pairs = new std::forward_list<HookPair>;
  return *pairs;
}
// NVTX initializes itself lazily inside the first call, writing its table of function pointers with no
// synchronization (nvtxInitOnce): two threads opening their first Range at once race on that table
// (ThreadSanitizer flags it in test_engine_threads). One C++ static runs the initialization once, and
// every later NVTX call happens after it.
void initialize_nvtx_once() noexcept {
  static const bool initialized = [] {
    nvtxInitialize(nullptr);
    return true;
  }();
  (void)initialized;
}
}  // namespace

void set_hook(Hook hook) noexcept {
  const HookPair* pair = nullptr;
  if (hook.begin && hook.end) {
    std::lock_guard<std::mutex> lock(kept_mutex());
    kept().push_front(HookPair{hook.begin, hook.end});
    pair = &kept().front();
  }
  installed.store(pair, std::memory_order_release);
}

Range::Range(const char* what, const std::string& name_expression) {
  const std::string name = std::string("kjit ") + what + " " + name_expression;
  initialize_nvtx_once();
  nvtxRangePushA(name.c_str());
  if (const HookPair* h = installed.load(std::memory_order_acquire)) {
    end_ = h->end;
    handle_ = h->begin(name);
  }
}

Range::~Range() {
  if (end_) end_(handle_);
  nvtxRangePop();
}

}  // namespace kjit::trace
