// EntryMetadata <-> JSON (the metadata block of an entry file).
#include <cmath>
#include <nlohmann/json.hpp>

#include "kjit/cache/entry.hpp"
#include "kjit/error.hpp"

namespace kjit::cache {
namespace {

using nlohmann::json;

// The metadata block is a flat object with one array; anything nested deeper is not ours.
constexpr int kMaxDepth = 8;

// Rejects pathologically nested input before handing it to the parser (defence in depth: a file
// with a matching checksum can still hold any bytes).
bool nesting_within(std::string_view text, int max_depth) {
  int depth = 0;
  bool in_string = false, escaped = false;
  for (char c : text) {
    if (in_string) {
      if (escaped)
        escaped = false;
      else if (c == '\\')
        escaped = true;
      else if (c == '"')
        in_string = false;
      continue;
    }
    if (c == '"')
      in_string = true;
    else if (c == '{' || c == '[') {
      if (++depth > max_depth) return false;
    } else if (c == '}' || c == ']') {
      --depth;
    }
  }
  return true;
}

[[noreturn]] void bad_field(const char* field, const char* expected, const json& j) {
  std::string got = j.contains(field) ? std::string(j[field].type_name()) : "nothing (missing)";
  throw ValueError(std::string("entry metadata field '") + field + "' must be " + expected + ", got " + got);
}

std::string get_string(const json& j, const char* field) {
  auto it = j.find(field);
  if (it == j.end() || !it->is_string()) bad_field(field, "a string", j);
  return it->get<std::string>();
}

}  // namespace

std::string metadata_to_json(const EntryMetadata& m) {
  json j = json::object();
  j["template"] = m.template_name;
  j["template_digest"] = m.template_digest;
  j["kernel"] = m.kernel;
  j["name_expression"] = m.name_expression;
  j["lowered_name"] = m.lowered_name;
  j["options"] = m.options;
  j["target"] = m.target;
  j["requested_target"] = m.requested_target;
  j["nvrtc_version"] = m.nvrtc_version;
  j["output"] = to_string(m.output);
  j["note"] = m.note;
  // JSON has no NaN/inf (nlohmann would write null, which would then never decode).
  j["compile_ms"] = std::isfinite(m.compile_ms) ? m.compile_ms : 0.0;
  j["created"] = m.created;
  j["kjit_version"] = m.kjit_version;
  // Invalid UTF-8 in a string (an odd option) is replaced rather than failing the whole store.
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

EntryMetadata metadata_from_json(std::string_view text) {
  if (!nesting_within(text, kMaxDepth))
    throw ValueError("entry metadata is nested deeper than " + std::to_string(kMaxDepth) +
                     " levels; kjit writes a flat JSON object");
  json j;
  try {
    j = json::parse(text.begin(), text.end());
  } catch (const json::exception& e) {
    throw ValueError(std::string("entry metadata is not valid JSON: ") + e.what());
  }
  if (!j.is_object()) throw ValueError(std::string("entry metadata must be a JSON object, got ") + j.type_name());

  EntryMetadata m;
  m.template_name = get_string(j, "template");
  m.template_digest = get_string(j, "template_digest");
  m.kernel = get_string(j, "kernel");
  m.name_expression = get_string(j, "name_expression");
  m.lowered_name = get_string(j, "lowered_name");
  auto opts = j.find("options");
  if (opts == j.end() || !opts->is_array()) bad_field("options", "an array of strings", j);
  for (const auto& o : *opts) {
    if (!o.is_string()) bad_field("options", "an array of strings", j);
    m.options.push_back(o.get<std::string>());
  }
  m.target = get_string(j, "target");
  m.requested_target = get_string(j, "requested_target");
  m.nvrtc_version = get_string(j, "nvrtc_version");
  std::string output = get_string(j, "output");
  if (output == "cubin")
    m.output = OutputKind::Cubin;
  else if (output == "ptx")
    m.output = OutputKind::Ptx;
  else
    throw ValueError("entry metadata field 'output' must be \"cubin\" or \"ptx\", got \"" + output.substr(0, 40) +
                     "\"");
  m.note = get_string(j, "note");
  auto ms = j.find("compile_ms");
  if (ms == j.end() || !ms->is_number()) bad_field("compile_ms", "a number", j);
  m.compile_ms = ms->get<double>();
  m.created = get_string(j, "created");
  m.kjit_version = get_string(j, "kjit_version");
  return m;
}

}  // namespace kjit::cache
