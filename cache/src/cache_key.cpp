#include "kjit/cache/cache_key.hpp"

#include <algorithm>
#include <cstdint>

#include "kjit/error.hpp"

namespace kjit::cache {

const char* to_string(OutputKind kind) noexcept {
  switch (kind) {
    case OutputKind::Cubin: return "cubin";
    case OutputKind::Ptx: return "ptx";
  }
  return "?";
}

namespace {

// Feeds labelled, length-prefixed fields to SHA-256. Every field is
//   u64le(len(label)) label u64le(len(value)) value
// so no two different field sequences produce the same byte stream.
class FieldHasher {
 public:
  FieldHasher() { sha_.update("kjit-cache-key"); }

  void bytes(std::string_view label, std::string_view value) {
    put_u64(label.size());
    sha_.update(label);
    put_u64(value.size());
    sha_.update(value);
  }
  void number(std::string_view label, std::uint64_t value) {
    unsigned char le[8];
    for (int i = 0; i < 8; ++i) le[i] = static_cast<unsigned char>(value >> (8 * i));
    bytes(label, std::string_view(reinterpret_cast<const char*>(le), sizeof le));
  }
  Digest finish() { return sha_.finish(); }

 private:
  void put_u64(std::uint64_t v) {
    unsigned char le[8];
    for (int i = 0; i < 8; ++i) le[i] = static_cast<unsigned char>(v >> (8 * i));
    sha_.update(le, sizeof le);
  }
  Sha256 sha_;
};

}  // namespace

CacheKey CacheKey::compute(const KeyInputs& in) {
  FieldHasher h;
  h.number("schema_version", static_cast<std::uint64_t>(kSchemaVersion));
  h.bytes("kjit_version", in.kjit_version);
  if (!in.content_digest.empty()) {
    h.bytes("content_digest", in.content_digest);
  } else {
    h.bytes("source", in.source);
    // Headers are hashed sorted by include name (then bytes, for a total order), so the order the
    // engine discovered them in does not matter.
    std::vector<const std::pair<std::string, std::string>*> headers;
    headers.reserve(in.headers.size());
    for (const auto& hdr : in.headers) headers.push_back(&hdr);
    std::sort(headers.begin(), headers.end(), [](const auto* a, const auto* b) { return *a < *b; });
    h.number("header_count", headers.size());
    for (const auto* hdr : headers) {
      h.bytes("header_name", hdr->first);
      h.bytes("header_bytes", hdr->second);
    }
  }
  h.bytes("name_expression", in.name_expression);
  h.number("option_count", in.options.size());
  for (const auto& opt : in.options) h.bytes("option", opt);
  h.bytes("target", in.target);
  h.bytes("nvrtc_version", in.nvrtc_version);
  h.bytes("output", to_string(in.output));
  // PTX is JIT-compiled by the driver at load time, so the driver version shapes the result;
  // a cubin is independent of it.
  if (in.output == OutputKind::Ptx) h.bytes("driver_version", in.driver_version);
  return CacheKey(h.finish());
}

CacheKey CacheKey::from_hex(const std::string& hex) {
  Digest d{};
  if (!cache::from_hex(hex, d)) {
    std::string shown = hex.size() > 80 ? hex.substr(0, 80) + "..." : hex;
    throw ValueError("cache key '" + shown + "' (" + std::to_string(hex.size()) +
                     " characters) is not valid: a key is exactly 64 lowercase hexadecimal digits "
                     "(a SHA-256 digest), as printed by `kjit cache list`");
  }
  return CacheKey(d);
}

}  // namespace kjit::cache
