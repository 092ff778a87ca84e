// EntryReader: reads the entry file of (key, target) under one cache root with the rules every disk
// entry obeys, for the writable disk cache (DiskCache) and each read-only layer (ReadOnlyLayer):
//  - nothing that is not a regular file is opened in a way that blocks (file_read.hpp);
//  - an entry is loaded only when the user owns it, or, in a root read as read-only, when the root's
//    kjit.lock lists its SHA-256 (trust.hpp);
//  - everything is validated (entry_check.hpp): a damaged entry is a miss, removed only from a root this
//    process may modify;
//  - each problem is warned once (per key, per file, or per root), saying what to do.
#pragma once

#include <sys/stat.h>
#include <sys/types.h>

#include <filesystem>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>

#include "kjit/cache/cache_key.hpp"
#include "kjit/cache/cache_mode.hpp"
#include "kjit/cache/entry.hpp"
#include "kjit/cache/trust.hpp"

namespace kjit::cache {

class EntryReader {
 public:
  // How the root is read, which the reader's owner knows.
  struct Policy {
    CacheMode mode = CacheMode::ReadWrite;  // the warnings say what a miss means (strict: no recompile)
    bool writable_layer = false;            // the root is KJIT_CACHE_DIR (whether or not the mode lets it be written)
    bool may_modify = false;                // this process writes the root: remove damaged entries, touch hits (LRU);
                                            // otherwise the root is read like a read-only layer (its kjit.lock vouches)
    bool quiet_unreadable = false;  // the root was reported unusable already: an entry it cannot open adds nothing
  };

  // `uid`: the effective user, the owner entries must have to be trusted.
  EntryReader(std::filesystem::path root, uid_t uid);

  const std::filesystem::path& root() const noexcept { return root_; }

  // The valid, trusted entry of (key, target) under the root, else nullopt (absent, unreadable,
  // untrusted or damaged: warned once). `target` must have passed layout::check_target.
  std::optional<Entry> read(const CacheKey& key, const std::string& target, const Policy& policy) const;

 private:
  // Why the entry at `path` (read as `bytes`, fstat `st`) may not be loaded (see trust.hpp); empty `why`
  // when it may. `topic` says once per what the warning is given: the file, or the whole root when its
  // lock is the problem.
  struct Distrust {
    std::string why, topic;
  };
  Distrust distrust(bool read_only, const std::filesystem::path& path, const struct stat& st,
                    std::string_view bytes) const;
  // The root's kjit.lock, read again when the file changed since it was last read.
  std::shared_ptr<const LayerLock> layer_lock() const;
  // Warns (once per root) that an entry's file could not be opened, for a reason other than its absence:
  // this user may not read it (`denied`: what to do), or its path cannot be opened at all (a root whose
  // name is too long, an I/O error). Such a file was never read, so it is not called damaged.
  void warn_unreadable(const Policy& policy, const std::filesystem::path& path, const std::string& error,
                       bool denied) const;

  std::filesystem::path root_;
  uid_t uid_;
  mutable std::mutex mu_;
  mutable std::shared_ptr<const LayerLock> lock_;  // as last read (under mu_)
};

// What a miss means in `mode`, for warnings: "it will be recompiled", or strict's cache miss.
std::string miss_consequence(CacheMode mode);

}  // namespace kjit::cache
