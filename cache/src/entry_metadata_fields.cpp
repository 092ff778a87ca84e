#include "kjit/cache/entry_metadata_fields.hpp"

#include <type_traits>

namespace kjit::cache {
namespace {

using Field = EntryMetadataField;
using Kind = EntryMetadataField::Kind;

// The kind of a member of type T: the alternative of MetadataValue that holds it (a member of another
// type has no kind: the table does not compile).
template <typename T>
constexpr Kind kind_of() {
  if constexpr (std::is_same_v<T, std::string>)
    return Kind::Text;
  else if constexpr (std::is_same_v<T, std::vector<std::string>>)
    return Kind::TextList;
  else if constexpr (std::is_same_v<T, OutputKind>)
    return Kind::Output;
  else
    return Kind::Number;
}

// A row whose value is the member `m` of EntryMetadata.
template <typename T>
Field member(std::string name, T EntryMetadata::* m) {
  static_assert(std::is_same_v<std::variant_alternative_t<static_cast<std::size_t>(kind_of<T>()), MetadataValue>, T>,
                "an EntryMetadata member of a type MetadataValue holds, its kind in the same order");
  Field f;
  f.name = std::move(name);
  f.kind = kind_of<T>();
  f.get = [m](const EntryMetadata& e) { return MetadataValue(e.*m); };
  f.set = [m](EntryMetadata& e, MetadataValue v) { e.*m = std::get<T>(std::move(v)); };
  return f;
}

}  // namespace

const std::vector<Field>& entry_metadata_fields() {
  // Never destroyed: read by whatever thread still decodes an entry while the process exits.
  static const auto* fields = new std::vector<Field>{
      member("template", &EntryMetadata::template_name),
      member("template_digest", &EntryMetadata::template_digest),
      member("kernel", &EntryMetadata::kernel),
      member("name_expression", &EntryMetadata::name_expression),
      member("lowered_name", &EntryMetadata::lowered_name),
      member("options", &EntryMetadata::options),
      member("target", &EntryMetadata::target),
      member("requested_target", &EntryMetadata::requested_target),
      member("nvrtc_version", &EntryMetadata::nvrtc_version),
      member("output", &EntryMetadata::output),
      member("note", &EntryMetadata::note),
      member("compile_ms", &EntryMetadata::compile_ms),
      member("created", &EntryMetadata::created),
      member("kjit_version", &EntryMetadata::kjit_version),
  };
  return *fields;
}

}  // namespace kjit::cache
