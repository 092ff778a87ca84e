// kjit::trace ranges ("kjit compile <name expression>", "kjit load <name expression>") in
// torch.profiler traces: each range is an at::RecordFunction in the user scope, as
// torch.profiler.record_function makes. Without an active profiler a range costs one check.
#include <ATen/record_function.h>

#include <memory>
#include <string>

#include "core/bindings.hpp"
#include "kjit/trace.hpp"

namespace kjit::python {
namespace {

struct ProfilerRange {
  std::string name;  // kept alive for the RecordFunction, which is handed a view of it
  at::RecordFunction record{at::RecordScope::USER_SCOPE};
};

void* begin_range(const std::string& name) noexcept {
  try {
    if (!at::hasCallbacks()) return nullptr;
    auto r = std::make_unique<ProfilerRange>();
    if (!r->record.isActive()) return nullptr;
    r->name = name;
    r->record.before(std::string_view(r->name), c10::ArrayRef<const c10::IValue>{});
    return r.release();
  } catch (...) {
    return nullptr;  // a profiler that fails must not fail a compile
  }
}

void end_range(void* handle) noexcept {
  delete static_cast<ProfilerRange*>(handle);  // ~RecordFunction ends the range
}

}  // namespace

void register_profiler(py::module_&) {
  trace::Hook hook;
  hook.begin = &begin_range;
  hook.end = &end_range;
  trace::set_hook(hook);
}

}  // namespace kjit::python
