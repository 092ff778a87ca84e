// What the libFuzzer harnesses of the cache's readers share.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>

#include "kjit/error.hpp"

namespace kjit::fuzz {

// A finding of the harness `target`: said on stderr, then an abort for libFuzzer to report.
[[noreturn]] inline void finding(const char* target, const char* what, const std::string& detail = "") {
  std::fprintf(stderr, "%s: %s %s\n", target, what, detail.c_str());
  std::abort();
}

// What `read()` returns, or nothing when it throws kjit::Error: rejected with a reason, the expected outcome for
// most inputs. Any other exception is a finding (libFuzzer reports it).
template <typename Read>
auto accepted(Read read) -> std::optional<decltype(read())> {
  try {
    return read();
  } catch (const kjit::Error&) {
    return std::nullopt;
  }
}

}  // namespace kjit::fuzz
