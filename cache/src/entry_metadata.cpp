// EntryMetadata <-> JSON (the metadata block of an entry file), field by field of its table
// (entry_metadata_fields.hpp).
#include <cmath>
#include <nlohmann/json.hpp>

#include "kjit/cache/entry.hpp"
#include "kjit/cache/entry_metadata_fields.hpp"
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

using Kind = EntryMetadataField::Kind;

// One field's value as JSON.
json as_json(const MetadataValue& v) {
  struct Json {
    json operator()(const std::string& s) const { return s; }
    json operator()(const std::vector<std::string>& list) const { return list; }
    json operator()(OutputKind o) const { return to_string(o); }
    // JSON has no NaN/inf (nlohmann would write null, which would then never decode).
    json operator()(double d) const { return std::isfinite(d) ? d : 0.0; }
  };
  return std::visit(Json{}, v);
}

// The value of field `f` in `j`, or ValueError naming the field and what it must be.
MetadataValue read_field(const json& j, const EntryMetadataField& f) {
  const char* name = f.name.c_str();
  switch (f.kind) {
    case Kind::Text: return get_string(j, name);
    case Kind::TextList: {
      auto list = j.find(name);
      if (list == j.end() || !list->is_array()) bad_field(name, "an array of strings", j);
      std::vector<std::string> out;
      for (const auto& o : *list) {
        if (!o.is_string()) bad_field(name, "an array of strings", j);
        out.push_back(o.get<std::string>());
      }
      return out;
    }
    case Kind::Output: {
      const std::string output = get_string(j, name);
      if (output == "cubin") return OutputKind::Cubin;
      if (output == "ptx") return OutputKind::Ptx;
      throw ValueError(std::string("entry metadata field '") + name + "' must be \"cubin\" or \"ptx\", got \"" +
                       output.substr(0, 40) + "\"");
    }
    case Kind::Number: {
      auto ms = j.find(name);
      if (ms == j.end() || !ms->is_number()) bad_field(name, "a number", j);
      return ms->get<double>();
    }
  }
  throw ValueError(std::string("entry metadata field '") + name + "' has no kind kjit knows");
}

}  // namespace

std::string metadata_to_json(const EntryMetadata& m) {
  json j = json::object();
  for (const EntryMetadataField& f : entry_metadata_fields()) j[f.name] = as_json(f.get(m));
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
  for (const EntryMetadataField& f : entry_metadata_fields()) f.set(m, read_field(j, f));
  return m;
}

}  // namespace kjit::cache
