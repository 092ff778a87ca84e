// `kjit warm`, `kjit export` and `kjit verify --dir --lock` (in-process kjit::cli::run, no GPU), and a
// strict-mode engine over an exported read-only layer.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <grp.h>
#include <pwd.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <sstream>

#include "cli.hpp"
#include "kjit/cache/manifest.hpp"
#include "kjit/cache/sha256.hpp"
#include "kjit/engine.hpp"
#include "kjit/error.hpp"
#include "kjit/spec_record.hpp"
#include "child_process.hpp"
#include "cli_run.hpp"
#include "engine_support.hpp"
#include "test_support.hpp"

using namespace kjit::testing;
namespace {

namespace fs = std::filesystem;
using kjit::TemplateArg;
using kjit::cache::ManifestRecord;

using Result = CliRun;

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

ManifestRecord add_constant_record(const std::string& dtype, int vec) {
  return kjit::to_record(kjit::Specialization(
      kjit::Template::builtin("add_constant"), "add_constant",
      {{"T", TemplateArg::type(*kjit::dtype_from_name(dtype))}, {"VEC", TemplateArg::integer(vec)}}));
}

class WarmTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // A file template with a header, recorded from files that are gone before warm runs.
    TempDir src("kjit-warm-src");
    write_file(src / "twice.cu",
               "#include \"twice_detail.cuh\"\ntemplate <typename T>\n"
               "__global__ void twice(T* x) { x[threadIdx.x] *= FACTOR; }\n");
    write_file(src / "twice_detail.cuh", "#define FACTOR 2\n");
    const ManifestRecord user = kjit::to_record(kjit::Specialization(
        kjit::Template::from_file(src / "twice.cu"), "twice", {{"T", TemplateArg::type(kjit::DType::Float32)}}));
    write_manifest({add_constant_record("float32", 4), user});
  }
  void write_manifest(const std::vector<ManifestRecord>& records) {
    fs::remove(manifest());
    kjit::cache::append_to_manifest(manifest(), records, 10);
  }
  Result kjit(std::vector<std::string> args) {
    args.insert(args.begin(), {"--cache-dir", cache_dir().string()});
    return kjit::testing::cli(args);
  }
  fs::path manifest() const { return dir_ / "manifest.json"; }
  fs::path cache_dir() const { return dir_ / "cache"; }
  fs::path export_dir() const { return dir_ / "export"; }

  TempDir dir_{"kjit-warm"};
  ScopedEnv mode_{"KJIT_CACHE_MODE", std::nullopt};
  ScopedEnv layers_{"KJIT_CACHE_PATH", std::nullopt};
  ScopedEnv record_{"KJIT_RECORD", std::nullopt};
};

TEST_F(WarmTest, WarmsTwoArchsInParallelThenEverythingIsAlreadyCached) {
  Result r = kjit({"warm", manifest().string(), "--arch", "sm_80,sm_90", "-j", "2"});
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_TRUE(contains(r.out, "4 jobs (2 specializations x 2 targets): 4 compiled, 0 already cached, 0 failed"))
      << r.out;
  EXPECT_TRUE(contains(r.err, "[4/4] compiled ")) << r.err;  // stderr is not a terminal here: plain lines
  EXPECT_TRUE(contains(r.err, "twice(T=float32) from template twice.cu for sm_80")) << r.err;
  EXPECT_FALSE(contains(r.err, "\r"));
  EXPECT_EQ(entries_in(cache_dir()), 4u);

  r = kjit({"warm", manifest().string(), "--arch", "sm_90", "--arch", "sm_80", "-j", "2"});
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_TRUE(contains(r.out, "0 compiled, 4 already cached, 0 failed")) << r.out;
  EXPECT_EQ(entries_in(cache_dir()), 4u);
  // Warming records nothing, even with KJIT_RECORD pointing at the manifest it reads.
  ScopedEnv rec("KJIT_RECORD", manifest().string());
  const std::string before = read_file(manifest());
  EXPECT_EQ(kjit({"warm", manifest().string(), "--arch", "sm_90"}).code, 0);
  EXPECT_EQ(read_file(manifest()), before);
}

TEST_F(WarmTest, WarmedEntriesAreWhatTheEngineLooksUp) {
  ASSERT_EQ(kjit({"warm", manifest().string(), "--arch", "sm_90"}).code, 0);
  kjit::Engine engine(
      kjit::Settings::from_map({{"KJIT_CACHE_DIR", cache_dir().string()}, {"KJIT_CACHE_MODE", "strict"}}));
  const ManifestRecord r = add_constant_record("float32", 4);
  kjit::Origin p_origin = kjit::Origin::Memory;
  const auto p =
      engine.prepare(kjit::specialization_of(r, kjit::template_of(r)), kjit::Target::parse("sm_90"), &p_origin);
  EXPECT_EQ(p_origin, kjit::Origin::Disk);
}

// An arch-specific record (a KernelFamily compiled for sm_XYa: the sm_90 GEMM's wgmma) is warmed for
// sm_90a when sm_90 is asked, filling the entry a strict deployment looks up; for compute_90 it is skipped
// (no PTX form), not failed; the plain record beside it is warmed for what was asked, as before.
TEST_F(WarmTest, AnArchSpecificRecordIsWarmedForSmXYaAndSkippedForPtx) {
  ManifestRecord specific = add_constant_record("float32", 4);
  specific.arch_specific = true;
  write_manifest({specific, add_constant_record("float32", 2)});
  Result r = kjit({"warm", manifest().string(), "--arch", "sm_90,compute_90", "-j", "1"});
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_TRUE(contains(r.out,
                       "4 jobs (2 specializations x 2 targets): 3 compiled, 0 already cached, 0 failed, "
                       "1 skipped"))
      << r.out;
  EXPECT_TRUE(contains(r.out,
                       "skipped: add_constant(T=float32, VEC=4) from template add_constant for compute_90: "
                       "an arch-specific kernel"))
      << r.out;
  EXPECT_TRUE(contains(r.err, "add_constant(T=float32, VEC=4) from template add_constant for sm_90a")) << r.err;
  EXPECT_TRUE(fs::is_directory(cache_dir() / "v1" / "sm_90a")) << r.out;
  EXPECT_EQ(entries_in(cache_dir()), 3u);
  // sm_90a asked as well: the same entry, already cached.
  r = kjit({"warm", manifest().string(), "--arch", "sm_90a", "-j", "1"});
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_TRUE(contains(r.out, "1 compiled, 1 already cached, 0 failed\n")) << r.out;  // the plain one for sm_90a
  // Strict: the arch-specific family's lookup (sm_90a) finds it.
  kjit::Engine engine(
      kjit::Settings::from_map({{"KJIT_CACHE_DIR", cache_dir().string()}, {"KJIT_CACHE_MODE", "strict"}}));
  kjit::Origin p_origin = kjit::Origin::Memory;
  const auto p = engine.prepare(kjit::specialization_of(specific, kjit::template_of(specific)),
                                kjit::Target::parse("sm_90a"), &p_origin);
  EXPECT_EQ(p_origin, kjit::Origin::Disk);
}

TEST_F(WarmTest, AStaleBuiltinIsReportedAndTheCurrentOneCompiled) {
  ManifestRecord r = add_constant_record("float32", 2);
  r.template_digest = std::string(64, 'a');
  write_manifest({r});
  Result res = kjit({"warm", manifest().string(), "--arch", "sm_90"});
  ASSERT_EQ(res.code, 0) << res.out << res.err;
  EXPECT_TRUE(contains(res.out, "1 compiled")) << res.out;
  EXPECT_TRUE(contains(res.out, "template add_constant: stale: the built-in template changed since recording"))
      << res.out;
}

TEST_F(WarmTest, FailuresAreListedWithTheirReasonAndExitOne) {
  ManifestRecord bad = add_constant_record("float32", 4);
  bad.args[1].integer = 3;  // not a power of two: the template's static_assert
  ManifestRecord unknown = add_constant_record("float32", 4);
  unknown.kernel = "no_such_kernel";
  write_manifest({add_constant_record("float32", 1), bad, unknown});
  Result r = kjit({"warm", manifest().string(), "--arch", "sm_90", "-j", "2"});
  EXPECT_EQ(r.code, 1) << r.out << r.err;
  EXPECT_TRUE(contains(r.out, "1 compiled, 0 already cached, 2 failed")) << r.out;
  EXPECT_TRUE(contains(r.out, "failed: add_constant(T=float32, VEC=3) from template add_constant for sm_90: "))
      << r.out;
  EXPECT_TRUE(contains(r.out, "VEC must be a power of two")) << r.out;
  EXPECT_TRUE(contains(r.out, "cannot rebuild the recorded specialization")) << r.out;
  EXPECT_TRUE(contains(r.out, "no __global__ kernel named 'no_such_kernel'")) << r.out;
}

TEST_F(WarmTest, BadManifestAndModesAreClearErrors) {
  write_file(manifest(), "{\"kjit_manifest\": 7, \"records\": []}");
  Result r = kjit({"warm", manifest().string(), "--arch", "sm_90"});
  EXPECT_EQ(r.code, 1);
  EXPECT_TRUE(
      contains(r.err, "manifest " + manifest().string() + " is not valid: the file: version 7 is not supported"))
      << r.err;
  r = kjit({"warm", (dir_ / "none.json").string(), "--arch", "sm_90"});
  EXPECT_EQ(r.code, 1);
  EXPECT_TRUE(contains(r.err, "cannot read manifest")) << r.err;
  r = kjit({"warm", manifest().string()});
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_TRUE(contains(r.err, "--arch")) << r.err;
  ScopedEnv strict("KJIT_CACHE_MODE", "strict");
  r = kjit({"warm", manifest().string(), "--arch", "sm_90"});
  EXPECT_EQ(r.code, 1);
  EXPECT_TRUE(contains(r.err, "warm changes nothing in cache mode strict")) << r.err;
}

TEST_F(WarmTest, ExportThenVerifyAndTamperingIsFound) {
  ScopedEnv strict("KJIT_CACHE_MODE", "strict");  // export writes whatever the mode
  Result r = kjit({"export", manifest().string(), "--out", export_dir().string(), "--arch", "sm_80,sm_90", "-j", "2"});
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_TRUE(contains(r.out, "exported 4 entries to " + export_dir().string())) << r.out;
  EXPECT_EQ(entries_in(export_dir()), 4u);
  EXPECT_EQ(entries_in(cache_dir()), 0u);
  const fs::path lock = export_dir() / "kjit.lock";
  const auto j = nlohmann::json::parse(read_file(lock));
  EXPECT_EQ(j["kjit_lock"], 1);
  ASSERT_EQ(j["entries"].size(), 4u);
  EXPECT_EQ(j["entries"][0]["path"].get<std::string>().rfind("v1/sm_", 0), 0u);

  r = kjit({"verify", "--dir", export_dir().string(), "--lock", lock.string()});
  EXPECT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_TRUE(contains(r.out, "4 entries of " + export_dir().string() + " match")) << r.out;
  EXPECT_EQ(kjit({"verify", "--dir", export_dir().string()}).code, 0);
  EXPECT_EQ(kjit({"verify", "--lock", lock.string()}).code, 0);

  // A flipped byte in an entry.
  const fs::path entry = export_dir() / j["entries"][1]["path"].get<std::string>();
  std::string bytes = read_file(entry);
  bytes[bytes.size() - 10] ^= 0x01;
  write_file(entry, bytes);
  r = kjit({"verify", "--dir", export_dir().string(), "--lock", lock.string()});
  EXPECT_EQ(r.code, 1);
  EXPECT_TRUE(contains(r.out, "modified: " + j["entries"][1]["path"].get<std::string>())) << r.out;
  EXPECT_TRUE(contains(r.out, "1 problem in")) << r.out;

  // The lock edited to match the damaged bytes: the entry itself does not decode.
  auto edited = j;
  edited["entries"][1]["sha256"] = kjit::cache::to_hex(kjit::cache::Sha256::of(bytes));
  write_file(lock, edited.dump());
  r = kjit({"verify", "--dir", export_dir().string(), "--lock", lock.string()});
  EXPECT_EQ(r.code, 1);
  EXPECT_TRUE(contains(r.out, "invalid: " + j["entries"][1]["path"].get<std::string>() + ": ")) << r.out;

  // An entry removed from the lock, and an unreadable lock.
  auto shorter = j;
  shorter["entries"].erase(1);
  write_file(lock, shorter.dump());
  r = kjit({"verify", "--dir", export_dir().string()});
  EXPECT_EQ(r.code, 1);
  EXPECT_TRUE(contains(r.out, "unlisted: " + j["entries"][1]["path"].get<std::string>())) << r.out;
  write_file(lock, "{}");
  r = kjit({"verify", "--dir", export_dir().string()});
  EXPECT_EQ(r.code, 1);
  EXPECT_TRUE(contains(r.err, "lock file " + lock.string() + " is not valid")) << r.err;
}

TEST_F(WarmTest, StrictModeFindsExportedEntriesInAReadOnlyLayer) {
  ASSERT_EQ(kjit({"export", manifest().string(), "--out", export_dir().string(), "--arch", "sm_90"}).code, 0);
  kjit::Engine engine(kjit::Settings::from_map({{"KJIT_CACHE_DIR", (dir_ / "writable").string()},
                                                {"KJIT_CACHE_PATH", export_dir().string()},
                                                {"KJIT_CACHE_MODE", "strict"}}));
  const ManifestRecord warmed = add_constant_record("float32", 4);
  const kjit::Target sm90 = kjit::Target::parse("sm_90");
  EXPECT_EQ(prepared_origin(engine, kjit::specialization_of(warmed, kjit::template_of(warmed)), sm90),
            kjit::Origin::Disk);
  const ManifestRecord cold = add_constant_record("float16", 4);
  try {
    engine.prepare(kjit::specialization_of(cold, kjit::template_of(cold)), sm90);
    FAIL();
  } catch (const kjit::CacheMissError& e) {
    EXPECT_TRUE(contains(e.what(), "add_constant(T=float16, VEC=4)")) << e.what();
    EXPECT_TRUE(contains(e.what(), "kjit warm MANIFEST --arch sm_90")) << e.what();
  }
  EXPECT_EQ(engine.stats().compiles, 0u);
  EXPECT_EQ(engine.stats().disk_hits, 1u);
}

// ---- a job whose entry was not stored (issue 14 item 2) ------------------------------------------

// A template whose entries are far larger than add_constant's (an initialized 256 KiB device array lies
// in the cubin), so that a file size limit between the two lets the small entries be stored and stops
// the large ones: the disk "fills" partway through a warm.
ManifestRecord big_record() {
  const std::string src =
      "__device__ char pad[262144] = {1};\n"
      "template <typename T>\n__global__ void big(T* x) { x[threadIdx.x] += pad[threadIdx.x * 64]; }\n";
  return kjit::to_record(kjit::Specialization(kjit::Template::from_string(src, "big.cu"), "big",
                                              {{"T", TemplateArg::type(kjit::DType::Float32)}}));
}

// RLIMIT_FSIZE (SIGXFSZ ignored) in a child, as ProcessFaults.DiskFullDuringARealCompileAndStore: the
// add_constant entries are stored, the big ones fail in the middle of write() and the cache goes
// memory-only. Those jobs warmed nothing: they are failures (exit status 1, the reason named), and an
// export writes no lock, so that no `verify --dir` can pass it.
TEST_F(WarmTest, AJobWhoseEntryWasNotStoredIsAFailure) {
  write_manifest({add_constant_record("float32", 4), big_record()});
  KJIT_RUN_IN_CHILD([&](kjit::testing::ChildChecks& c) {
    ::signal(SIGXFSZ, SIG_IGN);
    struct rlimit lim{128 * 1024, 128 * 1024};  // an add_constant entry is a few KiB, a big one > 256 KiB
    if (::setrlimit(RLIMIT_FSIZE, &lim) != 0) c.skip("setrlimit(RLIMIT_FSIZE) failed");
    // One thread: the jobs run in manifest order, the small ones before the disk "fills".
    Result r = kjit({"warm", manifest().string(), "--arch", "sm_80,sm_90", "-j", "1"});
    c.check(r.code == 1, "warm exits 1, got " + std::to_string(r.code) + ":\n" + r.out + r.err);
    c.check(contains(r.out, "4 jobs (2 specializations x 2 targets): 2 compiled, 0 already cached, 2 failed"),
            "two jobs failed: " + r.out);
    c.check(contains(r.out,
                     "failed: big(T=float32) from template big.cu for sm_80: compiled, but the entry was "
                     "not stored in the cache"),
            "the failure says what: " + r.out);
    c.check(contains(r.out, "memory only") && contains(r.out, "File too large"), "and why: " + r.out);
    c.check(entries_in(cache_dir()) == 2, "the two small entries are stored");

    r = kjit({"export", manifest().string(), "--out", export_dir().string(), "--arch", "sm_80,sm_90", "-j", "1"});
    c.check(r.code == 1, "export exits 1, got " + std::to_string(r.code) + ":\n" + r.out + r.err);
    c.check(contains(r.out, "2 compiled, 0 already cached, 2 failed"), r.out);
    c.check(contains(r.err, "export incomplete: 2 jobs failed, so no kjit.lock was written"), r.err);
    c.check(!fs::exists(export_dir() / "kjit.lock"), "no lock");
    r = kjit({"verify", "--dir", export_dir().string()});
    c.check(r.code == 1 && contains(r.err, "cannot read the lock file"), "verify fails: " + r.out + r.err);
  });
}

// `verify --dir` fails when the lock lists an entry the export does not hold.
TEST_F(WarmTest, VerifyFailsWhenALockedEntryIsMissing) {
  ASSERT_EQ(kjit({"export", manifest().string(), "--out", export_dir().string(), "--arch", "sm_90"}).code, 0);
  const auto j = nlohmann::json::parse(read_file(export_dir() / "kjit.lock"));
  ASSERT_EQ(j["entries"].size(), 2u);
  const std::string gone = j["entries"][0]["path"];
  fs::remove(export_dir() / gone);
  Result r = kjit({"verify", "--dir", export_dir().string()});
  EXPECT_EQ(r.code, 1) << r.out << r.err;
  EXPECT_TRUE(contains(r.out, "missing: " + gone + ": ")) << r.out;
  EXPECT_TRUE(contains(r.out, "1 problem in " + export_dir().string())) << r.out;
}

// ---- an export starts empty and locks what it wrote (issue 14 item 6) ----------------------------

TEST_F(WarmTest, ExportRefusesADirectoryThatAlreadyHoldsFiles) {
  // Someone else's valid entry (another specialization, filed under its key) left in the folder.
  write_manifest({add_constant_record("float16", 2)});
  ASSERT_EQ(kjit({"warm", manifest().string(), "--arch", "sm_90"}).code, 0);
  fs::create_directories(export_dir());
  fs::copy(cache_dir() / "v1", export_dir() / "v1", fs::copy_options::recursive);
  write_file(export_dir() / "notes.txt", "not mine\n");
  SetUp();  // the fixture's manifest again
  Result r = kjit({"export", manifest().string(), "--out", export_dir().string(), "--arch", "sm_90"});
  EXPECT_EQ(r.code, 1) << r.out << r.err;
  EXPECT_TRUE(contains(r.err, "--out " + export_dir().string() + " is not empty (it holds ")) << r.err;
  EXPECT_TRUE(contains(r.err, "'v1'") && contains(r.err, "'notes.txt'")) << r.err;
  EXPECT_TRUE(contains(r.err, "Give a new or empty directory")) << r.err;
  EXPECT_FALSE(fs::exists(export_dir() / "kjit.lock"));
  EXPECT_EQ(entries_in(export_dir()), 1u) << "nothing was added";

  // An existing empty directory is fine; the lock lists exactly what the export wrote.
  fs::remove_all(export_dir());
  fs::create_directory(export_dir());
  r = kjit({"export", manifest().string(), "--out", export_dir().string(), "--arch", "sm_90"});
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_EQ(nlohmann::json::parse(read_file(export_dir() / "kjit.lock"))["entries"].size(), 2u);

  // Not a directory, and an empty path.
  write_file(dir_ / "a-file", "x");
  r = kjit({"export", manifest().string(), "--out", (dir_ / "a-file").string(), "--arch", "sm_90"});
  EXPECT_EQ(r.code, 1);
  EXPECT_TRUE(contains(r.err, "exists and is not a directory")) << r.err;
  r = kjit({"export", manifest().string(), "--out", "", "--arch", "sm_90"});
  EXPECT_EQ(r.code, 1);
  EXPECT_TRUE(contains(r.err, "--out: an empty path is not allowed")) << r.err;
}

// ---- verify --dir never follows a symbolic link out of DIR (issue 14 item 7) ---------------------

TEST_F(WarmTest, VerifyReportsSymbolicLinksWithoutFollowingThem) {
  ASSERT_EQ(kjit({"export", manifest().string(), "--out", export_dir().string(), "--arch", "sm_90"}).code, 0);
  const auto j = nlohmann::json::parse(read_file(export_dir() / "kjit.lock"));
  const std::string rel = j["entries"][0]["path"];
  const fs::path entry = export_dir() / rel;
  const fs::path outside = dir_ / "outside.kjit";
  fs::copy_file(entry, outside);
  const std::string secret = "the contents of a file outside the export\n";
  write_file(dir_ / "secret", secret);
  const std::string secret_sha = kjit::cache::to_hex(kjit::cache::Sha256::of(secret));

  // An entry replaced by a link to a copy of itself outside DIR: following it would pass.
  fs::remove(entry);
  fs::create_symlink(outside, entry);
  Result r = kjit({"verify", "--dir", export_dir().string()});
  EXPECT_EQ(r.code, 1) << r.out << r.err;
  EXPECT_TRUE(contains(r.out, "symbolic link: " + rel + ": a symbolic link, not followed")) << r.out;
  // A link to another file: what it reaches is never read, so its hash is never printed.
  fs::remove(entry);
  fs::create_symlink(dir_ / "secret", entry);
  r = kjit({"verify", "--dir", export_dir().string()});
  EXPECT_EQ(r.code, 1) << r.out << r.err;
  EXPECT_FALSE(contains(r.out + r.err, secret_sha)) << r.out;
  EXPECT_TRUE(contains(r.out, "symbolic link: " + rel)) << r.out;
  fs::remove(entry);
  fs::copy_file(outside, entry);
  ASSERT_EQ(kjit({"verify", "--dir", export_dir().string()}).code, 0);

  // A directory on the way replaced by a link to a copy outside.
  const fs::path target_dir = export_dir() / "v1" / "sm_90";
  fs::copy(target_dir, dir_ / "sm_90-copy", fs::copy_options::recursive);
  fs::remove_all(target_dir);
  fs::create_directory_symlink(dir_ / "sm_90-copy", target_dir);
  r = kjit({"verify", "--dir", export_dir().string()});
  EXPECT_EQ(r.code, 1) << r.out << r.err;
  EXPECT_TRUE(contains(r.out, "symbolic link: v1/sm_90: ")) << r.out;
  EXPECT_TRUE(contains(r.out, "not verified: " + rel + ": its path goes through the symbolic link v1/sm_90")) << r.out;
  fs::remove(target_dir);
  fs::copy(dir_ / "sm_90-copy", target_dir, fs::copy_options::recursive);
  ASSERT_EQ(kjit({"verify", "--dir", export_dir().string()}).code, 0);

  // A link the lock does not list, anywhere in DIR.
  fs::create_symlink(dir_ / "secret", export_dir() / "README");
  r = kjit({"verify", "--dir", export_dir().string()});
  EXPECT_EQ(r.code, 1) << r.out << r.err;
  EXPECT_TRUE(contains(r.out, "symbolic link: README: a symbolic link, not followed")) << r.out;
  fs::remove(export_dir() / "README");

  // DIR/kjit.lock itself a link out of DIR: not even read.
  fs::rename(export_dir() / "kjit.lock", dir_ / "kjit.lock");
  fs::create_symlink(dir_ / "kjit.lock", export_dir() / "kjit.lock");
  r = kjit({"verify", "--dir", export_dir().string()});
  EXPECT_EQ(r.code, 1) << r.out << r.err;
  EXPECT_TRUE(contains(r.err, (export_dir() / "kjit.lock").string() + " is a symbolic link")) << r.err;
  EXPECT_FALSE(contains(r.out, "match")) << r.out;
}

// ---- an export is readable by the runtime user (issue 14 item 15) --------------------------------

mode_t mode_of(const fs::path& p) {
  struct stat st{};
  return ::lstat(p.c_str(), &st) == 0 ? (st.st_mode & 07777) : 07777;
}

TEST_F(WarmTest, AnExportIsReadableByEveryUserWhileTheCacheStaysPrivate) {
  ASSERT_EQ(kjit({"warm", manifest().string(), "--arch", "sm_90"}).code, 0);
  ASSERT_EQ(kjit({"export", manifest().string(), "--out", (export_dir() / "deep").string(), "--arch", "sm_90"}).code,
            0);
  const fs::path out = export_dir() / "deep";
  EXPECT_EQ(mode_of(out), 0755u);
  std::size_t files = 0;
  for (const auto& e : fs::recursive_directory_iterator(out)) {
    if (e.is_directory())
      EXPECT_EQ(mode_of(e.path()), 0755u) << e.path();
    else
      EXPECT_EQ(mode_of(e.path()), 0644u) << e.path();
    files += e.is_regular_file();
  }
  EXPECT_EQ(files, 3u) << "two entries and the lock";
  EXPECT_EQ(mode_of(out / "kjit.lock"), 0644u);
  // The user's own cache stays owner-only.
  EXPECT_EQ(mode_of(cache_dir()), 0700u);
  for (const auto& e : fs::recursive_directory_iterator(cache_dir()))
    EXPECT_EQ(mode_of(e.path()), e.is_directory() ? 0700u : 0600u) << e.path();

  // Read as another user: an engine of user nobody in strict mode finds the export's entries (baked
  // by root, run by someone else, the README's case) and `verify --dir` passes.
  if (::geteuid() != 0) GTEST_SKIP() << "the modes are checked; reading as another user needs root (setuid)";
  const struct passwd* pw = ::getpwnam("nobody");
  if (!pw) GTEST_SKIP() << "the modes are checked; there is no user 'nobody' to read as";
  const uid_t uid = pw->pw_uid;
  const gid_t gid = pw->pw_gid;
  ASSERT_EQ(::chmod(dir_.path().c_str(), 0755), 0);  // the test's own folder (mkdtemp made it 0700)
  KJIT_RUN_IN_CHILD([&](kjit::testing::ChildChecks& c) {
    if (::setgroups(0, nullptr) != 0 || ::setgid(gid) != 0 || ::setuid(uid) != 0)
      c.skip("the modes are checked; cannot switch to user nobody here (setuid failed)");
    Result r = kjit({"verify", "--dir", out.string()});
    c.check(r.code == 0, "verify --dir as nobody: " + r.out + r.err);
    kjit::Engine engine(kjit::Settings::from_map({{"KJIT_CACHE_DIR", (dir_ / "nobody-cache").string()},
                                                  {"KJIT_CACHE_PATH", out.string()},
                                                  {"KJIT_CACHE_MODE", "strict"}}));
    const ManifestRecord rec = add_constant_record("float32", 4);
    try {
      kjit::Origin p_origin = kjit::Origin::Memory;
      const auto p =
          engine.prepare(kjit::specialization_of(rec, kjit::template_of(rec)), kjit::Target::parse("sm_90"), &p_origin);
      c.check(p_origin == kjit::Origin::Disk, "a disk hit as nobody");
    } catch (const std::exception& e) {
      c.fail(std::string("nobody cannot use the export: ") + e.what());
    }
  });
}

// ---- what a manifest names reaches the terminal escaped (issue 14 item 9) -------------------------

TEST_F(WarmTest, NamesAndLogsFromAManifestAreEscaped) {
  // A template name that clears the screen and sets the window title, and a compile log that would.
  const std::string name = "evil\x1b[2J\x1b]0;owned\x07\r.cu";
  const auto tmpl = kjit::Template::from_string(
      "template <int N>\n__global__ void k(float* x) {\n"
      "  static_assert(N != 2, \"\x1b[2J\x1b]0;log title\x07\");\n  x[0] = N;\n}\n",
      name);
  auto record = [&](int n) {
    return kjit::to_record(kjit::Specialization(tmpl, "k", {{"N", TemplateArg::integer(n)}}));
  };
  write_manifest({record(1), record(2)});
  Result r = kjit({"warm", manifest().string(), "--arch", "sm_90", "-j", "1"});
  EXPECT_EQ(r.code, 1) << r.out << r.err;
  const std::string all = r.out + r.err;
  for (char c : {'\x1b', '\x07', '\r'})
    EXPECT_EQ(all.find(c), std::string::npos) << "raw control " << int(c) << ": " << all;
  EXPECT_TRUE(contains(r.err, "k(N=1) from template evil\\x1b[2J\\x1b]0;owned\\x07\\x0d.cu for sm_90")) << r.err;
  EXPECT_TRUE(contains(r.out, "\\x1b]0;log title\\x07")) << r.out;  // the log's #error line, escaped
  EXPECT_TRUE(contains(r.out, "\n")) << "logs keep their lines";

  r = kjit({"ls"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out.find('\x1b'), std::string::npos) << r.out;
  EXPECT_TRUE(contains(r.out, "evil\\x1b[2J\\x1b]0;owned\\x07\\x0d.cu")) << r.out;
}

}  // namespace
