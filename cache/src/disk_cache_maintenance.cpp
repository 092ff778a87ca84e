// DiskCache maintenance: list, prune, clear, and the size cap applied after a store.
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include "kjit/cache/disk_cache.hpp"
#include "kjit/cache/entry_check.hpp"
#include "kjit/cache/file_lock.hpp"
#include "kjit/cache/file_read.hpp"
#include "kjit/cache/layer_scan.hpp"
#include "kjit/cache/layout.hpp"
#include "kjit/log.hpp"

namespace kjit::cache {
namespace fs = std::filesystem;

namespace {

// Validates one scanned *.kjit file: name, place and content. Empty error when valid.
// `st`, when given, receives the identity of the file that was read (zeroed if none was).
DecodeResult check_scanned_entry(const ScannedFile& f, struct stat* st = nullptr) {
  DecodeResult r;
  if (st) *st = {};
  Digest d{};
  if (!from_hex(f.name.key, d)) {
    r.error = "file name is not <64 lowercase hex digits>.kjit";
    return r;
  }
  const CacheKey key(d);
  if (f.shard != f.name.key.substr(0, 2)) {
    r.error = "in the wrong directory: expected " + f.name.key.substr(0, 2) + "/, found in " + f.shard + "/";
    return r;
  }
  FileRead file = read_regular_file(f.path, kMaxEntryFileBytes);
  if (st && file.fd) *st = file.st;
  if (!file.ok()) {
    r.error = file.error;
    return r;
  }
  return check_entry_bytes(file.bytes, key, f.target);
}

// Unlinks `path` only while it still names the file identified by `st` (which may have been replaced
// by a fresh entry since it was read).
bool unlink_if_same(const fs::path& path, const struct stat& st) {
  struct stat now{};
  if (st.st_ino == 0 || ::stat(path.c_str(), &now) != 0) return false;
  if (now.st_dev != st.st_dev || now.st_ino != st.st_ino) return false;
  return ::unlink(path.c_str()) == 0;
}

// Removes a lock file or temp file that nobody holds: a compile in progress holds its key's lock, a
// live writer holds the flock of its temp file until the rename (atomic_file.hpp). Judged by the
// lock alone, never by the pid in a temp file's name or its age: that pid means nothing in another
// PID namespace (a sidecar container on a shared volume), and a slow writer is still a writer.
bool remove_if_abandoned(const fs::path& path) {
  FileLock lock = FileLock::try_acquire_existing(path);
  if (!lock.locked()) return false;
  lock.release();  // unlinks while holding
  return true;
}

// The header index's temp files (beside it in the version folder, not in a shard), left by a writer
// that died between creating one and its rename: removed as an entry's are, by their lock alone.
std::size_t remove_abandoned_index_temps(const fs::path& root) {
  const fs::path index = layout::header_index_path(root);
  const std::string index_name = index.filename().string();
  std::size_t removed = 0;
  std::error_code ec;
  fs::directory_iterator it(index.parent_path(), fs::directory_options::skip_permission_denied, ec), end;
  for (; !ec && it != end; it.increment(ec)) {
    struct stat st{};
    if (!layout::is_temp_of(it->path().filename().string(), index_name) || ::lstat(it->path().c_str(), &st) != 0 ||
        !S_ISREG(st.st_mode))
      continue;
    if (remove_if_abandoned(it->path())) ++removed;
  }
  return removed;
}

bool mtime_before(const ScannedFile* a, const ScannedFile* b) {
  if (a->mtime.tv_sec != b->mtime.tv_sec) return a->mtime.tv_sec < b->mtime.tv_sec;
  if (a->mtime.tv_nsec != b->mtime.tv_nsec) return a->mtime.tv_nsec < b->mtime.tv_nsec;
  return a->path < b->path;
}

// Removes least recently used entries (oldest mtime first) until `total` <= max_bytes;
// `keep` is never removed. Returns how many were removed.
std::size_t evict_lru(std::vector<const ScannedFile*> entries, std::uint64_t& total, std::uint64_t max_bytes,
                      const fs::path& keep) {
  std::sort(entries.begin(), entries.end(), mtime_before);
  std::size_t removed = 0;
  for (const ScannedFile* f : entries) {
    if (total <= max_bytes) break;
    if (f->path == keep) continue;
    if (::unlink(f->path.c_str()) == 0 || errno == ENOENT) {  // ENOENT: evicted by someone else
      total -= std::min(total, f->size);
      ++removed;
    }
  }
  return removed;
}

}  // namespace

std::vector<EntryInfo> DiskCache::list() const {
  std::vector<EntryInfo> out;
  for (const auto& layer : read_layers()) {
    for (const ScannedFile& f : scan_layer(layer.root)) {
      if (f.name.kind != layout::FileKind::Entry) continue;  // locks and temp files are not entries
      EntryInfo info;
      info.path = f.path;
      info.layer = layer.label;
      info.size = f.size;
      info.key = f.name.key;
      DecodeResult r = check_scanned_entry(f);
      info.valid = r.entry.has_value();
      info.error = r.error;
      if (r.entry) info.meta = std::move(r.entry->meta);
      out.push_back(std::move(info));
    }
  }
  return out;
}

void DiskCache::evict_to(std::uint64_t max_bytes, const fs::path& keep) {
  const std::vector<ScannedFile> files = scan_layer(config_.root);
  std::vector<const ScannedFile*> entries;
  std::uint64_t total = 0;
  for (const auto& f : files) {
    if (f.name.kind != layout::FileKind::Entry) continue;
    entries.push_back(&f);
    total += f.size;
  }
  if (total <= max_bytes) return;
  const std::size_t removed = evict_lru(std::move(entries), total, max_bytes, keep);
  if (removed == 0) return;
  log::Event e;
  e.kind = "cache_evict";
  e.message = "kjit cache: evicted " + std::to_string(removed) + " least recently used entries from " +
              config_.root.string() + " to stay under KJIT_CACHE_MAX_BYTES=" + std::to_string(max_bytes);
  log::emit(std::move(e));
}

PruneReport DiskCache::prune(std::optional<std::uint64_t> max_bytes) {
  PruneReport report;
  if (config_.mode != CacheMode::ReadWrite || config_.root.empty()) return report;
  const std::optional<std::uint64_t> limit = max_bytes ? max_bytes : config_.max_bytes;

  const std::vector<ScannedFile> files = scan_layer(config_.root);
  std::vector<const ScannedFile*> entries;
  std::uint64_t total = 0;
  for (const auto& f : files) {
    switch (f.name.kind) {
      case layout::FileKind::Temp:
        if (remove_if_abandoned(f.path)) ++report.removed_temp_files;
        break;
      case layout::FileKind::Lock:
        if (remove_if_abandoned(f.path)) ++report.removed_lock_files;
        break;
      case layout::FileKind::Entry: {
        report.bytes_before += f.size;
        struct stat st{};
        if (check_scanned_entry(f, &st).entry) {
          entries.push_back(&f);
          total += f.size;
        } else if (unlink_if_same(f.path, st)) {
          ++report.removed_damaged;
        } else {
          total += f.size;  // could not remove it: it still takes space
        }
        break;
      }
      case layout::FileKind::Other: break;
    }
  }
  report.removed_temp_files += remove_abandoned_index_temps(config_.root);
  if (limit && total > *limit) report.removed_entries = evict_lru(std::move(entries), total, *limit, {});
  report.bytes_after = total;
  return report;
}

std::size_t DiskCache::clear() {
  if (config_.mode != CacheMode::ReadWrite || config_.root.empty()) return 0;
  std::size_t removed = 0;
  for (const ScannedFile& f : scan_layer(config_.root)) {
    switch (f.name.kind) {
      case layout::FileKind::Entry:
        if (::unlink(f.path.c_str()) == 0) ++removed;
        break;
      case layout::FileKind::Temp:  // a held temp file is a store in progress
      case layout::FileKind::Lock:  // a held lock is a compile in progress
        remove_if_abandoned(f.path);
        break;
      case layout::FileKind::Other: break;  // not ours: leave it
    }
  }
  // Not an entry, and cheap to learn again: a clear cache starts over.
  ::unlink(layout::header_index_path(config_.root).c_str());
  remove_abandoned_index_temps(config_.root);
  return removed;
}

}  // namespace kjit::cache
