// Manifest: the specializations a workload used (recorded with KJIT_RECORD), so that `kjit warm` can
// compile them anywhere. Version 2 is JSON lines, appended to and never rewritten, so that recording N
// specializations costs O(N) (version 1, one JSON object rewritten for each new record, took 202 s
// for 300 records and repeated a template's sources in each):
//
//   {"kjit_manifest":2}
//   {"sources":{"id":"<sha256>","source":"...","headers":{"detail.cuh":"..."}}}
//   {"record":{"id":"<sha256>","template":{"name":"k.cu","builtin":false,"digest":"...","sources":"<sha256>"},
//              "kernel":"...","args":[...],"options":{...}[,"arch_specific":true,"arch":90]}}
//   ("options": the compile options, a JSON object the cache layer keeps as it is: see ManifestRecord)
//   {"choice":{"key":"gemm|sm_90a|bf16|N=4096|K=4096","value":"wgmma:128x256x64:s4"}}
//
// A record names its template by identity: a built-in by name (plus the digest it had), any other
// template by file name, digest and the id of a "sources" line before it, which holds its source text
// and the bytes of the non-CUDA headers it includes (by include name), written once per manifest, so
// that warm can rebuild it on a machine that has none of the files. A sources id is the SHA-256 of
// that line's content (checked when read).
// Records are deduplicated by id: the SHA-256 of the record's canonical JSON without the id and with
// its sources by their id (as on a version 2 record line), so that computing it costs the size of the
// record, not of its template's sources. A version 1 record (sources inline) checks its "id" as
// version 1 defined it, and once read has the id that recording it afresh would give. Readers still
// read version 1 files; writers convert one to version 2 (once, atomically) before appending to it.
// In memory as in the file, a template's sources are held once, shared by its records: reading N
// records of one template holds its sources once, so what a file expands to is bounded by its size.
// A "choice" line is a tuned choice (kjit::Choices, choice_store.hpp) the workload found or made: a key
// and the configuration chosen for it, both printable ASCII within the choice store's limits. A later
// line for the same key replaces an earlier one (a writer appends one only when the value changed). Choice
// lines are optional and leave record ids as they were; a kjit older than them refuses a file that has
// any ("not an object with one field"), so record without tuning for such a kjit.
// A crash mid-append leaves a torn last line without its newline: readers ignore it (the records
// before it stand) and the next writer cuts it off.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

namespace kjit::cache {

inline constexpr int kManifestVersion = 2;

// One typed template argument, as recorded.
struct ManifestArg {
  enum class Kind { Type, Integer, Float, Bool };
  std::string name;
  Kind kind = Kind::Integer;
  std::string dtype;         // Type: a dtype name ("float32")
  std::int64_t integer = 0;  // Integer (the bits of a value from 2^63 up when above_int64)
  bool above_int64 = false;  // Integer: a value of [2^63, 2^64), written as such in JSON
  double floating = 0;       // Float: written as an exact hex float ("0x1.8p+0")
  bool boolean = false;      // Bool
};

// The compile options of a record (kjit::CompileOptions) as a JSON object, which the cache layer keeps and
// hashes without reading inside it: the engine writes and reads it through its field table
// (kjit::options_to_json / options_from_json, compile_option_fields.hpp). This is what every kjit wrote
// for the default options, and a record's id hashes the object as canonical JSON (keys sorted, no spaces).
inline constexpr const char* kDefaultManifestOptions =
    "{\"defines\":{},\"device_debug\":false,\"fast_math\":false,\"line_info\":false,\"max_registers\":null,"
    "\"std\":\"c++20\"}";

// The sources of a template that is not built in: its source text and the bytes of the non-CUDA
// headers it includes (by include name), with their id, the hex SHA-256 of their canonical JSON
// {"headers":{...},"source":"..."}. Immutable, and shared by every record of the template.
class ManifestSources {
 public:
  // `learned`: include directives compiles learned for the template's files (HeaderIndex::learned: the
  // SHA-256 of a file's bytes -> directives), so that the template rebuilt elsewhere hands the same headers.
  ManifestSources(std::string source, std::map<std::string, std::string> headers,
                  std::map<std::string, std::vector<std::string>> learned = {});
  const std::string& source() const noexcept { return source_; }
  const std::map<std::string, std::string>& headers() const noexcept { return headers_; }
  const std::map<std::string, std::vector<std::string>>& learned() const noexcept { return learned_; }
  const std::string& id() const noexcept { return id_; }

 private:
  std::string source_;
  std::map<std::string, std::string> headers_;
  std::map<std::string, std::vector<std::string>> learned_;
  std::string id_;
};

struct ManifestRecord {
  std::string template_name;  // built-in name or file name
  bool builtin = false;
  std::string template_digest;                     // Template::digest() when recorded
  std::shared_ptr<const ManifestSources> sources;  // non-built-in templates only (null for a built-in)
  std::string kernel;
  std::vector<ManifestArg> args;                  // in parameter order
  std::string options = kDefaultManifestOptions;  // a JSON object (see kDefaultManifestOptions)
  // Compiled for the arch-specific form of a target (sm_90a, not sm_90): the record of a kernel that uses
  // features only sm_XYa has (wgmma). Written as "arch_specific": true only when true, so the record of
  // every other kernel (and its id) is what it was before the field existed. Another binary, so another id.
  bool arch_specific = false;
  // For an arch-specific record, the XY of the sm_XYa it was compiled for ("arch": 90), the one
  // architecture that runs it: `kjit warm` compiles it there and skips it elsewhere (kjit::warm_target).
  // 0 in a record written before the field existed; written only when not 0 (so such a record keeps its id).
  int arch = 0;

  // Hex SHA-256 of the canonical JSON of the record, its sources by id (the dedup identity). Throws
  // kjit::ValueError for a record that is not built in and has no sources.
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
  // Sets the tuned choice of `key` (the last one set wins). Throws kjit::ValueError for a key or value
  // the choice store refuses (choice_store.hpp).
  void set_choice(const std::string& key, const std::string& value);
  // Tuned choices, key -> value.
  const std::map<std::string, std::string>& choices() const noexcept { return choices_; }

 private:
  std::vector<ManifestRecord> records_;
  std::set<std::string> ids_;
  std::map<std::string, std::string> choices_;
};

// Canonical text of the current version (records carry their id; each template's sources once; the
// choices after the records, by key).
std::string manifest_to_json(const Manifest& m);
// Either version. Throws kjit::ValueError naming `origin` (a file name) and what is wrong: bad JSON, a
// wrong or missing "kjit_manifest" version, a missing or mistyped field, a record whose id does not
// match its content, a record whose sources are not in the file. A torn last line (no newline, not
// JSON) is ignored.
Manifest parse_manifest(std::string_view json, const std::string& origin);
// Reads and parses a manifest file (ValueError when it cannot be read or parsed).
Manifest read_manifest(const std::filesystem::path& file);

// Appends records to a manifest file, safe from many processes and threads: under an exclusive flock
// of "<file>.lock" it reads what other writers appended since its last call (only that: it remembers
// how far it has read, and the ids of the records and sources there, never records themselves), and
// appends the records the file lacks (by id) with one write, preceded by their template's sources
// when the file lacks those. A file of version 1 is converted first (once,
// atomically). The cost of an append is the size of what it writes and of what others wrote since:
// recording N records costs O(N), not O(N^2). Never blocks on a file that is not a regular file.
class ManifestWriter {
 public:
  ManifestWriter(std::filesystem::path file, double lock_timeout_s);
  ~ManifestWriter();
  ManifestWriter(const ManifestWriter&) = delete;
  ManifestWriter& operator=(const ManifestWriter&) = delete;

  // Returns how many records were new. Throws kjit::Error (ValueError for a damaged existing manifest,
  // which is never overwritten) when it cannot.
  std::size_t append(const std::vector<ManifestRecord>& records);
  // The same for tuned choices: appends a "choice" line for each key whose value in the file (its last
  // line for that key) is another or none; returns how many it appended. ValueError for a key or value the
  // choice store refuses.
  std::size_t append_choices(const std::map<std::string, std::string>& choices);
  const std::filesystem::path& file() const noexcept { return file_; }
  // Bytes this writer has appended to the file, over its life (what tests check for O(N) recording).
  std::uint64_t bytes_written() const noexcept { return bytes_written_; }

 private:
  struct State;
  std::filesystem::path file_;
  double lock_timeout_s_;
  std::uint64_t bytes_written_ = 0;
  std::unique_ptr<State> state_;  // what this writer has read of the file
  std::size_t append_lines(const std::vector<ManifestRecord>& records,
                           const std::map<std::string, std::string>& choices);
};

// One-shot ManifestWriter(file, lock_timeout_s).append(records).
std::size_t append_to_manifest(const std::filesystem::path& file, const std::vector<ManifestRecord>& records,
                               double lock_timeout_s);

}  // namespace kjit::cache
