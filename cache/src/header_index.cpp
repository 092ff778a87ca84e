#include "kjit/cache/header_index.hpp"

#include <sys/statfs.h>
#include <unistd.h>

#include <algorithm>
#include <ctime>

#include <nlohmann/json.hpp>

#include "kjit/cache/atomic_file.hpp"
#include "kjit/cache/file_lock.hpp"
#include "kjit/cache/file_read.hpp"
#include "kjit/cache/layout.hpp"
#include "kjit/cache/private_dir.hpp"
#include "kjit/cache/trust.hpp"

namespace kjit::cache {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// 2: learned directives by scope (format 1 kept them by file only: a file of format 1 is an empty index).
constexpr int kFormat = 2;
constexpr std::uint64_t kMaxFileBytes = 16ull << 20;

std::uint64_t ns_of(const struct timespec& t) noexcept {
  return static_cast<std::uint64_t>(t.tv_sec) * 1000000000ull + static_cast<std::uint64_t>(t.tv_nsec);
}

std::uint64_t now_ns() noexcept {
  struct timespec t{};
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
  return size == o.size && mtime_ns == o.mtime_ns && ctime_ns == o.ctime_ns && inode == o.inode && device == o.device;
}

HeaderIndex::HeaderIndex(fs::path root, bool writable, std::string tag, std::chrono::nanoseconds racy_window,
                         std::vector<fs::path> layers)
    : root_(std::move(root)),
      writable_(writable && !root_.empty()),
      tag_(std::move(tag)),
      racy_window_(racy_window),
      layers_(std::move(layers)) {}

bool HeaderIndex::on_local_filesystem(const std::string& path) {
  struct statfs fs{};
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

fs::path HeaderIndex::file() const { return root_.empty() ? fs::path{} : layout::header_index_path(root_); }

std::size_t HeaderIndex::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return records_.size();
}

// A learned directive as HeaderFacts::includes encodes one: '<' or '"', then a name.
static bool is_directive(const std::string& d) {
  return d.size() > 1 && d.size() <= 4096 && (d.front() == '<' || d.front() == '"') && is_utf8(d) &&
         d.find('\0') == std::string::npos && d.find('\n') == std::string::npos;
}

HeaderIndex::Contents HeaderIndex::parse(const std::string& bytes) const {
  Contents none, out;
  const json j = json::parse(bytes, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return none;
  const auto format = j.find("format"), tag = j.find("tag"), files = j.find("files"), learned = j.find("learned");
  if (format == j.end() || !format->is_number_integer() || format->get<std::int64_t>() != kFormat) return none;
  if (tag == j.end() || !tag->is_string() || tag->get<std::string>() != tag_) return none;
  if (files == j.end() || !files->is_object()) return none;
  if (learned != j.end()) {
    if (!learned->is_object()) return none;
    for (const auto& [scope, files_learned] : learned->items()) {
      if (!is_hex_sha256(scope) || !files_learned.is_object()) return none;
      Scope sc;
      for (const auto& [sha, list] : files_learned.items()) {
        std::vector<std::string> directives;
        try {
          directives = list.get<std::vector<std::string>>();
        } catch (const json::exception&) {
          return none;
        }
        if (!is_hex_sha256(sha)) return none;
        for (const auto& d : directives)
          if (!is_directive(d)) return none;
        sc.files.emplace(sha, std::move(directives));
      }
      out.learned.emplace(scope, std::move(sc));
    }
  }
  for (const auto& [path, r] : files->items()) {
    if (!r.is_object()) return none;
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
      return none;  // one malformed record: the file is not to be trusted at all
    }
    if (!is_hex_sha256(rec.facts.sha256) || path.empty() || path.front() != '/') return none;
    out.records.emplace(path, std::move(rec));
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
  // A root in readonly or strict mode may be a deployment's (another user's), as its entries may: its
  // index is read when the root's kjit.lock vouches for it.
  if (!owned_path_problem(root_, f, r.st, ::geteuid()).empty() &&
      (writable_ ||
       !LayerLock::read(root_, ::geteuid()).vouches_for(f.lexically_relative(root_).generic_string(), r.bytes).empty()))
    return;
  try {
    Contents c = parse(r.bytes);
    records_ = std::move(c.records);
    learned_ = std::move(c.learned);
  } catch (const std::exception&) {
    records_.clear();  // find() never throws: a file this cannot read is an empty index
    learned_.clear();
  }
}

// The learned directives of each read-only layer whose index file the user owns or whose kjit.lock
// vouches for it; the records of files are not used (they describe another machine's files).
void HeaderIndex::load_layers_locked() {
  if (layers_loaded_) return;
  layers_loaded_ = true;
  for (const fs::path& layer : layers_) {
    const fs::path f = layout::header_index_path(layer);
    FileRead r = read_regular_file(f, kMaxFileBytes, Links::Refuse);
    if (!r.ok()) continue;
    if (!owned_path_problem(layer, f, r.st, ::geteuid()).empty() &&
        !LayerLock::read(layer, ::geteuid()).vouches_for(f.lexically_relative(layer).generic_string(), r.bytes).empty())
      continue;
    try {
      for (auto& [scope, sc] : parse(r.bytes).learned) {
        Learned& mine = layer_learned_[scope];
        for (auto& [sha, directives] : sc.files) {
          auto& list = mine[sha];
          for (auto& d : directives)
            if (std::find(list.begin(), list.end(), d) == list.end()) list.push_back(std::move(d));
        }
      }
    } catch (const std::exception&) {
      // A layer's index that cannot be read contributes nothing.
    }
  }
}

HeaderIndex::Learned HeaderIndex::learned(const std::string& scope) {
  std::lock_guard<std::mutex> lock(mu_);
  load_locked();
  load_layers_locked();
  Learned out;
  if (auto it = learned_.find(scope); it != learned_.end()) {
    it->second.used = true;
    out = it->second.files;
  }
  if (auto it = layer_learned_.find(scope); it != layer_learned_.end())
    for (const auto& [sha, directives] : it->second) {
      auto& list = out[sha];
      for (const auto& d : directives)
        if (std::find(list.begin(), list.end(), d) == list.end()) list.push_back(d);
    }
  return out;
}

void HeaderIndex::learn(const std::string& scope, const std::string& sha256, const std::string& directive) {
  if (!is_hex_sha256(scope) || !is_hex_sha256(sha256) || !is_directive(directive)) return;
  std::lock_guard<std::mutex> lock(mu_);
  load_locked();
  Scope& sc = learned_[scope];
  sc.used = true;
  auto& list = sc.files[sha256];
  if (std::find(list.begin(), list.end(), directive) != list.end()) return;
  list.push_back(directive);
  dirty_ = true;
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
    files[path] = {{"size", rec.id.size},           {"mtime_ns", rec.id.mtime_ns}, {"ctime_ns", rec.id.ctime_ns},
                   {"inode", rec.id.inode},         {"device", rec.id.device},     {"sha256", rec.facts.sha256},
                   {"includes", rec.facts.includes}};
  json learned = json::object();
  for (const auto& [scope, sc] : learned_) learned[scope] = sc.files;
  return json{{"format", kFormat}, {"tag", tag_}, {"files", std::move(files)}, {"learned", std::move(learned)}}.dump() +
         "\n";
}

void HeaderIndex::save() {
  std::lock_guard<std::mutex> lock(mu_);
  if (!dirty_ || !writable_) return;
  dirty_ = false;
  try {
    save_locked();
  } catch (const std::exception&) {
    // The index only saves work: a file that could not be written (or whose lock was held too long) is
    // written at this process's next save, else learned again by a later process.
    dirty_ = true;
  }
}

void HeaderIndex::save_locked() {
  const fs::path f = file();
  // Never into a root that others may write to (the disk cache refuses it too, with a warning).
  auto root_is_ours = [&] {
    struct stat st{};
    return ::stat(root_.c_str(), &st) == 0 && ownership_problem(root_, st, ::geteuid()).empty();
  };
  std::error_code ec;
  if (fs::exists(root_, ec) && !root_is_ours()) return;
  if (!make_private_dirs(f.parent_path()).empty() || !root_is_ours()) return;
  // Read, merge and write under the file's lock: two processes saving at once each keep the other's.
  // A lock that cannot be taken at all (a file system without flock) leaves the merge unlocked, as before.
  std::string lock_problem;
  const FileLock file_lock = FileLock::acquire(fs::path(f.string() + ".lock"), kLockTimeoutS, &lock_problem);
  // What other processes saved since this one read the file, for the files this one did not learn.
  FileRead r = read_regular_file(f, kMaxFileBytes, Links::Refuse);
  if (r.ok() && owned_path_problem(root_, f, r.st, ::geteuid()).empty()) {
    Contents c = parse(r.bytes);
    for (auto& [path, rec] : c.records)
      if (!forgotten_.count(path)) records_.emplace(path, std::move(rec));  // keeps ours
    for (auto& [scope, theirs] : c.learned) {  // the union: each directive was needed by some compile
      Scope& sc = learned_[scope];
      for (auto& [sha, directives] : theirs.files) {
        auto& list = sc.files[sha];
        for (auto& d : directives)
          if (std::find(list.begin(), list.end(), d) == list.end()) list.push_back(std::move(d));
      }
    }
  }
  if (records_.size() > kMaxRecords)
    for (auto it = records_.begin(); it != records_.end() && records_.size() > kMaxRecords;)
      it = it->second.used ? std::next(it) : records_.erase(it);
  if (learned_.size() > kMaxLearned)
    for (auto it = learned_.begin(); it != learned_.end() && learned_.size() > kMaxLearned;)
      it = it->second.used ? std::next(it) : learned_.erase(it);
  if (records_.size() > kMaxRecords || learned_.size() > kMaxLearned) return;  // this process alone used more
  publish_atomically(f, serialize_locked());
}

std::string HeaderIndex::file_problem(const std::string& bytes) {
  const json j = json::parse(bytes, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return "not a JSON object";
  const auto format = j.find("format"), tag = j.find("tag");
  if (format == j.end() || !format->is_number_integer() || format->get<std::int64_t>() != kFormat)
    return "not a header index of format " + std::to_string(kFormat);
  if (tag == j.end() || !tag->is_string()) return "a header index without a tag";
  // Parsed as the index itself parses it (under its own tag), so that what a lock vouches for is readable.
  const HeaderIndex probe(fs::path{}, false, tag->get<std::string>());
  try {
    // parse() gives an empty index for anything malformed: every record and scope must come through.
    const Contents c = probe.parse(bytes);
    const auto files = j.find("files"), learned = j.find("learned");
    if (files == j.end() || !files->is_object() || c.records.size() != files->size() ||
        c.learned.size() != (learned == j.end() ? 0 : learned->size()))
      return "a malformed header index";
  } catch (const std::exception& e) {
    return std::string("a malformed header index: ") + e.what();
  }
  return {};
}

}  // namespace kjit::cache
