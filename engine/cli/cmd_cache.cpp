// The cache commands: `ls`, `verify`, `prune`, `clear` (DiskCache list / prune / clear; clear also removes
// the tuned choices, ChoiceStore::clear).
#include <CLI/CLI.hpp>
#include <sys/stat.h>

#include <algorithm>
#include <optional>

#include "commands.hpp"
#include "context.hpp"
#include "entry_differences.hpp"
#include "format.hpp"
#include "kjit/cache/choice_store.hpp"
#include "kjit/cache/disk_cache.hpp"
#include "kjit/cache/export_lock.hpp"
#include "kjit/error.hpp"
#include "kjit/pch_folders.hpp"
#include "kjit/settings.hpp"

namespace kjit::cli {
namespace {

using cache::EntryInfo;

// The <target> directory an entry lies in (its metadata may be unreadable).
std::string target_of(const EntryInfo& e) {
  if (e.meta) return e.meta->target;
  return e.path.parent_path().parent_path().filename().string();
}

std::string status_of(const EntryInfo& e) { return e.valid ? "valid" : "invalid (" + e.error + ")"; }

// ---- ls ---------------------------------------------------------------------------------------

Json entry_json(const EntryInfo& e, const std::string& differs) {
  Json j;
  j["key"] = e.key;
  j["path"] = e.path.string();
  j["layer"] = e.layer;
  j["valid"] = e.valid;
  j["error"] = e.valid ? Json(nullptr) : Json(e.error);
  j["size"] = e.size;
  j["target"] = target_of(e);
  if (e.meta) {
    const cache::EntryMetadata& m = *e.meta;
    j["requested_target"] = m.requested_target;
    j["output"] = cache::to_string(m.output);
    j["template"] = m.template_name;
    j["kernel"] = m.kernel;
    j["name_expression"] = m.name_expression;
    j["options"] = m.options;
    j["nvrtc_version"] = m.nvrtc_version;
    j["compile_ms"] = m.compile_ms;
    j["created"] = m.created;
    j["kjit_version"] = m.kjit_version;
  }
  j["differs"] = differs.empty() ? Json(nullptr) : Json(differs);
  return j;
}

int run_ls(Context& ctx, bool as_json) {
  cache::DiskCache& disk = ctx.disk();
  const std::vector<EntryInfo> entries = disk.list();
  // Entries of one kernel and target that were compiled otherwise (options, source, NVRTC): what differs.
  const std::vector<std::string> differs = differences(entries);
  const bool any_differs = std::any_of(differs.begin(), differs.end(), [](const auto& d) { return !d.empty(); });
  std::uint64_t bytes = 0;
  std::size_t invalid = 0;
  for (const auto& e : entries) {
    bytes += e.size;
    invalid += e.valid ? 0 : 1;
  }
  if (as_json) {
    Json j;
    j["cache"] = disk.describe();
    j["entries"] = Json::array();
    for (std::size_t i = 0; i < entries.size(); ++i) j["entries"].push_back(entry_json(entries[i], differs[i]));
    j["total"] = {{"entries", entries.size()}, {"invalid", invalid}, {"bytes", bytes}};
    print_json(ctx.out, j);
    return 0;
  }
  ctx.out << "cache " << printable(disk.describe()) << '\n';
  if (entries.empty()) {
    ctx.out << "no entries\n";
    return 0;
  }
  std::vector<std::string> header{"key", "target", "template", "kernel", "size", "status", "layer"};
  if (any_differs) header.push_back("differs");
  Table t(header);
  t.align_right(4);
  for (std::size_t i = 0; i < entries.size(); ++i) {
    const EntryInfo& e = entries[i];
    std::vector<std::string> row{e.key.substr(0, 16),
                                 target_of(e),
                                 e.meta ? e.meta->template_name : "-",
                                 e.meta ? e.meta->name_expression : "-",
                                 human_bytes(e.size),
                                 status_of(e),
                                 e.layer};
    if (any_differs) row.push_back(differs[i]);
    t.add_row(std::move(row));
  }
  t.print(ctx.out);
  ctx.out << count_of(entries.size(), "entry", "entries") << ", " << human_bytes(bytes);
  if (invalid) ctx.out << ", " << invalid << " invalid";
  ctx.out << '\n';
  return 0;
}

// ---- verify -----------------------------------------------------------------------------------

// `verify --dir DIR --lock FILE` checks a shipped cache against its lock (either option alone: the
// other is DIR/kjit.lock, or the lock's folder); without them, every entry of the configured cache.
struct VerifyRequest {
  std::string dir;
  std::string lock;
};

int run_verify_lock(Context& ctx, const VerifyRequest& r) {
  namespace fs = std::filesystem;
  const fs::path lock = r.lock.empty() ? fs::path(r.dir) / cache::kLockFileName : fs::path(r.lock);
  fs::path dir = r.dir.empty() ? lock.parent_path() : fs::path(r.dir);
  if (dir.empty()) dir = ".";
  // The default lock lies in DIR, which holds no links (verify_lock reports every one): not even read.
  struct stat st{};
  if (r.lock.empty() && ::lstat(lock.c_str(), &st) == 0 && S_ISLNK(st.st_mode))
    throw Error(lock.string() +
                " is a symbolic link, and `kjit verify --dir` does not follow links out of DIR "
                "(an export holds only regular files); to check against a lock kept elsewhere, pass it with "
                "--lock FILE");
  const std::vector<cache::LockedFile> locked = cache::read_lock(lock);
  const std::vector<std::string> problems = cache::verify_lock(dir, locked);
  for (const auto& p : problems) ctx.out << printable(p) << '\n';
  if (!problems.empty()) {
    ctx.out << count_of(problems.size(), "problem", "problems") << " in " << printable(dir.string()) << " against "
            << printable(lock.string()) << "; export it again (`kjit export MANIFEST --out DIR --arch ...`)\n";
    return 1;
  }
  ctx.out << count_of(locked.size(), "entry", "entries") << " of " << printable(dir.string()) << " match "
          << printable(lock.string()) << ", all valid\n";
  return 0;
}

int run_verify(Context& ctx, const VerifyRequest& r) {
  if (!r.dir.empty() || !r.lock.empty()) return run_verify_lock(ctx, r);
  const std::vector<EntryInfo> entries = ctx.disk().list();
  std::size_t damaged = 0;
  for (const auto& e : entries) {
    if (e.valid) continue;
    ++damaged;
    ctx.out << "damaged: " << printable(e.path.string()) << ": " << printable(e.error) << '\n';
  }
  if (damaged) {
    ctx.out << damaged << " of " << count_of(entries.size(), "entry", "entries")
            << " damaged; `kjit prune` removes damaged entries from the writable cache\n";
    return 1;
  }
  ctx.out << count_of(entries.size(), "entry", "entries") << " verified, all valid\n";
  return 0;
}

// ---- prune ------------------------------------------------------------------------------------

int run_prune(Context& ctx, const std::string& max_bytes_text) {
  ctx.require_readwrite("prune");
  std::optional<std::uint64_t> limit;
  if (!max_bytes_text.empty()) limit = parse_byte_size(max_bytes_text, "--max-bytes");
  cache::DiskCache& disk = ctx.disk();
  if (!limit) limit = disk.config().max_bytes;
  const cache::PruneReport r = disk.prune(limit);
  ctx.out << "pruned " << printable(disk.config().root.string());
  if (limit)
    ctx.out << " to at most " << human_bytes(*limit) << '\n';
  else
    ctx.out << " (no size limit: only damaged entries and abandoned files are removed)\n";
  Fields f;
  f.add("removed", count_of(r.removed_entries, "least recently used entry", "least recently used entries") + ", " +
                       count_of(r.removed_damaged, "damaged entry", "damaged entries") + ", " +
                       count_of(r.removed_temp_files, "stale temp file", "stale temp files") + ", " +
                       count_of(r.removed_lock_files, "abandoned lock file", "abandoned lock files"));
  f.add("size", human_bytes(r.bytes_before) + " -> " + human_bytes(r.bytes_after));
  // NVRTC's precompiled headers of processes that are gone (pch_folders.hpp): not in the cache, but
  // left by kjit, and large.
  const std::filesystem::path tmp = pch_parent_dir();
  std::uint64_t pch_bytes = 0;
  const std::vector<RemovedPchRoot> pch = remove_abandoned_pch_roots(tmp);
  for (const auto& p : pch) pch_bytes += p.bytes;
  f.add("pch", count_of(pch.size(), "abandoned precompiled-header folder", "abandoned precompiled-header folders") +
                   " removed from " + printable(tmp.string()) + " (" + human_bytes(pch_bytes) + ")");
  f.print(ctx.out);
  return 0;
}

// ---- clear ------------------------------------------------------------------------------------

int run_clear(Context& ctx, bool yes) {
  ctx.require_readwrite("clear");
  cache::DiskCache& disk = ctx.disk();
  const std::string root = disk.config().root.string();
  if (!yes) {
    std::size_t n = 0;
    std::uint64_t bytes = 0;
    for (const auto& e : disk.list())
      if (e.layer == "writable") {
        ++n;
        bytes += e.size;
      }
    const std::size_t choices = cache::ChoiceStore::count(disk.config().root);
    if (n == 0 && choices == 0) {
      ctx.out << "nothing to clear in " << printable(root) << '\n';
      return 0;
    }
    throw Error("clear would remove " + count_of(n, "entry", "entries") + " (" + human_bytes(bytes) + ")" +
                (choices ? " and " + count_of(choices, "tuned choice", "tuned choices") : std::string()) + " from " +
                root + "; run `kjit clear --yes` to confirm");
  }
  const std::size_t removed = disk.clear();
  const std::size_t choices = cache::ChoiceStore::clear(disk.config().root);
  ctx.out << "removed " << count_of(removed, "entry", "entries");
  if (choices) ctx.out << " and " << count_of(choices, "tuned choice", "tuned choices");
  ctx.out << " from " << printable(root) << '\n';
  return 0;
}

}  // namespace

std::vector<Command> add_cache_commands(CLI::App& app, Context& ctx) {
  std::vector<Command> out;

  auto ls_json = std::make_shared<bool>(false);
  CLI::App* ls = app.add_subcommand("ls", "List the cache entries of every layer");
  ls->add_flag("--json", *ls_json, "Print JSON");
  out.push_back({ls, [&ctx, ls_json]() { return run_ls(ctx, *ls_json); }});

  auto verify_req = std::make_shared<VerifyRequest>();
  CLI::App* verify = app.add_subcommand("verify", "Check every cache entry; exit status 1 if any is damaged");
  // An empty path (an unset shell variable) must not fall back to checking the user's own cache.
  auto non_empty = [](const char* what) {
    return [what](const std::string& text) {
      return text.empty() ? std::string("an empty path is not allowed (an unset variable?); give ") + what
                          : std::string();
    };
  };
  verify->add_option("--dir", verify_req->dir, "Check this exported cache against its lock instead")
      ->type_name("DIR")
      ->check(non_empty("the exported cache's folder"));
  verify->add_option("--lock", verify_req->lock, "Lock file of --dir (default DIR/kjit.lock)")
      ->type_name("FILE")
      ->check(non_empty("the lock file, or leave --lock out for DIR/kjit.lock"));
  out.push_back({verify, [&ctx, verify_req]() { return run_verify(ctx, *verify_req); }});

  auto max_bytes = std::make_shared<std::string>();
  CLI::App* prune = app.add_subcommand(
      "prune", "Evict least recently used entries down to a size; remove damaged entries and stale files");
  prune->add_option("--max-bytes", *max_bytes, "Size limit (suffix K, M or G); default KJIT_CACHE_MAX_BYTES")
      ->type_name("N")
      ->check([](const std::string& text) {
        try {
          parse_byte_size(text, "value");
          return std::string();
        } catch (const ValueError& e) {
          return std::string(e.what());
        }
      });
  out.push_back({prune, [&ctx, max_bytes]() { return run_prune(ctx, *max_bytes); }});

  auto yes = std::make_shared<bool>(false);
  CLI::App* clear = app.add_subcommand("clear", "Remove every entry and tuned choice of the writable cache");
  clear->add_flag("--yes,-y", *yes, "Do it (without it, clear only says what it would remove)");
  out.push_back({clear, [&ctx, yes]() { return run_clear(ctx, *yes); }});
  return out;
}

}  // namespace kjit::cli
