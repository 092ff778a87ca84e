// Cache files that are there but cannot be read as entries: a FIFO (or other non-regular file) at an
// entry's path or as a layer's kjit.lock, which must never block a lookup or `verify --dir`; an entry
// or layer this user may not read, which is "not readable" (with what to do), never "damaged"; and an
// unusable cache root, which is warned about once, not once more per lookup.
//
// A lookup that blocks would hang the test: each such body runs in a child process under a watchdog
// (alarm), so that a hang is a failure ("the child ended with a signal"), not a stuck suite.
// The "not readable" cases need a second user: as root, the child drops to nobody (uid 65534); as
// anyone else they are skipped.
#include <fcntl.h>
#include <grp.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cache_test_helpers.hpp"
#include "child_process.hpp"
#include "kjit/cache/disk_cache.hpp"
#include "kjit/cache/export_lock.hpp"
#include "kjit/cache/private_dir.hpp"
#include "kjit/error.hpp"
#include "test_support.hpp"

using namespace kjit::cache;
using namespace kjit::testing;
namespace fs = std::filesystem;

namespace {

constexpr uid_t kNobody = 65534;
constexpr unsigned kWatchdogS = 20;  // a lookup takes milliseconds; a blocked one never returns

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

void make_fifo(const fs::path& p) {
  fs::create_directories(p.parent_path());
  ASSERT_EQ(::mkfifo(p.c_str(), 0600), 0) << p;
}

}  // namespace

// ---- item 10: a FIFO never blocks -----------------------------------------------------------------

TEST(SpecialFiles, FifoAtAnEntryPathIsRefusedWithoutWaiting) {
  TempDir dir;
  const Entry e = make_entry("special-fifo-entry"), in_layer = make_entry("special-fifo-layer-entry");
  const fs::path root = dir / "root", layer = dir / "layer";
  const fs::path path = DiskCache(cache_config(root)).entry_path(e.key, "sm_90");
  const fs::path layer_path = DiskCache(cache_config(layer)).entry_path(in_layer.key, "sm_90");
  make_fifo(path);
  make_fifo(layer_path);
  KJIT_RUN_IN_CHILD([&](ChildChecks& c) {
    ::alarm(kWatchdogS);
    WarningCapture warnings;
    DiskCache cache(with_layer(root, layer));
    c.check(!cache.load(e.key, "sm_90").has_value(), "a FIFO in the writable root is a miss");
    c.check(!cache.load(in_layer.key, "sm_90").has_value(), "a FIFO in a read-only layer is a miss");
    c.check(contains(warnings.all(), path.string()) && contains(warnings.all(), "a FIFO"),
            "the warning names the file and what it is: " + warnings.all());
    c.check(contains(warnings.all(), layer_path.string()), "and the layer's: " + warnings.all());
    bool produced = false;
    const Entry got = cache.load_or_produce(e.key, "sm_90", [&] { return e; }, &produced);
    c.check(produced, "a miss is compiled");
    c.check(cache.load(e.key, "sm_90").has_value(), "and stored in place of the FIFO");
    cache.list();
    cache.prune();
  });
  struct stat st{};
  ASSERT_EQ(::lstat(layer_path.c_str(), &st), 0);
  EXPECT_TRUE(S_ISFIFO(st.st_mode)) << "a read-only layer is never modified";
}

TEST(SpecialFiles, FifoAtAKeysCompileLockDoesNotBlockTheCompile) {
  TempDir dir;
  const Entry e = make_entry("special-fifo-key-lock");
  const fs::path lock = DiskCache(cache_config(dir.path())).entry_path(e.key, "sm_90").replace_extension(".lock");
  make_fifo(lock);
  KJIT_RUN_IN_CHILD([&](ChildChecks& c) {
    ::alarm(kWatchdogS);
    DiskCache cache(cache_config(dir.path()));
    bool produced = false;
    cache.load_or_produce(e.key, "sm_90", [&] { return e; }, &produced);
    c.check(produced && cache.load(e.key, "sm_90").has_value(), "compiled and stored");
    cache.prune();
    cache.clear();
  });
}

TEST(SpecialFiles, FifoAsALayersLockIsRefusedWithoutWaiting) {
  TempDir dir;
  const Entry e = make_entry("special-fifo-lock");
  const fs::path layer = dir / "layer";
  const fs::path path = stored(layer, e);
  ASSERT_EQ(::chmod(path.c_str(), 0664), 0);  // not the user's own: only the lock could vouch for it
  const fs::path lock = layer / kLockFileName;
  make_fifo(lock);
  KJIT_RUN_IN_CHILD([&](ChildChecks& c) {
    ::alarm(kWatchdogS);
    WarningCapture warnings;
    DiskCache cache(with_layer(dir / "root", layer));
    c.check(!cache.load(e.key, "sm_90").has_value(), "an entry no lock vouches for is not loaded");
    c.check(contains(warnings.all(), lock.string()) && contains(warnings.all(), "a FIFO"),
            "the warning names the lock and what it is: " + warnings.all());
    // What `kjit verify --dir` / `--lock` read.
    try {
      read_lock(lock);
      c.fail("read_lock accepted a FIFO");
    } catch (const kjit::ValueError& err) {
      c.check(contains(err.what(), "not a regular file: it is a FIFO"), err.what());
    }
  });
}

TEST(SpecialFiles, FifoListedInALockIsAProblemForVerify) {
  TempDir dir;
  const Entry e = make_entry("special-fifo-verify");
  const fs::path layer = dir / "layer";
  const fs::path path = stored(layer, e);
  write_lock(layer, layer / kLockFileName);
  fs::remove(path);
  make_fifo(path);
  KJIT_RUN_IN_CHILD([&](ChildChecks& c) {
    ::alarm(kWatchdogS);
    const auto problems = verify_lock(layer, read_lock(layer / kLockFileName));
    c.check(problems.size() == 1 && contains(problems[0], "a FIFO") && contains(problems[0], "unreadable: "),
            "one problem, naming the FIFO: " + (problems.empty() ? std::string("none") : problems[0]));
  });
}

// ---- items 15 and 16: not readable is not damaged; an unusable root is warned about once ----------

namespace {

// A folder another user can reach (TempDir is 0700): the modes below it decide what they may read.
void open_to_all(const fs::path& p) { ASSERT_EQ(::chmod(p.c_str(), 0755), 0) << p; }

// A temporary folder opened to all (open_to_all).
struct OpenTempDir : TempDir {
  OpenTempDir() { open_to_all(path()); }
};

// Drops the (child) process to nobody for good; a failed check when it cannot.
bool become_nobody(ChildChecks& c) {
  return c.check(::setgroups(0, nullptr) == 0 && ::setgid(kNobody) == 0 && ::setuid(kNobody) == 0,
                 "cannot become uid 65534");
}

// A cache root of nobody's own, where nobody may write.
fs::path nobody_root(const TempDir& dir) {
  const fs::path root = dir / "nobody-cache";
  EXPECT_EQ(make_private_dirs(root), "");
  EXPECT_EQ(::chown(root.c_str(), kNobody, kNobody), 0);
  return root;
}

#define KJIT_NEEDS_ROOT() \
  if (::geteuid() != 0) GTEST_SKIP() << "a file another user cannot read needs a second user: run as root"

}  // namespace

TEST(SpecialFiles, AnExportOthersCannotReadIsNotReadableNotDamaged) {
  // `kjit export` run as root made the layer owner-only (0700 folders, 0600 files); the job runs as
  // another user.
  KJIT_NEEDS_ROOT();
  OpenTempDir dir;
  const Entry e = make_entry("special-unreadable-export"), second = make_entry("special-unreadable-export-2");
  const fs::path layer = dir / "layer";
  const fs::path path = stored(layer, e);
  stored(layer, second);
  write_lock(layer, layer / kLockFileName);
  const fs::path root = nobody_root(dir);
  KJIT_RUN_IN_CHILD([&](ChildChecks& c) {
    if (!become_nobody(c)) return;
    WarningCapture warnings;
    DiskCache cache(with_layer(root, layer));
    c.check(cache.writable(), "nobody's own root is fine: " + warnings.all());
    c.check(!cache.load(e.key, "sm_90").has_value(), "not loaded");
    c.check(!cache.load(second.key, "sm_90").has_value(), "not loaded");
    const std::string all = warnings.all();
    c.check(warnings.count() == 1, "one warning for the layer: " + all);
    c.check(!contains(all, "damaged"), "not called damaged: " + all);
    c.check(contains(all, path.string() + ": not readable by you (uid 65534)"), "names the file: " + all);
    c.check(contains(all, "chmod -R a+rX " + layer.string()), "says what to do: " + all);
    c.check(contains(all, "it will be recompiled"), "and what happens now: " + all);
  });
  EXPECT_TRUE(fs::exists(path)) << "left in place";
}

TEST(SpecialFiles, AnUnreadableEntryInTheUsersOwnRootIsNotReadableNotDamaged) {
  // An entry of nobody's root that nobody cannot open (here: root made it 0600 and root's own).
  KJIT_NEEDS_ROOT();
  OpenTempDir dir;
  const fs::path root = dir / "nobody-cache";
  const Entry e = make_entry("special-unreadable-own");
  const fs::path path = stored(root, e);  // as root: root's file (0600) in folders root made
  for (fs::path p = path.parent_path(); p != dir.path(); p = p.parent_path())
    ASSERT_EQ(::chown(p.c_str(), kNobody, kNobody), 0) << p;  // the folders are nobody's again
  KJIT_RUN_IN_CHILD([&](ChildChecks& c) {
    if (!become_nobody(c)) return;
    WarningCapture warnings;
    DiskCache cache(cache_config(root));
    c.check(!cache.load(e.key, "sm_90").has_value(), "not loaded");
    const std::string all = warnings.all();
    c.check(!contains(all, "damaged"), "not called damaged: " + all);
    c.check(contains(all, path.string() + ": not readable by you"), "names the file: " + all);
  });
  EXPECT_TRUE(fs::exists(path)) << "not removed: it is not damaged";
}

TEST(SpecialFiles, AnUnusableRootIsWarnedAboutOnceNotPerLookup) {
  // KJIT_CACHE_DIR names a folder this user may neither write nor read (another user's 0700 cache).
  // The engine looks up two keys per kernel and target (cubin and PTX) before it compiles.
  KJIT_NEEDS_ROOT();
  OpenTempDir dir;
  const fs::path root = dir / "roots-cache";
  const Entry cubin = make_entry("special-unusable-root-cubin"), ptx = make_entry("special-unusable-root-ptx");
  stored(root, cubin);
  KJIT_RUN_IN_CHILD([&](ChildChecks& c) {
    if (!become_nobody(c)) return;
    WarningCapture warnings;
    DiskCache cache(cache_config(root));
    c.check(!cache.writable(), "the root is unusable");
    for (int kernel = 0; kernel < 3; ++kernel) {
      c.check(!cache.load(cubin.key, "sm_90").has_value(), "a miss");
      c.check(!cache.load(ptx.key, "sm_90").has_value(), "a miss");
      bool produced = false;
      cache.load_or_produce(cubin.key, "sm_90", [&] { return cubin; }, &produced);
      c.check(produced, "compiled, in memory");
    }
    const std::string all = warnings.all();
    c.check(warnings.count() == 1, "exactly one warning, about the root: " + all);
    c.check(contains(all, root.string()) && contains(all, "memory only"), "the one about the root: " + all);
    c.check(!contains(all, "damaged"), "no entry is called damaged: " + all);
  });
}

// A root (or a layer) whose name cannot be opened at all, here a 300-character component (ENAMETOOLONG):
// the root is warned about once ("memory only"), the layer once, and no lookup calls an entry it could
// not even open "damaged" (hostile review 3, item 11: 4 such warnings for 2 targets before).
TEST(SpecialFiles, ARootOrLayerWhoseNameIsTooLongIsWarnedAboutOnceNeverAsDamagedEntries) {
  TempDir dir;
  const std::string long_name(300, 'n');
  const Entry cubin = make_entry("special-long-root-cubin"), ptx = make_entry("special-long-root-ptx");
  {
    WarningCapture warnings;
    DiskCache cache(cache_config(dir / long_name));
    EXPECT_FALSE(cache.writable());
    for (int kernel = 0; kernel < 3; ++kernel)
      for (const char* target : {"sm_90", "sm_80"}) {
        EXPECT_FALSE(cache.load(cubin.key, target).has_value());
        EXPECT_FALSE(cache.load(ptx.key, target).has_value());
        bool produced = false;
        cache.load_or_produce(cubin.key, "sm_90", [&] { return cubin; }, &produced);
        EXPECT_TRUE(produced) << "compiled, in memory";
      }
    const std::string all = warnings.all();
    EXPECT_EQ(warnings.count(), 1u) << all;
    EXPECT_TRUE(contains(all, "memory only")) << all;
    EXPECT_FALSE(contains(all, "damaged")) << all;
  }
  {
    WarningCapture warnings;
    DiskCache cache(with_layer(dir / "root", dir / long_name / "layer"));
    for (int kernel = 0; kernel < 3; ++kernel)
      for (const char* target : {"sm_90", "sm_80"}) EXPECT_FALSE(cache.load(ptx.key, target).has_value());
    const std::string all = warnings.all();
    EXPECT_LE(warnings.count(), 1u) << "at most one, about the layer: " << all;
    EXPECT_FALSE(contains(all, "damaged")) << all;
  }
}

TEST(SpecialFiles, AStrictDeployedCacheOthersCannotReadSaysHowToOpenIt) {
  // The root itself, in strict mode, is a deployed cache (baked by root): the advice is to open it to
  // readers, not to take it over; and strict mode says the miss is a miss.
  KJIT_NEEDS_ROOT();
  OpenTempDir dir;
  const Entry e = make_entry("special-unreadable-strict");
  const fs::path deployed = dir / "deployed";
  const fs::path path = stored(deployed, e);
  write_lock(deployed, deployed / kLockFileName);
  KJIT_RUN_IN_CHILD([&](ChildChecks& c) {
    if (!become_nobody(c)) return;
    WarningCapture warnings;
    DiskCache cache(cache_config(deployed, CacheMode::Strict));
    c.check(!cache.load(e.key, "sm_90").has_value(), "not loaded");
    const std::string all = warnings.all();
    c.check(contains(all, path.string() + ": not readable by you"), "names the file: " + all);
    c.check(contains(all, "chmod -R a+rX " + deployed.string()), "says to open it to readers: " + all);
    c.check(contains(all, "this is a cache miss"), "says what strict mode does: " + all);
    c.check(!contains(all, "damaged"), "not called damaged: " + all);
  });
}
