// One cache entry: metadata + payload, and its single-file on-disk encoding.
//
// File layout (little endian):
//   0   char[8]  magic "KJITENT\0"
//   8   u32      format version (CacheKey::kSchemaVersion)
//   12  u32      metadata length M
//   16  u64      payload length P
//   24  char[64] key, lowercase hex
//   88  u8[32]   SHA-256 of the metadata bytes
//   120 u8[32]   SHA-256 of the payload bytes
//   152 M bytes  metadata, JSON
//   152+M        P bytes payload (cubin or PTX)
// The file size must be exactly 152 + M + P. Every field is validated on decode.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kjit/cache/cache_key.hpp"

namespace kjit::cache {

struct EntryMetadata {
  std::string template_name;    // template identity (built-in name or file name, never an absolute path)
  std::string template_digest;  // hex SHA-256 of the template source and its headers
  std::string kernel;           // kernel name
  std::string name_expression;  // e.g. "add_constant<float, 4>"
  std::string lowered_name;     // mangled name in the payload
  std::vector<std::string> options;
  std::string target;            // sm_90 / sm_90a / compute_90
  std::string requested_target;  // what was asked for (differs when PTX fallback happened)
  std::string nvrtc_version;
  OutputKind output = OutputKind::Cubin;
  std::string note;  // e.g. why PTX instead of a cubin
  double compile_ms = 0;
  std::string created;  // ISO 8601 UTC
  std::string kjit_version;
};

// The target an entry is filed (and looked up) under: the one it was requested for. It differs from
// `target` when a PTX fallback happened (requested sm_90, built compute_90): the engine looks the
// entry up by the requested target, so it lives in <root>/v1/<requested_target>/. Entries without a
// requested_target are filed under `target`.
inline const std::string& filed_target(const EntryMetadata& m) {
  return m.requested_target.empty() ? m.target : m.requested_target;
}

struct Entry {
  CacheKey key;
  EntryMetadata meta;
  std::string payload;
};

std::string encode_entry(const Entry& e);

// Why an encoded entry was rejected (empty when valid).
struct DecodeResult {
  std::optional<Entry> entry;
  std::string error;  // e.g. "bad magic", "truncated", "payload checksum mismatch"
};
// `expected_key`, when given, must equal the key stored in the file.
DecodeResult decode_entry(std::string_view bytes, const CacheKey* expected_key = nullptr);

std::string metadata_to_json(const EntryMetadata& m);
// Throws kjit::ValueError on malformed JSON or missing / mistyped fields.
EntryMetadata metadata_from_json(std::string_view json);

}  // namespace kjit::cache
