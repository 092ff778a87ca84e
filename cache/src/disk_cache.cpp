// DiskCache: construction, load, store, load_or_produce (list/prune/clear: disk_cache_maintenance.cpp).
#include "kjit/cache/disk_cache.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

#include "kjit/cache/atomic_file.hpp"
#include "kjit/cache/file_lock.hpp"
#include "kjit/cache/layout.hpp"
#include "kjit/cache/posix_error.hpp"
#include "kjit/cache/private_dir.hpp"
#include "kjit/cache/store_chain.hpp"
#include "kjit/error.hpp"
#include "kjit/log.hpp"

namespace kjit::cache {
namespace fs = std::filesystem;

namespace {
// The read-only layers `config` names, in order: none in mode off (no disk at all), empty paths skipped.
std::vector<std::shared_ptr<ReadOnlyLayer>> make_layers(const DiskCacheConfig& config) {
  std::vector<std::shared_ptr<ReadOnlyLayer>> out;
  if (config.mode == CacheMode::Off) return out;
  for (const auto& l : config.layers)
    if (!l.empty()) out.push_back(std::make_shared<ReadOnlyLayer>(l, config.mode));
  return out;
}
}  // namespace

DiskCache::DiskCache(DiskCacheConfig config)
    : config_(std::move(config)), uid_(::geteuid()), root_reader_(config_.root, uid_), layers_(make_layers(config_)) {
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
  struct stat st{};
  if (::stat(config_.root.c_str(), &st) != 0) {
    degrade("cannot stat " + config_.root.string() + ": " + errno_text(errno));
    return;
  }
  why = ownership_problem(config_.root, st, uid_);
  if (!why.empty()) {
    root_untrusted_ = true;
    degrade(why +
            ", so others could plant kernels in it: kjit neither writes to it nor loads from "
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
    if (config_.mode == CacheMode::ReadWrite)
      out += ", " + state_;
    else if (config_.mode == CacheMode::Off)
      out += ": no disk cache";
  }
  if (config_.max_bytes) out += ", max " + std::to_string(*config_.max_bytes) + " bytes";
  out += ")";
  if (!config_.layers.empty() && config_.mode != CacheMode::Off) {
    out += " + read-only layers:";
    for (const auto& l : config_.layers) out += " " + l.string();
  }
  return out;
}

std::string DiskCache::problem() const {
  std::lock_guard<std::mutex> lock(mu_);
  return problem_;
}

void DiskCache::degrade(const std::string& why) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    usable_ = false;
    if (degraded_) return;
    degraded_ = true;
    problem_ = why;
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
  for (const auto& l : layers_) out.push_back({l->root(), l->root().string(), false});
  return out;
}

std::optional<Entry> DiskCache::get(const CacheKey& key, const std::string& target) {
  layout::check_target(target);
  if (config_.mode == CacheMode::Off || config_.root.empty()) return std::nullopt;
  if (root_untrusted_) return std::nullopt;  // refused (and warned) at construction
  EntryReader::Policy policy;
  policy.mode = config_.mode;
  policy.writable_layer = true;
  // A root this process cannot write (readonly / strict mode, or degraded) is read like any read-only
  // layer: its kjit.lock may vouch for entries others wrote.
  policy.may_modify = writable();
  policy.quiet_unreadable = root_unusable_;
  return root_reader_.read(key, target, policy);
}

std::optional<Entry> DiskCache::load(const CacheKey& key, const std::string& target) {
  if (auto e = get(key, target)) return e;
  for (const auto& layer : layers_)
    if (auto e = layer->get(key, target)) return e;
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

namespace {
class HeldFileLock final : public KeyLock {
 public:
  explicit HeldFileLock(FileLock lock) : lock_(std::move(lock)) {}
  ~HeldFileLock() override { lock_.release(); }  // unlink while holding, then unlock

 private:
  FileLock lock_;
};
}  // namespace

std::unique_ptr<KeyLock> DiskCache::lock(const CacheKey& key, const std::string& target) {
  if (!writable()) return nullptr;
  const fs::path lock_file = layout::lock_path(config_.root, key, target);
  std::string why = make_private_dirs(lock_file.parent_path());
  FileLock lock;
  if (why.empty())  // may throw
    lock = FileLock::acquire(lock_file, config_.lock_timeout_s + config_.holder_remote_wait_s, &why);
  if (!lock.locked()) {
    degrade(why);
    return nullptr;
  }
  return std::make_unique<HeldFileLock>(std::move(lock));
}

Entry DiskCache::load_or_produce(const CacheKey& key, const std::string& target, const std::function<Entry()>& produce,
                                 bool* produced) {
  if (produced) *produced = false;
  // This disk and its read-only layers, as the engine's chain has them (owned by the caller: no deleter).
  std::vector<StoreChain::Level> levels{{std::shared_ptr<Store>(std::shared_ptr<Store>(), this), false}};
  for (const auto& layer : layers_) levels.push_back({layer, false});
  const StoreChain chain(std::move(levels));
  if (auto hit = chain.get(key, target)) return std::move(hit->entry);
  StoreChain::Hit hit = chain.get_or_produce(key, target, produce);
  if (produced) *produced = hit.produced;
  return std::move(hit.entry);
}

}  // namespace kjit::cache
