// An exported cache directory (`kjit export MANIFEST --out DIR`): a cache root made to be shipped.
//  - It starts empty, so that its kjit.lock vouches only for entries the export itself wrote (never for
//    files someone else left there, which every user of the layer would then trust).
//  - It ends readable by every user (directories 0755, files 0644): a cache baked by root into an image
//    is run by another user. The user's own cache stays owner-only (private_dir.hpp); only an export,
//    which is meant to be read by others, is opened up.
#pragma once

#include <filesystem>

namespace kjit::cache {

// Creates `dir` (missing parents too, as `mkdir -p` does under the umask), or accepts it when it is an
// existing empty directory; either way `dir` gets mode 0755 (the cache refuses a root others may write). Throws
// kjit::ValueError when it is not a directory or holds anything, naming what it holds and what to do.
void prepare_export_dir(const std::filesystem::path& dir);

// Mode 0755 on `dir` and every directory under it, 0644 on every regular file under it; symbolic
// links are neither followed nor changed. Throws kjit::Error naming the file it could not change.
void make_export_readable(const std::filesystem::path& dir);

}  // namespace kjit::cache
