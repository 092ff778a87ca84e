#include "kjit/cache/export_lock_file.hpp"

#include <nlohmann/json.hpp>

#include "kjit/cache/atomic_file.hpp"
#include "kjit/cache/file_read.hpp"
#include "kjit/cache/layout.hpp"
#include "kjit/cache/sha256.hpp"
#include "kjit/error.hpp"

namespace kjit::cache {
namespace {
namespace fs = std::filesystem;
using Json = nlohmann::json;
}  // namespace

void write_lock(const fs::path& lock_file, const std::vector<LockedFile>& locked) {
  Json entries = Json::array();
  for (const auto& e : locked) entries.push_back({{"path", e.path}, {"sha256", e.sha256}});
  const Json j = {{"kjit_lock", kLockVersion}, {"entries", std::move(entries)}};
  if (auto failure = publish_atomically(lock_file, j.dump(1) + "\n"))
    throw Error("cannot write the lock file " + lock_file.string() + ": " + failure->message());
}

std::vector<LockedFile> read_lock(const fs::path& lock_file) {
  FileRead r = read_regular_file(lock_file, 1ull << 30);
  if (!r.ok())
    throw ValueError("cannot read the lock file " + lock_file.string() + ": " + r.error +
                     ". `kjit export` writes one as DIR/kjit.lock.");
  return parse_lock(r.bytes, lock_file.string());
}

std::vector<LockedFile> parse_lock(std::string_view text, const std::string& origin) {
  auto bad = [&](const std::string& what) {
    return ValueError("lock file " + origin + " is not valid: " + what +
                      " (expected {\"kjit_lock\": 1, \"entries\": [{\"path\": ..., \"sha256\": ...}]}, as "
                      "written by `kjit export`)");
  };
  Json j = Json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) throw bad("it is not a JSON object");
  auto v = j.find("kjit_lock");
  // Compared as JSON values: get<int>() would truncate 4294967297 to 1.
  if (v == j.end() || !v->is_number_integer() || *v != Json(kLockVersion))
    throw bad("\"kjit_lock\" is missing or not version " + std::to_string(kLockVersion));
  auto entries = j.find("entries");
  if (entries == j.end() || !entries->is_array()) throw bad("\"entries\" is missing or not an array");
  std::vector<LockedFile> out;
  Digest d;
  for (std::size_t i = 0; i < entries->size(); ++i) {
    const Json& e = (*entries)[i];
    const std::string where = "entries[" + std::to_string(i) + "]";
    if (!e.is_object() || !e.contains("path") || !e["path"].is_string() || !e.contains("sha256") ||
        !e["sha256"].is_string())
      throw bad(where + " needs a string \"path\" and \"sha256\"");
    LockedFile f{e["path"].get<std::string>(), e["sha256"].get<std::string>()};
    if (!layout::stays_inside(f.path)) throw bad(where + " path '" + f.path + "' is not relative to the cache root");
    if (!from_hex(f.sha256, d)) throw bad(where + " sha256 '" + f.sha256 + "' is not 64 lowercase hex digits");
    out.push_back(std::move(f));
  }
  return out;
}

}  // namespace kjit::cache
