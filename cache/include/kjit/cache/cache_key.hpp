// CacheKey: SHA-256 over labelled, length-prefixed fields in a fixed order (DESIGN section 4).
// Never hashes absolute paths, timestamps, PTX text, process ids or Python hash().
//
// Exact encoding: SHA-256 of "kjit-cache-key" followed by, for each field in this order,
//   u64le(len(label)) label u64le(len(value)) value
// schema_version (u64le) · kjit_version · source · header_count (u64le), then for each header sorted
// by (name, bytes): header_name, header_bytes · name_expression · option_count (u64le), then each
// option · target · nvrtc_version · output ("cubin" / "ptx") · driver_version (PTX only).
// Changing any of this invalidates every cache: tests/cpp/test_cache_key.cpp pins one value.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "kjit/cache/sha256.hpp"

namespace kjit::cache {

enum class OutputKind { Cubin, Ptx };
const char* to_string(OutputKind kind) noexcept;

// Everything that determines the compiled bytes.
struct KeyInputs {
  std::string kjit_version;
  std::string source;  // template source bytes
  // When set (hex SHA-256 of the source and every header, as Template::digest() computes it), hashed
  // in place of `source` and `headers`: the same sensitivity to every byte, without rehashing
  // megabytes of CUDA headers for each key of a template.
  std::string content_digest;
  std::vector<std::pair<std::string, std::string>> headers;  // (include name, bytes), any order
  std::string name_expression;
  std::vector<std::string> options;  // canonical option list, in order
  std::string target;                // "sm_90", "sm_90a", "compute_90"
  std::string nvrtc_version;         // "13.0" and build, e.g. "13.0 build 13.0.88"
  OutputKind output = OutputKind::Cubin;
  std::string driver_version;  // hashed only for PTX entries
};

class CacheKey {
 public:
  static constexpr int kSchemaVersion = 1;

  CacheKey() = default;
  explicit CacheKey(const Digest& d) : digest_(d) {}
  static CacheKey compute(const KeyInputs& in);
  // Parses a 64-hex-digit key; throws kjit::ValueError otherwise.
  static CacheKey from_hex(const std::string& hex);

  const Digest& digest() const noexcept { return digest_; }
  std::string hex() const { return to_hex(digest_); }
  bool operator==(const CacheKey& o) const noexcept { return digest_ == o.digest_; }
  bool operator!=(const CacheKey& o) const noexcept { return digest_ != o.digest_; }

 private:
  Digest digest_{};
};

struct CacheKeyHash {
  std::size_t operator()(const CacheKey& k) const noexcept {
    std::size_t h;
    static_assert(sizeof(h) <= sizeof(Digest));
    __builtin_memcpy(&h, k.digest().data(), sizeof(h));
    return h;
  }
};

}  // namespace kjit::cache
