#include "kjit/compile_options.hpp"

#include <algorithm>
#include <cctype>

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
  static const std::vector<std::string> levels{"off", "min", "mid", "max"};
  return levels;
}

bool CompileOptions::is_fast_compile_level(const std::string& level) {
  const auto& levels = fast_compile_levels();
  return std::find(levels.begin(), levels.end(), level) != levels.end();
}

void CompileOptions::validate() const {
  if (std != "c++17" && std != "c++20")
    throw ValueError("compile option std='" + std + "' is not valid: allowed c++17, c++20");
  if (!is_fast_compile_level(fast_compile)) {
    std::string allowed;
    for (const auto& l : fast_compile_levels()) allowed += (allowed.empty() ? "" : ", ") + l;
    throw ValueError("compile option fast_compile='" + fast_compile + "' is not valid: allowed " + allowed);
  }
  if (max_registers && (*max_registers < 16 || *max_registers > 255))
    throw ValueError("compile option max_registers=" + std::to_string(*max_registers) +
                     " is not valid: allowed 16..255, or unset");
  for (const auto& [name, value] : defines) {
    bool ok = !name.empty() && (std::isalpha(static_cast<unsigned char>(name[0])) || name[0] == '_');
    for (char c : name) ok = ok && (std::isalnum(static_cast<unsigned char>(c)) || c == '_');
    if (!ok)
      throw ValueError("macro name '" + name + "' is not a C identifier; defines take NAME -> VALUE");
    if (value.find('\n') != std::string::npos)
      throw ValueError("the value of macro '" + name + "' contains a newline; it must be one line");
  }
}

std::vector<std::string> CompileOptions::canonical() const {
  std::vector<std::string> out;
  out.push_back("--std=" + std);
  if (fast_math) out.push_back("--use_fast_math");
  if (line_info) out.push_back("--generate-line-info");
  if (device_debug) out.push_back("--device-debug");
  if (minimal) out.push_back("--minimal");
  if (default_device) out.push_back("-default-device");
  if (fast_compile != "off") out.push_back("--Ofast-compile=" + fast_compile);
  if (max_registers) out.push_back("--maxrregcount=" + std::to_string(*max_registers));
  for (const auto& [name, value] : defines) out.push_back("-D" + name + "=" + value);
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
  return std == o.std && fast_math == o.fast_math && line_info == o.line_info &&
         device_debug == o.device_debug && minimal == o.minimal && default_device == o.default_device &&
         fast_compile == o.fast_compile && max_registers == o.max_registers && defines == o.defines;
}

}  // namespace kjit
