// Template arguments and macro definitions given as text on the command line ("T=float32"),
// converted by the kind each parameter is declared with in the kernel.
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "kjit/kernel_decl.hpp"
#include "kjit/target.hpp"
#include "kjit/template_arg.hpp"

namespace kjit::cli {

// Splits "NAME=VALUE" at the first '='. Throws ValueError naming `option` when there is no '=' or
// no name.
std::pair<std::string, std::string> split_assignment(const std::string& text, const std::string& option,
                                                     const std::string& example);

// One --param value, parsed by the declared kind of the parameter `name` of `kernel`:
// type -> a dtype name, integer -> a decimal integer, floating -> a number, bool -> true/false/1/0.
// A name the kernel does not declare yields a placeholder: Specialization rejects it, listing the
// kernel's parameters. Throws ValueError saying what is allowed.
TemplateArg parse_param_value(const KernelDecl& kernel, const std::string& name, const std::string& value);

// Every --param NAME=VALUE, in order.
std::vector<std::pair<std::string, TemplateArg>> parse_params(const KernelDecl& kernel,
                                                              const std::vector<std::string>& params);

// Every --define NAME[=VALUE] (a bare NAME defines it as 1, as nvcc does). Throws ValueError for a name
// given twice.
std::map<std::string, std::string> parse_defines(const std::vector<std::string>& defines);

// Every --arch value (already split at commas), parsed and deduplicated in order. Throws ValueError.
std::vector<Target> parse_targets(const std::vector<std::string>& archs);

}  // namespace kjit::cli
