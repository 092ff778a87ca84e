// Trust: the cache writes only to a directory the user alone can write, and loads only the user's own
// entries, or entries a read-only layer's kjit.lock vouches for (trust.hpp).
// Tests that give a file to another user need root (chown); the mode-based ones run as anyone.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cache_test_helpers.hpp"
#include "kjit/cache/disk_cache.hpp"
#include "kjit/cache/export_lock.hpp"
#include "kjit/cache/trust.hpp"
#include "test_support.hpp"

using namespace kjit::cache;
using namespace kjit::testing;
namespace fs = std::filesystem;

namespace {

constexpr uid_t kNobody = 65534;

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

void set_mode(const fs::path& p, mode_t mode) { ASSERT_EQ(::chmod(p.c_str(), mode), 0) << p; }

#define KJIT_NEEDS_ROOT() \
  if (::geteuid() != 0) GTEST_SKIP() << "giving a file to another user (chown) needs root"

}  // namespace

TEST(Trust, OwnershipProblemNamesOwnerAndMode) {
  TempDir dir;
  struct stat st{};
  ASSERT_EQ(::stat(dir.path().c_str(), &st), 0);
  EXPECT_EQ(ownership_problem(dir.path(), st, st.st_uid), "");
  const std::string other = ownership_problem(dir.path(), st, st.st_uid + 1);
  EXPECT_TRUE(contains(other, "belongs to uid " + std::to_string(st.st_uid))) << other;
  st.st_mode |= S_IWGRP;
  EXPECT_TRUE(contains(ownership_problem(dir.path(), st, st.st_uid), "writable by group (mode 07")) << "";
  st.st_mode |= S_IWOTH;
  EXPECT_TRUE(contains(ownership_problem(dir.path(), st, st.st_uid), "writable by group and others"));
  st.st_mode &= ~S_IWGRP;
  EXPECT_TRUE(contains(ownership_problem(dir.path(), st, st.st_uid), "writable by others"));
}

class WritableRootOpenToOthers : public ::testing::TestWithParam<mode_t> {};

TEST_P(WritableRootOpenToOthers, IsNeitherWrittenNorRead) {
  TempDir dir;
  const fs::path root = dir / "cache";
  const Entry e = make_entry("trust-open-root-" + std::to_string(GetParam()));
  const fs::path path = stored(root, e);
  set_mode(root, GetParam());

  WarningCapture warnings;
  DiskCache c(cache_config(root));
  EXPECT_FALSE(c.writable());
  EXPECT_TRUE(contains(c.describe(), "memory only")) << c.describe();
  ASSERT_GE(warnings.count(), 1u);
  EXPECT_TRUE(contains(warnings.messages()[0], "writable by")) << warnings.all();
  EXPECT_TRUE(contains(warnings.messages()[0], "chmod go-w")) << warnings.all();
  EXPECT_FALSE(c.load(e.key, "sm_90").has_value()) << "anyone could have planted it";
  EXPECT_EQ(warnings.count(), 1u) << "the refused root is not warned about again per entry: " << warnings.all();
  EXPECT_TRUE(fs::exists(path)) << "an untrusted entry is left alone, not deleted";
  EXPECT_FALSE(c.store(make_entry("trust-open-root-new-" + std::to_string(GetParam()))));
  bool produced = false;
  c.load_or_produce(e.key, "sm_90", [&] { return e; }, &produced);
  EXPECT_TRUE(produced) << "a miss compiles (in memory)";
}

INSTANTIATE_TEST_SUITE_P(Modes, WritableRootOpenToOthers, ::testing::Values(0770, 0707, 0777, 01777));

TEST(Trust, RootOwnedByAnotherUserIsRefused) {
  KJIT_NEEDS_ROOT();
  TempDir dir;
  const fs::path root = dir / "cache";
  stored(root, make_entry("trust-foreign-root"));
  ASSERT_EQ(::chown(root.c_str(), kNobody, kNobody), 0);
  WarningCapture warnings;
  DiskCache c(cache_config(root));
  EXPECT_FALSE(c.writable());
  EXPECT_TRUE(contains(warnings.all(), "belongs to uid 65534")) << warnings.all();
  EXPECT_FALSE(c.load(make_entry("trust-foreign-root").key, "sm_90").has_value());
}

TEST(Trust, EntryWritableByOthersInTheRootIsNotLoaded) {
  TempDir dir;
  const Entry e = make_entry("trust-open-entry");
  const fs::path path = stored(dir.path(), e);
  set_mode(path, 0666);
  WarningCapture warnings;
  DiskCache c(cache_config(dir.path()));
  EXPECT_TRUE(c.writable()) << "the directory itself is fine";
  EXPECT_FALSE(c.load(e.key, "sm_90").has_value());
  ASSERT_EQ(warnings.count(), 1u) << warnings.all();
  EXPECT_TRUE(contains(warnings.messages()[0], path.string() + " is writable by group and others")) << warnings.all();
  EXPECT_TRUE(contains(warnings.messages()[0], "kjit.lock")) << "says what would be trusted";
  EXPECT_FALSE(c.load(e.key, "sm_90").has_value());
  EXPECT_EQ(warnings.count(), 1u) << "warned once per file";
  // A recompile replaces it with the user's own file, which is then loaded.
  bool produced = false;
  c.load_or_produce(e.key, "sm_90", [&] { return e; }, &produced);
  EXPECT_TRUE(produced);
  EXPECT_EQ(kjit::testing::file_mode(path), 0600u);
  EXPECT_TRUE(c.load(e.key, "sm_90").has_value());
}

TEST(Trust, DirectoryWritableByOthersBelowTheRootIsNotTrusted) {
  TempDir dir;
  const Entry e = make_entry("trust-open-subdir");
  const fs::path path = stored(dir.path(), e);
  set_mode(path.parent_path().parent_path(), 0777);  // <root>/v1/sm_90
  WarningCapture warnings;
  DiskCache c(cache_config(dir.path()));
  EXPECT_FALSE(c.load(e.key, "sm_90").has_value());
  EXPECT_TRUE(contains(warnings.all(), (dir.path() / "v1" / "sm_90").string() + " is writable by")) << warnings.all();
}

TEST(Trust, EntryOfAnotherUserInTheRootIsNotLoaded) {
  KJIT_NEEDS_ROOT();
  TempDir dir;
  const Entry e = make_entry("trust-foreign-entry");
  const fs::path path = stored(dir.path(), e);
  ASSERT_EQ(::chown(path.c_str(), kNobody, kNobody), 0);
  WarningCapture warnings;
  DiskCache c(cache_config(dir.path()));
  EXPECT_FALSE(c.load(e.key, "sm_90").has_value());
  EXPECT_TRUE(contains(warnings.all(), "belongs to uid 65534")) << warnings.all();
  EXPECT_TRUE(fs::exists(path));
}

// A layer someone else made (simulated by opening its entry's mode, or by chown when root): loaded
// only through a kjit.lock that lists the entry's exact bytes.
class ForeignLayer : public ::testing::Test {
 protected:
  void SetUp() override {
    entry_ = make_entry("trust-layer-" + std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()));
    layer_ = dir_ / "layer";
    path_ = stored(layer_, entry_);
    set_mode(path_, 0664);  // not the user's own any more: group-writable
    lock_ = layer_ / kLockFileName;
  }
  std::optional<Entry> load() {
    DiskCache c(with_layer(dir_ / "root", layer_));
    return c.load(entry_.key, "sm_90");
  }
  // The entry is not loaded, and a warning says why (contains `why`).
  ::testing::AssertionResult refused_with(const std::string& why) {
    WarningCapture warnings;
    if (load().has_value()) return ::testing::AssertionFailure() << "the entry was loaded; " << warnings.all();
    if (!contains(warnings.all(), why))
      return ::testing::AssertionFailure() << "no warning says \"" << why << "\": " << warnings.all();
    return ::testing::AssertionSuccess();
  }
  TempDir dir_;
  Entry entry_;
  fs::path layer_, path_, lock_;
};

TEST_F(ForeignLayer, WithoutALockIsNotLoaded) { EXPECT_TRUE(refused_with("the layer has no kjit.lock")); }

TEST_F(ForeignLayer, WithAVerifyingLockIsLoaded) {
  write_lock(layer_, lock_);
  WarningCapture warnings;
  const auto hit = load();
  ASSERT_TRUE(hit.has_value()) << warnings.all();
  EXPECT_TRUE(same_entry(*hit, entry_));
  EXPECT_EQ(warnings.count(), 0u) << warnings.all();
}

TEST_F(ForeignLayer, EntryOwnedByAnotherUserWithAVerifyingLockIsLoaded) {
  KJIT_NEEDS_ROOT();
  set_mode(path_, 0644);
  ASSERT_EQ(::chown(path_.c_str(), kNobody, kNobody), 0);
  EXPECT_TRUE(refused_with("belongs to uid 65534"));
  write_lock(layer_, lock_);  // owned by root, which may vouch
  EXPECT_TRUE(load().has_value());
}

TEST_F(ForeignLayer, LockOfAnotherUserVouchesForNothing) {
  // Whoever owns the lock can rewrite it: only the user's own or root's lock vouches.
  KJIT_NEEDS_ROOT();
  write_lock(layer_, lock_);
  ASSERT_EQ(::chown(lock_.c_str(), kNobody, kNobody), 0);
  EXPECT_TRUE(refused_with(lock_.string() + " belongs to uid 65534, neither you"));
  ASSERT_EQ(::chown(lock_.c_str(), 0, 0), 0);
  ASSERT_EQ(::chown(layer_.c_str(), kNobody, kNobody), 0);  // nor a layer directory of another user
  WarningCapture warnings;
  EXPECT_FALSE(load().has_value());
}

TEST_F(ForeignLayer, ALockWrittenLaterIsRead) {
  // The same cache object: a missing lock is not remembered forever (a layer being exported), and a
  // re-exported layer's new lock replaces the old one.
  DiskCache c(with_layer(dir_ / "root", layer_));
  {
    WarningCapture warnings;
    EXPECT_FALSE(c.load(entry_.key, "sm_90").has_value());
  }
  write_lock(layer_, lock_);
  EXPECT_TRUE(c.load(entry_.key, "sm_90").has_value());
  write_file(lock_, "{\"kjit_lock\": 1, \"entries\": []}\n");
  set_mode(lock_, 0600);
  WarningCapture warnings;
  EXPECT_FALSE(c.load(entry_.key, "sm_90").has_value());
}

TEST_F(ForeignLayer, ALayerWithoutALockIsWarnedAboutOnce) {
  const Entry second = make_entry("trust-layer-second");
  const fs::path second_path = stored(layer_, second);
  set_mode(second_path, 0664);
  DiskCache c(with_layer(dir_ / "root", layer_));
  WarningCapture warnings;
  EXPECT_FALSE(c.load(entry_.key, "sm_90").has_value());
  EXPECT_FALSE(c.load(second.key, "sm_90").has_value());
  EXPECT_EQ(warnings.count(), 1u) << warnings.all();
  EXPECT_TRUE(contains(warnings.all(), "said once for this layer")) << warnings.all();
}

TEST_F(ForeignLayer, EntryReplacedAfterLockingIsNotLoaded) {
  write_lock(layer_, lock_);
  std::string bytes = read_file(path_);
  bytes[bytes.size() - 1] ^= 1;  // a different (and here also damaged) payload
  write_file(path_, bytes);
  set_mode(path_, 0664);
  EXPECT_TRUE(refused_with("is not the one the layer's kjit.lock lists"));
}

TEST_F(ForeignLayer, EntryTheLockDoesNotListIsNotLoaded) {
  write_file(lock_, "{\"kjit_lock\": 1, \"entries\": []}\n");
  EXPECT_TRUE(refused_with("kjit.lock does not list v1/sm_90/"));
}

TEST_F(ForeignLayer, LockWritableByOthersVouchesForNothing) {
  write_lock(layer_, lock_);
  set_mode(lock_, 0666);
  EXPECT_TRUE(refused_with("its lock cannot be trusted: " + lock_.string()));
}

TEST_F(ForeignLayer, LayerRootWritableByOthersVouchesForNothing) {
  write_lock(layer_, lock_);
  set_mode(layer_, 0777);
  EXPECT_TRUE(refused_with("its lock cannot be trusted: " + layer_.string()));
}

TEST_F(ForeignLayer, MalformedLockVouchesForNothing) {
  write_file(lock_, "{\"kjit_lock\": 1, \"entries\": [{\"path\": \"../../etc/passwd\", \"sha256\": \"00\"}]}");
  EXPECT_TRUE(refused_with("is not relative to the cache root"));
}

TEST_F(ForeignLayer, LockOfAnotherVersionVouchesForNothing) {
  write_lock(layer_, lock_);
  std::string text = read_file(lock_);
  const auto at = text.find("\"kjit_lock\": 1");
  ASSERT_NE(at, std::string::npos) << text;
  text.replace(at, 14, "\"kjit_lock\": 4294967297");  // read as int, this used to be 1
  write_file(lock_, text);
  EXPECT_TRUE(refused_with("\"kjit_lock\" is missing or not version 1"));
}

TEST_F(ForeignLayer, StrictModeReadsTheRootAsALockedLayer) {
  // A deployed cache used directly as KJIT_CACHE_DIR in strict mode: the root is read-only there, so
  // its kjit.lock vouches for entries the user did not write.
  write_lock(layer_, lock_);
  DiskCache c(cache_config(layer_, CacheMode::Strict));
  EXPECT_TRUE(c.load(entry_.key, "sm_90").has_value());
  DiskCache rw(cache_config(layer_, CacheMode::ReadWrite));
  WarningCapture warnings;
  EXPECT_FALSE(rw.load(entry_.key, "sm_90").has_value())
      << "the writable root trusts only the user's own files, lock or not";
}

TEST_F(ForeignLayer, StrictRootOfAnotherUserIsReadOnlyThroughALockItCannotReplace) {
  // A deployed cache used as KJIT_CACHE_DIR in strict mode, made by another user: whoever owns the
  // directory could swap the lock in it, so only a directory of the user or root vouches.
  KJIT_NEEDS_ROOT();
  write_lock(layer_, lock_);
  set_mode(path_, 0644);
  ASSERT_EQ(::chown(path_.c_str(), kNobody, kNobody), 0);
  ASSERT_EQ(::chown(layer_.c_str(), kNobody, kNobody), 0);
  {
    WarningCapture warnings;
    EXPECT_FALSE(DiskCache(cache_config(layer_, CacheMode::Strict)).load(entry_.key, "sm_90").has_value());
    EXPECT_TRUE(contains(warnings.all(), layer_.string() + " belongs to uid 65534, neither you")) << warnings.all();
  }
  ASSERT_EQ(::chown(layer_.c_str(), 0, 0), 0);  // an image built by root: the entry stays another user's
  EXPECT_TRUE(DiskCache(cache_config(layer_, CacheMode::Strict)).load(entry_.key, "sm_90").has_value());
}

TEST(Trust, OwnEntriesInALayerNeedNoLock) {
  TempDir dir;
  const Entry e = make_entry("trust-own-layer");
  stored(dir / "layer", e);
  DiskCache c(with_layer(dir / "root", dir / "layer"));
  WarningCapture warnings;
  EXPECT_TRUE(c.load(e.key, "sm_90").has_value()) << warnings.all();
}
