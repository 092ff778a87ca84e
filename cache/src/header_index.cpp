#include "kjit/cache/header_index.hpp"

#include <sys/statfs.h>
#include <unistd.h>

#include <ctime>

#include <nlohmann/json.hpp>

#include "kjit/cache/atomic_file.hpp"
#include "kjit/cache/file_read.hpp"
#include "kjit/cache/layout.hpp"
#include "kjit/cache/private_dir.hpp"
#include "kjit/cache/trust.hpp"

namespace kjit::cache {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr int kFormat = 1;
constexpr std::uint64_t kMaxFileBytes = 16ull << 20;

std::uint64_t ns_of(const struct timespec& t) noexcept {
  return static_cast<std::uint64_t>(t.tv_sec) * 1000000000ull + static_cast<std::uint64_t>(t.tv_nsec);
}

std::uint64_t now_ns() noexcept {
  struct timespec t {};
  ::clock_gettime(CLOCK_REALTIME, &t);
  return ns_of(t);
}

bool is_hex_sha256(const std::string& s) {
  if (s.size() != 64) return false;
  for (char c : s)
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  return true;
}

// JSON holds UTF-8 only: a path or include name that is not is never recorded (it would come back as
// another name).
bool is_utf8(const std::string& s) {
  try {
    (void)json(s).dump();
    return true;
  } catch (const json::exception&) {
    return false;
  }
}

}  // namespace

FileIdentity FileIdentity::of(const struct stat& st) noexcept {
  FileIdentity id;
  id.size = static_cast<std::uint64_t>(st.st_size);
  id.mtime_ns = ns_of(st.st_mtim);
  id.ctime_ns = ns_of(st.st_ctim);
  id.inode = static_cast<std::uint64_t>(st.st_ino);
  id.device = static_cast<std::uint64_t>(st.st_dev);
  return id;
}

bool FileIdentity::operator==(const FileIdentity& o) const noexcept {
  return size == o.size && mtime_ns == o.mtime_ns && ctime_ns == o.ctime_ns && inode == o.inode &&
         device == o.device;
}

HeaderIndex::HeaderIndex(fs::path root, bool writable, std::string tag, std::chrono::nanoseconds racy_window)
    : root_(std::move(root)), writable_(writable && !root_.empty()), tag_(std::move(tag)), racy_window_(racy_window) {}

bool HeaderIndex::on_local_filesystem(const std::string& path) {
  struct statfs fs {};
  if (::statfs(path.c_str(), &fs) != 0) return false;
  switch (static_cast<unsigned long>(fs.f_type)) {
    case 0xEF53:      // ext2/3/4
    case 0x58465342:  // xfs
    case 0x9123683E:  // btrfs
    case 0x01021994:  // tmpfs
    case 0x858458F6:  // ramfs
    case 0x794C7630:  // overlayfs (containers)
    case 0x2FC12FC1:  // zfs
    case 0x73717368:  // squashfs
    case 0xF2F52010:  // f2fs
      return true;
    default:  // NFS, SMB, FUSE, 9p, Lustre, GPFS, Ceph... or unknown: read every time
      return false;
  }
}

fs::path HeaderIndex::file() const {
  return root_.empty() ? fs::path{} : layout::header_index_path(root_);
}

std::size_t HeaderIndex::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return records_.size();
}

std::map<std::string, HeaderIndex::Record> HeaderIndex::parse(const std::string& bytes) const {
  std::map<std::string, Record> out;
  const json j = json::parse(bytes, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return out;
  const auto format = j.find("format"), tag = j.find("tag"), files = j.find("files");
  if (format == j.end() || !format->is_number_integer() || format->get<std::int64_t>() != kFormat) return out;
  if (tag == j.end() || !tag->is_string() || tag->get<std::string>() != tag_) return out;
  if (files == j.end() || !files->is_object()) return out;
  for (const auto& [path, r] : files->items()) {
    if (!r.is_object()) return {};
    Record rec;
    try {
      rec.id.size = r.at("size").get<std::uint64_t>();
      rec.id.mtime_ns = r.at("mtime_ns").get<std::uint64_t>();
      rec.id.ctime_ns = r.at("ctime_ns").get<std::uint64_t>();
      rec.id.inode = r.at("inode").get<std::uint64_t>();
      rec.id.device = r.at("device").get<std::uint64_t>();
      rec.facts.sha256 = r.at("sha256").get<std::string>();
      rec.facts.includes = r.at("includes").get<std::vector<std::string>>();
    } catch (const json::exception&) {
      return {};  // one malformed record: the file is not to be trusted at all
    }
    if (!is_hex_sha256(rec.facts.sha256) || path.empty() || path.front() != '/') return {};
    out.emplace(path, std::move(rec));
  }
  return out;
}

void HeaderIndex::load_locked() {
  if (loaded_) return;
  loaded_ = true;
  if (root_.empty()) return;
  const fs::path f = file();
  FileRead r = read_regular_file(f, kMaxFileBytes, Links::Refuse);
  if (!r.ok()) return;
  if (!owned_path_problem(root_, f, r.st, ::geteuid()).empty()) return;
  try {
    for (auto& [path, rec] : parse(r.bytes)) records_.emplace(path, std::move(rec));
  } catch (const std::exception&) {
    records_.clear();  // find() never throws: a file this cannot read is an empty index
  }
}

std::optional<HeaderFacts> HeaderIndex::find(const std::string& path, const FileIdentity& id) {
  std::lock_guard<std::mutex> lock(mu_);
  load_locked();
  auto it = records_.find(path);
  if (it == records_.end() || !(it->second.id == id)) return std::nullopt;
  if (!on_local_filesystem(path)) return std::nullopt;
  it->second.used = true;
  return it->second.facts;
}

void HeaderIndex::remember(const std::string& path, const FileIdentity& id, HeaderFacts facts) {
  const std::uint64_t now = now_ns();
  const auto window = static_cast<std::uint64_t>(racy_window_.count());
  // A file changed within the window (or "in the future": a clock set back) could be written again
  // without its identity changing: not recorded.
  if (id.ctime_ns + window > now || id.mtime_ns + window > now) return;
  if (path.empty() || path.front() != '/' || !is_hex_sha256(facts.sha256) || !is_utf8(path)) return;
  if (!on_local_filesystem(path)) return;
  for (const auto& inc : facts.includes)
    if (!is_utf8(inc)) return;
  std::lock_guard<std::mutex> lock(mu_);
  load_locked();
  Record& rec = records_[path];
  rec.id = id;
  rec.facts = std::move(facts);
  rec.used = true;
  forgotten_.erase(path);
  dirty_ = true;
}

void HeaderIndex::forget(const std::string& path) {
  std::lock_guard<std::mutex> lock(mu_);
  load_locked();
  records_.erase(path);
  forgotten_.insert(path);
  dirty_ = true;
}

std::string HeaderIndex::serialize_locked() const {
  json files = json::object();
  for (const auto& [path, rec] : records_)
    files[path] = {{"size", rec.id.size},         {"mtime_ns", rec.id.mtime_ns}, {"ctime_ns", rec.id.ctime_ns},
                   {"inode", rec.id.inode},       {"device", rec.id.device},     {"sha256", rec.facts.sha256},
                   {"includes", rec.facts.includes}};
  return json{{"format", kFormat}, {"tag", tag_}, {"files", std::move(files)}}.dump() + "\n";
}

void HeaderIndex::save() {
  std::lock_guard<std::mutex> lock(mu_);
  if (!dirty_ || !writable_) return;
  dirty_ = false;
  try {
    save_locked();
  } catch (const std::exception&) {
    // The index only saves work: a file that could not be written is learned again by a later process.
  }
}

void HeaderIndex::save_locked() {
  const fs::path f = file();
  // Never into a root that others may write to (the disk cache refuses it too, with a warning).
  auto root_is_ours = [&] {
    struct stat st {};
    return ::stat(root_.c_str(), &st) == 0 && ownership_problem(root_, st, ::geteuid()).empty();
  };
  std::error_code ec;
  if (fs::exists(root_, ec) && !root_is_ours()) return;
  if (!make_private_dirs(f.parent_path()).empty() || !root_is_ours()) return;
  // What other processes saved since this one read the file, for the files this one did not learn.
  FileRead r = read_regular_file(f, kMaxFileBytes, Links::Refuse);
  if (r.ok() && owned_path_problem(root_, f, r.st, ::geteuid()).empty())
    for (auto& [path, rec] : parse(r.bytes))
      if (!forgotten_.count(path)) records_.emplace(path, std::move(rec));  // keeps ours
  if (records_.size() > kMaxRecords)
    for (auto it = records_.begin(); it != records_.end() && records_.size() > kMaxRecords;)
      it = it->second.used ? std::next(it) : records_.erase(it);
  if (records_.size() > kMaxRecords) return;  // this process alone used more: keep the file as it is
  publish_atomically(f, serialize_locked());
}

}  // namespace kjit::cache
