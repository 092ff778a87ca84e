#include "kjit/cache/manifest.hpp"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "kjit/cache/atomic_file.hpp"
#include "kjit/cache/choice_store.hpp"
#include "kjit/cache/file_lock.hpp"
#include "kjit/cache/posix_error.hpp"
#include "kjit/cache/unique_fd.hpp"
#include "kjit/cache/sha256.hpp"
#include "kjit/error.hpp"

namespace kjit::cache {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;  // std::map objects: keys sorted, so dump() is canonical

const char* kind_name(ManifestArg::Kind k) {
  switch (k) {
    case ManifestArg::Kind::Type: return "type";
    case ManifestArg::Kind::Integer: return "integer";
    case ManifestArg::Kind::Float: return "float";
    case ManifestArg::Kind::Bool: return "bool";
  }
  return "?";
}

std::string hex_float(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%a", v);
  return buf;
}

// A JSON value quoted in an error message: scalars as JSON text (cut after 80 characters), arrays and
// objects as "[...]" / "{...}". Never dump() a container here: dump() recurses once per nesting level,
// so a file nested ~100000 deep (200 KB) overflowed the stack (tests/fuzz/fuzz_manifest, regression_deep_*).
std::string value_text(const Json& v) {
  if (v.is_array()) return "[...]";
  if (v.is_object()) return "{...}";
  std::string s = v.dump(-1, ' ', false, Json::error_handler_t::replace);
  return s.size() > 80 ? s.substr(0, 77) + "..." : s;
}

// A JSON integer as int64; nullopt when it is not an integer or does not fit (nlohmann would wrap a
// large unsigned value to a negative one, or truncate it to int, silently).
std::optional<std::int64_t> as_int64(const Json& v) {
  if (!v.is_number_integer()) return std::nullopt;
  if (v.is_number_unsigned() && v.get<std::uint64_t>() > static_cast<std::uint64_t>(INT64_MAX)) return std::nullopt;
  return v.get<std::int64_t>();
}

std::string arg_value_text(const ManifestArg& a) {
  switch (a.kind) {
    case ManifestArg::Kind::Type: return a.dtype;
    case ManifestArg::Kind::Integer:
      return a.above_int64 ? std::to_string(static_cast<std::uint64_t>(a.integer)) : std::to_string(a.integer);
    case ManifestArg::Kind::Float: {
      std::ostringstream os;
      os.precision(17);
      os << a.floating;
      return os.str();
    }
    case ManifestArg::Kind::Bool: return a.boolean ? "true" : "false";
  }
  return "?";
}

// The sources of a non-built-in template, as one object, and its id (what a record line references).
// "learned" only when there is any: the id of sources written before it existed stays what it was.
using Learned = std::map<std::string, std::vector<std::string>>;
Json sources_body(const std::string& source, const std::map<std::string, std::string>& headers,
                  const Learned& learned) {
  Json j = {{"source", source}, {"headers", headers}};
  if (!learned.empty()) j["learned"] = learned;
  return j;
}
std::string sources_id(const std::string& source, const std::map<std::string, std::string>& headers,
                       const Learned& learned) {
  return to_hex(Sha256::of(sources_body(source, headers, learned).dump()));
}

// The record without its id: what the id hashes and a version 2 record line's body (the template's
// sources by id), or, with `inline_sources`, a version 1 record's body (sources inline: what a
// version 1 "id" hashed, so only for checking one).
Json record_body(const ManifestRecord& r, bool inline_sources = false) {
  Json t = {{"name", r.template_name}, {"builtin", r.builtin}, {"digest", r.template_digest}};
  if (!r.builtin && !r.sources)
    throw ValueError("the manifest record " + r.describe() + " names a template that is not built in (" +
                     r.template_name + ") but has no sources; build records with kjit::to_record");
  if (!r.builtin && inline_sources) {
    t["source"] = r.sources->source();
    t["headers"] = r.sources->headers();
  } else if (!r.builtin) {
    t["sources"] = r.sources->id();
  }
  Json args = Json::array();
  for (const auto& a : r.args) {
    Json v;
    switch (a.kind) {
      case ManifestArg::Kind::Type: v = a.dtype; break;
      case ManifestArg::Kind::Integer:
        v = a.above_int64 ? Json(static_cast<std::uint64_t>(a.integer)) : Json(a.integer);
        break;
      case ManifestArg::Kind::Float: v = hex_float(a.floating); break;
      case ManifestArg::Kind::Bool: v = a.boolean; break;
    }
    args.push_back({{"name", a.name}, {"kind", kind_name(a.kind)}, {"value", std::move(v)}});
  }
  // The options as the engine wrote them (a JSON object this layer does not read), canonical again.
  Json opts = Json::parse(r.options, nullptr, false);
  if (opts.is_discarded() || !opts.is_object())
    throw ValueError("the manifest record " + r.describe() + " has options that are not a JSON object (" +
                     (r.options.size() > 80 ? r.options.substr(0, 77) + "..." : r.options) +
                     "); build records with kjit::to_record");
  Json body = {
      {"template", std::move(t)}, {"kernel", r.kernel}, {"args", std::move(args)}, {"options", std::move(opts)}};
  if (r.arch_specific) body["arch_specific"] = true;  // likewise: only when true
  if (r.arch != 0) body["arch"] = r.arch;             // and only when known
  return body;
}

// Parsing: every complaint names the file and where in it.
class Reader {
 public:
  explicit Reader(std::string origin) : origin_(std::move(origin)) {}

  [[noreturn]] void fail(const std::string& where, const std::string& what) const {
    throw ValueError("manifest " + origin_ + " is not valid: " + where + ": " + what +
                     ". Record it again with KJIT_RECORD=" + origin_ +
                     " (or fix the file; see kjit/cache/manifest.hpp for its format).");
  }
  const Json& field(const Json& obj, const char* name, Json::value_t type, const std::string& where) const {
    auto it = obj.find(name);
    if (it == obj.end()) fail(where, std::string("missing field \"") + name + "\"");
    if (it->type() != type && !(type == Json::value_t::number_integer && it->is_number_unsigned()))
      fail(where, std::string("field \"") + name + "\" is " + it->type_name() + ", expected " + Json(type).type_name());
    return *it;
  }
  std::string str(const Json& obj, const char* name, const std::string& where) const {
    return field(obj, name, Json::value_t::string, where).get<std::string>();
  }
  bool boolean(const Json& obj, const char* name, const std::string& where) const {
    return field(obj, name, Json::value_t::boolean, where).get<bool>();
  }
  // The optional "learned" of a sources line: {hex SHA-256: [directive, ...]}.
  Learned learned(const Json& obj, const std::string& where) const {
    Learned out;
    auto it = obj.find("learned");
    if (it == obj.end()) return out;
    const std::string w = where + ".learned";
    if (!it->is_object()) fail(w, "is not an object");
    for (const auto& [sha, list] : it->items()) {
      if (sha.size() != 64 || sha.find_first_not_of("0123456789abcdef") != std::string::npos)
        fail(w, "has a key that is not a hex SHA-256");
      if (!list.is_array()) fail(w + "." + sha.substr(0, 16), "is not an array");
      for (const auto& d : list) {
        if (!d.is_string() || d.get<std::string>().size() < 2 ||
            (d.get<std::string>().front() != '<' && d.get<std::string>().front() != '"'))
          fail(w + "." + sha.substr(0, 16), "holds something other than an include directive ('<name' or '\"name')");
        out[sha].push_back(d.get<std::string>());
      }
    }
    return out;
  }

  std::map<std::string, std::string> string_map(const Json& obj, const char* name, const std::string& where) const {
    const Json& m = field(obj, name, Json::value_t::object, where);
    std::map<std::string, std::string> out;
    for (auto it = m.begin(); it != m.end(); ++it) {
      if (!it->is_string()) fail(where, std::string("\"") + name + "\" value of \"" + it.key() + "\" is not a string");
      out[it.key()] = it->get<std::string>();
    }
    return out;
  }

  ManifestArg arg(const Json& j, const std::string& where) const {
    if (!j.is_object()) fail(where, "is not an object");
    ManifestArg a;
    a.name = str(j, "name", where);
    const std::string kind = str(j, "kind", where);
    auto v = j.find("value");
    if (v == j.end()) fail(where, "missing field \"value\"");
    if (kind == "type" && v->is_string()) {
      a.kind = ManifestArg::Kind::Type;
      a.dtype = v->get<std::string>();
    } else if (kind == "integer" && as_int64(*v)) {
      a.kind = ManifestArg::Kind::Integer;
      a.integer = *as_int64(*v);
    } else if (kind == "integer" && v->is_number_unsigned()) {  // 2^63 up to 2^64-1 (unsigned 64-bit parameters)
      a.kind = ManifestArg::Kind::Integer;
      a.integer = static_cast<std::int64_t>(v->get<std::uint64_t>());
      a.above_int64 = true;
    } else if (kind == "float" && (v->is_number() || v->is_string())) {
      a.kind = ManifestArg::Kind::Float;
      if (v->is_number()) {
        a.floating = v->get<double>();
      } else {
        const std::string text = v->get<std::string>();
        char* end = nullptr;
        errno = 0;
        a.floating = std::strtod(text.c_str(), &end);
        if (text.empty() || *end != '\0' || errno == ERANGE)
          fail(where, "float value '" + text + "' is not a number (write it as a hex float like 0x1.8p+0)");
      }
    } else if (kind == "bool" && v->is_boolean()) {
      a.kind = ManifestArg::Kind::Bool;
      a.boolean = v->get<bool>();
    } else if (kind != "type" && kind != "integer" && kind != "float" && kind != "bool") {
      fail(where, "kind '" + kind + "' is not one of type, integer, float, bool");
    } else {
      fail(where, "a " + kind + " argument cannot have the value " + value_text(*v));
    }
    return a;
  }

  ManifestRecord record(const Json& j, const std::string& where) {
    if (!j.is_object()) fail(where, "is not an object");
    ManifestRecord r;
    const Json& t = field(j, "template", Json::value_t::object, where);
    const std::string tw = where + ".template";
    r.template_name = str(t, "name", tw);
    r.builtin = boolean(t, "builtin", tw);
    r.template_digest = str(t, "digest", tw);
    if (!r.builtin && lines_) {  // version 2: a "sources" line before this one, shared (never copied)
      const std::string id = str(t, "sources", tw);
      auto it = sources_.find(id);
      if (it == sources_.end())
        fail(tw, "its sources \"" + id.substr(0, 16) + "...\" are not on a \"sources\" line before it");
      r.sources = it->second;
    } else if (!r.builtin) {  // version 1: inline; records of one template share one copy from here on
      auto src = std::make_shared<const ManifestSources>(str(t, "source", tw), string_map(t, "headers", tw));
      r.sources = sources_.emplace(src->id(), src).first->second;
    }
    r.kernel = str(j, "kernel", where);
    const Json& args = field(j, "args", Json::value_t::array, where);
    for (std::size_t i = 0; i < args.size(); ++i)
      r.args.push_back(arg(args[i], where + ".args[" + std::to_string(i) + "]"));
    // The compile options: kept as the canonical text of the object; the engine reads inside it. Options
    // are values or objects of values: deeper nesting is refused before dump() (which recurses).
    const Json& o = field(j, "options", Json::value_t::object, where);
    for (const auto& [name, value] : o.items())
      if (value.is_array() || (value.is_object() && std::any_of(value.begin(), value.end(),
                                                                [](const Json& v) { return v.is_structured(); })))
        fail(where + ".options", "\"" + name + "\" is not a value or an object of values");
    r.options = o.dump();
    if (j.contains("arch_specific")) r.arch_specific = boolean(j, "arch_specific", where);
    if (j.contains("arch")) {
      const std::optional<std::int64_t> arch = as_int64(j["arch"]);
      if (!arch || *arch < 10 || *arch > 999 || !r.arch_specific)
        fail(where,
             "\"arch\" must be the XY of an arch-specific record's sm_XYa (an integer from 10 to 999, with "
             "\"arch_specific\": true), got " +
                 j["arch"].dump());
      r.arch = static_cast<int>(*arch);
    }
    auto id = j.find("id");
    if (id != j.end() && (!id->is_string() || id->get<std::string>() != (lines_ ? r.id() : version1_id(r))))
      fail(where, "its \"id\" does not match its content (edited by hand? remove the \"id\" field)");
    return r;
  }

  // Either version: version 2 starts with a line that is only {"kjit_manifest": V}.
  Manifest manifest(std::string_view text) {
    const std::string_view first = text.substr(0, text.find('\n'));
    Json h = Json::parse(first.begin(), first.end(), nullptr, false);
    if (!h.is_discarded() && h.is_object() && h.size() == 1 && h.contains("kjit_manifest") &&
        as_int64(h["kjit_manifest"]) != std::optional<std::int64_t>(1)) {
      check_version(h["kjit_manifest"], kManifestVersion);
      start_lines();
      Manifest m;
      for_each_line(text.substr(std::min(text.size(), first.size() + 1)), [&](const Json& j) {
        if (auto r = line(j)) m.add(std::move(*r));
      });
      for (const auto& [key, value] : choices_) m.set_choice(key, value);
      return m;
    }
    return document(text);
  }

  // The lines of a version 2 file after those read so far; a torn last line (no newline, not JSON)
  // is left out: `*used` is set to the bytes read up to the end of the last complete line.
  template <typename F>
  void for_each_line(std::string_view text, F&& f, std::size_t* used = nullptr) {
    std::size_t pos = 0;
    while (pos < text.size()) {
      std::size_t end = text.find('\n', pos);
      const bool terminated = end != std::string_view::npos;
      if (!terminated) end = text.size();
      const std::string_view l = text.substr(pos, end - pos);
      ++line_no_;
      Json j = Json::parse(l.begin(), l.end(), nullptr, false);
      if (j.is_discarded() && !terminated) break;  // torn: a writer stopped mid-line; the lines before stand
      pos = terminated ? end + 1 : end;
      if (used) *used = pos;
      if (l.find_first_not_of(" \t\r") == std::string_view::npos) continue;  // a blank line
      if (j.is_discarded()) fail(where(), "it is not JSON");
      f(j);
    }
  }

  // One line of version 2: sources (kept, by id, for the records after it), or a record (returned).
  std::optional<ManifestRecord> line(const Json& j) {
    if (!j.is_object() || j.size() != 1 || !(j.contains("sources") || j.contains("record") || j.contains("choice")))
      fail(where(), "it is not an object with one field, \"sources\", \"record\" or \"choice\"");
    if (j.contains("choice")) {
      const Json& c = j["choice"];
      const std::string w = where() + ".choice";
      if (!c.is_object()) fail(w, "is not an object");
      std::string key = str(c, "key", w), value = str(c, "value", w);
      if (const std::string p = choice_key_problem(key); !p.empty()) fail(w + ".key", p);
      if (const std::string p = choice_value_problem(value); !p.empty()) fail(w + ".value", p);
      choices_[std::move(key)] = std::move(value);
      return std::nullopt;
    }
    if (j.contains("sources")) {
      const Json& src = j["sources"];
      const std::string w = where() + ".sources";
      if (!src.is_object()) fail(w, "is not an object");
      const std::string id = str(src, "id", w);
      auto sources = std::make_shared<const ManifestSources>(str(src, "source", w), string_map(src, "headers", w),
                                                             learned(src, w));
      if (id != sources->id()) fail(w, "its \"id\" does not match its content (edited by hand?)");
      sources_.emplace(id, std::move(sources));
      return std::nullopt;
    }
    return record(j["record"], where() + ", records[" + std::to_string(record_lines_++) + "]");
  }

  // The tuned choices of the "choice" lines read so far (the last line of a key wins).
  const std::map<std::string, std::string>& choices() const noexcept { return choices_; }

  // Reads version 2 lines from now on (the version line is read).
  void start_lines() {
    lines_ = true;
    line_no_ = 1;
  }

 private:
  // Version 1: one JSON object {"kjit_manifest": 1, "records": [...]}.
  Manifest document(std::string_view text) {
    Json j = Json::parse(text.begin(), text.end(), nullptr, false);
    if (j.is_discarded()) fail("the file", "it is not JSON");
    if (!j.is_object()) fail("the file", "it is not a JSON object");
    auto v = j.find("kjit_manifest");
    if (v == j.end()) fail("the file", "there is no \"kjit_manifest\" version field (is it a kjit manifest?)");
    check_version(*v, 1);
    const Json& records = field(j, "records", Json::value_t::array, "the file");
    Manifest m;
    for (std::size_t i = 0; i < records.size(); ++i) m.add(record(records[i], "records[" + std::to_string(i) + "]"));
    return m;
  }
  void check_version(const Json& v, int expected) const {
    if (expected == 1 && as_int64(v) == std::optional<std::int64_t>(kManifestVersion))
      fail("the file", "version " + std::to_string(kManifestVersion) +
                           " is not supported as one JSON object: it is "
                           "JSON lines, the first of them {\"kjit_manifest\":" +
                           std::to_string(kManifestVersion) + "} alone");
    if (as_int64(v) != std::optional<std::int64_t>(expected))
      fail(expected == 1 ? "the file" : "line 1",
           "version " + value_text(v) + " is not supported (this kjit reads version 1, one JSON object, and version " +
               std::to_string(kManifestVersion) +
               ", JSON lines starting with {\"kjit_manifest\":" + std::to_string(kManifestVersion) + "})");
  }
  std::string where() const { return "line " + std::to_string(line_no_); }
  // The id of a version 1 record as version 1 defined it (over its sources inline, which a version 1
  // file repeats in each record: hashing them costs the size of the file).
  static std::string version1_id(const ManifestRecord& r) {
    return to_hex(Sha256::of(record_body(r, /*inline_sources=*/true).dump()));
  }

 private:
  std::string origin_;
  bool lines_ = false;  // version 2: records reference sources by id
  std::size_t line_no_ = 0;
  std::size_t record_lines_ = 0;                                           // record lines read (for messages)
  std::map<std::string, std::shared_ptr<const ManifestSources>> sources_;  // by id
  std::map<std::string, std::string> choices_;                             // "choice" lines, key -> value
};

bool read_text(const fs::path& file, std::string& out) {
  std::ifstream f(file, std::ios::binary);
  if (!f) return false;
  std::ostringstream os;
  os << f.rdbuf();
  out = os.str();
  return !f.bad();
}

}  // namespace

ManifestSources::ManifestSources(std::string source, std::map<std::string, std::string> headers, Learned learned)
    : source_(std::move(source)),
      headers_(std::move(headers)),
      learned_(std::move(learned)),
      id_(sources_id(source_, headers_, learned_)) {}

std::string ManifestRecord::id() const { return to_hex(Sha256::of(record_body(*this).dump())); }

std::string ManifestRecord::describe() const {
  std::string s = kernel + "(";
  for (std::size_t i = 0; i < args.size(); ++i) s += (i ? ", " : "") + args[i].name + "=" + arg_value_text(args[i]);
  return s + ") from template " + template_name;
}

void Manifest::set_choice(const std::string& key, const std::string& value) {
  check_choice(key, value);
  choices_[key] = value;
}

bool Manifest::add(ManifestRecord r) {
  if (!ids_.insert(r.id()).second) return false;
  records_.push_back(std::move(r));
  return true;
}

namespace {

std::string header_line() { return "{\"kjit_manifest\":" + std::to_string(kManifestVersion) + "}\n"; }

// The lines of `r`: its sources when `written_sources` lacks them (then added), and the record.
std::string record_lines(const ManifestRecord& r, std::set<std::string>& written_sources) {
  std::string out;
  Json body = record_body(r);
  const std::string id = to_hex(Sha256::of(body.dump()));  // r.id()
  if (!r.builtin && written_sources.insert(r.sources->id()).second) {
    Json src = sources_body(r.sources->source(), r.sources->headers(), r.sources->learned());
    src["id"] = r.sources->id();
    out += Json{{"sources", std::move(src)}}.dump() + "\n";
  }
  body["id"] = id;
  out += Json{{"record", std::move(body)}}.dump() + "\n";
  return out;
}

std::string choice_line(const std::string& key, const std::string& value) {
  return Json{{"choice", {{"key", key}, {"value", value}}}}.dump() + "\n";
}

}  // namespace

std::string manifest_to_json(const Manifest& m) {
  std::string out = header_line();
  std::set<std::string> written;
  for (const auto& r : m.records()) out += record_lines(r, written);
  for (const auto& [key, value] : m.choices()) out += choice_line(key, value);
  return out;
}

Manifest parse_manifest(std::string_view json, const std::string& origin) { return Reader(origin).manifest(json); }

Manifest read_manifest(const fs::path& file) {
  std::string text;
  std::error_code ec;
  if (!fs::is_regular_file(file, ec) || !read_text(file, text))
    throw ValueError("cannot read manifest " + file.string() +
                     ": it does not exist or is not readable. Record one by running the workload with "
                     "KJIT_RECORD=" +
                     file.string() + ".");
  return parse_manifest(text, file.string());
}

// What a writer knows of its file: which file (device, inode), how far it has read it, and the ids of
// the records and sources in that part (ids only: a process recording 5000 specializations of a
// template with 2 MB of headers once held 5000 copies of them here).
struct ManifestWriter::State {
  dev_t dev = 0;
  ino_t ino = 0;
  std::uint64_t read_to = 0;
  std::unique_ptr<Reader> reader;  // holds each sources line read once, for the records that name it
  std::set<std::string> records;   // record ids in the file
  std::set<std::string> sources;   // sources ids in the file
};

ManifestWriter::ManifestWriter(fs::path file, double lock_timeout_s)
    : file_(std::move(file)), lock_timeout_s_(lock_timeout_s), state_(std::make_unique<State>()) {}

ManifestWriter::~ManifestWriter() = default;

namespace {

[[noreturn]] void io_failure(const fs::path& file, const char* step, int err) {
  throw Error("cannot add to manifest " + file.string() + ": " + step + ": " + errno_text(err));
}

// Reads [offset, offset + n) of `fd`.
std::string read_at(int fd, std::uint64_t offset, std::uint64_t n, const fs::path& file) {
  std::string out(n, '\0');
  std::size_t done = 0;
  while (done < n) {
    const ssize_t got = ::pread(fd, out.data() + done, n - done, static_cast<off_t>(offset + done));
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) io_failure(file, "read", errno);
    if (got == 0) break;  // shorter than fstat said: someone cut it (not a kjit writer); read what is there
    done += static_cast<std::size_t>(got);
  }
  out.resize(done);
  return out;
}

void write_all(int fd, std::string_view bytes, const fs::path& file) {
  while (!bytes.empty()) {
    const ssize_t put = ::write(fd, bytes.data(), bytes.size());
    if (put < 0 && errno == EINTR) continue;
    if (put < 0) io_failure(file, "write", errno);
    bytes.remove_prefix(static_cast<std::size_t>(put));
  }
}

// Opens the manifest for appending, never blocking on a FIFO or a device at its path.
UniqueFd open_manifest(const fs::path& file) {
  UniqueFd fd(::open(file.c_str(), O_RDWR | O_CREAT | O_APPEND | O_NONBLOCK | O_CLOEXEC, 0600));
  if (!fd) io_failure(file, "open", errno);
  struct stat st{};
  if (::fstat(fd.get(), &st) != 0) io_failure(file, "fstat", errno);
  if (!S_ISREG(st.st_mode))
    throw ValueError("cannot add to manifest " + file.string() +
                     ": it is not a regular file (a FIFO, a device or a folder); give KJIT_RECORD a file path");
  return fd;
}

}  // namespace

std::size_t ManifestWriter::append(const std::vector<ManifestRecord>& records) { return append_lines(records, {}); }

std::size_t ManifestWriter::append_choices(const std::map<std::string, std::string>& choices) {
  for (const auto& [key, value] : choices) check_choice(key, value);
  return append_lines({}, choices);
}

std::size_t ManifestWriter::append_lines(const std::vector<ManifestRecord>& records,
                                         const std::map<std::string, std::string>& choices) {
  std::error_code ec;
  const fs::path dir = file_.parent_path().empty() ? fs::path(".") : file_.parent_path();
  fs::create_directories(dir, ec);
  std::string lock_error;
  FileLock lock;
  try {
    lock = FileLock::acquire(file_.string() + ".lock", lock_timeout_s_, &lock_error);
  } catch (const Error& e) {
    throw Error("cannot add to manifest " + file_.string() + ": " + e.what());
  }
  if (!lock.locked()) throw Error("cannot add to manifest " + file_.string() + ": " + lock_error);

  UniqueFd fd = open_manifest(file_);
  struct stat st{};
  if (::fstat(fd.get(), &st) != 0) io_failure(file_, "fstat", errno);
  State& s = *state_;
  if (st.st_dev != s.dev || st.st_ino != s.ino || static_cast<std::uint64_t>(st.st_size) < s.read_to) {
    s = State{};  // another file now (replaced, removed, cut): read it from the start
    s.dev = st.st_dev;
    s.ino = st.st_ino;
  }
  std::string out;
  if (s.read_to == 0 && st.st_size > 0) {
    // The first read of this file: version 2 (read on below), a torn first line (a writer died before
    // its first write completed: cut off), or another text (a version 1 file: converted once).
    const std::string text = read_at(fd.get(), 0, static_cast<std::uint64_t>(st.st_size), file_);
    const std::string header = header_line();
    if (text.size() < header.size() && header.compare(0, text.size(), text) == 0) {
      if (::ftruncate(fd.get(), 0) != 0) io_failure(file_, "truncate", errno);
    } else if (text.compare(0, header.size(), header) == 0) {
      s.reader = std::make_unique<Reader>(file_.string());
      s.reader->start_lines();
      s.read_to = header.size();
    } else {
      const Manifest old = parse_manifest(text, file_.string());  // ValueError when damaged: never overwritten
      const std::string converted = manifest_to_json(old);
      if (auto failure = publish_atomically(file_, converted))
        throw Error("cannot convert manifest " + file_.string() + " to version " + std::to_string(kManifestVersion) +
                    ": " + failure->message());
      fd = open_manifest(file_);
      if (::fstat(fd.get(), &st) != 0) io_failure(file_, "fstat", errno);
      s = State{};
      s.dev = st.st_dev;
      s.ino = st.st_ino;
      s.reader = std::make_unique<Reader>(file_.string());
      s.reader->start_lines();
      s.read_to = header.size();  // the rest is read below, as any appended lines
    }
  }
  if (s.read_to == 0) {  // a new (or empty) file
    out = header_line();
    s.reader = std::make_unique<Reader>(file_.string());
    s.reader->start_lines();
  } else if (static_cast<std::uint64_t>(st.st_size) > s.read_to) {
    // What other writers appended since this one last read (and, the first time, the whole file).
    const std::string text = read_at(fd.get(), s.read_to, static_cast<std::uint64_t>(st.st_size) - s.read_to, file_);
    std::size_t used = 0;
    try {
      s.reader->for_each_line(
          text,
          [&](const Json& j) {
            if (auto r = s.reader->line(j)) s.records.insert(r->id());
            if (j.contains("sources")) s.sources.insert(j["sources"]["id"].get<std::string>());
          },
          &used);
    } catch (...) {
      s = State{};  // read it again next time
      throw;
    }
    if (used < text.size()) {
      // A torn last line (a writer that died mid-write): cut it off, the lines before stand.
      if (::ftruncate(fd.get(), static_cast<off_t>(s.read_to + used)) != 0) io_failure(file_, "truncate", errno);
    } else if (!text.empty() && text.back() != '\n') {
      out = "\n";  // a complete last line without its newline (written by hand)
    }
    s.read_to += used;
  }
  const std::size_t lines_from = out.size();  // after a version line or a newline completing the last line
  std::size_t added = 0;
  for (const auto& r : records) {
    if (!s.records.insert(r.id()).second) continue;
    out += record_lines(r, s.sources);
    ++added;
  }
  for (const auto& [key, value] : choices) {  // the reader knows the file's last value of each key
    auto known = s.reader->choices().find(key);
    if (known != s.reader->choices().end() && known->second == value) continue;
    out += choice_line(key, value);
    ++added;
  }
  if (out.empty()) return 0;
  try {
    write_all(fd.get(), out, file_);
  } catch (...) {
    s = State{};  // the file holds part of it, or none: read it again next time
    throw;
  }
  // The reader takes this writer's own lines too, as it takes others': their sources are then known
  // when another writer's record refers to them, and line numbers stay right.
  s.reader->for_each_line(std::string_view(out).substr(lines_from), [&](const Json& j) { s.reader->line(j); });
  s.read_to += out.size();
  bytes_written_ += out.size();
  return added;
}

std::size_t append_to_manifest(const fs::path& file, const std::vector<ManifestRecord>& records,
                               double lock_timeout_s) {
  return ManifestWriter(file, lock_timeout_s).append(records);
}

}  // namespace kjit::cache
