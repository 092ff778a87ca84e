// Manifest: the specializations a workload used (recorded with KJIT_RECORD), so that `kjit warm` can
// compile them anywhere. One versioned JSON file:
//
//   {"kjit_manifest": 1, "records": [ {"id": "<sha256>", "template": {...}, "kernel": "...",
//                                      "args": [...], "options": {...}}, ... ]}
//
// A record names its template by identity: a built-in by name (plus the digest it had), any other
// template by file name, digest, its source text and the bytes of the non-CUDA headers it includes
// (by include name), so that warm can rebuild it on a machine that has none of the files.
// Records are deduplicated by id: the SHA-256 of the record's canonical JSON (without the id).
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

namespace kjit::cache {

inline constexpr int kManifestVersion = 1;

// One typed template argument, as recorded.
struct ManifestArg {
  enum class Kind { Type, Integer, Float, Bool };
  std::string name;
  Kind kind = Kind::Integer;
  std::string dtype;          // Type: a dtype name ("float32")
  std::int64_t integer = 0;   // Integer
  double floating = 0;        // Float: written as an exact hex float ("0x1.8p+0")
  bool boolean = false;       // Bool
};

// The canonical compile options (kjit::CompileOptions, as plain data).
struct ManifestOptions {
  std::string std = "c++20";
  bool fast_math = false;
  bool line_info = false;
  bool device_debug = false;
  std::optional<int> max_registers;
  std::map<std::string, std::string> defines;
};

struct ManifestRecord {
  std::string template_name;    // built-in name or file name
  bool builtin = false;
  std::string template_digest;  // Template::digest() when recorded
  std::string source;           // non-built-in templates only
  std::map<std::string, std::string> headers;  // non-built-in: include name -> bytes (non-CUDA headers)
  std::string kernel;
  std::vector<ManifestArg> args;  // in parameter order
  ManifestOptions options;

  // Hex SHA-256 of the canonical JSON of the record (the dedup identity).
  std::string id() const;
  // "add_constant(T=float32, VEC=4) from template add_constant" for messages.
  std::string describe() const;
};

class Manifest {
 public:
  // Adds `r` unless a record with its id is present; returns whether it was added.
  bool add(ManifestRecord r);
  // Unique by id, in first-recorded order.
  const std::vector<ManifestRecord>& records() const noexcept { return records_; }

 private:
  std::vector<ManifestRecord> records_;
  std::set<std::string> ids_;
};

// Canonical JSON (records carry their id).
std::string manifest_to_json(const Manifest& m);
// Throws kjit::ValueError naming `origin` (a file name) and what is wrong: bad JSON, a wrong or missing
// "kjit_manifest" version, a missing or mistyped field, a record whose id does not match its content.
Manifest parse_manifest(std::string_view json, const std::string& origin);
// Reads and parses a manifest file (ValueError when it cannot be read or parsed).
Manifest read_manifest(const std::filesystem::path& file);

// Merges `records` into the manifest file, safe from many processes: under an exclusive flock of
// "<file>.lock" it reads the file (absent = empty), adds the records it lacks (by id) and, when
// anything is new, publishes the result atomically (temp file in the same directory, fsync, rename),
// so a reader always sees a complete, valid manifest and no record is lost or duplicated.
// Returns how many records were new. Throws kjit::Error (ValueError for a damaged existing manifest,
// which is never overwritten) when it cannot.
std::size_t append_to_manifest(const std::filesystem::path& file, const std::vector<ManifestRecord>& records,
                               double lock_timeout_s);

}  // namespace kjit::cache
