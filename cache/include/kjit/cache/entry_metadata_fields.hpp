// The field table of EntryMetadata: one row per field of an entry's metadata block, from which its forms
// derive: the JSON block of every entry file, written and read (metadata_to_json, metadata_from_json:
// entry_metadata.cpp), and the dict of kjit.Kernel.meta (python/src/core/kernel_binding.cpp). The
// values of a compile are filled in by the engine (engine/src/compiled_entry.cpp).
//
// The names are the entry format: renaming, removing or adding a row changes what an entry file holds
// (every field is required when read, so an entry written before an added field is damaged: a miss, then
// a recompile); do it only with CacheKey::kSchemaVersion. A row's kind is its member's type.
#pragma once

#include <functional>
#include <string>
#include <variant>
#include <vector>

#include "kjit/cache/entry.hpp"

namespace kjit::cache {

// One field's value; the alternative is the field's kind (EntryMetadataField::Kind, in this order).
using MetadataValue = std::variant<std::string, std::vector<std::string>, OutputKind, double>;

struct EntryMetadataField {
  enum class Kind {
    Text,      // a JSON string
    TextList,  // a JSON array of strings
    Output,    // "cubin" or "ptx" (to_string(OutputKind))
    Number,    // a JSON number; written as 0 when not finite (JSON has no NaN or infinity)
  };
  std::string name;  // the JSON field and the key of Kernel.meta: "template_digest"
  Kind kind = Kind::Text;
  std::function<MetadataValue(const EntryMetadata&)> get;
  std::function<void(EntryMetadata&, MetadataValue)> set;  // the value is of the field's kind
};

// The rows, in the order a metadata block is read (a block missing several fields is refused naming the
// first of them) and Kernel.meta lists them. JSON writes its keys sorted, whatever this order.
const std::vector<EntryMetadataField>& entry_metadata_fields();

}  // namespace kjit::cache
