// ReadOnlyLayer: one read-only layer of a DiskCache (KJIT_CACHE_PATH: a warm cache baked into an image)
// as a Store, so that a StoreChain consults it in its place, after the writable disk.
//
// The layer is read by its DiskCache, under the same rules as every disk entry (trust.hpp: an entry not
// owned by the user is loaded only when the layer's kjit.lock lists its SHA-256; entry_check.hpp), with
// the same warnings once: the trust state (the user, each layer's kjit.lock as last read) is the disk
// cache's, as are listing and verifying the layers (`kjit ls`, `kjit verify`). Never written.
#pragma once

#include <cstddef>
#include <memory>
#include <optional>
#include <string>

#include "kjit/cache/disk_cache.hpp"
#include "kjit/cache/store.hpp"

namespace kjit::cache {

class ReadOnlyLayer final : public Store {
 public:
  // Layer `index` of disk->config().layers. Throws kjit::ValueError for a null disk or an index out of
  // range.
  ReadOnlyLayer(std::shared_ptr<DiskCache> disk, std::size_t index);

  std::optional<Entry> get(const CacheKey& key, const std::string& target) override;
  bool put(const Entry&) override { return false; }  // a deployment artifact: read in place
  bool writable() const override { return false; }
  std::string describe() const override;

 private:
  std::shared_ptr<DiskCache> disk_;
  std::size_t index_;
};

}  // namespace kjit::cache
