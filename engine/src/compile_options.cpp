#include "kjit/compile_options.hpp"

#include <algorithm>
#include <cctype>

#include "kjit/compile_option_fields.hpp"
#include "kjit/error.hpp"
#include "kjit/settings.hpp"

namespace kjit {

CompileOptions CompileOptions::library() {
  CompileOptions o;
  o.minimal = true;
  o.fast_compile = settings().library_fast_compile;
  return o;
}

const std::vector<std::string>& CompileOptions::fast_compile_levels() {
  return find_compile_option_field("fast_compile")->choices;
}

bool CompileOptions::is_fast_compile_level(const std::string& level) {
  const auto& levels = fast_compile_levels();
  return std::find(levels.begin(), levels.end(), level) != levels.end();
}

namespace {

std::string joined(const std::vector<std::string>& items) {
  std::string out;
  for (const auto& i : items) out += (out.empty() ? "" : ", ") + i;
  return out;
}

void validate_defines(const std::map<std::string, std::string>& defines) {
  for (const auto& [name, value] : defines) {
    bool ok = !name.empty() && (std::isalpha(static_cast<unsigned char>(name[0])) || name[0] == '_');
    for (char c : name) ok = ok && (std::isalnum(static_cast<unsigned char>(c)) || c == '_');
    if (!ok) throw ValueError("macro name '" + name + "' is not a C identifier; defines take NAME -> VALUE");
    if (value.find('\n') != std::string::npos)
      throw ValueError("the value of macro '" + name + "' contains a newline; it must be one line");
  }
}

}  // namespace

void CompileOptions::validate() const {
  for (const CompileOptionField& f : compile_option_fields()) {
    const OptionValue v = f.get(*this);
    switch (f.kind) {
      case CompileOptionField::Kind::Bool: break;
      case CompileOptionField::Kind::Int:
        if (const auto& i = std::get<std::optional<int>>(v); i && (*i < f.min || *i > f.max))
          throw ValueError("compile option " + f.name + "=" + std::to_string(*i) + " is not valid: allowed " +
                           std::to_string(f.min) + ".." + std::to_string(f.max) + ", or unset");
        break;
      case CompileOptionField::Kind::Enum: {
        const auto& s = std::get<std::string>(v);
        if (std::find(f.choices.begin(), f.choices.end(), s) == f.choices.end())
          throw ValueError("compile option " + f.name + "='" + s + "' is not valid: allowed " + joined(f.choices));
        break;
      }
      case CompileOptionField::Kind::String:
        if (std::get<std::string>(v).find('\n') != std::string::npos)
          throw ValueError("compile option " + f.name + " contains a newline; it must be one line");
        break;
      case CompileOptionField::Kind::Defines: validate_defines(std::get<std::map<std::string, std::string>>(v)); break;
    }
  }
}

std::vector<std::string> CompileOptions::canonical() const {
  std::vector<std::string> out;
  for (const CompileOptionField& f : compile_option_fields()) {
    const OptionValue v = f.get(*this);
    if (!f.flag_at_default && v == f.default_value) continue;
    switch (f.kind) {
      case CompileOptionField::Kind::Bool:
        if (std::get<bool>(v)) out.push_back(f.flag);
        break;
      case CompileOptionField::Kind::Int:
        if (const auto& i = std::get<std::optional<int>>(v)) out.push_back(f.flag + std::to_string(*i));
        break;
      case CompileOptionField::Kind::Enum:
      case CompileOptionField::Kind::String: out.push_back(f.flag + std::get<std::string>(v)); break;
      case CompileOptionField::Kind::Defines:
        for (const auto& [name, value] : std::get<std::map<std::string, std::string>>(v))
          out.push_back(f.flag + name + "=" + value);
        break;
    }
  }
  return out;
}

std::vector<std::string> CompileOptions::nvrtc_flags(const Target& target) const {
  std::vector<std::string> out = canonical();
  out.push_back(target.nvrtc_flag());
  return out;
}

std::pair<std::string, std::string> parse_define(const std::string& text) {
  const auto eq = text.find('=');
  if (eq == 0 || text.empty())
    throw ValueError("define '" + text + "' has no name: write NAME or NAME=VALUE (for example BLOCK=256)");
  if (eq == std::string::npos) return {text, "1"};
  return {text.substr(0, eq), text.substr(eq + 1)};
}

bool CompileOptions::operator==(const CompileOptions& o) const {
  for (const CompileOptionField& f : compile_option_fields())
    if (f.get(*this) != f.get(o)) return false;
  return true;
}

}  // namespace kjit
