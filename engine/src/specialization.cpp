#include "kjit/specialization.hpp"

#include <map>
#include <set>

#include "kjit/error.hpp"

namespace kjit {

Specialization::Specialization(std::shared_ptr<const Template> tmpl, const std::string& kernel,
                               const std::vector<std::pair<std::string, TemplateArg>>& args, CompileOptions options)
    : template_(std::move(tmpl)), kernel_(&template_->kernel(kernel)), options_(std::move(options)) {
  options_.validate();
  const KernelDecl& k = *kernel_;
  // A Default argument stands for a parameter left out (front ends keep arrays in parameter order).
  auto is_given = [](const TemplateArg& v) { return v.kind() != TemplateArg::Kind::Default; };
  std::set<std::string> given;
  std::set<std::string> named;
  for (const auto& [name, value] : args) {
    if (!k.find_param(name))
      throw ValueError("kernel '" + k.name + "' has no template parameter '" + name + "'; its parameters are " +
                       k.describe_params());
    if (!named.insert(name).second)
      throw ValueError("template parameter '" + name + "' of kernel '" + k.name + "' is given twice");
    if (is_given(value)) given.insert(name);
  }
  std::vector<std::string> missing;
  for (const auto& p : k.template_params)
    if (!given.count(p.name) && !p.default_value) missing.push_back(p.name);
  if (!missing.empty()) {
    std::string m;
    for (const auto& n : missing) m += (m.empty() ? "" : ", ") + n;
    throw ValueError("kernel '" + k.name + "' needs template parameter" + (missing.size() > 1 ? "s " : " ") + m +
                     "; its parameters are " + k.describe_params());
  }
  // Render in declaration order. A defaulted parameter left out is omitted when nothing after it is
  // given, else it is its default's text as written, with the earlier parameters it names replaced by
  // their values (`int M = N * 2` is `(4) * 2` for N=4): what the compiler would take, and one rule for
  // every front end, so that the same specialization has the same name expression and key everywhere.
  std::vector<std::string> rendered;
  std::map<std::string, std::string> earlier;  // parameter name -> its text in a later default
  std::size_t last_given = 0;
  for (std::size_t i = 0; i < k.template_params.size(); ++i)
    if (given.count(k.template_params[i].name)) last_given = i + 1;
  for (std::size_t i = 0; i < last_given; ++i) {
    const TemplateParam& p = k.template_params[i];
    const TemplateArg* value = nullptr;
    for (const auto& a : args)
      if (a.first == p.name && is_given(a.second)) value = &a.second;
    if (value) {
      rendered.push_back(value->render(p, k.name));
      args_.emplace_back(p.name, *value);
    } else {
      rendered.push_back(substitute_names(*p.default_value, earlier));
    }
    const bool value_kind = p.kind != TemplateParam::Kind::Type && p.kind != TemplateParam::Kind::Unsupported;
    if (!p.name.empty()) earlier[p.name] = value_kind ? "(" + rendered.back() + ")" : rendered.back();
  }
  name_expression_ = k.qualified_name();
  if (k.is_template) {
    name_expression_ += "<";
    for (std::size_t i = 0; i < rendered.size(); ++i) name_expression_ += (i ? ", " : "") + rendered[i];
    name_expression_ += ">";
  }
}

std::string Specialization::describe() const {
  std::string out = kernel_->name + "(";
  for (std::size_t i = 0; i < args_.size(); ++i)
    out += (i ? ", " : "") + args_[i].first + "=" + args_[i].second.describe();
  return out + ") from template " + template_->name();
}

Specialization Specialization::with_template(std::shared_ptr<const Template> tmpl) const {
  Specialization s = *this;
  if (tmpl == template_) return s;
  if (tmpl->source() != template_->source())
    throw Error("internal: a specialization of template '" + template_->name() +
                "' moved to a template of another source");
  s.kernel_ = &tmpl->kernel(kernel_->qualified_name());
  s.template_ = std::move(tmpl);
  return s;
}

}  // namespace kjit
