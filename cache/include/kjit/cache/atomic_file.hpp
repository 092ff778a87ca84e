// Atomic publish of a file: readers see either no file or the complete one, never a partial write.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <string_view>

namespace kjit::cache {

struct PublishFailure {
  std::string step;  // "create", "write", "fsync", "close", "rename"
  int err = 0;       // errno
  std::filesystem::path path;  // the file the step was applied to
  std::string message() const;  // e.g. "write /c/v1/sm_90/ab/<key>.kjit.tmp.12.3f..: File too large"
};

// Creates "<final>.tmp.<pid>.<random>" next to `final_path` (O_CREAT|O_EXCL, mode 0600), writes
// `bytes`, fsyncs, renames it over `final_path`, then fsyncs the directory. On any failure the temp
// file is removed and the failure returned; nothing is left behind. The directory must exist.
// A failing directory fsync after the rename is not a failure: the entry is already complete.
std::optional<PublishFailure> publish_atomically(const std::filesystem::path& final_path,
                                                 std::string_view bytes);

}  // namespace kjit::cache
