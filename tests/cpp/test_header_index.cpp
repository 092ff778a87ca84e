// The header index (cache/header_index.hpp) and its use by template loads: a header seen before is not
// read again while its identity holds; a changed file is read; a stale or hostile index never makes
// kjit compile bytes other than those its key covers.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <thread>

#include "kjit/cache/header_index.hpp"
#include "kjit/cache/sha256.hpp"
#include "kjit/compiler.hpp"
#include "kjit/engine.hpp"
#include "kjit/error.hpp"
#include "kjit/template.hpp"
#include "test_support.hpp"

using namespace kjit;
using kjit::cache::FileIdentity;
using kjit::cache::HeaderFacts;
using kjit::cache::HeaderIndex;
using kjit::testing::TempDir;
using kjit::testing::write_file;
namespace fs = std::filesystem;

namespace {

FileIdentity identity_of(const fs::path& p) {
  struct stat st {};
  EXPECT_EQ(::stat(p.c_str(), &st), 0) << p;
  return FileIdentity::of(st);
}

HeaderFacts facts(const std::string& bytes, std::vector<std::string> includes = {}) {
  return {cache::to_hex(cache::Sha256::of(bytes)), std::move(includes)};
}

constexpr const char* kTag = "kjit test";

// An index with a zero racy window: files the test has just written count.
HeaderIndex index_at(const fs::path& root, bool writable = true) {
  return HeaderIndex(root, writable, kTag, std::chrono::nanoseconds(0));
}

// Template loads of this test use `index`.
class UseIndex {
 public:
  explicit UseIndex(std::shared_ptr<HeaderIndex> index) { use_header_index(std::move(index)); }
  ~UseIndex() { use_header_index(nullptr); }
};

std::shared_ptr<HeaderIndex> index_in(const TempDir& dir) {
  return std::make_shared<HeaderIndex>(dir / "cache", true, kTag, std::chrono::nanoseconds(0));
}

// The index vouches only for files on a local filesystem: where the test's folder is not on one,
// the tests that need it to vouch say so and skip.
#define SKIP_UNLESS_LOCAL(dir)                                                                     \
  if (!HeaderIndex::on_local_filesystem((dir).path().string()))                                    \
  GTEST_SKIP() << (dir).path() << " is not on a filesystem the header index vouches for"

constexpr const char* kSource = "#include \"lib/a.cuh\"\n__global__ void k(float* y) { *y = A_VALUE; }\n";

void write_library(const TempDir& dir, const std::string& value) {
  write_file(dir / "src" / "lib" / "a.cuh", "#pragma once\n#include \"b.cuh\"\n#define A_VALUE B_VALUE\n");
  write_file(dir / "src" / "lib" / "b.cuh", "#pragma once\n#define B_VALUE " + value + "\n");
  write_file(dir / "src" / "k.cu", kSource);
}

// Loads k.cu twice: the first load records its headers in the index in use, the second takes them from it.
std::shared_ptr<const Template> load_from_index(const TempDir& dir) {
  Template::from_file(dir / "src" / "k.cu");
  return Template::from_file(dir / "src" / "k.cu");
}

Settings settings_in(const TempDir& dir) { return Settings::from_map({{"KJIT_CACHE_DIR", (dir / "cache").string()}}); }

}  // namespace

TEST(HeaderIndex, FindsAFileOnlyWhileItsIdentityIsTheRecordedOne) {
  TempDir dir;
  SKIP_UNLESS_LOCAL(dir);
  write_file(dir / "h.cuh", "#define X 1\n");
  HeaderIndex index = index_at(dir / "cache");
  const std::string path = (dir / "h.cuh").string();
  const FileIdentity id = identity_of(dir / "h.cuh");
  index.remember(path, id, facts("#define X 1\n", {"<cuda_fp16.h>"}));
  ASSERT_TRUE(index.find(path, id));
  EXPECT_EQ(index.find(path, id)->includes, std::vector<std::string>{"<cuda_fp16.h>"});
  for (auto change : {&FileIdentity::size, &FileIdentity::mtime_ns, &FileIdentity::ctime_ns, &FileIdentity::inode,
                      &FileIdentity::device}) {
    FileIdentity other = id;
    other.*change += 1;
    EXPECT_FALSE(index.find(path, other));
  }
  EXPECT_FALSE(index.find((dir / "other.cuh").string(), id));
}

TEST(HeaderIndex, AFileChangedWithinTheRacyWindowIsNotRecorded) {
  TempDir dir;
  SKIP_UNLESS_LOCAL(dir);
  write_file(dir / "h.cuh", "#define X 1\n");
  HeaderIndex index(dir / "cache", true, kTag);  // the default window: 2 s
  const std::string path = (dir / "h.cuh").string();
  index.remember(path, identity_of(dir / "h.cuh"), facts("#define X 1\n"));
  EXPECT_FALSE(index.find(path, identity_of(dir / "h.cuh")))
      << "a file written a moment ago may be written again within its timestamp's granularity";
  index.save();
  EXPECT_FALSE(fs::exists(index.file())) << "nothing was learned, nothing is written";
}

TEST(HeaderIndex, ANewProcessFindsWhatAnEarlierOneSaved) {
  TempDir dir;
  SKIP_UNLESS_LOCAL(dir);
  write_file(dir / "a.cuh", "a\n");
  write_file(dir / "b.cuh", "b\n");
  const std::string a = (dir / "a.cuh").string(), b = (dir / "b.cuh").string();
  {
    HeaderIndex first = index_at(dir / "cache");
    first.remember(a, identity_of(dir / "a.cuh"), facts("a\n"));
    first.save();
  }
  {
    // Another process learns b meanwhile: saves merge.
    HeaderIndex second = index_at(dir / "cache");
    second.remember(b, identity_of(dir / "b.cuh"), facts("b\n"));
    second.save();
  }
  HeaderIndex third = index_at(dir / "cache");
  EXPECT_EQ(third.find(a, identity_of(dir / "a.cuh"))->sha256, facts("a\n").sha256);
  EXPECT_EQ(third.find(b, identity_of(dir / "b.cuh"))->sha256, facts("b\n").sha256);
  struct stat st {};
  ASSERT_EQ(::stat(third.file().c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0077, 0u) << "the index is the user's alone";
}

TEST(HeaderIndex, AReadOnlyIndexNeverWrites) {
  TempDir dir;
  SKIP_UNLESS_LOCAL(dir);
  write_file(dir / "a.cuh", "a\n");
  HeaderIndex index = index_at(dir / "cache", false);
  index.remember((dir / "a.cuh").string(), identity_of(dir / "a.cuh"), facts("a\n"));
  EXPECT_TRUE(index.find((dir / "a.cuh").string(), identity_of(dir / "a.cuh"))) << "still used in memory";
  index.save();
  EXPECT_FALSE(fs::exists(dir / "cache"));
}

TEST(HeaderIndex, ADamagedForeignOrOpenFileIsAnEmptyIndexAndIsReplaced) {
  TempDir dir;
  SKIP_UNLESS_LOCAL(dir);
  write_file(dir / "a.cuh", "a\n");
  const std::string a = (dir / "a.cuh").string();
  const FileIdentity id = identity_of(dir / "a.cuh");
  const fs::path file = index_at(dir / "cache").file();
  auto saved_with_a = [&] {
    HeaderIndex w = index_at(dir / "cache");
    w.remember(a, id, facts("a\n"));
    w.save();
    return kjit::testing::read_file(file);
  };
  const std::string good = saved_with_a();
  const std::string bad_sha = std::string(good).replace(good.find(facts("a\n").sha256), 4, "zzzz");
  const std::string other_tag = std::string(good).replace(good.find(kTag), std::string(kTag).size(), "kjit 0.0");
  for (const std::string& damaged : {std::string("{not json"), std::string("[]"), std::string("{\"format\": 99}"),
                                     std::string("{\"format\": \"1\", \"files\": {}}"),
                                     std::string("{\"format\": null}"), bad_sha, other_tag,
                                     good.substr(0, good.size() / 2)}) {
    SCOPED_TRACE(damaged);
    write_file(file, damaged);
    ::chmod(file.c_str(), 0600);
    HeaderIndex r = index_at(dir / "cache");
    EXPECT_FALSE(r.find(a, id));
    EXPECT_EQ(r.size(), 0u);
    r.remember(a, id, facts("a\n"));
    EXPECT_NO_THROW(r.save());
    EXPECT_TRUE(index_at(dir / "cache").find(a, id)) << "replaced by the save";
  }
  // Writable by others: anyone could have written it.
  write_file(file, good);
  ::chmod(file.c_str(), 0666);
  EXPECT_FALSE(index_at(dir / "cache").find(a, id));
  ::chmod(file.c_str(), 0600);
  EXPECT_TRUE(index_at(dir / "cache").find(a, id));
  // A damaged file is replaced by the next save.
  write_file(file, "{not json");
  saved_with_a();
  EXPECT_TRUE(index_at(dir / "cache").find(a, id));
}

TEST(HeaderIndexTemplates, ASecondLoadReadsNoHeaderAndKeepsTheDigest) {
  TempDir dir;
  SKIP_UNLESS_LOCAL(dir);
  write_library(dir, "1.0f");
  UseIndex use(index_in(dir));
  reset_header_load_counts();
  auto first = Template::from_file(dir / "src" / "k.cu");
  EXPECT_EQ(header_load_counts().read, 2u);
  EXPECT_TRUE(first->holds_bytes());
  reset_header_load_counts();
  auto second = Template::from_file(dir / "src" / "k.cu");
  EXPECT_EQ(header_load_counts().read, 0u);
  EXPECT_EQ(header_load_counts().from_index, 2u);
  EXPECT_FALSE(second->holds_bytes());
  EXPECT_EQ(second->digest(), first->digest());
  ASSERT_EQ(second->headers().size(), 2u);
  EXPECT_EQ(second->headers()[1].include_name, "b.cuh") << "includes of an indexed header are followed too";
  auto full = second->with_bytes();
  EXPECT_EQ(full->digest(), first->digest());
  for (std::size_t i = 0; i < 2; ++i) EXPECT_EQ(full->headers()[i].bytes, first->headers()[i].bytes);
  EXPECT_EQ(second->with_bytes(), full) << "read once";
  // A new process (a new index on the same root) reads none either.
  UseIndex again(index_in(dir));
  reset_header_load_counts();
  EXPECT_EQ(Template::from_file(dir / "src" / "k.cu")->digest(), first->digest());
  EXPECT_EQ(header_load_counts().read, 0u);
}

TEST(HeaderIndexTemplates, AChangedHeaderIsReadAgainAndChangesTheDigest) {
  TempDir dir;
  SKIP_UNLESS_LOCAL(dir);
  write_library(dir, "1.0f");
  UseIndex use(index_in(dir));
  const std::string before = Template::from_file(dir / "src" / "k.cu")->digest();
  // Same size, new inode (an editor's save-by-rename), and a changed size in place.
  write_file(dir / "src" / "lib" / "b.tmp", "#pragma once\n#define B_VALUE 2.0f\n");
  fs::rename(dir / "src" / "lib" / "b.tmp", dir / "src" / "lib" / "b.cuh");
  reset_header_load_counts();
  auto renamed = Template::from_file(dir / "src" / "k.cu");
  EXPECT_EQ(header_load_counts().read, 1u);
  EXPECT_NE(renamed->digest(), before);
  write_file(dir / "src" / "lib" / "b.cuh", "#pragma once\n#define B_VALUE 3.25f\n");
  auto resized = Template::from_file(dir / "src" / "k.cu");
  EXPECT_NE(resized->digest(), renamed->digest());
  EXPECT_NE(resized->with_bytes()->headers()[1].bytes.find("3.25f"), std::string::npos);
}

TEST(HeaderIndexTemplates, AHeaderChangedAfterLoadingIsRefusedAtCompileAndTheProcessGoesOn) {
  TempDir dir;
  SKIP_UNLESS_LOCAL(dir);
  write_library(dir, "1.0f");
  UseIndex use(index_in(dir));
  auto lazy = load_from_index(dir);
  ASSERT_FALSE(lazy->holds_bytes());
  write_file(dir / "src" / "lib" / "b.cuh", "#pragma once\n#define B_VALUE 7.50f\n");  // a new size
  Engine engine(settings_in(dir));
  try {
    engine.prepare(Specialization(lazy, "k", {}), Target::parse("sm_90"));
    FAIL() << "compiled bytes its key does not cover";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("changed after the template was loaded"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("b.cuh"), std::string::npos) << e.what();
  }
  // Loading it again compiles the header as it is now.
  auto fresh = Template::from_file(dir / "src" / "k.cu");
  EXPECT_NE(fresh->digest(), lazy->digest());
  EXPECT_EQ(engine.prepare(Specialization(fresh, "k", {}), Target::parse("sm_90")).origin, Origin::Compiled);
}

TEST(HeaderIndexTemplates, AnIndexThatLiesAboutAFileNeverCompilesOtherBytes) {
  TempDir dir;
  SKIP_UNLESS_LOCAL(dir);
  write_library(dir, "1.0f");
  auto index = index_in(dir);
  UseIndex use(index);
  const std::string honest = Template::from_file(dir / "src" / "k.cu")->digest();
  // The record of b.cuh claims other bytes (a planted or stale index).
  const fs::path b = fs::weakly_canonical(dir / "src" / "lib" / "b.cuh");
  index->remember(b.string(), identity_of(b), facts("#pragma once\n#define B_VALUE 9.0f\n"));
  auto lied_to = Template::from_file(dir / "src" / "k.cu");
  EXPECT_NE(lied_to->digest(), honest) << "the key follows the index's claim";
  EXPECT_THROW(lied_to->with_bytes(), Error) << "and the bytes on disk are refused, not compiled under it";
}

TEST(HeaderIndexTemplates, ACompileFromIndexedHeadersGetsTheirBytes) {
  TempDir dir;
  SKIP_UNLESS_LOCAL(dir);
  write_library(dir, "1.0f");
  UseIndex use(index_in(dir));
  auto lazy = load_from_index(dir);
  ASSERT_FALSE(lazy->holds_bytes());
  Engine engine(settings_in(dir));
  EXPECT_EQ(engine.prepare(Specialization(lazy, "k", {}), Target::parse("sm_90")).origin, Origin::Compiled);
  // The entry is found by a fully read template's key: same digest, same key.
  auto read = Template::from_memory(kSource, "k.cu",
                                    {{"lib/a.cuh", kjit::testing::read_file(dir / "src" / "lib" / "a.cuh")},
                                     {"b.cuh", kjit::testing::read_file(dir / "src" / "lib" / "b.cuh")}});
  EXPECT_EQ(read->digest(), lazy->digest());
  EXPECT_NE(engine.prepare(Specialization(read, "k", {}), Target::parse("sm_90")).origin, Origin::Compiled);
}

TEST(HeaderIndex, ClearingTheCacheRemovesIt) {
  TempDir dir;
  SKIP_UNLESS_LOCAL(dir);
  write_file(dir / "a.cuh", "a\n");
  HeaderIndex index = index_at(dir / "cache");
  index.remember((dir / "a.cuh").string(), identity_of(dir / "a.cuh"), facts("a\n"));
  index.save();
  ASSERT_TRUE(fs::exists(index.file()));
  cache::DiskCacheConfig config;
  config.root = dir / "cache";
  cache::DiskCache(config).clear();
  EXPECT_FALSE(fs::exists(index.file()));
}

TEST(HeaderIndex, NothingIsWrittenIntoARootOthersMayWriteTo) {
  TempDir dir;
  SKIP_UNLESS_LOCAL(dir);
  write_file(dir / "a.cuh", "a\n");
  fs::create_directories(dir / "cache");
  ::chmod((dir / "cache").c_str(), 0777);
  HeaderIndex index = index_at(dir / "cache");
  index.remember((dir / "a.cuh").string(), identity_of(dir / "a.cuh"), facts("a\n"));
  index.save();
  EXPECT_FALSE(fs::exists(index.file().parent_path())) << "nor is anything created there";
  EXPECT_FALSE(fs::exists(index.file()));
}

TEST(HeaderIndex, ANameThatIsNotUtf8IsNotRecorded) {
  TempDir dir;
  SKIP_UNLESS_LOCAL(dir);
  const fs::path odd = dir / "caf\xe9.cuh";  // Latin-1: not UTF-8
  write_file(odd, "a\n");
  HeaderIndex index = index_at(dir / "cache");
  index.remember(odd.string(), identity_of(odd), facts("a\n"));
  EXPECT_FALSE(index.find(odd.string(), identity_of(odd)));
  write_file(dir / "a.cuh", "a\n");
  index.remember((dir / "a.cuh").string(), identity_of(dir / "a.cuh"), facts("a\n", {"\"caf\xe9.cuh"}));
  EXPECT_FALSE(index.find((dir / "a.cuh").string(), identity_of(dir / "a.cuh")));
  index.save();  // never throws
}

TEST(HeaderIndex, OnlyALocalFilesystemIsVouchedFor) {
  EXPECT_FALSE(HeaderIndex::on_local_filesystem("/proc/self/status")) << "procfs";
  EXPECT_FALSE(HeaderIndex::on_local_filesystem("/nonexistent/x.cuh"));
  HeaderIndex index = index_at({});
  const FileIdentity id = identity_of("/proc/self/status");
  index.remember("/proc/self/status", id, facts("x"));
  EXPECT_FALSE(index.find("/proc/self/status", id));
}
