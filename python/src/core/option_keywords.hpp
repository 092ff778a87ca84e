// Template.kernel()'s compile-option keywords, one per row of the compile option table
// (compile_option_fields.hpp): named, typed, defaulted and documented from the row, so that a new row is
// a new keyword without binding code. pybind11 types a signature from C++ parameters, which cannot follow
// a table known at run time; so Template.kernel takes **kwargs, and this gives it what pybind11 gives a
// typed signature: the signature text of its docstring (help(), the stubs), each value converted by
// pybind11's own caster for the field's C++ type, and pybind11's TypeError for a call that fits it not.
#pragma once

#include <optional>
#include <string>

#include "bindings.hpp"
#include "kjit/compile_options.hpp"

namespace kjit::python {

// The keywords as a signature writes them, in table order: "std: str | None = None, fast_math: bool =
// False, ..., default_device: bool = False".
std::string option_keywords_signature();

// One line per keyword, "name: what it does", from the row's help (and how Python spells a value where
// the kind has its own spelling: defines, None).
std::string option_keywords_doc();

// The options named by `kwargs` (every other at its default; `skip`, a keyword the caller reads itself,
// left out). nullopt when a keyword is no row's or a value is not of its row's type: the caller raises
// the TypeError of a call that fits no signature (incompatible_call). kjit::TypeError for defines of
// another shape (read_defines), after every other value was converted, as in a typed call.
std::optional<CompileOptions> read_option_keywords(const py::dict& kwargs, const char* skip);

// pybind11's TypeError for a call of `name` that fits no signature (`signature`: "(self: ..., ...) -> T"),
// word for word, with the arguments it got.
[[noreturn]] void incompatible_call(const char* name, const std::string& signature, py::handle self,
                                    const py::args& args, const py::dict& kwargs);

// One option value as Python has it: bool, int or None, str, {name: value}.
py::object to_python(const OptionValue& v);

}  // namespace kjit::python
