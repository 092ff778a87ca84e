// libFuzzer target: the JSON metadata block of a cache entry (metadata_from_json).
//
// Any text either parses or throws kjit::Error (ValueError) with a reason; any other exception, a
// crash, a sanitizer report or a runaway allocation is a finding. What parses must survive the
// writer: metadata_to_json of it parses again to the same JSON (an entry kjit stores is one it loads).
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "kjit/cache/entry.hpp"
#include "kjit/error.hpp"

namespace {

[[noreturn]] void finding(const char* what, const std::string& detail = "") {
  std::fprintf(stderr, "fuzz_metadata: %s %s\n", what, detail.c_str());
  std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  kjit::cache::EntryMetadata m;
  try {
    m = kjit::cache::metadata_from_json(text);
  } catch (const kjit::Error&) {
    return 0;  // rejected with a reason: the expected outcome for most inputs
  }
  const std::string once = kjit::cache::metadata_to_json(m);
  try {
    if (kjit::cache::metadata_to_json(kjit::cache::metadata_from_json(once)) != once)
      finding("metadata_to_json(metadata_from_json(j)) is not stable:", once);
  } catch (const kjit::Error& e) {
    finding("metadata written by metadata_to_json does not parse:", e.what());
  }
  return 0;
}
