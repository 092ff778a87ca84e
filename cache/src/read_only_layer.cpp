#include "kjit/cache/read_only_layer.hpp"

#include <unistd.h>

#include <utility>

#include "kjit/cache/layout.hpp"
#include "kjit/error.hpp"

namespace kjit::cache {

namespace {
std::filesystem::path checked_root(std::filesystem::path root) {
  if (root.empty()) throw ValueError("kjit cache: a read-only layer needs a directory, got an empty path");
  return root;
}
}  // namespace

ReadOnlyLayer::ReadOnlyLayer(std::filesystem::path root, CacheMode mode)
    : reader_(checked_root(std::move(root)), ::geteuid()), mode_(mode) {}

std::optional<Entry> ReadOnlyLayer::get(const CacheKey& key, const std::string& target) {
  layout::check_target(target);
  if (mode_ == CacheMode::Off) return std::nullopt;
  EntryReader::Policy policy;
  policy.mode = mode_;  // not the writable layer, never modified
  return reader_.read(key, target, policy);
}

std::string ReadOnlyLayer::describe() const { return root().string() + " (read-only layer)"; }

}  // namespace kjit::cache
