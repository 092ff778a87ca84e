// Test helpers around the header index (cache/header_index.hpp) and the folders template loads read.
#pragma once

#include <chrono>
#include <filesystem>
#include <memory>
#include <utility>

#include "kjit/cache/header_index.hpp"
#include "kjit/template.hpp"

namespace kjit::testing {

// The tag the tests' indexes carry.
constexpr const char* kIndexTag = "kjit test";

// A writable index at `root` with a zero racy window: files the test has just written count.
inline std::shared_ptr<cache::HeaderIndex> index_in(const std::filesystem::path& root) {
  return std::make_shared<cache::HeaderIndex>(root, true, kIndexTag, std::chrono::nanoseconds(0));
}

// Template loads use `index` for the scope of the object (or an index_in(root)).
class UseIndex {
 public:
  explicit UseIndex(std::shared_ptr<cache::HeaderIndex> index) { use_header_index(std::move(index)); }
  explicit UseIndex(const std::filesystem::path& root) : UseIndex(index_in(root)) {}
  ~UseIndex() { use_header_index(nullptr); }
};

// kjit's templates folder is `dir` for the scope of the object.
class KjitTemplatesIn {
 public:
  explicit KjitTemplatesIn(const std::filesystem::path& dir) : old_(builtin_templates_dir()) {
    set_builtin_templates_dir(dir);
  }
  ~KjitTemplatesIn() { set_builtin_templates_dir(old_); }

 private:
  std::filesystem::path old_;
};

}  // namespace kjit::testing
