// Atomic publish of a file: readers see either no file or the complete one, never a partial write.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <string_view>

namespace kjit::cache {

struct PublishFailure {
  std::string step;             // "create", "write", "fsync", "close", "rename"
  int err = 0;                  // errno
  std::filesystem::path path;   // the file the step was applied to
  std::string message() const;  // e.g. "write /c/v1/sm_90/ab/<key>.kjit.tmp.12.3f..: File too large"
};

// Creates "<final>.tmp.<pid>.<random>" next to `final_path` (O_CREAT|O_EXCL, mode 0600), writes
// `bytes`, fsyncs, renames it over `final_path`, then fsyncs the directory. On any failure the temp
// file is removed and the failure returned; nothing is left behind. The directory must exist.
// A failing directory fsync after the rename is not a failure: the entry is already complete.
//
// The writer holds an exclusive flock on its temp file from creation until after the rename: that
// lock, not the pid in the name (meaningless in another PID namespace, e.g. a sidecar container on a
// shared volume), is how `clear` and `prune` tell a live writer's temp file from an abandoned one
// (they remove a temp file only when they can take its lock themselves).
// A temp file removed anyway (by an older kjit, or `rm`) makes the rename fail with ENOENT: the
// caller may simply publish again.
std::optional<PublishFailure> publish_atomically(const std::filesystem::path& final_path, std::string_view bytes);

// Test seam: when set, publish_atomically calls `hook` with the temp file's path after writing and
// fsyncing it, just before the rename (tests pause a writer there, or take its temp file away).
// nullptr (the default) turns it off. Set it only while no publish is running.
using BeforeRenameHook = void (*)(const std::filesystem::path& temp);
void set_before_rename_hook(BeforeRenameHook hook) noexcept;

}  // namespace kjit::cache
