// libFuzzer target: the kjit.lock of an exported cache (parse_lock), which vouches for the entries of a
// read-only layer (trust.hpp) and so is read from directories other users may have written.
//
// Any text either parses or throws kjit::Error (ValueError) with a reason; any other exception, a
// crash, a sanitizer report or a runaway allocation is a finding. What parses must keep the promises
// the trust check relies on: every listed path stays under the layer root (relative, no ".." part) and
// every hash is 64 lowercase hex digits.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <string_view>

#include "kjit/cache/export_lock.hpp"
#include "kjit/error.hpp"

namespace {

[[noreturn]] void finding(const char* what, const std::string& detail) {
  std::fprintf(stderr, "fuzz_lock: %s %s\n", what, detail.c_str());
  std::abort();
}

bool lowercase_hex64(const std::string& s) {
  if (s.size() != 64) return false;
  for (char c : s)
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    for (const auto& f : kjit::cache::parse_lock(text, "fuzz.lock")) {
      const std::filesystem::path p(f.path);
      if (f.path.empty() || p.is_absolute()) finding("accepted a path that is not relative:", f.path);
      for (const auto& part : p)
        if (part == "..") finding("accepted a path that climbs out of the root:", f.path);
      if (!lowercase_hex64(f.sha256)) finding("accepted a hash that is not 64 lowercase hex digits:", f.sha256);
    }
  } catch (const kjit::Error&) {
    return 0;  // rejected with a reason
  }
  return 0;
}
