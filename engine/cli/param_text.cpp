#include "param_text.hpp"

#include <algorithm>

#include <cctype>
#include <charconv>
#include <locale>
#include <optional>
#include <sstream>

#include "kjit/compile_options.hpp"
#include "kjit/dtype.hpp"
#include "kjit/error.hpp"

namespace kjit::cli {
namespace {

std::string prefix(const std::string& name, const std::string& value) { return "--param " + name + "=" + value + ": "; }

std::string parameter(const KernelDecl& kernel, const TemplateParam& p) {
  return "template parameter '" + p.name + "' of kernel '" + kernel.name + "'";
}

// A decimal integer of [-2^63, 2^64): unsigned 64-bit parameters take values from 2^63 up.
std::optional<TemplateArg> parse_integer(const std::string& text) {
  const char* end = text.data() + text.size();
  std::int64_t v = 0;
  if (auto [ptr, ec] = std::from_chars(text.data(), end, v); ec == std::errc() && ptr == end && !text.empty())
    return TemplateArg::integer(v);
  std::uint64_t u = 0;
  if (auto [ptr, ec] = std::from_chars(text.data(), end, u); ec == std::errc() && ptr == end && !text.empty())
    return TemplateArg::unsigned_integer(u);
  return std::nullopt;
}

bool parse_number(const std::string& text, double* out) {
  if (text.empty() || std::isspace(static_cast<unsigned char>(text.front()))) return false;
  std::istringstream is(text);
  is.imbue(std::locale::classic());  // '.' is the decimal point whatever the process locale
  is >> *out;
  return !is.fail() && is.peek() == std::char_traits<char>::eof();
}

}  // namespace

std::pair<std::string, std::string> split_assignment(const std::string& text, const std::string& option,
                                                     const std::string& example) {
  const auto eq = text.find('=');
  if (eq == std::string::npos || eq == 0)
    throw ValueError(option + " '" + text + "' is not NAME=VALUE (for example " + option + " " + example + ")");
  return {text.substr(0, eq), text.substr(eq + 1)};
}

TemplateArg parse_param_value(const KernelDecl& kernel, const std::string& name, const std::string& value) {
  const TemplateParam* p = kernel.find_param(name);
  if (!p) return TemplateArg::integer(0);  // placeholder: Specialization names the unknown parameter
  switch (p->kind) {
    case TemplateParam::Kind::Type:
      if (auto t = dtype_from_name(value)) return TemplateArg::type(*t);
      throw ValueError(prefix(name, value) + parameter(kernel, *p) + " is a type and '" + value +
                       "' is not a dtype; allowed: " + dtype_names());
    case TemplateParam::Kind::Integral: {
      if (auto v = parse_integer(value)) return *v;
      if (value.find_first_not_of("0123456789", value[0] == '-' ? 1 : 0) == std::string::npos && value.size() > 1)
        throw ValueError(prefix(name, value) + parameter(kernel, *p) + " is an integer (" + p->cpp_type + ") and " +
                         value + " is out of every integer parameter's range [-2^63, 2^64)");
      throw ValueError(prefix(name, value) + parameter(kernel, *p) + " is an integer (" + p->cpp_type + ") and '" +
                       value + "' is not a decimal integer");
    }
    case TemplateParam::Kind::Floating: {
      double v = 0;
      if (parse_number(value, &v)) return TemplateArg::floating(v);
      throw ValueError(prefix(name, value) + parameter(kernel, *p) + " is a floating constant (" + p->cpp_type +
                       ") and '" + value + "' is not a number");
    }
    case TemplateParam::Kind::Bool:
      if (value == "true" || value == "1") return TemplateArg::boolean(true);
      if (value == "false" || value == "0") return TemplateArg::boolean(false);
      throw ValueError(prefix(name, value) + parameter(kernel, *p) + " is a bool and '" + value +
                       "' is not one of true, false, 1, 0");
    case TemplateParam::Kind::Unsupported: break;
  }
  throw ValueError(prefix(name, value) + parameter(kernel, *p) + " has a kind kjit cannot specialize ('" + p->cpp_type +
                   "'); its parameters are " + kernel.describe_params());
}

std::vector<std::pair<std::string, TemplateArg>> parse_params(const KernelDecl& kernel,
                                                              const std::vector<std::string>& params) {
  std::vector<std::pair<std::string, TemplateArg>> out;
  for (const auto& text : params) {
    auto [name, value] = split_assignment(text, "--param", "T=float32");
    out.emplace_back(name, parse_param_value(kernel, name, value));
  }
  return out;
}

std::map<std::string, std::string> parse_defines(const std::vector<std::string>& defines) {
  std::map<std::string, std::string> out;
  for (const auto& text : defines) {
    auto [name, value] = parse_define(text);
    if (!out.emplace(name, value).second) throw ValueError("--define " + name + " is given twice");
  }
  return out;  // CompileOptions::validate checks the names
}

std::vector<Target> parse_targets(const std::vector<std::string>& archs) {
  std::vector<Target> out;
  for (const auto& a : archs) {
    Target t = Target::parse(a);
    if (std::find(out.begin(), out.end(), t) == out.end()) out.push_back(t);
  }
  return out;
}

}  // namespace kjit::cli
