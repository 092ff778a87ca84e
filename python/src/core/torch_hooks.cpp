#include "torch_hooks.hpp"

#include <atomic>

namespace kjit::python {
namespace {
std::atomic<const TorchHooks*> g_hooks{nullptr};
}  // namespace

const TorchHooks* torch_hooks() noexcept { return g_hooks.load(std::memory_order_acquire); }
void set_torch_hooks(const TorchHooks* hooks) noexcept { g_hooks.store(hooks, std::memory_order_release); }

}  // namespace kjit::python
