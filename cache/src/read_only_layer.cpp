#include "kjit/cache/read_only_layer.hpp"

#include <utility>

#include "kjit/error.hpp"

namespace kjit::cache {

ReadOnlyLayer::ReadOnlyLayer(std::shared_ptr<DiskCache> disk, std::size_t index)
    : disk_(std::move(disk)), index_(index) {
  if (!disk_) throw ValueError("kjit cache: a ReadOnlyLayer needs the DiskCache it belongs to, got none");
  if (index_ >= disk_->config().layers.size())
    throw ValueError("kjit cache: read-only layer " + std::to_string(index_) + " does not exist: the disk cache " +
                     disk_->describe() + " has " + std::to_string(disk_->config().layers.size()) + " layers");
}

std::optional<Entry> ReadOnlyLayer::get(const CacheKey& key, const std::string& target) {
  return disk_->load_layer(index_, key, target);
}

std::string ReadOnlyLayer::describe() const {
  return disk_->config().layers[index_].string() + " (read-only layer)";
}

}  // namespace kjit::cache
