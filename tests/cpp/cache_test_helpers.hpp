// Helpers shared by the cache test suites (test_entry, test_disk_cache, test_cache_*).
#pragma once

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include "kjit/cache/cache_key.hpp"
#include "kjit/cache/disk_cache.hpp"
#include "kjit/cache/entry.hpp"
#include "kjit/cache/sha256.hpp"
#include "log_capture.hpp"

namespace kjit::testing {

// A key per test seed: warn_once topics are per process, so tests must not share keys.
inline cache::CacheKey key_for(const std::string& seed) {
  return cache::CacheKey(cache::Sha256::of("kjit-test-key:" + seed));
}

inline cache::Entry make_entry(const std::string& seed, const std::string& target = "sm_90",
                               std::size_t payload_size = 64) {
  cache::Entry e;
  e.key = key_for(seed);
  e.meta.template_name = "add.cu";
  e.meta.template_digest = cache::to_hex(cache::Sha256::of("template:" + seed));
  e.meta.kernel = "add";
  e.meta.name_expression = "add<float, 4>";
  e.meta.lowered_name = "_Z3addIfLi4EEvPT_";
  e.meta.options = {"-std=c++17", "--gpu-architecture=" + target};
  e.meta.target = target;
  e.meta.requested_target = target;
  e.meta.nvrtc_version = "13.0 build 13.0.88";
  e.meta.output = cache::OutputKind::Cubin;
  e.meta.compile_ms = 12.5;
  e.meta.created = "2025-01-01T00:00:00Z";
  e.meta.kjit_version = "0.1.0";
  e.payload.resize(payload_size);
  for (std::size_t i = 0; i < payload_size; ++i)
    e.payload[i] =
        static_cast<char>((i * 131 + seed.size() * 7 + static_cast<unsigned char>(seed.empty() ? 0 : seed[0])) & 0xff);
  return e;
}

inline bool same_metadata(const cache::EntryMetadata& a, const cache::EntryMetadata& b) {
  return a.template_name == b.template_name && a.template_digest == b.template_digest && a.kernel == b.kernel &&
         a.name_expression == b.name_expression && a.lowered_name == b.lowered_name && a.options == b.options &&
         a.target == b.target && a.requested_target == b.requested_target && a.nvrtc_version == b.nvrtc_version &&
         a.output == b.output && a.note == b.note && a.compile_ms == b.compile_ms && a.created == b.created &&
         a.kjit_version == b.kjit_version;
}

inline bool same_entry(const cache::Entry& a, const cache::Entry& b) {
  return a.key == b.key && a.payload == b.payload && same_metadata(a.meta, b.meta);
}

// Every regular file under `root` (recursively), sorted.
inline std::vector<std::filesystem::path> files_under(const std::filesystem::path& root) {
  std::vector<std::filesystem::path> out;
  std::error_code ec;
  for (auto it = std::filesystem::recursive_directory_iterator(root, ec);
       !ec && it != std::filesystem::recursive_directory_iterator(); it.increment(ec))
    if (it->is_regular_file()) out.push_back(it->path());
  std::sort(out.begin(), out.end());
  return out;
}

// Files under `root` whose name contains `part` (e.g. ".lock", ".tmp.").
inline std::vector<std::filesystem::path> files_named(const std::filesystem::path& root, const std::string& part) {
  std::vector<std::filesystem::path> out;
  for (auto& p : files_under(root))
    if (p.filename().string().find(part) != std::string::npos) out.push_back(p);
  return out;
}

inline cache::DiskCacheConfig cache_config(const std::filesystem::path& root,
                                           cache::CacheMode mode = cache::CacheMode::ReadWrite) {
  cache::DiskCacheConfig c;
  c.root = root;
  c.mode = mode;
  c.lock_timeout_s = 30;
  return c;
}

// The config of a cache at `root` with one read-only layer (`kjit export`'s output) at `layer`.
inline cache::DiskCacheConfig with_layer(const std::filesystem::path& root, const std::filesystem::path& layer) {
  cache::DiskCacheConfig c = cache_config(root);
  c.layers = {layer};
  return c;
}

// Stores `e` (a failure of the calling test if it is not stored) in a fresh cache at `root`; the entry's path for
// sm_90.
inline std::filesystem::path stored(const std::filesystem::path& root, const cache::Entry& e) {
  cache::DiskCache c(cache_config(root));
  EXPECT_TRUE(c.store(e));
  return c.entry_path(e.key, "sm_90");
}

inline unsigned file_mode(const std::filesystem::path& p) {
  struct stat st{};
  if (::stat(p.c_str(), &st) != 0) return 0xFFFFFFFFu;
  return st.st_mode & 07777;
}

}  // namespace kjit::testing
