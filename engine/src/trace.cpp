#include "kjit/trace.hpp"

#include <nvtx3/nvToolsExt.h>

#include <atomic>

namespace kjit::trace {
namespace {
// Both pointers are read together by a Range: one atomic pair (begin and end of one hook).
struct HookPair {
  void* (*begin)(const std::string&) noexcept;
  void (*end)(void*) noexcept;
};
std::atomic<const HookPair*> installed{nullptr};
}  // namespace

void set_hook(Hook hook) noexcept {
  // Hooks are installed once per process (at import of the binding): the few replaced pairs are kept
  // alive rather than freed under a Range that may still be using them on another thread.
  const HookPair* pair = hook.begin && hook.end ? new HookPair{hook.begin, hook.end} : nullptr;
  installed.store(pair, std::memory_order_release);
}

Range::Range(const char* what, const std::string& name_expression) {
  const std::string name = std::string("kjit ") + what + " " + name_expression;
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
