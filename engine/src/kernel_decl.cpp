#include "kjit/kernel_decl.hpp"

#include <cctype>
#include <set>

namespace kjit {
namespace {

struct Token {
  std::string text;
  int line;
  bool ident;
};

// Translation phase 2: every backslash-newline (also backslash-CR-LF) is removed, so that a parameter
// list or a comment continued with `\` reads as one line (CuPy's test kernels write them so).
// `splices` receives where each removed newline was, as offsets into the result, for line numbers.
std::string splice_lines(const std::string& s, std::vector<std::size_t>& splices) {
  std::string out;
  out.reserve(s.size());
  for (std::size_t i = 0, n = s.size(); i < n; ++i) {
    if (s[i] == '\\') {
      std::size_t j = i + 1;
      if (j < n && s[j] == '\r') ++j;
      if (j < n && s[j] == '\n') {
        splices.push_back(out.size());
        i = j;
        continue;
      }
    }
    out += s[i];
  }
  return out;
}

// C++ tokens outside comments, preprocessor lines and literals (string literals become one token "\"").
// Lines are those of `source` (before splicing).
std::vector<Token> tokenize(const std::string& source) {
  std::vector<std::size_t> splices;
  const std::string s = splice_lines(source, splices);
  std::vector<Token> out;
  int line = 1;
  std::size_t spliced_before = 0;  // splices before the current token (tokens come in order)
  auto push = [&](std::string text, std::size_t at, bool ident) {
    while (spliced_before < splices.size() && splices[spliced_before] <= at) ++spliced_before;
    out.push_back({std::move(text), line + static_cast<int>(spliced_before), ident});
  };
  bool line_start = true;
  std::size_t i = 0, n = s.size();
  // From the "/*" at i to just past its "*/", counting the lines inside.
  auto skip_block_comment = [&] {
    i += 2;
    while (i + 1 < n && !(s[i] == '*' && s[i + 1] == '/')) {
      if (s[i] == '\n') ++line;
      ++i;
    }
    i += 2;
  };
  while (i < n) {
    char c = s[i];
    if (c == '\n') {
      ++line;
      line_start = true;
      ++i;
      continue;
    }
    if (std::isspace(static_cast<unsigned char>(c))) {
      ++i;
      continue;
    }
    if (c == '#' && line_start) {  // preprocessor directive (continuations are spliced already)
      while (i < n && s[i] != '\n') {
        if (s[i] == '/' && i + 1 < n && s[i + 1] == '*') {  // a comment inside the directive: skip it
          skip_block_comment();
          continue;
        }
        ++i;
      }
      continue;
    }
    line_start = false;
    if (c == '/' && i + 1 < n && s[i + 1] == '/') {
      while (i < n && s[i] != '\n') ++i;
      continue;
    }
    if (c == '/' && i + 1 < n && s[i + 1] == '*') {
      skip_block_comment();
      continue;
    }
    if (c == '"' || c == '\'') {
      char q = c;
      ++i;
      while (i < n && s[i] != q) {
        if (s[i] == '\\')
          ++i;
        else if (s[i] == '\n')
          ++line;
        ++i;
      }
      push(std::string(1, q), i, false);
      ++i;
      continue;
    }
    if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      std::size_t j = i;
      while (j < n && (std::isalnum(static_cast<unsigned char>(s[j])) || s[j] == '_')) ++j;
      push(s.substr(i, j - i), i, true);
      i = j;
      continue;
    }
    if (std::isdigit(static_cast<unsigned char>(c))) {
      std::size_t j = i;
      while (j < n && (std::isalnum(static_cast<unsigned char>(s[j])) || s[j] == '.' || s[j] == '\'' ||
                       ((s[j] == '+' || s[j] == '-') &&
                        (s[j - 1] == 'e' || s[j - 1] == 'E' || s[j - 1] == 'p' || s[j - 1] == 'P'))))
        ++j;
      push(s.substr(i, j - i), i, false);
      i = j;
      continue;
    }
    if (c == ':' && i + 1 < n && s[i + 1] == ':') {
      push("::", i, false);
      i += 2;
      continue;
    }
    push(std::string(1, c), i, false);
    ++i;
  }
  return out;
}

// Index of the token closing the bracket opened at `open` (tokens[open] is '(' '<' '[' or '{').
std::size_t match_close(const std::vector<Token>& t, std::size_t open) {
  int paren = 0, angle = 0, square = 0, brace = 0;
  for (std::size_t i = open; i < t.size(); ++i) {
    const std::string& x = t[i].text;
    if (x == "(")
      ++paren;
    else if (x == ")")
      --paren;
    else if (x == "[")
      ++square;
    else if (x == "]")
      --square;
    else if (x == "{")
      ++brace;
    else if (x == "}")
      --brace;
    else if (x == "<" && paren == 0)
      ++angle;
    else if (x == ">" && paren == 0)
      --angle;
    bool closed = false;
    const std::string& o = t[open].text;
    if (o == "(")
      closed = paren == 0;
    else if (o == "<")
      closed = angle == 0;
    else if (o == "[")
      closed = square == 0;
    else if (o == "{")
      closed = brace == 0;
    if (closed && i > open) return i;
  }
  return t.size();
}

// Splits tokens [b, e) at top-level commas.
std::vector<std::vector<Token>> split_commas(const std::vector<Token>& t, std::size_t b, std::size_t e) {
  std::vector<std::vector<Token>> out;
  std::vector<Token> cur;
  // Angle brackets count only outside parentheses and brackets: `int N = (sizeof(T) > 2 ? 4 : 8)`.
  int paren = 0, angle = 0;
  for (std::size_t i = b; i < e; ++i) {
    const std::string& x = t[i].text;
    if (x == "(" || x == "[" || x == "{")
      ++paren;
    else if (x == ")" || x == "]" || x == "}")
      --paren;
    else if (x == "<" && paren == 0)
      ++angle;
    else if (x == ">" && paren == 0)
      --angle;
    if (x == "," && paren == 0 && angle == 0) {
      out.push_back(std::move(cur));
      cur.clear();
      continue;
    }
    cur.push_back(t[i]);
  }
  if (!cur.empty()) out.push_back(std::move(cur));
  return out;
}

std::string join(const std::vector<Token>& t, std::size_t b, std::size_t e) {
  std::string out;
  for (std::size_t i = b; i < e && i < t.size(); ++i) {
    bool glue = !out.empty() && (t[i].text == "*" || t[i].text == "&" || t[i].text == "::" || t[i].text == "," ||
                                 t[i].text == ">" || out.back() == ':' || out.back() == '<' || t[i].text == "<");
    if (!out.empty() && !glue) out += ' ';
    out += t[i].text;
  }
  return out;
}

TemplateParam parse_template_param(const std::vector<Token>& p) {
  TemplateParam tp;
  std::size_t eq = p.size();
  for (std::size_t i = 0; i < p.size(); ++i)
    if (p[i].text == "=") {
      eq = i;
      break;
    }
  if (eq < p.size()) tp.default_value = join(p, eq + 1, p.size());
  if (eq == 0) {
    tp.kind = TemplateParam::Kind::Unsupported;
    return tp;
  }
  const Token& last = p[eq - 1];
  if (last.ident) tp.name = last.text;
  std::string first = p[0].text;
  bool variadic = false;
  for (std::size_t i = 0; i < eq; ++i)
    if (p[i].text == ".") variadic = true;
  if (variadic || first == "template") {
    tp.kind = TemplateParam::Kind::Unsupported;
    return tp;
  }
  if (first == "typename" || first == "class") {
    tp.kind = TemplateParam::Kind::Type;
    return tp;
  }
  tp.cpp_type = join(p, 0, eq - 1);
  static const std::set<std::string> floating = {"float", "double"};
  static const std::set<std::string> integral = {
      "int",          "unsigned",      "signed",        "long",      "short",       "char",
      "size_t",       "int8_t",        "int16_t",       "int32_t",   "int64_t",     "uint8_t",
      "uint16_t",     "uint32_t",      "uint64_t",      "ptrdiff_t", "std::size_t", "std::int64_t",
      "std::int32_t", "std::uint32_t", "std::uint64_t", "const"};
  if (tp.cpp_type == "bool" || tp.cpp_type == "const bool")
    tp.kind = TemplateParam::Kind::Bool;
  else if (floating.count(tp.cpp_type) || tp.cpp_type == "const float" || tp.cpp_type == "const double")
    tp.kind = TemplateParam::Kind::Floating;
  else {
    bool all_integral = eq > 1;
    for (std::size_t i = 0; i + 1 < eq; ++i) {
      const std::string& w = p[i].text;
      if (w == "std" || w == "::") continue;
      if (!integral.count(w)) all_integral = false;
    }
    tp.kind = all_integral ? TemplateParam::Kind::Integral : TemplateParam::Kind::Unsupported;
  }
  return tp;
}

bool is_qualifier(const std::string& x) {
  static const std::set<std::string> q = {"static", "inline",   "__forceinline__", "__noinline__", "extern",
                                          "\"",     "__host__", "__device__",      "void"};
  return q.count(x) > 0;
}

bool is_attribute_call(const std::string& x) {
  return x == "__launch_bounds__" || x == "__cluster_dims__" || x == "__maxnreg__" || x == "__attribute__" ||
         x == "__declspec";
}

}  // namespace

const char* to_string(TemplateParam::Kind kind) noexcept {
  switch (kind) {
    case TemplateParam::Kind::Type: return "type";
    case TemplateParam::Kind::Integral: return "integer";
    case TemplateParam::Kind::Floating: return "floating";
    case TemplateParam::Kind::Bool: return "bool";
    case TemplateParam::Kind::Unsupported: return "unsupported";
  }
  return "?";
}

std::string KernelDecl::qualified_name() const { return scope.empty() ? name : scope + "::" + name; }

const TemplateParam* KernelDecl::find_param(const std::string& n) const {
  for (const auto& p : template_params)
    if (p.name == n) return &p;
  return nullptr;
}

std::string KernelDecl::describe_params() const {
  if (template_params.empty()) return "(none: " + name + " is not a template)";
  std::string out;
  for (const auto& p : template_params) {
    if (!out.empty()) out += ", ";
    out += p.name + " (" + (p.kind == TemplateParam::Kind::Type ? std::string("type") : p.cpp_type) + ")";
    if (p.default_value) out += " = " + *p.default_value;
  }
  return out;
}

std::vector<KernelDecl> parse_kernel_decls(const std::string& source) {
  std::vector<Token> t = tokenize(source);
  std::vector<KernelDecl> out;
  std::set<std::string> seen;
  // Where the most recent template head ended, and its parameters.
  std::size_t head_end = std::string::npos;
  std::vector<TemplateParam> head;
  // Enclosing namespaces: (name, brace depth inside it); anonymous ones have an empty name.
  std::vector<std::pair<std::string, int>> scopes;
  int braces = 0;
  for (std::size_t i = 0; i < t.size(); ++i) {
    if (t[i].text == "namespace") {
      std::string name;
      std::size_t j = i + 1;
      while (j < t.size() && (t[j].ident || t[j].text == "::") && t[j].text != "__global__" &&
             t[j].text != "template" && t[j].text != "namespace")
        name += t[j++].text;
      if (j < t.size() && t[j].text == "{") scopes.emplace_back(name, ++braces);
      i = j < t.size() && t[j].text == "{" ? j : j - 1;  // not a namespace body: resume where the name ended
      continue;
    }
    if (t[i].text == "{") {
      ++braces;
      continue;
    }
    if (t[i].text == "}") {
      if (!scopes.empty() && scopes.back().second == braces) scopes.pop_back();
      --braces;
      continue;
    }
    if (t[i].text == "template" && i + 1 < t.size() && t[i + 1].text == "<") {
      std::size_t close = match_close(t, i + 1);
      head.clear();
      for (auto& p : split_commas(t, i + 2, close)) head.push_back(parse_template_param(p));
      head_end = close + 1;
      i = close;
      continue;
    }
    if (t[i].text != "__global__") continue;

    KernelDecl k;
    k.line = t[i].line;
    // Does the template head belong to this declaration? Only qualifiers may stand between them.
    bool templated = false;
    if (head_end != std::string::npos && head_end <= i) {
      templated = true;
      for (std::size_t j = head_end; j < i && templated; ++j)
        if (!is_qualifier(t[j].text) && t[j].text != "C") templated = false;
    }
    for (std::size_t j = (head_end != std::string::npos && head_end <= i ? head_end : i); j < i; ++j)
      if (t[j].text == "extern") k.extern_c = true;
    if (i >= 2 && t[i - 2].text == "extern" && t[i - 1].text == "\"") k.extern_c = true;
    // Name: the identifier before the first '(' that is not an attribute's. The search stops at a token
    // that starts something else, and a failed search resumes the scan where it stopped (not at the
    // next token): each token is looked at a bounded number of times, so that a hostile source of
    // 60000 `__global__` tokens (660 KB) parses in linear time, not in quadratic time (33 s).
    std::size_t j = i + 1;
    std::size_t open = t.size();
    while (j < t.size()) {
      const std::string& x = t[j].text;
      if (x == ";" || x == "{" || x == "}" || x == "__global__" || x == "template" || x == "namespace") break;
      if (x == "(") {
        if (j > 0 && is_attribute_call(t[j - 1].text)) {
          j = match_close(t, j) + 1;
          continue;
        }
        open = j;
        break;
      }
      ++j;
    }
    if (open >= t.size() || open == 0 || !t[open - 1].ident) {
      head_end = std::string::npos;  // the head belonged to this failed declaration, not to a later one
      i = j - 1;                     // the loop's ++i resumes at the token that stopped the search
      continue;
    }
    k.name = t[open - 1].text;
    for (const auto& [ns, depth] : scopes)
      if (!ns.empty()) k.scope += (k.scope.empty() ? "" : "::") + ns;
    std::size_t close = match_close(t, open);
    for (auto& p : split_commas(t, open + 1, close)) {
      if (p.empty() || (p.size() == 1 && p[0].text == "void")) continue;
      FunctionParam fp;
      std::size_t eq = p.size();
      for (std::size_t q = 0; q < p.size(); ++q)
        if (p[q].text == "=") eq = q;
      std::size_t name_at = eq;
      bool array = false;
      if (eq >= 3 && p[eq - 1].text == "]") {  // T x[] or T x[4]
        array = true;
        std::size_t q = eq - 1;
        while (q > 0 && p[q].text != "[") --q;
        name_at = q;
      }
      if (name_at >= 2 && p[name_at - 1].ident) {
        fp.name = p[name_at - 1].text;
        fp.type = join(p, 0, name_at - 1);
      } else {
        fp.type = join(p, 0, name_at);
      }
      for (std::size_t q = 0; q < name_at; ++q)
        if (p[q].text == "*") fp.is_pointer = true;
      fp.is_pointer = fp.is_pointer || array;
      k.params.push_back(std::move(fp));
    }
    if (templated) {
      k.is_template = true;
      k.template_params = head;
    }
    head_end = std::string::npos;
    if (seen.insert(k.qualified_name()).second) out.push_back(std::move(k));
    i = close;
  }
  return out;
}

std::string substitute_names(const std::string& text, const std::map<std::string, std::string>& values) {
  std::vector<Token> t = tokenize(text);
  bool changed = false;
  for (std::size_t i = 0; i < t.size(); ++i) {
    if (!t[i].ident) continue;
    const bool member = i > 0 && (t[i - 1].text == "::" || t[i - 1].text == "." ||
                                  (t[i - 1].text == ">" && i > 1 && t[i - 2].text == "-"));
    auto it = values.find(t[i].text);
    if (it != values.end() && !member) {
      t[i].text = it->second;
      changed = true;
    }
  }
  return changed ? join(t, 0, t.size()) : text;  // unchanged: exactly as written
}

}  // namespace kjit
