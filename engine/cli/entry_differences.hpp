// What tells apart listed cache entries of one kernel: `kjit ls` shows two or more entries with the same
// template, name expression and target when they were compiled with other options (a library op's options
// and a `kjit compile` of the same kernel), from another template source, by another NVRTC or kjit, or as
// PTX. differences() says, for each such entry, what differs from the others of its group.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "kjit/cache/disk_cache.hpp"

namespace kjit::cli {

// One string per entry of `entries` (same order): "" for an entry that is alone in its group (template,
// name expression, target), or that has no readable metadata, or whose key another listed entry has too
// (the same compile in two layers: the layer column tells them apart). Otherwise the fields in which its
// group differs, with this entry's values, "; "-separated:
//   "options: --minimal"                        options only some entries of the group have (this one has)
//   "options: without --minimal"                ... which this one lacks
//   "template <digest[0:12]>", "nvrtc <version>", "kjit <version>", "output ptx"
// and "key only" when none of those differ (a field the metadata does not record, such as the driver
// version of a PTX entry's key).
std::vector<std::string> differences(const std::vector<cache::EntryInfo>& entries);

}  // namespace kjit::cli
