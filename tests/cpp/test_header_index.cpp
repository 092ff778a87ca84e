// The header index (cache/header_index.hpp) and its use by template loads: a header seen before is not
// read again while its identity holds; a changed file is read; a stale or hostile index never makes
// kjit compile bytes other than those its key covers.
#include <gtest/gtest.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <iostream>

#include <chrono>
#include <thread>

#include "kjit/cache/header_index.hpp"
#include "kjit/cache/sha256.hpp"
#include "kjit/compiler.hpp"
#include "kjit/engine.hpp"
#include "kjit/error.hpp"
#include "kjit/template.hpp"
#include "engine_support.hpp"
#include "header_index_support.hpp"
#include "test_support.hpp"

using namespace kjit;
using kjit::cache::FileIdentity;
using kjit::cache::HeaderFacts;
using kjit::cache::HeaderIndex;
using namespace kjit::testing;
namespace fs = std::filesystem;

namespace {

FileIdentity identity_of(const fs::path& p) {
  struct stat st{};
  EXPECT_EQ(::stat(p.c_str(), &st), 0) << p;
  return FileIdentity::of(st);
}

HeaderFacts facts(const std::string& bytes, std::vector<std::string> includes = {}) {
  return {cache::to_hex(cache::Sha256::of(bytes)), std::move(includes)};
}

constexpr const char* kTag = kjit::testing::kIndexTag;

// An index with a zero racy window: files the test has just written count.
HeaderIndex index_at(const fs::path& root, bool writable = true) {
  return HeaderIndex(root, writable, kTag, std::chrono::nanoseconds(0));
}

// Writes dir/a.cuh ("a\n") and has `index` remember it.
void remember_a(HeaderIndex& index, const TempDir& dir) {
  write_file(dir / "a.cuh", "a\n");
  index.remember((dir / "a.cuh").string(), identity_of(dir / "a.cuh"), facts("a\n"));
}

// The index vouches only for files on a local filesystem: where the test's folder is not on one,
// the tests that need it to vouch say so and skip.
#define SKIP_UNLESS_LOCAL(dir)                                  \
  if (!HeaderIndex::on_local_filesystem((dir).path().string())) \
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

// The message of the Error that `f` throws; a failure of the calling test when it throws none.
template <typename F>
std::string error_of(F f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "compiled bytes its key does not cover";
  return "";
}

// A file written through a shared mapping (MAP_SHARED), kept for the object's life: rewrite() changes its
// bytes in place, and once its page is dirty a later write changes neither its mtime nor its ctime.
class SharedMapping {
 public:
  explicit SharedMapping(const fs::path& file) {
    fd_ = ::open(file.c_str(), O_RDWR);
    EXPECT_GE(fd_, 0) << file;
    struct stat st{};
    EXPECT_EQ(::fstat(fd_, &st), 0);
    size_ = static_cast<std::size_t>(st.st_size);
    void* p = ::mmap(nullptr, size_, PROT_READ | PROT_WRITE, MAP_SHARED, fd_, 0);
    EXPECT_NE(p, MAP_FAILED);
    data_ = static_cast<char*>(p);
  }
  ~SharedMapping() {
    ::munmap(data_, size_);
    ::close(fd_);
  }
  void rewrite(const std::string& bytes) {
    ASSERT_EQ(bytes.size(), size_) << "a mapping keeps the file's size";
    std::memcpy(data_, bytes.data(), size_);
  }

 private:
  int fd_ = -1;
  std::size_t size_ = 0;
  char* data_ = nullptr;
};

// The tests of the index's use by template loads: the library of write_library in dir/src, loaded with the
// index of dir/cache. The index vouches only for the CUDA toolkit's headers and kjit's own: a test that needs it
// to vouch for the library makes dir/src kjit's templates folder (vouch_for_library).
class HeaderIndexTemplates : public ::testing::Test {
 protected:
  void SetUp() override {
    SKIP_UNLESS_LOCAL(dir);
    write_library(dir, "1.0f");
    use.emplace(index);
  }
  void vouch_for_library() { kjit_dir.emplace(dir / "src"); }

  TempDir dir;
  std::shared_ptr<HeaderIndex> index = index_in(dir / "cache");
  std::optional<KjitTemplatesIn> kjit_dir;
  std::optional<UseIndex> use;
};

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
  struct stat st{};
  ASSERT_EQ(::stat(third.file().c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0077, 0u) << "the index is the user's alone";
}

TEST(HeaderIndex, AReadOnlyIndexNeverWrites) {
  TempDir dir;
  SKIP_UNLESS_LOCAL(dir);
  HeaderIndex index = index_at(dir / "cache", false);
  remember_a(index, dir);
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
  for (const std::string& damaged :
       {std::string("{not json"), std::string("[]"), std::string("{\"format\": 99}"),
        std::string("{\"format\": \"1\", \"files\": {}}"), std::string("{\"format\": null}"), bad_sha, other_tag,
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

TEST_F(HeaderIndexTemplates, ASecondLoadReadsNoHeaderAndKeepsTheDigest) {
  vouch_for_library();
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
  UseIndex again(dir / "cache");
  reset_header_load_counts();
  EXPECT_EQ(Template::from_file(dir / "src" / "k.cu")->digest(), first->digest());
  EXPECT_EQ(header_load_counts().read, 0u);
}

TEST_F(HeaderIndexTemplates, AChangedHeaderIsReadAgainAndChangesTheDigest) {
  vouch_for_library();
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

TEST_F(HeaderIndexTemplates, AHeaderChangedAfterLoadingIsRefusedAtCompileAndTheProcessGoesOn) {
  vouch_for_library();
  auto lazy = load_from_index(dir);
  ASSERT_FALSE(lazy->holds_bytes());
  write_file(dir / "src" / "lib" / "b.cuh", "#pragma once\n#define B_VALUE 7.50f\n");  // a new size
  Engine engine(settings_in(dir));
  const std::string refused = error_of([&] { engine.prepare(Specialization(lazy, "k", {}), Target::parse("sm_90")); });
  EXPECT_NE(refused.find("changed after the template was loaded"), std::string::npos) << refused;
  EXPECT_NE(refused.find("b.cuh"), std::string::npos) << refused;
  // Loading it again compiles the header as it is now.
  auto fresh = Template::from_file(dir / "src" / "k.cu");
  EXPECT_NE(fresh->digest(), lazy->digest());
  EXPECT_EQ(prepared_origin(engine, Specialization(fresh, "k", {}), Target::parse("sm_90")), Origin::Compiled);
}

TEST_F(HeaderIndexTemplates, AnIndexThatLiesAboutAFileNeverCompilesOtherBytes) {
  vouch_for_library();
  const std::string honest = Template::from_file(dir / "src" / "k.cu")->digest();
  // The record of b.cuh claims other bytes (a planted or stale index).
  const fs::path b = fs::weakly_canonical(dir / "src" / "lib" / "b.cuh");
  index->remember(b.string(), identity_of(b), facts("#pragma once\n#define B_VALUE 9.0f\n"));
  auto lied_to = Template::from_file(dir / "src" / "k.cu");
  EXPECT_NE(lied_to->digest(), honest) << "the key follows the index's claim";
  EXPECT_THROW(lied_to->with_bytes(), Error) << "and the bytes on disk are refused, not compiled under it";
}

TEST_F(HeaderIndexTemplates, ACompileFromIndexedHeadersGetsTheirBytes) {
  vouch_for_library();
  auto lazy = load_from_index(dir);
  ASSERT_FALSE(lazy->holds_bytes());
  Engine engine(settings_in(dir));
  EXPECT_EQ(prepared_origin(engine, Specialization(lazy, "k", {}), Target::parse("sm_90")), Origin::Compiled);
  // The entry is found by a fully read template's key: same digest, same key.
  auto read = Template::from_memory(kSource, "k.cu",
                                    {{"lib/a.cuh", kjit::testing::read_file(dir / "src" / "lib" / "a.cuh")},
                                     {"b.cuh", kjit::testing::read_file(dir / "src" / "lib" / "b.cuh")}});
  EXPECT_EQ(read->digest(), lazy->digest());
  EXPECT_NE(prepared_origin(engine, Specialization(read, "k", {}), Target::parse("sm_90")), Origin::Compiled);
}

// Hostile review 3, item 2: a header rewritten through a shared mapping keeps its size, mtime, ctime and
// inode while its bytes change. The user's own headers are read and hashed at every load, so the key
// follows the bytes (before: the index vouched for the old bytes, and the old kernel loaded from disk).
TEST_F(HeaderIndexTemplates, AUserHeaderChangedThroughASharedMappingChangesTheKey) {
  SharedMapping b(dir / "src" / "lib" / "b.cuh");
  b.rewrite("#pragma once\n#define B_VALUE 2.0f\n");  // the first write through the mapping: a new mtime
  const FileIdentity before = identity_of(dir / "src" / "lib" / "b.cuh");
  reset_header_load_counts();
  const std::string first = Template::from_file(dir / "src" / "k.cu")->digest();
  EXPECT_EQ(header_load_counts().read, 2u);
  b.rewrite("#pragma once\n#define B_VALUE 3.0f\n");
  if (!(identity_of(dir / "src" / "lib" / "b.cuh") == before))
    std::cerr << "note: this filesystem gave the rewritten file a new identity; the test still checks the key\n";
  reset_header_load_counts();
  auto again = Template::from_file(dir / "src" / "k.cu");
  EXPECT_EQ(header_load_counts().read, 2u) << "the user's headers are read at every load";
  EXPECT_EQ(header_load_counts().from_index, 0u);
  EXPECT_NE(again->digest(), first);
  EXPECT_NE(again->headers()[1].bytes.find("3.0f"), std::string::npos);
  // A fresh template of the bytes as they are now has that digest: the key follows the bytes.
  auto read = Template::from_memory(kSource, "k.cu",
                                    {{"lib/a.cuh", kjit::testing::read_file(dir / "src" / "lib" / "a.cuh")},
                                     {"b.cuh", "#pragma once\n#define B_VALUE 3.0f\n"}});
  EXPECT_EQ(read->digest(), again->digest());
}

// The same change to a header the index does vouch for (kjit's own templates, the CUDA toolkit's): the compile
// refuses bytes its key does not cover, and drops the record, so that loading again reads the file anew
// (before: every load gave the stale key again, and every compile failed, until `kjit clear`).
TEST_F(HeaderIndexTemplates, AVouchedHeaderChangedInPlaceIsDroppedFromTheIndexAtTheCompileThatFindsIt) {
  vouch_for_library();
  SharedMapping b(dir / "src" / "lib" / "b.cuh");
  b.rewrite("#pragma once\n#define B_VALUE 2.0f\n");
  auto lazy = load_from_index(dir);
  ASSERT_FALSE(lazy->holds_bytes()) << "b.cuh is vouched for by the index";
  b.rewrite("#pragma once\n#define B_VALUE 3.0f\n");
  const std::string refused = error_of([&] { (void)lazy->with_bytes(); });
  EXPECT_NE(refused.find("changed after the template was loaded"), std::string::npos) << refused;
  reset_header_load_counts();
  auto fresh = Template::from_file(dir / "src" / "k.cu");
  EXPECT_EQ(header_load_counts().read, 1u) << "b.cuh is read again";
  EXPECT_NE(fresh->digest(), lazy->digest());
  EXPECT_NO_THROW((void)fresh->with_bytes());
  // The record is gone from the file as well: a new process reads it too (and records it anew).
  UseIndex again(dir / "cache");
  reset_header_load_counts();
  EXPECT_EQ(Template::from_file(dir / "src" / "k.cu")->digest(), fresh->digest());
}

// A user header (outside the CUDA toolkit and kjit's templates) is never recorded in the index.
TEST_F(HeaderIndexTemplates, OnlyTheToolkitsAndKjitsHeadersAreRecorded) {
  write_file(dir / "src" / "f.cu", "#include <cuda_fp16.h>\n#include \"lib/a.cuh\"\n__global__ void k(__half* y) {}\n");
  Template::from_file(dir / "src" / "f.cu");
  ASSERT_GT(index->size(), 0u) << "cuda_fp16.h and what it includes";
  EXPECT_FALSE(index->find(fs::weakly_canonical(dir / "src" / "lib" / "a.cuh").string(),
                           identity_of(dir / "src" / "lib" / "a.cuh")));
  EXPECT_FALSE(index->find(fs::weakly_canonical(dir / "src" / "lib" / "b.cuh").string(),
                           identity_of(dir / "src" / "lib" / "b.cuh")));
}

TEST(HeaderIndex, ClearingTheCacheRemovesIt) {
  TempDir dir;
  SKIP_UNLESS_LOCAL(dir);
  HeaderIndex index = index_at(dir / "cache");
  remember_a(index, dir);
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
  fs::create_directories(dir / "cache");
  ::chmod((dir / "cache").c_str(), 0777);
  HeaderIndex index = index_at(dir / "cache");
  remember_a(index, dir);
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
