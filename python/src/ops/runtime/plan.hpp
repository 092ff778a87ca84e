// The ops' compile-only plan: a call of a built-in op that compiles the kernels it would launch, for a named
// target, on a machine with or without a GPU, and launches nothing.
//
// While a PlanScope lives on a thread, an op's direct entry (kjit._C.ops.<name>) takes meta tensors as it
// takes plain CUDA tensors and runs the op's own CUDA function: its checks, its planners (row geometry, the
// GEMM's tile pick, the vector widths of aligned data) and its kernel lookups run as they would on a GPU of
// the scope's target and multiprocessor count. What differs is kept to the runtime's seams, each keyed on the
// device ordinal kPlanDevice that device_for() returns for meta tensors:
//   - kernel_for() compiles the specialization for the target (KernelFamily::compile_only) and records it;
//   - launch_kernel() launches nothing (the kernel it gets is compile-only);
//   - LaunchContext holds no device guard and no stream; sm_count() and target_of() answer the scope's;
//   - new_empty() makes meta tensors; the shape policy is not consulted (or, `generic`, every specialized
//     size is 0: the variants that serve every size);
//   - the GEMM encodes no TMA descriptor and times no candidate.
// So the kernels a test compiles for sm_80 / sm_90 / sm_100 are the ones the planners pick, never a second
// list of them; and kjit._C._plan_op is how Python asks (tests/python/ops/, `kjit warm` of library ops).
#pragma once

#include <ATen/core/TensorBase.h>
#include <pybind11/pybind11.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kjit/specialized_kernel.hpp"
#include "kjit/target.hpp"

namespace kjit::ops {

// The device ordinal of an op's call under a PlanScope (no CUDA device has it).
inline constexpr int kPlanDevice = -2;

class PlanScope {
 public:
  // `sm_count`: the multiprocessors the planners assume (the H100 SXM's and H200's 132 by default).
  // `generic`: every specialized size is 0 (the variants that serve every size). `candidates`: where an op
  // picks among configurations (the GEMM's tiles), every candidate it would time under KJIT_TUNE=1.
  // `compile`: false names the kernels without compiling them (what an op would launch, for its shapes).
  PlanScope(const Target& target, int sm_count, bool generic, bool candidates, bool compile);
  ~PlanScope();
  PlanScope(const PlanScope&) = delete;
  PlanScope& operator=(const PlanScope&) = delete;

  // This thread's innermost scope, or null.
  static PlanScope* current() noexcept;
  // The current scope; kjit::Error when none is active (a kPlanDevice call outside one).
  static PlanScope& require();

  const Target& target() const noexcept { return target_; }
  int sm_count() const noexcept { return sm_count_; }
  bool generic() const noexcept { return generic_; }
  bool candidates() const noexcept { return candidates_; }
  bool compiles() const noexcept { return compile_; }

  // What the ops asked for, in order (each compiled or found in the stores).
  struct Planned {
    std::string tmpl;  // the template's name (kernel_templates/<tmpl>.cuh, or an elementwise program's)
    std::shared_ptr<const SpecializedKernel> kernel;  // compile-only; only the metadata's names when not compiled
    std::optional<Origin> origin;                     // none: not compiled
  };
  const std::vector<Planned>& planned() const noexcept { return planned_; }
  void add(Planned p) { planned_.push_back(std::move(p)); }

 private:
  Target target_;
  int sm_count_;
  bool generic_;
  bool candidates_;
  bool compile_;
  PlanScope* outer_;
  std::vector<Planned> planned_;
};

// A tensor an op may take on this thread: a CUDA tensor, or a meta tensor under a PlanScope.
inline bool on_op_device(const at::TensorBase& t) noexcept {
  return t.is_cuda() || (t.is_meta() && PlanScope::current());
}
// The device ordinal of a tensor for the runtime: its CUDA device, or kPlanDevice for a meta tensor under a
// PlanScope.
inline int op_device(const at::TensorBase& t) noexcept {
  return t.is_meta() && PlanScope::current() ? kPlanDevice : t.device().index();
}

// kjit._C._plan_op(name, args, kwargs, *, arch, sm_count=132, generic=False, candidates=False, compile=True)
//   -> (the op's result, as meta tensors; the kernels, a list of dicts).
void bind_plan(pybind11::module_& m);

}  // namespace kjit::ops
