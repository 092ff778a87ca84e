#include "kjit/compile_option_fields.hpp"

#include <algorithm>
#include <cstdint>

#include <nlohmann/json.hpp>

#include "kjit/error.hpp"

namespace kjit {
namespace {

using Field = CompileOptionField;
using Kind = CompileOptionField::Kind;
using Json = nlohmann::json;  // std::map objects: keys sorted, so dump() is canonical

// A row whose value is the member `m` of CompileOptions; its default is what CompileOptions{} holds.
template <typename T>
Field member(T CompileOptions::* m, Field f) {
  f.get = [m](const CompileOptions& o) { return OptionValue(o.*m); };
  f.set = [m](CompileOptions& o, const OptionValue& v) { o.*m = std::get<T>(v); };
  f.default_value = f.get(CompileOptions{});
  return f;
}

Field row(std::string name, Kind kind, std::string flag, std::string cli, std::string cli_value, std::string help) {
  Field f;
  f.name = std::move(name);
  f.kind = kind;
  f.flag = std::move(flag);
  f.cli = std::move(cli);
  f.cli_value = std::move(cli_value);
  f.help = std::move(help);
  return f;
}

// A row written in every manifest record, at its default too (json_at_default).
Field in_every_record(Field f) {
  f.json_at_default = true;
  return f;
}

// The options, in the order of the canonical list: the key of every specialization compiled so far
// depends on this order and on each flag's spelling. The first four and max_registers and defines are
// written in every manifest record (json_at_default); a field added later must not be.
std::vector<Field> builtin_fields() {
  std::vector<Field> out;
  Field std_ = row("std", Kind::Enum, "--std=", "--std", "STD", "C++ standard: c++17 or c++20 (default)");
  std_.choices = {"c++17", "c++20"};
  std_.flag_at_default = std_.json_at_default = std_.python_default_none = true;
  out.push_back(member(&CompileOptions::std, std_));
  out.push_back(
      member(&CompileOptions::fast_math, in_every_record(row("fast_math", Kind::Bool, "--use_fast_math", "--fast-math",
                                                             "", "Compile with --use_fast_math"))));
  out.push_back(
      member(&CompileOptions::line_info,
             in_every_record(row("line_info", Kind::Bool, "--generate-line-info", "--line-info", "",
                                 "Line tables for profilers and sanitizers (NVRTC's --generate-line-info)"))));
  out.push_back(
      member(&CompileOptions::device_debug,
             in_every_record(row("device_debug", Kind::Bool, "--device-debug", "--device-debug", "",
                                 "Device debug information, optimizations off (NVRTC's --device-debug, -G)"))));
  out.push_back(member(&CompileOptions::minimal,
                       row("minimal", Kind::Bool, "--minimal", "--minimal", "",
                           "NVRTC's lean front end (--minimal): no textures/surfaces, no device-side CUDA runtime or "
                           "launches, no runtime API types; 3-14 ms less per compile (kjit.ops and kjit.elementwise "
                           "use it)")));
  out.push_back(member(&CompileOptions::default_device,
                       row("default_device", Kind::Bool, "-default-device", "--default-device", "",
                           "NVRTC's -default-device: a function with no __host__/__device__ is a __device__ one (CuTe "
                           "and CUTLASS headers need it)")));
  Field fast_compile = row("fast_compile", Kind::Enum, "--Ofast-compile=", "--fast-compile", "LEVEL",
                           "NVRTC's --Ofast-compile level: off (default), min, mid or max; a faster compile of a "
                           "slower binary (kjit.ops and kjit.elementwise compile at KJIT_LIBRARY_FAST_COMPILE, "
                           "default off)");
  fast_compile.choices = {"off", "min", "mid", "max"};
  out.push_back(member(&CompileOptions::fast_compile, fast_compile));
  Field max_registers = row("max_registers", Kind::Int, "--maxrregcount=", "--max-registers", "N",
                            "Registers per thread at most (NVRTC's --maxrregcount), 16..255; unset: the compiler's "
                            "choice");
  max_registers.min = 16;
  max_registers.max = 255;
  out.push_back(member(&CompileOptions::max_registers, in_every_record(max_registers)));
  out.push_back(
      member(&CompileOptions::defines, in_every_record(row("defines", Kind::Defines, "-D", "--define", "NAME[=VALUE]",
                                                           "Preprocessor macro (repeatable); a bare NAME is NAME=1"))));
  return out;
}

// Never destroyed: a thread still compiling while the process exits (the compiler preload) reads it.
std::vector<Field>& table() {
  static auto* fields = new std::vector<Field>(builtin_fields());
  return *fields;
}

std::size_t kind_index(Kind k) {
  switch (k) {
    case Kind::Bool: return 0;
    case Kind::Int: return 1;
    case Kind::Enum:
    case Kind::String: return 2;
    case Kind::Defines: return 3;
  }
  return 0;
}

}  // namespace

const char* to_string(Kind k) noexcept {
  switch (k) {
    case Kind::Bool: return "bool";
    case Kind::Int: return "int";
    case Kind::Enum: return "enum";
    case Kind::String: return "string";
    case Kind::Defines: return "defines";
  }
  return "?";
}

const std::vector<Field>& compile_option_fields() { return table(); }

const Field* find_compile_option_field(std::string_view name) {
  for (const Field& f : table())
    if (f.name == name) return &f;
  return nullptr;
}

void add_compile_option_field(Field f) {
  auto refuse = [&](const std::string& why) {
    throw ValueError("compile option field '" + f.name + "' cannot be added: " + why);
  };
  if (f.name.empty() || f.cli.rfind("--", 0) != 0) refuse("it needs a name and a CLI flag starting with --");
  for (const Field& g : table())
    if (g.name == f.name || g.cli == f.cli) refuse("the field '" + g.name + "' has that name or CLI flag");
  if (f.default_value.index() != kind_index(f.kind))
    refuse(std::string("its default is not of its kind (") + to_string(f.kind) + ")");
  if (f.kind == Kind::Bool && std::get<bool>(f.default_value)) refuse("a bool field is false by default (a flag)");
  if (f.kind == Kind::Int && std::get<std::optional<int>>(f.default_value)) refuse("an int field is unset by default");
  if (f.kind == Kind::Enum &&
      std::find(f.choices.begin(), f.choices.end(), std::get<std::string>(f.default_value)) == f.choices.end())
    refuse("its default is not one of its choices");
  if (!f.get) {
    f.get = [name = f.name, def = f.default_value](const CompileOptions& o) {
      auto it = o.added.find(name);
      return it == o.added.end() ? def : it->second;
    };
  }
  if (!f.set) {
    f.set = [name = f.name, def = f.default_value](CompileOptions& o, const OptionValue& v) {
      if (v == def)
        o.added.erase(name);
      else
        o.added[name] = v;
    };
  }
  table().push_back(std::move(f));
}

std::string describe(const OptionValue& v) {
  struct Text {
    std::string operator()(bool b) const { return b ? "true" : "false"; }
    std::string operator()(const std::optional<int>& i) const { return i ? std::to_string(*i) : "unset"; }
    std::string operator()(const std::string& s) const { return s; }
    std::string operator()(const std::map<std::string, std::string>& m) const {
      std::string out;
      for (const auto& [name, value] : m) out += (out.empty() ? "" : ", ") + name + "=" + value;
      return "{" + out + "}";
    }
  };
  return std::visit(Text{}, v);
}

std::string options_to_json(const CompileOptions& o) {
  Json j = Json::object();
  for (const Field& f : table()) {
    const OptionValue v = f.get(o);
    if (!f.json_at_default && v == f.default_value) continue;
    switch (f.kind) {
      case Kind::Bool: j[f.name] = std::get<bool>(v); break;
      case Kind::Int: {
        const auto& i = std::get<std::optional<int>>(v);
        j[f.name] = i ? Json(*i) : Json(nullptr);
        break;
      }
      case Kind::Enum:
      case Kind::String: j[f.name] = std::get<std::string>(v); break;
      case Kind::Defines: j[f.name] = std::get<std::map<std::string, std::string>>(v); break;
    }
  }
  return j.dump();
}

CompileOptions options_from_json(std::string_view text, const std::string& where) {
  auto fail = [&](const std::string& what) -> void { throw ValueError(where + ": " + what); };
  Json j = Json::parse(text.begin(), text.end(), nullptr, false);
  if (j.is_discarded() || !j.is_object()) fail("the compile options are not a JSON object");
  for (auto it = j.begin(); it != j.end(); ++it)
    if (!find_compile_option_field(it.key()))
      fail("compile option \"" + it.key() +
           "\" is not one this kjit knows (a newer kjit's?); the options it knows: " + [] {
             std::string names;
             for (const Field& f : table()) names += (names.empty() ? "" : ", ") + f.name;
             return names;
           }());
  CompileOptions o;
  for (const Field& f : table()) {
    auto it = j.find(f.name);
    if (it == j.end()) {
      if (f.json_at_default) fail("missing field \"" + f.name + "\"");
      continue;
    }
    const Json& v = *it;
    auto wrong = [&](const char* expected) {
      fail("field \"" + f.name + "\" is " + v.type_name() + ", expected " + expected);
    };
    switch (f.kind) {
      case Kind::Bool:
        if (!v.is_boolean()) wrong("boolean");
        f.set(o, OptionValue(v.get<bool>()));
        break;
      case Kind::Int:
        if (v.is_null()) {
          f.set(o, OptionValue(std::optional<int>()));
        } else if (!v.is_number_integer() || (v.is_number_unsigned() && v.get<std::uint64_t>() > INT32_MAX) ||
                   (!v.is_number_unsigned() &&
                    (v.get<std::int64_t>() < INT32_MIN || v.get<std::int64_t>() > INT32_MAX))) {
          fail("field \"" + f.name + "\" is not an integer in [-2^31, 2^31) or null");
        } else {
          f.set(o, OptionValue(std::optional<int>(static_cast<int>(v.get<std::int64_t>()))));
        }
        break;
      case Kind::Enum:
      case Kind::String:
        if (!v.is_string()) wrong("string");
        f.set(o, OptionValue(v.get<std::string>()));
        break;
      case Kind::Defines: {
        if (!v.is_object()) wrong("object");
        std::map<std::string, std::string> m;
        for (auto d = v.begin(); d != v.end(); ++d) {
          if (!d->is_string()) fail("field \"" + f.name + "\": the value of \"" + d.key() + "\" is not a string");
          m[d.key()] = d->get<std::string>();
        }
        f.set(o, OptionValue(std::move(m)));
        break;
      }
    }
  }
  return o;
}

std::vector<std::string> cli_arguments(const CompileOptions& o) {
  std::vector<std::string> out;
  for (const Field& f : table()) {
    const OptionValue v = f.get(o);
    if (v == f.default_value) continue;
    switch (f.kind) {
      case Kind::Bool: out.push_back(f.cli); break;
      case Kind::Int:
        if (const auto& i = std::get<std::optional<int>>(v)) out.insert(out.end(), {f.cli, std::to_string(*i)});
        break;
      case Kind::Enum:
      case Kind::String: out.insert(out.end(), {f.cli, std::get<std::string>(v)}); break;
      case Kind::Defines:
        for (const auto& [name, value] : std::get<std::map<std::string, std::string>>(v))
          out.insert(out.end(), {f.cli, name + "=" + value});
        break;
    }
  }
  return out;
}

}  // namespace kjit
