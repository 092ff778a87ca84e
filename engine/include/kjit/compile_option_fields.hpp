// The field table of compile options: one row per option of CompileOptions, from which everything that
// names an option derives: validation, the canonical list hashed into keys and its NVRTC flags
// (CompileOptions::validate, canonical, nvrtc_flags), the manifest's JSON (options_to_json,
// options_from_json), the `kjit compile` flags and their help, the Python keywords of Template.kernel()
// and KernelFamily.options (names, types, defaults and documentation: python/src/core/option_keywords.hpp),
// and the `kjit compile` command of a strict-mode miss (compile_command.hpp).
// Adding an option: a member of CompileOptions and its row in compile_option_fields.cpp. Every row but
// the first ones is "omitted at its default" in the key and in manifest records, so that adding one
// changes no key and no record id written before it. docs/compile-options.md has the table as text.
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "kjit/compile_options.hpp"

namespace kjit {

struct CompileOptionField {
  enum class Kind {
    Bool,     // a flag, false by default; `flag` when true
    Int,      // an integer in [min, max], unset by default; `flag` + the number when set
    Enum,     // one of `choices`; `flag` + the value
    String,   // any one-line text; `flag` + the text
    Defines,  // macros NAME -> VALUE; `flag` + NAME=VALUE for each, by name
  };
  std::string name;  // the C++ member, the Python keyword and the JSON field: "max_registers"
  Kind kind = Kind::Bool;
  OptionValue default_value;         // what CompileOptions{} holds
  std::vector<std::string> choices;  // Enum: the values allowed
  int min = 0, max = 0;              // Int: the range allowed
  std::string flag;                  // NVRTC's spelling: "--use_fast_math", "--maxrregcount=", "-D"
  // Rendered in the key even at its default (--std=, in every key since the first).
  bool flag_at_default = false;
  // Written in manifest records even at its default, and required when read (the options records had from
  // the first manifest). Every later field is written only when not at its default, so that the id of a
  // record written before it existed stays what it was.
  bool json_at_default = false;
  // Python's keyword (Template.kernel) takes None for the default and shows None as its default, as std=
  // has from the first release. Int and Defines keywords take None whatever this says (unset; no macros).
  bool python_default_none = false;
  std::string cli;        // the `kjit compile` flag: "--max-registers"
  std::string cli_value;  // its value's name in --help ("N"); empty for a Bool
  std::string help;       // one line of --help, and of Template.kernel()'s documentation
  std::function<OptionValue(const CompileOptions&)> get;
  std::function<void(CompileOptions&, const OptionValue&)> set;  // the value is of the field's kind
};

const char* to_string(CompileOptionField::Kind k) noexcept;

// The rows, in the order of the canonical list.
const std::vector<CompileOptionField>& compile_option_fields();
// The row named `name` (a field name, "max_registers"), or null.
const CompileOptionField* find_compile_option_field(std::string_view name);

// Appends a row whose values live in CompileOptions::added (get and set are filled in when empty): an
// option of a build of kjit that has one more, such as a test's. Call it at start-up, before any thread
// uses compile options. Throws ValueError for a name or a CLI flag that a row has, a Bool whose default is
// true, an Int with a default, or a default of another kind than `kind`.
void add_compile_option_field(CompileOptionField field);

// The options as a canonical JSON object (keys sorted, no spaces): the "options" of a manifest record.
// Fields at their default are left out, but those written from the first manifest on (json_at_default).
std::string options_to_json(const CompileOptions& o);
// The options of such an object. Throws ValueError naming `where` and the field for text that is not a
// JSON object, a field of the wrong JSON type, a field this kjit does not know (written by a newer one)
// and a missing field that records have always had. Does not validate() the values.
CompileOptions options_from_json(std::string_view json, const std::string& where);

// `kjit compile` arguments that give the fields of `o` not at their default ({"--minimal",
// "--fast-compile", "mid", "--define", "A=1"}), in table order.
std::vector<std::string> cli_arguments(const CompileOptions& o);

// A value as text for messages: true, 64, unset, c++20, {A=1, B=2}.
std::string describe(const OptionValue& v);

}  // namespace kjit
