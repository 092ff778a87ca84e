// The C++ objects behind kjit.Template, kjit.KernelFamily and kjit.Kernel (shared by template_binding.cpp,
// which makes kernels, and kernel_binding.cpp, which launches them). No torch headers here.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "bindings.hpp"
#include "kjit/engine.hpp"
#include "kjit/kernel_family.hpp"
#include "kjit/param_layout.hpp"
#include "kjit/template.hpp"

namespace kjit::python {

struct PyTemplate {
  std::shared_ptr<const Template> tmpl;
};

struct PyFamily {
  std::shared_ptr<const KernelFamily> family;
};

// What every Kernel object of one compiled specialization shares.
struct KernelInfo {
  std::shared_ptr<const SpecializedKernel> specialized;  // its kernel is null when compiled for an arch only
  std::string arch;                                      // the architecture asked for (compile-only kernels)
  std::string name_expression;
  std::vector<std::pair<std::string, TemplateArg>> args;  // template arguments, in parameter order
  ParamLayout layout;
};

// kjit.Kernel: a specialization for one device (or compiled for an architecture only: device -1).
struct PyKernel {
  std::shared_ptr<const KernelInfo> info;
  Origin origin = Origin::Memory;
  int device = -1;
};

// Forgets the Kernel objects kept for memory hits (with Engine::clear_memory; template_binding.cpp).
void clear_kernel_objects();

}  // namespace kjit::python
