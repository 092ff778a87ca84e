// KernelDecl: what a template declares for one __global__ function: its template parameters
// (so that arguments are addressed by name) and its function parameters (so that launch arguments
// are converted to the declared types). Found by a small C++ tokenizer, not by string matching.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

namespace kjit {

struct TemplateParam {
  enum class Kind { Type, Integral, Floating, Bool, Unsupported };
  std::string name;
  Kind kind = Kind::Type;
  std::string cpp_type;                      // declared type for non-type parameters ("int", "unsigned")
  std::optional<std::string> default_value;  // the default's source text
};

struct FunctionParam {
  std::string name;
  std::string type;  // as written, template parameters not substituted ("const T* __restrict__")
  bool is_pointer = false;
};

struct KernelDecl {
  std::string name;   // as declared ("k")
  std::string scope;  // enclosing named namespaces ("mylib::detail"), empty at global scope
  std::vector<TemplateParam> template_params;
  std::vector<FunctionParam> params;
  bool is_template = false;
  bool extern_c = false;
  int line = 0;  // 1-based line of `__global__`

  const TemplateParam* find_param(const std::string& name) const;
  // "mylib::k": what name expressions use.
  std::string qualified_name() const;
  // "T (type), VEC (int), N (long long) = 4" for error messages.
  std::string describe_params() const;
};

const char* to_string(TemplateParam::Kind kind) noexcept;

// Every __global__ function declared or defined in `source`, in order. Function templates declared
// more than once (declaration + definition) appear once.
std::vector<KernelDecl> parse_kernel_decls(const std::string& source);

// `text` (C++ tokens, such as a template parameter's default) with every identifier that is a key of
// `values` replaced by its value, except where it names a member (after `::`, `.` or `->`).
std::string substitute_names(const std::string& text, const std::map<std::string, std::string>& values);

}  // namespace kjit
