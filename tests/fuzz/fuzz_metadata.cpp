// libFuzzer target: the JSON metadata block of a cache entry (metadata_from_json).
//
// Any text either parses or throws kjit::Error (ValueError) with a reason; any other exception, a
// crash, a sanitizer report or a runaway allocation is a finding. What parses must survive the
// writer: metadata_to_json of it parses again to the same JSON (an entry kjit stores is one it loads).
#include <cstdint>
#include <string>
#include <string_view>

#include "fuzz_support.hpp"
#include "kjit/cache/entry.hpp"

using kjit::fuzz::finding;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const auto m = kjit::fuzz::accepted([&] { return kjit::cache::metadata_from_json(text); });
  if (!m) return 0;
  const std::string once = kjit::cache::metadata_to_json(*m);
  try {
    if (kjit::cache::metadata_to_json(kjit::cache::metadata_from_json(once)) != once)
      finding("fuzz_metadata", "metadata_to_json(metadata_from_json(j)) is not stable:", once);
  } catch (const kjit::Error& e) {
    finding("fuzz_metadata", "metadata written by metadata_to_json does not parse:", e.what());
  }
  return 0;
}
