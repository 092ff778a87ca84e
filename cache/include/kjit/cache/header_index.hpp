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
//
// Learned include directives (a macro-computed include that NVRTC asked for: Template::grown_by) are
// kept per scope, the digest of the template that learned them as its files name their includes
// (Template::learning_scope): a directive learned by one template never re-keys another, though both
// include the same header (a macro of one may compute a header the other never reaches). They decide
// which headers a template's key covers, so they must reach every process that keys the template: a
// save merges with what other processes saved, under an exclusive lock of the file (<file>.lock), so
// that no process drops another's; and read-only layers (KJIT_CACHE_PATH: a warm cache `kjit export`
// made) contribute theirs, from a header-index.json the layer's user owns or its kjit.lock vouches for.
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
  // `layers`: read-only cache roots whose learned directives are used too (never written).
  HeaderIndex(std::filesystem::path root, bool writable, std::string tag,
              std::chrono::nanoseconds racy_window = std::chrono::seconds(2),
              std::vector<std::filesystem::path> layers = {});

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
  // Writes what this process learned (merged with the file as it is now, under the file's lock), when
  // anything was learned and the index is writable. Never throws; a failure leaves the file as it was.
  void save();
  // Why `bytes` are not a header index file of any kjit ("" when they are one): what a layer's
  // kjit.lock may vouch for (export_lock.hpp).
  static std::string file_problem(const std::string& bytes);

  // Include directives learned in `scope` (a hex digest, see above), by the hex SHA-256 of the bytes of
  // the file they belong to: encoded as HeaderFacts::includes are ('<' or '"' and the name), in the
  // order learned; the layers' after this index's own.
  using Learned = std::map<std::string, std::vector<std::string>>;
  Learned learned(const std::string& scope);
  // Records one (kept at the next save, merged with what other processes learned). Ignored when the
  // scope or the SHA-256 is not a hex SHA-256, or the directive is not one.
  void learn(const std::string& scope, const std::string& sha256, const std::string& directive);

  std::filesystem::path file() const;  // empty for an in-memory index
  std::size_t size() const;            // records held

  // At most this many records are kept; beyond it, records this process did not use are dropped.
  static constexpr std::size_t kMaxRecords = 4096;
  // At most this many scopes' learned directives are kept (beyond it, those this process did not use).
  static constexpr std::size_t kMaxLearned = 4096;
  // How long save() waits for the file's lock before giving up (what it learned stays in memory).
  static constexpr double kLockTimeoutS = 10.0;

 private:
  struct Record {
    FileIdentity id;
    HeaderFacts facts;
    bool used = false;  // found or learned by this process
  };
  struct Scope {
    Learned files;  // SHA-256 of a file's bytes -> directives
    bool used = false;
  };
  struct Contents {
    std::map<std::string, Record> records;
    std::map<std::string, Scope> learned;
  };
  void load_locked();
  void load_layers_locked();
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
  std::map<std::string, Scope> learned_;  // scope -> what was learned in it
  std::set<std::string> forgotten_;       // dropped by forget(): not taken back from the file at save()
  std::vector<std::filesystem::path> layers_;
  bool layers_loaded_ = false;
  std::map<std::string, Learned> layer_learned_;  // the layers', by scope
};

}  // namespace kjit::cache
