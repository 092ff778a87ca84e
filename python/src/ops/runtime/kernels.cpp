#include "ops/runtime/kernels.hpp"

#include <Python.h>
#include <c10/core/impl/LocalDispatchKeySet.h>

#include "kjit/engine.hpp"
#include "kjit/shape_policy.hpp"
#include "ops/runtime/direct.hpp"
#include "ops/runtime/plan.hpp"

namespace kjit::ops {

namespace {
// Releases the GIL for the scope when this thread holds it (a direct entry's miss); nothing otherwise
// (torch.ops calls run without it).
class UnlessNoGil {
 public:
  UnlessNoGil() : state_(Py_IsInitialized() && PyGILState_Check() ? PyEval_SaveThread() : nullptr) {}
  ~UnlessNoGil() {
    if (state_) PyEval_RestoreThread(state_);
  }
  UnlessNoGil(const UnlessNoGil&) = delete;
  UnlessNoGil& operator=(const UnlessNoGil&) = delete;

 private:
  PyThreadState* state_;
};
}  // namespace

namespace {
thread_local CompileAheadOnMiss* pending_ahead = nullptr;
}

CompileAheadOnMiss::CompileAheadOnMiss(const at::Tensor& x, const void* predict, void (*call)(const void*)) noexcept
    : predict_(predict), outer_(pending_ahead) {
  pending_ahead = this;
  // A CUDA tensor: never a compile-only plan's meta tensor (plain_cuda_tensor takes those under a plan).
  if (x.is_cuda() && plain_cuda_tensor(x) && x.numel() > 0 &&
      !c10::impl::tls_is_dispatch_key_included(c10::DispatchKey::Python))
    call_ = call;
}

CompileAheadOnMiss::~CompileAheadOnMiss() { pending_ahead = outer_; }

void CompileAheadOnMiss::run_pending() noexcept {
  CompileAheadOnMiss* p = pending_ahead;
  if (!p || !p->call_) return;
  auto call = p->call_;
  p->call_ = nullptr;  // once, and not again from a kernel_for inside the prediction
  try {
    call(p->predict_);
  } catch (...) {
    // The backward meets whatever this was and reports it.
  }
}

std::shared_ptr<const SpecializedKernel> kernel_for(const KernelFamily& family, const TemplateArg* args, std::size_t n,
                                                    int device, const char* compile_forbidden) {
  if (auto hit = family.find(args, n, device)) return hit;
  if (device == kPlanDevice) {  // never in the table: compiled for the plan's target, and recorded
    PlanScope& plan = PlanScope::require();
    if (!plan.compiles()) {  // named only: the kernel's metadata, no code
      auto named = std::make_shared<SpecializedKernel>();
      const Specialization s = family.specialization(args, n);
      named->meta.kernel = s.kernel().name;
      named->meta.name_expression = s.name_expression();
      named->meta.target = plan.target().str();
      plan.add({family.tmpl().name(), named, std::nullopt});
      return named;
    }
    Origin origin = Origin::Memory;
    std::shared_ptr<const SpecializedKernel> k;
    {
      UnlessNoGil nogil;
      k = family.compile_only(args, n, plan.target(), &origin);
    }
    plan.add({family.tmpl().name(), k, origin});
    return k;
  }
  CompileAheadOnMiss::run_pending();
  UnlessNoGil nogil;
  return family.get(args, n, device, nullptr, compile_forbidden);
}

std::shared_ptr<const SpecializedKernel> typed_kernel(const KernelFamily& family, at::ScalarType dtype, int vec,
                                                      int device, const char* compile_forbidden) {
  const TemplateArg args[2] = {TemplateArg::type(to_dtype(dtype)), TemplateArg::integer(vec)};
  return kernel_for(family, args, device, compile_forbidden);
}

std::shared_ptr<const Template> builtin_template(const char* name) { return Template::builtin(name); }

std::int64_t specialized_d(const char* kernel, std::int64_t d) {
  // A plan leaves the process's shape policy as it was: it specializes every size, or (generic) none.
  if (const PlanScope* plan = PlanScope::current()) return plan->generic() ? 0 : d;
  return Engine::global().shape_policy().admit(kernel, "D", d);
}
}  // namespace kjit::ops
