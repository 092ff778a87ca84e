// Between a Specialization and its manifest record (cache/manifest.hpp): what KJIT_RECORD writes and
// what `kjit warm` rebuilds.
#pragma once

#include <string>

#include "kjit/cache/manifest.hpp"
#include "kjit/specialization.hpp"

namespace kjit {

// The sources of a template that is not built in, as a record holds them (its source and the bytes of
// its non-CUDA headers); null for a built-in.
std::shared_ptr<const cache::ManifestSources> sources_of(const Template& t);

// The record of `spec`: its template's identity (and, for a template that is not built in, its
// sources: `sources` when given, which must be sources_of(spec.tmpl()), shared rather than copied),
// kernel, typed arguments and options.
cache::ManifestRecord to_record(const Specialization& spec,
                                std::shared_ptr<const cache::ManifestSources> sources = nullptr);

// Rebuilds the Template of a record: a built-in by name (its current bytes), any other template from
// the recorded source and headers. `stale` (when given) is set to a note when the rebuilt template's
// digest differs from the recorded one, else cleared. Throws ValueError (unknown built-in).
std::shared_ptr<const Template> template_of(const cache::ManifestRecord& record, std::string* stale = nullptr);

// The Specialization of a record over `tmpl` (from template_of). Throws ValueError / TypeError when the
// record does not fit the template (unknown kernel, parameter, dtype, or a value out of range).
Specialization specialization_of(const cache::ManifestRecord& record, std::shared_ptr<const Template> tmpl);

}  // namespace kjit
