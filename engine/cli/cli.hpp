// The `kjit` command line: one implementation behind the C++ binary (main.cpp) and `python -m kjit`
// (the Python package calls run() through pybind11).
#pragma once

#include <ostream>
#include <string>
#include <vector>

namespace kjit::cli {

// Exit statuses of run().
inline constexpr int kExitOk = 0;
inline constexpr int kExitFailure = 1;  // a command failed, or `verify` found damage
inline constexpr int kExitUsage = 2;    // the command line could not be parsed

// Runs one command. `args` excludes the program name. Normal output goes to `out`, errors, warnings
// and usage messages to `err`. Never throws: every error becomes a message and an exit status.
int run(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

}  // namespace kjit::cli
