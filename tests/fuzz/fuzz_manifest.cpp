// libFuzzer target: KJIT_RECORD manifests as `kjit warm` reads them (parse_manifest).
//
// Any text either parses or throws kjit::Error (ValueError naming the file and the place); any other
// exception, a crash, a sanitizer report or a runaway allocation is a finding. What parses must
// survive the writer: manifest_to_json of it parses again (ids included) to the same text.
#include <cstdint>
#include <string>
#include <string_view>

#include "fuzz_support.hpp"
#include "kjit/cache/manifest.hpp"

using kjit::fuzz::finding;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const auto m = kjit::fuzz::accepted([&] { return kjit::cache::parse_manifest(text, "fuzz.json"); });
  if (!m) return 0;
  for (const auto& r : m->records()) (void)r.describe();  // what warm prints for each record
  const std::string once = kjit::cache::manifest_to_json(*m);
  try {
    const kjit::cache::Manifest back = kjit::cache::parse_manifest(once, "round-trip.json");
    if (back.records().size() != m->records().size() || kjit::cache::manifest_to_json(back) != once)
      finding("fuzz_manifest", "manifest_to_json(parse_manifest(j)) is not stable:", once);
  } catch (const kjit::Error& e) {
    finding("fuzz_manifest", "a manifest written by manifest_to_json does not parse:", e.what());
  }
  return 0;
}
