#include "kjit/cache/manifest.hpp"

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "kjit/cache/atomic_file.hpp"
#include "kjit/cache/file_lock.hpp"
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
    case ManifestArg::Kind::Integer: return std::to_string(a.integer);
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

// The record without its id: what the id hashes.
Json record_body(const ManifestRecord& r) {
  Json t = {{"name", r.template_name}, {"builtin", r.builtin}, {"digest", r.template_digest}};
  if (!r.builtin) {
    t["source"] = r.source;
    t["headers"] = r.headers;
  }
  Json args = Json::array();
  for (const auto& a : r.args) {
    Json v;
    switch (a.kind) {
      case ManifestArg::Kind::Type: v = a.dtype; break;
      case ManifestArg::Kind::Integer: v = a.integer; break;
      case ManifestArg::Kind::Float: v = hex_float(a.floating); break;
      case ManifestArg::Kind::Bool: v = a.boolean; break;
    }
    args.push_back({{"name", a.name}, {"kind", kind_name(a.kind)}, {"value", std::move(v)}});
  }
  const ManifestOptions& o = r.options;
  Json opts = {{"std", o.std},
               {"fast_math", o.fast_math},
               {"line_info", o.line_info},
               {"device_debug", o.device_debug},
               {"max_registers", o.max_registers ? Json(*o.max_registers) : Json(nullptr)},
               {"defines", o.defines}};
  return {{"template", std::move(t)}, {"kernel", r.kernel}, {"args", std::move(args)}, {"options", std::move(opts)}};
}

// Parsing: every complaint names the file and where in it.
class Reader {
 public:
  explicit Reader(std::string origin) : origin_(std::move(origin)) {}

  [[noreturn]] void fail(const std::string& where, const std::string& what) const {
    throw ValueError("manifest " + origin_ + " is not valid: " + where + ": " + what +
                     ". Record it again with KJIT_RECORD=" + origin_ +
                     " (or fix the file; the format is {\"kjit_manifest\": 1, \"records\": [...]}).");
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

  ManifestRecord record(const Json& j, const std::string& where) const {
    if (!j.is_object()) fail(where, "is not an object");
    ManifestRecord r;
    const Json& t = field(j, "template", Json::value_t::object, where);
    const std::string tw = where + ".template";
    r.template_name = str(t, "name", tw);
    r.builtin = boolean(t, "builtin", tw);
    r.template_digest = str(t, "digest", tw);
    if (!r.builtin) {
      r.source = str(t, "source", tw);
      r.headers = string_map(t, "headers", tw);
    }
    r.kernel = str(j, "kernel", where);
    const Json& args = field(j, "args", Json::value_t::array, where);
    for (std::size_t i = 0; i < args.size(); ++i)
      r.args.push_back(arg(args[i], where + ".args[" + std::to_string(i) + "]"));
    const Json& o = field(j, "options", Json::value_t::object, where);
    const std::string ow = where + ".options";
    r.options.std = str(o, "std", ow);
    r.options.fast_math = boolean(o, "fast_math", ow);
    r.options.line_info = boolean(o, "line_info", ow);
    r.options.device_debug = boolean(o, "device_debug", ow);
    auto mr = o.find("max_registers");
    if (mr != o.end() && !mr->is_null()) {
      const auto n = as_int64(*mr);
      if (!n || *n < 0 || *n > INT32_MAX) fail(ow, "\"max_registers\" is not an integer in [0, 2^31) or null");
      r.options.max_registers = static_cast<int>(*n);
    }
    r.options.defines = string_map(o, "defines", ow);
    auto id = j.find("id");
    if (id != j.end() && (!id->is_string() || id->get<std::string>() != r.id()))
      fail(where, "its \"id\" does not match its content (edited by hand? remove the \"id\" field)");
    return r;
  }

  Manifest manifest(std::string_view text) const {
    Json j = Json::parse(text.begin(), text.end(), nullptr, false);
    if (j.is_discarded()) fail("the file", "it is not JSON");
    if (!j.is_object()) fail("the file", "it is not a JSON object");
    auto v = j.find("kjit_manifest");
    if (v == j.end()) fail("the file", "there is no \"kjit_manifest\" version field (is it a kjit manifest?)");
    if (as_int64(*v) != std::optional<std::int64_t>(kManifestVersion))
      fail("the file", "version " + value_text(*v) + " is not supported (this kjit reads version " +
                           std::to_string(kManifestVersion) + ")");
    const Json& records = field(j, "records", Json::value_t::array, "the file");
    Manifest m;
    for (std::size_t i = 0; i < records.size(); ++i) m.add(record(records[i], "records[" + std::to_string(i) + "]"));
    return m;
  }

 private:
  std::string origin_;
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

std::string ManifestRecord::id() const { return to_hex(Sha256::of(record_body(*this).dump())); }

std::string ManifestRecord::describe() const {
  std::string s = kernel + "(";
  for (std::size_t i = 0; i < args.size(); ++i)
    s += (i ? ", " : "") + args[i].name + "=" + arg_value_text(args[i]);
  return s + ") from template " + template_name;
}

bool Manifest::add(ManifestRecord r) {
  if (!ids_.insert(r.id()).second) return false;
  records_.push_back(std::move(r));
  return true;
}

std::string manifest_to_json(const Manifest& m) {
  Json records = Json::array();
  for (const auto& r : m.records()) {
    Json body = record_body(r);
    body["id"] = r.id();
    records.push_back(std::move(body));
  }
  Json j = {{"kjit_manifest", kManifestVersion}, {"records", std::move(records)}};
  return j.dump(1) + "\n";
}

Manifest parse_manifest(std::string_view json, const std::string& origin) { return Reader(origin).manifest(json); }

Manifest read_manifest(const fs::path& file) {
  std::string text;
  std::error_code ec;
  if (!fs::is_regular_file(file, ec) || !read_text(file, text))
    throw ValueError("cannot read manifest " + file.string() +
                     ": it does not exist or is not readable. Record one by running the workload with "
                     "KJIT_RECORD=" + file.string() + ".");
  return parse_manifest(text, file.string());
}

std::size_t append_to_manifest(const fs::path& file, const std::vector<ManifestRecord>& records,
                               double lock_timeout_s) {
  std::error_code ec;
  const fs::path dir = file.parent_path().empty() ? fs::path(".") : file.parent_path();
  fs::create_directories(dir, ec);
  std::string lock_error;
  FileLock lock;
  try {
    lock = FileLock::acquire(file.string() + ".lock", lock_timeout_s, &lock_error);
  } catch (const Error& e) {
    throw Error("cannot add to manifest " + file.string() + ": " + e.what());
  }
  if (!lock.locked()) throw Error("cannot add to manifest " + file.string() + ": " + lock_error);

  Manifest m;
  if (fs::exists(file, ec)) m = read_manifest(file);
  std::size_t added = 0;
  for (const auto& r : records) added += m.add(r) ? 1 : 0;
  if (added == 0) return 0;
  if (auto failure = publish_atomically(file, manifest_to_json(m)))
    throw Error("cannot write manifest " + file.string() + ": " + failure->message());
  return added;
}

}  // namespace kjit::cache
