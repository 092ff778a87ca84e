#include "kjit/cache/entry_reader.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <utility>

#include "kjit/cache/entry_check.hpp"
#include "kjit/cache/file_read.hpp"
#include "kjit/cache/layout.hpp"
#include "kjit/log.hpp"

namespace kjit::cache {
namespace fs = std::filesystem;

std::string miss_consequence(CacheMode mode) {
  return mode == CacheMode::Strict ? "this is a cache miss (KJIT_CACHE_MODE=strict: it will not be recompiled)"
                                   : "it will be recompiled";
}

EntryReader::EntryReader(fs::path root, uid_t uid) : root_(std::move(root)), uid_(uid) {}

std::optional<Entry> EntryReader::read(const CacheKey& key, const std::string& target, const Policy& policy) const {
  const fs::path path = layout::entry_path(root_, key, target);
  FileRead file = read_regular_file(path, kMaxEntryFileBytes);
  if (file.absent) return std::nullopt;
  if (!file.fd) {  // not opened (denied, a name too long, an I/O error): nothing was read, nothing is damaged
    warn_unreadable(policy, path, file.error, file.denied);
    return std::nullopt;
  }
  if (file.ok()) {
    // A root this process does not write (a layer; the cache root in readonly / strict mode, or
    // degraded) is read as a read-only layer: its kjit.lock may vouch for entries others wrote.
    const Distrust d = distrust(!policy.may_modify, path, file.st, file.bytes);
    if (!d.why.empty()) {
      log::warn_once(d.topic,
                     "kjit cache: not loading " + path.string() + ": " + d.why +
                         ". kjit loads only entries written by you, or listed with their SHA-256 in "
                         "the kjit.lock of a read-only layer (KJIT_CACHE_PATH; `kjit export DIR` "
                         "writes one); " +
                         miss_consequence(policy.mode) +
                         (d.topic.rfind("cache-untrusted-layer:", 0) == 0 ? " (said once for this layer)." : "."));
      return std::nullopt;
    }
  }
  DecodeResult decoded;
  if (file.ok())
    decoded = check_entry_bytes(file.bytes, key, target);
  else
    decoded.error = file.error;
  if (decoded.entry) {
    if (policy.may_modify) ::futimens(file.fd.get(), nullptr);  // LRU: a hit is a use
    return std::move(decoded.entry);
  }

  // Damaged (or unreadable). Remove it only if `path` still names the file we read: another process
  // may have just published a good entry under the same name.
  bool removed = false;
  if (policy.may_modify && file.fd && S_ISREG(file.st.st_mode)) {
    struct stat now{};
    if (::stat(path.c_str(), &now) == 0 && now.st_dev == file.st.st_dev && now.st_ino == file.st.st_ino)
      removed = ::unlink(path.c_str()) == 0;
  }
  std::string what = removed                 ? "it was removed"
                     : policy.writable_layer ? "it was left in place"
                                             : "it is in a read-only layer and was left in place";
  log::Event damaged;
  damaged.kind = "cache_damaged";
  damaged.message = "kjit cache: ignoring damaged entry " + path.string() + " (" + decoded.error + "); " + what +
                    " and " + miss_consequence(policy.mode) + ".";
  damaged.key = key.hex();
  damaged.target = target;
  log::warn_once("cache-damaged:" + key.hex(), std::move(damaged));
  return std::nullopt;
}

void EntryReader::warn_unreadable(const Policy& policy, const fs::path& path, const std::string& error,
                                  bool denied) const {
  // A root found unusable at construction was warned about then (degrade); that it cannot be read
  // either adds nothing, and saying so on every lookup would bury the one warning that matters.
  if (policy.quiet_unreadable) return;
  if (!denied) {
    log::warn_once("cache-unopenable:" + root_.string(),
                   "kjit cache: cannot open " + path.string() + ": " + error + "; " + miss_consequence(policy.mode) +
                       ". Nothing in " + root_.string() +
                       " can be loaded while this lasts; if the path is too "
                       "long, pick a shorter KJIT_CACHE_DIR or KJIT_CACHE_PATH entry (said once for this folder).");
    return;
  }
  // The user's own cache was written into by someone else; any other folder (a layer, or the root in
  // readonly / strict mode: a deployed cache) was made by someone else and is to be opened to readers.
  const bool own_cache = policy.writable_layer && policy.mode == CacheMode::ReadWrite;
  const std::string fix = own_cache
                              ? "another user wrote into your cache folder (a run with sudo, say): give it back with "
                                "`chown -R " +
                                    std::to_string(uid_) + " " + root_.string() + "`, or run `kjit clear`"
                              : "if another user made this layer (a `kjit export` run as root makes owner-only files), "
                                "make it readable to everyone: `chmod -R a+rX " +
                                    root_.string() + "`";
  log::warn_once("cache-unreadable:" + root_.string(),
                 "kjit cache: not loading " + path.string() + ": " + error + "; " + miss_consequence(policy.mode) +
                     ". The file is there but this user may not read it: " + fix + " (said once for this folder).");
}

std::shared_ptr<const LayerLock> EntryReader::layer_lock() const {
  {
    std::lock_guard<std::mutex> guard(mu_);
    if (lock_ && lock_->current(root_)) return lock_;
  }
  auto fresh = std::make_shared<const LayerLock>(LayerLock::read(root_, uid_));  // outside mu_
  std::lock_guard<std::mutex> guard(mu_);
  lock_ = fresh;
  return fresh;
}

EntryReader::Distrust EntryReader::distrust(bool read_only, const fs::path& path, const struct stat& st,
                                            std::string_view bytes) const {
  Distrust d;
  d.why = owned_path_problem(root_, path, st, uid_);
  d.topic = "cache-untrusted:" + path.string();
  if (d.why.empty() || !read_only) return d;  // the writable root vouches only for the user's own files
  const auto lock = layer_lock();
  const std::string vouch = lock->vouches_for(path.lexically_relative(root_).generic_string(), bytes);
  if (vouch.empty()) return {};
  d.why += ", and " + vouch;
  if (!lock->problem().empty()) d.topic = "cache-untrusted-layer:" + root_.string() + ":" + lock->problem();
  return d;
}

}  // namespace kjit::cache
