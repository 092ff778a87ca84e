// HeaderIndex: what was learned about a header file on disk (the SHA-256 of its bytes and the include
// directives it names), keyed by its path and its identity (size, mtime, ctime, inode, device), kept in
// <root>/v1/header-index.json so that a new process can key a template without reading, scanning and
// hashing the CUDA headers again (1.6 MB for cuda_fp16.h + cuda_bf16.h and what they include).
//
// Trust and staleness:
//  - its caller records only files that nobody edits in place (the CUDA toolkit's headers and kjit's own
//    templates, which are the 1.6 MB and the 10 ms it saves): a file's identity shows a write() but not
//    always a write through a shared mapping (mmap MAP_SHARED: a page still dirty takes later writes
//    without a new mtime or ctime, on tmpfs indefinitely), so the user's own headers are read and hashed
//    at every load;
//  - a record is used only while the file's identity is the recorded one; a file whose ctime is within
//    `racy_window` of the time it was looked at is never recorded, so a later write to it (which sets
//    its ctime to the time of that write) always changes its identity, even on a filesystem with coarse
//    timestamps ("racy git");
//  - the index file is read only when it and every folder from the root down to it belong to the user
//    and are writable by nobody else (trust.hpp), and written only through publish_atomically;
//  - only files on a local filesystem (ext4, xfs, btrfs, tmpfs, overlayfs, zfs...) are vouched for: on
//    NFS, SMB, FUSE or a cluster filesystem, stat() may answer from an attribute cache while the bytes
//    have changed on another machine, so such a header is read every time;
//  - a missing, unreadable, oversized, malformed or foreign file, or one written under another `tag`
//    (another kjit, whose include scanner may differ), is an empty index (and is replaced at the next
//    save): the index only ever saves work, it never decides what is compiled. Whoever reads bytes it
//    vouched for checks them against the recorded SHA-256 (Template::with_bytes).
#pragma once

#include <sys/stat.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace kjit::cache {

struct FileIdentity {
  std::uint64_t size = 0, mtime_ns = 0, ctime_ns = 0, inode = 0, device = 0;
  static FileIdentity of(const struct stat& st) noexcept;
  bool operator==(const FileIdentity& o) const noexcept;
};

struct HeaderFacts {
  std::string sha256;                 // hex SHA-256 of the file's bytes
  std::vector<std::string> includes;  // the file's include directives, as its reader encodes them
};

class HeaderIndex {
 public:
  // `root`: a cache root (the file is <root>/v1/header-index.json); empty: an index in memory only.
  // `writable`: whether save() may write the file. `tag`: who reads and writes the records (the kjit
  // version and its include scanner's); records saved under another tag are not used.
  HeaderIndex(std::filesystem::path root, bool writable, std::string tag,
              std::chrono::nanoseconds racy_window = std::chrono::seconds(2));

  // Whether `path` lies on a filesystem whose stat() can be trusted to show a change (see above).
  static bool on_local_filesystem(const std::string& path);

  // The facts recorded for `path` when its identity is still `id`. The file is read on first use.
  std::optional<HeaderFacts> find(const std::string& path, const FileIdentity& id);
  // Records facts learned from the bytes of `path` read while its identity was `id`; ignored when the
  // file changed too recently to be told apart from a later write (see above).
  void remember(const std::string& path, const FileIdentity& id, HeaderFacts facts);
  // Drops the record of `path` (a reader found bytes other than the recorded ones), here and, at the next
  // save, in the file: the next load reads the file again.
  void forget(const std::string& path);
  // Writes what this process learned (merged with the file as it is now), when anything was learned
  // and the index is writable. Never throws; a failure leaves the file as it was.
  void save();

  // Include directives learned for a file whose bytes have this hex SHA-256 (see above): encoded as
  // HeaderFacts::includes are ('<' or '"' and the name), in the order learned.
  std::vector<std::string> learned(const std::string& sha256);
  // Records one (kept at the next save, merged with what other processes learned).
  void learn(const std::string& sha256, const std::string& directive);

  std::filesystem::path file() const;  // empty for an in-memory index
  std::size_t size() const;            // records held

  // At most this many records are kept; beyond it, records this process did not use are dropped.
  static constexpr std::size_t kMaxRecords = 4096;
  // At most this many files' learned directives are kept (beyond it, those this process did not use).
  static constexpr std::size_t kMaxLearned = 4096;

 private:
  struct Record {
    FileIdentity id;
    HeaderFacts facts;
    bool used = false;  // found or learned by this process
  };
  struct Learned {
    std::vector<std::string> directives;
    bool used = false;
  };
  struct Contents {
    std::map<std::string, Record> records;
    std::map<std::string, Learned> learned;
  };
  void load_locked();
  void save_locked();
  Contents parse(const std::string& bytes) const;
  std::string serialize_locked() const;

  std::filesystem::path root_;
  bool writable_;
  std::string tag_;
  std::chrono::nanoseconds racy_window_;
  mutable std::mutex mu_;
  bool loaded_ = false;
  bool dirty_ = false;
  std::map<std::string, Record> records_;
  std::map<std::string, Learned> learned_;  // SHA-256 of a file's bytes -> directives learned
  std::set<std::string> forgotten_;         // dropped by forget(): not taken back from the file at save()
};

}  // namespace kjit::cache
