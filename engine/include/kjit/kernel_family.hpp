// KernelFamily: one kernel of a template with fixed compile options, specialized on demand.
// `get` is the hot path: template arguments (in the kernel's parameter order) + device make a
// fixed-size SpecKey looked up in the Engine's table; only a miss builds a Specialization, hashes
// sources and goes to the disk cache or NVRTC.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "kjit/engine.hpp"

namespace kjit {

class KernelFamily {
 public:
  // `arch_specific`: compile for the device's sm_XYa (wgmma, setmaxnreg, ... of sm_90a) instead of
  // sm_XY. Such a binary runs on that architecture only: callers choose it where the device is exactly
  // the one the kernel is written for.
  KernelFamily(Engine& engine, std::shared_ptr<const Template> tmpl, const std::string& kernel,
               CompileOptions options = {}, bool arch_specific = false);

  const Template& tmpl() const noexcept { return *template_; }
  const std::shared_ptr<const Template>& template_ptr() const noexcept { return template_; }
  const KernelDecl& decl() const noexcept { return *decl_; }
  const CompileOptions& options() const noexcept { return options_; }
  Engine& engine() const noexcept { return *engine_; }

  // `args[i]` binds the i-th template parameter of the kernel (a prefix of them when the rest have
  // defaults). `compile_forbidden_reason` as in Engine::get. `origin` (optional) tells how it was found.
  std::shared_ptr<const SpecializedKernel> get(const TemplateArg* args, std::size_t n, int device,
                                               Origin* origin = nullptr,
                                               const char* compile_forbidden_reason = nullptr) const;
  std::shared_ptr<const SpecializedKernel> get(const std::vector<TemplateArg>& args, int device,
                                               Origin* origin = nullptr,
                                               const char* compile_forbidden_reason = nullptr) const {
    return get(args.data(), args.size(), device, origin, compile_forbidden_reason);
  }
  // The memory-table lookup alone (counted as a memory hit when found); null on a miss. Never blocks on
  // a compile, so callers can release locks (the GIL) only around get() on a miss.
  std::shared_ptr<const SpecializedKernel> find(const TemplateArg* args, std::size_t n, int device) const noexcept;

  // For a kernel a later get() of the same arguments will want (an op's backward, asked for at its
  // forward): nothing when it is in memory already, else Engine::prepare_ahead (compiled into the disk
  // cache on a background thread, once per process). Never throws: bad arguments or no device are
  // left for that get() to report.
  void prepare_ahead(const TemplateArg* args, std::size_t n, int device) const noexcept;

  // Compiled for `target` into the stores without loading (Engine::compile_only; for an arch-specific family
  // its sm_XYa): a GPU-free call of an op (the ops' compile-only plan) asks for its kernels so.
  std::shared_ptr<const SpecializedKernel> compile_only(const TemplateArg* args, std::size_t n, const Target& target,
                                                        Origin* origin = nullptr) const;

  // The Specialization those arguments make (validates them; not the hot path).
  Specialization specialization(const TemplateArg* args, std::size_t n) const;

 private:
  Engine* engine_;
  std::shared_ptr<const Template> template_;
  const KernelDecl* decl_;
  CompileOptions options_;
  bool arch_specific_;
  const Target& target(int device) const;
  bool spec_key(const TemplateArg* args, std::size_t n, int device, SpecKey& key) const noexcept;
  std::uint64_t family_;
};

// The target of a device, read from the driver once per device.
const Target& device_target(int device);

}  // namespace kjit
