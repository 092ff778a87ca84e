// ReadOnlyLayer: a read-only cache root (KJIT_CACHE_PATH: a warm cache baked into an image, `kjit export`)
// as a Store, which a StoreChain consults after the writable disk.
//
// Read under the rules of every disk entry (entry_reader.hpp): an entry the user does not own is loaded
// only when the layer's kjit.lock lists its SHA-256; a damaged entry is a miss, warned once and left in
// place. Never written: a layer is a deployment artifact, read in place. The DiskCache it is configured
// with makes it (DiskCache::layers()) and lists it (`kjit ls`, `kjit verify`).
#pragma once

#include <filesystem>
#include <optional>
#include <string>

#include "kjit/cache/cache_mode.hpp"
#include "kjit/cache/entry_reader.hpp"
#include "kjit/cache/store.hpp"

namespace kjit::cache {

class ReadOnlyLayer final : public Store {
 public:
  // `mode`: the cache mode of the process (off: every lookup is a miss; strict: the warnings say a miss
  // is not recompiled). Throws kjit::ValueError for an empty root.
  ReadOnlyLayer(std::filesystem::path root, CacheMode mode);

  const std::filesystem::path& root() const noexcept { return reader_.root(); }

  // Throws kjit::ValueError when `target` cannot be a directory name.
  std::optional<Entry> get(const CacheKey& key, const std::string& target) override;
  bool put(const Entry&) override { return false; }
  bool writable() const override { return false; }
  std::string describe() const override;

 private:
  EntryReader reader_;
  CacheMode mode_;
};

}  // namespace kjit::cache
