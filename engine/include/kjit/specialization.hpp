// Specialization: a template, one of its kernels, typed template arguments and compile options.
// Arguments are addressed by parameter name and validated against the kernel's declaration.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "kjit/compile_options.hpp"
#include "kjit/template.hpp"
#include "kjit/template_arg.hpp"

namespace kjit {

class Specialization {
 public:
  // Throws ValueError for an unknown kernel, unknown or missing parameter names (listing the
  // kernel's parameters) and TypeError / ValueError for arguments that do not fit their parameter.
  Specialization(std::shared_ptr<const Template> tmpl, const std::string& kernel,
                 const std::vector<std::pair<std::string, TemplateArg>>& args, CompileOptions options = {});

  const std::shared_ptr<const Template>& template_ptr() const noexcept { return template_; }
  const Template& tmpl() const noexcept { return *template_; }
  const KernelDecl& kernel() const noexcept { return *kernel_; }
  // Arguments in parameter order; defaulted parameters not given are absent.
  const std::vector<std::pair<std::string, TemplateArg>>& args() const noexcept { return args_; }
  const CompileOptions& options() const noexcept { return options_; }
  // "add_constant<float, 4>" (or "add_constant" for a kernel that is not a template).
  const std::string& name_expression() const noexcept { return name_expression_; }
  // "add_constant(T=float32, VEC=4) from template add_constant" for messages.
  std::string describe() const;
  // The same specialization of `tmpl`, a template of the same source (Template::current(): grown by
  // what a compile learned). Itself when `tmpl` is its template already.
  Specialization with_template(std::shared_ptr<const Template> tmpl) const;
  // with_template(tmpl().current()).
  Specialization on_current_template() const { return with_template(template_->current()); }

 private:
  std::shared_ptr<const Template> template_;
  const KernelDecl* kernel_;
  std::vector<std::pair<std::string, TemplateArg>> args_;
  CompileOptions options_;
  std::string name_expression_;
};

}  // namespace kjit
