// PchFolders: where NVRTC's automatic precompiled headers live (KJIT_PCH, Compiler::compile).
//
// NVRTC reuses a PCH of its --pch-dir for a later compile whose initial preprocessing directives match
// (the same #include names, the same macros); it cannot tell that a header handed to it in memory under
// the same name now has other bytes (another folder's config.h, a header edited in a notebook), and a
// PCH made from the old bytes would compile the new template against them. So every header domain gets
// a folder of its own: the domain is the digest of every header handed to NVRTC (its include name and
// the SHA-256 of its bytes) and of the compile's options, and a PCH is only ever reused by a compile that
// hands NVRTC identical headers with identical options (Compiler::pch_domain).
//
// A process's folders live under one root of its own, $TMPDIR/kjit-pch-XXXXXX (0700; /tmp when TMPDIR
// is not an absolute path), which holds `owner.lock`, flocked by the process for as long as it lives
// (made under another name and renamed once locked, so that no one sees it unlocked). A root is removed
// at exit; a root whose lock nobody holds belongs to a process that is gone (SIGKILL, an OOM kill): the
// first PCH compile of any later process of the same user removes it, and so does `kjit prune`. A root
// of a kjit from before the lock (no owner.lock) is removed once a day old. At most kKeptDomains domain
// folders are kept per process (a PCH of CUB's headers is about 180 MB), the least recently used removed
// first. A forked child makes a root of its own.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace kjit {

class PchFolders {
 public:
  // This process's folders.
  static PchFolders& process();

  // The folder of `domain` (hex digits), made on first use and marked most recently used; "" when none
  // can be made (a warning says why, once).
  std::string folder_for(const std::string& domain);
  // Removes the folder of `domain` (one whose PCH could not be written, e.g. a full TMPDIR).
  void drop(const std::string& domain);
  // This process's root ("" before the first folder_for, or when it could not be made).
  std::string root() const;

  static constexpr std::size_t kKeptDomains = 2;

 private:
  PchFolders() = default;
};

// A PCH root removed by remove_abandoned_pch_roots, with the bytes it held.
struct RemovedPchRoot {
  std::filesystem::path path;
  std::uint64_t bytes = 0;
};

// The folder PCH roots are made in: $TMPDIR when it is an absolute path, else /tmp.
std::filesystem::path pch_parent_dir();

// Removes the roots (kjit-pch-*) under `parent` that belong to the effective user and whose process is
// gone (their owner.lock is not held), and those without an owner.lock older than `legacy_age_s`. Never
// follows a symbolic link, never removes another user's folder, never throws.
std::vector<RemovedPchRoot> remove_abandoned_pch_roots(const std::filesystem::path& parent,
                                                       double legacy_age_s = 24 * 3600.0);

}  // namespace kjit
