// Running the kjit command in tests: in this process (kjit::cli::run, the binary's own entry), or a shell
// command line (the built binary, a printed hint as a user would paste it). The test binary links kjit_cli.
#pragma once

#include <sys/wait.h>

#include <cstdio>
#include <sstream>
#include <string>
#include <vector>

#include "cli.hpp"

namespace kjit::testing {

struct CliRun {
  int code = -1;
  std::string out, err;
};

// `kjit ARGS...` in this process.
inline CliRun cli(std::vector<std::string> args) {
  std::ostringstream out, err;
  CliRun r;
  r.code = kjit::cli::run(args, out, err);
  r.out = out.str();
  r.err = err.str();
  return r;
}

// A shell command line; its stdout in `out` (redirect 2>&1 to see stderr too).
inline CliRun run_shell(const std::string& command) {
  CliRun r;
  FILE* p = ::popen(command.c_str(), "r");
  if (!p) return r;
  char buf[4096];
  std::size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) r.out.append(buf, n);
  const int status = ::pclose(p);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

}  // namespace kjit::testing
