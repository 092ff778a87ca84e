#include "option_keywords.hpp"

#include <pybind11/stl.h>

#include <utility>
#include <vector>

#include "kjit/compile_option_fields.hpp"
#include "kjit/error.hpp"

namespace kjit::python {
namespace {

using Kind = CompileOptionField::Kind;

// Whether the keyword takes None (and shows it as its default).
bool takes_none(const CompileOptionField& f) {
  return f.python_default_none || f.kind == Kind::Int || f.kind == Kind::Defines;
}

// The keyword's type as pybind11 writes the C++ type it converts to: bool, std::optional<int>, std::string
// (std::optional<std::string> where None is the default), and any object for defines (read_defines).
std::string python_type(const CompileOptionField& f) {
  switch (f.kind) {
    case Kind::Bool: return "bool";
    case Kind::Int: return "typing.SupportsInt | typing.SupportsIndex | None";
    case Kind::Enum:
    case Kind::String: return f.python_default_none ? "str | None" : "str";
    case Kind::Defines: return "object";
  }
  return "object";
}

std::map<std::string, std::string> read_defines(const py::handle& defines) {
  std::map<std::string, std::string> out;
  if (defines.is_none()) return out;
  auto value_text = [](py::handle v) -> std::string {
    if (v.is_none()) return "1";  // defined, no value given: as a bare 'NAME' (nvcc's -DNAME)
    if (PyBool_Check(v.ptr())) return v.ptr() == Py_True ? "1" : "0";
    if (PyUnicode_Check(v.ptr()) || PyLong_Check(v.ptr()) || PyFloat_Check(v.ptr())) return py::str(v);
    throw TypeError("a define's value must be a str, int, float, bool or None, got " + describe_value(v.ptr()));
  };
  if (PyDict_Check(defines.ptr())) {
    for (auto [k, v] : py::reinterpret_borrow<py::dict>(defines)) {
      if (!PyUnicode_Check(k.ptr())) throw TypeError("define names must be str, got " + describe_value(k.ptr()));
      out[py::str(k)] = value_text(v);
    }
    return out;
  }
  if (PyUnicode_Check(defines.ptr()))
    throw TypeError("defines must be a dict {name: value} or a list of 'NAME' / 'NAME=VALUE' strings, got a str");
  for (py::handle item : defines) {
    if (!PyUnicode_Check(item.ptr()))
      throw TypeError("defines must be a dict {name: value} or a list of 'NAME' / 'NAME=VALUE' strings, got an item " +
                      describe_value(item.ptr()));
    auto [name, value] = parse_define(py::str(item));
    out[name] = value;
  }
  return out;
}

// `v` converted as pybind11 converts an argument of type T (the second, converting pass of its dispatch),
// or nullopt.
template <typename T>
std::optional<T> converted(py::handle v) {
  py::detail::make_caster<T> caster;
  if (!caster.load(v, true)) return std::nullopt;
  return py::detail::cast_op<T>(std::move(caster));
}

// The value of keyword `f` as the row's kind holds it; nullopt when `v` is not of the keyword's type.
// A Defines value is read later (read_defines), and None for a python_default_none row means the default.
std::optional<OptionValue> keyword_value(const CompileOptionField& f, py::handle v) {
  switch (f.kind) {
    case Kind::Bool:
      if (auto b = converted<bool>(v)) return OptionValue(*b);
      return std::nullopt;
    case Kind::Int:
      if (auto i = converted<std::optional<int>>(v)) return OptionValue(*i);
      return std::nullopt;
    case Kind::Enum:
    case Kind::String:
      if (f.python_default_none && v.is_none()) return f.default_value;
      if (auto s = converted<std::string>(v)) return OptionValue(std::move(*s));
      return std::nullopt;
    case Kind::Defines: return f.default_value;
  }
  return std::nullopt;
}

}  // namespace

py::object to_python(const OptionValue& v) {
  struct Py {
    py::object operator()(bool b) const { return py::bool_(b); }
    py::object operator()(const std::optional<int>& i) const {
      return i ? py::object(py::int_(*i)) : py::object(py::none());
    }
    py::object operator()(const std::string& s) const { return py::str(s); }
    py::object operator()(const std::map<std::string, std::string>& m) const { return py::cast(m); }
  };
  return std::visit(Py{}, v);
}

std::string option_keywords_signature() {
  std::string out;
  for (const CompileOptionField& f : compile_option_fields()) {
    const std::string def = takes_none(f) ? "None" : py::repr(to_python(f.default_value)).cast<std::string>();
    out += (out.empty() ? "" : ", ") + f.name + ": " + python_type(f) + " = " + def;
  }
  return out;
}

std::string option_keywords_doc() {
  std::string out;
  for (const CompileOptionField& f : compile_option_fields()) {
    std::string line = f.name + ": " + f.help;
    if (f.kind == Kind::Defines) line += "; a dict {name: value} or a list of 'NAME' / 'NAME=VALUE' strings";
    if (f.python_default_none) line += "; None: " + describe(f.default_value);
    out += (out.empty() ? "" : "\n") + line;
  }
  return out;
}

std::optional<CompileOptions> read_option_keywords(const py::dict& kwargs, const char* skip) {
  CompileOptions o;
  std::vector<std::pair<const CompileOptionField*, py::handle>> defines;
  for (auto [key, value] : kwargs) {
    const std::string name = py::str(key);
    if (name == skip) continue;
    const CompileOptionField* f = find_compile_option_field(name);
    if (!f) return std::nullopt;
    if (f->kind == Kind::Defines) {
      defines.emplace_back(f, value);
      continue;
    }
    std::optional<OptionValue> v = keyword_value(*f, value);
    if (!v) return std::nullopt;
    f->set(o, std::move(*v));
  }
  for (const auto& [f, value] : defines) f->set(o, OptionValue(read_defines(value)));
  return o;
}

void incompatible_call(const char* name, const std::string& signature, py::handle self, const py::args& args,
                       const py::dict& kwargs) {
  auto repr = [](py::handle v) -> std::string {
    try {
      return py::repr(v);
    } catch (const py::error_already_set&) {
      return "<repr raised Error>";
    }
  };
  std::string msg = std::string(name) +
                    "(): incompatible function arguments. The following argument types are supported:\n    1. " +
                    signature + "\n\nInvoked with: " + repr(self);
  for (py::handle a : args) msg += ", " + repr(a);
  bool first = true;
  for (auto [key, value] : kwargs) {
    msg += (first ? "; kwargs: " : ", ") + std::string(py::str(key)) + "=" + repr(value);
    first = false;
  }
  throw py::type_error(msg);
}

}  // namespace kjit::python
