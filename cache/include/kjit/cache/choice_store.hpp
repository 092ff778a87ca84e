// ChoiceStore: tuned choices on disk, beside the kernels. An op that picks among kernel configurations
// (which tile shape, or cuBLAS) keeps the configuration it picked for a key, so that later processes,
// and a strict deployment that may not time anything, make the same pick (kjit::Choices, choices.hpp).
//
//   <root>/v1/choices/<name>.choice      one choice: {"kjit_choice":1,"tag":"...","key":"...","value":"..."}
//   <root>/v1/choices/<name>.choice.tmp.<pid>.<random>   one being written (atomic_file.hpp)
//
// <name> is the hex SHA-256 of "kjit-choice\n" + tag + "\n" + key. The tag is who wrote the choice (the
// engine passes "kjit <version>"): a kjit upgrade reads none of the choices an older kjit made (its GEMM
// kernels may differ), and they stay on disk until `kjit clear`. Everything else that a choice depends on
// (architecture, dtypes, shapes, epilogue, a cuBLAS version) is the caller's key. The folder has no shard
// level, so the entry scans (layer_scan.hpp: <root>/v1/<target>/<shard>/<file>) never see a choice.
//
// Keys are 1..kMaxChoiceKeyBytes printable ASCII characters (0x20-0x7E); values 1..kMaxChoiceValueBytes of
// the same. Reading follows the rules of every cache file: never blocks on a FIFO, never follows a link,
// at most kMaxChoiceFileBytes, loaded only when the user owns the file and its folders (trust.hpp) or, in a
// root read as read-only (a KJIT_CACHE_PATH layer; the root in readonly / strict mode), when the layer's
// kjit.lock lists it with the SHA-256 of its bytes. A missing file is a miss; an untrusted, unreadable,
// malformed, foreign (another tag or key) or oversized one is a miss and a warning, once per file and
// problem.
// Writing is publish_atomically (temp file, fsync, rename): a crash or a full disk leaves the old choice or
// none, never a torn one.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kjit/cache/cache_mode.hpp"

namespace kjit::cache {

inline constexpr std::size_t kMaxChoiceKeyBytes = 512;
inline constexpr std::size_t kMaxChoiceValueBytes = 256;
inline constexpr std::size_t kMaxChoiceFileBytes = 4096;
inline constexpr int kChoiceFormat = 1;
inline constexpr const char* kChoicesDir = "choices";
inline constexpr const char* kChoiceSuffix = ".choice";

// "" when `key` / `value` may be a choice's; else what is wrong, e.g. "it is empty" or "character 7 is
// 0x0a, not printable ASCII (0x20-0x7e)".
std::string choice_key_problem(std::string_view key);
std::string choice_value_problem(std::string_view value);
// Throws kjit::ValueError naming the key (and value) and what is allowed.
void check_choice(std::string_view key, std::string_view value);
void check_choice_key(std::string_view key);

// <root>/v1/choices
std::filesystem::path choices_dir(const std::filesystem::path& root);
// "<hex SHA-256 of the tag and key>.choice"
std::string choice_file_name(const std::string& tag, const std::string& key);
// Every *.choice regular file in `root`'s choices folder, sorted (for export locks).
std::vector<std::filesystem::path> choice_files(const std::filesystem::path& root);
// Why `bytes`, the file at `relative` (a '/'-separated path under a root), are not a valid choice filed where
// they lie (v1/choices/<choice_file_name(its tag, its key)>); "" when they are. What `kjit export` locks and
// `kjit verify --dir` checks (export_lock.hpp), whatever kjit version wrote the choice.
std::string choice_file_problem(const std::string& relative, std::string_view bytes);

struct ChoiceStoreConfig {
  std::filesystem::path root;                 // the writable cache root (KJIT_CACHE_DIR); empty: none
  std::vector<std::filesystem::path> layers;  // read-only roots (KJIT_CACHE_PATH), searched after it
  CacheMode mode = CacheMode::ReadWrite;      // off: no disk at all; readonly / strict: the root is read-only
  std::string tag;                            // see above
};

class ChoiceStore {
 public:
  explicit ChoiceStore(ChoiceStoreConfig config);

  const ChoiceStoreConfig& config() const noexcept { return config_; }
  // Whether save() may write: mode readwrite and a root.
  bool writable() const noexcept;

  // The choice for `key` in the root, else the first layer that has one; nullopt otherwise (warned once per
  // file when a file is there but cannot be used). Never throws for what is on disk; a bad key is a
  // ValueError.
  std::optional<std::string> load(const std::string& key) const;
  // Publishes the choice in the root. Returns "" when kept, else why not (the caller warns); "" without
  // writing when !writable(). A bad key or value is a ValueError.
  std::string save(const std::string& key, const std::string& value) const;

  // The file of `key` under a root.
  std::filesystem::path path_of(const std::filesystem::path& root, const std::string& key) const;

  // Maintenance of one root (every tag): how many *.choice files it holds, and removing them (and the temp
  // files no live writer holds). clear() returns how many choices it removed.
  static std::size_t count(const std::filesystem::path& root);
  static std::size_t clear(const std::filesystem::path& root);

 private:
  // One root's file for `key`: the value, nullopt when absent or unusable (warned).
  std::optional<std::string> load_from(const std::filesystem::path& root, bool read_only, const std::string& key) const;

  ChoiceStoreConfig config_;
  uid_t uid_;
};

}  // namespace kjit::cache
