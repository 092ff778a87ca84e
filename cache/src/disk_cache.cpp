// DiskCache: construction, load, store, load_or_produce (list/prune/clear: disk_cache_maintenance.cpp).
#include "kjit/cache/disk_cache.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

#include "kjit/cache/atomic_file.hpp"
#include "kjit/cache/entry_check.hpp"
#include "kjit/cache/file_lock.hpp"
#include "kjit/cache/file_read.hpp"
#include "kjit/cache/layout.hpp"
#include "kjit/cache/posix_error.hpp"
#include "kjit/cache/private_dir.hpp"
#include "kjit/error.hpp"
#include "kjit/log.hpp"

namespace kjit::cache {
namespace fs = std::filesystem;

DiskCache::DiskCache(DiskCacheConfig config) : config_(std::move(config)), uid_(::geteuid()) {
  if (config_.mode != CacheMode::ReadWrite) {
    state_ = to_string(config_.mode);  // nothing is created outside readwrite mode
    return;
  }
  if (config_.root.empty()) {
    degrade("no cache directory is configured");
    return;
  }
  // Every `return` below the first check leaves the root unusable, said once by degrade().
  root_unusable_ = true;
  std::string why = make_private_dirs(config_.root);
  if (!why.empty()) {
    degrade(why);
    return;
  }
  if (::access(config_.root.c_str(), W_OK | X_OK) != 0) {
    degrade(config_.root.string() + " is not writable: " + errno_text(errno));
    return;
  }
  struct stat st {};
  if (::stat(config_.root.c_str(), &st) != 0) {
    degrade("cannot stat " + config_.root.string() + ": " + errno_text(errno));
    return;
  }
  why = ownership_problem(config_.root, st, uid_);
  if (!why.empty()) {
    root_untrusted_ = true;
    degrade(why + ", so others could plant kernels in it: kjit neither writes to it nor loads from "
            "it (chmod go-w, or chown it, or pick another KJIT_CACHE_DIR)");
    return;
  }
  root_unusable_ = false;
  usable_ = true;
  state_ = "writable";
}

DiskCache::~DiskCache() = default;

bool DiskCache::writable() const {
  std::lock_guard<std::mutex> lock(mu_);
  return config_.mode == CacheMode::ReadWrite && usable_;
}

std::string DiskCache::describe() const {
  std::string out = config_.root.string() + " (" + to_string(config_.mode);
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (config_.mode == CacheMode::ReadWrite) out += ", " + state_;
    else if (config_.mode == CacheMode::Off) out += ": no disk cache";
  }
  if (config_.max_bytes) out += ", max " + std::to_string(*config_.max_bytes) + " bytes";
  out += ")";
  if (!config_.layers.empty() && config_.mode != CacheMode::Off) {
    out += " + read-only layers:";
    for (const auto& l : config_.layers) out += " " + l.string();
  }
  return out;
}

void DiskCache::degrade(const std::string& why) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    usable_ = false;
    if (degraded_) return;
    degraded_ = true;
    state_ = "memory only: " + why;
  }
  log::warn("kjit cache " + config_.root.string() + ": " + why +
            "; kernels are cached in memory only for this process. Make the directory writable "
            "(or free space), or set KJIT_CACHE_DIR to another directory; KJIT_CACHE_MODE=off "
            "turns the disk cache off.");
}

fs::path DiskCache::entry_path(const CacheKey& key, const std::string& target) const {
  return layout::entry_path(config_.root, key, target);
}

std::vector<DiskCache::Layer> DiskCache::read_layers() const {
  std::vector<Layer> out;
  if (config_.mode == CacheMode::Off) return out;
  if (!config_.root.empty()) out.push_back({config_.root, "writable", true});
  for (const auto& l : config_.layers)
    if (!l.empty()) out.push_back({l, l.string(), false});
  return out;
}

std::optional<Entry> DiskCache::load_from(const fs::path& layer_root, bool is_writable_layer,
                                          const CacheKey& key, const std::string& target) {
  const fs::path path = layout::entry_path(layer_root, key, target);
  FileRead file = read_regular_file(path, kMaxEntryFileBytes);
  if (file.absent) return std::nullopt;
  if (file.denied) {
    warn_unreadable(layer_root, is_writable_layer, path, file.error);
    return std::nullopt;
  }
  // A root this process cannot write (readonly / strict mode, or degraded) is read like any read-only
  // layer: its kjit.lock may vouch for entries others wrote.
  const bool may_modify = is_writable_layer && writable();

  if (file.ok()) {
    const Distrust d = distrust(layer_root, !may_modify, path, file.st, file.bytes);
    if (!d.why.empty()) {
      log::warn_once(d.topic,
                     "kjit cache: not loading " + path.string() + ": " + d.why +
                         ". kjit loads only entries written by you, or listed with their SHA-256 in "
                         "the kjit.lock of a read-only layer (KJIT_CACHE_PATH; `kjit export DIR` "
                         "writes one); " + miss_consequence() +
                         (d.topic.rfind("cache-untrusted-layer:", 0) == 0
                              ? " (said once for this layer)."
                              : "."));
      return std::nullopt;
    }
  }
  DecodeResult decoded;
  if (file.ok()) decoded = check_entry_bytes(file.bytes, key, target);
  else decoded.error = file.error;
  if (decoded.entry) {
    if (may_modify) ::futimens(file.fd.get(), nullptr);  // LRU: a hit is a use
    return std::move(decoded.entry);
  }

  // Damaged (or unreadable). Remove it only if `path` still names the file we read: another process
  // may have just published a good entry under the same name.
  bool removed = false;
  if (may_modify && file.fd && S_ISREG(file.st.st_mode)) {
    struct stat now {};
    if (::stat(path.c_str(), &now) == 0 && now.st_dev == file.st.st_dev &&
        now.st_ino == file.st.st_ino)
      removed = ::unlink(path.c_str()) == 0;
  }
  std::string what = removed ? "it was removed"
                     : is_writable_layer ? "it was left in place"
                                         : "it is in a read-only layer and was left in place";
  log::Event damaged;
  damaged.kind = "cache_damaged";
  damaged.message = "kjit cache: ignoring damaged entry " + path.string() + " (" + decoded.error + "); " + what +
                    " and " + miss_consequence() + ".";
  damaged.key = key.hex();
  damaged.target = target;
  log::warn_once("cache-damaged:" + key.hex(), std::move(damaged));
  return std::nullopt;
}

std::string DiskCache::miss_consequence() const {
  return config_.mode == CacheMode::Strict
             ? "this is a cache miss (KJIT_CACHE_MODE=strict: it will not be recompiled)"
             : "it will be recompiled";
}

void DiskCache::warn_unreadable(const fs::path& layer_root, bool is_writable_layer, const fs::path& path,
                                const std::string& error) const {
  // A root found unusable at construction was warned about then (degrade); that it cannot be read
  // either adds nothing, and saying so on every lookup would bury the one warning that matters.
  if (is_writable_layer && root_unusable_) return;
  // The user's own cache was written into by someone else; any other folder (a layer, or the root in
  // readonly / strict mode: a deployed cache) was made by someone else and is to be opened to readers.
  const bool own_cache = is_writable_layer && config_.mode == CacheMode::ReadWrite;
  const std::string fix =
      own_cache
          ? "another user wrote into your cache folder (a run with sudo, say): give it back with "
            "`chown -R " + std::to_string(uid_) + " " + layer_root.string() + "`, or run `kjit clear`"
          : "if another user made this layer (a `kjit export` run as root makes owner-only files), "
            "make it readable to everyone: `chmod -R a+rX " + layer_root.string() + "`";
  log::warn_once("cache-unreadable:" + layer_root.string(),
                 "kjit cache: not loading " + path.string() + ": " + error + "; " + miss_consequence() +
                     ". The file is there but this user may not read it: " + fix +
                     " (said once for this folder).");
}

std::shared_ptr<const LayerLock> DiskCache::layer_lock(const fs::path& layer_root) const {
  {
    std::lock_guard<std::mutex> guard(mu_);
    auto it = layer_locks_.find(layer_root);
    if (it != layer_locks_.end() && it->second->current(layer_root)) return it->second;
  }
  auto fresh = std::make_shared<const LayerLock>(LayerLock::read(layer_root, uid_));  // outside mu_
  std::lock_guard<std::mutex> guard(mu_);
  layer_locks_[layer_root] = fresh;
  return fresh;
}

DiskCache::Distrust DiskCache::distrust(const fs::path& layer_root, bool read_only_layer, const fs::path& path,
                                        const struct stat& st, std::string_view bytes) const {
  Distrust d;
  d.why = owned_path_problem(layer_root, path, st, uid_);
  d.topic = "cache-untrusted:" + path.string();
  if (d.why.empty() || !read_only_layer) return d;  // the writable root vouches only for the user's own files
  const auto lock = layer_lock(layer_root);
  const std::string vouch = lock->vouches_for(path.lexically_relative(layer_root).generic_string(), bytes);
  if (vouch.empty()) return {};
  d.why += ", and " + vouch;
  if (!lock->problem().empty()) d.topic = "cache-untrusted-layer:" + layer_root.string() + ":" + lock->problem();
  return d;
}

std::optional<Entry> DiskCache::get(const CacheKey& key, const std::string& target) {
  layout::check_target(target);
  if (config_.mode == CacheMode::Off || config_.root.empty()) return std::nullopt;
  if (root_untrusted_) return std::nullopt;  // refused (and warned) at construction
  return load_from(config_.root, true, key, target);
}

std::optional<Entry> DiskCache::load_layer(std::size_t index, const CacheKey& key, const std::string& target) {
  if (index >= config_.layers.size())
    throw ValueError("kjit cache: read-only layer " + std::to_string(index) + " does not exist: " + describe() +
                     " has " + std::to_string(config_.layers.size()) + " layers");
  layout::check_target(target);
  const fs::path& root = config_.layers[index];
  if (config_.mode == CacheMode::Off || root.empty()) return std::nullopt;
  return load_from(root, false, key, target);
}

std::optional<Entry> DiskCache::load(const CacheKey& key, const std::string& target) {
  if (auto e = get(key, target)) return e;
  for (std::size_t i = 0; i < config_.layers.size(); ++i)
    if (auto e = load_layer(i, key, target)) return e;
  return std::nullopt;
}

bool DiskCache::store(const Entry& entry) {
  if (config_.mode != CacheMode::ReadWrite) return false;  // by design, not a failure: no warning
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!usable_) return false;  // already degraded (and warned)
  }
  const fs::path path = entry_path(entry.key, filed_target(entry.meta));
  const fs::path dir = path.parent_path();
  const std::string bytes = encode_entry(entry);
  // ENOENT while publishing means another process removed our temp file or its folder (an older
  // kjit's `clear`, an `rm -r`): the disk is fine, so write it again. Only a failure of the disk
  // itself (full, read-only, not permitted) makes the cache memory-only.
  constexpr int kAttempts = 3;
  for (int attempt = 1;; ++attempt) {
    std::string why = make_private_dirs(dir);
    if (!why.empty()) {
      degrade("cannot write to " + dir.string() + " (" + why + ")");
      return false;
    }
    const auto failure = publish_atomically(path, bytes);
    if (!failure) break;
    if (failure->err != ENOENT) {
      degrade("cannot write to " + dir.string() + " (" + failure->message() + ")");
      return false;
    }
    if (attempt == kAttempts) {
      log::warn_once("cache-store-vanished:" + path.string(),
                     "kjit cache: did not store " + path.string() + ": its temporary file was removed " +
                         std::to_string(kAttempts) + " times while it was written (" + failure->message() +
                         "), by another process cleaning the cache; it stays in memory for this "
                         "process and later entries are stored as usual.");
      return false;
    }
  }
  log::Event stored;
  stored.level = log::Level::Debug;
  stored.kind = "cache_store";
  stored.message = "stored " + entry.meta.name_expression + " for " + entry.meta.target + " in " + path.string();
  stored.key = entry.key.hex();
  stored.template_name = entry.meta.template_name;
  stored.kernel = entry.meta.name_expression;
  stored.target = entry.meta.target;
  log::emit(std::move(stored));
  if (config_.max_bytes) evict_to(*config_.max_bytes, path);
  return true;
}

Entry DiskCache::load_or_produce(const CacheKey& key, const std::string& target,
                                 const std::function<Entry()>& produce, bool* produced) {
  if (produced) *produced = false;
  // Warnings and log events of the compile and store wait until the per-key lock is released: a log
  // sink may block (Python's takes the GIL) and must not do so while others wait on this lock.
  log::Deferred deferred;
  if (auto hit = load(key, target)) return std::move(*hit);

  auto run = [&] {
    Entry e = produce();
    if (produced) *produced = true;
    if (e.key != key || filed_target(e.meta) != target)
      throw Error("kjit cache: the compiled entry does not match its request (asked for key " +
                  key.hex() + " target '" + target + "', produced key " + e.key.hex() +
                  " requested_target '" + filed_target(e.meta) +
                  "'); the producer must return the key it was called for and set "
                  "meta.requested_target (or meta.target) to the target it was called for, else "
                  "the entry could never be found again");
    return e;
  };
  if (!writable()) return run();  // readonly / strict / off / degraded: no lock, nothing stored

  const fs::path lock_file = layout::lock_path(config_.root, key, target);
  std::string why = make_private_dirs(lock_file.parent_path());
  FileLock lock;
  if (why.empty()) lock = FileLock::acquire(lock_file, config_.lock_timeout_s, &why);  // may throw
  if (!lock.locked()) {
    degrade(why);
    return run();
  }
  // Someone may have published it while we waited.
  if (auto hit = load(key, target)) return std::move(*hit);  // `lock` releases (and unlinks)
  Entry e = run();  // if it throws, `lock` is released (and unlinked) on the way out
  store(e);
  lock.release();  // unlink while holding, then unlock
  return e;
}

}  // namespace kjit::cache
