// The `kjit compile` command that puts one specialization into a cache: what a strict-mode miss tells
// the user to run (CacheMissError). It gives every compile option not at its default as its CLI flag
// (the field table, compile_option_fields.hpp), so that running it makes the key that was missed.
#pragma once

#include <string>

#include "kjit/specialization.hpp"
#include "kjit/target.hpp"

namespace kjit {

// "kjit compile add_constant --kernel add_constant --param T=float32 --param VEC=4 --minimal --arch sm_90";
// a word a POSIX shell would split or expand is single-quoted.
std::string compile_command(const Specialization& spec, const Target& target);

}  // namespace kjit
