#include "kjit/cache/layer_scan.hpp"

#include <algorithm>
#include <system_error>

namespace kjit::cache {
namespace fs = std::filesystem;

namespace {

// Sub-directories of `dir` (not following symbolic links); empty when it cannot be read.
std::vector<fs::path> subdirs(const fs::path& dir) {
  std::vector<fs::path> out;
  std::error_code ec;
  fs::directory_iterator it(dir, fs::directory_options::skip_permission_denied, ec), end;
  for (; !ec && it != end; it.increment(ec)) {
    std::error_code sec;
    if (it->symlink_status(sec).type() == fs::file_type::directory) out.push_back(it->path());
  }
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

std::vector<fs::path> shard_dirs(const fs::path& root) {
  std::vector<fs::path> out;
  for (const auto& target : subdirs(root / layout::kVersionDir))
    for (const auto& shard : subdirs(target)) out.push_back(shard);
  return out;
}

std::vector<ScannedFile> scan_layer(const fs::path& root) {
  std::vector<ScannedFile> out;
  for (const auto& shard : shard_dirs(root)) {
    std::error_code ec;
    fs::directory_iterator it(shard, fs::directory_options::skip_permission_denied, ec), end;
    for (; !ec && it != end; it.increment(ec)) {
      struct stat st{};
      if (::lstat(it->path().c_str(), &st) != 0 || !S_ISREG(st.st_mode)) continue;
      ScannedFile f;
      f.path = it->path();
      f.name = layout::classify(it->path().filename().string());
      f.target = shard.parent_path().filename().string();
      f.shard = shard.filename().string();
      f.size = static_cast<std::uint64_t>(st.st_size);
      f.mtime = st.st_mtim;
      out.push_back(std::move(f));
    }
  }
  std::sort(out.begin(), out.end(), [](const ScannedFile& a, const ScannedFile& b) { return a.path < b.path; });
  return out;
}

}  // namespace kjit::cache
