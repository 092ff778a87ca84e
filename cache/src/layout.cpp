#include "kjit/cache/layout.hpp"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <random>

#include "kjit/error.hpp"

namespace kjit::cache::layout {
namespace fs = std::filesystem;

namespace {
bool ends_with(const std::string& s, const char* suffix) {
  const std::string suf(suffix);
  return s.size() >= suf.size() && s.compare(s.size() - suf.size(), suf.size(), suf) == 0;
}
}  // namespace

void check_target(const std::string& target) {
  bool ok = !target.empty() && target.size() <= 64 && target != "." && target != "..";
  for (char c : target) {
    bool allowed =
        (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-' || c == '.';
    ok = ok && allowed;
  }
  if (!ok)
    throw ValueError("cache target '" + target.substr(0, 80) +
                     "' is not valid: expected a GPU target such as sm_90, sm_90a or compute_90 "
                     "(letters, digits, '_', '-', '.'; at most 64 characters)");
}

fs::path entry_dir(const fs::path& root, const CacheKey& key, const std::string& target) {
  check_target(target);
  return root / kVersionDir / target / key.hex().substr(0, 2);
}

fs::path entry_path(const fs::path& root, const CacheKey& key, const std::string& target) {
  return entry_dir(root, key, target) / (key.hex() + kEntrySuffix);
}

fs::path lock_path(const fs::path& root, const CacheKey& key, const std::string& target) {
  return entry_dir(root, key, target) / (key.hex() + kLockSuffix);
}

FileName classify(const std::string& name) {
  FileName f;
  const auto tmp = name.find(kTempInfix);
  if (tmp != std::string::npos) {
    f.kind = FileKind::Temp;
    f.key = name.substr(0, tmp);
    const std::string rest = name.substr(tmp + std::char_traits<char>::length(kTempInfix));
    long pid = 0;
    std::size_t i = 0;
    for (; i < rest.size() && rest[i] >= '0' && rest[i] <= '9' && pid < (1L << 40); ++i)
      pid = pid * 10 + (rest[i] - '0');
    if (i > 0 && i < rest.size() && rest[i] == '.') f.pid = pid;
  } else if (ends_with(name, kEntrySuffix)) {
    f.kind = FileKind::Entry;
    f.key = name.substr(0, name.size() - std::char_traits<char>::length(kEntrySuffix));
  } else if (ends_with(name, kLockSuffix)) {
    f.kind = FileKind::Lock;
    f.key = name.substr(0, name.size() - std::char_traits<char>::length(kLockSuffix));
  }
  return f;
}

std::string temp_name(const std::string& entry_filename) {
  // The pid makes names unique across processes (forked children included, whose generator state
  // is a copy of the parent's); the counter and random part make them unique within one.
  static std::atomic<std::uint64_t> counter{0};
  thread_local std::mt19937_64 rng([] {
    std::random_device rd;
    return (static_cast<std::uint64_t>(rd()) << 32) ^ rd() ^
           static_cast<std::uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
  }());
  const std::uint64_t r = rng() ^ (counter.fetch_add(1) * 0x9e3779b97f4a7c15ull);
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(r));
  return entry_filename + ".tmp." + std::to_string(::getpid()) + "." + buf;
}

bool is_temp_of(const std::string& name, const std::string& final_filename) {
  const std::string prefix = final_filename + ".tmp.";
  return name.size() > prefix.size() && name.compare(0, prefix.size(), prefix) == 0;
}

bool stays_inside(const std::filesystem::path& p) {
  if (p.empty() || p.is_absolute()) return false;
  for (const auto& part : p)
    if (part == "..") return false;
  return true;
}

fs::path header_index_path(const fs::path& root) { return root / kVersionDir / "header-index.json"; }

}  // namespace kjit::cache::layout
