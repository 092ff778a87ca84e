// DiskCache: layout, modes, every fault recovered, read-only layers, LRU, list/prune/clear.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <ctime>
#include <functional>
#include <thread>

#include "cache_test_helpers.hpp"
#include "kjit/cache/disk_cache.hpp"
#include "kjit/cache/file_lock.hpp"
#include "kjit/cache/layout.hpp"
#include "kjit/cache_config.hpp"
#include "kjit/error.hpp"
#include "test_support.hpp"

using namespace kjit::cache;
using namespace kjit::testing;
namespace fs = std::filesystem;

namespace {

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// Sets a file's mtime (and atime) to `seconds_ago` before now.
void set_age(const fs::path& p, long seconds_ago) {
  struct timespec t[2];
  t[0].tv_sec = t[1].tv_sec = std::time(nullptr) - seconds_ago;
  t[0].tv_nsec = t[1].tv_nsec = 0;
  ASSERT_EQ(::utimensat(AT_FDCWD, p.c_str(), t, 0), 0) << p;
}

long age_of(const fs::path& p) {
  struct stat st{};
  if (::stat(p.c_str(), &st) != 0) return -1;
  return static_cast<long>(std::time(nullptr) - st.st_mtim.tv_sec);
}

// A pid that is certainly not running: a child that has exited and been reaped.
pid_t dead_pid() {
  pid_t pid = ::fork();
  if (pid == 0) ::_exit(0);
  ::waitpid(pid, nullptr, 0);
  return pid;
}

// Stores an entry with a writable cache, damages the file with `damage`, then checks that a fresh
// cache treats it as a miss, removes it, warns once (path, reason, "recompiled"), and recompiles.
void expect_damage_recovered(const std::string& seed, const std::function<void(std::string&)>& damage,
                             const std::string& reason) {
  TempDir dir;
  const Entry e = make_entry(seed);
  const fs::path path = DiskCache(cache_config(dir.path())).entry_path(e.key, "sm_90");
  {
    DiskCache c(cache_config(dir.path()));
    ASSERT_TRUE(c.store(e));
  }
  std::string bytes = read_file(path);
  damage(bytes);
  write_file(path, bytes);

  WarningCapture warnings;
  DiskCache c(cache_config(dir.path()));
  EXPECT_FALSE(c.load(e.key, "sm_90").has_value());
  EXPECT_FALSE(fs::exists(path)) << "a damaged entry of the writable layer is removed";
  ASSERT_EQ(warnings.count(), 1u) << warnings.all();
  const std::string w = warnings.messages()[0];
  EXPECT_TRUE(contains(w, path.string())) << w;
  EXPECT_TRUE(contains(w, reason)) << w;
  EXPECT_TRUE(contains(w, "recompiled")) << w;

  bool produced = false;
  const Entry back = c.load_or_produce(e.key, "sm_90", [&] { return e; }, &produced);
  EXPECT_TRUE(produced);
  EXPECT_TRUE(same_entry(back, e));
  const auto again = c.load(e.key, "sm_90");
  ASSERT_TRUE(again.has_value()) << "the recompiled entry is stored again";
  EXPECT_TRUE(same_entry(*again, e));
  EXPECT_EQ(warnings.count(), 1u) << warnings.all();
}

}  // namespace

// ---- basics --------------------------------------------------------------------------------------

TEST(DiskCache, StoreThenLoad) {
  TempDir dir;
  const Entry e = make_entry("dc-store-load", "sm_90", 4096);
  WarningCapture warnings;
  {
    DiskCache c(cache_config(dir.path()));
    EXPECT_TRUE(c.writable());
    EXPECT_EQ(c.problem(), "") << "a usable cache has no problem";
    EXPECT_FALSE(c.load(e.key, "sm_90").has_value());
    ASSERT_TRUE(c.store(e));
    auto hit = c.load(e.key, "sm_90");
    ASSERT_TRUE(hit.has_value());
    EXPECT_TRUE(same_entry(*hit, e));
    EXPECT_FALSE(c.load(e.key, "sm_80").has_value()) << "another target is another entry";
  }
  DiskCache fresh(cache_config(dir.path()));
  auto hit = fresh.load(e.key, "sm_90");
  ASSERT_TRUE(hit.has_value());
  EXPECT_TRUE(same_entry(*hit, e));
  EXPECT_EQ(warnings.count(), 0u) << warnings.all();
}

TEST(DiskCache, EntryPathLayout) {
  TempDir dir;
  const Entry e = make_entry("dc-layout", "sm_90a");
  DiskCache c(cache_config(dir.path()));
  const std::string k = e.key.hex();
  const fs::path expected = dir.path() / "v1" / "sm_90a" / k.substr(0, 2) / (k + ".kjit");
  EXPECT_EQ(c.entry_path(e.key, "sm_90a"), expected);
  ASSERT_TRUE(c.store(e));
  EXPECT_EQ(files_under(dir.path()), std::vector<fs::path>{expected}) << "exactly the entry: no temp or lock file left";
  EXPECT_EQ(file_mode(expected), 0600u);
}

TEST(DiskCache, TargetMustBeADirectoryName) {
  TempDir dir;
  DiskCache c(cache_config(dir.path()));
  const Entry e = make_entry("dc-target");
  const std::vector<std::string> bad_targets = {"", "..", ".", "../../etc", "sm_90/x", std::string(65, 'a')};
  for (const std::string& bad : bad_targets) {
    try {
      c.load(e.key, bad);
      ADD_FAILURE() << "accepted target '" << bad << "'";
    } catch (const kjit::ValueError& ex) {
      EXPECT_TRUE(contains(ex.what(), "sm_90")) << ex.what();
    }
  }
}

TEST(DiskCache, DirectoriesAreCreatedOwnerOnly) {
  TempDir dir;
  ASSERT_EQ(::chmod(dir.path().c_str(), 0755), 0);
  // A umask that would make mkdir(0700) give 0500 (unwritable): the cache must chmod after mkdir.
  const mode_t old_umask = ::umask(0277);
  const fs::path root = dir.path() / "a" / "b" / "cache";
  const Entry e = make_entry("dc-modes");
  {
    DiskCache c(cache_config(root));
    ASSERT_TRUE(c.store(e));
  }
  ::umask(old_umask);
  const std::string k = e.key.hex();
  for (const fs::path& p : {dir.path() / "a", dir.path() / "a" / "b", root, root / "v1", root / "v1" / "sm_90",
                            root / "v1" / "sm_90" / k.substr(0, 2)})
    EXPECT_EQ(file_mode(p), 0700u) << p;
  EXPECT_EQ(file_mode(dir.path()), 0755u) << "an existing parent is left as it was";
}

TEST(DiskCache, ConfigFromSettings) {
  const kjit::Settings s = kjit::Settings::from_map({{"KJIT_CACHE_DIR", "/x/c"},
                                                     {"KJIT_CACHE_MODE", "readonly"},
                                                     {"KJIT_CACHE_PATH", "/l1:/l2"},
                                                     {"KJIT_CACHE_MAX_BYTES", "2K"},
                                                     {"KJIT_LOCK_TIMEOUT", "7"}});
  const DiskCacheConfig c = kjit::disk_cache_config(s);
  EXPECT_EQ(c.root, fs::path("/x/c"));
  EXPECT_EQ(c.mode, CacheMode::ReadOnly);
  EXPECT_EQ(c.layers, (std::vector<fs::path>{"/l1", "/l2"}));
  EXPECT_EQ(c.max_bytes, std::optional<std::uint64_t>(2048));
  EXPECT_EQ(c.lock_timeout_s, 7.0);
}

// ---- modes ---------------------------------------------------------------------------------------

TEST(DiskCache, ReadOnlyModeLoadsButNeverWrites) {
  TempDir dir;
  const Entry stored = make_entry("dc-ro-stored"), fresh = make_entry("dc-ro-fresh");
  WarningCapture warnings;
  {
    DiskCache nothing(cache_config(dir.path() / "absent", CacheMode::ReadOnly));
    EXPECT_FALSE(fs::exists(dir.path() / "absent")) << "readonly mode creates nothing";
  }
  ASSERT_TRUE(DiskCache(cache_config(dir.path())).store(stored));
  const auto before = files_under(dir.path());

  DiskCache c(cache_config(dir.path(), CacheMode::ReadOnly));
  EXPECT_FALSE(c.writable());
  auto hit = c.load(stored.key, "sm_90");
  ASSERT_TRUE(hit.has_value());
  EXPECT_TRUE(same_entry(*hit, stored));
  EXPECT_FALSE(c.store(fresh));
  bool produced = false;
  EXPECT_TRUE(same_entry(c.load_or_produce(fresh.key, "sm_90", [&] { return fresh; }, &produced), fresh));
  EXPECT_TRUE(produced);
  EXPECT_EQ(files_under(dir.path()), before) << "nothing written: no entry, no lock";
  EXPECT_EQ(warnings.count(), 0u) << "readonly is a choice, not a failure: " << warnings.all();
  EXPECT_EQ(c.problem(), "") << "readonly is a choice, not a problem";
  EXPECT_TRUE(contains(c.describe(), "(readonly")) << c.describe();
}

TEST(DiskCache, StrictModeIsReadOnlyOnDisk) {
  TempDir dir;
  const Entry stored = make_entry("dc-strict-stored"), fresh = make_entry("dc-strict-fresh");
  ASSERT_TRUE(DiskCache(cache_config(dir.path())).store(stored));
  const auto before = files_under(dir.path());
  WarningCapture warnings;
  DiskCache c(cache_config(dir.path(), CacheMode::Strict));
  EXPECT_FALSE(c.writable());
  EXPECT_TRUE(c.load(stored.key, "sm_90").has_value());
  EXPECT_FALSE(c.load(fresh.key, "sm_90").has_value());
  EXPECT_FALSE(c.store(fresh));
  EXPECT_EQ(files_under(dir.path()), before);
  EXPECT_EQ(warnings.count(), 0u) << warnings.all();
  EXPECT_TRUE(contains(c.describe(), "(strict")) << c.describe();
}

TEST(DiskCache, OffModeNeverTouchesTheDisk) {
  TempDir dir;
  const Entry stored = make_entry("dc-off");
  ASSERT_TRUE(DiskCache(cache_config(dir.path())).store(stored));
  const auto before = files_under(dir.path());
  DiskCache c(cache_config(dir.path(), CacheMode::Off));
  EXPECT_FALSE(c.writable());
  EXPECT_FALSE(c.load(stored.key, "sm_90").has_value()) << "off: load always misses";
  EXPECT_FALSE(c.store(make_entry("dc-off-2")));
  EXPECT_TRUE(c.list().empty());
  EXPECT_EQ(c.clear(), 0u);
  EXPECT_EQ(files_under(dir.path()), before);
  DiskCache absent(cache_config(dir.path() / "absent", CacheMode::Off));
  EXPECT_FALSE(fs::exists(dir.path() / "absent"));
  EXPECT_TRUE(contains(c.describe(), "(off")) << c.describe();
}

TEST(DiskCache, DescribeSaysWhereAndWhichState) {
  TempDir dir;
  DiskCache c(cache_config(dir.path()));
  EXPECT_EQ(c.describe(), dir.path().string() + " (readwrite, writable)");
}

// ---- faults --------------------------------------------------------------------------------------

TEST(DiskCacheFaults, TruncatedEntry) {
  expect_damage_recovered("dc-fault-trunc", [](std::string& b) { b.resize(b.size() / 2); }, "truncated");
}

TEST(DiskCacheFaults, OneFlippedPayloadByte) {
  expect_damage_recovered(
      "dc-fault-flip", [](std::string& b) { b[b.size() - 3] ^= 0x10; }, "payload checksum mismatch");
}

TEST(DiskCacheFaults, GarbageMetadata) {
  // Garbage in the metadata bytes (checksum left as it was).
  expect_damage_recovered(
      "dc-fault-meta",
      [](std::string& b) {
        b[152] = '#';
        b[153] = '!';
      },
      "metadata checksum mismatch");
}

TEST(DiskCacheFaults, WrongMagic) {
  expect_damage_recovered("dc-fault-magic", [](std::string& b) { b[0] = 'Z'; }, "bad magic");
}

TEST(DiskCacheFaults, ZeroLengthFile) {
  expect_damage_recovered("dc-fault-empty", [](std::string& b) { b.clear(); }, "empty");
}

TEST(DiskCacheFaults, EntryUnderTheWrongTarget) {
  TempDir dir;
  const Entry e = make_entry("dc-fault-target", "sm_80");
  DiskCache c(cache_config(dir.path()));
  ASSERT_TRUE(c.store(e));
  const fs::path moved = c.entry_path(e.key, "sm_90");
  fs::create_directories(moved.parent_path());
  fs::copy_file(c.entry_path(e.key, "sm_80"), moved);
  WarningCapture warnings;
  EXPECT_FALSE(c.load(e.key, "sm_90").has_value());
  EXPECT_FALSE(fs::exists(moved));
  ASSERT_EQ(warnings.count(), 1u);
  EXPECT_TRUE(contains(warnings.messages()[0], "target mismatch")) << warnings.all();
  EXPECT_TRUE(c.load(e.key, "sm_80").has_value());
}

TEST(DiskCacheFaults, DamagedEntryIsReportedOnce) {
  TempDir dir;
  const Entry e = make_entry("dc-fault-once");
  DiskCache c(cache_config(dir.path()));
  const fs::path path = c.entry_path(e.key, "sm_90");
  WarningCapture warnings;
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(c.store(e));
    std::string b = read_file(path);
    b[b.size() - 1] ^= 1;
    write_file(path, b);
    EXPECT_FALSE(c.load(e.key, "sm_90").has_value());
    EXPECT_FALSE(fs::exists(path));
  }
  EXPECT_EQ(warnings.count(), 1u) << warnings.all();
}

TEST(DiskCacheFaults, LeftoverTempFilesAreIgnoredAndPruned) {
  TempDir dir;
  const Entry e = make_entry("dc-fault-temp");
  DiskCache c(cache_config(dir.path()));
  const fs::path entry = c.entry_path(e.key, "sm_90");
  const std::string base = entry.string() + ".tmp.";
  const fs::path dead = base + std::to_string(dead_pid()) + ".0123456789abcdef";
  const fs::path live = base + std::to_string(::getpid()) + ".00000000000000aa";
  const fs::path old_live = base + std::to_string(::getpid()) + ".00000000000000bb";
  const fs::path unparsable = base + "garbage";
  for (const auto& p : {dead, live, old_live, unparsable}) write_file(p, "half an entry");
  set_age(old_live, 2 * 3600);
  set_age(unparsable, 2 * 3600);
  // A live writer holds the flock of its temp file until the rename (atomic_file.hpp).
  const int writer = ::open(live.c_str(), O_RDONLY | O_CLOEXEC);
  ASSERT_GE(writer, 0);
  ASSERT_EQ(::flock(writer, LOCK_EX), 0);

  WarningCapture warnings;
  EXPECT_FALSE(c.load(e.key, "sm_90").has_value());
  EXPECT_TRUE(c.list().empty()) << "temp files are not entries";
  EXPECT_EQ(warnings.count(), 0u) << warnings.all();

  const PruneReport r = c.prune();
  EXPECT_EQ(r.removed_temp_files, 3u);
  EXPECT_FALSE(fs::exists(dead)) << "nobody holds it";
  EXPECT_FALSE(fs::exists(old_live)) << "named after a live pid, but nobody holds it";
  EXPECT_FALSE(fs::exists(unparsable));
  EXPECT_TRUE(fs::exists(live)) << "its writer holds it";
  ::close(writer);

  ASSERT_TRUE(c.store(e));
  EXPECT_TRUE(c.load(e.key, "sm_90").has_value());
}

// The header index is written through a temp file beside it (header-index.json.tmp.<pid>.<random>): one
// left by a writer that died before its rename is removed by prune and clear, unless a writer holds it.
TEST(DiskCacheFaults, LeftoverHeaderIndexTempFilesArePrunedAndCleared) {
  TempDir dir;
  DiskCache c(cache_config(dir.path()));
  const fs::path index = layout::header_index_path(dir.path());
  const fs::path dead = index.string() + ".tmp." + std::to_string(dead_pid()) + ".0123456789abcdef";
  const fs::path live = index.string() + ".tmp." + std::to_string(::getpid()) + ".00000000000000aa";
  const fs::path other = index.parent_path() / "header-index.jsonx.tmp.1.0123456789abcdef";  // not its temp file
  for (const auto& p : {dead, live, other}) write_file(p, "{\"half\": ");
  const int writer = ::open(live.c_str(), O_RDONLY | O_CLOEXEC);
  ASSERT_GE(writer, 0);
  ASSERT_EQ(::flock(writer, LOCK_EX), 0);

  EXPECT_EQ(c.prune().removed_temp_files, 1u);
  EXPECT_FALSE(fs::exists(dead)) << "nobody holds it";
  EXPECT_TRUE(fs::exists(live)) << "its writer holds it";
  EXPECT_TRUE(fs::exists(other)) << "not kjit's";
  ::close(writer);
  c.clear();
  EXPECT_FALSE(fs::exists(live)) << "its writer is gone";
  EXPECT_TRUE(fs::exists(other));
}

TEST(DiskCacheFaults, ReadOnlyDirectory) {
  if (::geteuid() == 0)
    GTEST_SKIP() << "running as root: permission bits do not stop root, so a chmod 0500 directory "
                    "stays writable; UnusableRootIsAWarningNotACrash and "
                    "StoreFailureDegradesToMemoryOnce cover the degraded path as root";
  TempDir dir;
  const Entry stored = make_entry("dc-fault-rodir-stored"), fresh = make_entry("dc-fault-rodir-fresh");
  ASSERT_TRUE(DiskCache(cache_config(dir.path())).store(stored));
  ASSERT_EQ(::chmod(dir.path().c_str(), 0500), 0);
  WarningCapture warnings;
  DiskCache c(cache_config(dir.path()));
  EXPECT_FALSE(c.writable());
  EXPECT_FALSE(c.store(fresh));
  EXPECT_FALSE(c.store(make_entry("dc-fault-rodir-other")));
  ASSERT_EQ(warnings.count(), 1u) << warnings.all();
  EXPECT_TRUE(contains(warnings.messages()[0], dir.path().string())) << warnings.all();
  EXPECT_TRUE(contains(warnings.messages()[0], "memory only")) << warnings.all();
  EXPECT_TRUE(c.load(stored.key, "sm_90").has_value()) << "loads still work";
  ::chmod(dir.path().c_str(), 0700);
}

TEST(DiskCacheFaults, UnusableRootIsAWarningNotACrash) {
  TempDir dir;
  write_file(dir.path() / "file", "a regular file where a directory should be");
  const fs::path root = dir.path() / "file" / "cache";
  const Entry e = make_entry("dc-fault-noroot");
  WarningCapture warnings;
  std::unique_ptr<DiskCache> c;
  ASSERT_NO_THROW(c = std::make_unique<DiskCache>(cache_config(root)));
  EXPECT_FALSE(c->writable());
  ASSERT_EQ(warnings.count(), 1u) << warnings.all();
  const std::string w = warnings.messages()[0];
  EXPECT_TRUE(contains(w, root.string())) << w;
  EXPECT_TRUE(contains(w, "Not a directory")) << w;
  EXPECT_TRUE(contains(w, "kernels are cached in memory only for this process")) << w;
  EXPECT_TRUE(contains(c->describe(), "memory only")) << c->describe();
  // problem(): the warning's reason, for front ends that report it (the demo's summary).
  EXPECT_EQ(c->problem(), "cannot create " + root.string() + ": Not a directory") << c->problem();
  EXPECT_TRUE(contains(w, c->problem())) << w;

  EXPECT_FALSE(c->store(e));
  EXPECT_FALSE(c->load(e.key, "sm_90").has_value());
  bool produced = false;
  EXPECT_TRUE(same_entry(c->load_or_produce(e.key, "sm_90", [&] { return e; }, &produced), e));
  EXPECT_TRUE(produced);
  EXPECT_EQ(warnings.count(), 1u) << "warned once: " << warnings.all();
}

TEST(DiskCacheFaults, StoreFailureDegradesToMemoryOnce) {
  TempDir dir;
  DiskCache c(cache_config(dir.path()));
  ASSERT_TRUE(c.writable());
  write_file(dir.path() / "v1" / "sm_90", "a file where the target directory should be");
  WarningCapture warnings;
  EXPECT_FALSE(c.store(make_entry("dc-fault-degrade-1", "sm_90")));
  EXPECT_FALSE(c.writable());
  ASSERT_EQ(warnings.count(), 1u) << warnings.all();
  const std::string w = warnings.messages()[0];
  EXPECT_TRUE(contains(w, (dir.path() / "v1" / "sm_90").string())) << w;
  EXPECT_TRUE(contains(w, "memory only")) << w;
  EXPECT_TRUE(contains(c.problem(), "cannot write to " + (dir.path() / "v1" / "sm_90").string())) << c.problem();
  EXPECT_TRUE(contains(w, c.problem())) << w;
  // Later stores are skipped, even where they would work, and say nothing more.
  EXPECT_FALSE(c.store(make_entry("dc-fault-degrade-2", "sm_80")));
  EXPECT_FALSE(fs::exists(dir.path() / "v1" / "sm_80"));
  EXPECT_EQ(warnings.count(), 1u) << warnings.all();
  EXPECT_TRUE(contains(c.describe(), "memory only")) << c.describe();
}

TEST(DiskCacheFaults, ConcurrentFailingStoresWarnOnce) {
  TempDir dir;
  DiskCache c(cache_config(dir.path()));
  write_file(dir.path() / "v1" / "sm_90", "a file where the target directory should be");
  WarningCapture warnings;
  std::atomic<int> ready{0}, stored{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      const Entry e = make_entry("dc-fault-concurrent-" + std::to_string(t));
      ready++;
      while (ready.load() < 8) std::this_thread::yield();
      if (c.store(e)) stored++;
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(stored.load(), 0);
  EXPECT_EQ(warnings.count(), 1u) << warnings.all();
}

TEST(DiskCacheFaults, WriteFailingMidway) {
  TempDir dir;
  const Entry small = make_entry("dc-fault-fsize-small", "sm_90", 100);
  ASSERT_TRUE(DiskCache(cache_config(dir.path())).store(small));

  pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    // Child: files may not grow past 64 KiB; a 1 MiB entry fails in the middle of write().
    int code = 0;
    try {
      ::signal(SIGXFSZ, SIG_IGN);
      struct rlimit lim{64 * 1024, 64 * 1024};
      if (::setrlimit(RLIMIT_FSIZE, &lim) != 0) ::_exit(100);
      WarningCapture warnings;
      DiskCache c(cache_config(dir.path()));
      const Entry big = make_entry("dc-fault-fsize-big", "sm_90", 1 << 20);
      if (c.store(big)) code |= 1;  // must fail
      if (warnings.count() != 1)
        code |= 2;  // with one warning
      else if (!contains(warnings.messages()[0], "File too large"))
        code |= 4;
      const fs::path final_path = c.entry_path(big.key, "sm_90");
      if (fs::exists(final_path)) code |= 8;                                    // no partial entry
      if (!files_named(dir.path(), ".tmp.").empty()) code |= 16;                // no temp file
      if (c.store(make_entry("dc-fault-fsize-next", "sm_90", 10))) code |= 32;  // skipped now
      if (warnings.count() != 1) code |= 64;                                    // silently
      if (!c.load(small.key, "sm_90")) code |= 128;                             // loads still work
    } catch (...) {
      code |= 0x7f;
    }
    ::_exit(code);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status)) << "child died: status " << status;
  EXPECT_EQ(WEXITSTATUS(status), 0) << "bits: 1 stored, 2 warning count, 4 warning text, 8 entry left, 16 temp left, "
                                       "32 later store not skipped, 64 extra warning, 128 load failed";
  EXPECT_TRUE(files_named(dir.path(), ".tmp.").empty());
}

// ---- read-only layers ----------------------------------------------------------------------------

TEST(DiskCacheLayers, EntryOnlyInALayerIsFound) {
  TempDir root, layer;
  const Entry e = make_entry("dc-layer-found");
  ASSERT_TRUE(DiskCache(cache_config(layer.path())).store(e));
  auto cfg = cache_config(root.path());
  cfg.layers = {root.path() / "missing-layer", layer.path()};
  DiskCache c(cfg);
  auto hit = c.load(e.key, "sm_90");
  ASSERT_TRUE(hit.has_value());
  EXPECT_TRUE(same_entry(*hit, e));
  bool produced = true;
  c.load_or_produce(e.key, "sm_90", [&]() -> Entry { throw std::runtime_error("no"); }, &produced);
  EXPECT_FALSE(produced);
  EXPECT_FALSE(fs::exists(c.entry_path(e.key, "sm_90"))) << "a layer hit is not copied";
}

TEST(DiskCacheLayers, WritableLayerWins) {
  TempDir root, layer;
  Entry in_layer = make_entry("dc-layer-wins"), in_root = in_layer;
  in_layer.payload = "from the layer";
  in_root.payload = "from the writable root";
  ASSERT_TRUE(DiskCache(cache_config(layer.path())).store(in_layer));
  auto cfg = cache_config(root.path());
  cfg.layers = {layer.path()};
  DiskCache c(cfg);
  ASSERT_TRUE(c.store(in_root));
  auto hit = c.load(in_root.key, "sm_90");
  ASSERT_TRUE(hit.has_value());
  EXPECT_EQ(hit->payload, "from the writable root");
}

TEST(DiskCacheLayers, DamagedEntryInALayerIsAMissAndStays) {
  TempDir root, layer;
  const Entry e = make_entry("dc-layer-damaged");
  DiskCache writer(cache_config(layer.path()));
  ASSERT_TRUE(writer.store(e));
  const fs::path path = writer.entry_path(e.key, "sm_90");
  std::string bytes = read_file(path);
  bytes[bytes.size() - 1] ^= 0x40;
  write_file(path, bytes);

  auto cfg = cache_config(root.path());
  cfg.layers = {layer.path()};
  DiskCache c(cfg);
  WarningCapture warnings;
  EXPECT_FALSE(c.load(e.key, "sm_90").has_value());
  EXPECT_FALSE(c.load(e.key, "sm_90").has_value());
  EXPECT_EQ(read_file(path), bytes) << "a read-only layer is never modified";
  ASSERT_EQ(warnings.count(), 1u) << warnings.all();
  EXPECT_TRUE(contains(warnings.messages()[0], "read-only layer")) << warnings.all();
  EXPECT_TRUE(contains(warnings.messages()[0], path.string())) << warnings.all();
  c.prune();
  c.clear();
  EXPECT_EQ(read_file(path), bytes) << "prune and clear only touch the writable layer";
}

// ---- LRU -----------------------------------------------------------------------------------------

TEST(DiskCacheLru, HitRefreshesMtime) {
  TempDir dir;
  const Entry e = make_entry("dc-lru-touch");
  DiskCache c(cache_config(dir.path()));
  ASSERT_TRUE(c.store(e));
  const fs::path path = c.entry_path(e.key, "sm_90");
  set_age(path, 5000);
  ASSERT_TRUE(DiskCache(cache_config(dir.path(), CacheMode::ReadOnly)).load(e.key, "sm_90"));
  EXPECT_GE(age_of(path), 4999) << "readonly mode writes nothing, not even an mtime";
  ASSERT_TRUE(c.load(e.key, "sm_90"));
  EXPECT_LE(age_of(path), 5);
}

TEST(DiskCacheLru, RecentlyLoadedEntrySurvivesEviction) {
  TempDir dir;
  std::vector<Entry> e;
  for (const char* s : {"dc-lru-a", "dc-lru-b", "dc-lru-c", "dc-lru-d"}) e.push_back(make_entry(s, "sm_90", 1000));
  std::uint64_t size = 0;
  {
    DiskCache probe(cache_config(dir.path()));
    ASSERT_TRUE(probe.store(e[0]));
    size = fs::file_size(probe.entry_path(e[0].key, "sm_90"));
  }
  auto cfg = cache_config(dir.path());
  cfg.max_bytes = 3 * size + size / 2;  // room for three entries
  DiskCache c(cfg);
  ASSERT_TRUE(c.store(e[1]));
  ASSERT_TRUE(c.store(e[2]));
  set_age(c.entry_path(e[0].key, "sm_90"), 300);  // a: oldest
  set_age(c.entry_path(e[1].key, "sm_90"), 200);  // b
  set_age(c.entry_path(e[2].key, "sm_90"), 100);  // c
  ASSERT_TRUE(c.load(e[0].key, "sm_90"));         // a is used: now the most recent
  ASSERT_TRUE(c.store(e[3]));                     // over the cap: the least recently used goes
  EXPECT_TRUE(fs::exists(c.entry_path(e[0].key, "sm_90"))) << "recently loaded";
  EXPECT_FALSE(fs::exists(c.entry_path(e[1].key, "sm_90"))) << "least recently used";
  EXPECT_TRUE(fs::exists(c.entry_path(e[2].key, "sm_90")));
  EXPECT_TRUE(fs::exists(c.entry_path(e[3].key, "sm_90"))) << "just stored";
}

TEST(DiskCacheLru, StoreNeverEvictsTheEntryJustStored) {
  TempDir dir;
  auto cfg = cache_config(dir.path());
  cfg.max_bytes = 10;  // smaller than any entry
  DiskCache c(cfg);
  const Entry a = make_entry("dc-lru-keep-a"), b = make_entry("dc-lru-keep-b");
  ASSERT_TRUE(c.store(a));
  EXPECT_TRUE(c.load(a.key, "sm_90").has_value());
  ASSERT_TRUE(c.store(b));
  EXPECT_FALSE(c.load(a.key, "sm_90").has_value());
  EXPECT_TRUE(c.load(b.key, "sm_90").has_value());
}

TEST(DiskCacheLru, PruneToASize) {
  TempDir dir;
  DiskCache c(cache_config(dir.path()));
  std::vector<Entry> e;
  std::uint64_t total = 0;
  for (int i = 0; i < 5; ++i) {
    e.push_back(make_entry("dc-prune-" + std::to_string(i), "sm_90", 500));
    ASSERT_TRUE(c.store(e.back()));
    const fs::path p = c.entry_path(e.back().key, "sm_90");
    set_age(p, 1000 - 100 * i);  // entry 0 is the oldest
    total += fs::file_size(p);
  }
  const std::uint64_t one = total / 5;
  const PruneReport r = c.prune(2 * one);
  EXPECT_EQ(r.bytes_before, total);
  EXPECT_EQ(r.removed_entries, 3u);
  EXPECT_LE(r.bytes_after, 2 * one);
  EXPECT_EQ(r.bytes_after, 2 * one);
  for (int i = 0; i < 5; ++i) EXPECT_EQ(fs::exists(c.entry_path(e[i].key, "sm_90")), i >= 3) << i;
}

// ---- list / prune / clear ------------------------------------------------------------------------

TEST(DiskCacheMaintenance, ListReportsEveryEntryOfEveryLayer) {
  TempDir root, layer;
  const Entry good = make_entry("dc-list-good", "sm_90", 300), bad = make_entry("dc-list-bad", "sm_80"),
              layered = make_entry("dc-list-layer", "compute_90");
  auto cfg = cache_config(root.path());
  cfg.layers = {layer.path()};
  DiskCache c(cfg);
  ASSERT_TRUE(c.store(good));
  ASSERT_TRUE(c.store(bad));
  ASSERT_TRUE(DiskCache(cache_config(layer.path())).store(layered));
  const fs::path bad_path = c.entry_path(bad.key, "sm_80");
  std::string b = read_file(bad_path);
  b.resize(100);
  write_file(bad_path, b);
  write_file(c.entry_path(good.key, "sm_90").string() + ".tmp.1.abc", "temp");
  write_file(c.entry_path(good.key, "sm_90").parent_path() / (good.key.hex() + ".lock"), "");
  write_file(root.path() / "v1" / "sm_90" / "zz" / "not-a-key.kjit", "x");

  const std::vector<EntryInfo> list = c.list();
  ASSERT_EQ(list.size(), 4u);
  std::map<std::string, EntryInfo> by_name;
  for (const auto& i : list) by_name[i.path.filename().string()] = i;
  const EntryInfo& g = by_name.at(good.key.hex() + ".kjit");
  EXPECT_TRUE(g.valid);
  EXPECT_EQ(g.layer, "writable");
  EXPECT_EQ(g.key, good.key.hex());
  EXPECT_EQ(g.size, fs::file_size(g.path));
  ASSERT_TRUE(g.meta.has_value());
  EXPECT_EQ(g.meta->name_expression, good.meta.name_expression);
  const EntryInfo& d = by_name.at(bad.key.hex() + ".kjit");
  EXPECT_FALSE(d.valid);
  EXPECT_TRUE(contains(d.error, "truncated")) << d.error;
  EXPECT_EQ(d.size, 100u);
  const EntryInfo& l = by_name.at(layered.key.hex() + ".kjit");
  EXPECT_TRUE(l.valid) << l.error;
  EXPECT_EQ(l.layer, layer.path().string());
  EXPECT_EQ(l.meta->target, "compute_90");
  const EntryInfo& n = by_name.at("not-a-key.kjit");
  EXPECT_FALSE(n.valid);
  EXPECT_TRUE(contains(n.error, "file name")) << n.error;
}

TEST(DiskCacheMaintenance, PruneRemovesDamagedEntriesAndAbandonedLocks) {
  TempDir dir;
  DiskCache c(cache_config(dir.path()));
  const Entry good = make_entry("dc-prune-good"), bad = make_entry("dc-prune-bad");
  ASSERT_TRUE(c.store(good));
  ASSERT_TRUE(c.store(bad));
  std::string b = read_file(c.entry_path(bad.key, "sm_90"));
  b[0] = 'X';
  write_file(c.entry_path(bad.key, "sm_90"), b);
  const fs::path shard = c.entry_path(good.key, "sm_90").parent_path();
  const fs::path abandoned = shard / "abandoned.lock", held = shard / "held.lock";
  write_file(abandoned, "");
  std::string why;
  FileLock holder = FileLock::acquire(held, 1.0, &why);
  ASSERT_TRUE(holder.locked()) << why;

  const PruneReport r = c.prune();
  EXPECT_EQ(r.removed_damaged, 1u);
  EXPECT_EQ(r.removed_entries, 0u);
  EXPECT_EQ(r.removed_lock_files, 1u);
  EXPECT_FALSE(fs::exists(c.entry_path(bad.key, "sm_90")));
  EXPECT_TRUE(c.load(good.key, "sm_90").has_value());
  EXPECT_FALSE(fs::exists(abandoned));
  EXPECT_TRUE(fs::exists(held)) << "a held lock is a compile in progress";
  holder.release();
  EXPECT_FALSE(fs::exists(held));
}

TEST(DiskCacheMaintenance, ClearRemovesOnlyWhatKjitMade) {
  TempDir dir;
  DiskCache c(cache_config(dir.path()));
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(c.store(make_entry("dc-clear-" + std::to_string(i), i ? "sm_90" : "sm_80")));
  const Entry e = make_entry("dc-clear-0", "sm_80");
  const fs::path shard = c.entry_path(e.key, "sm_80").parent_path();
  write_file(shard / (e.key.hex() + ".kjit.tmp.1.ab"), "temp");
  write_file(shard / (e.key.hex() + ".lock"), "");
  write_file(shard / "notes.txt", "not ours");
  write_file(dir.path() / "README", "not ours");

  EXPECT_EQ(c.clear(), 3u);
  EXPECT_EQ(files_under(dir.path()), (std::vector<fs::path>{dir.path() / "README", shard / "notes.txt"}));
  EXPECT_FALSE(c.load(e.key, "sm_80").has_value());
  EXPECT_EQ(c.clear(), 0u);
  ASSERT_TRUE(c.store(e)) << "the cache is usable after clear";
  EXPECT_EQ(DiskCache(cache_config(dir.path(), CacheMode::ReadOnly)).clear(), 0u);
  EXPECT_TRUE(c.load(e.key, "sm_80").has_value()) << "clear changes nothing outside readwrite mode";
}

// ---- load_or_produce -----------------------------------------------------------------------------

TEST(DiskCacheProduce, ProducesOnceThenHits) {
  TempDir dir;
  DiskCache c(cache_config(dir.path()));
  const Entry e = make_entry("dc-produce");
  int calls = 0;
  auto produce = [&] {
    ++calls;
    return e;
  };
  bool produced = false;
  EXPECT_TRUE(same_entry(c.load_or_produce(e.key, "sm_90", produce, &produced), e));
  EXPECT_TRUE(produced);
  EXPECT_TRUE(same_entry(c.load_or_produce(e.key, "sm_90", produce, &produced), e));
  EXPECT_FALSE(produced);
  EXPECT_TRUE(same_entry(DiskCache(cache_config(dir.path())).load_or_produce(e.key, "sm_90", produce, nullptr), e));
  EXPECT_EQ(calls, 1);
  EXPECT_TRUE(files_named(dir.path(), ".lock").empty());
  EXPECT_TRUE(files_named(dir.path(), ".tmp.").empty());
}

TEST(DiskCacheProduce, ProducerMustReturnTheRequestedKeyAndTarget) {
  TempDir dir;
  DiskCache c(cache_config(dir.path()));
  const Entry e = make_entry("dc-produce-mismatch", "sm_90");
  const Entry other = make_entry("dc-produce-mismatch-other", "sm_90");
  const Entry other_target = make_entry("dc-produce-mismatch", "compute_90");
  EXPECT_THROW(c.load_or_produce(e.key, "sm_90", [&] { return other; }, nullptr), kjit::Error);
  EXPECT_THROW(c.load_or_produce(e.key, "sm_90", [&] { return other_target; }, nullptr), kjit::Error);
  EXPECT_TRUE(files_named(dir.path(), ".kjit").empty()) << "nothing stored under the wrong name";
  EXPECT_TRUE(files_named(dir.path(), ".lock").empty());
}

TEST(DiskCacheProduce, PtxFallbackIsFiledUnderTheRequestedTarget) {
  TempDir dir;
  DiskCache c(cache_config(dir.path()));
  Entry e = make_entry("dc-produce-ptx-fallback", "sm_90");
  e.meta.target = "compute_90";  // what NVRTC could build for a requested sm_90
  e.meta.output = OutputKind::Ptx;
  e.meta.note = "NVRTC cannot emit sm_90 cubins: PTX for compute_90";
  WarningCapture warnings;
  bool produced = false;
  c.load_or_produce(e.key, "sm_90", [&] { return e; }, &produced);
  EXPECT_TRUE(produced);
  EXPECT_TRUE(fs::exists(c.entry_path(e.key, "sm_90")));
  EXPECT_FALSE(fs::exists(dir.path() / "v1" / "compute_90"));
  DiskCache fresh(cache_config(dir.path()));
  auto hit = fresh.load(e.key, "sm_90");
  ASSERT_TRUE(hit.has_value());
  EXPECT_TRUE(same_entry(*hit, e));
  EXPECT_FALSE(fresh.load(e.key, "compute_90").has_value());
  EXPECT_EQ(warnings.count(), 0u) << warnings.all();
}

TEST(DiskCacheProduce, ProducerExceptionReleasesTheLock) {
  TempDir dir;
  auto cfg = cache_config(dir.path());
  cfg.lock_timeout_s = 0.5;
  DiskCache c(cfg);
  const Entry e = make_entry("dc-produce-throws");
  EXPECT_THROW(c.load_or_produce(
                   e.key, "sm_90", []() -> Entry { throw std::runtime_error("nvrtc failed"); }, nullptr),
               std::runtime_error);
  EXPECT_TRUE(files_named(dir.path(), ".lock").empty());
  // Were the lock still held (a leaked descriptor), this would time out and throw.
  bool produced = false;
  EXPECT_NO_THROW(c.load_or_produce(e.key, "sm_90", [&] { return e; }, &produced));
  EXPECT_TRUE(produced);
}
