// MapStore: a cache::Store over a std::map, for unit tests of the store chain and of stores registered by
// URL scheme: entry bytes by "<key>/<target>", validated on get like a disk entry; counts its calls.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <utility>

#include "kjit/cache/entry.hpp"
#include "kjit/cache/entry_check.hpp"
#include "kjit/cache/store.hpp"

namespace kjit::testing {

class MapStore : public cache::Store {
 public:
  explicit MapStore(std::string name, bool writable = true) : name_(std::move(name)), writable_(writable) {}

  std::optional<cache::Entry> get(const cache::CacheKey& key, const std::string& target) override {
    ++gets;
    auto it = bytes.find(slot(key, target));
    if (it == bytes.end()) return std::nullopt;
    return cache::check_entry_bytes(it->second, key, target).entry;
  }
  bool put(const cache::Entry& e) override {
    ++puts;
    if (!writable_) return false;
    seed(e);
    return true;
  }
  // Holds `e` without counting a put (a test's set-up).
  void seed(const cache::Entry& e) { bytes[slot(e.key, cache::filed_target(e.meta))] = cache::encode_entry(e); }
  bool writable() const override { return writable_; }
  std::string describe() const override { return name_; }

  static std::string slot(const cache::CacheKey& key, const std::string& target) { return key.hex() + "/" + target; }

  std::map<std::string, std::string> bytes;
  int gets = 0, puts = 0;

 private:
  std::string name_;
  bool writable_;
};

}  // namespace kjit::testing
