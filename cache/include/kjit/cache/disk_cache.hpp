// DiskCache: checksummed single-file entries under <root>/v1/<target>/<key[0:2]>/<key>.kjit,
// a writable layer plus read-only layers, atomic publish, per-key flock, LRU size cap.
//
// As a Store (store.hpp) it is the writable layer: get() and put() read and write the root only. Each
// read-only layer is a Store of its own (ReadOnlyLayer, made from the config: layers()), so that a
// StoreChain puts the layers in their place in the lookup order. load() reads the root, then the
// layers, for the disk's own callers (load_or_produce, tools); list, prune and clear are the disk's.
// Entries are read by EntryReader (entry_reader.hpp), under the rules below.
//
// Failure policy: nothing here crashes the process or returns a damaged entry.
//  - A damaged entry is a miss; in the writable layer it is removed; a warning says so once per key.
//  - An entry this user may not read (EACCES) is not damaged: a miss, left in place, and a warning once
//    per layer saying it is not readable and what to do.
//  - Nothing that is not a regular file is ever opened in a way that blocks (file_read.hpp).
//  - An unusable writable root (cannot create, not writable, write fails midway, disk full) degrades to
//    "memory only": a warning once, then stores are skipped; loads still work where they can, silently
//    where they cannot. A temp file removed by another process during a store is not a disk failure:
//    the store is written again.
//  - Trust (trust.hpp): the writable root must belong to the user and not be writable by group or
//    others, else it is neither written nor read; an entry not owned by the user is loaded only from
//    a read-only layer whose kjit.lock lists its SHA-256 (warned once per file otherwise).
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "kjit/cache/cache_key.hpp"
#include "kjit/cache/cache_mode.hpp"
#include "kjit/cache/entry.hpp"
#include "kjit/cache/entry_reader.hpp"
#include "kjit/cache/read_only_layer.hpp"
#include "kjit/cache/store.hpp"
#include "kjit/cache/trust.hpp"

namespace kjit::cache {

// Plain configuration: the engine fills it from its settings (kjit/cache_config.hpp).
struct DiskCacheConfig {
  std::filesystem::path root;                 // writable layer root
  std::vector<std::filesystem::path> layers;  // read-only layer roots
  CacheMode mode = CacheMode::ReadWrite;
  std::optional<std::uint64_t> max_bytes;  // cap of the writable layer
  double lock_timeout_s = 300.0;
  // The longest the holder of a key's lock may wait for another machine's compile of that key (the
  // remote tier's lease, cluster_flight.hpp) before it compiles: the lock's waiters allow for it on top
  // of lock_timeout_s, so that no remote wait outlasts what the local waiters accept.
  double holder_remote_wait_s = 0;
};

// Where a listed entry lives and what it holds.
struct EntryInfo {
  std::filesystem::path path;
  std::string layer;  // "writable" or the read-only layer root
  bool valid = false;
  std::string error;  // why it is invalid
  std::uint64_t size = 0;
  std::optional<EntryMetadata> meta;
  std::string key;
};

struct PruneReport {
  std::uint64_t bytes_before = 0, bytes_after = 0;  // total size of the *.kjit entries
  std::size_t removed_entries = 0, removed_temp_files = 0, removed_damaged = 0;
  std::size_t removed_lock_files = 0;  // abandoned locks (nobody held them)
};

class DiskCache final : public Store, public KeyLocks {
 public:
  explicit DiskCache(DiskCacheConfig config);
  ~DiskCache() override;

  const DiskCacheConfig& config() const noexcept { return config_; }
  // True when stores go to disk (mode readwrite and the root is usable).
  bool writable() const override;
  // One line saying where the cache is and in which state, layers included (for `kjit info` and
  // warnings).
  std::string describe() const override;
  // Why the writable root is not used although the mode is readwrite, in the words of the warning that
  // said so ("cannot create /h/.cache/kjit: Not a directory", "... is not writable: Permission denied",
  // a failed write): "" while it is usable, and outside readwrite mode (nothing is written by design).
  std::string problem() const;

  // Store: the writable layer (the root) alone, with load()'s validation and policy; put() is store().
  // A miss in mode off and for a root refused at construction (others could write it).
  // Throws kjit::ValueError when `target` cannot be a directory name.
  std::optional<Entry> get(const CacheKey& key, const std::string& target) override;
  bool put(const Entry& entry) override { return store(entry); }
  KeyLocks* key_locks() override { return this; }
  // KeyLocks: the key's flock in the writable root, waited for at most config().lock_timeout_s +
  // holder_remote_wait_s (then kjit::Error). nullptr, after degrading to memory only (a warning once),
  // when the lock file cannot be made.
  std::unique_ptr<KeyLock> lock(const CacheKey& key, const std::string& target) override;
  // The read-only layers of config().layers (empty paths skipped), in order; none in mode off.
  const std::vector<std::shared_ptr<ReadOnlyLayer>>& layers() const noexcept { return layers_; }

  // Path of an entry in the writable layer.
  std::filesystem::path entry_path(const CacheKey& key, const std::string& target) const;

  // Looks in the writable layer, then each read-only layer: get(), then each of layers().
  // Validates everything (the entry's key, and filed_target(meta) == target); a damaged entry is a
  // miss (removed if in the writable layer; warned once). A hit in the writable layer refreshes the
  // entry's mtime (LRU).
  // Throws kjit::ValueError when `target` cannot be a directory name.
  std::optional<Entry> load(const CacheKey& key, const std::string& target);

  // Atomic publish: temp file in the same directory, write, fsync, rename, fsync dir. The entry is
  // filed under filed_target(entry.meta). Returns false (after a warning once) when the entry could
  // not be stored, and false without a warning outside readwrite mode; never throws for I/O.
  bool store(const Entry& entry);

  // Load, else produce under the per-key lock and store: N processes that miss the same key run
  // `produce` once between them. `produced` tells whether this call ran it. A StoreChain of this disk
  // and its layers (StoreChain::get_or_produce), for the disk's own callers and tools.
  // In a non-writable cache, `produce` runs without a lock and nothing is stored.
  // Exceptions from `produce` propagate (the lock is released). `produce` must return an entry with
  // `key` and filed_target(meta) == target (else kjit::Error). Waiting longer than
  // config().lock_timeout_s + holder_remote_wait_s for another process's compile throws kjit::Error.
  Entry load_or_produce(const CacheKey& key, const std::string& target, const std::function<Entry()>& produce,
                        bool* produced);

  // Every entry in every layer, validated.
  std::vector<EntryInfo> list() const;
  // Evicts least recently used entries of the writable layer until it holds at most max_bytes
  // (default: config max_bytes; none = only clean-up), removes damaged entries and stale temp files.
  PruneReport prune(std::optional<std::uint64_t> max_bytes = std::nullopt);
  // Removes every entry, lock and temp file of the writable layer. Returns entries removed.
  // Lock files currently held (a compile in progress) are left to their holder.
  // prune() and clear() change nothing unless the mode is readwrite.
  std::size_t clear();

 private:
  void degrade(const std::string& why);
  // The cheap size-only LRU pass after a store (no validation); never evicts `keep`.
  void evict_to(std::uint64_t max_bytes, const std::filesystem::path& keep);
  struct Layer {
    std::filesystem::path root;
    std::string label;       // EntryInfo::layer
    bool is_writable_layer;  // the root (whether or not the mode lets it be written)
  };
  // Layers that list() reads, the writable root first; none in mode off.
  std::vector<Layer> read_layers() const;

  DiskCacheConfig config_;
  uid_t uid_;                // the effective user: the owner entries must have to be trusted
  EntryReader root_reader_;  // reads config_.root
  std::vector<std::shared_ptr<ReadOnlyLayer>> layers_;
  mutable std::mutex mu_;
  bool usable_ = false;          // writable root exists and is usable
  bool degraded_ = false;        // degrade() has warned; stores are skipped from now on
  bool root_untrusted_ = false;  // others could have written the root: it is not even read
  bool root_unusable_ = false;   // the constructor found the root unusable (and warned once)
  std::string state_;            // human-readable state
  std::string problem_;          // why degrade() made the cache memory only ("" until it did)
};

}  // namespace kjit::cache
